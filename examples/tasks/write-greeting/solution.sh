#!/bin/bash
echo "Hello from oc-repl" > /app/greeting.txt
