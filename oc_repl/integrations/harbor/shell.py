"""The bash the Harbor sandbox runs through an environment's `exec`, and the reports it reads back.

Harbor's `exec` is one `bash -c` per call with no terminal and no stdin; it waits for the command's output stream to
close, lets a command it timed out go on running, caps nothing, and (on docker) merges stderr into stdout while
other environments keep them apart. So nothing the model runs is ever attached to an exec. Each model command runs
detached in the environment, its stdout and stderr appended to one file, and later execs look at it:

- `$f.cmd` holds the command; a *runner* (`bash -c RUNNER ocr $f`, started by `setsid`, so it leads its own session
  and process group) records its pid and start time in `$f.pid`, runs `bash -c COMMAND`, then writes the exit status
  to `$f.rc` and a line to the FIFO `$f.ev`, which wakes whoever waits for the end (`read -t` on the FIFO: no polling);
- with a terminal, the runner runs under util-linux `script`, which gives it a pty whose input is the FIFO `$f.in`;
- a look reports the state and, when asked, the unread output as base64 (exact bytes whatever the environment does to
  text): all of it, or its first and last `half` bytes with the middle dropped, as CappedBuffer keeps output. Bytes
  that can never be shown again are freed in the file (`fallocate --punch-hole`, where the filesystem can), so a
  chatty command fills the disk only between two looks.

Every report is framed by markers carrying a fresh token, so nothing else an environment prints can be taken for one.
"""

from __future__ import annotations

import base64
import re
import shlex
from dataclasses import dataclass
from typing import Protocol

ROOT = "/tmp/.oc-repl-harbor"  # one subdirectory per sandbox; world-writable (1777) as commands may run as any user
TOOLS = ("setsid", "base64", "head", "tail", "wc", "mkfifo")  # besides bash, which Harbor's own exec needs
INLINE_COMMAND = 48 * 1024  # bytes of a command carried in the exec's own script (base64 grows it by a third)

_RUNNER = (
    'read -r -a s < /proc/$$/stat; echo "$$ ${s[21]}" > "$1.pid"; unset s; '
    # `bash -c COMMAND` as the model's commands always run; one too long for a single argument goes through eval
    'if [ "$(wc -c < "$1.cmd")" -lt 100000 ]; then c=$(cat -- "$1.cmd"; echo .); bash -c "${c%.}"; '
    """else bash -c 'eval "$(cat <&9)" 9<&-' 9< "$1.cmd"; fi; """
    'echo $? > "$1.rc"; echo 1<> "$1.ev"'
)

# ocr_look WAIT OFFSET HALF CONSUME: wait up to WAIT seconds for the end, then report the state; the output from
# OFFSET on goes with the report when CONSUME is 1 or the command has ended.
_LOOK = r"""
ocr_alive() {
  local p t s
  read -r p t < "$f.pid" || return 1
  read -r s < "/proc/$p/stat" || return 1
  set -- ${s##*) }
  [ "$1" != Z ] && [ "${20}" = "$t" ]
}
ocr_look() {
  local st=running rc=- n x
  if [ ! -s "$f.rc" ] && ocr_alive; then
    if [ -p "$f.ev" ]; then exec 3<> "$f.ev"; [ -s "$f.rc" ] || read -r -t "$1" _ <&3; exec 3<&-; else sleep "$1"; fi
  fi
  if [ -s "$f.rc" ]; then st=done; read -r rc < "$f.rc"; elif ! ocr_alive; then st=gone; fi
  n=$(wc -c < "$f.out"); n=${n//[!0-9]/}; n=${n:-0}
  echo "@@OCR:$M:$st:$rc:$n@@"
  x=$((n - $2))
  if [ "$4" = 1 ] || [ $st != running ]; then
    if [ $x -gt $((2 * $3)) ]; then
      tail -c +$(($2 + 1)) "$f.out" | head -c $3 | base64; echo "@@OCR:$M:tail@@"
      tail -c +$((n - $3 + 1)) "$f.out" | head -c $3 | base64
    else
      [ $x -gt 0 ] && tail -c +$(($2 + 1)) "$f.out" | head -c $x | base64; echo "@@OCR:$M:tail@@"
    fi
    echo "@@OCR:$M:end@@"
    [ $n -gt 0 ] && fallocate -p -o 0 -l $n "$f.out"
  elif [ $x -gt $((2 * $3)) ]; then
    fallocate -p -o $(($2 + $3)) -l $((x - 2 * $3)) "$f.out"
  fi
  return 0
}
"""


