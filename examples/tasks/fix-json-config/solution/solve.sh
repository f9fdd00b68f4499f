#!/bin/bash
sed -i 's/"debug": false,/"debug": false/' /app/config.json
