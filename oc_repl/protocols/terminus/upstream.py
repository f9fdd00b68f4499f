"""terminal-bench 0.2.18's Terminus-2 code, run from its wheel without the harness around it.

`protocols sync` derives upstream's texts by running upstream's own parsers and agent methods (derive.py),
and the tests compare the project's protocol with the same code. Only six of the wheel's modules are executed (the
two parsers, the agent, `Chat` and the LLM base module, the tmux session); their other imports (litellm, tenacity,
docker, pydantic, the harness) are replaced by small stand-ins for as long as `loaded()` is open, and `sys.modules`
is restored afterwards. Agents and sessions are made without their constructors: no model client, no container.

Standard library only, so that a fresh interpreter can run it from its own directory with nothing but the wheel.
Nothing upstream is copied here: every text comes out of the wheel when its code runs.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import types
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PACKAGE = "terminal_bench"
_AGENT_DIR = f"{PACKAGE}/agents/terminus_2"
MODULES = {  # in the order they must be executed: each imports the ones before it
    "json_parser": f"{_AGENT_DIR}/terminus_json_plain_parser.py",
    "xml_parser": f"{_AGENT_DIR}/terminus_xml_plain_parser.py",
    "base_llm": f"{PACKAGE}/llms/base_llm.py",
    "chat": f"{PACKAGE}/llms/chat.py",
    "tmux": f"{PACKAGE}/terminal/tmux_session.py",
    "agent": f"{_AGENT_DIR}/terminus_2.py",
}
PROMPTS = {
    "json": f"{PACKAGE}/agents/prompt-templates/terminus-json-plain.txt",
    "xml": f"{PACKAGE}/agents/prompt-templates/terminus-xml-plain.txt",
}
TIMEOUT = f"{PACKAGE}/agents/prompt-templates/timeout.txt"
NO_LOGS = (None, None, None)  # the agent's logging paths: nothing is logged


class UpstreamError(Exception):
    """The wheel does not hold or do what the derivation relies on."""


class ScriptEnd(Exception):
    """The scripted model has no reply left: ends upstream's agent loop."""


def read_member(wheel: Path, member: str) -> bytes:
    """A file of the wheel (a .whl file, or a directory holding `terminal_bench/`)."""
    try:
        if wheel.is_dir():
            return (wheel / member).read_bytes()
        with zipfile.ZipFile(wheel) as archive:
            return archive.read(member)
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        raise UpstreamError(f"{wheel}: cannot read {member}: {exc}") from exc


