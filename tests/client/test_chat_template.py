"""Chat templates rendered on the client: transformers' environment (the tojson filter, the globals, the sandbox, the
block trimming), the variables a template sees, where a model folder keeps its template, and the Qwen3 template on
the conversations the protocols build."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

import pytest

from oc_repl.client.chat_template import ChatTemplates, Template, load_chat_templates
from oc_repl.errors import UsageError
from tests.packages import shared_upstream


def render(source: str, messages=(), tools=None, **kwargs) -> str:
    return ChatTemplates({"default": Template("default", source, "test")}).render(list(messages), tools, **kwargs)


def qwen3() -> ChatTemplates:
    return load_chat_templates(shared_upstream("qwen3", "chat_template.jinja"))


# --- the environment ---------------------------------------------------------------------------------------------


def test_tojson_is_json_dumps_without_ascii_escapes_or_html_escapes():
    value = {"b": "é <tag> & 'q'", "a": [1, 2]}
    assert render("{{ v | tojson }}", v=value) == json.dumps(value, ensure_ascii=False)
    assert "\\u" not in render("{{ v | tojson }}", v="中文")


def test_tojson_takes_transformers_arguments_by_name_and_in_order():
    value = {"b": 1, "a": {"c": 2}}
    assert render("{{ v | tojson(indent=4) }}", v=value) == json.dumps(value, indent=4)
    assert render("{{ v | tojson(sort_keys=true) }}", v=value) == json.dumps(value, sort_keys=True)
    assert render("{{ v | tojson(separators=(',', ':')) }}", v=value) == '{"b":1,"a":{"c":2}}'
    assert render("{{ v | tojson(true) }}", v="é") == '"\\u00e9"'  # the first positional argument is ensure_ascii


def test_blocks_are_trimmed_as_transformers_trims_them():
    source = "A\n  {% if true %}\n  B\n  {% endif %}\nC{{ '\\n' }}"
    assert render(source) == "A\n  B\nC\n"


def test_loop_controls_and_generation_blocks_work():
    source = "{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}"  # noqa: E501
    assert render(source, [{"content": str(i)} for i in range(5)]) == "[0][1]"


def test_raise_exception_stops_the_render_with_the_templates_message():
    with pytest.raises(UsageError, match="Conversation roles must alternate"):
        render("{{ raise_exception('Conversation roles must alternate') }}")


def test_strftime_now_is_the_local_date():
    assert render("{{ strftime_now('%Y-%m-%d') }}") == datetime.datetime.now().strftime("%Y-%m-%d")


def test_the_sandbox_keeps_the_conversation_unchanged():
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(UsageError, match="could not render"):
        render("{% set _ = messages.append({'role': 'x'}) %}", messages)
    assert messages == [{"role": "user", "content": "hi"}]


def test_a_template_that_does_not_compile_is_a_usage_error():
    with pytest.raises(UsageError, match="does not compile"):
        render("{% if %}")


def test_the_template_sees_the_conversation_tools_and_the_generation_prompt_switch():
    source = "{{ messages | length }} {{ tools is none }} {{ tools | length if tools else 0 }} {{ add_generation_prompt }} {{ documents is none }}"  # noqa: E501
    assert render(source, [{}, {}]) == "2 True 0 False True"
    assert render(source, [{}], [{"type": "function"}], add_generation_prompt=True) == "1 False 1 True True"


# --- variables and where templates come from -------------------------------------------------------------------------


def write_model(folder: Path, **config) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def test_special_tokens_reach_the_template_as_transformers_names_them_and_kwargs_win(tmp_path):
    added = {"content": "<s>", "lstrip": False, "normalized": False, "rstrip": False, "special": True}
    folder = write_model(
        tmp_path / "m",
        chat_template="{{ bos_token }}|{{ eos_token }}|{{ pad_token is defined }}|{{ additional_special_tokens }}|"
        "{{ x }}",
        bos_token={"__type": "AddedToken", **added},
        eos_token="</s>",
        pad_token=None,
        additional_special_tokens=["<a>", {"content": "<b>"}],
        added_tokens_decoder={},
    )
    templates = load_chat_templates(folder)
    assert templates.variables == {"bos_token": "<s>", "eos_token": "</s>", "additional_special_tokens": ["<a>", "<b>"]}
    assert templates.render([], x=1) == "<s>|</s>|False|['<a>', '<b>']|1"
    assert templates.render([], eos_token="<end>", x=2) == "<s>|<end>|False|['<a>', '<b>']|2"


def test_special_tokens_map_json_counts_only_without_added_tokens_decoder(tmp_path):
    for decoder, expected in ((None, "<bos2>"), ({}, "<bos1>")):
        config = {"chat_template": "{{ bos_token }}", "bos_token": "<bos1>"}
        if decoder is not None:
            config["added_tokens_decoder"] = decoder
        folder = write_model(tmp_path / str(decoder), **config)
        (folder / "special_tokens_map.json").write_text(json.dumps({"bos_token": {"content": "<bos2>"}}))
        assert load_chat_templates(folder).render([]) == expected


def test_a_models_own_special_tokens_are_variables_too(tmp_path):
    folder = write_model(tmp_path / "m", chat_template="{{ image_token }}", extra_special_tokens={"image_token": "<i>"})
    assert load_chat_templates(folder).render([]) == "<i>"


def test_template_files_win_over_the_config_and_are_reported_by_path_and_hash(tmp_path):
    folder = write_model(tmp_path / "m", chat_template="from the config")
    assert load_chat_templates(folder).render([]) == "from the config"
    assert load_chat_templates(folder).select().path == f"{folder / 'tokenizer_config.json'}#chat_template"
    (folder / "chat_template.jinja").write_text("from the file")
    chosen = load_chat_templates(folder).select()
    assert (chosen.source, chosen.path) == ("from the file", str(folder / "chat_template.jinja"))
    import hashlib

    assert chosen.sha256 == hashlib.sha256(b"from the file").hexdigest()


def test_named_templates_pick_tool_use_when_tools_are_passed_even_empty(tmp_path):
    named = [{"name": "default", "template": "plain"}, {"name": "tool_use", "template": "tools"}]
    templates = load_chat_templates(write_model(tmp_path / "m", chat_template=named))
    assert templates.render([]) == "plain"
    assert templates.render([], []) == "tools"  # transformers checks `tools is not None`
    assert templates.render([], [{"type": "function"}], name="default") == "plain"
    assert templates.select(None, []).path.endswith("#chat_template[tool_use]")
    extra = tmp_path / "m" / "additional_chat_templates"
    extra.mkdir()
    (extra / "rag.jinja").write_text("rag")
    files = load_chat_templates(tmp_path / "m")  # a template folder without chat_template.jinja: no default
    with pytest.raises(UsageError, match="none is the default"):
        files.render([])
    assert files.render([], name="rag") == "rag"


def test_a_folder_without_a_template_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="No chat template"):
        load_chat_templates(write_model(tmp_path / "m", eos_token="</s>"))
    with pytest.raises(UsageError, match="No chat template named 'x'"):
        load_chat_templates(write_model(tmp_path / "n", chat_template="t")).render([], name="x")


def test_loading_and_rendering_modules_do_not_import_jinja2_until_a_template_is_loaded():
    code = (
        "import sys\n"
        "import oc_repl.client.chat_template, oc_repl.client.tokenizer, oc_repl.client.text_wires\n"
        "import oc_repl.training\n"
        "print(sorted(m for m in ('jinja2', 'tokenizers') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "[]", proc.stderr


# --- the Qwen3 template on the protocols' conversations --------------------------------------------------------------

TOOL = {
    "type": "function",
    "function": {
        "name": "shell_exec",
        "description": "Run a command.",
        "strict": True,
        "parameters": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
    },
}


def test_qwen3_renders_the_whole_tool_dict_with_tojson_and_prompts_the_assistant():
    text = qwen3().render(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], [TOOL], add_generation_prompt=True
    )
    assert text.startswith("<|im_start|>system\nS\n\n# Tools\n")
    assert "\n<tools>\n" + json.dumps(TOOL, ensure_ascii=False) + "\n</tools>\n" in text
    assert text.endswith("<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n")


def test_qwen3_prefills_an_empty_think_block_only_when_thinking_is_off():
    messages = [{"role": "user", "content": "U"}]
    assert qwen3().render(messages, add_generation_prompt=True).endswith("assistant\n")
    off = qwen3().render(messages, add_generation_prompt=True, enable_thinking=False)
    assert off.endswith("assistant\n<think>\n\n</think>\n\n")


def test_qwen3_tool_results_render_as_one_user_turn_like_the_portable_training_history():
    tool_messages = [{"role": "tool", "tool_call_id": f"c{i}", "content": f"out {i}"} for i in range(2)]
    portable = [{"role": "user", "content": "\n".join(f"<tool_response>\nout {i}\n</tool_response>" for i in range(2))}]
    task = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    rendered = [qwen3().render(task + rest, [TOOL], add_generation_prompt=True) for rest in (tool_messages, portable)]
    assert rendered[0] == rendered[1]
    assert "<|im_start|>user\n<tool_response>\nout 0\n</tool_response>\n<tool_response>\nout 1\n" in rendered[0]


def test_qwen3_writes_string_arguments_as_they_are_and_dict_arguments_with_tojson():
    calls = [
        {"id": "a", "type": "function", "function": {"name": "shell_exec", "arguments": '{"id":"s1"}'}},
        {"id": "b", "type": "function", "function": {"name": "shell_exec", "arguments": {"id": "é"}}},
    ]
    messages = [{"role": "user", "content": "U"}, {"role": "assistant", "content": "", "tool_calls": calls}]
    text = qwen3().render(messages, [TOOL])
    expected = (
        '<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n{"name": "shell_exec", "arguments": {"id":"s1"}}\n'
        '</tool_call>\n<tool_call>\n{"name": "shell_exec", "arguments": {"id": "é"}}\n</tool_call><|im_end|>\n'
    )
    assert text.endswith(expected)


def test_a_template_failing_on_the_messages_is_a_usage_error_naming_the_failure():
    with pytest.raises(UsageError, match="TypeError"):
        render("{{ 'a' + messages[0].content }}", [{"role": "assistant", "content": None}])


def test_a_camel_request_renders_with_its_tools_and_the_training_history():
    from oc_repl.client.chat_template import render_request
    from oc_repl.protocols import create
    from oc_repl.types import Task

    protocol = create("camel-terminal-toolkit")
    protocol.start(Task(name="t1", instruction="List the files."))
    request = protocol.request()
    text = render_request(qwen3(), request.messages, request.options)
    tools = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in request.options["tools"])
    assert f"<tools>\n{tools}\n</tools>" in text
    assert text.endswith(
        "<|im_start|>user\nTask name:t1\nTask instruction: List the files.<|im_end|>\n<|im_start|>assistant\n"
    )
    assert text.count("<|im_start|>") == 3  # system (with the tools), the task, the generation prompt


def test_a_request_without_tools_renders_none_and_passes_chat_template_kwargs():
    from oc_repl.client.chat_template import render_request

    source = "{{ tools is none }} {{ enable_thinking }} {{ add_generation_prompt }}"
    templates = ChatTemplates({"default": Template("default", source, "test")})
    options = {"tools": [], "extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}
    assert render_request(templates, [], options) == "True False True"


def test_the_harness_renders_again_without_tools_when_the_template_fails_with_them():
    from oc_repl.client.chat_template import render_request

    source = "{% if tools %}{{ raise_exception('no tools here') }}{% endif %}plain"
    templates = ChatTemplates({"default": Template("default", source, "test")})
    with pytest.raises(UsageError, match="no tools here"):
        render_request(templates, [], {"tools": [{"type": "function"}]})
    assert render_request(templates, [], {"tools": [{"type": "function"}]}, harness=True) == "plain"
