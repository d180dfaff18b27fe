"""Throughput of `grader batch`: N synthetic submissions of one assignment, graded as a class.

    python benchmarks/batch.py ASSIGNMENT [-n N] [--mix correct=12,broken=6,crashing=3,timeout=3] [--warm] [batch options]

Each submission is a git repository holding the reference with one bundled variant laid over it
(an alternative: correct; a mutant or a compile error: broken; a hostile crash; an infinite loop:
timing out), with a comment of its own in every source file so that every submission really
compiles. The batch runs as `grader batch` in a subprocess, exactly as an instructor runs it; what
is measured, and how, is `synthetic_class.py`'s: submissions per hour, CPU and GPU utilisation, the
share of time compiling and running, and the stages summed over the class.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic_class import Member, make_class, time_batch  # noqa: E402

from grader.samples import variants  # noqa: E402
from grader.assignment import load_assignment  # noqa: E402


def kinds_of(assignment) -> dict[str, list]:
    bundled = variants(assignment)
    return {
        "correct": [None] + [v for v in bundled if v.expect == "passed"],
        "broken": [v for v in bundled if v.expect in ("failed", "compile_error")],
        "crashing": [v for v in bundled if v.expect == "crashed"],
        "timeout": [v for v in bundled if v.expect == "timeout"],
    }


def members_of(assignment, mix: dict[str, int]) -> list[Member]:
    """The class the mix asks for: each kind's bundled variants in turn, as many as it counts."""
    kinds = kinds_of(assignment)
    members = []
    for kind, count in mix.items():
        pool = kinds[kind]
        if count and not pool:
            raise SystemExit(f"{assignment.name} has no bundled {kind} variant")
        members += [Member(kind, pool[i % len(pool)]) for i in range(count)]
    return members


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("assignment")
    parser.add_argument("-n", type=int, default=24, help="submissions (default 24)")
    parser.add_argument("--mix", default=None, help="e.g. correct=12,broken=6,crashing=3,timeout=3 (default: 1/2, "
                                                   "1/4, 1/8, 1/8 of N)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--keep", type=Path, default=None, help="build the class in this folder and keep it")
    parser.add_argument("--warm", action="store_true",
                        help="then grade the same class again into a new store with the cache the first run filled "
                             "(builds, inputs and gold cached): what a regrade of the class costs")
    arguments, batch_options = parser.parse_known_args()
    assignment = load_assignment(arguments.assignment)
    n = arguments.n
    if arguments.mix:
        mix = {k: int(v) for k, v in (part.split("=") for part in arguments.mix.split(","))}
    else:
        mix = {"correct": n - n // 4 - 2 * (n // 8), "broken": n // 4, "crashing": n // 8, "timeout": n // 8}
    folder = arguments.keep or Path(tempfile.mkdtemp(prefix="kg-bench-batch-"))
    folder.mkdir(parents=True, exist_ok=True)
    roster = make_class(assignment, members_of(assignment, mix), folder)
    cache = folder / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    figures = {**time_batch(assignment, roster, folder / "grades.sqlite", cache, batch_options), "mix": mix}
    if arguments.warm:
        figures = {"cold": figures, "warm": {**time_batch(assignment, roster, folder / "grades-warm.sqlite", cache,
                                                          batch_options), "mix": mix}}
    print(json.dumps(figures, indent=1))
    if arguments.json:
        arguments.json.write_text(json.dumps(figures, indent=1) + "\n")
    if not arguments.keep:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
