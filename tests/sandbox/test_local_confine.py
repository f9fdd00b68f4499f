"""The confined local sandbox on real bubblewrap and real processes: what it may write, its network, its processes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from oc_repl.errors import SandboxError
from oc_repl.sandbox import confine
from oc_repl.sandbox.local import LocalSandbox
from tests.conftest import ROOT
from tests.sandbox.test_local_sandbox import CONFINE_OK, CONFINE_REASON, gone, processes_with, run, unique_sleep

pytestmark = pytest.mark.skipif(not CONFINE_OK, reason=f"no confinement here: {CONFINE_REASON}")


BWRAP_SAYS = "bwrap: setting up uid map: Permission denied"


def failing_bwrap(tmp_path: Path) -> Path:
    """A folder whose bwrap fails as bubblewrap does where it cannot run (no user namespaces, say)."""
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho '{BWRAP_SAYS}' >&2\nexit 1\n")
    fake.chmod(0o755)
    return fake.parent


def test_check_says_why_confinement_is_impossible(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    assert confine.check() == (True, "bubblewrap confines local: sandboxes")
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap
    ok, reason = confine.check()
    assert not ok and "bwrap" in reason
    with pytest.raises(SandboxError) as raised:
        LocalSandbox(tmp_path / "box")
    assert "bwrap" in raised.value.message and "--no-confine" in raised.value.hint
    # a bubblewrap that cannot run here (no user namespaces, say) is named with its own words
    monkeypatch.setenv("PATH", f"{failing_bwrap(tmp_path)}:{os.defpath}:/usr/sbin:/sbin")
    assert confine.check() == (False, f"bubblewrap cannot confine the sandbox: {BWRAP_SAYS}")


def test_a_run_where_bubblewrap_fails_asks_for_no_confine_before_any_request(serve, tmp_path: Path):
    """bubblewrap starts while the client loads; its failure still stops the run before the model is asked, and
    --yes (consent to confined commands) is not taken as consent to unconfined ones."""
    from tests.cli.test_cli import HELLO, base_args
    from tests.conftest import cli_env, run_cli

    env = {**cli_env(tmp_path), "PATH": f"{failing_bwrap(tmp_path)}:{os.environ['PATH']}"}
    server = serve({"replies": HELLO})
    proc = run_cli(base_args(server, tmp_path / "w", "make hello"), tmp_path, env=env)
    assert proc.returncode == 2, proc.stderr
    assert "cannot be confined here" in proc.stderr and "uid map: Permission denied" in proc.stderr
    assert "--no-confine" in proc.stderr and "Traceback" not in proc.stderr
    assert server.chat_requests() == []
    assert not (tmp_path / "w" / "hello.txt").exists()


# --- what a command may write -------------------------------------------------------------------------------------


def ended(pid: int, within: float = 60.0) -> None:
    """Wait until `pid` has exited (reaped, or a zombie)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                return
        except (FileNotFoundError, ProcessLookupError):
            return
        time.sleep(0.01)
    pytest.fail(f"process {pid} did not end within {within:.0f} s")


@pytest.mark.parametrize("late", ["pinned", "joined"])
def test_a_first_process_that_ends_as_it_starts_is_started_again_and_leaves_no_cgroup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, late: str
):
    """A start that meets a race with the host's mounts is tried again, also when its first process ended before
    it could be pinned or join its cgroup (before, the bare ProcessLookupError of that step ended the sandbox)."""
    from oc_repl.sandbox import limits, local_view

    real_mounts, real_pin, real_create = local_view.mount_args, confine.Confinement._pin, limits.SandboxCgroup.create
    starts: list[int] = []
    made: list[limits.SandboxCgroup] = []

    def mount_args(*args: object) -> tuple[list[str], str]:
        mounts, python = real_mounts(*args)  # type: ignore[arg-type]
        starts.append(1)
        if len(starts) == 1:  # the first start fails in its first process, after bubblewrap reported it
            mounts = [*mounts, "--bind", f"/nonexistent-{uuid.uuid4().hex}", "/oc-repl-gone"]
        return mounts, python

    def pin(self: confine.Confinement, info: dict) -> None:
        if late == "pinned" and len(starts) == 1:
            ended(info["child-pid"])
        real_pin(self, info)

    def create(name: str, given: limits.Limits) -> limits.SandboxCgroup | None:
        cgroup = real_create(name, given)
        if cgroup is not None:
            made.append(cgroup)
            if late == "joined" and len(starts) == 1:
                monkeypatch.setattr(cgroup, "add", lambda pid: (ended(pid), type(cgroup).add(cgroup, pid)))
        return cgroup

    monkeypatch.setattr(local_view, "mount_args", mount_args)
    monkeypatch.setattr(confine.Confinement, "_pin", pin)
    monkeypatch.setattr(limits.SandboxCgroup, "create", staticmethod(create))
    monkeypatch.setattr(confine, "_RETRY_ON", (*confine._RETRY_ON, "Can't find source path"))
    box = LocalSandbox(tmp_path / "box")
    try:
        assert run(box, "echo started") == (0, "started\n")
        assert len(starts) == 2
    finally:
        box.close()
    if late == "joined" and not made:
        pytest.skip("no cgroup can be made here")
    assert [folder for cgroup in made for folder in cgroup.dirs if folder.exists()] == []


