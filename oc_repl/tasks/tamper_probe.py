"""The sh the tamper probe runs in a sandbox, as root, and the readers of what it prints (see tamper.py for what the
findings mean).

Three scripts, every one framed by `@@OCR:<marker>:...@@` records with its values in base64 (exact bytes, whatever a
path holds), and ending in a `done` record: a script cut short is never read as a clean sandbox.
- `baseline`, once before the agent acts, one call: the discovery, then a snapshot. The discovery finds the
  directories on PATH, and for each python there (at most a few, and only binaries: a version manager's shim scripts
  are not run) its sys.path as the verifier's working directory gives it, its site directories (the user's too) and
  where pytest, _pytest and pluggy live; the pythons run only here, while they are still the image's own. Which places
  are watched follows from the discovery (tamper.Places), so the snapshot in the same call takes every place a
  discovery can lead to: the given names in the working directory, its parents and each directory the discovery
  named, and the trees of the packages found. The reader keeps only what `Watch.covers`: the baseline holds exactly
  what a snapshot of the watched places would.
- `snapshot`, at the look: (inode, size, mtime, ctime, mode) of every watched place, with GNU find and stat (the
  baseline's too), never a python the agent could have replaced.
- `details`, only when the look found new or changed files where a package install may have put them: their sha256,
  their first bytes and where links lead, and the RECORD lines of installed distributions that name them.
"""

from __future__ import annotations

import base64
import fnmatch
import os
import posixpath
import re
import secrets
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from oc_repl.errors import SandboxError

LIMIT = 20000  # entries a snapshot lists at most
PYTHONS = 6  # distinct pythons on PATH asked for their sys.path
HEAD = 2048  # bytes of a new file shown for a look at what it is

_DISCOVER_PY = """
import base64, importlib.util, os, site, sys
M = sys.argv[1]
def say(tag, value):
    print("@@OCR:%s:%s:%s@@" % (M, tag, base64.b64encode(os.fsencode(value)).decode()))
say("py", os.path.realpath(sys.executable))
for p in sys.path:
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
"""

_DISCOVER = r"""
b() { printf %s "$1" | base64 -w0; }
IFS=:; set -f; set -- $PATH; set +f; unset IFS
for d in "$@"; do [ -n "$d" ] && r=$(readlink -f -- "$d") && [ -d "$r" ] && echo "@@OCR:$M:dir:$(b "$r")@@"; done
T=; command -v timeout >/dev/null && T="timeout 20"
ELF=$(printf '\177ELF')
seen=" " n=0
for d in "$@"; do
  for py in "$d"/python "$d"/python3 "$d"/python3.[0-9]*; do
    case ${py##*/} in python | python3 | python3.[0-9] | python3.[0-9][0-9]) ;; *) continue ;; esac
    [ -f "$py" ] && [ -x "$py" ] && r=$(readlink -f -- "$py") && [ "$(head -c 4 "$r")" = "$ELF" ] || continue
    case "$seen" in *" $r "*) continue ;; esac
    seen="$seen$r " n=$((n + 1))
    [ $n -le PYTHONS ] && $T "$py" -c "$PY" "$M"
  done
done
""".replace("PYTHONS", str(PYTHONS))


def token() -> str:
    return secrets.token_hex(6)


def _b64(text: str) -> str:
    return base64.b64encode(os.fsencode(text)).decode()


def _unb64(text: str) -> str:
    try:
        return os.fsdecode(base64.b64decode(text))
    except ValueError:
        return ""


def _records(text: str, marker: str, what: str) -> list[list[str]]:
    """The fields of every record of a finished script; SandboxError when it did not finish."""
    if not re.search(rf"^@@OCR:{marker}:done@@$", text, re.M):
        raise SandboxError(f"the tamper probe did not run ({what}): {text.strip()[-300:] or 'no output'}")
    return [line.split(":") for line in re.findall(rf"^@@OCR:{marker}:([^@\n]*)@@$", text, re.M)]


# --- discovery ---------------------------------------------------------------------------------------------------


@dataclass
class Python:
    executable: str
    path: list[str] = field(default_factory=list)  # sys.path, in order, '' as the working directory
    sites: list[str] = field(default_factory=list)  # the site directories (.pth files count there), user site too
    packages: list[str] = field(default_factory=list)  # where pytest, _pytest and pluggy are


@dataclass
class Discovery:
    path_dirs: list[str] = field(default_factory=list)
    pythons: list[Python] = field(default_factory=list)


