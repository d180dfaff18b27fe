"""Regenerate docs/examples/ from real runs of the bundled flash-attention-cpu samples.

    python3 docs/make_examples.py [--cache-dir DIR]

Grades the reference, the student template, two mutants, a crash and a compile error on every case,
stores them as a small class (one late, one not submitted) and renders every report and export
from that store, exactly as `grader report` and `grader export` do.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from grader.batch.late import apply_late_policy
from grader.options import Options, default_cache_dir
from grader.pipeline import grade
from grader.results import Result
from grader.samples import compose, variants
from grader.assignment import LatePolicy, load_assignment
from grader.store import Store

DOCS = Path(__file__).resolve().parent
ASSIGNMENT = "flash-attention-cpu"
# student id -> the sample they "submitted" (None: the reference; "template": the starter code)
CLASS = {
    "ada": None,
    "brian": "mutant-flash-no-rescale",
    "chen": "mutant-standard-last-row-skipped",
    "dana": "hostile-flash-segfault",
    "emil": "hostile-standard-compile-error",
    "fatima": "template",
    "gus": "mutant-standard-transposed-k",
    "hana": None,
}
LATE = {"hana": 2}  # days late: hana's full-marks submission loses 10% of the points a day
DEADLINE = datetime.datetime(2026, 11, 20, 23, 59, tzinfo=datetime.timezone.utc)
POLICY = LatePolicy(grace_days=0, penalty_per_day=0.1, cap=0.5)
NOT_SUBMITTED = ["ivan"]


def grade_class(workdir: Path, cache_dir: Path) -> list[Result]:
    """Grade every sample of CLASS once, as the students' own results."""
    assignment = load_assignment(ASSIGNMENT)
    by_name = {v.name: v for v in variants(assignment)}
    graded: dict[str | None, Result] = {}
    results = []
    for student, sample in CLASS.items():
        if sample not in graded:
            folder = workdir / (sample or "reference")
            if sample == "template":
                shutil.copytree(assignment.template_dir, folder)
            else:
                compose(assignment, by_name[sample] if sample else None, folder)
            commit(folder, sample or "reference")
            graded[sample] = grade(folder, assignment, Options(cache_dir=cache_dir, secret="docs-example-secret"))
        # The sample's name stands in for the temporary folder it was graded in.
        submission = dataclasses.replace(graded[sample].submission, path=f"samples/{sample or 'reference'}")
        result = dataclasses.replace(graded[sample], student=student, submission=submission)
        submitted = DEADLINE + datetime.timedelta(days=LATE.get(student, 0), minutes=-1 if student not in LATE else 0)
        results.append(apply_late_policy(result, POLICY, DEADLINE, submitted))
    for student in NOT_SUBMITTED:
        results.append(not_submitted(results[0], student))
    return results


def commit(folder: Path, message: str) -> None:
    """Make the sample a git repository with one commit, as a student's repository is."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "Student", "GIT_AUTHOR_EMAIL": "student@example.edu",
           "GIT_COMMITTER_NAME": "Student", "GIT_COMMITTER_EMAIL": "student@example.edu"}
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", message]):
        subprocess.run(["git", *command], cwd=folder, env=env, check=True)


def not_submitted(template: Result, student: str) -> Result:
    return dataclasses.replace(template, student=student, status="not_submitted", score=0.0, raw_score=None,
                               kernels=[], message="no commit before the deadline", late=None,
                               submission=dataclasses.replace(template.submission, commit=None, commit_time=None))


def screenshots(out: Path, scratch: Path) -> None:
    """What a browser shows of the dashboard and of two students' reports (needs Debian's chromium)."""
    chromium = shutil.which("chromium")
    if chromium is None:
        print("no chromium: screenshots not taken (ci/setup/chromium.sh installs it)")
        return
    (out / "screenshots").mkdir()
    for page in ("index.html", "students/chen.html", "students/emil.html"):
        png = out / "screenshots" / (page.replace("students/", "student-").replace(".html", ".png"))
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        f"--user-data-dir={tempfile.mkdtemp(dir=scratch)}", f"--screenshot={png}",
                        "--window-size=1280,2000", (out / "dashboard" / page).as_uri()],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=Path, default=default_cache_dir())
    parser.add_argument("--out", type=Path, default=DOCS / "examples")
    arguments = parser.parse_args()
    out: Path = arguments.out
    # terminal/ holds tmux captures made by hand (its README says how): everything else is made here again.
    out.mkdir(parents=True, exist_ok=True)
    for made in out.iterdir():
        if made.name != "terminal":
            shutil.rmtree(made) if made.is_dir() else made.unlink()
    with tempfile.TemporaryDirectory(prefix="kg-docs-") as scratch:
        results = grade_class(Path(scratch), arguments.cache_dir)
        store_path = Path(scratch) / "class.sqlite"
        store = Store(store_path)
        for result in results:
            store.save(result)
        store.close()
        grader = [sys.executable, "-m", "grader"]
        commands = [
            [*grader, "report", "dashboard", "--store", str(store_path), "--assignment", ASSIGNMENT,
             "--out", str(out / "dashboard")],
            [*grader, "export", "gradebook", "--store", str(store_path), "--assignment", ASSIGNMENT,
             "--out", str(out / "gradebook.csv")],
        ]
        for result in results:
            if result.status != "graded":
                continue
            saved = out / "results" / f"{result.student}.json"  # what `grader grade --json` writes
            result.write(saved)
            commands += [
                [*grader, "report", "markdown", str(saved), "--out", str(out / "markdown" / f"{result.student}.md")],
                [*grader, "export", "junit", str(saved), "--out", str(out / "junit" / f"{result.student}.xml")],
                [*grader, "export", "gradescope-results", "--result", str(saved),
                 "--out", str(out / "gradescope" / f"{result.student}.results.json")],
            ]
        for command in commands:
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        screenshots(out, Path(scratch))
    print(f"examples written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
