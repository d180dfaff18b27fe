"""Every pack's reference graded whole under many instructors' secrets: full marks each time (issue 42, point 0).

    python benchmarks/secret_sweep.py [--assignment NAME ...] [--secrets 50] [--budget-s S] [--json OUT]

Each secret is a fresh draw of every secret-seeded case, so each grade computes its inputs and gold anew (nothing
is served from an earlier secret's cache): what an instructor's batch does once per term, here N times. A pack
this machine cannot grade (a GPU pack without a GPU, torch missing) is skipped with the reason. --budget-s gives each
pack that many seconds: its grades stop there, and the line says how many secrets it got (what was measured, never
extrapolated).
Exits 1 where any grade missed full marks, with the kernels and their messages.
"""

from __future__ import annotations

import argparse
import json
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assignment", "-a", action="append", help="a pack's name (repeatable; default: every pack)")
    parser.add_argument("--secrets", type=int, default=50)
    parser.add_argument("--budget-s", type=float, default=None, help="each pack's grades stop after this many seconds")
    parser.add_argument("--sanitizer", action="store_true", help="compute-sanitizer as `grade` has it (slower)")
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
            for i in range(args.secrets):
                if args.budget_s is not None and time.monotonic() - pack_started > args.budget_s:
                    break
                secret = f"sweep-{name}-{i}"
                t0 = time.monotonic()
                result = grade(pack.reference_dir, pack,
                               Options(secret=secret, cache_dir=Path(cache), sanitizer=args.sanitizer))
                seconds.append(time.monotonic() - t0)
                if result.score != result.max_score:
                    misses.append({"secret": secret, "score": result.score, "max_score": result.max_score,
                                   "kernels": [{"name": k.name, "message": k.message} for k in result.kernels
                                               if k.score != k.max_score]})
                    print(f"{name}: {secret}: {result.score}/{result.max_score}", flush=True)
            full = len(seconds) - len(misses)
            failed |= bool(misses)
            rows.append({"assignment": name, "secrets": len(seconds), "full_marks": full, "misses": misses,
                         "median_s": statistics.median(seconds) if seconds else None})
            median = f"{statistics.median(seconds):.2f} s a grade" if seconds else "no grade within the budget"
            print(f"{name}: full marks under {full} of {len(seconds)} secrets ({median})", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "wall_s": time.monotonic() - started}, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
