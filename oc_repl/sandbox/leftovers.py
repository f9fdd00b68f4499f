"""What the agent left running, found and stopped before a verifier runs: one sh script, run as root in the sandbox
(docker and Harbor's environments alike), and the reader of its report.

The script sees every process through /proc with shell builtins only, so that its own helpers never show up among
what it finds. Spared, never stopped: pid 1, the script itself and what runs it (its ancestors), the processes a
driver names as its own machinery, and on an attached container those that existed when the sandbox attached (their
pid and start time, `baseline_script`). Everything else is stopped with SIGSTOP first, scan after scan until no new
process appears (a loop that forks cannot outrun it), then described (command line, working directory, open files),
then killed. Processes the caller keeps (the protocol's own terminal) and their ancestors (its tmux server) are
stopped like the rest but not reported: they are not evidence of anything the model did.
"""

from __future__ import annotations

import base64
import re
import shlex
from collections.abc import Iterable

from oc_repl.errors import SandboxError
from oc_repl.types import Leftover

MAX_ROUNDS = 50  # scans that find new processes; a fork bomb faster than SIGSTOP is beyond a sandbox's honesty
MAX_FILES = 32  # open files named per process
PROGRAM = 65536  # bytes read of the script an interpreter runs
# Open files that say nothing: devices, /proc, and oc-repl's own pid directories (a command's output pipe).
NOT_EVIDENCE = ("/dev/", "/proc/", "/tmp/.oc-repl")

_SCAN = r"""
ocr_scan() {
  new=
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    case "$SPARE$T" in *" $p "*) continue ;; esac
    read -r s < "$d/stat" || continue
    set -- ${s##*) }
    [ "$1" = Z ] && [ "${18}" -le 1 ] && continue
    case "$BASE" in *" $p:${20} "*) continue ;; esac
    case "$KIDS" in *" $2 "*) case "$CMDS" in *" $p:${20} "*) ;; *) continue ;; esac ;; esac
    new="$new$p "
  done
}
"""

_BODY = r"""
i=0
for f in $WAIT; do while [ ! -s "$f" ] && [ $i -lt 200 ]; do sleep 0.01; i=$((i + 1)); done; done
p=$$
while read -r s < "/proc/$p/stat"; do set -- ${s##*) }; p=$2; [ "$p" -gt 1 ] || break; SPARE="$SPARE$p "; done
T=" " i=0
while [ $i -lt MAX_ROUNDS ]; do
  ocr_scan
  [ -n "$new" ] || break
  T="$T$new" i=$((i + 1))
  [ "$STOP" = 1 ] || break
  kill -STOP $new
done
K=" "
for k in $KEEP; do
  p=$k
  while [ "$p" -gt 1 ] 2>/dev/null; do
    K="$K$p "; read -r s < "/proc/$p/stat" || break; set -- ${s##*) }; p=$2
  done
done
for p in $T; do
  case "$K" in *" $p "*) continue ;; esac
  read -r s < "/proc/$p/stat" || continue; set -- ${s##*) }; n=${18}; q=/proc/$p
  if [ "$1" = Z ]; then for t in /proc/$p/task/*; do [ "${t##*/}" = "$p" ] || { q=$t; break; }; done; fi
  c=$(base64 -w0 < "$q/cmdline"); w=$(readlink "$q/cwd" | base64 -w0)
  f=$(for x in $q/fd/*; do readlink "$x"; done | base64 -w0)
  a=$(tr '\0' '\n' < "$q/cmdline" | head -n 1); g=
  case ${a##*/} in python* | bash | sh | dash | perl* | node | ruby*)
    x=$(tr '\0' '\n' < "$q/cmdline" | sed -n '2,$p' | grep -v '^-' | head -n 1)
    case $x in /*) ;; ?*) x="$q/cwd/$x" ;; esac
    [ -n "$x" ] && [ -f "$x" ] && g=$(head -c PROGRAM "$x" | base64 -w0) ;;
  esac
  echo "@@OCR:$M:p:$p:$c:$w:$f:$n:$g@@"
done
if [ "$STOP" = 1 ] && [ "$T" != " " ]; then
  kill -KILL $T
  i=0
  while [ $i -lt 300 ]; do
    left=
    for p in $T; do
      read -r s < "/proc/$p/stat" || continue; set -- ${s##*) }; { [ "$1" = Z ] && [ "${18}" -le 1 ]; } || left=1
    done
    [ -n "$left" ] || break
    sleep 0.01; i=$((i + 1))
  done
  [ -z "$left" ] || echo "@@OCR:$M:alive@@"
fi
echo "@@OCR:$M:done@@"
""".replace("MAX_ROUNDS", str(MAX_ROUNDS)).replace("PROGRAM", str(PROGRAM))


