"""A class on one GPU runner at two sizes, in one run: throughput, and whether it stays flat (issue 13, goal b).

    python benchmarks/class_on_gpu.py [--assignment gpt2-m1] [--sizes 24,96] [--json OUT] [--keep DIR] [batch options]

Each size is a class of its own: that many git repositories (built as `synthetic_class.py` builds
them, a roster beside them) graded by the real `grader batch` CLI with the local executor and its
defaults (sanitizer on), unless batch options are given after the script's own. The mix comes
from the assignment's samples (assignments/<name>/samples/), shuffled into roster order:
- correct: the reference, the course-style submissions and the alternatives, in turn;
- broken: the mutants (failing, forbidden) and a compile error where the assignment has one: 3/10;
- crashing: the hostile crashes (not the attacker's corpus, attack-*): 1/12, at least one;
- timing out: exactly one (the assignment's first hostile time-out, an infinite loop).
Every source of every submission carries a comment of its own (the class's size and the
student's number), so no build comes from the cache: builds are cold. Inputs and gold are
computed once before anything is timed (said in the output) and are warm for every class.

Printed: submissions per hour, seconds per submission (wall / N) at each size and their ratio
(1.0: flat), CPU utilisation and, on CUDA assignments, GPU utilisation (nvidia-smi every 0.5 s), the
share of time compiling and running, the outcomes, and each stage summed over the class. The
figures are written to --json after each size, so a run stopped early keeps the sizes it finished.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic_class import STAGES, Member, batch_environment, make_class, time_batch  # noqa: E402

from grader.options import Options  # noqa: E402
from grader.pipeline import prepare_gold  # noqa: E402
from grader.samples import variants  # noqa: E402
from grader.assignment import Assignment, load_assignment  # noqa: E402

# The batch's secret seed ($KERNEL_GRADER_SECRET): hidden cases are drawn as in a real class.
SECRET = "class-on-gpu-benchmark"


def corpus_pools(assignment: Assignment) -> dict[str, list]:
    """The assignment's samples by kind; the attacker's corpus (attack-*) is not a class's mix."""
    bundled = [v for v in variants(assignment) if not v.name.startswith("attack-")]
    return {
        "correct": [None] + [v for v in bundled if v.kind in ("course", "alternative") and v.expect == "passed"],
        "broken": [v for v in bundled if (v.kind == "mutant" and v.expect in ("failed", "forbidden"))
                   or (v.kind == "hostile" and v.expect == "compile_error")],
        "crashing": [v for v in bundled if v.kind == "hostile" and v.expect == "crashed"],
        "timeout": [v for v in bundled if v.kind == "hostile" and v.expect == "timeout"][:1],
    }


def class_of(assignment: Assignment, size: int) -> list[Member]:
    """`size` members in the module docstring's mix, shuffled (the same order for the same size)."""
    pools = corpus_pools(assignment)
    for kind, pool in pools.items():
        if not pool:
            raise SystemExit(f"{assignment.name} has no bundled {kind} submission")
    counts = {"timeout": 1, "crashing": max(1, round(size / 12)), "broken": round(size * 3 / 10)}
    counts["correct"] = size - sum(counts.values())
    if counts["correct"] < 1:
        raise SystemExit(f"--sizes: {size} is too small for the mix (at least 4)")
    members = [Member(kind, pools[kind][i % len(pools[kind])]) for kind, count in counts.items() for i in range(count)]
    random.Random(size).shuffle(members)
    return members


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--assignment", default="gpt2-m1")
    parser.add_argument("--sizes", default="24,96", help="class sizes, graded one after another (default 24,96)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here (after each size)")
    parser.add_argument("--keep", type=Path, default=None, help="build the classes in this folder and keep them")
    arguments, batch_options = parser.parse_known_args()
    assignment = load_assignment(arguments.assignment)
    sizes = [int(s) for s in arguments.sizes.split(",") if s.strip()]
    folder = arguments.keep or Path(tempfile.mkdtemp(prefix="kg-bench-class-"))
    folder.mkdir(parents=True, exist_ok=True)
    cache = folder / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    started = time.perf_counter()
    prepare_gold(assignment, Options(cache_dir=cache, secret=SECRET))
    gold_s = time.perf_counter() - started
    print(f"inputs and gold computed before timing, in {gold_s:.1f} s: warm for every class; builds are cold",
          flush=True)
    figures: dict = {"assignment": assignment.name, "gold_before_timing_s": round(gold_s, 1), "classes": []}
    env = batch_environment({"KERNEL_GRADER_SECRET": SECRET})
    try:
        for size in sizes:
            members = class_of(assignment, size)
            mix = {kind: sum(m.kind == kind for m in members) for kind in ("correct", "broken", "crashing", "timeout")}
            roster = make_class(assignment, members, folder / f"class-{size}", tag=f"class-{size}-")
            print(f"\n== a class of {size}: {mix}", flush=True)
            measured = time_batch(assignment, roster, folder / f"class-{size}" / "grades.sqlite", cache, batch_options,
                                  env)
            figures["classes"].append({**measured, "size": size, "mix": mix})
            if arguments.json:
                arguments.json.write_text(json.dumps(figures, indent=1) + "\n")
    finally:
        if not arguments.keep:
            shutil.rmtree(folder, ignore_errors=True)
    _print_table(figures)


def _print_table(figures: dict) -> None:
    classes = figures["classes"]
    print(f"\n{figures['assignment']}: inputs and gold warm (computed before timing in "
          f"{figures['gold_before_timing_s']} s), builds cold, sanitizer as the batch options say")
    print("| size | mix (correct/broken/crashing/timeout) | wall (s) | submissions/hour | s per submission | CPU util. "
          "| GPU util. | compiling | running | both | outcomes |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for c in classes:
        mix = "/".join(str(c["mix"][k]) for k in ("correct", "broken", "crashing", "timeout"))
        gpu = f"{c['gpu_utilisation_mean']:.3f}" if c["gpu_utilisation_mean"] is not None else "n/a"
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(c["outcomes"].items()))
        print(f"| {c['size']} | {mix} | {c['wall_s']:.1f} | {c['submissions_per_hour']} "
              f"| {c['seconds_per_submission']} "
              f"| {c['cpu_utilisation']:.2f} | {gpu} | {c['share_compiling']:.0%} | {c['share_running']:.0%} "
              f"| {c['share_both']:.0%} | {outcomes} |")
    print("\nstages summed over the class (s):")
    print("| size | " + " | ".join(STAGES) + " | run again alone |")
    print("|---|" + "---|" * (len(STAGES) + 1))
    for c in classes:
        sums = c["summed_stage_seconds"]
        print(f"| {c['size']} | " + " | ".join(f"{sums.get(s, 0.0):.1f}" for s in STAGES)
              + f" | {c['runs_again_alone']} |")
    if len(classes) >= 2:
        first, last = classes[0], classes[-1]
        print(f"\nflat? seconds per submission at {last['size']} / at {first['size']}: "
              f"{last['seconds_per_submission'] / first['seconds_per_submission']:.2f} (1.00: flat)")


if __name__ == "__main__":
    main()