def test_a_command_cannot_write_outside_the_directory(box: LocalSandbox, tmp_path: Path):
    name = f"oc-repl-probe-{uuid.uuid4().hex[:8]}"
    # $HOME too, unless it is under /tmp (then it is in the private /tmp: see below)
    places = [Path("/"), Path("/usr")] + ([Path.home()] if Path("/tmp") not in Path.home().parents else [])
    probes = "; ".join(f"touch {place / name}" for place in places)
    code, out = run(box, f"{probes}; echo x > {tmp_path}/{name}; echo in > here.txt")
    assert code == 0  # the last write succeeded
    assert out.count("Read-only file system") == len(places), out
    assert not any((place / name).exists() for place in places)
    # the test's own directory is under the host's /tmp: inside, that is the private /tmp, never the host's
    assert not (tmp_path / name).exists()
    assert (box.root / "here.txt").read_text() == "in\n"


def test_commands_have_no_privileges_to_undo_it(box: LocalSandbox):
    status = "grep -E '^(CapEff|CapPrm|NoNewPrivs)' /proc/self/status"
    code, out = run(box, f"{status}; mount -o remount,rw / && echo remounted")
    assert "CapEff:\t0000000000000000" in out and "CapPrm:\t0000000000000000" in out
    assert "remounted" not in out and code != 0


def test_file_operations_reach_what_a_command_reaches_and_write_only_where_it_may(box: LocalSandbox, tmp_path: Path):
    escapes = ["/usr/oc-repl-x", "/tmp/../usr/oc-repl-x", "../" * 40 + "usr/oc-repl-x", "link/oc-repl-x", "dir/up/x"]
    run(box, "ln -s /usr link && mkdir dir && ln -s / dir/up")
    for path in escapes:
        with pytest.raises(SandboxError, match="Read-only file system"):
            box.write_file(path, b"x")
    assert not Path("/usr/oc-repl-x").exists()
    # a file a command may read, the file operations may read too: they are made inside, by the same rules
    assert box.read_file("/etc/hostname") == Path("/etc/hostname").read_bytes()
    # a path that climbs out of the directory but stays in what the sandbox sees as /tmp lands in the private /tmp
    box.write_file("../up.txt", b"private")
    assert not (tmp_path / "up.txt").exists()
    assert run(box, f"cat {tmp_path}/up.txt") == (0, "private")


def test_put_cannot_be_led_out_by_a_link_in_the_destination(box: LocalSandbox, tmp_path: Path):
    src = tmp_path / "src"
    (src / "sub" / "deeper").mkdir(parents=True)
    (src / "sub" / "deeper" / "f.txt").write_text("f")
    (src / "run.sh").write_text("echo run")
    (src / "run.sh").chmod(0o755)
    outside = Path(f"/usr/oc-repl-{uuid.uuid4().hex[:8]}")
    run(box, "mkdir dest && ln -s /usr dest/sub")
    with pytest.raises(SandboxError, match="Read-only file system"):
        box.put(src, "dest")
    with pytest.raises(SandboxError, match="Read-only file system"):
        box.put(src / "sub" / "deeper" / "f.txt", str(outside))
    assert not outside.exists() and not Path("/usr/deeper").exists()
    box.put(src, "fresh")
    assert (box.root / "fresh/sub/deeper/f.txt").read_text() == "f"
    assert run(box, "fresh/run.sh") == (0, "run\n")  # modes are kept


def test_special_files_are_refused_without_waiting_on_them(box: LocalSandbox):
    run(box, "mkfifo fifo")
    for path in ("fifo", "/dev/zero", "/dev/null"):
        started = time.monotonic()
        with pytest.raises(SandboxError, match="not a regular file"):
            box.write_file(path, b"x")
        with pytest.raises(SandboxError, match="not a regular file"):
            box.read_file(path)
        assert time.monotonic() - started < 10
    assert run(box, "echo still answering") == (0, "still answering\n")


