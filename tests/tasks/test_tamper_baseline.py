"""The tamper probe's baseline in one call: the discovery and a snapshot of every place a discovery can lead to, kept
to what the watch covers. What it holds must be exactly what a snapshot of the watched places holds, or an honest
run's untouched files would be found "created" (and a changed one missed): checked against the snapshot itself, in a
real container and in a confined local sandbox, with files planted in each kind of watched place.
"""

from __future__ import annotations

from typing import Any

import pytest

from oc_repl.tasks import tamper
from oc_repl.tasks import tamper_probe as probe
from oc_repl.tasks.tamper import TamperProbe
from tests.docker_support import IMAGE

# Files where each kind of watch looks: a conftest above the working directory, a shadowing module in it, a .pth and a
# sitecustomize in site directories, an executable on PATH, the verifier's trees and pytest's configuration.
PLANTED_IN_IMAGE = [
    "/conftest.py",
    "/app/pytest.py",
    "/usr/local/lib/python3.11/dist-packages/zz_planted.pth",
    "/usr/lib/python3/dist-packages/sitecustomize.py",
    "/usr/local/bin/python3-planted",
    "/tests/test_planted.py",
    "/tests/conftest.py",
    "/logs/verifier/planted.txt",
    "/pytest.ini",
]


def one_call_baseline(sandbox: Any, cwd: str) -> tuple[TamperProbe, int]:
    before = sandbox.calls()[0]
    found = TamperProbe.opened(sandbox, cwd, emit=lambda event: pytest.fail(f"the probe failed: {event}"))
    return found, sandbox.calls()[0] - before


def assert_equals_a_snapshot_of_the_watch(found: TamperProbe, planted: list[str]) -> None:
    assert found.places is not None
    snapshot, overflow = found._snapshot(found.places)
    assert not overflow
    assert found.before == snapshot  # nothing changed in between: the same entries, none more, none fewer
    assert set(planted) <= set(found.before)
    trees = [tree for py in found.places.pythons for tree in py.packages]
    assert all(tree in found.before for tree in trees)  # the installed pytest's trees are watched too
    assert found.look() == []  # and so an untouched sandbox shows nothing


def test_a_directory_named_twice_in_a_watch_covers_the_names_of_both():
    watch = probe.Watch(names=[("/opt/bin", ["*.pth"]), ("/opt/bin", ["python*"]), ("/usr/bin", ["sh"])])
    covered = watch.covers()
    assert covered("/opt/bin/hook.pth") and covered("/opt/bin/python3") and covered("/usr/bin/sh")
    assert not covered("/opt/bin/other") and not covered("/usr/bin/bash") and not covered("/opt/hook.pth")


@pytest.mark.docker
def test_the_one_call_baseline_in_a_container_holds_exactly_a_snapshot_of_the_watch(docker_client):
    from oc_repl.sandbox.docker import DockerImageSandbox

    box = DockerImageSandbox.from_spec(IMAGE)
    try:
        plant = " && ".join(f"mkdir -p $(dirname {p}) && echo planted > {p}" for p in PLANTED_IN_IMAGE)
        assert box.exec(f"{plant} && chmod +x /usr/local/bin/python3-planted", timeout=60).exit_code == 0
        found, calls = one_call_baseline(box, "/app")
        assert calls == 1
        assert_equals_a_snapshot_of_the_watch(found, PLANTED_IN_IMAGE)
        assert found.places is not None and any(py.packages for py in found.places.pythons)  # the image's pytest
    finally:
        box.close()


def test_the_one_call_baseline_in_a_confined_sandbox_holds_exactly_a_snapshot_of_the_watch(box):
    # the host's pythons and site directories, seen read-only; a conftest and a shadowing module in the directory
    work = box.workdir
    for name in ("conftest.py", "pytest.py"):
        box.write_file(f"{work}/{name}", b"planted = True\n")
    found, calls = one_call_baseline(box, work)
    assert calls == 1
    assert_equals_a_snapshot_of_the_watch(found, [f"{work}/conftest.py", f"{work}/pytest.py"])


def test_a_baseline_past_its_limit_is_taken_again_from_the_watch_alone(box, monkeypatch):
    monkeypatch.setattr(probe, "BASELINE_LIMIT", 3)  # a listing cut short would miss watched entries
    box.write_file(f"{box.workdir}/conftest.py", b"planted = True\n")
    found, calls = one_call_baseline(box, box.workdir)
    assert calls == 2
    assert_equals_a_snapshot_of_the_watch(found, [f"{box.workdir}/conftest.py"])


def test_every_name_a_watch_takes_by_name_is_in_the_baselines_names():
    # the baseline looks for ANY_NAME in each directory a discovery names; a name watched but missing there would
    # be absent from every baseline and found "created" at every look
    discovery = probe.Discovery(
        path_dirs=["/bin"], pythons=[probe.Python("/bin/python3", ["/w", "/lib/py"], ["/site"], ["/site/pytest"])]
    )
    places = tamper.Places(discovery, "/w")
    watched = {name for _, patterns in places.watch().names for name in patterns}
    watched |= {path.rsplit("/", 1)[1] for path in places.watch().paths}
    assert watched <= set(tamper.ANY_NAME) | {"logs"}
