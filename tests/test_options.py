"""The settings table and the surfaces made from it: each command's options, the config file's keys, the data a child
run is given (Harbor's options model is pinned in test_harbor_agent.py), the README's options table, bench.json."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import click
import pytest

from oc_repl.config import DOCTOR, FILE, FLAG, OPTIONS, RUN, TRIAL, Option, RunSettings, options_on, validate
from oc_repl.errors import UsageError
from oc_repl.sources import KEY, file_keys, load_file, to_data
from tests.cli.test_cli import answer
from tests.conftest import ROOT, cli_env, run_cli

# Options of the commands that are not settings.
OWN = {
    "main": {"version", "profile", "config_file"},
    "run": {"profile", "config_file", "attempts", "settings_json"},
    "bench": {
        "profile",
        "config_file",
        "attempts",
        "jobs",
        "out",
        "html_file",
        "keep_failures",
        "retry_rounds",
        "skip_tasks",
        "count_infra",
        "harbor_env",
        "dataset",
        "until",
        "margin",
        "alpha",
    },
    "doctor": {"profile", "config_file", "timeout", "json_output"},
}


def commands() -> dict[str, click.Command]:
    from oc_repl.cli import main
    from oc_repl.cli.cmd_bench import bench
    from oc_repl.cli.cmd_doctor import doctor

    return {"main": main, "run": main.commands["run"], "bench": bench.commands["run"], "doctor": doctor}


def settings_options(command: str) -> dict[str, click.Option]:
    params = commands()[command].params
    return {p.name: p for p in params if isinstance(p, click.Option) and p.name not in OWN[command]}


@pytest.mark.parametrize(
    ("command", "surfaces"),
    [("main", {FLAG}), ("run", {FLAG, RUN}), ("bench", {FLAG}), ("doctor", {DOCTOR})],
)
def test_each_command_takes_the_settings_the_table_gives_it_and_no_other(command, surfaces):
    taken = settings_options(command)
    assert list(taken) == [o.name for o in OPTIONS.values() if o.on & surfaces]  # and in the table's order
    for name, param in taken.items():
        option = OPTIONS[name]
        assert param.opts == list(option.flags), name
        assert param.secondary_opts == ([option.negation] if option.negation else []), name
        assert param.default is None  # unset stays unset: the environment, the file and the defaults come later
        assert param.help == option.described(), name
        assert param.hidden == (command == "bench" and TRIAL in option.on), name


def test_the_help_shows_each_default_from_the_table():
    assert OPTIONS["max_turns"].described() == "Model turns per task (default: 12)."
    assert OPTIONS["idle_timeout"].described().endswith("(default: 120).")
    assert "(default: $OPENAI_BASE_URL, else http://127.0.0.1:30000/v1)" in OPTIONS["api_base"].described()
    assert OPTIONS["stream"].described() == "Stream replies (default: on)."
    assert "default" not in OPTIONS["network"].described()
    shown = run_cli(["run", "--help"], Path.cwd()).stdout
    assert "--confine / --no-confine" in shown and "-y, --yes" in shown and "--settings-json" not in shown


def test_a_switch_on_by_default_is_turned_off_by_its_no_flag():
    for option in OPTIONS.values():
        if option.kind == "bool":
            assert (option.negation is not None) == (option.default is True), option.name
    assert FLAG not in OPTIONS["json_output"].on and not any(FLAG in o.on and RUN in o.on for o in OPTIONS.values())


def test_the_config_file_takes_the_table_s_file_settings_and_refuses_the_others(tmp_path):
    assert {o.name for o in options_on(FILE)} == file_keys()
    cfg = tmp_path / "config.toml"
    values = {name: sample(OPTIONS[name], tmp_path) for name in sorted(file_keys()) if name not in KEY}
    cfg.write_text("".join(f"{name} = {toml(value)}\n" for name, value in values.items()))
    assert load_file(cfg, None) == values
    for option in OPTIONS.values():
        if FILE not in option.on:
            cfg.write_text(f"{option.name} = {toml(sample(option, tmp_path))}\n")
            with pytest.raises(UsageError, match=f"unknown keys.*{option.name}"):
                load_file(cfg, None)


def sample(option: Option, tmp_path: Path) -> Any:
    """A value of the setting other than its default, that `validate` takes."""
    special = {
        "api_base": "http://127.0.0.1:9/v1",
        "sandbox": "docker-image:python:3.12",
        "protocol": "terminus-json",
        "wire": "completions",
    }
    if option.name in special:
        return special[option.name]
    if option.choices:
        return next(c for c in option.choices if c != option.default)
    if option.kind == "bool":
        return not option.default
    if option.kind in ("int", "float"):
        low = option.bounds.get("ge", option.bounds.get("gt", 0))
        value = low + (1 if option.kind == "int" else 0.5)
        return min(value, option.bounds.get("le", value))
    if option.kind == "Path":
        path = tmp_path / option.name
        path.write_text("true\n")
        return str(path)
    return f"x-{option.name}"


def toml(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, bool) else str(value).lower()


def every_setting(tmp_path: Path) -> RunSettings:
    """Settings with every value but the key file's, --exact's and the task sandbox's away from its default (the key
    as a value)."""
    # task_sandbox: a single built-in kind is made from an image, its default (test_plugin_kinds.py sets another)
    left = ("api_key_file", "exact", "task_sandbox")
    values = {o.name: sample(o, tmp_path) for o in OPTIONS.values() if o.name not in left}
    values["api_key"] = "sk-secret-key-0123456789"
    return validate(values)


def child_settings(data: dict[str, Any], tmp_path: Path, monkeypatch, env: dict[str, str]) -> RunSettings:
    """The settings `oc-repl run --settings-json FILE` runs with: its command line as the child's, its run taken."""
    import oc_repl.cli.cmd_run

    seen: list[RunSettings] = []
    monkeypatch.setattr(oc_repl.cli.cmd_run, "run_command", lambda settings, *_: seen.append(settings) or 0)
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(data))
    proc = run_cli(["run", "--settings-json", str(path)], tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    return seen[0]


@pytest.mark.parametrize("exact", [False, True], ids=["every-setting", "exact"])
def test_a_child_run_rebuilds_the_settings_it_is_given_as_data(tmp_path, monkeypatch, exact):
    given = {"exact": True, "api_key": "sk-secret-key-01234", "tokenizer": tmp_path}
    settings = every_setting(tmp_path) if not exact else validate(given)
    data = json.loads(json.dumps(to_data(settings)))
    assert settings.api_key not in json.dumps(data) and not set(KEY) & set(data)  # the key goes by environment
    assert set(data) == {o.name for o in OPTIONS.values() if getattr(settings, o.name) != o.default} - set(KEY)
    # the child reads neither its config file nor the environment, but for the key: its parent resolved those
    (tmp_path / "config" / "oc-repl").mkdir(parents=True)
    (tmp_path / "config" / "oc-repl" / "config.toml").write_text('system = "from the file"\nretries = 9\n')
    env = {**cli_env(tmp_path), "OPENAI_API_KEY": settings.api_key, "OPENAI_BASE_URL": "http://127.0.0.1:8/v1"}
    assert child_settings(data, tmp_path, monkeypatch, env) == settings


def test_a_child_run_refuses_data_that_is_not_settings(tmp_path):
    path = tmp_path / "settings.json"
    for text, told in [("[1]", "not a JSON object"), ("{", "not JSON"), ('{"max_turns": 0}', "max_turns: must be")]:
        path.write_text(text)
        proc = run_cli(["run", "--settings-json", str(path)], tmp_path)
        assert proc.returncode == 2 and told in proc.stderr, proc.stderr


def test_iter_events_hands_its_child_the_settings_and_the_key_out_of_sight(serve, tmp_path):
    from oc_repl import Settings, iter_events

    key = "sk-child-key-0123456789"
    server = serve({"require_key": key, "replies": [answer("one")], "cycle": True})
    work = tmp_path / "w"
    work.mkdir()
    given = dict(api_base=server.url, sandbox=f"local:{work}", yes=True, retries=0, api_key=key)
    settings = Settings(**given, temperature=0.25, max_tokens=77, stream=False, task_name="named-task")
    events = list(iter_events("hello", settings=settings))
    assert events[-1].type == "thread.completed" and events[-1].status == "done", events[-1]
    (request,) = server.chat_requests()
    body = request["body"]
    assert (body["temperature"], body["max_tokens"], body.get("stream", False)) == (0.25, 77, False)
    assert "named-task" in json.dumps(body["messages"])


def test_the_readme_options_table_lists_each_flag_with_its_default():
    readme = (ROOT / "README.md").read_text()
    table = readme.split("### Options\n\n", 1)[1].split("\n\n", 1)[0]
    rows = [row.split(" | ") for row in table.splitlines()[2:]]
    listed: dict[str, str] = {}
    for row in rows:
        names = [re.findall(r"--[a-z-]+", part) for part in row[0].split(", ")]
        defaults = row[1].split(", ") if len(row[1].split(", ")) == len(names) else [row[1]] * len(names)
        for flags, default in zip(names, defaults, strict=True):
            listed.update({flag: default for flag in flags})
    options = [o for o in OPTIONS.values() if o.on & {FLAG, RUN}]
    assert set(listed) == {flag for o in options for flag in (o.flag, o.negation) if flag}
    for option in options:
        if option.default is not None and option.kind != "bool":
            shown = f"{option.default:g}" if isinstance(option.default, float) else str(option.default)
            assert shown in listed[option.flag], option.name
        if option.env:
            assert f"${option.env}" in listed[option.flag], option.name
    not_in_file = re.search(r"all but ((?:`--[a-z-]+`(?:, | and )?)+)", readme)
    assert not_in_file is not None
    named = set(re.findall(r"--[a-z-]+", not_in_file.group(1)))
    assert named == {o.flag for o in options if FILE not in o.on}


def bench_settings(tmp_path: Path, **values: Any) -> dict[str, RunSettings]:
    return {"camel-terminal-toolkit": validate({"protocol": "camel-terminal-toolkit", **values})}


def test_bench_json_records_each_protocol_s_run_options_as_data_and_refuses_a_change(tmp_path):
    from oc_repl.bench.runner import read_plan, trial_options, write_plan
    from oc_repl.tasks.model import find_tasks

    tasks = find_tasks([ROOT / "examples" / "tasks" / "count-words"])
    out = tmp_path / "out"
    write_plan(
        out, tasks, 1, trial_options(bench_settings(tmp_path, max_turns=3, stream=False, api_key="sk-k-12345678"))
    )
    recorded = read_plan(out)["run_options"]["camel-terminal-toolkit"]
    assert recorded == {"protocol": "camel-terminal-toolkit", "max_turns": 3, "stream": False}
    write_plan(out, tasks, 1, trial_options(bench_settings(tmp_path, max_turns=3, stream=False)))  # the same again
    with pytest.raises(
        UsageError, match="camel-terminal-toolkit trials run with other options .--max-turns was 3, now 4"
    ):
        write_plan(out, tasks, 1, trial_options(bench_settings(tmp_path, max_turns=4, stream=False)))


def test_bench_json_records_each_arms_protocol_settings_as_its_trials_run_them_defaults_included(tmp_path):
    from oc_repl.bench.runner import protocol_settings, read_plan, trial_options, write_plan
    from oc_repl.tasks.model import find_tasks

    camel = "camel-terminal-toolkit"
    settings = {
        "exact": validate({"protocol": camel, "exact": True, "wire": "chat"}),
        "rich15": validate({"protocol": camel, "camel_rich": "15"}),
    }
    out = tmp_path / "out"
    tasks = find_tasks([ROOT / "examples" / "tasks" / "count-words"])
    write_plan(out, tasks, 1, trial_options(settings), None, protocol_settings(settings))
    recorded = read_plan(out)["protocol_settings"]
    assert recorded["exact"] == {
        "camel_rich": "14",
        "history": "training",
        "relative_paths": "root",
        "observation_limit": 0,
    }
    assert recorded["rich15"]["camel_rich"] == "15" and recorded["rich15"]["relative_paths"] == "workdir"
    assert "camel_rich" not in read_plan(out)["run_options"]["exact"]  # what the trials are given stays as given


def test_a_bench_dir_that_recorded_flags_is_finished_when_its_options_are_the_same(tmp_path):
    from oc_repl.bench.runner import read_plan, trial_options, write_plan
    from oc_repl.tasks.model import find_tasks

    tasks = find_tasks([ROOT / "examples" / "tasks" / "count-words"])
    out = tmp_path / "out"
    out.mkdir()
    flags = ["--protocol", "camel-terminal-toolkit", "--no-stream", "--temperature", "0.5", "--network"]
    plan = {"version": "0.1.0", "tasks": [], "protocols": ["camel-terminal-toolkit"], "k": 1}
    (out / "bench.json").write_text(json.dumps({**plan, "run_options": {"camel-terminal-toolkit": flags}}))
    proc = run_cli(["bench", "report", str(out)], tmp_path)
    assert proc.returncode == 2 and "no finished trial" in proc.stderr  # read as a plan: it has no trials yet
    with pytest.raises(UsageError, match="--temperature was 0.5, now 0.75"):
        write_plan(out, tasks, 1, trial_options(bench_settings(tmp_path, stream=False, temperature=0.75, network=True)))
    same = {"stream": False, "temperature": 0.5, "network": True, "yes": False}  # `yes` False: as if not named
    write_plan(out, tasks, 1, trial_options(bench_settings(tmp_path, **same)))
    recorded = read_plan(out)["run_options"]["camel-terminal-toolkit"]
    assert recorded == {"protocol": "camel-terminal-toolkit", **same}  # now as data


def test_a_profile_named_before_bench_is_the_config_file_s(tmp_path):
    settings = tmp_path / "config" / "oc-repl"
    settings.mkdir(parents=True)
    (settings / "config.toml").write_text("[profiles.fast]\nmax_turns = 2\n")
    env = {**cli_env(tmp_path), "DOCKER_HOST": "unix:///nonexistent.sock"}
    task = str(ROOT / "examples" / "tasks" / "count-words")
    proc = run_cli(["--profile", "fast", "bench", task, "--out", str(tmp_path / "o")], tmp_path, env=env)
    assert proc.returncode == 6 and "nonexistent.sock" in proc.stderr, proc.stderr  # past the settings, at docker