def _module(name: str, **attributes: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    return module


def _silent_logger() -> logging.Logger:
    log = logging.getLogger("oc_repl.upstream.terminus")
    log.handlers[:] = [logging.NullHandler()]
    log.propagate = False
    log.setLevel(logging.CRITICAL + 1)
    return log


def _stand_ins() -> dict[str, types.ModuleType]:
    """What the six modules import from outside themselves, reduced to what the code paths used here touch."""

    class Anything:
        def __init__(self, **kwargs: Any) -> None:
            self.__dict__.update(kwargs)

    class FailureMode:
        NONE = "none"

    def get_max_tokens(model: str) -> int:
        raise LookupError(model)  # an unknown model: upstream falls back to its own context size

    def token_counter(model: str = "", messages: list | None = None, **_: Any) -> int:
        return 0  # never near the context size: upstream never summarizes here

    def retry(*_args: Any, **_kwargs: Any) -> Any:
        return lambda function: function  # a failed call is not retried: it surfaces

    utils = _module("litellm.utils", get_max_tokens=get_max_tokens, token_counter=token_counter)
    containers = _module("docker.models.containers", Container=Anything, ExecResult=Anything)
    models = _module("docker.models", containers=containers)
    here = f"{PACKAGE}."
    return {
        "litellm": _module("litellm", utils=utils),
        "litellm.utils": utils,
        "tenacity": _module("tenacity", retry=retry, stop_after_attempt=lambda attempts: attempts),
        "docker": _module("docker", models=models),
        "docker.models": models,
        "docker.models.containers": containers,
        here + "agents.base_agent": _module(here + "agents.base_agent", BaseAgent=Anything, AgentResult=Anything),
        here + "agents.failure_mode": _module(here + "agents.failure_mode", FailureMode=FailureMode),
        here + "llms.lite_llm": _module(here + "llms.lite_llm", LiteLLM=Anything),
        here + "utils.logger": _module(here + "utils.logger", logger=_silent_logger()),
        here + "terminal.models": _module(here + "terminal.models", TerminalCommand=Anything),
        here + "terminal.docker_compose_manager": _module(
            here + "terminal.docker_compose_manager", DockerComposeManager=Anything
        ),
    }


class Session:
    """Stands in for upstream's TmuxSession: hands out the observations it is given, one per call, and records the
    keys sent with their waits."""

    def __init__(self, observations: list[str] | None = None, screen: str = "") -> None:
        self.observations = list(observations or [])
        self.screen = screen
        self.sent: list[tuple[str, float]] = []

    def send_keys(self, keys: str, block: bool = False, min_timeout_sec: float = 0.0, **_: Any) -> None:
        self.sent.append((keys, min_timeout_sec))

    def get_incremental_output(self) -> str:
        if not self.observations:
            raise UpstreamError("upstream asked for more terminal output than was given")
        return self.observations.pop(0)

    def capture_pane(self, capture_entire: bool = False) -> str:
        return self.screen

    def is_session_alive(self) -> bool:
        return True

    def get_asciinema_timestamp(self) -> float:
        return 0.0


class Model:
    """Stands in for the model behind upstream's `Chat`: answers from a script (an exception in it is raised, as
    litellm raises upstream's errors) and records every call as (history, prompt)."""

    def __init__(self, script: list[Any]) -> None:
        self.script = list(script)
        self.calls: list[tuple[list[dict[str, Any]], str]] = []

    def call(self, prompt: str, message_history: list | None = None, **_: Any) -> str:
        self.calls.append(([dict(m) for m in message_history or []], prompt))
        if not self.script:
            raise ScriptEnd
        answer = self.script.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def count_tokens(self, messages: list) -> int:
        return 0

    def conversation(self) -> list[list[dict[str, Any]]]:
        """The messages of each call as they went to the model: the history, then the prompt as a user message."""
        return [[*history, {"role": "user", "content": prompt}] for history, prompt in self.calls]


class Scripted:
    """Stands in for a parser: hands out the given parse results in turn, whatever the reply."""

    def __init__(self, results: list[Any]) -> None:
        self.results = list(results)

    def parse_response(self, response: str) -> Any:
        return self.results.pop(0)


class Upstream:
    """The loaded modules, and upstream objects made from them."""

    def __init__(self, wheel: Path, modules: dict[str, types.ModuleType]) -> None:
        self.wheel = wheel
        self.modules = modules

    def parser(self, fmt: str) -> Any:
        module = self.modules["json_parser" if fmt == "json" else "xml_parser"]
        return module.TerminusJSONPlainParser() if fmt == "json" else module.TerminusXMLPlainParser()

    def agent(self, fmt: str, parser: Any = None, model: Model | None = None) -> Any:
        """A Terminus2 agent for `fmt`, set up as its constructor would, with `model` behind its chat."""
        agent = object.__new__(self.modules["agent"].Terminus2)
        agent._parser_name = fmt
        agent._model_name = "stand-in"
        agent._llm = model
        agent._parser = parser or self.parser(fmt)
        agent._prompt_template = read_member(self.wheel, PROMPTS[fmt]).decode("utf-8")
        agent._timeout_template = read_member(self.wheel, TIMEOUT).decode("utf-8")
        agent._logger = _silent_logger()
        agent._max_episodes = 1_000_000
        agent._chat = None
        agent._timestamped_markers = []
        agent._pending_completion = False
        return agent

    def chat(self, model: Model) -> Any:
        return self.modules["chat"].Chat(model)

    def overflow(self, truncated: str | None) -> BaseException:
        """What upstream's LiteLLM raises when a reply hits the output token limit."""
        return self.modules["base_llm"].OutputLengthExceededError("length", truncated_response=truncated)

    def result(self, error: str = "", warning: str = "", complete: bool = False) -> Any:
        return self.modules["json_parser"].ParseResult([], complete, error, warning)

    def converse(self, fmt: str, instruction: str, replies: list[Any], observations: list[str], parser: Any = None):
        """Upstream's whole episode (`perform_task`) over scripted replies and terminal outputs; returns the model
        and the session, whose records hold every message sent and every key typed. It ends where upstream's loop
        ends, or when the replies run out."""
        model, session = Model(replies), Session(observations)
        with contextlib.suppress(ScriptEnd):
            self.agent(fmt, parser, model).perform_task(instruction=instruction, session=session)
        return model, session

    # --- what upstream's agent sends the model, piece by piece -------------------------------------------------

    def feedback(self, fmt: str, result: Any) -> str:
        """The block upstream's agent makes of a parse result (its error and warnings)."""
        model = Model(["reply"])
        agent = self.agent(fmt, Scripted([result]), model)
        return agent._handle_llm_interaction(self.chat(model), "prompt", NO_LOGS)[2]

    def after_reply(self, fmt: str, reply: str, observation: str, parser: Any = None) -> str:
        """The message upstream sends after `reply`, when the terminal shows `observation` once its commands ran:
        the parse-error prompt, the warnings prompt, the completion question, or the observation itself."""
        model, _ = self.converse(fmt, "task", [reply], ["screen", observation], parser)
        return model.calls[1][1]

    def after_overflow(self, fmt: str, truncated: str, parser: Any = None) -> tuple[str | None, str | None]:
        """What upstream makes of a reply cut by the output token limit: (the reply it rescued and runs instead,
        XML only; else None), (the message it then sends; None when it rescued one)."""
        model = Model([self.overflow(truncated), "after"])
        agent = self.agent(fmt, parser, model)
        answer = agent._query_llm(self.chat(model), "prompt", NO_LOGS, "", Session())
        return (answer, None) if len(model.calls) == 1 else (None, model.calls[1][1])

    def observe(self, captures: list[tuple[str, str]]) -> list[str]:
        """What upstream's TmuxSession shows after each capture, given as (whole scrollback, visible screen)."""
        session = object.__new__(self.modules["tmux"].TmuxSession)
        session._session_name, session._previous_buffer, session._logger = "agent", None, _silent_logger()
        shown = []
        for entire, screen in captures:
            session.capture_pane = lambda capture_entire=False, e=entire, s=screen: e if capture_entire else s
            shown.append(session.get_incremental_output())
        return shown


@contextlib.contextmanager
def loaded(wheel: Path) -> Iterator[Upstream]:
    """The six modules executed against the stand-ins. These stay in `sys.modules` while the context is open, as
    the agent imports litellm inside a method; the names it set are put back as they were once it closes."""
    packages = [
        PACKAGE,
        *(f"{PACKAGE}.{name}" for name in ("agents", "agents.terminus_2", "llms", "terminal", "utils")),
    ]
    placed = {name: _module(name) for name in packages}
    for package in placed.values():
        package.__path__ = []  # nothing behind it: every submodule comes from sys.modules
    placed.update(_stand_ins())
    saved = {name: sys.modules.get(name) for name in [*placed, *(_dotted(m) for m in MODULES.values())]}
    modules: dict[str, types.ModuleType] = {}
    try:
        sys.modules.update(placed)
        for key, member in MODULES.items():
            module = _module(_dotted(member), __file__=member)
            sys.modules[module.__name__] = module
            source = read_member(wheel, member).decode("utf-8")
            exec(compile(source, member, "exec"), module.__dict__)  # noqa: S102 - running upstream is the point
            modules[key] = module
        yield Upstream(wheel, modules)
    finally:
        for name, before in saved.items():
            if before is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = before


def _dotted(member: str) -> str:
    return member.removesuffix(".py").replace("/", ".")
