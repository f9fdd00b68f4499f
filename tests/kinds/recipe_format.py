"""A task format: a directory marked by `recipe.toml` (the instruction, a ready image, and the shell command whose
exit says whether the task is done)."""

from __future__ import annotations

from pathlib import Path

from oc_repl import tomlfile
from oc_repl.tasks.model import TaskDir, TaskFormat
from oc_repl.tasks.verify import CommandVerifier, Verifier


def _recipe(path: Path) -> dict:
    return tomlfile.read(path / "recipe.toml")


def load_recipe(path: Path) -> TaskDir:
    recipe, path = _recipe(path), path.resolve()
    return TaskDir(
        path=path,
        name=path.name,
        instruction=recipe["instruction"],
        format="recipe",
        agent_timeout_sec=60.0,
        test_timeout_sec=60.0,
        context=path,
        dockerfile=None,
        image=recipe["image"],
    )


def recipe_verifier(task: TaskDir) -> Verifier:
    return CommandVerifier(_recipe(task.path)["check"], None, task.test_timeout_sec)


def check() -> tuple[str, str, str, str]:
    """The recipe format's look at this machine."""
    return ("recipe tasks", "ok", "recipe.toml directories are read as tasks", "")


FORMAT = TaskFormat(
    "recipe",
    "recipe.toml",
    "tests.kinds.recipe_format:load_recipe",
    "tests.kinds.recipe_format:recipe_verifier",
    doctor="tests.kinds.recipe_format:check",
)
