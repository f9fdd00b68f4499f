#!/bin/bash
# Writes reward.json; the checks are plain Python so the task needs nothing beyond python3.
mkdir -p /logs/verifier
python3 - <<'PY'
import json
from pathlib import Path

try:
    config = json.loads(Path("/app/config.json").read_text())
    ok = config == {"name": "inventory", "port": 8080, "debug": False}
except (OSError, ValueError) as exc:
    print(f"config.json does not parse: {exc}")
    ok = False
print("config ok" if ok else "config wrong")
Path("/logs/verifier/reward.json").write_text(json.dumps({"reward": 1.0 if ok else 0.0}))
PY
