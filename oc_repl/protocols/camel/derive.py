"""Derive what camel-ai's TerminalToolkit (docker backend) answers, as named templates, from the installed package.

Runs inside the sync's camel virtualenv, by path (`python -I derive.py OUT.json`), so it imports nothing of
oc-repl. The toolkit is built as the training harness built it, with stand-ins for the docker client and the
`docker cp` subprocess, and its real methods are called with marker values (`@@field@@`) in every variable place
(camel's ChatAgent too, for the notice it puts before a tool result it cuts);
each answer becomes a template by doubling its literal braces and putting `{field}` where a marker was, and is
checked by rendering it back. The tool schemas come from the same bound methods, as training made them. Nothing
here holds a text of the toolkit's: it all comes from the package at run time.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
from typing import Any

TOOLS = ("shell_exec", "shell_view", "shell_write_to_process", "shell_write_content_to_file")
PARAMS = {
    "shell_exec": ("id", "command"),
    "shell_view": ("id",),
    "shell_write_to_process": ("id", "command"),
    "shell_write_content_to_file": ("content", "file_path"),
}
# Inputs for the toolkit's conversion of blocking output to plain text; the sync compares the answers with the
# project's own conversion.
PROBES = ("plain\n", "x\n\n", "10%\r100%", "a\r\nb\r\n", "\x1b[31mred\x1b[0m\n", "a\x0bb", "trail  \n", "\x1b(Bz")


def marker(name: str) -> str:
    return f"@@{name}@@"


class MarkerFloat(float):
    """A number that waits like one but prints as a marker."""

    def __new__(cls, value: float, name: str) -> MarkerFloat:
        number = super().__new__(cls, value)
        number.name = name
        return number

    def __str__(self) -> str:
        return marker(self.name)

    __repr__ = __str__

    def __format__(self, spec: str) -> str:
        return marker(self.name)


class MarkerError(Exception):
    def __init__(self, name: str = "error") -> None:
        super().__init__(marker(name))


class Sock:
    """docker's exec socket: `_sock` is what the toolkit reads and writes."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock

    def close(self) -> None:
        self._sock.close()


class UnwritableSock:
    def __init__(self, sock: socket.socket) -> None:
        self._inner = sock

    def fileno(self) -> int:
        return self._inner.fileno()

    def recv(self, size: int) -> bytes:
        return self._inner.recv(size)

    def sendall(self, data: bytes) -> None:
        raise MarkerError()

    def close(self) -> None:
        self._inner.close()


class FakeAPI:
    """docker.APIClient: every exec follows the next planned behaviour (output, a gate to wait on, an error)."""

    def __init__(self, base_url: str | None = None, **_: Any) -> None:
        self.execs: dict[str, dict[str, Any]] = {}
        self.plan: list[dict[str, Any]] = []

    def exec_create(self, container: str, cmd: Any, **_: Any) -> dict[str, str]:
        behaviour = self.plan.pop(0) if self.plan else {}
        if "create_error" in behaviour:
            raise behaviour["create_error"]
        exec_id = f"exec{len(self.execs)}"
        self.execs[exec_id] = {"running": True, **behaviour}
        return {"Id": exec_id}

    def exec_start(self, exec_id: str, **kw: Any) -> Any:
        e = self.execs[exec_id]
        if kw.get("socket"):
            ours, theirs = socket.socketpair()
            e["process"] = theirs
            return Sock(UnwritableSock(ours) if e.get("unwritable") else ours)
        if e.get("gate") is not None:
            e["gate"].wait()
        e["running"] = False
        if "error" in e:
            raise e["error"]
        return e.get("output", b"")

    def exec_inspect(self, exec_id: str) -> dict[str, Any]:
        return {"Running": self.execs[exec_id]["running"], "Pid": 1, "ExitCode": 0}


