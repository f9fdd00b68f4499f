"""tmux in a sandbox whose calls are costly (Harbor's environments, docker without its channel): one call a command.

TmuxTerminal looks at the shell from outside, a call per look, which is right where a call costs milliseconds. Where
one costs a good part of a second, a small helper (HELPER, bash) goes into the sandbox with the terminal's first call,
and each command is then one call: it sends the keys, waits *inside* the sandbox by the same rules (tmux.py: `Typed`,
`_shell_idle`, `_at_prompt`, idle twice in a row with the same screen) or until `min(duration, 60)` has passed, and
answers with its last look and, when an observation follows, the scrollback and the screen of that moment. Starting
the terminal is that one call too: tmux looked for, the helper written, the session started and waited for, the first
screens taken.

What the helper judged idle is judged again here by the Python rules (a shell whose locale counts a row's characters
otherwise could disagree on the prompt): where they differ the wait goes on with another call, so it never ends
before the rules say it may. A helper the model deleted is written again with the next call.
"""

from __future__ import annotations

import re
import shlex
import time
import uuid
from dataclasses import dataclass, field

from oc_repl.errors import SandboxError
from oc_repl.protocols.terminus.keys import deliverable
from oc_repl.protocols.terminus.tmux import (
    MAX_WAIT,
    POLL,
    STARTUP_WAIT,
    NoTmux,
    Probe,
    TmuxTerminal,
    _failure,
    _number,
    judge,
    read_count,
)
from oc_repl.types import Sandbox

HELPER_DIR = "/tmp"  # a dot-file there: `rm -rf /tmp/*` leaves it, and the next call writes it again if it went
CALL_MARGIN = 30.0  # seconds a call may take beyond the wait it was asked for
_EOF = "OC_REPL_TERMINAL_HELPER"

# The caller sets M (the answer's marker), P (the pane's shell), T (tmux with its socket), BASE and OWED (`Typed`) and
# defines ocr_keys (what types the keys). Times are in microseconds. Reports are lines `@@OCR:$M:NAME[:FIELDS]@@`.
# A nap is a `read -t` on a pipe nothing writes to: no `sleep` process every poll, which a loaded sandbox feels.
HELPER = r"""
ocr_now() { if [ -n "${EPOCHREALTIME:-}" ]; then now=${EPOCHREALTIME/[.,]/}; else now=$(date +%s%6N); fi; }
ocr_nap() {
  local us; [ "$1" -gt 0 ] || return 0; printf -v us %06d $(($1 % 1000000))
  [ -n "${OCR_FD:-}" ] || { exec {OCR_FD}<> <(:); } 2>/dev/null || OCR_FD=-
  if [ "$OCR_FD" = - ]; then sleep "$(($1 / 1000000)).$us"; else read -r -t "$(($1 / 1000000)).$us" -u "$OCR_FD" _; fi
}
ocr_look() {
  local out
  r= s= c= cur= screen=
  { read -r _ r < /proc/$P/io; } 2>/dev/null
  { read -r s < /proc/$P/stat; read -r c < /proc/$P/task/$P/children; } 2>/dev/null
  out=$($T display-message -p -t agent '#{cursor_x} #{cursor_y}' \; capture-pane -p -t agent 2>/dev/null) || return 1
  cur=${out%%$'\n'*}
  case $out in *$'\n'*) screen=${out#*$'\n'} ;; esac
  looked=1
}
ocr_idle() {
  local rest x=${cur%% *} y=${cur#* } row p
  local -a f rows
  if [ "$OWED" -gt 0 ]; then
    [ -n "$r" ] && [ -n "$BASE" ] && [ $((r - BASE)) -ge "$OWED" ] || return 1
  fi
  rest=${s##*\)}
  set -f; f=($rest); set +f
  [ ${#f[@]} -ge 6 ] && [ "${f[0]}" = S ] && [ "${f[2]}" = "${f[5]}" ] && [ -z "$c" ] || return 1
  case $x$y in '' | *[!0-9]*) return 1 ;; esac
  [ "$x" -ge 2 ] || return 1
  mapfile -t -n $((y + 1)) rows <<< "$screen"
  row=${rows[y]-}
  p="${row:x-2:2}  "
  case ${p:0:2} in '$ ' | '# ' | '> ' | '% ') return 0 ;; esac
  return 1
}
ocr_wait() {
  local end was=0 last= idle left
  ocr_now; end=$((now + $1))
  if [ "$2" != 1 ]; then ocr_nap "$1"; return 0; fi
  while ocr_now; [ "$now" -lt "$end" ]; do
    ocr_look || { state=gone; return 0; }
    idle=0; ocr_idle && idle=1
    if [ $idle = 1 ] && [ $was = 1 ] && [ "$screen" = "$last" ]; then state=idle; return 0; fi
    was=$idle; last=$screen
    ocr_now; left=$((end - now)); [ $left -gt $POLL_US ] && left=$POLL_US
    ocr_nap $left
  done
}
ocr_term() {
  local r0= said sent
  looked=0 state=waited
  { read -r _ r0 < /proc/$P/io; } 2>/dev/null
  [ "$5" = 1 ] && BASE=$r0
  said=$(ocr_keys 2>&1); sent=$?
  if [ $sent != 0 ] && [ "$1" = 1 ]; then
    state=failed
  else
    ocr_wait "$2" "$3"
    [ $looked = 1 ] || ocr_look || state=gone  # every answer ends with a look, a wait of 0 too
  fi
  echo "@@OCR:$M:head:$state:$r0:$sent@@"
  [ $looked = 1 ] && { echo "@@OCR:$M:look@@"; printf '%s\n' "$r" "$s" "$c" "$cur" "$screen"; }
  [ -n "$said" ] && { echo "@@OCR:$M:said@@"; printf '%s\n' "$said"; }
  if [ "$4" = 1 ] && [ $state != gone ] && [ $state != failed ]; then
    echo "@@OCR:$M:entire@@"
    $T capture-pane -p -S - -t agent \; display-message -p "@@OCR:$M:visible@@" \; capture-pane -p -t agent \
      2>/dev/null && echo "@@OCR:$M:end@@"
  fi
  return 0
}
"""