def _head(marker: str, path: str = "") -> str:
    where = f" f={shlex.quote(path)};" if path else ""
    return f"exec 2>/dev/null; M={marker};{where}"


def setup(directory: str, workdir: str, marker: str) -> str:
    """Make the sandbox's directory and the working directory; report the tools missing (a directory that could not
    be made counts as one) and the default working directory."""
    d, w = shlex.quote(directory), shlex.quote(workdir)
    checks = " ".join([*TOOLS, "script"])
    return (
        f'{_head(marker)} m=; for t in {checks}; do command -v $t >/dev/null || m="$m $t"; done; '
        f'mkdir -p {d}; chmod 1777 {ROOT} {d}; [ -d {d} ] && [ -w {d} ] || m="$m {d}"; '
        f'[ -d {w} ] || mkdir -p {w} || m="$m {w}"; '
        'echo "@@OCR:$M:$m:$(pwd)@@"'
    )


def start(
    path: str,
    marker: str,
    *,
    command: bytes | None,
    cwd: str,
    env: dict[str, str],
    tty: bool,
    wait: float,
    half: int,
) -> str:
    """Start a command detached (its text inline, or already uploaded to `$f.cmd` when `command` is None), then look
    at it once after waiting up to `wait` seconds for its end."""
    q = shlex.quote
    lines = [_head(marker, path), _LOOK, 'mkdir -p "${f%/*}"; mkfifo -m 666 "$f.ev"; : > "$f.out"']
    if command is not None:
        lines.append(f'echo {base64.b64encode(command).decode()} | base64 -d > "$f.cmd"')
    lines.append(f'cd -- {q(cwd)} || {{ echo "@@OCR:$M:nocwd:-:0@@"; exit 0; }}')
    lines += [f"export {name}={q(value)}" for name, value in env.items()]
    runner = shlex.join(["bash", "-c", _RUNNER, "ocr", path])
    if tty:
        # `script` runs its command with $SHELL -c; `exec` makes the runner the pty session's leader itself
        lines.append('mkfifo -m 666 "$f.in"')
        lines.append(f'setsid script -qfec {q("exec " + runner)} /dev/null <> "$f.in" >> "$f.out" 2>&1 &')
    else:
        lines.append(f'setsid {runner} < /dev/null >> "$f.out" 2>&1 &')
    # the pid is on record before this exec returns, so a kill can always find the command
    lines.append('i=0; until [ -s "$f.pid" ] || [ -s "$f.rc" ] || [ $i -ge 1000 ]; do sleep 0.01; i=$((i+1)); done')
    lines.append(f"ocr_look {wait:.3f} 0 {half} 0")
    return "\n".join(lines)


def runs_a_command(command: str, directory: str) -> bool:
    """Whether a process's command line (words joined by spaces) is one of this sandbox's runners, or the `script`
    giving one a terminal: machinery, whose child is the model's command (reported as itself)."""
    runner = re.escape(shlex.join(["bash", "-c", _RUNNER, "ocr", "@"])).replace(
        "@", f"{re.escape(directory)}/[0-9a-f]+"
    )
    plain = re.escape(" ".join(["bash", "-c", _RUNNER, "ocr", "@"])).replace("@", f"{re.escape(directory)}/[0-9a-f]+")
    return bool(re.fullmatch(plain, command) or re.fullmatch(rf"script -qfec exec {runner} /dev/null", command))


def look(path: str, marker: str, *, wait: float, offset: int, half: int, consume: bool) -> str:
    return f"{_head(marker, path)}\n{_LOOK}\nocr_look {wait:.3f} {offset} {half} {int(consume)}"


