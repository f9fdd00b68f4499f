"""What a verdict costs a trial in docker: the evidence (what the tests rely on, asked when the sandbox opens; the
change set before the verifier and after it; the agent's processes listed and ended) and the sealed verifier, against
the same verifier run plainly (`exec`, in the container's own filesystem, nothing listed or looked at), each in a fresh
container of the same task image with the same solution in place, interleaved round by round.

Figures (medians): the verdict with evidence and seal, the plain verifier, and what the first adds (goal: under 1 s on
the test image). Needs root beside the docker daemon (the seal's host helper) and the test image.

Run: DOCKER_HOST=... python benchmarks/verdict_cost.py [--rounds 10] [--task examples/tasks/repair-module]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.rows import Row, add_option, skip, write  # noqa: E402
from oc_repl.sandbox.docker import DockerImageSandbox  # noqa: E402
from oc_repl.sandbox.unsealed import run_unsealed  # noqa: E402
from oc_repl.tasks.image import build_image  # noqa: E402
from oc_repl.tasks.model import load_task  # noqa: E402
from oc_repl.tasks.verdict import Judge  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


class Plain(DockerImageSandbox):
    """The same driver, its verifier run unsealed and nothing else done around it."""

    def run_verifier(self, job):  # type: ignore[no-untyped-def]
        return run_unsealed(self, job)


def solve(box: DockerImageSandbox, task: Path) -> None:
    script = (task / "solution.sh").read_text() if (task / "solution.sh").is_file() else ""
    result = box.exec(script, timeout=120)
    if result.exit_code != 0:
        raise SystemExit(f"the solution failed: {result.output.decode(errors='replace')[-500:]}")


def with_evidence(image: str, task: Path) -> float:
    verifier = load_task(task).verifier()
    box = DockerImageSandbox.from_spec(image)
    try:
        start = time.perf_counter()
        judge = Judge.opened(box, verifier.working_directory(box), emit=lambda event: None)
        opened = time.perf_counter() - start
        solve(box, task)
        start = time.perf_counter()
        result = judge.verify(verifier, frozenset(), final=True)
        if not (result.passed and result.sealed):
            raise SystemExit(f"the sealed verdict did not pass: {result}")
        return opened + time.perf_counter() - start
    finally:
        box.close()


def plain(image: str, task: Path) -> float:
    verifier = load_task(task).verifier()
    box = Plain.from_spec(image)
    try:
        solve(box, task)
        start = time.perf_counter()
        result, _run = verifier.run(box)
        if not result.passed:
            raise SystemExit(f"the plain verdict did not pass: {result}")
        return time.perf_counter() - start
    finally:
        box.close()


def measure(rounds: int, task: Path) -> list[Row]:
    image = build_image(load_task(task))
    sealed, bare = [], []
    with_evidence(image, task)  # warm-up: the helper's first start, the image's first container
    for _ in range(rounds):
        sealed.append(with_evidence(image, task))
        bare.append(plain(image, task))
    s, b = statistics.median(sealed), statistics.median(bare)
    return [
        Row("verdict with evidence and seal", s * 1000, "ms", "plain verifier", b * 1000),
        Row("added by evidence and seal", (s - b) * 1000, "ms", goal="under 1000 ms", met=(s - b) < 1.0),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--task", type=Path, default=ROOT / "examples" / "tasks" / "repair-module")
    add_option(parser)
    args = parser.parse_args()
    if os.geteuid() != 0:
        skip("the sealed verifier's host helper needs root beside the docker daemon")
    rows = measure(args.rounds, args.task)
    for row in rows:
        ratio = f" ({row.ratio:.2f}x {row.baseline})" if row.ratio is not None else ""
        print(f"{row.figure}: {row.value:.0f} {row.unit}{ratio}")
    write(rows, args.rows)


if __name__ == "__main__":
    main()
