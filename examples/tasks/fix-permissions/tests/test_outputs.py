import os
import subprocess


def test_script_is_executable():
    assert os.access("/app/report.sh", os.X_OK)


def test_script_prints_the_report():
    out = subprocess.run(["./report.sh"], cwd="/app", capture_output=True, text=True, check=True).stdout
    assert out == "report: 3 items\n"
