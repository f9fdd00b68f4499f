"""The local sandbox on real processes: capture caps, terminal text, timeouts that kill whole trees, ttys, files."""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

import pytest

from oc_repl.errors import SandboxError, UsageError
from oc_repl.sandbox import confine, open_sandbox
from oc_repl.sandbox.capture import CappedBuffer, OutputReader, gap_marker
from oc_repl.sandbox.local import LocalSandbox

CONFINE_OK, CONFINE_REASON = confine.check()
needs_bwrap = pytest.mark.skipif(not CONFINE_OK, reason=f"no confinement here: {CONFINE_REASON}")
# Everything that holds whether or not a sandbox is confined is tested both ways.
MODES = [pytest.param(True, id="confined", marks=needs_bwrap), pytest.param(False, id="unconfined")]


@pytest.fixture(params=MODES)
def sandbox(tmp_path: Path, request: pytest.FixtureRequest):
    box = LocalSandbox(tmp_path / "box", confine=request.param)
    yield box
    box.close()


def run(box: LocalSandbox, command: str) -> tuple[int | None, str]:
    result = box.exec(command, timeout=60)
    return result.exit_code, result.output.decode("utf-8", "replace")


def processes_with(arg: str) -> list[int]:
    """Live (non-zombie) processes with `arg` as one of their arguments."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path("/proc", name, "cmdline").read_bytes().split(b"\0")
            state = Path("/proc", name, "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if arg.encode() in argv and state != "Z":
            found.append(int(name))
    return found


def unique_sleep() -> str:
    """A sleep duration no other run uses, to find exactly this test's processes."""
    return f"97.{random.randrange(10**6):06d}"


def gone(arg: str, within: float = 2.0) -> bool:
    deadline = time.monotonic() + within
    while processes_with(arg):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


# --- capped buffer ------------------------------------------------------------------------------------------------


def test_capped_buffer_keeps_head_and_tail_and_counts_drops():
    buf = CappedBuffer(10)
    for chunk in (b"abc", b"defgh", b"ijklmnop", b"qrstuvwxyz"):
        buf.write(chunk)
    assert buf.dropped == 16 and buf.written == 26
    assert buf.read() == b"abcde" + gap_marker(16) + b"vwxyz"
    assert buf.read() == b""


def test_capped_buffer_reads_are_incremental_and_each_capped():
    buf = CappedBuffer(10)
    buf.write(b"1234")
    assert buf.read() == b"1234"
    buf.write(b"x" * 1000 + b"END")  # one big write: its own middle goes
    assert buf.read() == b"xxxxx" + gap_marker(993) + b"xxEND"
    buf.write(b"small")
    assert buf.read() == b"small"
    assert buf.dropped == 993


def test_capped_buffer_memory_stays_bounded():
    buf = CappedBuffer(1024)
    for _ in range(2000):
        buf.write(os.urandom(4096))
        assert len(buf) <= 1024
    assert buf.dropped == 2000 * 4096 - 1024


def test_a_settled_reader_has_everything_written_so_far_even_when_it_was_starved():
    read_fd, write_fd = os.pipe()

    def slow_read() -> bytes:  # a reader thread that gets no CPU for a while after the bytes arrive
        time.sleep(0.3)
        return os.read(read_fd, 4096)

    buf = CappedBuffer(1 << 16)
    reader = OutputReader(slow_read, buf, fd=read_fd)
    try:
        os.write(write_fd, b"the last line\n")
        reader.settle(10)
        assert buf.read() == b"the last line\n"
        started = time.monotonic()
        reader.settle(10)  # nothing in flight: at once
        assert time.monotonic() - started < 0.2
    finally:
        os.close(write_fd)
        reader.join(5)
        os.close(read_fd)


def test_commands_running_at_once_are_drained_without_a_thread_each(sandbox: LocalSandbox):
    sandbox.exec("true", timeout=30)  # whatever a sandbox keeps running is there before the count
    threads = threading.active_count()
    procs = [sandbox.spawn(f"for i in 1 2 3; do echo p{n}-$i; sleep 0.05; done", tty=False) for n in range(40)]
    assert threading.active_count() <= threads + 1  # the one pump, where this is its first use
    for n, proc in enumerate(procs):
        assert proc.wait(60)
        assert proc.read_available() == f"p{n}-1\np{n}-2\np{n}-3\n".encode()


