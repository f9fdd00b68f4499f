#!/bin/bash
# Offline: pytest is already in the image. The verdict is the reward file, not the exit status.
mkdir -p /logs/verifier
if python3 -m pytest /tests/test_outputs.py -rA; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
