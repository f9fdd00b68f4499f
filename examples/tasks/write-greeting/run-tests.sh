#!/bin/bash
# Offline runner: pytest is already in the image, so nothing is fetched.
set -u
python3 -m pytest "$TEST_DIR/test_outputs.py" -rA