def parse_discovery(text: str, marker: str) -> Discovery:
    found = Discovery()
    for tag, *values in _records(text, marker, "discovery"):
        value = _unb64(values[0]) if values else ""
        if tag == "dir" and value not in found.path_dirs:
            found.path_dirs.append(value)
        elif tag == "py":
            found.pythons.append(Python(value))
        elif found.pythons and tag == "sys":
            found.pythons[-1].path.append(value)
        elif found.pythons and tag == "site":
            found.pythons[-1].sites.append(value)
        elif found.pythons and tag == "pkg":
            found.pythons[-1].packages.append(value)
    return found


# --- snapshots ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    inode: int
    size: int
    mtime: str  # seconds with nanoseconds, as stat prints them: compared, never computed with
    ctime: str
    mode: int

    @property
    def kind(self) -> str:
        return {0o040000: "directory", 0o120000: "symbolic link", 0o100000: "file"}.get(self.mode & 0o170000, "other")


@dataclass
class Watch:
    """The places a snapshot looks at: whole trees, single paths, and names in directories."""

    trees: list[str] = field(default_factory=list)
    pruned_trees: list[str] = field(default_factory=list)  # their __pycache__ directories left out
    paths: list[str] = field(default_factory=list)
    names: list[tuple[str, list[str]]] = field(default_factory=list)  # (directory, glob patterns)

    def covers(self) -> Callable[[str], bool]:
        """Whether a snapshot of these places lists a path (as a test: built once for the many paths of a listing)."""
        paths, patterns = set(self.paths), dict[str, list[str]]()
        for directory, globs in self.names:  # a directory may be named twice (a site directory on PATH)
            patterns.setdefault(directory, []).extend(globs)
        trees = [t.rstrip("/") + "/" for t in self.trees]
        pruned = [t.rstrip("/") + "/" for t in self.pruned_trees]

        def covered(path: str) -> bool:
            if path in paths or path + "/" in trees or path.startswith(tuple(trees)):
                return True
            if any((path + "/").startswith(t) and "__pycache__" not in path[len(t) :].split("/") for t in pruned):
                return True
            directory, name = posixpath.split(path)
            return any(fnmatch.fnmatchcase(name, p) for p in patterns.get(directory, ()))

        return covered


def _find_names(directory: str, patterns: list[str], quoted: bool = False) -> str:
    names = " -o ".join(f"-name {shlex.quote(p)}" for p in patterns)
    where = directory if quoted else shlex.quote(directory)
    return f"find -H {where} -mindepth 1 -maxdepth 1 \\( {names} \\) -print0"


def _listing(watch: Watch) -> list[str]:
    """sh lines printing, NUL-terminated, every path of the watched places that exists."""
    q = shlex.quote
    lines = []
    if watch.trees:
        lines.append("find " + " ".join(q(t) for t in watch.trees) + " -print0")
    if watch.pruned_trees:
        lines.append("find " + " ".join(q(t) for t in watch.pruned_trees) + " -name __pycache__ -prune -o -print0")
    if watch.paths:
        paths = " ".join(q(p) for p in watch.paths)
        lines.append(f'for p in {paths}; do {{ [ -e "$p" ] || [ -L "$p" ]; }} && printf "%s\\0" "$p"; done')
    return lines + [_find_names(d, patterns) for d, patterns in watch.names]


def _stat(listing: list[str], limit: int) -> str:
    stat = f"head -z -n {limit + 1} | xargs -0 -r stat --printf '%i %s %.9Y %.9Z %f %n\\0' | base64 -w0"
    body = "\n".join(listing) or ":"
    return f'ocr_list() {{\n{body}\n}}\necho "@@OCR:$M:s:$(ocr_list | {stat})@@"\necho "@@OCR:$M:done@@"'


def snapshot_script(marker: str, watch: Watch) -> str:
    return f"exec 2>/dev/null\nM={marker}\n{_stat(_listing(watch), LIMIT)}"


def parse_snapshot(text: str, marker: str, limit: int = LIMIT) -> tuple[dict[str, Entry], bool]:
    """Every entry listed, and whether the listing hit its limit (then some places went unseen)."""
    data = b""
    for tag, *values in _records(text, marker, "snapshot"):
        if tag == "s" and values:
            data = base64.b64decode(values[0])
    entries: dict[str, Entry] = {}
    for record in data.split(b"\0"):
        parts = record.split(b" ", 5)
        if len(parts) == 6 and parts[0].isdigit() and parts[1].isdigit():
            ino, size, mtime, ctime, mode, path = parts
            entries[os.fsdecode(path)] = Entry(int(ino), int(size), mtime.decode(), ctime.decode(), int(mode, 16))
    return entries, len(entries) > limit


