"""A model's chat template, rendered on the client exactly as transformers' `apply_chat_template` renders it.

The environment is transformers' (4.x, `utils/chat_template_utils.py`): jinja2's immutable sandbox with `trim_blocks`
and `lstrip_blocks`, the loop controls extension and a `{% generation %}` block that renders its body; a `tojson`
filter that is `json.dumps` (`ensure_ascii=False`, `indent`, `separators`, `sort_keys` as keywords or positionally in
that order, no HTML escaping); the globals `raise_exception(message)` and `strftime_now(format)` (local time). The
template sees `messages`, `tools` (None or the list as given), `documents`, `add_generation_prompt`, the tokenizer's
special tokens (`bos_token`, `eos_token`, ..., `additional_special_tokens`, as `special_tokens_map` has them: only the
ones set) and every keyword the caller adds (`enable_thinking`, ...), which win over the special tokens.

Where the template comes from, in transformers' order: `chat_template.jinja` and `additional_chat_templates/*.jinja`
in the model folder (when any exists, the config's entry is not read), else `tokenizer_config.json`'s
`chat_template` (a string, or a list of `{"name", "template"}`). Of several templates, an explicit name picks one;
otherwise `tool_use` when tools are passed (an empty list counts, as in transformers), else `default`.

jinja2 is imported when a template is loaded, never at start-up.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oc_repl.errors import UsageError

TEMPLATE_FILE = "chat_template.jinja"
TEMPLATE_DIR = "additional_chat_templates"
TOKENIZER_CONFIG = "tokenizer_config.json"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
EXTRA = "additional_special_tokens"


@dataclass(frozen=True)
class Template:
    """One template's text and where it was read: `path` names the file (and the entry, for a list in a config)."""

    name: str
    source: str
    path: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()


@dataclass
class ChatTemplates:
    """The templates of one model folder (a single one is named `default`) and the special tokens they see."""

    templates: dict[str, Template]
    variables: dict[str, Any] = field(default_factory=dict)

    def select(self, name: str | None = None, tools: list[Any] | None = None) -> Template:
        found = self.templates
        if name is not None:
            if name not in found:
                raise UsageError(f"No chat template named {name!r}; there are: {', '.join(sorted(found))}.")
            return found[name]
        if len(found) == 1 and "default" in found:
            return found["default"]
        if tools is not None and "tool_use" in found:
            return found["tool_use"]
        if "default" in found:
            return found["default"]
        raise UsageError(f"Several chat templates and none is the default: name one of {', '.join(sorted(found))}.")

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[Any] | None = None,
        *,
        add_generation_prompt: bool = False,
        documents: list[Any] | None = None,
        name: str | None = None,
        **kwargs: Any,
    ) -> str:
        template = self.select(name, tools)
        return render(template, messages, tools, add_generation_prompt, documents, {**self.variables, **kwargs})


def render_request(
    templates: ChatTemplates, messages: list[dict[str, Any]], options: dict[str, Any], harness: bool = False
) -> str:
    """The prompt of a protocol's request (its messages and `Request.options`) as the training harness rendered it:
    the options' tools (none when empty: `tools or None`), `extra_body.chat_template_kwargs` as template keywords, and
    the generation prompt. With `harness`, a template that fails with the tools is rendered again without them, as
    the harness's `_apply_chat_template` did."""
    tools = options.get("tools") or None
    kwargs = (options.get("extra_body") or {}).get("chat_template_kwargs") or {}
    try:
        return templates.render(messages, tools, add_generation_prompt=True, **kwargs)
    except UsageError:
        if not (harness and tools):
            raise
        return templates.render(messages, None, add_generation_prompt=True, **kwargs)


def render(
    template: Template,
    messages: list[dict[str, Any]],
    tools: list[Any] | None,
    add_generation_prompt: bool,
    documents: list[Any] | None,
    variables: dict[str, Any],
) -> str:
    import jinja2

    compiled = _compile(template.source)
    try:
        return compiled.render(
            messages=messages,
            tools=tools,
            documents=documents,
            add_generation_prompt=add_generation_prompt,
            **variables,
        )
    except (jinja2.TemplateError, TypeError, ValueError, LookupError, AttributeError, ArithmeticError) as exc:
        # a template's own refusal (raise_exception), or its expressions failing on these messages (None + str)
        said = str(exc) if isinstance(exc, jinja2.TemplateError) else f"{type(exc).__name__}: {exc}"
        raise UsageError(f"The chat template {template.path} could not render this conversation: {said}") from exc


