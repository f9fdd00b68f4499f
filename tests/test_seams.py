"""The seams are declared, not probed: every driver and protocol inherits its seam's Protocol (and with it the
defaults of what it does not offer), a driver is opened with its kind's settings and the core's facts its kind takes,
and no capability is looked up by name."""

from __future__ import annotations

import ast
import inspect
import re

import pytest

from oc_repl.config import RunSettings
from oc_repl.lazy import load
from oc_repl.protocols.kinds import KINDS, SYNC_SOURCES
from oc_repl.sandbox.kinds import KINDS as SANDBOX_KINDS
from oc_repl.types import AgentProtocol, Sandbox
from tests.conftest import ROOT

CAPABILITIES = (
    "ready",
    "image_workdir",
    "keep",
    "kept",
    "isolation",
    "agent_processes",
    "end_agent_processes",
    "run_verifier",
    "look",
    "needs_sandbox",
    "own_processes",
    "first_message",
)


@pytest.mark.parametrize("kind", list(SANDBOX_KINDS.values()), ids=list(SANDBOX_KINDS))
def test_every_driver_is_a_sandbox_opened_with_its_own_options(kind):
    from oc_repl.plan import sandbox_options

    driver = load(kind.driver)
    assert Sandbox in driver.__mro__
    options = sandbox_options(RunSettings(timeout=60), kind)
    assert set(options) == {row.name for row in kind.options} | set(kind.takes)  # nothing of another kind's
    takes = set(inspect.signature(driver.from_spec).parameters) | set(inspect.signature(driver).parameters)
    assert set(options) <= takes, set(options) - takes


@pytest.mark.parametrize("target", sorted(kind.implementation for kind in KINDS.values()))
def test_every_shipped_protocol_is_an_agent_protocol(target):
    assert AgentProtocol in load(target).__mro__


def test_harbors_environment_is_a_sandbox():
    from oc_repl.integrations.harbor.environment import HarborSandbox

    assert Sandbox in HarborSandbox.__mro__


def test_no_capability_is_probed_for_by_name():
    names = "|".join(CAPABILITIES)
    probe = re.compile(rf"""(getattr|hasattr)\([^()]*,\s*["']({names})["']""")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "oc_repl").rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if probe.search(line)
    ]
    assert found == []


def named_outside(names: set[str], home: str) -> list[str]:
    """Every string constant in oc_repl that is one of `names`, outside the `home` package: code that branches on a
    kind by its name (an f-string's literal part counts: f"local:{x}" names the kind too)."""
    found = []
    for path in sorted((ROOT / "oc_repl").rglob("*.py")):
        if path.is_relative_to(ROOT / home):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in names:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    return found


def test_no_sandbox_kind_is_named_outside_the_sandbox_package():
    schemes = {f"{scheme}:" for scheme in SANDBOX_KINDS}
    assert named_outside(schemes, "oc_repl/sandbox") == []


def test_the_name_finder_finds_a_scheme_in_an_f_string(tmp_path, monkeypatch):
    import tests.test_seams as seams

    (tmp_path / "oc_repl").mkdir()
    (tmp_path / "oc_repl" / "part.py").write_text('spec = f"local:{where}"\nother = "local: is a word here"\n')
    monkeypatch.setattr(seams, "ROOT", tmp_path)
    assert named_outside({"local:"}, "oc_repl/sandbox") == ["oc_repl/part.py:1: 'local:'"]


def test_no_protocol_kind_is_named_outside_the_protocols_package():
    names = {*KINDS, "camel-terminal-toolkit", "terminus", "camel", *SYNC_SOURCES} - {"raw"}  # "raw": too common a word
    assert named_outside(names, "oc_repl/protocols") == []


def test_no_text_wire_is_named_outside_the_client_but_in_a_kind_that_says_it_posts_on_it():
    from oc_repl.client.wires import TEXT_WIRES

    found = named_outside(set(TEXT_WIRES), "oc_repl/client")
    # camel's kind: what --exact sets for it, the wire its training posted on (a registry's row)
    assert [site.split(":")[0] for site in found] == ["oc_repl/protocols/camel/kind.py"], found


def test_no_task_format_is_named_outside_the_tasks_package():
    from oc_repl.tasks.model import FORMATS

    # "harbor" is also the name of the integration and of the isolation it reports: too common a word
    assert named_outside(set(FORMATS) - {"harbor"}, "oc_repl/tasks") == []
