"""Every pack's reference graded whole under many instructors' secrets: full marks each time (issue 42, point 0).

    python benchmarks/secret_sweep.py [--assignment NAME ...] [--secrets 50] [--budget-s S] [--jobs N] [--json OUT]

Each secret is a fresh draw of every secret-seeded case, so each grade computes its inputs and gold anew (nothing
is served from an earlier secret's cache): what an instructor's batch does once per term, here N times. A pack
this machine cannot grade (a GPU pack without a GPU, torch missing) is skipped with the reason. --budget-s gives each
pack that many seconds: its grades stop there, and the line says how many secrets it got (what was measured, never
extrapolated). --jobs grades that many secrets at once, in processes of their own, after the first (which builds
what the rest reuse).
Exits 1 where any grade missed full marks, with the kernels and their messages.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader.assignment import ASSIGNMENTS_DIR, load_assignment  # noqa: E402
from grader.device import unavailable_reason  # noqa: E402
from grader.options import Options  # noqa: E402
from grader.pipeline import grade  # noqa: E402
from grader.preflight import missing_for  # noqa: E402


# What one secret's grade may share with the others: what the secret does not change (the cache's other folders, its
# inputs and gold among them, are the secret's own and removed after its grade: a GPT-2 secret's gold is GBs).
SHARED = ("builds", "bytecode", "alloc-counter")


def graded(name: str, secret: str, cache: str, sanitizer: bool) -> tuple[str, float, dict | None]:
    """One grade of NAME's reference under SECRET: its seconds, and what missed full marks (None if nothing)."""
    pack = load_assignment(name)
    own = Path(cache) / "secrets" / secret
    own.mkdir(parents=True)
    for folder in SHARED:
        (Path(cache) / folder).mkdir(exist_ok=True)
        (own / folder).symlink_to(Path(cache) / folder)
    t0 = time.monotonic()
    try:
        result = grade(pack.reference_dir, pack, Options(secret=secret, cache_dir=own, sanitizer=sanitizer))
    finally:
        shutil.rmtree(own, ignore_errors=True)
    seconds = time.monotonic() - t0
    if result.score == result.max_score:
        return secret, seconds, None
    return secret, seconds, {"secret": secret, "score": result.score, "max_score": result.max_score,
                             "kernels": [{"name": k.name, "message": k.message} for k in result.kernels
                                         if k.score != k.max_score]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assignment", "-a", action="append", help="a pack's name (repeatable; default: every pack)")
    parser.add_argument("--secrets", type=int, default=50)
    parser.add_argument("--budget-s", type=float, default=None, help="each pack's grades stop after this many seconds")
    parser.add_argument("--sanitizer", action="store_true", help="compute-sanitizer as `grade` has it (slower)")
    parser.add_argument("--jobs", type=int, default=1, help="secrets graded at once, after the first")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    names = args.assignment or sorted(p.parent.name for p in ASSIGNMENTS_DIR.glob("*/assignment.toml"))
    started = time.monotonic()
    rows: list[dict] = []
    failed = False
    with tempfile.TemporaryDirectory(prefix="secret-sweep-") as cache:
        for name in names:
            pack = load_assignment(name)
            reason = missing_for(pack) or unavailable_reason(pack.target, pack.python_packages)
            if reason:
                rows.append({"assignment": name, "skipped": reason})
                print(f"{name}: skipped: {reason}", flush=True)
                continue
            seconds: list[float] = []
            pack_started = time.monotonic()
            misses: list[dict] = []

            def record(secret: str, took: float, miss: dict | None) -> None:
                seconds.append(took)
                if miss is not None:
                    misses.append(miss)
                    print(f"{name}: {secret}: {miss['score']}/{miss['max_score']}", flush=True)

            secrets = [f"sweep-{name}-{i}" for i in range(args.secrets)]
            if secrets:
                record(*graded(name, secrets[0], cache, args.sanitizer))
            # A pool of processes: each grade's harnesses are processes anyway; the pool only overlaps them. Spawned,
            # not forked: this process may hold a CUDA context (the device probe), which a fork can't carry.
            with concurrent.futures.ProcessPoolExecutor(max_workers=max(1, args.jobs),
                                                        mp_context=multiprocessing.get_context("spawn")) as pool:
                pending = iter(secrets[1:])
                running: set[concurrent.futures.Future] = set()
                while True:
                    while len(running) < max(1, args.jobs) and not over_budget(args.budget_s, pack_started):
                        secret = next(pending, None)
                        if secret is None:
                            break
                        running.add(pool.submit(graded, name, secret, cache, args.sanitizer))
                    if not running:
                        break
                    done, running = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
                    for future in done:
                        record(*future.result())
            full = len(seconds) - len(misses)
            failed |= bool(misses)
            rows.append({"assignment": name, "secrets": len(seconds), "full_marks": full, "misses": misses,
                         "median_s": statistics.median(seconds) if seconds else None})
            median = f"{statistics.median(seconds):.2f} s a grade" if seconds else "no grade within the budget"
            print(f"{name}: full marks under {full} of {len(seconds)} secrets ({median})", flush=True)
            if args.json:  # after each pack: a sweep cut by its time box keeps the packs it finished
                args.json.write_text(json.dumps({"rows": rows, "wall_s": time.monotonic() - started}, indent=2))
    return 1 if failed else 0


def over_budget(budget_s: float | None, started: float) -> bool:
    return budget_s is not None and time.monotonic() - started > budget_s


if __name__ == "__main__":
    sys.exit(main())