# --- the environment -------------------------------------------------------------------------------------------------


def _tojson(
    value: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message: str) -> None:
    import jinja2

    raise jinja2.exceptions.TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


@functools.lru_cache(maxsize=16)
def _compile(source: str) -> Any:
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    import jinja2.sandbox

    class Generation(jinja2.ext.Extension):
        """`{% generation %}...{% endgeneration %}` marks the assistant's part for training masks; rendering keeps
        the body as it is."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return caller()

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise UsageError(f"The chat template does not compile: {exc} (line {exc.lineno})") from exc


# --- loading ---------------------------------------------------------------------------------------------------------


def load_chat_templates(where: Path | str) -> ChatTemplates:
    """The templates of a model folder, a tokenizer_config.json, or a .jinja file (with the special tokens of the
    folder it sits in)."""
    path = Path(where)
    folder = path if path.is_dir() else path.parent
    if path.is_dir():
        templates = _template_files(path) or _config_templates(path / TOKENIZER_CONFIG)
    elif path.suffix == ".jinja":
        templates = {"default": _read_template(path, "default")}
    else:
        templates = _config_templates(path)
    if not templates:
        raise UsageError(
            f"No chat template in {path}.",
            hint=f"A model folder has one in {TEMPLATE_FILE} or in {TOKENIZER_CONFIG} (`chat_template`).",
        )
    return ChatTemplates(templates, special_tokens(folder))


def _read_template(path: Path, name: str) -> Template:
    try:
        return Template(name, path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"Cannot read the chat template {path}: {exc}") from exc


def _template_files(folder: Path) -> dict[str, Template]:
    found = {}
    if (folder / TEMPLATE_FILE).is_file():
        found["default"] = _read_template(folder / TEMPLATE_FILE, "default")
    extra = folder / TEMPLATE_DIR
    for path in sorted(extra.glob("*.jinja")) if extra.is_dir() else []:
        found[path.name.removesuffix(".jinja")] = _read_template(path, path.name.removesuffix(".jinja"))
    return found


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object file of a model folder; {} when there is none."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"Cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise UsageError(f"{path} is not a JSON object.")
    return data


def _config_templates(path: Path) -> dict[str, Template]:
    entry = read_json(path).get("chat_template")
    if isinstance(entry, str):
        return {"default": Template("default", entry, f"{path}#chat_template")}
    if isinstance(entry, list):
        found = {}
        for item in entry:
            if not (
                isinstance(item, dict) and isinstance(item.get("name"), str) and isinstance(item.get("template"), str)
            ):
                raise UsageError(f"{path}: each entry of `chat_template` must have a name and a template.")
            found[item["name"]] = Template(item["name"], item["template"], f"{path}#chat_template[{item['name']}]")
        return found
    return {}


def token_text(value: Any) -> str | None:
    """A special token as a config writes it: a string, or an AddedToken object (`{"content": ...}`)."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def special_tokens(folder: Path) -> dict[str, Any]:
    """The special tokens a template sees, as transformers' `special_tokens_map` has them: from tokenizer_config.json;
    special_tokens_map.json adds to and overrides them only in folders whose config has no `added_tokens_decoder`
    (transformers' legacy path). Only the tokens that are set; `additional_special_tokens` as a list of strings."""
    config = read_json(folder / TOKENIZER_CONFIG)
    merged = dict(config)
    if "added_tokens_decoder" not in config:
        for key, value in read_json(folder / SPECIAL_TOKENS_MAP).items():
            if key == EXTRA and isinstance(value, list):
                merged[key] = [*(merged.get(key) or []), *(v for v in value if v not in (merged.get(key) or []))]
            else:
                merged[key] = value
    found: dict[str, Any] = {key: text for key in SPECIAL_TOKENS if (text := token_text(merged.get(key)))}
    named = merged.get("extra_special_tokens")  # a model's own special tokens, by attribute name
    for key, value in (named if isinstance(named, dict) else {}).items():
        if text := token_text(value):
            found[key] = text
    extra = [t for v in merged.get(EXTRA) or [] if (t := token_text(v))]
    if extra:
        found[EXTRA] = extra
    return found
