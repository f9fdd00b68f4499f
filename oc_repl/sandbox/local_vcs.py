"""Version-control directories in a local sandbox's directory. git, Mercurial and Subversion run what such a
directory configures (hooks, `core.fsmonitor`, ...) as the user, unconfined, the next time the user runs them there.

Confined, the `.git`, `.hg` and `.svn` at the top of the sandbox directory are read-only, and where one does not exist
an empty read-only placeholder holds its name while the sandbox lives, so none can be made there (unless asked for).
bubblewrap needs a directory on the host to mount a placeholder on: it makes an empty one, which is removed when the
sandbox ends, if it is still empty. Deeper down one can be made: `made_since` names those, against a baseline of
what was there when the sandbox opened.
"""

from __future__ import annotations

import os
from pathlib import Path

VCS_DIRS = (".git", ".hg", ".svn")


def placeholders(root: Path) -> list[Path]:
    """The names at the top of `root` a placeholder would hold: those that do not exist, not even as a link, in a
    directory this process may write (where it may not, neither may the sandbox, and bubblewrap could not make the
    placeholder's mount point)."""
    if not os.access(root, os.W_OK):
        return []
    return [root / name for name in VCS_DIRS if not os.path.lexists(root / name)]


def mount_args(root: Path) -> list[str]:
    """bubblewrap's arguments (after `root` is bound writable) that keep the top's version control read-only. An
    existing one that is a link is left as it is: a mount would land on where it leads."""
    args: list[str] = []
    for name in VCS_DIRS:
        path = root / name
        if path.exists() and not path.is_symlink():
            args += ["--ro-bind", str(path), str(path)]
    for path in placeholders(root):
        args += ["--tmpfs", str(path), "--remount-ro", str(path)]
    return args


def remove_placeholders(made: list[Path]) -> None:
    """Remove the mount points bubblewrap made for the placeholders, each only while it is empty: whatever was put
    there meanwhile (on the host: the sandbox cannot) stays."""
    for path in made:
        try:
            os.rmdir(path)
        except OSError:
            continue  # gone, no longer empty, or no longer a directory


def found(root: Path) -> set[str]:
    """Every `.git`, `.hg` and `.svn` under `root`, directory, file or link, by path. Walked through directory
    descriptors without following links, so a directory swapped for a link meanwhile cannot lead the walk out; not
    into a version-control directory itself (what is inside is its own, and a big repository's objects would make the
    walk slow)."""
    seen = set()
    for top, dirs, files, _fd in os.fwalk(root, follow_symlinks=False):
        seen.update(os.path.join(top, name) for name in VCS_DIRS if name in dirs or name in files)
        dirs[:] = [d for d in dirs if d not in VCS_DIRS]
    return seen


def made_since(root: Path, baseline: set[str], ours: list[Path]) -> list[str]:
    """The version-control directories (and files, and links) under `root` that were not in `baseline`; the
    placeholders of `ours` left out."""
    return sorted(found(root) - baseline - {str(path) for path in ours})