def test_the_output_of_a_command_is_its_own_when_descriptors_are_reused(sandbox: LocalSandbox):
    # each command's pipe is closed once it is read to its end, and the next command gets the same number: a
    # descriptor still watched for the one before would give one command's output to another, or lose it
    for n in range(200):
        assert sandbox.exec(f"echo out-{n}", timeout=30).output == f"out-{n}\n".encode()


# --- exec ---------------------------------------------------------------------------------------------------------


def test_exec_merges_output_reports_exit_code_and_runs_without_tty(sandbox: LocalSandbox):
    result = sandbox.exec("echo out; echo err >&2; pwd; echo $TERM; [ -t 1 ] || echo no-tty; exit 3", timeout=10)
    assert result.output == f"out\nerr\n{sandbox.root}\ndumb\nno-tty\n".encode()
    assert (result.exit_code, result.timed_out, result.dropped) == (3, False, 0)


def test_exec_stdin_is_at_end_of_file(sandbox: LocalSandbox):
    started = time.monotonic()
    assert sandbox.exec("cat; echo after", timeout=5).output == b"after\n"
    assert time.monotonic() - started < 2


def test_exec_timeout_kills_the_whole_process_group(sandbox: LocalSandbox):
    started = time.monotonic()
    nap = unique_sleep()
    result = sandbox.exec(f"echo begun; sleep {nap} & sleep {nap}", timeout=0.5)
    assert result.timed_out and result.exit_code is None
    assert result.output == b"begun\n"
    assert time.monotonic() - started < 3
    assert gone(nap)


def test_exec_returns_when_a_background_child_keeps_the_pipe(sandbox: LocalSandbox):
    started = time.monotonic()
    nap = unique_sleep()
    result = sandbox.exec(f"sleep {nap} & echo parent done", timeout=10)
    assert result.output == b"parent done\n" and result.exit_code == 0
    assert time.monotonic() - started < 2
    assert processes_with(nap)  # left running, as it would be in a container
    sandbox.close()
    assert gone(nap)


def test_huge_output_does_not_grow_client_memory(sandbox: LocalSandbox):
    def peak_kb() -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        raise AssertionError("no VmHWM")

    with open("/proc/self/clear_refs", "w") as f:  # resets the peak so only this test's growth counts
        f.write("5")
    before = peak_kb()
    result = sandbox.exec("head -c 200000000 /dev/zero", timeout=60)
    growth_mb = (peak_kb() - before) / 1024
    assert result.dropped == 200_000_000 - sandbox.output_limit
    assert len(result.output) < sandbox.output_limit + 100
    assert growth_mb < 64, f"client peak memory grew by {growth_mb:.0f} MB"


# --- spawn --------------------------------------------------------------------------------------------------------


def test_spawn_with_tty_is_a_terminal_with_input(sandbox: LocalSandbox):
    proc = sandbox.spawn('[ -t 0 ] && echo "tty $TERM $PYTHONUNBUFFERED"; read line; echo "got $line"', tty=True)
    proc.write(b"hello\n")
    assert proc.wait(5)
    out = proc.read_available()
    assert b"tty xterm 1" in out and b"got hello" in out
    assert proc.exit_code == 0 and not proc.alive()


def test_spawn_without_tty_has_no_input_and_dumb_terminal(sandbox: LocalSandbox):
    proc = sandbox.spawn("echo $TERM; sleep 0.2; echo end", tty=False, env={"EXTRA": "1"})
    with pytest.raises(SandboxError):
        proc.write(b"x\n")
    assert not proc.wait(0)
    assert proc.wait(5)
    assert proc.read_available() == b"dumb\nend\n"


def test_spawn_reads_are_incremental(sandbox: LocalSandbox):
    proc = sandbox.spawn("echo one; sleep 0.3; echo two", tty=False)
    deadline = time.monotonic() + 2
    first = b""
    while not first and time.monotonic() < deadline:
        proc.wait(0.02)
        first = proc.read_available()
    assert first == b"one\n"
    assert proc.wait(5)
    assert proc.read_available() == b"two\n"
    assert proc.read_available() == b""


def test_kill_and_close_stop_sessions_and_their_jobs(sandbox: LocalSandbox):
    job, main, other_nap = unique_sleep(), unique_sleep(), unique_sleep()
    proc = sandbox.spawn(f"sleep {job} & sleep {main}", tty=True)
    other = sandbox.spawn(f"sleep {other_nap}", tty=False)
    deadline = time.monotonic() + 2
    while len(processes_with(job) + processes_with(main)) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.kill()
    assert gone(job) and gone(main)
    assert other.alive()
    sandbox.close()
    assert gone(other_nap)


