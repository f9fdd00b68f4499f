"""What the README says to install and to remove is what exists: oc-repl installs from a clone or from its repository
(it is not on the package index), the compose v2 plugin Harbor's docker environment needs is named with where it
comes from, and the quick start's disk footprint is stated with a removal that covers where its scripts write."""

from __future__ import annotations

import re

from tests.conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    return README.split(f"\n## {title}", 1)[1].split("\n## ")[0]


def test_every_pip_install_of_oc_repl_is_from_a_clone_or_the_repository():
    installs = re.findall(r"pip install ('[^']+'|\S+)", README)
    assert installs
    for target in installs:
        name = target.strip("'")
        assert name.startswith(".") or "@ git+" in name, f"pip install {target}: oc-repl is not on the package index"


def test_the_harbor_section_says_where_compose_v2_comes_from():
    harbor = section("Running at scale with Harbor")
    assert "docker-compose-plugin" in harbor and "~/.docker/cli-plugins/docker-compose" in harbor
    assert "docker compose version" in harbor


def default_cache(script: str, variable: str) -> str:
    """The folder a script writes under by default, with ~ for $HOME."""
    text = (ROOT / script).read_text(encoding="utf-8")
    [value] = re.findall(rf"^{variable}=\$\{{[A-Z_]+:-(.+)\}}$", text, re.M)
    return value.replace("$HOME", "~").replace("${XDG_CACHE_HOME:-~/.cache}", "~/.cache")


def test_the_quick_starts_footprint_is_stated_and_its_removal_covers_where_it_writes():
    quick = README.split("\n## ", 1)[0]
    assert re.search(r"about [\d.]+ to [\d.]+ GB under `~/.cache`", quick)
    [removal] = re.findall(r"`rm -rf ([^`]+)`", quick)
    removed = removal.split()
    written = [
        default_cache("examples/tiny-model/install.sh", "VENV"),
        default_cache(".ci/test-image.sh", "CACHE"),
        default_cache(".ci/dockerd.sh", "CACHE"),
    ]
    for path in written:
        assert any(path == r or path.startswith(r + "/") for r in removed), f"{path} is not removed by rm -rf {removal}"
