"""What a sandbox's tests will rely on, asked of the sandbox once it is open and before the agent's first command, so
that its own tools still answer for the image and not for the agent: the directories on PATH, each python there with
its sys.path, site directories and the modules pytest loads, the links in those places and where they lead, $HOME,
BASH_ENV, and the sandbox's clock. One sh script, its answers framed as `@@OCR:<marker>:<tag>:<base64>@@` records and
ended by a `done` record (a script cut short is never read as an empty answer).

Which places count (tasks/places.py) follows from this; what changed there comes from the sandbox's Look, taken from
outside the agent's reach, later.
"""

from __future__ import annotations

import base64
import os
import re
import shlex
from dataclasses import dataclass, field

from oc_repl.errors import SandboxError

PYTHONS = 6  # distinct pythons on PATH asked
TIMEOUT = 120.0
BASELINE = "tamper_baseline"  # the name a sandbox gives this script's answer when its opening call ran it

_PY = """
import base64, importlib.util, os, pkgutil, site, sys
M = sys.argv[1]
def say(tag, value):
    print("@@OCR:%s:%s:%s@@" % (M, tag, base64.b64encode(os.fsencode(value)).decode()))
say("py", os.path.realpath(sys.executable))
for p in sys.path[1:]:
    say("sys", os.path.abspath(p or os.getcwd()))
for d in [*getattr(site, "getsitepackages", list)(), site.getusersitepackages()]:
    say("site", d)
for name in ("pytest", "_pytest", "pluggy"):
    try:
        spec = importlib.util.find_spec(name)
    except Exception:
        spec = None
    if spec is not None and spec.origin:
        say("pkg", os.path.dirname(spec.origin) if spec.submodule_search_locations else spec.origin)
try:
    import pytest, _pytest.main, _pytest.python, _pytest.runner, _pytest.assertion.rewrite
except Exception:
    pass
for name in sorted({m.partition(".")[0] for m in sys.modules}):
    say("mod", name)
for info in pkgutil.iter_modules():
    if getattr(info.module_finder, "path", None):
        say("avail", os.path.join(os.path.abspath(info.module_finder.path), info.name))
"""

# PATH as given (directories that do not exist yet count: one the agent makes is on PATH), each python binary on it
# (a version manager's shims are scripts, not run), then the links at the top of every place found and their targets.
_SCRIPT = r"""
b() { printf %s "$1" | base64 -w0; }
T0=$(mktemp)
echo "@@OCR:$M:now:$(b "$(date +%s)")@@"
echo "@@OCR:$M:home:$(b "$HOME")@@"
[ -n "${BASH_ENV:-}" ] && echo "@@OCR:$M:startup:$(b "$BASH_ENV")@@"
[ -n "${ENV:-}" ] && echo "@@OCR:$M:startup:$(b "$ENV")@@"
IFS=:; set -f; set -- $PATH; set +f; unset IFS
for d in "$@"; do [ -n "$d" ] && echo "@@OCR:$M:path:$(b "$d")@@"; done
echo "@@OCR:$M:exes:$(for d in "$@"; do [ -d "$d" ] && find "$d" -mindepth 1 -maxdepth 1 -print0; done | base64 -w0)@@"
T=; command -v timeout >/dev/null && T="timeout 20"
ELF=$(printf '\177ELF')
seen=" " n=0 found=
for d in "$@"; do
  for py in "$d"/python "$d"/python3 "$d"/python3.[0-9]*; do
    case ${py##*/} in python | python3 | python3.[0-9] | python3.[0-9][0-9]) ;; *) continue ;; esac
    [ -f "$py" ] && [ -x "$py" ] && r=$(readlink -f -- "$py") && [ "$(head -c 4 "$r")" = "$ELF" ] || continue
    case "$seen" in *" $r "*) continue ;; esac
    seen="$seen$r " n=$((n + 1))
    [ $n -le PYTHONS ] && found="$found$($T "$py" -c "$PY" "$M")
"
  done
done
printf '%s\n' "$found"
places() {
  for d in "$@"; do printf '%s\0' "$d"; done
  printf '%s\n' "$found" | while IFS= read -r l; do
    case $l in "@@OCR:$M:sys:"* | "@@OCR:$M:site:"*) ;; *) continue ;; esac
    v=${l%@@}; printf %s "${v##*:}" | base64 -d; printf '\0'
  done
}
places "$@" | sort -zu | xargs -0 -r -I{} find {} -mindepth 1 -maxdepth 1 -type l -print0 2>/dev/null > "$T0"
echo "@@OCR:$M:links:$(base64 -w0 < "$T0"):$(xargs -0 -r readlink -f -z -- < "$T0" | base64 -w0)@@"
rm -f "$T0"
echo "@@OCR:$M:done@@"
""".replace("PYTHONS", str(PYTHONS))


