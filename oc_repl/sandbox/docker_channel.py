"""A persistent channel into a container: one long-lived `docker exec` of a small bash server that runs each command
it is sent as a fresh `bash -c`. A command then costs a write and a read on an open socket, not an exec through the
Engine API (about 40 ms each).

What the command gets is what an exec of its own gives it: `bash -c` found on the container's PATH; the environment
the daemon gave the server (read back from /proc/$$/environ and exported again over whatever the shells in between set
or changed; `exec` passes no `_`) plus the command's own; the working directory; stdin from /dev/null; default signal
dispositions; fds 0-2 only; its own session and process group (setsid). The shell that becomes the command, the
launcher, is started ahead of time, after the previous command, so its fork and setsid are not waited for: it waits
on a FIFO for its command and execs `bash -c`. The server, which read the launcher's pid and start time when it
started it (setsid execs without a fork in a process that leads no group, so both stay the command's), writes them
to the pid file while the launcher goes on (as the prefix of docker_exec.py does for an exec of its own, so timeouts
and close() find the command's group the same way). It reports the command started before it sends it on: output
that came before that record would be taken for the server's. Only bash
(4.1 or later) and coreutils are needed; setsid is checked for, and without it (or without the working directory)
the server declines: the command gets an exec of its own. Server variables that an environment could also hold are
restored by that export; its loop variable and arrays have names of their own. The server and the launchers start
with `--posix`, so that an image's BASH_ENV is not run in them; the commands, plain `bash -c`, still run it. A `ps`
in the container shows, besides the commands, each channel's server, its idle launcher and the `cat` of its relay.

The protocol, one command at a time per channel. The client writes a request: the length of its header in 8 digits, the
header `nonce len(blob) len(cwd) len(script) len(pidfile) len(path) len(env entry)...`, those strings, the blob (the
text of a command too long for one argument, written to `path`), and a final `.`: a request cut short is never run.
Lengths let bash read each part with one `read -N` (a line is read a byte at a time). The server answers on stdout with
records `RS nonce word RS LF` (RS = 0x1e): `fallback <server pid>` (nothing was started), or `ok <server pid> <launcher
pid> <its start time>`, then the command's output, then `end <status>`. The nonce is fresh per command and never shown
to it, so no output can pass for a record. Stdout and stderr share one pipe (arrival order is kept), a FIFO the server
also holds open, relayed by a `cat`; both are made ready with the launcher (`ready` makes all three anew, on new FIFOs,
if a command killed the `cat` or the launcher: the launcher is the pipe's only writer, so either death ends the `cat`).
When the command has ended but a background child still holds the pipe after the grace, the relay is replaced by a `cat`
to /dev/null (the child writes on unharmed, unseen, as a finished command's late output is today) and the end is
reported.
"""

from __future__ import annotations

import contextlib
import struct
import threading
import uuid

from oc_repl.errors import SandboxError, SandboxLost
from oc_repl.sandbox.docker_channel_sh import BOOT, LAUNCH, SERVER
from oc_repl.sandbox.docker_exec import (
    EXIT_GRACE,
    PID_DIR,
    WORK_SUBDIR,
    Container,
    RecordedProcess,
    command_script,
    new_token,
)

# A busy channel (a command that outran its timeout keeps it) is joined by another, up to this many per sandbox.
MAX_CHANNELS = 4
# How long a command waits for the server to take it. Only a stopped or starved server is this slow; the command is
# then reported as ended without a status (never run twice), and the sandbox goes on without channels.
ACCEPT_WAIT = 30.0
_FRAME = struct.Struct(">BxxxI")  # the multiplexed stream of a non-tty exec: stream (1 stdout, 2 stderr), size
_RS = b"\x1e"


def encode_request(
    nonce: bytes, cwd: str, script: str, pidfile: str, path: str, blob: bytes, env: dict[str, str]
) -> bytes | None:
    """The request for one command, or None if it cannot travel this way (a NUL byte, text that is not UTF-8)."""
    try:
        fields = [cwd.encode(), script.encode(), pidfile.encode(), path.encode()]
        fields += [f"{name}={value}".encode() for name, value in env.items()]
    except UnicodeEncodeError:
        return None
    if any(b"\0" in field for field in fields):
        return None
    header = b" ".join([nonce, str(len(blob)).encode(), *(str(len(field)).encode() for field in fields)])
    return b"%08d" % len(header) + header + b"".join(fields) + blob + b"."