# --- the baseline: the discovery and a snapshot in one call ------------------------------------------------------

BASELINE_LIMIT = 4 * LIMIT  # entries its snapshot lists at most: it takes more places than the look will watch

# Every directory the baseline's snapshot looks in by name, NUL-terminated: the working directory and its parents,
# /tests, then each directory the discovery reported (PATH's, every python's sys.path and site directories); and the
# trees of the packages it found. Both read the discovery's records, kept in $found.
_FOUND = r"""
ocr_found() {
  printf '%s\n' "$found" | while IFS= read -r l; do
    case $l in "@@OCR:$M:$1:"*@@) ;; *) continue ;; esac
    v=${l%@@}; v=$(printf %s "${v##*:}" | base64 -d; echo .); printf '%s\0' "${v%.}"
  done
}
ocr_dirs() {
  d=$PWD
  while :; do printf '%s\0' "$d"; [ "$d" = / ] && break; d=${d%/*}; d=${d:-/}; done
  printf '%s\0' /tests
  ocr_found dir; ocr_found sys; ocr_found site
}
"""


def baseline_script(marker: str, cwd: str | None, watch: Watch, names: list[str]) -> str:
    """The discovery, run in `cwd` (None: where the call starts), then a snapshot of `watch` and of `names` (globs)
    in the directories of the discovery (above) and the trees of its packages."""
    where = f"cd -- {shlex.quote(cwd)} || cd /\n" if cwd is not None else ""
    listing = [
        *_listing(watch),
        "ocr_found pkg | xargs -0 -r -I{} find {} -name __pycache__ -prune -o -print0",
        "ocr_dirs | sort -zu | xargs -0 -r -I{} " + _find_names("{}", names, quoted=True),
    ]
    return (
        f"exec 2>/dev/null\nM={marker}\nPY={shlex.quote(_DISCOVER_PY)}\n{where}found=$({_DISCOVER})\n"
        f'printf "%s\\n" "$found"\n{_FOUND}\n{_stat(listing, BASELINE_LIMIT)}'
    )


# --- details of what changed -------------------------------------------------------------------------------------


@dataclass
class Content:
    sha256: str  # hex
    head: bytes
    target: str  # where it leads once links are followed


@dataclass
class Details:
    files: dict[str, Content] = field(default_factory=dict)
    records: list[tuple[str, str, str]] = field(default_factory=list)  # (RECORD file, listed path, sha256 field)


def details_script(marker: str, files: list[str], site_dirs: list[str]) -> str:
    q = shlex.quote
    names = sorted({os.path.basename(f) for f in files})
    grep = " ".join(f"-e {q(name + ',')}" for name in names)
    return (
        f'exec 2>/dev/null\nM={marker}\nb() {{ printf %s "$1" | base64 -w0; }}\n'
        f'for f in {" ".join(q(f) for f in files)}; do [ -f "$f" ] || continue\n'
        '  h=$(sha256sum < "$f" | cut -c1-64)\n'
        f'  echo "@@OCR:$M:h:$(b "$f"):$h:$(head -c {HEAD} < "$f" | base64 -w0):$(b "$(readlink -f -- "$f")")@@"\n'
        "done\n"
        f"for D in {' '.join(q(d) for d in site_dirs) or '/nonexistent'}; do\n"
        '  set -- "$D"/*.dist-info/RECORD; [ -e "$1" ] || continue\n'
        f'  echo "@@OCR:$M:r:$(grep -F -H {grep} -- "$@" | base64 -w0)@@"\n'
        "done\n"
        'echo "@@OCR:$M:done@@"'
    )


def parse_details(text: str, marker: str) -> Details:
    found = Details()
    for tag, *values in _records(text, marker, "details"):
        if tag == "h" and len(values) == 4:
            path, sha, head, target = values
            found.files[_unb64(path)] = Content(sha, base64.b64decode(head), _unb64(target))
        elif tag == "r" and values:
            for line in _unb64(values[0]).splitlines():
                record, sep, row = line.partition("/RECORD:")
                listed, _, rest = row.partition(",")
                if sep and listed:
                    found.records.append((record + "/RECORD", listed.strip('"'), rest.partition(",")[0]))
    return found