@dataclass
class Python:
    executable: str
    path: list[str] = field(default_factory=list)  # sys.path after its first entry (the script's directory, or '')
    sites: list[str] = field(default_factory=list)  # site directories, the user's too
    packages: list[str] = field(default_factory=list)  # where pytest, _pytest and pluggy are
    modules: list[str] = field(default_factory=list)  # top-level names pytest's start-up imports
    available: list[str] = field(default_factory=list)  # every top-level module on its sys.path, as DIR/NAME


@dataclass
class Discovery:
    path: list[str] = field(default_factory=list)  # PATH's entries as written, missing directories included
    pythons: list[Python] = field(default_factory=list)
    links: dict[str, str] = field(default_factory=dict)  # a link in one of those places -> where it leads
    executables: list[str] = field(default_factory=list)  # what PATH's directories held, as DIR/NAME
    home: str = ""
    startup: list[str] = field(default_factory=list)  # BASH_ENV, ENV
    now: int = 0  # the sandbox's clock when it was asked (seconds)


def script(marker: str, cwd: str | None) -> str:
    """The discovery, run in `cwd` (where the verifier will run: sys.path starts there), or where the call starts."""
    where = f"cd -- {shlex.quote(cwd)} 2>/dev/null || cd /\n" if cwd is not None else ""
    return f"exec 2>/dev/null\nM={marker}\nPY={shlex.quote(_PY)}\n{where}{_SCRIPT}"


def _unb64(text: str) -> str:
    try:
        return os.fsdecode(base64.b64decode(text))
    except ValueError:
        return ""


def _listed(field: str) -> list[str]:
    """NUL-separated paths, base64-encoded."""
    try:
        data = base64.b64decode(field)
    except ValueError:
        return []
    return [os.fsdecode(p) for p in data.split(b"\0") if p]


def parse(text: str, marker: str) -> Discovery:
    """SandboxError when the script did not finish."""
    if not re.search(rf"^@@OCR:{marker}:done@@$", text, re.M):
        raise SandboxError(f"the sandbox did not answer what its tests rely on: {text.strip()[-300:] or 'no output'}")
    found = Discovery()
    for line in re.findall(rf"^@@OCR:{marker}:([^@\n]*)@@$", text, re.M):
        tag, *values = line.split(":")
        value = _unb64(values[0]) if values else ""
        if tag == "path" and value not in found.path:
            found.path.append(value)
        elif tag == "py":
            found.pythons.append(Python(value))
        elif tag == "links" and len(values) == 2:
            links, targets = _listed(values[0]), _listed(values[1])
            if len(links) == len(targets):  # readlink answers every link, in order
                found.links.update(zip(links, targets, strict=True))
        elif tag == "exes":
            found.executables += _listed(values[0] if values else "")
        elif tag == "home":
            found.home = value
        elif tag == "startup":
            found.startup.append(value)
        elif tag == "now":
            found.now = int(value) if value.isdigit() else 0
        elif found.pythons and tag in ("sys", "site", "pkg", "mod", "avail"):
            py = found.pythons[-1]
            lists = {"sys": py.path, "site": py.sites, "pkg": py.packages, "mod": py.modules, "avail": py.available}
            lists[tag].append(value)
    return found