class ChannelProcess(RecordedProcess):
    """A command running through a channel; the channel's reader fills its buffer and reports its end."""

    def __init__(self, box: Container, token: str, limit: int) -> None:
        super().__init__(box, token, limit)
        self._ended = threading.Event()
        self._status: int | None = None
        self._lost = False  # the channel broke while the command ran: its status is unknown
        self._checked = False

    def output(self, data: bytes) -> None:
        self._buffer.write(data)

    def finish(self, status: int | None, lost: bool = False) -> None:
        self._status, self._lost = status, lost
        self._ended.set()

    def _settle(self) -> None:
        """A container that stops SIGKILLs everything in it, which also breaks the channel: ask whether it runs."""
        if not self._checked and (self._lost or self._status == 137):
            self._checked = True
            self._box.check_running()

    def alive(self) -> bool:
        if not self._ended.is_set():
            return True
        self._settle()
        return False

    def wait(self, timeout: float) -> bool:
        """True once the command has ended and its output is drained (the server waits EXIT_GRACE at most for a
        background child that still holds the output)."""
        if not self._ended.wait(max(0.0, timeout)):
            return False
        self._settle()
        return True

    @property
    def exit_code(self) -> int | None:
        return None if self.alive() else self._status


class Channel:
    """One server exec and the thread that reads its answers; one command at a time."""

    def __init__(self, pool: ChannelPool, box: Container) -> None:
        self._pool = pool
        fifo = f"{box.pid_dir}/{WORK_SUBDIR}/channel-{new_token()}"
        dirs = [PID_DIR, box.pid_dir, f"{box.pid_dir}/{WORK_SUBDIR}"]
        argv = ["bash", "--posix", "-c", BOOT, "oc-repl-channel", fifo, f"{EXIT_GRACE:g}", *dirs]
        api = box.api
        exec_id = box.call(api.exec_create, box.id, argv, stdin=True, environment={"TERM": "dumb"}, user=box.user)["Id"]
        self._wrapped = box.call(api.exec_start, exec_id, socket=True)  # kept: it owns the socket
        self._sock = getattr(self._wrapped, "_sock", self._wrapped)
        self._sock.settimeout(None)  # the docker client's request timeout would end an idle channel
        self._sock.sendall(SERVER.encode() + LAUNCH.encode())
        self.server_pid: int | None = None
        self.launcher = ""  # "pid:start" of the launcher running the command (it becomes the command), while one runs
        self.broken = False
        self._lock = threading.Lock()
        self._proc: ChannelProcess | None = None
        self._mark = b""  # RS nonce SP: the start of the current command's records
        self._held = b""  # the end of the output so far, while it may be the start of a record
        self._started = False
        self._answer = ""
        self._answered = threading.Event()
        threading.Thread(target=self._read, name="oc-repl-channel", daemon=True).start()

    def start(self, proc: ChannelProcess, nonce: bytes, request: bytes) -> str:
        """Send one command: "ok" (it runs), "fallback" (it was not started) or "lost" (unknown: never rerun it)."""
        with self._lock:
            if self.broken:
                return "fallback"
            self._proc, self._mark, self._held, self._started = proc, _RS + nonce + b" ", b"", False
            self._answered.clear()
        try:
            self._sock.sendall(request)
        except OSError:
            self.close()  # the reader sees the end and answers: a partial request is never run
        if self._answered.wait(ACCEPT_WAIT):
            return self._answer
        with self._lock:
            if self._answered.is_set():
                return self._answer
            # The server may still take it later: from here on nothing may answer "fallback" and run it twice.
            self._proc, self._mark, self.broken = None, b"", True
        self.close()
        proc.finish(None, lost=True)
        return "lost"

    def close(self) -> None:
        self.broken = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(2)

    # --- the reader thread -----------------------------------------------------------------------------------------

    def _read(self) -> None:
        data = bytearray()
        try:
            while chunk := self._sock.recv(1 << 16):
                data += chunk
                offset = 0
                while len(data) - offset >= _FRAME.size:
                    stream, size = _FRAME.unpack_from(data, offset)
                    end = offset + _FRAME.size + size
                    if len(data) < end:
                        break
                    if stream == 1:  # stderr carries only the server's own complaints
                        self._stdout(bytes(data[offset + _FRAME.size : end]))
                    offset = end
                del data[:offset]
        except OSError:
            pass
        finally:
            self._gone()

    def _stdout(self, data: bytes) -> None:
        # Under the lock: once a command's end is seen the channel is back in the pool, and the next command may be
        # set up on it only after this chunk is done with.
        with self._lock:
            buf = self._held + data
            while self._mark:
                start = buf.find(self._mark)
                if start < 0:
                    break
                stop = buf.find(_RS + b"\n", start + len(self._mark))
                if stop < 0:
                    self._emit(buf[:start])
                    self._held = buf[start:]
                    return
                self._emit(buf[:start])
                words = buf[start + len(self._mark) : stop].decode("ascii", "replace").split()
                buf = buf[stop + 2 :]
                self._record(words)
            # Hold back a tail that may be the start of a record; anything else is output, shown at once.
            hold = buf.rfind(_RS, max(0, len(buf) - len(self._mark) + 1)) if self._mark else -1
            if hold < 0 or not self._mark.startswith(buf[hold:]):
                hold = len(buf)
            self._emit(buf[:hold])
            self._held = buf[hold:]

    def _emit(self, data: bytes) -> None:
        if data and self._proc is not None and self._started:
            self._proc.output(data)

    def _record(self, words: list[str]) -> None:
        word, arg = (words + ["", ""])[:2]
        if word in ("ok", "fallback") and arg.isdigit():
            self.server_pid = int(arg)
        if word == "ok":
            self._started = True
            self.launcher = ":".join(words[2:4]) if len(words) >= 4 else ""
            self._answer_with("ok")
        elif word in ("fallback", "end"):
            proc = self._proc
            self._proc, self._mark, self._started, self.launcher = None, b"", False, ""
            # back in the pool before the caller learns of the end: its next command takes this channel
            self._pool.release(self)
            if word == "fallback":
                self._answer_with("fallback")
            elif proc is not None:
                proc.finish(int(arg) if arg.lstrip("-").isdigit() else None)

    def _answer_with(self, answer: str) -> None:
        self._answer = answer
        self._answered.set()

    def _gone(self) -> None:
        with self._lock:
            self.broken = True
            proc, started = self._proc, self._started
            self._proc, self._mark = None, b""
            if proc is not None and not started:
                self._answer_with("fallback")  # the server announces a command before it starts it
        self._pool.discard(self)
        if proc is not None and started:
            proc.finish(None, lost=True)