def test_tmp_is_private_shared_by_commands_and_files(box: LocalSandbox):
    name = f"oc-repl-private-{uuid.uuid4().hex[:8]}"
    box.write_file(f"/tmp/{name}", b"from the host side")
    assert run(box, f"cat /tmp/{name}; echo more >> /tmp/{name}; echo $TMPDIR") == (0, "from the host side/tmp\n")
    assert box.read_file(f"/tmp/{name}") == b"from the host sidemore\n"
    assert not Path("/tmp", name).exists()
    assert run(box, "pwd")[1] == f"{box.root}\n" and run(box, "mkdir -p /tmp/w")[0] == 0
    assert box.exec("pwd", timeout=30, cwd="/tmp/w").output == b"/tmp/w\n"
    with pytest.raises(SandboxError):
        box.exec("pwd", timeout=30, cwd="/tmp/missing")
    assert run(box, "df --output=fstype /tmp | tail -1")[1].strip() == "tmpfs"


def test_a_confinement_ended_from_outside_is_a_lost_sandbox(box: LocalSandbox):
    from oc_repl.errors import SandboxLost

    assert box._confinement is not None
    box.ready()  # up and entered, as after the first command
    box._confinement._bwrap.kill()
    box._confinement._bwrap.wait()
    deadline = time.monotonic() + 20
    while box._confinement.alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    with pytest.raises(SandboxLost):
        box.exec("true", timeout=30)


# --- the network --------------------------------------------------------------------------------------------------