def test_a_daemon_that_left_its_session_does_not_outlive_close(sandbox: LocalSandbox):
    nap, double = unique_sleep(), unique_sleep()
    started = sandbox.exec(f"setsid sleep {nap} >/dev/null 2>&1 & (setsid sh -c 'sleep {double} &' &); echo ok", 10)
    assert started.output == b"ok\n"
    deadline = time.monotonic() + 10
    while not (processes_with(nap) and processes_with(double)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert processes_with(nap) and processes_with(double)
    sandbox.close()
    assert gone(nap, within=10) and gone(double, within=10)


def test_a_300_kb_command_runs_and_ordinary_ones_stay_bash_c(sandbox: LocalSandbox):
    result = sandbox.exec("echo " + "x" * 300_000 + " | wc -c; foo", timeout=30)
    assert result.output == b"300001\nbash: line 1: foo: command not found\n" and result.exit_code == 127
    assert sandbox.exec("foo", timeout=10).output == b"bash: line 1: foo: command not found\n"
    assert sandbox.exec("if then", timeout=10).output.startswith(b"bash: -c: line 1: syntax error")
    # the long command's plumbing is not left open to what it runs
    fds = "ls /proc/self/fd | sort -n | tr '\\n' ' '"
    assert sandbox.exec(f": {'#' * 100_000}\n{fds}", timeout=30).output == sandbox.exec(fds, timeout=10).output


# --- files and specs ----------------------------------------------------------------------------------------------


def test_files_relative_to_root_and_absolute(sandbox: LocalSandbox):
    sandbox.write_file("a/b/c.txt", b"rel")
    assert (sandbox.root / "a/b/c.txt").read_bytes() == b"rel"
    sandbox.write_file(str(sandbox.root / "abs/d.txt"), b"abs")
    assert sandbox.exec("cat abs/d.txt", timeout=10).output == b"abs"
    assert sandbox.read_file("a/b/c.txt") == b"rel"
    with pytest.raises(SandboxError):
        sandbox.read_file("missing.txt")


def test_unconfined_files_go_wherever_a_command_could_write(tmp_path: Path):
    box = LocalSandbox(tmp_path / "box", confine=False)
    try:
        box.write_file("../elsewhere/e.txt", b"up")
        box.write_file(str(tmp_path / "abs/d.txt"), b"abs")
        box.put(tmp_path / "abs", str(tmp_path / "copy"))
    finally:
        box.close()
    assert (tmp_path / "elsewhere/e.txt").read_bytes() == b"up"
    assert (tmp_path / "copy/d.txt").read_bytes() == b"abs"


def test_put_copies_directories_and_files(sandbox: LocalSandbox, tmp_path: Path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "t.py").write_text("x")
    (src / "run.sh").write_text("y")
    sandbox.put(src, "tests")
    assert (sandbox.root / "tests/sub/t.py").read_text() == "x"
    sandbox.put(src / "run.sh", "tests")
    assert (sandbox.root / "tests/run.sh").read_text() == "y"
    sandbox.put(src / "run.sh", "bin/go.sh")
    assert (sandbox.root / "bin/go.sh").read_text() == "y"


def test_open_sandbox_specs(tmp_path: Path):
    box = open_sandbox(f"local:{tmp_path / 'new'}", confine=False)
    try:
        assert isinstance(box, LocalSandbox) and (tmp_path / "new").is_dir()
        assert box.spec == f"local:{tmp_path / 'new'}" and box.workdir == str(tmp_path / "new")
    finally:
        box.close()
    for spec in ("ftp:x", "nothing", "local:", "docker:"):
        with pytest.raises(UsageError):
            open_sandbox(spec)


@pytest.mark.parametrize("confined", MODES)
def test_commands_do_not_see_the_clients_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, confined: bool):
    """Unconfined, the environment minus what looks secret; confined, an allow-list (a setting is not passed on)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    monkeypatch.setenv("HF_TOKEN", "hf-secret-value")
    monkeypatch.setenv("OC_REPL_VISIBLE_CHECK", "x")
    monkeypatch.setenv("PLAIN_SETTING", "kept")
    monkeypatch.setenv("LC_TIME", "C")
    box = LocalSandbox(tmp_path / "box", confine=confined)
    try:
        out = box.exec("env", timeout=10).output.decode()
    finally:
        box.close()
    assert "secret-value" not in out and "OC_REPL_VISIBLE_CHECK" not in out and "LC_TIME=C" in out
    assert ("PLAIN_SETTING=kept" in out) is not confined