class FakeSubprocess:
    """The module the toolkit runs `docker cp` through: succeeds, or raises a marker error."""

    CalledProcessError = subprocess.CalledProcessError
    PIPE, STDOUT, Popen = subprocess.PIPE, subprocess.STDOUT, subprocess.Popen

    def __init__(self) -> None:
        self.fail = False

    def run(self, argv: list[str], **_: Any) -> subprocess.CompletedProcess:
        if self.fail:
            raise MarkerError()
        return subprocess.CompletedProcess(argv, 0, "", "")


def fake_docker() -> types.SimpleNamespace:
    container = types.SimpleNamespace(id="container-id", name="container")
    client = types.SimpleNamespace(containers=types.SimpleNamespace(get=lambda name: container))
    return types.SimpleNamespace(APIClient=FakeAPI, from_env=lambda: client)


class Deriver:
    def __init__(self, toolkit: Any) -> None:
        self.tk = toolkit
        self.api: FakeAPI = toolkit.docker_api_client
        self.templates: dict[str, str] = {}

    def record(self, name: str, text: str, /, **fields: str) -> None:
        template = text.replace("{", "{{").replace("}", "}}")
        for field, value in fields.items():
            template = template.replace(value, "{" + field + "}")
        if "@@" in template or template.format(**fields) != text:
            raise SystemExit(f"{name}: {text!r} does not make a template")
        if self.templates.setdefault(name, template) != template:
            raise SystemExit(f"{name}: two different answers, {self.templates[name]!r} and {template!r}")

    def wait_for(self, predicate: Any) -> None:
        deadline = time.monotonic() + 10
        while not predicate():
            if time.monotonic() > deadline:
                raise SystemExit("the toolkit did not get where it was led")
            time.sleep(0.01)

    def drain(self, id: str) -> None:
        """Read a session's output until nothing more has come for a while (its reader lags on a loaded machine)."""
        deadline, quiet_since = time.monotonic() + 10, time.monotonic()
        while time.monotonic() - quiet_since < 0.3:
            if time.monotonic() > deadline:
                raise SystemExit("the toolkit's session did not go quiet")
            if not self.tk.shell_view(id).startswith("[No new output]"):
                quiet_since = time.monotonic()
            time.sleep(0.05)

    def overrun(self, id: str, **behaviour: Any) -> threading.Event:
        """A blocking command that outlives its timeout; setting the returned gate lets it finish."""
        gate = threading.Event()
        self.api.plan.append({"gate": gate, **behaviour})
        text = self.tk.shell_exec(id, "sleep", timeout=MarkerFloat(0.05, "timeout"))
        self.record("exec.timeout", text, id=id, timeout=marker("timeout"))
        return gate

    def finish(self, id: str, gate: threading.Event) -> None:
        gate.set()
        self.wait_for(lambda: not self.tk.shell_sessions[id]["exec_thread"].is_alive())

    def blocking(self) -> None:
        tk, id = self.tk, marker("id")
        self.api.plan.append({"output": b""})
        self.record("exec.no_output", tk.shell_exec(id, "true"))
        self.api.plan.append({"error": MarkerError()})
        self.record("exec.error", tk.shell_exec(id, "x"), error=marker("error"))
        gate = self.overrun(id, output=marker("output").encode())
        self.record("view.still_running", tk.shell_view(id))
        self.finish(id, gate)
        self.record("view.completed", tk.shell_view(id), output=marker("output"))
        self.record("view.terminated_empty", tk.shell_view(id))
        gate = self.overrun(id, output=b"")  # input to a blocking command: upstream fails after its drain
        text = tk.shell_write_to_process(id, "input")
        try:  # the error oc-repl reproduces: Python's own text for the socket that session does not have
            None._sock  # noqa: B018
        except AttributeError as exc:
            self.record("write.error", text.replace(str(exc), marker("error")), id=id, error=marker("error"))
        self.finish(id, gate)
        tk.shell_view(id)  # reports the end, which frees the id

    def sessions(self) -> None:
        tk, id = self.tk, marker("id")
        self.record("exec.session_started", tk.shell_exec(id, "cat", block=False), id=id)
        process: socket.socket = self.api.execs[tk.shell_sessions[id]["exec_id"]]["process"]
        self.record("exec.already_running", tk.shell_exec(id, "cat", block=False), id=id)
        self.record("view.idle", tk.shell_view(id))
        self.record("write.no_output", tk.shell_write_to_process(id, "x"), id=id)
        process.recv(4096)
        stop = threading.Event()

        def stream() -> None:  # one letter at a time: whatever the reads cut, the output is a run of that letter
            while not stop.is_set():
                process.sendall(b"x")
                time.sleep(0.02)

        streamer = threading.Thread(target=stream)
        streamer.start()
        # idle only after a second without a letter: a loaded machine's pauses must not pass for the end of output
        text = tk._collect_output_until_idle(id, idle_duration=1.0, max_wait=2.0)
        stop.set()
        streamer.join()
        text = marker("output") + text.lstrip("x")
        self.record("collect.still_outputting", text, output=marker("output"))
        self.drain(id)  # what is left of the stream
        output = "  " + marker("output") + "\n"
        process.sendall(output.encode())
        time.sleep(0.3)
        self.api.execs[tk.shell_sessions[id]["exec_id"]]["running"] = False
        process.close()
        self.wait_for(lambda: not tk.shell_sessions[id]["running"])
        self.record("view.terminated", tk.shell_view(id), output=output)
        self.record("view.terminated_empty", tk.shell_view(id))
        self.record("write.unknown", tk.shell_write_to_process(id, "x"), id=id)
        self.record("write.unknown", tk.shell_write_to_process(marker("other"), "x"), id=marker("other"))
        self.record("view.unknown", tk.shell_view(marker("other")), id=marker("other"))
        self.api.plan.append({"unwritable": True})
        tk.shell_exec(marker("id2"), "cat", block=False)
        self.record(
            "write.error", tk.shell_write_to_process(marker("id2"), "x"), id=marker("id2"), error=marker("error")
        )
        tk.shell_kill_process(marker("id2"))
        self.api.plan.append({"create_error": MarkerError()})
        self.record("exec.start_error", tk.shell_exec(marker("id3"), "cat", block=False), error=marker("error"))

    def files(self, sub: FakeSubprocess) -> None:
        tk, path = self.tk, marker("file_path")
        self.record("file.ok", tk.shell_write_content_to_file("x", path), file_path=path)
        sub.fail = True
        self.record("file.error", tk.shell_write_content_to_file("x", path), file_path=path, error=marker("error"))
        sub.fail = False
        # the wall limit, met by a parent-directory exec that never ends; the method's name is the field
        gate = threading.Event()
        self.api.plan.append({"gate": gate})
        tk.timeout = MarkerFloat(0.1, "timeout")
        text = tk.shell_write_content_to_file("x", "d/f")
        tk.timeout = 20.0
        gate.set()
        name = "shell_write_content_to_file"
        self.record("wrapper.timeout", text.replace(name, marker("function")), function=marker("function"),
                    timeout=marker("timeout"))  # fmt: skip

    def type_errors(self) -> None:
        """Python's messages for missing and unexpected keywords, as templates over the method's qualified name."""
        seen: list[tuple[str, list[str], str]] = []
        for tool, params in PARAMS.items():
            for given in itertools.chain.from_iterable(itertools.combinations(params, n) for n in range(len(params))):
                seen.append((tool, [p for p in params if p not in given], self.raised(tool, dict.fromkeys(given, "x"))))
            extra = {**dict.fromkeys(params, "x"), marker("name"): 1}
            seen.append((tool, [], self.raised(tool, extra)))
        qualified = seen[0][2].split("(", 1)[0]
        self.templates["qualname"] = qualified.replace(seen[0][0], "{tool}")
        for tool, missing, text in seen:
            text = text.replace(qualified.replace(seen[0][0], tool), marker("tool"))
            names = " and ".join(f"'{p}'" for p in missing)
            if not missing:
                self.record("typeerror.unexpected", text, tool=marker("tool"), name=marker("name"))
            elif len(missing) == 1:
                self.record("typeerror.missing_one", text, tool=marker("tool"), names=names)
            else:
                text = text.replace(f" {len(missing)} ", f" {marker('count')} ", 1)
                self.record("typeerror.missing_many", text, tool=marker("tool"), count=marker("count"), names=names)

    def raised(self, tool: str, arguments: dict[str, Any]) -> str:
        try:
            getattr(self.tk, tool)(**arguments)
        except TypeError as exc:
            return str(exc)
        raise SystemExit(f"{tool}({', '.join(arguments)}) raised nothing")


