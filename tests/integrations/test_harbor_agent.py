"""The Harbor agent's settings and loading, with Harbor's own option parsing and preflight (no container)."""

from __future__ import annotations

import subprocess
import sys
from importlib.util import find_spec

import pytest

from tests.conftest import ROOT

HARBOR = find_spec("harbor") is not None


def test_importing_oc_repl_harbor_imports_no_harbor():
    code = "import sys, oc_repl.harbor; print('harbor' in sys.modules, 'oc_repl.integrations' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.stdout.split() == ["False", "False"], done.stderr


@pytest.mark.skipif(HARBOR, reason="Harbor is installed here")
def test_without_harbor_the_agent_says_how_to_install_it():
    import oc_repl.harbor

    with pytest.raises(ImportError, match=r"oc-repl\[harbor\]"):
        oc_repl.harbor.OcRepl  # noqa: B018


needs_harbor = pytest.mark.skipif(not HARBOR, reason="needs Harbor (Python >= 3.12): pip install '.[harbor]'")


@pytest.fixture
def agent_class(monkeypatch):
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "MY_KEY"):
        monkeypatch.delenv(name, raising=False)
    import tests.harbor_support  # noqa: F401  (Harbor's settings for tests, before Harbor loads)
    from oc_repl.harbor import OcRepl

    return OcRepl


@needs_harbor
def test_ak_options_become_run_settings(agent_class, monkeypatch, tmp_path):
    from oc_repl.integrations.harbor.agent import run_settings

    monkeypatch.setenv("MY_KEY", "sk-from-harbors-environment")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://10.0.0.5:8000/v1")
    # as `--ak protocol=terminus-json --ak max_turns=3 --ak temperature=0.2 --ak api_key_env=MY_KEY` parses them
    kwargs = {"protocol": "terminus-json", "max_turns": 3, "temperature": 0.2, "api_key_env": "MY_KEY"}
    agent = agent_class(logs_dir=tmp_path, model_name="openai/Qwen3-8B-OpenClaw-RL-iter215", **kwargs)
    settings = run_settings(agent.options, agent._parsed_model_name)
    assert (settings.protocol, settings.max_turns, settings.temperature) == ("terminus-json", 3, 0.2)
    assert settings.model == "Qwen3-8B-OpenClaw-RL-iter215"  # the provider prefix is Harbor's, not the server's
    assert settings.api_base == "http://10.0.0.5:8000/v1"  # OPENAI_BASE_URL, as `oc-repl run` takes it
    assert settings.api_key == "sk-from-harbors-environment"
    assert not settings.verify and not settings.verify_file  # Harbor judges the trial


@needs_harbor
def test_exact_applies_upstreams_settings(agent_class, tmp_path):
    from oc_repl.integrations.harbor.agent import run_settings

    agent = agent_class(logs_dir=tmp_path, model_name="m", exact=True, tokenizer=str(tmp_path))
    settings = run_settings(agent.options, None)
    assert (settings.exact, settings.max_turns, settings.sampling, settings.loop_limit) == (True, 10, "training", 0)
    assert (settings.wire, settings.tokenizer) == ("generate", tmp_path)  # camel's prompts go as token ids


@needs_harbor
@pytest.mark.parametrize(
    ("kwargs", "env", "problem"),
    [
        ({"exact": True, "temperature": 0.5}, {}, "--exact runs exactly as upstream"),
        ({"bogus": 1}, {}, "Unknown option 'bogus'"),
        ({"protocol": "camel-terminal-toolkit", "api_base": "ftp://x"}, {}, "api"),
        ({}, {"OPENAI_API_KEY": "sk-secret"}, "task container"),
    ],
    ids=["exact-conflict", "unknown-option", "bad-api-base", "key-in-ae"],
)
def test_preflight_refuses_settings_before_any_trial(agent_class, kwargs, env, problem):
    with pytest.raises(ValueError, match=problem):
        agent_class.preflight(kwargs, env)


@needs_harbor
def test_harbors_options_are_the_tables_harbor_settings(agent_class):
    from harbor.agents.options import AgentOptions, env_annotation

    from oc_repl.config import HARBOR, OPTIONS, options_on
    from oc_repl.integrations.harbor.agent import HARBOR_DEFAULTS, OcReplOptions

    fields = {k: v for k, v in OcReplOptions.model_fields.items() if k not in AgentOptions.model_fields}
    assert list(fields) == [o.name for o in options_on(HARBOR)] + ["api_key_env"]
    for name, spec in fields.items():
        if name == "api_key_env":
            assert spec.default == "OPENAI_API_KEY" and env_annotation(spec) is None
            continue
        option = OPTIONS[name]
        assert spec.default == option.default, name  # shown; only what is given reaches the run
        assert spec.description == option.described(HARBOR_DEFAULTS.get(name)), name
        env = env_annotation(spec)
        assert (env.name, env.fallback) == (option.env, option.env) if option.env else env is None, name
    schema = agent_class.options_schema()["properties"]
    assert schema["history"]["anyOf"][0]["enum"] == list(OPTIONS["history"].choices)
    assert schema["top_p"]["anyOf"][0] == {"exclusiveMinimum": 0.0, "maximum": 1.0, "type": "number"}


@needs_harbor
def test_an_installed_kinds_harbor_settings_are_agent_options_and_reach_its_run(tmp_path):
    """tests/kinds: a package's protocol kind brings its Harbor setting to `--ak`, checked by Harbor's own model."""
    from tests.kinds import installed

    code = (
        "import tests.harbor_support\n"
        "from oc_repl.integrations.harbor.agent import OcReplOptions, run_settings\n"
        "fields = OcReplOptions.model_fields\n"
        "said = 'installed: shout' in fields['protocol'].description\n"
        "print('shout_word' in fields, 'scratch_note' in fields, said)\n"
        "options = OcReplOptions(protocol='shout', shout_word='HARBOR', wire='relay')\n"
        "settings = run_settings(options, 'm')\n"
        "print(settings.shout_word, settings.own(settings.protocol_kind().options), settings.wire)\n"
    )
    env = installed(tmp_path)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["True False True", "HARBOR {'shout_word': 'HARBOR'} relay"]


@needs_harbor
def test_an_option_left_unset_is_not_given_to_the_run(agent_class, tmp_path):
    from oc_repl.integrations.harbor.agent import run_settings

    agent = agent_class(logs_dir=tmp_path, model_name="m", exact=True, protocol="camel-terminal-toolkit", wire="chat")
    settings = run_settings(agent.options, "m")
    assert settings.given == {"exact", "protocol", "model", "wire"} and settings.max_turns == 10  # exact's
    asked = agent_class(logs_dir=tmp_path, model_name="m", exact=True, max_turns=12, wire="chat")
    assert run_settings(asked.options, "m").max_turns == 12  # asked for by name: kept
