#!/bin/bash
chmod +x /app/report.sh