def chat_agent_texts() -> dict[str, str]:
    """What camel's ChatAgent puts before a tool result it cuts to its token budget: its real method, on an agent of
    the harness's defaults whose token counter reports a marker count for the result."""
    import inspect

    from camel.agents import ChatAgent

    tokens, limit = 987654, 246912  # counts no notice holds otherwise: they become the fields
    agent = ChatAgent.__new__(ChatAgent)
    agent.summarize_threshold = inspect.signature(ChatAgent.__init__).parameters["summarize_threshold"].default
    agent._token_limit = limit
    counter = types.SimpleNamespace(encode=lambda text: [0] * tokens)
    agent.model_backend = types.SimpleNamespace(token_counter=counter)
    text, cut = agent._truncate_tool_result(marker("name"), "")
    budget = int(limit * min(0.9, agent.summarize_threshold / 100))
    if not cut or str(tokens) not in text or str(budget) not in text:
        raise SystemExit(f"ChatAgent._truncate_tool_result did not cut as expected: {text!r}")
    template = text.replace("{", "{{").replace("}", "}}").replace(marker("name"), "{name}")
    template = template.replace(str(tokens), "{tokens}").replace(str(budget), "{limit}")
    if "@@" in template or template.format(name=marker("name"), tokens=tokens, limit=budget) != text:
        raise SystemExit(f"tool_result_truncated: {text!r} does not make a template")
    return {"tool_result_truncated": template, "threshold": str(agent.summarize_threshold)}


