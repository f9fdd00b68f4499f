"""The task model: terminal-bench and Harbor task directories read into one shape, and what each refuses."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from oc_repl.errors import UsageError
from oc_repl.tasks.harbor_format import parse_reward
from oc_repl.tasks.image import image_tag
from oc_repl.tasks.model import find_tasks, load_task
from tests.conftest import ROOT, run_cli

TASKS = ROOT / "examples" / "tasks"
HARBOR = ("count-words", "fix-json-config")


def harbor_task(tmp_path: Path, toml: str, name: str = "h") -> Path:
    task = tmp_path / name
    shutil.copytree(TASKS / "count-words", task)
    (task / "task.toml").write_text(toml)
    return task


def test_both_formats_load_into_one_model():
    tasks = {t.name: t for t in find_tasks([TASKS])}
    assert set(tasks) == {"count-words", "fix-json-config", "fix-permissions", "repair-module", "write-greeting"}
    assert {tasks[n].format for n in HARBOR} == {"harbor"}
    tb = tasks["write-greeting"]
    assert tb.format == "terminal-bench" and tb.agent_timeout_sec == 360 and tb.test_timeout_sec == 60
    assert tb.dockerfile == tb.path / "Dockerfile" and tb.context == tb.path
    harbor = tasks["count-words"]
    assert harbor.instruction.startswith("The file /app/notes.txt")
    assert (harbor.agent_timeout_sec, harbor.test_timeout_sec, harbor.build_timeout_sec) == (300, 60, 300)
    assert (harbor.cpus, harbor.memory_mb) == (1.0, 512)
    assert harbor.context == harbor.path / "environment" and harbor.dockerfile == harbor.context / "Dockerfile"
    assert tasks["fix-json-config"].memory_mb == 512  # the older `memory = "512M"` spelling
    assert image_tag(harbor) == "oc-repl-task-count-words:latest"


def test_harbor_defaults_are_harbors(tmp_path):
    task = load_task(harbor_task(tmp_path, 'version = "1.0"\n'))
    assert (task.agent_timeout_sec, task.test_timeout_sec, task.build_timeout_sec) == (600, 600, 600)
    assert (task.cpus, task.memory_mb, task.verifier_user) == (None, None, "root")


@pytest.mark.parametrize(
    ("toml", "why"),
    [
        ("[agent]\ntimeout_sec = -5\n", "agent.timeout_sec"),
        ("[verifier]\ntimeout_sec = 'soon'\n", "verifier.timeout_sec"),
        ("[environment]\ncpus = 0\n", "cpus"),
        ("[environment]\nmemory = 'lots'\n", "memory"),
        ("[agent\n", "cannot read"),
        ("agent = 3\n", r"\[agent\] must be a table"),
    ],
)
def test_a_malformed_task_toml_is_a_usage_error(tmp_path, toml, why):
    with pytest.raises(UsageError, match=why):
        load_task(harbor_task(tmp_path, toml))


def test_a_compose_environment_is_not_supported_yet(tmp_path):
    task = harbor_task(tmp_path, 'version = "1.0"\n')
    (task / "environment" / "docker-compose.yaml").write_text("services: {}\n")
    with pytest.raises(UsageError, match="not supported yet") as caught:
        load_task(task)
    assert "docker-compose.yaml" in caught.value.message
    server_free = run_cli(["run", "--task", str(task)], tmp_path, timeout=30)  # the CLI says it before anything runs
    assert server_free.returncode == 2 and "not supported yet" in " ".join(server_free.stderr.split())


@pytest.mark.parametrize("missing", ["instruction.md", "tests/test.sh", "environment/Dockerfile"])
def test_a_harbor_dir_without_its_parts_is_refused(tmp_path, missing):
    task = harbor_task(tmp_path, 'version = "1.0"\n')
    (task / missing).unlink()
    with pytest.raises(UsageError):
        load_task(task)


def test_a_ready_image_replaces_the_dockerfile(tmp_path):
    task = harbor_task(tmp_path, '[environment]\ndocker_image = "oc-repl-test:bookworm"\n')
    (task / "environment" / "Dockerfile").unlink()
    loaded = load_task(task)
    assert loaded.dockerfile is None and image_tag(loaded) == "oc-repl-test:bookworm"


def test_folders_expand_to_their_task_dirs_and_names_must_be_unique(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="neither a task directory nor a folder"):
        find_tasks([tmp_path / "empty"])
    with pytest.raises(UsageError, match="share a name: write-greeting"):
        find_tasks([TASKS, TASKS / "write-greeting"])
    assert [t.name for t in find_tasks([TASKS / "write-greeting", TASKS / "count-words"])] == [
        "write-greeting",
        "count-words",
    ]


@pytest.mark.parametrize(
    ("text", "is_json", "reward"),
    [
        ("1\n", False, 1.0),
        ("0.0", False, 0.0),
        ("0.5", False, 0.5),
        ("yes", False, None),
        ('{"reward": 1.0}', True, 1.0),
        ('{"accuracy": 1}', True, 1.0),  # the only number there is
        ('{"a": 1, "b": 0}', True, None),  # which one? none is the reward
        ('{"reward": true}', True, None),
        ("[1]", True, None),
        ("1", True, 1.0),
    ],
)
def test_the_reward_harbor_tests_write(text, is_json, reward):
    assert parse_reward(text, is_json) == reward


def test_the_old_entry_points_still_work():
    from oc_repl.tasks.terminal_bench import build_image, load_task_dir

    assert callable(build_image)
    assert load_task_dir(TASKS / "write-greeting") == load_task(TASKS / "write-greeting")


# --- the network a task's container gets ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("toml", "network"),
    [
        ('version = "1.0"\n', "public"),  # Harbor's default
        ('[environment]\nnetwork_mode = "no-network"\n', "none"),
        ('[environment]\nnetwork_mode = "public"\n', "public"),
        ("[environment]\nallow_internet = false\n", "none"),  # the older spelling
        ('[environment]\nallow_internet = false\nnetwork_mode = "public"\n', "public"),  # the newer one wins
        ('[environment]\nnetwork_mode = "public"\n[agent]\nnetwork_mode = "no-network"\n', "none"),  # the agent's phase
        ('[environment]\nnetwork_mode = "no-network"\n[agent]\nnetwork_mode = "public"\n', "public"),
    ],
)
def test_a_harbor_task_declares_its_agents_network(tmp_path, toml, network):
    assert load_task(harbor_task(tmp_path, toml)).network == network


@pytest.mark.parametrize(
    ("toml", "why"),
    [
        ('[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org"]\n', "allowlist.*not supported"),
        ('[environment]\nnetwork_mode = "open"\n', "network_mode must be"),
    ],
)
def test_a_harbor_network_that_cannot_be_kept_is_refused(tmp_path, toml, why):
    with pytest.raises(UsageError, match=why):
        load_task(harbor_task(tmp_path, toml))


@pytest.mark.parametrize(
    ("compose", "network"),
    [
        ("services:\n  client:\n    build: {dockerfile: Dockerfile}\n    network_mode: none\n", "none"),
        ("services:\n  client:\n    build: {dockerfile: Dockerfile}\n", "public"),  # compose's own network
        (None, "none"),  # no compose file at all: nothing declares a network
    ],
)
def test_a_terminal_bench_task_declares_its_network_in_its_compose_file(tmp_path, compose, network):
    task = tmp_path / "tb"
    shutil.copytree(TASKS / "write-greeting", task)
    if compose is None:
        (task / "docker-compose.yaml").unlink()
    else:
        (task / "docker-compose.yaml").write_text(compose)
    assert load_task(task).network == network


def test_a_terminal_bench_task_on_the_hosts_network_is_refused(tmp_path):
    task = tmp_path / "tb"
    shutil.copytree(TASKS / "write-greeting", task)
    (task / "docker-compose.yaml").write_text("services:\n  client:\n    network_mode: host\n")
    with pytest.raises(UsageError, match="network_mode 'host' is not supported"):
        load_task(task)


def test_the_example_tasks_networks_are_their_formats_defaults():
    # terminal-bench's examples say network_mode: none; Harbor's leave it to Harbor's default, public (a no-network
    # task needs Harbor's egress-control sidecar, which Harbor pulls and builds: not for an example run offline)
    networks = {t.name: t.network for t in find_tasks([TASKS])}
    assert networks == {
        "count-words": "public",
        "fix-json-config": "public",
        "fix-permissions": "none",
        "repair-module": "none",
        "write-greeting": "none",
    }


@pytest.mark.parametrize(
    ("yaml", "why"),
    [
        ("- just\n- a list\n", "mapping"),
        ("instruction: x\nmax_agent_timeout_sec: soon\n", "max_agent_timeout_sec"),
        ("instruction: x\nmax_test_timeout_sec: -1\n", "max_test_timeout_sec"),
    ],
)
def test_a_malformed_task_yaml_is_a_usage_error(tmp_path, yaml, why):
    from oc_repl.tasks.terminal_bench import load_task_dir

    task = tmp_path / "task"
    (task / "tests").mkdir(parents=True)
    (task / "run-tests.sh").write_text("true\n")
    (task / "task.yaml").write_text(yaml)
    with pytest.raises(UsageError, match=why):
        load_task_dir(task)