class ChannelPool:
    """A sandbox's channels, started when first needed. Once one breaks (its server was killed, the container
    restarted), the sandbox runs every command with an exec of its own, as it would without channels."""

    def __init__(self, box: Container) -> None:
        self._box = box
        self._lock = threading.Lock()
        self._idle: list[Channel] = []
        self._all: list[Channel] = []
        self._opening = 0
        self.broken = False
        self._closed = False

    def spawn(self, command: str, cwd: str, env: dict[str, str]) -> ChannelProcess | None:
        """`command` started through a channel, or None when it must be run another way (nothing was started)."""
        box = self._box
        token = new_token()
        script, path = command_script(box.pid_dir, token, command, record=False)
        nonce = uuid.uuid4().hex.encode()
        try:  # what cannot travel as UTF-8 without NUL goes the old way, and fares as it always did there
            text = command.encode()
        except UnicodeEncodeError:
            return None
        request = encode_request(nonce, cwd, script, f"{box.pid_dir}/{token}", path, text if path else b"", env)
        if request is None or b"\0" in text:
            return None
        channel = self._take()
        if channel is None:
            return None
        proc = ChannelProcess(box, token, box.output_limit)
        return proc if channel.start(proc, nonce, request) in ("ok", "lost") else None

    def _take(self) -> Channel | None:
        with self._lock:
            if self.broken or self._closed:
                return None
            if self._idle:
                return self._idle.pop(0)  # the longest idle: its server has made the next launcher ready
            if len(self._all) + self._opening >= MAX_CHANNELS:
                return None
            self._opening += 1
        try:
            channel = Channel(self, self._box)
        except SandboxLost:
            raise
        except SandboxError:  # the daemon refused the exec: commands get one of their own, as they would anyway
            with self._lock:
                self.broken = True
            return None
        finally:
            with self._lock:
                self._opening -= 1
        with self._lock:
            self._all.append(channel)
            if self._closed:
                channel.close()
                return None
        return channel

    def release(self, channel: Channel) -> None:
        with self._lock:
            if not (self.broken or self._closed or channel.broken):
                self._idle.append(channel)
                return
        channel.close()

    def discard(self, channel: Channel) -> None:
        """A channel ended: from now on, commands get an exec of their own."""
        with self._lock:
            self.broken = True
            idle, self._idle = self._idle, []
            if channel in self._all:
                self._all.remove(channel)
        for other in idle:
            other.close()

    def servers(self) -> tuple[list[int], list[str]]:
        """The pids of the live channels' servers, and the launchers ("pid:start") of the commands they run: a server's
        other children (its relay, the launcher it made ready for the next command) are the channel's own. Told by
        the servers' own reports, never by what a process in the container calls itself."""
        with self._lock:
            channels = [c for c in self._all if c.server_pid is not None and not c.broken]
        return [c.server_pid for c in channels], [c.launcher for c in channels if c.launcher]  # type: ignore[misc]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            channels, self._idle = list(self._all), []
        for channel in channels:
            channel.close()