@pytest.fixture
def listener() -> Iterator[int]:
    """A port on the host's loopback that accepts connections and greets each one."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    stop = False

    def serve() -> None:
        while not stop:
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.sendall(b"hello")
            conn.close()

    import threading

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop = True
    thread.join(2)
    server.close()


CONNECT = "python3 -c 'import socket; print(socket.create_connection((\"127.0.0.1\", {port}), timeout=10).recv(5))'"


def test_the_network_is_off_even_the_hosts_loopback(box: LocalSandbox, listener: int):
    code, out = run(box, CONNECT.format(port=listener))
    assert code != 0 and "ConnectionRefusedError" in out
    # The sandbox's own network namespace, asked by netlink: /sys is the host's, bound read-only, so its
    # class/net lists the host's interfaces (docker's veths come and go there) whatever namespace reads it.
    names = "python3 -c 'import socket; print(sorted(n for _, n in socket.if_nameindex()))'"
    assert run(box, names) == (0, "['lo']\n")


def test_network_on_reaches_the_host(tmp_path: Path, listener: int):
    box = LocalSandbox(tmp_path / "box", network=True)
    try:
        assert run(box, CONNECT.format(port=listener)) == (0, "b'hello'\n")
    finally:
        box.close()


def test_commands_of_a_sandbox_share_one_loopback(box: LocalSandbox):
    serve = (
        'python3 -c \'import socket; s = socket.socket(); s.bind(("127.0.0.1", 8765)); s.listen(1); '
        'c, _ = s.accept(); c.sendall(b"hello")\' &'
    )
    assert run(box, serve)[0] == 0
    deadline = time.monotonic() + 20
    while (result := run(box, CONNECT.format(port=8765)))[0] != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert result == (0, "b'hello'\n")


# --- processes ----------------------------------------------------------------------------------------------------


def test_the_sandbox_sees_and_signals_only_its_own_processes(box: LocalSandbox):
    nap = unique_sleep()
    host = subprocess.Popen(["sleep", nap], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        counts = "pgrep -c sleep; ls /proc | grep -c '^[0-9]'"
        code, out = run(box, f"kill -9 -1 2>/dev/null; {counts}; pkill -x sleep; echo done")
        assert out.endswith("done\n") and int(out.split()[0]) == 0 and int(out.split()[1]) < 10
        assert host.poll() is None  # neither `kill -9 -1` nor pkill reached the host
        assert run(box, "echo still here") == (0, "still here\n")  # nor the sandbox itself
    finally:
        host.kill()
        host.wait()


def test_a_pty_inside_is_a_terminal_of_the_sandbox(box: LocalSandbox):
    proc = box.spawn('t=$(tty) && [ -c "$t" ] && echo "named $t"; read line; echo "got $line"', tty=True)
    proc.write(b"hello\n")
    assert proc.wait(20)
    out = proc.read_available()
    assert b"named /dev/pts/" in out and b"got hello" in out


CLIENT = """
import sys, time
from pathlib import Path
from oc_repl.sandbox.local import LocalSandbox
box = LocalSandbox(Path(sys.argv[1]), confine=sys.argv[2] == "confined")
box.exec("setsid sleep " + sys.argv[3] + " >/dev/null 2>&1 &", timeout=30)
print("started", flush=True)
sys.stdin.read()  # the test decides how this client ends
"""


def start_client(tmp_path: Path, mode: str, nap: str) -> subprocess.Popen:
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, str(tmp_path / "box"), mode, nap],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert client.stdout is not None
    assert client.stdout.readline().strip() == "started"
    deadline = time.monotonic() + 20
    while not processes_with(nap) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert processes_with(nap)
    return client


@pytest.mark.parametrize("how", ["closed", "killed"])
def test_bubblewrap_ends_even_when_nobody_waited_for_it_to_start(tmp_path: Path, how: str):
    """bubblewrap starts in the background: a sandbox closed at once, or a client killed before it looked, still
    leaves nothing behind (bubblewrap must not be cut off while it reports, its half-made sandbox waiting on it)."""
    root = tmp_path / "box"
    root.mkdir()
    if how == "closed":
        confine.Confinement(root, network=False).close()
    else:
        code = (
            "import os, signal, sys\nfrom pathlib import Path\nfrom oc_repl.sandbox.confine import Confinement\n"
            "Confinement(Path(sys.argv[1]), network=False)\nos.kill(os.getpid(), signal.SIGKILL)"
        )
        subprocess.run([sys.executable, "-c", code, str(root)], cwd=ROOT, timeout=60)
    assert gone(str(root), within=20), processes_with(str(root))


def wait_until_a_zombie(pid: int) -> None:
    """Until the process has died, not yet reaped: what it left is still its own to every sweep."""
    deadline = time.monotonic() + 20
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)


@pytest.mark.parametrize("mode", ["confined", "unconfined"])
def test_what_a_sigkilled_client_left_is_ended(tmp_path: Path, mode: str):
    nap = unique_sleep()
    client = start_client(tmp_path, mode, nap)
    client.kill()
    if mode == "confined":  # the namespace ends with its client, at once
        client.wait()
        assert gone(nap, within=20)
    else:
        # it outlives its client. Looked at while the dead client is a zombie: to every sandbox made meanwhile (other
        # tests' too) the client is alive until it is reaped, so none of them ends it before the look
        wait_until_a_zombie(client.pid)
        assert processes_with(nap)
        client.wait()
    LocalSandbox(tmp_path / "later", confine=False).close()
    assert gone(nap, within=20)


@pytest.mark.parametrize("mode", ["confined", "unconfined"])
def test_a_client_that_exits_without_closing_ends_its_sandbox(tmp_path: Path, mode: str):
    nap = unique_sleep()
    client = start_client(tmp_path, mode, nap)
    client.communicate("", timeout=60)
    assert client.returncode == 0
    assert gone(nap, within=20)


def test_tmux_meets_its_server_under_the_private_tmp(box: LocalSandbox):
    from oc_repl.protocols.terminus.tmux import TmuxTerminal

    if run(box, "command -v tmux")[0] != 0:
        pytest.skip("tmux is not installed")
    terminal = TmuxTerminal(box, cwd=box.workdir, socket=f"oc-repl-test-{os.getpid()}")
    try:
        terminal.send_keys("echo from-tmux > made.txt\n")
        made = box.root / "made.txt"
        deadline = time.monotonic() + 20
        while not (made.exists() and made.read_text() == "from-tmux\n") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert made.read_text() == "from-tmux\n"
        assert run(box, "ls /tmp/tmux-$(id -u)")[1].strip() == f"oc-repl-test-{os.getpid()}"
    finally:
        terminal.close()


def test_a_killed_clients_verifier_directory_goes_when_the_next_sandbox_is_made(tmp_path: Path):
    """A client SIGKILLed with its confined sandbox open leaves the verifier's directory on the host; the next
    sandbox made on this machine removes it, as it ends what such a client left running. A live client's stays."""
    code = (
        "import os, signal, sys\nfrom pathlib import Path\nfrom oc_repl.sandbox.confine import Confinement\n"
        "box = Confinement(Path(sys.argv[1]), network=False)\nprint(box.verifier_dir, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)"
    )
    (tmp_path / "box").mkdir()
    client = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path / "box")], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert client.stdout is not None
    left = Path(client.stdout.readline().strip())
    wait_until_a_zombie(client.pid)  # dead, but alive to other tests' sandboxes, which would sweep the directory
    assert left.is_dir()
    assert client.wait() == -signal.SIGKILL
    (tmp_path / "mine").mkdir()
    mine = confine.Confinement(tmp_path / "mine", network=False)
    try:
        LocalSandbox(tmp_path / "later", confine=False).close()
        assert not left.exists() and mine.verifier_dir.is_dir()
    finally:
        mine.close()
