"""Rows from the printout of the benchmarks that print only (docker_exec_cost.py, bench_trials.py).

Each parser reads the lines it knows and ignores the rest; a printout with none of them yields no rows, which the
suite reports as a failure ("printed no figures"), so a changed format shows up rather than vanishing.
"""

from __future__ import annotations

import re

from benchmarks.rows import Row

_NUMBER = re.compile(r"^(-|-?\d+(\.\d+)?x?)$")  # "-": a column with nothing to show


def docker_exec(text: str) -> list[Row]:
    """The method table: one row per method against the first one (the Engine API exec), whichever columns the
    script prints (mean and median in either order, p90 or not). The goal applies to `sandbox`."""
    lines = text.splitlines()
    header = next((i for i, line in enumerate(lines) if line.split()[:1] == ["method"]), None)
    if header is None:
        return []
    columns = [word for word in lines[header].split() if word in ("mean", "median", "p90")]
    if "median" not in columns:
        return []
    at = columns.index("median")
    table: list[tuple[str, float]] = []
    for line in lines[header + 1 :]:
        words = line.split()
        numbers = [w for w in words[1:] if _NUMBER.match(w)]
        if len(words) < 2 or len(numbers) != len(words) - 1:
            break
        table.append((words[0], float(numbers[at].rstrip("x"))))
    if not table:
        return []
    (base_name, base), rows = table[0], [Row(f"{table[0][0]} (median)", table[0][1], "ms")]
    for name, median in table[1:]:
        goal = {}
        if name == "sandbox":
            goal = {"goal": "<= 5 ms and <= 0.15x", "met": median <= 5 and median <= 0.15 * base}
        rows.append(Row(f"{name} (median)", median, "ms", f"{base_name}, same container", base, **goal))
    return rows


_OVERHEAD = re.compile(r"trial overhead \(-j 1\): bench ([\d.]+) s/trial")
_BY_HAND = re.compile(r"docker CLI by hand ([\d.]+) s/trial")
_THROUGHPUT = re.compile(r"^\s*-j (\d+): bench\s+([\d.]+)\s+by hand\s+([\d.]+)", re.M)


def bench_trials(text: str) -> list[Row]:
    rows = []
    overhead, by_hand = _OVERHEAD.search(text), _BY_HAND.search(text)
    if overhead and by_hand:
        rows.append(Row("bench trial, -j 1", float(overhead[1]), "s", "docker CLI by hand", float(by_hand[1])))
    for jobs, bench, hand in _THROUGHPUT.findall(text):
        rows.append(Row(f"bench trials a minute, -j {jobs}", float(bench), "/min", "by hand", float(hand)))
    return rows