def main() -> None:
    work = tempfile.mkdtemp(prefix="oc-repl-camel-")
    os.environ["CAMEL_WORKDIR"] = os.path.join(work, "workspace")  # else the toolkit makes ./workspace
    logging.disable(logging.CRITICAL)  # the reader threads log the ends the stand-ins cause
    import camel.toolkits.terminal_toolkit.terminal_toolkit as module
    from camel.toolkits import FunctionTool

    module.docker, module.NotFound, module.APIError = fake_docker(), LookupError, RuntimeError
    module.subprocess = sub = FakeSubprocess()
    # as OpenClaw-RL's terminal-rl built it for training
    toolkit = module.TerminalToolkit(
        timeout=20.0,
        working_directory=None,
        use_docker_backend=True,
        docker_container_name="container",
        session_logs_dir=os.path.join(work, "logs"),
        safe_mode=False,
    )
    deriver = Deriver(toolkit)
    deriver.blocking()
    deriver.sessions()
    deriver.files(sub)
    deriver.type_errors()
    schemas = [FunctionTool(getattr(toolkit, name)).get_openai_tool_schema() for name in TOOLS]
    versions = {}
    for name in ("camel-ai", "rich"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    agent_texts = chat_agent_texts()
    result = {
        "chat_agent": {"tool_result_truncated": agent_texts["tool_result_truncated"]},
        "summarize_threshold": int(agent_texts["threshold"]),
        "templates": dict(sorted(deriver.templates.items())),
        "tools": "\n".join(json.dumps(schema) for schema in schemas),
        "probes": [[text, module._to_plain(text)] for text in PROBES],
        "versions": {"python": sys.version.split()[0], **versions},
    }
    with open(sys.argv[1], "w", encoding="utf-8") as out:
        json.dump(result, out, ensure_ascii=False)
    toolkit.cleanup()


if __name__ == "__main__":
    main()
