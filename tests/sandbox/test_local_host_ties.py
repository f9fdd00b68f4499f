"""What ties a confined local sandbox to the host it runs on, cut, on real bubblewrap and real processes: the PATH it
inherits, the session keyring, version-control directories the user's own tools would obey, the client's config and
key files, and the key on the client's command line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oc_repl.sandbox.local import LocalSandbox
from tests.sandbox.test_local_sandbox import CONFINE_OK, CONFINE_REASON, run

pytestmark = pytest.mark.skipif(not CONFINE_OK, reason=f"no confinement here: {CONFINE_REASON}")

PLANT = "mkdir -p {bin} && printf '#!/bin/sh\\necho PLANTED; exit 3\\n' > {bin}/python3 && chmod +x {bin}/python3"


# --- PATH -----------------------------------------------------------------------------------------------------------


def test_a_program_planted_where_path_looks_is_not_what_a_later_command_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The client's PATH names places the sandbox may write (its home, its /tmp, its own directory, the directory a
    command stands in, by name or through /proc): none of them is searched inside, so a later command's `python3` is
    the host's."""
    home = Path(os.environ["HOME"])
    root = tmp_path / "box"
    places = [home / ".local" / "bin", Path("/tmp/oc-repl-bin"), root / "bin", "", ".", "/proc/self/cwd/bin"]
    monkeypatch.setenv("PATH", ":".join([*map(str, places), os.environ["PATH"]]))
    box = LocalSandbox(root)
    try:
        for bin_dir in (home / ".local" / "bin", "/tmp/oc-repl-bin", root / "bin", root):
            assert run(box, PLANT.format(bin=bin_dir))[0] == 0
        code, out = run(box, 'command -v python3; python3 -c \'print("REAL")\'; echo "$PATH"')
        assert code == 0 and "PLANTED" not in out and "REAL" in out, out
        where, _real, path = out.splitlines()
        assert Path(where).resolve() != root / "python3" and not Path(where).is_relative_to(root)
        searched = path.split(":")
        private = [home, Path("/tmp"), Path("/root"), root]
        assert all(entry.startswith("/") for entry in searched), searched
        assert not any(Path(entry).is_relative_to(place) for entry in searched for place in private), searched
        assert "/usr/bin" in searched  # the host's own places stay
    finally:
        box.close()