class HelperRefused(SandboxError):
    """The sandbox would not take the helper (no writable /tmp): the terminal is looked at from outside instead."""


@dataclass
class Answer:
    """What one call found: how its wait ended (idle, waited, gone, failed; notmux, nohelper when it did nothing),
    the read count before the keys, send-keys' status and words, its last look, and the screens it took."""

    state: str
    before: str = ""
    sent: int = 0
    said: str = ""
    look: list[str] = field(default_factory=list)  # reads, stat, children, cursor, screen
    pane: str = ""
    screens: tuple[str, str] | None = None  # (scrollback, screen)


def _micro(seconds: float) -> int:
    return max(0, round(seconds * 1_000_000))


def parse(text: str, marker: str) -> Answer:
    """The answer of one call; SandboxError when the call did not get as far as answering."""
    sections: dict[str, str] = {}
    head: list[str] = []
    parts = re.split(rf"^@@OCR:{marker}:(\w+)((?::[^\n]*)?)@@\n", text, flags=re.M)
    for name, fields, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        sections[name] = body
        if name == "head":
            head = fields[1:].split(":")
    if len(head) < 3:
        raise SandboxError(f"the terminal failed: its call did not answer ({text.strip()[-300:] or 'no output'})")
    answer = Answer(head[0], head[1], int(head[2]) if head[2].lstrip("-").isdigit() else 1)
    answer.said = sections.get("said", "").removesuffix("\n")
    answer.pane = sections.get("pane", "").strip()
    if "look" in sections:
        reads, stat, children, cursor, screen = (sections["look"].split("\n", 4) + ["", "", "", "", ""])[:5]
        answer.look = [reads, stat, children, cursor, screen.removesuffix("\n")]
    if "end" in sections and "entire" in sections and "visible" in sections:
        answer.screens = (sections["entire"], sections["visible"])
    return answer


