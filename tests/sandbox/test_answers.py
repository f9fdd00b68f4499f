"""A script's answer from the sandbox: one whose exec came back with nothing at all is run again."""

from __future__ import annotations

from oc_repl.sandbox.answers import TRIES, until_done


def test_an_empty_answer_is_asked_again_and_any_other_is_taken_as_it_is():
    answers = iter(["", "  \n", "@@OCR:m:done@@\n"])
    calls: list[str] = []

    def run() -> str:
        calls.append("run")
        return next(answers)

    assert until_done(run, "m") == "@@OCR:m:done@@\n" and len(calls) == 3 == TRIES
    assert until_done(lambda: "sh: 1: find: not found\n", "m") == "sh: 1: find: not found\n"  # for its reader
    nothing: list[str] = []
    assert until_done(lambda: nothing.append("x") or "", "m") == "" and len(nothing) == TRIES
