"""Things the command line says once on this machine, not on every run: each leaves a mark in the state folder."""

from __future__ import annotations

import sys
from typing import Any

from oc_repl import paths

SYNC_MARK = "said-protocols-sync"


class SyncNotice:
    """An event sink: the first run of a protocol that says so (camel), on built-in texts that `protocols sync`
    replaces, says once that the training-exact texts are one command away (`--exact` runs refuse instead, saying so
    themselves)."""

    def __call__(self, event: Any) -> None:
        if event.type != "thread.started" or event.exact:  # every event comes here: the cheap test first
            return
        mark = paths.state_dir() / SYNC_MARK
        if mark.exists():  # said before: no manifest need be read
            return
        from oc_repl.protocols import kind_of, sync_source

        if not kind_of(event.protocol).says_sync:
            return
        if not any(a.source == "built-in" and sync_source(event.protocol, a.name) for a in event.assets):
            return
        try:
            from oc_repl.private import touch_private

            touch_private(mark)
        except OSError:
            return  # a note that cannot be remembered is better left unsaid than said on every run
        sys.stderr.write(
            f"note: {event.protocol}'s prompt and harness texts are oc-repl's own wording; `oc-repl protocols sync` "
            "fetches the texts the checkpoint was trained with (then `--exact` runs exactly as trained). Said once.\n"
        )
