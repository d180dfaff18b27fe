"""Where `grader check`'s time goes (issue 25, goal 7): measured before anything is chosen.

    python benchmarks/check_profile.py [--assignment gpt2-m1] [--submission PATH] [--repeat N] [--top N]

1. `grader check` (the CLI, in a subprocess): one untimed run that warms the caches, then N timed
   runs, each with the stages its result reports.
2. One more `grader check` under cProfile: where the CLI's own process spends its time (imports,
   stages, the report), by cumulative time.
3. The calls that `check` runs (its public cases, and the checks' composed calls), each kernel's
   harness started by hand, alone, outside any sandbox, under cProfile: its wall time from launch
   to exit, and the time of each of its calls (from the harness's own progress events). The slowest
   harness's profile is printed: the functions where its time went, by their own time and by
   their cumulative time.

Default submission: the assignment's reference as `grader.samples.compose` lays it out. Needs the
assignment's device (a GPU for a CUDA assignment).
"""

from __future__ import annotations

import argparse
import cProfile  # noqa: F401  (run as `-m cProfile` in the harnesses; imported so a missing module fails here)
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
HARNESS_MODULE = "grader.boundary.harness"  # the module the runner starts (grader.runner.watch)


def time_check(submission: Path, assignment: str, cache: Path, repeat: int, work: Path) -> list[float]:
    """`grader check` warm-up then `repeat` timed runs; prints each run's wall time and stages."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPOSITORY_ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    walls = []
    for attempt in range(repeat + 1):
        result_file = work / f"check-{attempt}.json"
        started = time.perf_counter()
        completed = subprocess.run([sys.executable, "-m", "grader", "check", str(submission), "-a", assignment,
                                    "--cache-dir", str(cache), "--json", str(result_file)], env=env,
                                   capture_output=True, text=True)
        wall = time.perf_counter() - started
        if not result_file.is_file():
            raise SystemExit(f"check wrote no result (exit {completed.returncode}):\n{completed.stdout[-1500:]}"
                             f"{completed.stderr[-1500:]}")
        result = json.loads(result_file.read_text())
        stages = ", ".join(f"{name} {seconds:.2f}" for name, seconds in result["stages"].items())
        print(f"check {'warm-up' if attempt == 0 else f'run {attempt}'}: {wall:.2f} s, score "
              f"{result['score']:g}/{result['max_score']:g} ({stages})", flush=True)
        if attempt:
            walls.append(wall)
    print(f"check median of {repeat}: {statistics.median(walls):.2f} s", flush=True)
    return walls


def profile_cli(submission: Path, assignment: str, cache: Path, work: Path, top: int) -> None:
    """One warm `grader check` under cProfile; its profile by cumulative time, and the flags that decide
    whether its bytecode is read or compiled."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPOSITORY_ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    profile = work / "cli.prof"
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "grader", "check", str(submission),
                    "-a", assignment, "--cache-dir", str(cache)], env=env, capture_output=True, text=True)
    print(f"\n== grader check under cProfile: {time.perf_counter() - started:.2f} s; "
          f"PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE')!r}, "
          f"sys.dont_write_bytecode={sys.dont_write_bytecode}")
    for order in ("cumulative", "tottime"):
        text = io.StringIO()
        pstats.Stats(str(profile), stream=text).sort_stats(order).print_stats(top)
        print(f"-- by {order}")
        print("\n".join(line for line in text.getvalue().splitlines() if line.strip())[-6000:])