# Every process but pid 1 and this script's own, killed by one kill(-1) (the kernel signals them all at once: none can
# fork away meanwhile), again until none that can still act is left (a zombie is done; a zombie-led process whose other
# threads run is not), or a hundred rounds; prints how many are left.
END_ALL = r"""
i=0
while :; do
  kill -9 -1 2>/dev/null
  n=0
  for d in /proc/[0-9]*; do
    p=${d#/proc/}; { [ "$p" = 1 ] || [ "$p" = $$ ]; } && continue
    read -r s < "$d/stat" 2>/dev/null || continue; set -- ${s##*) }
    { [ "$1" = Z ] && [ "${18}" -le 1 ]; } || n=$((n + 1))
  done
  i=$((i + 1)); { [ $n -eq 0 ] || [ $i -ge 100 ]; } && break
  sleep 0.01
done
echo $n
"""


def _words(pids: Iterable[int | str]) -> str:
    return " " + "".join(f"{p} " for p in pids)


def script(
    marker: str,
    *,
    stop: bool,
    keep: Iterable[int] = (),
    spare: Iterable[int] = (),
    spare_children: Iterable[int] = (),
    commands: Iterable[str] = (),
    baseline: Iterable[str] = (),
    started: Iterable[str] = (),
) -> str:
    """sh that stops (or, without `stop`, only lists) the processes the sandbox's commands left.

    `started`: pid files of commands that may still be starting (an exec the daemon has not spawned yet), waited
    for (2 s at most in all) so that none starts after the scan.

    `spare`: pids never touched; `spare_children`: pids whose children are spared (a channel's server: its relay and
    the launcher it made ready), but for the `commands` ("pid:starttime": a launcher running a command is the agent's
    command); `baseline`: "pid:starttime" of processes to leave alone.
    """
    values = {
        "M": marker,
        "STOP": "1" if stop else "0",
        "SPARE": _words([1, "$$", *spare]),
        "KIDS": _words(spare_children),
        "CMDS": _words(commands),
        "BASE": _words(baseline),
        "KEEP": " ".join(str(int(p)) for p in keep),
    }
    head = "exec 2>/dev/null\n" + "\n".join(f'{name}="{value}"' for name, value in values.items())
    head += "\nWAIT=" + shlex.quote(" ".join(started))
    return head + _SCAN + _BODY


def baseline_script(marker: str) -> str:
    """sh printing `@@OCR:<marker>:b:<pid>:<starttime>@@` for every process now running."""
    return (
        f'for d in /proc/[0-9]*; do read -r s < "$d/stat" 2>/dev/null || continue; set -- ${{s##*) }}; '
        f'echo "@@OCR:{marker}:b:${{d#/proc/}}:${{20}}@@"; done'
    )


def parse_baseline(text: str, marker: str) -> list[str]:
    return [f"{pid}:{start}" for pid, start in re.findall(rf"^@@OCR:{marker}:b:(\d+):(\d+)@@$", text, re.M)]


def _decoded(field: str) -> str:
    try:
        return base64.b64decode(field).decode("utf-8", "replace")
    except ValueError:
        return ""


def parse(text: str, marker: str) -> list[Leftover]:
    """The processes the script reported; SandboxError when it did not finish (the sandbox may not be quiet)."""
    if not re.search(rf"^@@OCR:{marker}:done@@$", text, re.M):
        raise SandboxError(
            f"the processes left in the sandbox could not be stopped: {text.strip()[-300:] or 'no output'}"
        )
    if re.search(rf"^@@OCR:{marker}:alive@@$", text, re.M):
        raise SandboxError("processes left in the sandbox were still running after SIGKILL")
    found = []
    records = re.findall(rf"^@@OCR:{marker}:p:(\d+):([^:]*):([^:]*):([^:@]*):(\d*):([^:@]*)@@$", text, re.M)
    for pid, command, cwd, files, threads, program in records:
        argv = _decoded(command).rstrip("\0").split("\0")
        held = [f for f in _decoded(files).splitlines() if f.startswith("/") and not f.startswith(NOT_EVIDENCE)]
        found.append(
            Leftover(
                pid=int(pid),
                command=" ".join(argv),
                cwd=_decoded(cwd).strip("\n"),
                files=sorted(set(held))[:MAX_FILES],
                threads=int(threads or 1),
                program=_decoded(program),
            )
        )
    return found
