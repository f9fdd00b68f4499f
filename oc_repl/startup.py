"""A command's start-up without the cyclic garbage collector.

Start-up makes most of what a process will ever hold (modules, classes, the settings table) and none of it is garbage:
the collector run meanwhile only walks it again and again (some 30 ms of a one-turn run on a small machine). The
`oc-repl` command pauses collection before its imports; when start-up is over (a run's thread started, or a command
that starts none begins) what was made is frozen out of every later collection, which cheapens those too, and
collection resumes. A library user's process is never paused, so `settled` does nothing there.

Meanwhile a confined sandbox starts on a thread of its own, which wakes a few times (bubblewrap's report, the cgroup,
the first process's hello) while this one imports: at the interpreter's usual switch interval each wake waits up to
5 ms for its turn, so until start-up is over the turns are shorter.
"""

from __future__ import annotations

import gc
import sys

_paused = False
_SWITCH_S = 0.0002  # the interpreter's switch interval during start-up (its default: 0.005)
_switch = sys.getswitchinterval()


def pause() -> None:
    global _paused, _switch
    if gc.isenabled():
        gc.disable()
        _paused, _switch = True, sys.getswitchinterval()
        sys.setswitchinterval(_SWITCH_S)


def settled() -> None:
    """Start-up is over: what it made is kept out of later collections, and collection resumes (if `pause` held it)."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
        sys.setswitchinterval(_switch)


def ending() -> None:
    """The process is about to exit: its objects are frozen, so the interpreter's last collection, run while it
    tears the modules down, has nothing to walk (the exit itself goes as before: buffers flushed, handlers run)."""
    gc.freeze()
