"""Secrets never leave: the key and the environment's secrets are redacted in every form from every record (transcript,
export, bench files); the key never needs the command line; records are private (0600 files, 0700 directories)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, cli_env, run_cli
from tests.docker_support import answer, exec_call
from tests.secrets_support import KEY, REDACTED, TOKEN, assert_no_secret, echo_answer, echo_command, encodings, leaked


def mode(path: Path) -> str:
    return oct(path.stat().st_mode & 0o777)


def test_every_form_of_a_secret_is_redacted():
    from oc_repl.redact import Redactor

    redact = Redactor([KEY])
    for form in encodings(KEY):
        shown = redact.text(f"before {form} after")
        assert REDACTED in shown and not leaked(shown, KEY), form


def test_a_line_of_json_stays_json_when_a_secret_with_quotes_is_redacted():
    from oc_repl.redact import Redactor

    secret = 'pa"ss\\word-1234'
    line = json.dumps({"said": f"the key is {secret}!", secret: 1}, ensure_ascii=False)
    redacted = Redactor([secret]).json_line(line)
    assert json.loads(redacted) == {"said": f"the key is {REDACTED}!", REDACTED: 1}


def test_short_values_are_not_secrets():
    from oc_repl.redact import Redactor

    assert Redactor(["EMPTY", "1234567"]).text("EMPTY 1234567") == "EMPTY 1234567"


def test_the_environments_secret_looking_values_are_found():
    env = {
        "MY_SERVICE_TOKEN": "value-of-a-token",
        "db_password_main": "value-of-a-password",
        "Some_Api_Key": "value-of-a-key",
        "CLIENT_SECRET": "value-of-a-secret",
        "TOKEN_LIMIT": "not-a-secret-value",
        "SHORT_KEY": "short",
    }
    code = "from oc_repl.redact import redactor; print(redactor().text(' '.join(__import__('sys').argv[1:])))"
    done = subprocess.run(
        [sys.executable, "-c", code, *env.values()],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=ROOT,
        timeout=60,
    )
    assert done.stdout.split() == [REDACTED] * 4 + ["not-a-secret-value", "short"]


def test_a_childs_stderr_is_kept_redacted(tmp_path):
    from oc_repl.redact import RedactedStream, Redactor

    log = tmp_path / "stderr.txt"
    script = f"import sys; sys.stderr.write({KEY[:10]!r}); sys.stderr.flush(); sys.stderr.write({KEY[10:]!r} + ' end')"
    child = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE)
    assert child.stderr is not None
    stream = RedactedStream(child.stderr, log.open("wb"), Redactor([KEY]))
    while stream.pump():
        pass
    child.wait(30)
    stream.close()
    assert log.read_text() == f"{REDACTED} end"


def run_echoing_model(serve, tmp_path: Path, *more: str) -> tuple[subprocess.CompletedProcess, Path]:
    server = serve({"require_key": KEY, "replies": [exec_call(echo_command()), answer(echo_answer())]})
    transcript = tmp_path / "records" / "deep" / "t.jsonl"
    args = ["run", "--api-base", server.url, "--sandbox", f"local:{tmp_path / 'w'}", "--yes"]
    env = {**cli_env(tmp_path), "MY_SERVICE_TOKEN": TOKEN}
    proc = run_cli([*args, "--transcript", str(transcript), *more, "echo them"], tmp_path, process=True, env=env)
    return proc, transcript


def test_a_model_echoing_the_key_leaves_it_in_no_record(serve, tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    proc, transcript = run_echoing_model(serve, tmp_path, "--api-key-file", str(key_file))
    assert proc.returncode == 0, proc.stderr  # the server took the key from the file
    assert "echo" in transcript.read_text() and REDACTED in transcript.read_text()
    assert_no_secret(transcript)
    assert mode(transcript) == "0o600" and {mode(transcript.parent), mode(transcript.parent.parent)} == {"0o700"}
    exported = tmp_path / "exports" / "new" / "episodes.jsonl"
    env = {**cli_env(tmp_path), "OPENAI_API_KEY": KEY, "MY_SERVICE_TOKEN": TOKEN}
    done = run_cli(["export", str(transcript), "-o", str(exported)], tmp_path, process=True, env=env)
    assert done.returncode == 0, done.stderr
    assert_no_secret(exported)
    assert mode(exported) == "0o600" and mode(exported.parent) == "0o700"


def test_an_old_transcript_holding_the_key_is_exported_redacted(tmp_path):
    transcript = tmp_path / "old.jsonl"
    started = {"type": "thread.started", "thread_id": "t", "model": "m", "protocol": "p", "sandbox": "s"}
    request = {"type": "request.sent", "turn": 1, "request": {"messages": [{"role": "user", "content": KEY}]}}
    reply = {"type": "response.received", "turn": 1, "raw": {"message": {"role": "assistant", "content": TOKEN}}}
    lines = [{**started, "api_base": "a"}, request, reply]
    transcript.write_text("".join(json.dumps(line) + "\n" for line in lines))
    config = tmp_path / "config" / "oc-repl"
    config.mkdir(parents=True)
    (config / "config.toml").write_text(f'api_key = "{KEY}"\n')
    env = {**cli_env(tmp_path), "MY_SERVICE_TOKEN": TOKEN}
    done = run_cli(["export", str(transcript)], tmp_path, process=True, env=env)
    assert done.returncode == 0 and REDACTED in done.stdout, done.stderr
    assert not leaked(done.stdout, KEY) and not leaked(done.stdout, TOKEN)


def test_the_key_flag_warns_that_others_can_read_it(serve, tmp_path):
    server = serve({"require_key": KEY, "replies": [answer("hi")]})
    args = ["run", "--api-base", server.url, "--sandbox", f"local:{tmp_path / 'w'}", "--yes", "--api-key", KEY, "hi"]
    proc = run_cli(args, tmp_path)
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stderr.split())
    assert "--api-key puts the key on the command line" in said and "ps" in said and "--api-key-file" in said


@pytest.mark.parametrize("form", ["--api-key KEY", "--api-key=KEY"])
def test_a_key_typed_on_the_command_line_is_gone_from_it_once_the_run_started(serve, tmp_path, form):
    """Anyone on the machine reads a process's command line (ps, /proc/PID/cmdline): once its options are parsed,
    the client's holds the key no more, the flag's name and the rest as they were; the key itself still reaches the
    server (the model list is asked for with it before the first chat request), and the warning still says it."""
    import time

    server = serve({"require_key": KEY, "replies": [{**answer("hi"), "delay": 120}]})
    flag = ["--api-key", KEY] if form == "--api-key KEY" else [f"--api-key={KEY}"]
    args = ["run", "--api-base", server.url, "--sandbox", f"local:{tmp_path / 'w'}", "--yes", *flag, "say hi"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "oc_repl", *args],
        env=cli_env(tmp_path),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not server.chat_requests() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        seen = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert server.chat_requests(), "the run never asked the model"
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=60)
    assert KEY.encode() not in seen, seen
    assert b"\0".join([b"--yes", *(part.replace(KEY, "x" * len(KEY)).encode() for part in flag), b"say hi\0"]) in seen
    assert "--api-key puts the key on the command line" in " ".join(err.split())


@pytest.mark.parametrize(
    ("env_key", "flag_file", "config", "served"),
    [
        ("env-key-0123456789", True, "", "file"),  # a flag beats the environment
        ("env-key-0123456789", False, "api_key_file", "env"),  # the environment beats the config file
        ("", False, "api_key_file", "file"),
    ],
)
def test_the_key_comes_from_the_environment_a_key_file_or_the_config(
    serve, tmp_path, env_key, flag_file, config, served
):
    keys = {"file": "file-key-0123456789", "env": env_key, "config": "config-key-0123456789"}
    key_file = tmp_path / "key"
    key_file.write_text(keys["file"] + "\n")
    settings = tmp_path / "config" / "oc-repl"
    settings.mkdir(parents=True)
    line = {"api_key_file": f'api_key_file = "{key_file}"', "api_key": f'api_key = "{keys["config"]}"'}.get(config, "")
    (settings / "config.toml").write_text(line + "\n")
    server = serve({"require_key": keys[served], "replies": [answer("hi")]})
    args = ["run", "--api-base", server.url, "--sandbox", f"local:{tmp_path / 'w'}", "--yes"]
    args += ["--api-key-file", str(key_file)] * flag_file
    env = {**cli_env(tmp_path), **({"OPENAI_API_KEY": env_key} if env_key else {})}
    proc = run_cli([*args, "hi"], tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "--api-key puts the key" not in proc.stderr


def test_a_key_given_twice_at_one_level_is_a_usage_error(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("file-key-0123456789\n")
    both = ["run", "--api-key", "k" * 10, "--api-key-file", str(key_file), "hi"]
    proc = run_cli(both, tmp_path)
    assert proc.returncode == 2 and "given twice" in proc.stderr
    key_file.write_text("")
    proc = run_cli(["run", "--api-key-file", str(key_file), "hi"], tmp_path)
    assert proc.returncode == 2 and "must hold the key alone" in proc.stderr


@pytest.mark.docker
@pytest.mark.timeout(600)
def test_a_bench_keeps_no_secret_and_its_files_private(serve, tmp_path, docker_client):
    server = serve({"require_key": KEY, "cycle": True, "replies": [exec_call(echo_command()), answer(echo_answer())]})
    out = tmp_path / "bench" / "run"
    args = ["bench", str(ROOT / "examples" / "tasks" / "write-greeting"), "--api-base", server.url, "--out", str(out)]
    env = {**cli_env(tmp_path), "OPENAI_API_KEY": KEY, "MY_SERVICE_TOKEN": TOKEN}
    proc = run_cli([*args, "--retries", "0", "--max-turns", "2"], tmp_path, process=True, env=env, timeout=540)
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"bench.json", "result.json", "transcript.jsonl", "stderr.txt"}
    for path in files:
        assert_no_secret(path)
        assert mode(path) == "0o600", path
    assert REDACTED in (next(out.rglob("transcript.jsonl"))).read_text()
    assert {mode(p) for p in [out, out.parent, *(p for p in out.rglob("*") if p.is_dir())]} == {"0o700"}