def profile_harnesses(submission: Path, assignment_name: str, cache: Path, work: Path, top: int) -> None:
    """Each kernel's harness of `check`'s run, alone and unsandboxed, under cProfile."""
    sys.path.insert(0, str(REPOSITORY_ROOT))
    from grader.checks.grading import check_calls
    from grader.options import Options
    from grader.pipeline import build_stage
    from grader.runner import Call
    from grader.runner.plan import plan_for
    from grader.assignment import load_assignment
    from grader.status import BuildStatus

    assignment = load_assignment(assignment_name)
    built = build_stage(submission, assignment, Options(public_only=True, cache_dir=cache))
    outputs = work / "outputs"
    calls = [Call(k, c, built.artifacts[k.name].library, inputs, outputs / k.name / c.name)  # type: ignore[arg-type]
             for k, c, inputs in built.selection if built.artifacts[k.name].status == BuildStatus.BUILT]
    calls += check_calls(assignment, built.checks, built.artifacts, built.check_inputs, outputs)
    by_kernel: dict[str, list[Call]] = {}
    for call in calls:
        by_kernel.setdefault(call.kernel.name, []).append(call)
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPOSITORY_ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    walls: dict[str, float] = {}
    for kernel, kernel_calls in by_kernel.items():
        folder = work / "harness" / kernel.replace("/", "-")
        outbox = folder / "out"
        outbox.mkdir(parents=True)
        plan_file, progress, profile = folder / "plan.json", folder / "progress.jsonl", folder / "harness.prof"
        plan_file.write_text(plan_for(assignment, kernel_calls, outbox, False).to_json())
        command = [sys.executable, "-m", "cProfile", "-o", str(profile), "-m", HARNESS_MODULE, str(plan_file),
                   str(progress), "0"]
        wall, stamped, completed = _run_watched(command, env, progress)
        walls[kernel] = wall
        print(f"harness {kernel}: {wall:.2f} s, exit {completed.returncode}, {len(kernel_calls)} calls", flush=True)
        if completed.returncode:
            print(completed.stderr[-1500:])
        print("  events (seconds from launch): " + ", ".join(
            f"{e.get('event')}{'[' + str(e['index']) + ']' if 'index' in e else ''} {at:.2f}"
            for at, e in stamped if e.get("event") != "sealed")[:2000])
    slowest = max(walls, key=walls.__getitem__)
    stats_file = work / "harness" / slowest.replace("/", "-") / "harness.prof"
    for order in ("tottime", "cumulative"):
        text = io.StringIO()
        pstats.Stats(str(stats_file), stream=text).sort_stats(order).print_stats(top)
        print(f"\n== the slowest harness ({slowest}, {walls[slowest]:.2f} s) by {order}")
        print("\n".join(line for line in text.getvalue().splitlines() if line.strip())[-6000:])


def _run_watched(command: list[str], env: dict[str, str],
                 progress: Path) -> tuple[float, list[tuple[float, dict]], subprocess.CompletedProcess]:
    """Run a harness, stamping each progress line with the time it appeared (polled every 2 ms)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stamped: list[tuple[float, dict]] = []
    seen = 0
    while True:
        ended = process.poll() is not None
        # Whole lines only: the last may be half written.
        lines = progress.read_text().split("\n")[:-1] if progress.is_file() else []
        for line in lines[seen:]:
            if line.strip():
                stamped.append((time.perf_counter() - started, json.loads(line)))
        seen = len(lines)
        if ended:
            break
        time.sleep(0.002)
    stdout, stderr = process.communicate()
    wall = time.perf_counter() - started
    return wall, stamped, subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--assignment", default="gpt2-m1")
    parser.add_argument("--submission", type=Path, default=None,
                        help="a submission folder (default: the assignment's reference, composed)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of `grader check` (default 3)")
    parser.add_argument("--top", type=int, default=40, help="functions listed per profile (default 40)")
    arguments = parser.parse_args()
    sys.path.insert(0, str(REPOSITORY_ROOT))
    from grader.samples import compose
    from grader.assignment import load_assignment

    assignment = load_assignment(arguments.assignment)
    with tempfile.TemporaryDirectory(prefix="kg-check-profile-") as scratch:
        work = Path(scratch)
        submission = arguments.submission or compose(assignment, None, work / "submission")
        cache = work / "cache"
        time_check(submission, assignment.name, cache, arguments.repeat, work)
        profile_cli(submission, assignment.name, cache, work, arguments.top)
        profile_harnesses(submission, assignment.name, cache, work, arguments.top)


if __name__ == "__main__":
    main()
