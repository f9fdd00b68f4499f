"""Why a change in a sensitive place is an honest install's, from the installers' own records.

- pip: a `*.dist-info/RECORD` that changed lists the file with its sha256, and every file it lists with a hash matches
  it on disk (the whole distribution is what was installed); bytecode it lists without a hash counts as Python's own
  cache when that holds (below). A pytest11 entry point is never explained: pytest loads it by itself.
- dpkg: a package's md5sums that changed lists the file with its md5, and dpkg's status changed too (an install).
- a link made to a program that was there before, under its own name (`python` -> `python3.11`);
- pip's console script for pytest, run by a python that was there;
- bytecode that is Python's own cache of its source: timestamp-checked, with its source's mtime and size, the source
  unchanged (or explained itself). A hash-based .pyc that skips the check is never explained.
"""

from __future__ import annotations

import base64
import posixpath
import re
import struct

from oc_repl.types import Change, FileFacts, Look

_CONSOLE_LINES = [
    re.compile(p)
    for p in (
        re.escape("# -*- coding: utf-8 -*-"),
        r"import (?:re|sys)",
        r"(?:    )?from (?:pytest|_pytest(?:\.\w+)*) import \w+",
        r"if __name__ == (['\"])__main__\1:",
        re.escape("    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])"),
        r"    (?:el)?if sys\.argv\[0\]\.endswith\((['\"])(?:-script\.pyw|\.exe)\1\):",
        r"        sys\.argv\[0\] = sys\.argv\[0\]\[:-(?:11|4)\]",
        r"    sys\.exit\(\w+\(\)\)",
    )
]
_PYC = re.compile(r"^(?P<dir>.*?)/(?:__pycache__/)?(?P<name>[^/.]+)(?:\.[^/]+)?\.pyc$")


def console_script(text: bytes, interpreters: set[str]) -> bool:
    """Whether `text` is the console script an installer writes for pytest, run by a python that was there."""
    lines = text.decode("utf-8", "replace").rstrip("\n").split("\n")
    if len(lines) < 4 or lines[0][2:].strip() not in interpreters or not lines[0].startswith("#!"):
        return False
    return all(any(p.fullmatch(line) for p in _CONSOLE_LINES) for line in lines[1:])


def record_hash(sha256_hex: str) -> str:
    return "sha256=" + base64.urlsafe_b64encode(bytes.fromhex(sha256_hex)).decode().rstrip("=")


def same_program(link: str, target: str) -> bool:
    """`python` and `python3.11`, `pip` and `pip3`: one name the other's start."""
    a, b = posixpath.basename(link), posixpath.basename(target)
    return bool(a and b) and (a.startswith(b) or b.startswith(a))


