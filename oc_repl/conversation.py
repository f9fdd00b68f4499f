"""The interactive shell's conversation: a session whose plan a person changes between tasks (the model, the server,
the protocol, the sandbox, the turn cap, the verifier), and which is saved and taken up again (`oc-repl resume`).
Each change makes the next plan; the session runs whichever plan it holds, as `oc-repl run` runs its one."""

from __future__ import annotations

import dataclasses
from typing import Any

from oc_repl import events as ev
from oc_repl.errors import UsageError
from oc_repl.plan import sandboxes_for, verifier_for
from oc_repl.session import Session
from oc_repl.types import Message


class Conversation(Session):
    def _plan(self, **changes: Any) -> None:
        self.plan = dataclasses.replace(self.plan, **changes)

    def set_model(self, name: str) -> None:
        self._plan(settings=self.settings.replace(model=name))
        self.client.model = name

    def set_api_base(self, url: str) -> None:
        """Another server: the conversation goes on there (its model is asked anew unless one was named)."""
        self._plan(settings=self.settings.replace(api_base=url))
        self.client.close()
        self.client = self._client()

    def set_protocol(self, name: str) -> None:
        """Another protocol: a new conversation."""
        self._plan(settings=self.settings.replace(protocol=name))
        self.new_conversation()

    def set_max_turns(self, turns: int) -> None:
        self._plan(settings=self.settings.replace(max_turns=turns))

    def set_verifier(self, command: str) -> None:
        settings = self.settings.replace(verify=command, verify_file=None)  # thread.started says it
        self._plan(settings=settings, verifier=verifier_for(settings))

    def switch_sandbox(self, spec: str) -> None:
        """Move to another sandbox (a new conversation); when it cannot be opened (or is refused), the current one
        stays as it is."""
        settings = self.settings.replace(sandbox=spec)
        sandboxes = sandboxes_for(settings)
        replacement = sandboxes.open(self.consent)
        self.close()
        self._plan(settings=settings, sandboxes=sandboxes)
        self.sandbox = replacement

    def history(self) -> list[Message]:
        return self.protocol.request().messages if self.protocol is not None else []

    def saved(self) -> ev.ConversationSaved:
        """Where the conversation stands, for `oc-repl resume` to take it up."""
        where = self.sandbox.reattach() if self.sandbox is not None else ""
        return ev.ConversationSaved(
            thread_id=self.thread_id, protocol=self.settings.protocol, sandbox=where, messages=self.history(),
            tasks=self.tasks_run,
        )  # fmt: skip

    def resume(self, saved: ev.ConversationSaved) -> None:
        """Take up a saved conversation: its next task is a follow-up of the ones it ran."""
        try:
            self.open_protocol().resume(saved.messages)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        self.thread_id, self.tasks_run = saved.thread_id, saved.tasks
