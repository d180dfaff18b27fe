"""Time to grade one submission, cold (empty cache) and warm (builds, inputs and gold cached).

    python benchmarks/grade_latency.py ASSIGNMENT [--repeat N]

Prints the pipeline's own stage times for the reference submission, so the figures say where the
time goes (building, input generation, gold, running, comparing).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from grader.options import Options
from grader.pipeline import grade
from grader.assignment import load_assignment


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("assignment")
    parser.add_argument("--repeat", type=int, default=3)
    arguments = parser.parse_args()
    assignment = load_assignment(arguments.assignment)
    warm_runs: list[float] = []
    with tempfile.TemporaryDirectory() as cache:
        options = Options(cache_dir=Path(cache))
        for label in ["cold"] + ["warm"] * arguments.repeat:
            started = time.perf_counter()
            result = grade(assignment.reference_dir, assignment, options)
            took = time.perf_counter() - started
            stages = ", ".join(f"{k} {v:.2f}" for k, v in result.stages.items() if k != "total")
            print(f"{assignment.name} {label}: {took:.2f} s, score {result.score:g}/{result.max_score:g} ({stages})")
            if label == "warm":
                warm_runs.append(took)
        print(f"{assignment.name} warm median: {statistics.median(warm_runs):.2f} s "
              f"over {arguments.repeat} runs; device: {result.environment.device}")


if __name__ == "__main__":
    main()