class Explanations:
    """The installers' records among a change set, read once, and what they explain."""

    def __init__(self, look: Look, changes: dict[str, Change], facts: dict[str, FileFacts], interpreters: set[str]):
        self.look, self.changes, self.facts, self.interpreters = look, changes, facts, interpreters
        self._pip: dict[str, tuple[str, str]] | None = None  # path -> (its RECORD, its hash field)
        self._complete: dict[str, bool] = {}
        self._dpkg: dict[str, tuple[str, str]] | None = None  # path -> (md5sums file, md5)

    def why(self, path: str) -> str:
        """Why the change at `path` is an honest install's; "" when nothing explains it."""
        facts = self.facts.get(path)
        if facts is None or facts.error:
            return ""
        return (
            self._pip_reason(path, facts)
            or self._dpkg_reason(path, facts)
            or self._link_reason(path, facts)
            or self._console_reason(path, facts)
            or self._cache_reason(path, facts)
        )

    # --- pip --------------------------------------------------------------------------------------------------------

    def _records(self) -> dict[str, tuple[str, str]]:
        if self._pip is None:
            self._pip = {}
            records = [p for p, c in self.changes.items() if p.endswith(".dist-info/RECORD") and c.what != "removed"]
            for record, data in self.look.read(records).items():
                site = posixpath.dirname(posixpath.dirname(record))
                for line in (data or b"").decode("utf-8", "replace").splitlines():
                    listed, _, rest = line.partition(",")
                    if listed:
                        where = posixpath.normpath(posixpath.join(site, listed.strip('"')))
                        self._pip[where] = (record, rest.partition(",")[0])
        return self._pip

    def _whole(self, record: str) -> bool:
        """Every file its RECORD lists with a hash is on disk with that hash."""
        if record not in self._complete:
            rows = {p: h for p, (r, h) in self._records().items() if r == record and h}
            facts = self.look.files(sorted(rows))
            self._complete[record] = all(
                (f := facts.get(p)) is not None and f.sha256 and record_hash(f.sha256) == h for p, h in rows.items()
            )
        return self._complete[record]

    def _pip_reason(self, path: str, facts: FileFacts) -> str:
        listed = self._records().get(path)
        if listed is None or path.endswith("/entry_points.txt"):
            return ""
        record, digest = listed
        dist = posixpath.basename(posixpath.dirname(record))
        if digest and facts.sha256 and digest == record_hash(facts.sha256) and self._whole(record):
            return f"installed by a package ({dist} lists it, and every file it lists is as it says)"
        if not digest and path.endswith(".pyc") and self._cache_reason(path, facts) and self._whole(record):
            return f"installed by a package ({dist} lists it) as Python's cache of its source"
        return ""

    # --- dpkg -------------------------------------------------------------------------------------------------------

    def _sums(self) -> dict[str, tuple[str, str]]:
        if self._dpkg is None:
            self._dpkg = {}
            if "/var/lib/dpkg/status" in self.changes:
                files = [p for p in self.changes if p.startswith("/var/lib/dpkg/info/") and p.endswith(".md5sums")]
                for sums, data in self.look.read(files).items():
                    for line in (data or b"").decode("utf-8", "replace").splitlines():
                        md5, _, listed = line.partition("  ")
                        if listed:
                            self._dpkg["/" + listed.lstrip("/")] = (sums, md5.strip())
        return self._dpkg

    def _dpkg_reason(self, path: str, facts: FileFacts) -> str:
        listed = self._sums().get(path)
        if listed is None or not facts.md5 or listed[1] != facts.md5:
            return ""
        return f"installed by a package ({posixpath.basename(listed[0]).removesuffix('.md5sums')}, dpkg's record)"

    # --- links, console scripts, bytecode ---------------------------------------------------------------------------

    def _link_reason(self, path: str, facts: FileFacts) -> str:
        target = facts.target
        if not facts.link or not target or target == path or target in self.changes:
            return ""
        if not same_program(path, target):
            return ""
        return f"a link to {target}, which was there before"

    def _console_reason(self, path: str, facts: FileFacts) -> str:
        if posixpath.basename(path) not in ("pytest", "py.test") or len(facts.head) >= 2048:
            return ""
        if console_script(facts.head, self.interpreters):
            return "a console script that runs the installed pytest"
        return ""

    def _cache_reason(self, path: str, facts: FileFacts) -> str:
        """Python's own timestamp-checked cache of an unchanged (or explained) source."""
        match = _PYC.match(path)
        if match is None or len(facts.head) < 16:
            return ""
        flags, mtime, size = struct.unpack("<III", facts.head[4:16])
        if flags != 0:  # hash-based: checked (1|2) or, worse, unchecked (1): never Python's timestamp cache
            return ""
        source = f"{match.group('dir')}/{match.group('name')}.py"
        known = self.facts.get(source) or self.look.files([source]).get(source)
        if known is None or known.error or (known.mtime // 10**9) & 0xFFFFFFFF != mtime:
            return ""
        if known.size & 0xFFFFFFFF != size:
            return ""
        if source in self.changes and not self.why(source):
            return ""
        return f"Python's cache of {source}"
