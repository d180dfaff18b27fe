"""What each sandbox backend costs per submission: start-up of one sandboxed process, and a warm grade.

    python benchmarks/sandbox_overhead.py [--assignment flash-attention-cpu] [--repeat 5] [--backends process,local,docker]

`process` (a process group with rlimits, no isolation) is the baseline. For each backend: the
median time to start a sandbox, run `python -c pass` in it and tear it down; and the median
over grades of the assignment's reference (inputs and gold cached) of the two sandboxed stages:
`build` (uncached: one fresh compile per kernel, inside the sandbox) and `run` (one harness per
kernel). Other stages don't depend on the backend and are left out.
Backends that can't run here are reported with the reason.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from grader.options import Options
from grader.pipeline import grade
from grader.sandbox import Limits, Mounts, sandbox_named
from grader.assignment import load_assignment


def start_up_seconds(backend: str, repeat: int) -> float:
    sandbox = sandbox_named(backend)
    times = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        for i in range(repeat + 1):
            writable = folder / f"w{i}"
            writable.mkdir()
            started = time.perf_counter()
            process = sandbox.start([sys.executable, "-c", "pass"], cwd=writable, mounts=Mounts(writable=writable),
                                    limits=Limits(), stdout=folder / "o", stderr=folder / "e",
                                    env={"PATH": "/usr/bin:/bin"})
            process.wait(120)
            process.kill()
            if i:  # the first start warms caches (the image, the interpreter's pages)
                times.append(time.perf_counter() - started)
    return statistics.median(times)


def grade_seconds(backend: str, assignment_name: str, repeat: int, cache: Path) -> dict[str, float]:
    assignment = load_assignment(assignment_name)
    rows: dict[str, list[float]] = {"build": [], "run": [], "run_start": [], "sandboxed": []}
    for i in range(repeat + 1):
        with tempfile.TemporaryDirectory() as scratch:
            folder = Path(shutil.copytree(assignment.reference_dir, Path(scratch) / "submission"))
            # A fresh build cache each time: the compile inside the sandbox is part of the cost.
            shutil.rmtree(cache / "builds", ignore_errors=True)
            result = grade(folder, assignment, Options(cache_dir=cache, sandbox=backend))
            assert result.score == result.max_score, result.to_json()
            if i:
                rows["build"].append(result.stages["build"])
                rows["run"].append(result.stages["run"])
                rows["run_start"].append(result.stages.get("run_start", 0.0))
                rows["sandboxed"].append(result.stages["build"] + result.stages["run"])
    return {key: statistics.median(values) for key, values in rows.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--assignment", default="flash-attention-cpu")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--backends", default="process,local,docker")
    arguments = parser.parse_args()
    print(f"| backend | start + `python -c pass` + teardown (s) | build + run of {arguments.assignment}'s reference (s) "
          "| of which build (s) | of which run (s) | of run, harness start-ups (s) | overhead vs process, per submission (s) |")
    print("|---|---|---|---|---|---|---|")
    baseline = None
    with tempfile.TemporaryDirectory() as cache_dir:
        cache = Path(cache_dir)
        for backend in arguments.backends.split(","):
            try:
                start = start_up_seconds(backend, arguments.repeat)
                stages = grade_seconds(backend, arguments.assignment, arguments.repeat, cache)
            except Exception as error:  # a backend that can't run here says why
                print(f"| {backend} | not run here: {error} | | | | | |")
                continue
            baseline = stages["sandboxed"] if baseline is None else baseline
            print(f"| {backend} | {start:.3f} | {stages['sandboxed']:.3f} | {stages['build']:.3f} | {stages['run']:.3f} "
                  f"| {stages['run_start']:.3f} | {stages['sandboxed'] - baseline:+.3f} |", flush=True)


if __name__ == "__main__":
    main()
