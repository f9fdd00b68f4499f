"""What the chat wire's `server_renders_tools` row says, held against sglang 0.5.23's own request models: its chat
route validates the tools into `ChatCompletionRequest` and, for a Jinja template such as Qwen3's, hands the template
`[item.model_dump() for item in request.tools]` (serving_chat.py, `_process_messages`). The models run here from the
release wheel (only the three modules they import, in a small virtualenv: no torch), on camel's own tool dicts; the
prompt they make is rendered with the checkpoint's Qwen3 template beside the one the text wires render from the same
dicts.

Slow (a virtualenv and the 39 MB wheel the first time): runs with OC_REPL_SLOW_TESTS=1, as in CI.
"""

from __future__ import annotations

import json
import os
import subprocess
import zipfile

import pytest

from oc_repl.client.chat_template import load_chat_templates
from oc_repl.protocols.camel.kind import WIRE_ROWS
from tests.conftest import ROOT
from tests.packages import cache_root, cached_venv, package_file, shared_upstream

pytestmark = [
    pytest.mark.skipif(os.environ.get("OC_REPL_SLOW_TESTS") != "1", reason="a virtualenv; set OC_REPL_SLOW_TESTS=1"),
    pytest.mark.timeout(1800),
]

SGLANG = ("sglang==0.5.23", "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937")
WHEEL_FOR = ("3.11", "manylinux_2_34_x86_64")  # the release ships compiled wheels; the modules read are pure Python
MODULES = ("sglang/srt/entrypoints/openai/protocol.py", "sglang/srt/environ.py", "sglang/utils.py")
# What those modules import (sglang 0.5.23 names openai==2.8.0)
PACKAGES = [
    "pydantic==2.14.4",
    "openai==2.8.0",
    "msgspec==0.23.0",
    "orjson==3.13.0",
    "numpy==2.4.6",
    "pybase64==1.5.1",
    "requests==2.34.2",
    "ipython==9.19.1",
    "tqdm==4.70.1",
]
# The package's own __init__ files import the whole server (torch): empty packages stand in for them, so only the
# request models' modules run.
DUMP = """
import json, sys, types
from pathlib import Path
root = Path(sys.argv[1])
for name in ("sglang", "sglang.srt", "sglang.srt.entrypoints", "sglang.srt.entrypoints.openai"):
    package = types.ModuleType(name)
    package.__path__ = [str(root.joinpath(*name.split(".")))]
    sys.modules[name] = package
from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest
tools = json.loads(sys.stdin.read())
request = ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                                "tools": tools})
print(json.dumps([item.model_dump() for item in request.tools]))
"""


def sglang_tools(tools: list[dict]) -> list[dict]:
    wheel = package_file(SGLANG[0], "sglang-0.5.23-wheel", SGLANG[1], wheel_for=WHEEL_FOR)
    source = cache_root() / "sglang-0.5.23-models"
    if not (source / MODULES[0]).is_file():
        with zipfile.ZipFile(wheel) as zipped:
            for member in MODULES:
                zipped.extract(member, source)
    python = cached_venv("sglang-0.5.23-models-venv", PACKAGES, "sglang 0.5.23's request models' packages")
    done = subprocess.run(
        [str(python), "-c", DUMP, str(source)], input=json.dumps(tools), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def camel_tools() -> list[dict]:
    lines = (ROOT / "protocols" / "camel-terminal-toolkit" / "tools.json").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_sglang_renders_each_camel_tool_with_defer_loading_null_appended_and_nothing_else_changed():
    ours = camel_tools()
    theirs = sglang_tools(ours)
    templates = load_chat_templates(shared_upstream("qwen3", "chat_template.jinja"))
    messages = [{"role": "user", "content": "list the files"}]
    served = templates.render(messages, theirs, add_generation_prompt=True)
    rendered = templates.render(messages, ours, add_generation_prompt=True)
    assert served != rendered
    assert served.count(', "defer_loading": null}') == len(ours)
    assert served.replace(', "defer_loading": null}', "}") == rendered
    # the wrapper and every key's order are kept: the only change is the appended key
    assert [{k: v for k, v in tool.items() if k != "defer_loading"} for tool in theirs] == ours
    assert [list(tool) for tool in theirs] == [[*tool, "defer_loading"] for tool in ours]


def test_the_server_renders_tools_row_says_what_sglang_does():
    row = next(r for r in WIRE_ROWS if r.name == "server_renders_tools")
    assert '"defer_loading": null' in row.text and "0.5.23" in row.text
    assert f"| `server_renders_tools` | {row.text} |" in (ROOT / "README.md").read_text()


def test_the_server_info_doctor_reads_is_in_sglangs_release_under_the_names_it_reads():
    from tests.test_doctor import SGLANG_INFO

    wheel = package_file(SGLANG[0], "sglang-0.5.23-wheel", SGLANG[1], wheel_for=WHEEL_FOR)
    with zipfile.ZipFile(wheel) as zipped:
        server = zipped.read("sglang/srt/entrypoints/http_server.py").decode()
        fields = zipped.read("sglang/srt/arg_groups/field_order.py").decode()
        merge = zipped.read("sglang/srt/managers/tokenizer_manager.py").decode()
    assert '@app.get("/server_info")' in server and '@app.get("/get_server_info")' in server
    assert '"version": __version__' in server
    assert all(f'"{key}"' in fields for key in SGLANG_INFO if key != "version")
    # the preferred parameters lie under the request's own: a key the request names is never filled
    assert "{**self.preferred_sampling_params, **obj.sampling_params}" in merge
