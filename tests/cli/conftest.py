"""Fixtures of the command-line tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def shell(tmp_path, serve):
    """Starts the interactive shell in tmux against a scripted server (`--yes`, a local: sandbox); all are closed at
    the end of the test."""
    from tests.cli.test_repl_tmux import TmuxShell

    shells: list[TmuxShell] = []

    def start(script: dict, *args: str) -> TmuxShell:
        server = serve(script)
        sh = TmuxShell(tmp_path, server.url, "--yes", *args)
        sh.server = server
        shells.append(sh)
        return sh

    yield start
    for sh in shells:
        sh.close()
