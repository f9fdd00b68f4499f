"""Runs that cannot go on say so the way the README's exit codes do: settings the server refuses before any reply are
a configuration error (exit 2); a run refused before it starts leaves no transcript; a `--json` run whose reader went
away stops as Ctrl-C stops it, its transcript complete."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.conftest import ROOT, cli_env, run_cli
from tests.docker_support import answer, exec_call


class _NotHere(BaseHTTPRequestHandler):
    """A web server with nothing at the path oc-repl was pointed at."""

    def _missing(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b'{"detail": "Not Found"}'
        self.send_response(404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _missing

    def log_message(self, *args: object) -> None:
        pass


def test_a_wrong_path_on_the_server_is_a_configuration_error(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotHere)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for model in ([], ["--model", "qwen3-8b-oc"]):
            url = f"http://127.0.0.1:{server.server_address[1]}/wrong/v1"
            args = ["run", "--api-base", url, "--sandbox", f"local:{tmp_path / 'w'}", "--yes", *model]
            proc = run_cli([*args, "--retries", "0", "hello"], tmp_path)
            assert proc.returncode == 2, proc.stderr
            assert "HTTP 404" in proc.stderr and "Check --api-base" in proc.stderr
    finally:
        server.shutdown()
        server.server_close()


def test_a_refusal_after_the_model_answered_stays_a_server_error(serve, tmp_path):
    server = serve({"replies": [exec_call("echo hi"), {"http_error": 404, "text": ""}]})
    args = ["run", "--api-base", server.url, "--sandbox", f"local:{tmp_path / 'w'}", "--yes", "--retries", "0"]
    assert run_cli([*args, "hello"], tmp_path).returncode == 5


def test_a_run_refused_before_it_starts_leaves_no_transcript(serve, tmp_path):
    server = serve({"replies": [answer("never")]})
    transcript = tmp_path / "refused.jsonl"
    args = ["run", "--api-base", server.url, "--sandbox", "local:/", "--yes", "--transcript", str(transcript), "x"]
    proc = run_cli(args, tmp_path)
    assert proc.returncode == 2 and not transcript.exists()
    assert "transcript:" not in proc.stderr
    transcript.write_text('{"kept": "an earlier run"}\n')
    assert run_cli(args, tmp_path).returncode == 2
    assert transcript.read_text() == '{"kept": "an earlier run"}\n'
    transcript.unlink()
    proc = run_cli([*args[:-1], "--json", "x"], tmp_path)
    (completed,) = [e for e in map(json.loads, proc.stdout.splitlines()) if e["type"] == "thread.completed"]
    assert proc.returncode == 2 and not transcript.exists() and completed["transcript"] == ""  # it names none


@pytest.mark.parametrize("sigint", [signal.SIG_DFL, signal.SIG_IGN], ids=["foreground", "job-in-the-background"])
def test_a_closed_stdout_stops_a_json_run_as_ctrl_c_does(serve, tmp_path, sigint):
    # a job started with `&` inherits SIGINT ignored: the key is not its own, but a reader that is gone still stops it
    server = serve({"replies": [exec_call("sleep 0.2; echo busy")], "cycle": True})
    transcript = tmp_path / "t.jsonl"
    argv = [sys.executable, "-m", "oc_repl", "run", "--json", "--api-base", server.url, "--max-turns", "200"]
    argv += ["--loop-limit", "0", "--sandbox", f"local:{tmp_path / 'w'}", "--yes", "--transcript", str(transcript)]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.DEVNULL}
    proc = subprocess.Popen(
        [*argv, "keep busy"],
        **pipes,
        env=cli_env(tmp_path),
        cwd=ROOT,
        preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
    )
    assert proc.stdout is not None
    json.loads(proc.stdout.readline())  # `| head -n 1`
    proc.stdout.close()
    started = time.monotonic()
    assert proc.wait(timeout=60) == 130
    assert time.monotonic() - started < 30
    events = [json.loads(line) for line in transcript.read_text().splitlines()]
    assert events[-1]["type"] == "thread.completed" and events[-1]["status"] == "interrupted"
    assert events[-1]["turns"] < 200


def test_a_reader_of_stderr_that_is_gone_does_not_change_the_exit_status(serve, tmp_path):
    # `oc-repl run ... 2>&1 | head -3`: the run ends on its own (exit 0) after its reader is gone
    server = serve({"replies": [exec_call("echo one"), {**answer("done"), "delay": 1.0}]})
    argv = [sys.executable, "-m", "oc_repl", "run", "--api-base", server.url, "--sandbox", f"local:{tmp_path / 'w'}"]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
    proc = subprocess.Popen([*argv, "--yes", "say done"], **pipes, env=cli_env(tmp_path), cwd=ROOT)
    assert proc.stdout is not None
    for _ in range(3):
        proc.stdout.readline()
    proc.stdout.close()
    assert proc.wait(timeout=120) == 0


def test_thread_started_comes_first_even_when_the_server_was_busy_before_it(serve, tmp_path):
    # the model's name is asked for before the thread starts: the busy answer and its retry are said after the start
    server = serve({"models_busy": 1, "replies": [answer("hi")]})
    argv = ["run", "--json", "--api-base", server.url, "--sandbox", f"local:{tmp_path / 'w'}", "--yes", "say hi"]
    proc = run_cli(argv, tmp_path)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert events[0]["type"] == "thread.started"
    (retried,) = [e for e in events if e["type"] == "error"]
    assert retried["retrying"] and "HTTP 503" in retried["message"]


def test_the_time_before_the_first_turn_is_put_down_to_what_took_it(serve, tmp_path):
    # a busy server answers the model's name only after retries: that wait is the server's, said before any turn
    server = serve({"models_busy": 3, "replies": [answer("hi")]})
    argv = ["run", "--api-base", server.url, "--sandbox", f"local:{tmp_path / 'w'}", "--yes", "--verify", "true"]
    transcript = tmp_path / "t.jsonl"
    proc = run_cli([*argv, "--transcript", str(transcript), "say hi"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in transcript.read_text().splitlines()]
    started, errors = events[0], [e for e in events if e["type"] == "error"]
    waits = [float(re.search(r"Retrying in ([\d.]+)s", e["message"]).group(1)) for e in errors]  # type: ignore[union-attr]
    assert len(waits) == 3 and set(started["startup"]) == {"sandbox", "baseline", "server"}
    assert started["startup"]["server"] >= sum(waits) > started["startup"]["sandbox"]
    assert f"the server took {started['startup']['server']:.0f} s to answer before the first turn" in proc.stderr