def test_a_verifier_does_not_run_a_program_the_model_planted_on_path(serve, tmp_path: Path):
    """End to end: the model plants a failing `python3` in ~/.local/bin, which the client's PATH lists first; the
    verifier's `python3` is still the host's, and the run is verified."""
    from tests.cli.test_cli import answer, base_args, exec_call
    from tests.conftest import cli_env, run_cli

    env = cli_env(tmp_path)
    env["PATH"] = f"{env['HOME']}/.local/bin:{env['PATH']}"
    server = serve({"replies": [exec_call(PLANT.format(bin="~/.local/bin")), answer("Planted.")]})
    verify = 'python3 -c "import sys; sys.exit(0)"'
    proc = run_cli([*base_args(server, tmp_path / "w", "--verify", verify), "plant"], tmp_path, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "PASS" in proc.stderr and len(server.chat_requests()) == 2


# --- the session keyring --------------------------------------------------------------------------------------------

# (add_key, keyctl) by machine: glibc wraps neither, and keyutils' `keyctl` need not be installed
KEY_CALLS = {"x86_64": (248, 250), "aarch64": (217, 219), "riscv64": (217, 219)}
# A login session as pam_keyinit makes one: a session keyring of its own holding a key, and oc-repl started in it;
# after the run, what became of the key and whether the model's key reached the keyring.
LOGIN = """import ctypes, json, subprocess, sys
add_key, keyctl, work, name = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4].encode()
libc = ctypes.CDLL(None, use_errno=True)
assert libc.syscall(keyctl, 1, None) > 0  # KEYCTL_JOIN_SESSION_KEYRING, a new one
key = libc.syscall(add_key, b"user", name, b"the-hosts-secret", 16, -3)
assert key > 0, ctypes.get_errno()
open(work + "/key-id", "w").write(str(key))
code = subprocess.call([sys.executable, "-m", "oc_repl", *sys.argv[5:]], stdin=subprocess.DEVNULL)
buf = ctypes.create_string_buffer(256)
size = libc.syscall(keyctl, 11, key, buf, 256)  # KEYCTL_READ
planted = libc.syscall(keyctl, 10, -3, b"user", name + b"-inside", 0)  # KEYCTL_SEARCH, what `keyctl search @s` does
print(json.dumps({"code": code, "payload": buf.value[:size].decode(), "planted": planted}))
"""
# What the model tries on the client's key, by name (what `keyctl print %user:NAME` does) and by its id (written in
# its directory: /proc/keys would show it too); then it adds a key of its own to its session keyring.
KEY_PROBE = """python3 -c 'import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
add_key, keyctl, key, name = int(sys.argv[1]), int(sys.argv[2]), int(open("key-id").read()), sys.argv[3].encode()
buf = ctypes.create_string_buffer(256)
for what, args in [("search", (10, -3, b"user", name, 0)), ("read", (11, key, buf, 256)), ("update", (2, key, b"x", 1)),
                   ("unlink", (9, key, -3))]:
    print(what, libc.syscall(keyctl, *args), ctypes.get_errno())
print("add", libc.syscall(add_key, b"user", name + b"-inside", b"planted", 7, -3) > 0)
print("payload", buf.value)' {add_key} {keyctl} {name}"""


def test_the_sandbox_has_a_session_keyring_of_its_own(serve, tmp_path: Path):
    """In a login session's keyring, a model that looks for the client's key, by name and by id, reads nothing and
    changes nothing; the key it adds lands in a keyring of its own, which ends with it, not in the client's."""
    import json
    import platform
    import subprocess
    import sys
    import uuid

    from tests.cli.test_cli import answer, base_args, exec_call
    from tests.conftest import ROOT, cli_env, read_jsonl

    calls = KEY_CALLS.get(platform.machine())
    if calls is None:
        pytest.skip(f"the key system calls' numbers on {platform.machine()} are not known to this test")
    name = f"oc-repl-test-{uuid.uuid4().hex[:8]}"
    probe = KEY_PROBE.format(add_key=calls[0], keyctl=calls[1], name=name)
    server = serve({"replies": [exec_call(probe), answer("Looked.")]})
    work, transcript = tmp_path / "w", tmp_path / "t.jsonl"
    work.mkdir()
    args = [*base_args(server, work, "--transcript", str(transcript)), "look"]
    login = [sys.executable, "-c", LOGIN, *map(str, calls), str(work), name, *args]
    done = subprocess.run(login, capture_output=True, text=True, env=cli_env(tmp_path), cwd=ROOT, timeout=120)
    if "AssertionError" in done.stderr and not (work / "key-id").exists():
        pytest.skip(f"no session keyring can be made here (a seccomp filter, say): {done.stderr.strip()[-200:]}")
    after = json.loads(done.stdout.splitlines()[-1])
    assert after["code"] == 0, done.stderr
    items = [e["item"] for e in read_jsonl(transcript) if e["type"] == "item.completed"]
    seen = next(i["aggregated_output"] for i in items if i["type"] == "command_execution")
    lines = dict(line.split(" ", 1) for line in seen.splitlines())
    for what in ("search", "read", "update", "unlink"):
        assert lines[what].split()[0] == "-1", (what, seen)
    assert lines["add"] == "True" and "the-hosts-secret" not in seen, seen
    assert after["payload"] == "the-hosts-secret" and after["planted"] < 0, after


def test_a_sandbox_that_cannot_have_a_keyring_of_its_own_does_not_start(tmp_path: Path, monkeypatch):
    from oc_repl.errors import SandboxError
    from oc_repl.sandbox import confine

    program = confine.init_program()
    blind = program.replace(b"KEYCTL.get(os.uname().machine)", b"KEYCTL.get('a-machine-of-no-known-numbers')")
    assert blind != program
    monkeypatch.setattr(confine, "init_program", lambda: blind)
    box = LocalSandbox(tmp_path / "box")
    try:
        with pytest.raises(SandboxError, match="no keyring of its own for the sandbox"):
            box.exec("echo started", timeout=30)
    finally:
        box.close()


# --- version control ------------------------------------------------------------------------------------------------

VCS = (".git", ".hg", ".svn")
# core.fsmonitor names a program git runs at the next `git status`: the model's, run as the user, unconfined.
FSMONITOR = "printf '#!/bin/sh\\ntouch {marker}\\n' > {hook} && chmod +x {hook} && git config core.fsmonitor {hook}"


@pytest.fixture
def git() -> str:
    import shutil

    found = shutil.which("git")
    if found is None:
        pytest.skip("git is not installed on this host (CI installs it: .ci/run)")
    return found


def git_status(git: str, where: Path) -> None:
    """The user's next `git status` there, on the host."""
    import subprocess

    env = {"PATH": os.environ["PATH"], "HOME": os.environ["HOME"], "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run([git, "status"], cwd=where, env=env, capture_output=True, timeout=60)


def test_no_repository_can_be_made_at_the_top_of_the_directory(tmp_path: Path, git: str):
    """Where the directory has no .git, .hg or .svn, none can be made there (git init, a plain mkdir, a file), so the
    user's next `git status` in it runs nothing of the model's; nothing of the placeholders stays afterwards."""
    root, marker = tmp_path / "box", tmp_path / "box" / "fsmonitor-ran"
    box = LocalSandbox(root)
    try:
        hook = FSMONITOR.format(marker=marker, hook=root / "hook.sh")
        code, out = run(box, f"git init -q . && {hook} && echo INITIALISED")
        assert code != 0 and "INITIALISED" not in out and "Read-only file system" in out, out
        for name in VCS:
            code, out = run(box, f"rmdir {name} || mv {name} moved || rm -rf {name}; mkdir -p {name}/x || touch {name}")
            assert code != 0 and not (root / name / "x").exists(), (name, out)
        assert run(box, "ls -A .git .hg .svn")[1].split() == [".git:", ".hg:", ".svn:"]  # empty placeholders
    finally:
        box.close()
    assert list(root.iterdir()) == []  # the placeholders made for the run are gone
    git_status(git, root)
    assert not marker.exists()


def test_repositories_made_below_the_top_are_named(tmp_path: Path, git: str):
    """A repository the model makes deeper down is reported: every .git, .hg or .svn, directory, file or link, that
    was not there when the sandbox opened; those that were are not."""
    root, marker = tmp_path / "box", tmp_path / "box" / "fsmonitor-ran"
    (root / "old" / ".git").mkdir(parents=True)
    (root / "kept" / ".hg").mkdir(parents=True)
    (root / "inner").mkdir()
    (root / "inner" / ".svn").write_text("a file")
    box = LocalSandbox(root)
    try:
        hook = FSMONITOR.format(marker=marker, hook=root / "hook.sh")
        assert run(box, f"mkdir sub && cd sub && git init -q && {hook}")[0] == 0
        assert run(box, "mkdir -p a/b c && ln -s /usr a/b/.hg && echo 'gitdir: /x' > c/.git && touch .svn.x")[0] == 0
        made = [str(root / "a/b/.hg"), str(root / "c/.git"), str(root / "sub/.git")]
        assert box.vcs_dirs_made() == made
    finally:
        box.close()
    assert box.vcs_dirs_made() == made
    git_status(git, root)
    assert not marker.exists()  # at the top: sub/.git is for the report to name


# --- the client's own files -----------------------------------------------------------------------------------------


def test_the_clients_config_and_key_files_are_hidden_wherever_they_are(serve, tmp_path: Path, host_place: Path):
    """The config file where $XDG_CONFIG_HOME puts it, one named with --config and the --api-key-file, all outside
    the places the sandbox hides anyway: a command reads nothing of them (the run itself still reads the key)."""
    from tests.cli.test_cli import answer, base_args, exec_call
    from tests.conftest import cli_env, run_cli

    (host_place / "cfg" / "oc-repl").mkdir(parents=True)
    default = host_place / "cfg" / "oc-repl" / "config.toml"
    default.write_text('api_key = "sk-in-the-default-config"\n')
    named = host_place / "named.toml"
    named.write_text('api_key = "sk-in-the-named-config"\nmax_turns = 5\n')
    key_file = host_place / "key"
    key_file.write_text("sk-in-the-key-file\n")
    look = f"cat {default} {named} {key_file} > seen.txt 2>&1; wc -c {default} {named} {key_file} >> seen.txt"
    server = serve({"require_key": "sk-in-the-key-file", "replies": [exec_call(look), answer("Looked.")]})
    env = {**cli_env(tmp_path), "XDG_CONFIG_HOME": str(host_place / "cfg")}
    work = tmp_path / "w"
    args = [*base_args(server, work, "--config", str(named), "--api-key-file", str(key_file)), "look"]
    proc = run_cli(args, tmp_path, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    seen = (work / "seen.txt").read_text()
    assert "sk-in" not in seen and all(str(path) in seen for path in (default, named, key_file)), seen
    assert key_file.read_text() == "sk-in-the-key-file\n" and "sk-in" in default.read_text() + named.read_text()


def test_a_key_file_in_the_sandbox_directory_is_hidden_and_stays(tmp_path: Path):
    """`local:.` in a project that keeps its key file: the file tools and the commands read none of it, and it can be
    neither removed, moved nor overwritten."""
    from oc_repl.errors import SandboxError

    root = tmp_path / "box"
    root.mkdir()
    (root / ".key").write_text("sk-kept-in-the-project\n")
    box = LocalSandbox(root, private_files=[root / ".key"])
    try:
        code, out = run(box, "cat .key; rm -f .key; mv .key moved; echo overwritten > .key; cat .key; ls -A")
        assert "sk-kept" not in out and ".key" in out.split(), out
        with pytest.raises(SandboxError):
            box.read_file(".key")
    finally:
        box.close()
    assert (root / ".key").read_text() == "sk-kept-in-the-project\n" and not (root / "moved").exists()
