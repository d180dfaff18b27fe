"""The speed-up table of the reference's optimizations: gpt2-m2's kernels/ against kernels_req_0..3 (issue 14, point 5).

    python benchmarks/speedups.py --out DIR [--assignment gpt2-m2] [--cap-s 1.0] [--cache-dir DIR]

Every kernel of the reference's base and of each variant timed by `grader time`'s protocol
(grader.timing: the L2 flush, rotating inputs, CUDA events behind a spin kernel, the median until
the relative standard error is below 1% or the cap, the re-check against gold), each in its
sandboxed timing harness with the GPU to itself. Prints the table as Markdown and writes
DIR/speedups.md and DIR/speedups.json (every timing, with its samples and SM clocks).
About two minutes on an H200 from a cold cache (most of it nvcc).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY_ROOT))

from grader.options import Options, default_cache_dir  # noqa: E402
from grader.assignment import load_assignment  # noqa: E402
from grader.timing.run import time_submission  # noqa: E402
from grader.timing.spec import load_timing  # noqa: E402
from grader.timing.table import clocks_summary, markdown, speedup_table  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for speedups.md and speedups.json")
    parser.add_argument("--assignment", default="gpt2-m2")
    parser.add_argument("--cap-s", type=float, default=1.0, help="the stop rule's time cap per kernel (seconds)")
    parser.add_argument("--cache-dir", type=Path, default=None)
    arguments = parser.parse_args(argv)
    assignment = load_assignment(arguments.assignment)
    timing = load_timing(assignment)
    timing = dataclasses.replace(timing, rule=dataclasses.replace(timing.rule, cap_s=arguments.cap_s))
    started = time.perf_counter()
    reference = time_submission(assignment.reference_dir, assignment,
                                Options(cache_dir=arguments.cache_dir or default_cache_dir()), timing)
    table = speedup_table(reference, None, dataclasses.replace(timing, leaderboard="geomean_speedup_vs_m1"))
    device = next((k.device for k in reference.kernels if k.device), "no device")
    text = "\n".join([markdown(table, f"Speed-ups of the reference's optimizations ({assignment.name}, {device})"),
                      "", clocks_summary(reference.kernels),
                      f"Measured in {time.perf_counter() - started:.0f} s (builds included)."])
    print(text)
    arguments.out.mkdir(parents=True, exist_ok=True)
    (arguments.out / "speedups.md").write_text(text + "\n")
    (arguments.out / "speedups.json").write_text(json.dumps({"device": device, "reference": reference.to_dict(),
                                                             "table": table.to_dict()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
