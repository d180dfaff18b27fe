"""A store of 300 students for looking at the dashboard at a real class's size.

How it is made (so that what the dashboard shows is real): every bundled flash-attention-cpu sample
that is not a sandbox attack (the reference, the template, the mutants, the alternatives, the
hostile crash/loop/compile-error ones) is graded once for real; then 300 generated students
(s001..s300) are each given one of those real results (the reference most often), a submission
time from 2 days early to 5 days late (the late policy below applied by `apply_late_policy`, as a
batch does), 15 of them nothing graded (`not_submitted`), and every tenth a second, later result
(a regrade in run 2), so that history pages have more than one row.

    python benchmarks/class_of_300.py OUT_DIR     # writes OUT_DIR/class.sqlite and OUT_DIR/board/
"""

from __future__ import annotations

import dataclasses
import datetime
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader.batch.late import apply_late_policy  # noqa: E402
from grader.cli import main  # noqa: E402
from grader.options import Options  # noqa: E402
from grader.pipeline import grade, not_graded  # noqa: E402
from grader.results import Submission  # noqa: E402
from grader.samples import compose, variants  # noqa: E402
from grader.assignment import LatePolicy, load_assignment  # noqa: E402
from grader.store import Store  # noqa: E402

DEADLINE = datetime.datetime(2026, 3, 1, 23, 59, tzinfo=datetime.timezone(datetime.timedelta(hours=-6)))
POLICY = LatePolicy(grace_days=1, penalty_per_day=0.2, cap=0.5, max_late_days=5)


def main_(out: Path) -> None:
    assignment = load_assignment("flash-attention-cpu")
    kernels = tuple(dataclasses.replace(k, time_limit_s=3.0, time_budget_s=6.0) for k in assignment.kernels)
    assignment = dataclasses.replace(assignment, kernels=kernels, submission_time_limit_s=None, late=POLICY)
    options = Options(cache_dir=out / "cache")
    samples = [None] + [v for v in variants(assignment) if not v.name.startswith("attack-")]
    real = {}
    for sample in samples:
        name = sample.name if sample else "reference"
        started = time.monotonic()
        real[name] = grade(compose(assignment, sample, out / "samples" / name), assignment, options)
        print(f"graded {name}: {real[name].score:g}/{real[name].max_score:g} in {time.monotonic() - started:.1f} s",
              flush=True)
    names = list(real)
    rng = random.Random(300)
    store_path = out / "class.sqlite"
    store_path.unlink(missing_ok=True)
    store = Store(store_path)
    first = store.start_run(assignment.name, "new", [f"s{i:03d}" for i in range(1, 301)], command="class_of_300")
    regrade = store.start_run(assignment.name, "regrade", [f"s{i:03d}" for i in range(10, 301, 10)],
                              command="class_of_300 --regrade")
    for i in range(1, 301):
        student = f"s{i:03d}"
        if i % 20 == 7:
            result = not_graded(assignment, options, "not_submitted",
                                f"https://git.example.edu/{student}.git: the repository has no commits",
                                Submission(f"https://git.example.edu/{student}.git"))
            store.save(dataclasses.replace(result, student=student), first.id)
            continue
        name = "reference" if rng.random() < 0.45 else rng.choice(names)
        submitted = DEADLINE + datetime.timedelta(days=rng.choice([-2, -1, -0.2, 0, 0, 0, 0.3, 1.2, 2.5, 4.1]))
        result = apply_late_policy(dataclasses.replace(real[name], student=student), POLICY, DEADLINE, submitted)
        store.save(result, first.id)
        if i % 10 == 0:
            later = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1 + i % 3))
            again = apply_late_policy(dataclasses.replace(real["reference"], student=student,
                                                          graded_at=later.isoformat(timespec="seconds")),
                                      POLICY, DEADLINE, submitted)
            store.save(again, regrade.id)
    store.finish_run(first.id)
    store.finish_run(regrade.id)
    store.close()
    assert main(["report", "dashboard", "--store", str(store_path), "-a", assignment.name,
                 "--out", str(out / "board")]) == 0


if __name__ == "__main__":
    main_(Path(sys.argv[1]))
