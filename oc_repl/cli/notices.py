"""Things the command line says once on this machine, not on every run: each leaves a mark in the state folder."""

from __future__ import annotations

import sys
from typing import Any

from oc_repl import paths

# The camel assets that `protocols sync` replaces with the texts the checkpoint was trained on.
SYNCED_CAMEL_ASSETS = {"system.txt", "agent.toml", "tools.json", "toolkit.toml"}
SYNC_MARK = "said-protocols-sync"


class SyncNotice:
    """An event sink: the first camel run with built-in assets says, once, that the training-exact texts are one
    `protocols sync` away (`--exact` runs refuse instead, saying so themselves)."""

    def __call__(self, event: Any) -> None:
        if event.type != "thread.started" or event.protocol != "camel-terminal-toolkit" or event.exact:
            return
        if not any(a.source == "built-in" and a.name in SYNCED_CAMEL_ASSETS for a in event.assets):
            return
        mark = paths.state_dir() / SYNC_MARK
        if mark.exists():
            return
        try:
            from oc_repl.private import touch_private

            touch_private(mark)
        except OSError:
            return  # a note that cannot be remembered is better left unsaid than said on every run
        sys.stderr.write(
            "note: camel's prompt and harness texts are oc-repl's own wording; `oc-repl protocols sync` fetches the "
            "texts the checkpoint was trained with (then `--exact` runs exactly as trained). Said once.\n"
        )