class InsideTmuxTerminal(TmuxTerminal):
    """TmuxTerminal whose waits happen inside the sandbox, one call a command (see the module doc)."""

    def __init__(
        self, sandbox: Sandbox, cwd: str | None = None, socket: str | None = None, upstream_keys: bool = False
    ) -> None:
        self._helper = f"{HELPER_DIR}/.oc-repl-term-{uuid.uuid4().hex[:12]}.sh"
        self._screens: tuple[str, str] | None = None  # taken at the end of the last call, for the observation
        self._probe: Probe | None = None  # the last call's last look, for a probe that follows it at once
        self.pid = 0
        super().__init__(sandbox, cwd, socket, upstream_keys)

    # --- calls -------------------------------------------------------------------------------------------------

    def _install(self) -> str:
        q = shlex.quote(self._helper)
        return f"cat > {q} <<'{_EOF}'\n{HELPER}{_EOF}\n. {q} || {{ echo \"@@OCR:$M:head:nohelper:-:0@@\"; exit 0; }}"

    def _preamble(self, marker: str, base: int | None = None, owed: int = 0) -> str:
        values = {"M": marker, "P": str(self.pid), "T": self.tmux, "BASE": "" if base is None else str(base)}
        values.update(OWED=str(owed), POLL_US=str(_micro(POLL)))
        return "; ".join(f"{name}={shlex.quote(value)}" for name, value in values.items())

    def _call(self, body: str, marker: str, preamble: str, wait: float, cwd: str | None = None) -> Answer:
        """One call: the helper (written again first if it is gone), then `body`."""
        q = shlex.quote(self._helper)
        load = f'[ -r {q} ] && . {q} || {{ echo "@@OCR:$M:head:nohelper:-:0@@"; exit 0; }}'
        for helper in (load, self._install()):
            self._answered = False
            output = self.sandbox.run_own(f"{preamble}\n{helper}\n{body}", timeout=wait + CALL_MARGIN, cwd=cwd)
            answer = parse(output.decode("utf-8", "replace"), marker)
            if answer.state != "nohelper":
                self._answered = answer.state not in ("gone", "failed", "notmux")
                return answer
        raise HelperRefused(f"the sandbox did not take the terminal's helper at {self._helper}")

    def _command(self, keys: str | None, wait: float, until_idle: bool, capture: bool) -> Answer:
        """Keys (None: a look only), the wait and the screens, in one call; keys too long for one call go ahead in
        calls of their own, the reading taken with the first (as TmuxTerminal sends them)."""
        self._screens = self._probe = None
        last, typed, fresh = ":", b"", False
        if keys is not None:
            scripts, typed = self.key_scripts(keys)
            fresh, last = self._typed.needs_reading(typed), scripts[-1]
            if len(scripts) > 1:
                first = self.sandbox.exec(f"{read_count(self.pid)}; {scripts[0]}", timeout=CALL_MARGIN)
                reads, _, said = first.output.decode("utf-8", "replace").partition("\n")
                if first.exit_code != 0 and not self.upstream_keys:
                    raise _failure(said, first.timed_out)
                for script in scripts[1:-1]:
                    self._run(script)
                self._typed.sent(typed, _number(reads))
                fresh = False
            elif not fresh:
                self._typed.sent(typed, None)  # keys typed ahead add to what is owed since the reading held
        base, owed = (None, deliverable(typed)) if fresh else (self._typed.base, self._typed.owed)
        strict = int(keys is not None and not self.upstream_keys)
        marker = uuid.uuid4().hex[:12]
        flags = f"{strict} {_micro(wait)} {int(until_idle)} {int(capture)} {int(fresh)}"
        answer = self._call(
            f"ocr_keys() {{\n{last}\n}}\nocr_term {flags}", marker, self._preamble(marker, base, owed), wait
        )
        if answer.state == "failed":
            raise _failure(answer.said, False)
        if fresh:
            self._typed.sent(typed, _number(answer.before))
        self._take(answer)
        return answer

    def _take(self, answer: Answer) -> None:
        if answer.look:
            self._probe = judge(self._typed, *answer.look)
        self._screens = answer.screens

    # --- the Terminal interface --------------------------------------------------------------------------------

    def _start(self, cwd: str | None) -> None:
        marker = uuid.uuid4().hex[:12]
        body = "\n".join(
            [
                f'pane=$({self.start_command()} 2>&1) || {{ echo "@@OCR:$M:head:failed:-:1@@"; '
                'echo "@@OCR:$M:said@@"; printf \'%s\\n\' "$pane"; exit 0; }',
                'echo "@@OCR:$M:pane@@"; printf \'%s\\n\' "$pane"; P=${pane%% *}',
                f"ocr_keys() {{ :; }}\nocr_term 1 {_micro(STARTUP_WAIT)} 1 1 0",
            ]
        )
        check = 'command -v tmux >/dev/null 2>&1 || { echo "@@OCR:$M:head:notmux:-:0@@"; exit 0; }'
        script = f"{self._preamble(marker)}\n{check}\n{self._install()}\n{body}"
        self._answered, started = False, time.monotonic()
        output = self.sandbox.run_own(script, timeout=STARTUP_WAIT + CALL_MARGIN, cwd=cwd)
        answer = parse(output.decode("utf-8", "replace"), marker)
        if answer.state == "notmux":
            raise NoTmux()
        if answer.state == "nohelper":
            raise HelperRefused(f"the sandbox did not take the terminal's helper at {self._helper}")
        if answer.state == "failed":
            raise _failure(answer.said, False)
        self.started(answer.pane)
        self._answered = answer.state != "gone"
        self._take(answer)
        self._wait_on(answer, started + STARTUP_WAIT, True, True)

    def run(self, keys: str, duration: float, started: float, until_idle: bool = True, observe: bool = False) -> None:
        deadline = started + min(max(duration, 0.0), MAX_WAIT)
        answer = self._command(keys, deadline - time.monotonic(), until_idle, observe)
        self._wait_on(answer, deadline, until_idle, observe)

    def _wait_on(self, answer: Answer, deadline: float, until_idle: bool, observe: bool) -> None:
        """Another call while the helper found the shell idle where the Python rules do not (see the module doc)."""
        while until_idle and answer.state == "idle" and not (self._probe and self._probe.idle):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            answer = self._command(None, left, until_idle, observe)

    def send_keys(self, keys: str) -> None:
        self._command(keys, 0.0, True, False)

    def wait(self, duration: float, started: float, until_idle: bool = True) -> None:
        deadline = started + min(max(duration, 0.0), MAX_WAIT)
        left = deadline - time.monotonic()
        if left > 0:
            self._wait_on(self._command(None, left, until_idle, False), deadline, until_idle, False)

    def capture(self, entire: bool = False) -> str:
        """The screens the last call took, each handed out once (the observation right after a command); otherwise
        a call of its own."""
        if self._screens is None:
            answer = self._command(None, 0.0, True, True)
            if answer.screens is None:
                raise SandboxError("the terminal failed: its session is gone")
        assert self._screens is not None
        scrollback, screen = self._screens
        self._screens = (scrollback, screen) if entire else None
        return scrollback if entire else screen

    def observe(self) -> tuple[str, str]:
        try:
            return super().observe()
        finally:
            self._screens = None  # an observation takes the screens of one moment, then they are old

    def probe(self) -> Probe:
        probe, self._probe = self._probe, None
        if probe is not None:
            return probe
        self._command(None, 0.0, True, False)  # a look without a wait: one probe
        if self._probe is None:
            raise SandboxError("the terminal failed: its session is gone")
        probe, self._probe = self._probe, None
        return probe

    def close(self) -> None:
        remove = f"rm -f -- {shlex.quote(self._helper)}"
        if self._socket_path:
            self.sandbox.run_own(f"{self.tmux} kill-server; rm -f -- {shlex.quote(self._socket_path)}; {remove}", 30)
        else:
            self.sandbox.run_own(f"{self.tmux} kill-session -t agent; {remove}", timeout=30)