def kill(path: str, marker: str, *, offset: int, half: int, kill_group: str) -> str:
    """SIGKILL the command's group and session, wait (briefly) for the runner to be gone, wake a look still waiting
    for the end (one whose exec was given up on: the runner killed, nothing else would), then take its output."""
    return (
        f"{_head(marker, path)}\n{_LOOK}\n{kill_group}\n"
        "i=0; while ocr_alive && [ $i -lt 200 ]; do sleep 0.01; i=$((i+1)); done\n"
        '[ -p "$f.ev" ] && echo 1<> "$f.ev"\n'
        f"ocr_look 0 {offset} {half} 1"
    )


def write(path: str, marker: str, data: bytes) -> str:
    """Input to a terminal process. The FIFO is opened read-write, so the open never blocks, even with no reader."""
    return (
        f"{_head(marker, path)}\n{_LOOK}\n"
        f'ocr_alive || {{ echo "@@OCR:$M:gone@@"; exit 0; }}\n'
        f'echo {base64.b64encode(data).decode()} | base64 -d 1<> "$f.in" && echo "@@OCR:$M:sent@@"'
    )


def close(directory: str, kill_each: str) -> str:
    """Kill what every command of the sandbox left running (`kill_each` reads the pid file `$p`), wake any look still
    waiting for an end, then clean up."""
    d = shlex.quote(directory)
    wake = f'for e in {d}/*.ev; do [ -p "$e" ] && echo 1<> "$e"; done'
    return f'exec 2>/dev/null; for p in {d}/*.pid; do [ -e "$p" ] || continue; {kill_each}; done; {wake}; rm -rf {d}'


@dataclass
class Report:
    state: str  # running | done | gone | nocwd
    exit_code: int | None
    size: int  # the output file's length: bytes written so far
    head: bytes | None = None  # the output read with the look, if any
    tail: bytes | None = None  # set when the middle was dropped


def status(text: str, marker: str) -> list[str] | None:
    """The fields of the first `@@OCR:<marker>:...@@` line, or None."""
    found = re.search(rf"^@@OCR:{marker}:(.*)@@$", text, re.M)
    return found.group(1).split(":") if found else None


def parse(text: str, marker: str) -> Report | None:
    """A look's report, or None when the exec did not get as far as reporting."""
    fields = status(text, marker)
    if fields is None or len(fields) < 3 or not fields[2].isdigit():
        return None
    state, rc, size = fields[0], fields[1], int(fields[2])
    report = Report(state, int(rc) if rc.lstrip("-").isdigit() else None, size)
    frame = rf"^@@OCR:{marker}:[^\n]*@@\n(.*?)^@@OCR:{marker}:tail@@\n(.*?)^@@OCR:{marker}:end@@$"
    body = re.search(frame, text, re.M | re.S)
    if body is not None:
        report.head = base64.b64decode("".join(body.group(1).split()))
        tail = "".join(body.group(2).split())
        report.tail = base64.b64decode(tail) if tail else None
    elif state != "running" and state != "nocwd":
        return None  # an ended command's report always carries its output
    return report


def elapsed(text: str, marker: str) -> float:
    """Seconds between the two times of bash's EPOCHREALTIME a record holds (0 without one: a bash before 5)."""
    found = re.search(rf"^@@OCR:{marker}:(\d+[.,]\d+):(\d+[.,]\d+)@@$", text, re.M)
    return float(found[2].replace(",", ".")) - float(found[1].replace(",", ".")) if found else 0.0


def escapable(text: str) -> bool:
    try:
        text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate a model's JSON may hold: its bytes, as Python would write them
        return False
    return True


class Scripts(Protocol):
    """What a process and a look need of the environment they run in (environment.py: HarborSandbox): a script run
    through it, a process's report read, and half the output a result keeps."""

    half: int

    def run_script(self, script: str, wait: float = 0.0, user: str | None = None) -> str: ...

    def report(self, script: str, marker: str, wait: float = 0.0, user: str | None = None) -> Report: ...
