"""`grader batch` on a real class: real git repositories with commits dated around the deadline,
an empty one, a missing one, a late commit with an extension, a roster commit, a broken row."""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from grader.cli import main
from grader.results import Result
from grader.samples import compose, variants
from grader.assignment import Assignment, load_assignment
from grader.store import Store

DEADLINE = "2026-03-01 23:59 America/Chicago"
DEADLINE_AT = datetime.datetime(2026, 3, 1, 23, 59, tzinfo=datetime.timezone(datetime.timedelta(hours=-6)))
LATE_FLAGS = ["--grace-days", "1", "--penalty-per-day", "0.2", "--late-cap", "0.5", "--max-late-days", "3"]


def at(days: float) -> datetime.datetime:
    """A moment `days` after the test deadline."""
    return DEADLINE_AT + datetime.timedelta(days=days)


def submission(assignment: Assignment, name: str | None, folder: Path) -> Path:
    """The reference, the student template ('template'), or the reference with a bundled variant laid over it."""
    if name == "template":
        return Path(shutil.copytree(assignment.template_dir, folder))
    variant = next(v for v in variants(assignment) if v.name == name) if name else None
    return compose(assignment, variant, folder)


def commit(repo: Path, files: Path, when: datetime.datetime, message: str) -> str:
    """Replace the work tree with `files` and commit it, dated `when` (author and committer alike)."""
    for entry in repo.iterdir():
        if entry.name != ".git":
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    shutil.copytree(files, repo, dirs_exist_ok=True)
    env = {**os.environ, "GIT_AUTHOR_DATE": when.isoformat(), "GIT_COMMITTER_DATE": when.isoformat()}
    git = ["git", "-c", "user.name=Student", "-c", "user.email=student@example.edu", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True, env=env)
    subprocess.run([*git, "commit", "-q", "-m", message], cwd=repo, check=True, env=env)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True,
                          text=True).stdout.strip()


def make_repo(root: Path, assignment: Assignment, history: list[tuple[str | None, float]]) -> tuple[Path, list[str]]:
    """A git repository whose commits are (submission, days after the deadline); returns it and the shas."""
    repo = root / "repos" / f"{root.name}-{len(list((root / 'repos').glob('*'))) if (root / 'repos').exists() else 0}"
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    shas = []
    for i, (name, days) in enumerate(history):
        files = submission(assignment, name, root / "scratch" / f"{repo.name}-{i}")
        shas.append(commit(repo, files, at(days), f"commit {i}"))
    return repo, shas


def run_batch(*arguments: str) -> int:
    return main(["batch", *arguments])


@pytest.fixture(scope="module")
def flash() -> Assignment:
    return load_assignment("flash-attention-cpu")


@pytest.fixture(scope="module")
def classroom(flash: Assignment, tmp_path_factory: pytest.TempPathFactory, request) -> dict:
    root = tmp_path_factory.mktemp("class")
    alice, alice_shas = make_repo(root, flash, [(None, -2), ("mutant-flash-no-rescale", 5)])
    bob, bob_shas = make_repo(root, flash, [("template", -1), (None, 1 + 2 / 24)])
    carol, carol_shas = make_repo(root, flash, [(None, 1.5)])
    dave = root / "repos" / "dave-empty"
    dave.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=dave, check=True)
    frank, _ = make_repo(root, flash, [(None, 10)])
    gina, gina_shas = make_repo(root, flash, [("hostile-flash-segfault", -3), (None, -1)])
    roster = root / "roster.csv"
    roster.write_text(
        "student,repository,extension_days,commit\n"
        f"alice,{alice},,\n"
        f"bob,{bob},,\n"
        f"carol,{carol},2,\n"
        f"dave,{dave},,\n"
        f"erin,{root / 'repos' / 'erin-never-created'},,\n"
        f"frank,{frank},,\n"
        f"gina,{gina},,{gina_shas[0]}\n"
        "henry,,,\n"
        f"ivan,{alice},soon,\n"
    )
    return {"root": root, "roster": roster, "alice": alice_shas, "bob": bob_shas, "carol": carol_shas,
            "gina": gina_shas}


@pytest.fixture(scope="module")
def graded(classroom: dict, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Result], str]:
    work = tmp_path_factory.mktemp("batch")
    store = work / "grades.sqlite"
    capture = pytest.MonkeyPatch()
    import io

    from rich.console import Console

    output = io.StringIO()
    capture.setattr("grader.cli.batch.Console", lambda *a, **k: Console(file=output, width=200))
    try:
        code = run_batch(str(classroom["roster"]), "-a", "flash-attention-cpu", "--deadline", DEADLINE,
                         "--store", str(store), "--cache-dir", str(work / "cache"), *LATE_FLAGS)
    finally:
        capture.undo()
    assert code == 0, output.getvalue()
    results = {r.student: r for r in Store(store).latest("flash-attention-cpu")}
    return results, output.getvalue()


def test_pins_the_last_commit_at_or_before_the_deadline(graded, classroom) -> None:
    results, _ = graded
    alice = results["alice"]
    assert alice.submission.commit == classroom["alice"][0]  # the broken commit came past the late window
    assert alice.score == alice.raw_score == 3 and alice.late is not None and alice.late.days_late == 0
    assert all(k.status == "passed" for k in alice.kernels)


def test_late_commit_costs_late_days_past_the_grace_days(graded, classroom) -> None:
    bob = graded[0]["bob"]
    assert bob.submission.commit == classroom["bob"][1]
    # 26 hours late: 2 started days, 1 of them grace, 0.2 of the max score for the other.
    assert bob.late.days_late == 2 and bob.late.grace_days == 1
    assert bob.raw_score == 3 and bob.late.points_deducted == pytest.approx(0.6) and bob.score == pytest.approx(2.4)


def test_extension_moves_the_student_deadline(graded, classroom) -> None:
    carol = graded[0]["carol"]
    assert carol.submission.commit == classroom["carol"][0]
    assert carol.late.days_late == 0 and carol.score == 3
    assert datetime.datetime.fromisoformat(carol.late.deadline) == DEADLINE_AT + datetime.timedelta(days=2)


def test_empty_missing_and_too_late_repositories_are_not_submitted(graded) -> None:
    results, _ = graded
    assert results["dave"].status == "not_submitted" and "no commits" in results["dave"].message
    assert results["erin"].status == "not_submitted" and "erin-never-created" in results["erin"].message
    assert results["frank"].status == "not_submitted" and "no commit" in results["frank"].message
    assert all(results[s].score == 0 and results[s].max_score == 3 for s in ("dave", "erin", "frank"))


def test_roster_commit_is_graded_whatever_came_later(graded, classroom) -> None:
    gina = graded[0]["gina"]
    assert gina.submission.commit == classroom["gina"][0]
    flash = {k.name: k for k in gina.kernels}["flash_attention"]
    assert flash.status == "crashed" and "SIGSEGV" in flash.message


def test_bad_roster_rows_are_named_and_skipped(graded) -> None:
    results, output = graded
    assert "henry" not in results and "ivan" not in results
    assert "line 9: student 'henry' has no repository" in output
    assert "line 10: extension_days 'soon' is not a number" in output


def test_summary_counts_every_outcome(graded) -> None:
    _, output = graded
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in output.splitlines()
            if line.count("│") >= 3}
    assert rows["passed"] == "3" and rows["crashed"] == "1" and rows["not_submitted"] == "3"
    assert "slowest:" in output


def test_push_log_pins_by_push_time_not_commit_time(flash: Assignment, tmp_path: Path) -> None:
    # Committed (by the student's clock) before the deadline, but pushed two days after it.
    repo, shas = make_repo(tmp_path, flash, [("template", -3), (None, -0.5)])
    log = tmp_path / "pushes.csv"
    log.write_text(f"student,commit,pushed_at\nzoe,{shas[0]},{at(-3).isoformat()}\nzoe,{shas[1]},{at(2).isoformat()}\n")
    roster = tmp_path / "roster.csv"
    roster.write_text(f"zoe,{repo}\n")  # no header: the columns are positional
    store = tmp_path / "grades.sqlite"
    assert run_batch(str(roster), "-a", "flash-attention-cpu", "--deadline", DEADLINE, "--store", str(store),
                     "--cache-dir", str(tmp_path / "cache"), "--pin", "push-log", str(log), *LATE_FLAGS) == 0
    zoe = Store(store).latest("flash-attention-cpu")[0]
    assert zoe.submission.commit == shas[1] and zoe.raw_score == 3
    assert zoe.late.days_late == 2 and zoe.score == pytest.approx(2.4)


def test_only_and_regrade_select_students(classroom, graded, tmp_path: Path) -> None:
    results, _ = graded
    store_file = tmp_path / "grades.sqlite"
    store = Store(store_file)
    for result in results.values():
        store.save(result)
    assert run_batch(str(classroom["roster"]), "-a", "flash-attention-cpu", "--deadline", DEADLINE, "--store",
                     str(store_file), "--cache-dir", str(tmp_path / "cache"), "--only", "carol", *LATE_FLAGS) == 0
    assert len(store.history("flash-attention-cpu", "carol")) == 2
    assert len(store.history("flash-attention-cpu", "alice")) == 1
    # Nothing new to do: a plain rerun grades no one.
    assert run_batch(str(classroom["roster"]), "-a", "flash-attention-cpu", "--deadline", DEADLINE, "--store",
                     str(store_file), "--cache-dir", str(tmp_path / "cache"), *LATE_FLAGS) == 0
    assert sum(len(store.history("flash-attention-cpu", s)) for s in results) == len(results) + 1
    # --failed: only gina's crashed kernel is graded again.
    assert run_batch(str(classroom["roster"]), "-a", "flash-attention-cpu", "--deadline", DEADLINE, "--store",
                     str(store_file), "--cache-dir", str(tmp_path / "cache"), "--failed", *LATE_FLAGS) == 0
    assert len(store.history("flash-attention-cpu", "gina")) == 2
    assert len(store.history("flash-attention-cpu", "bob")) == 1


@pytest.mark.parametrize("name, mutant", [("autodiff-reverse", "mutant-shared-node-overwritten"),
                                          ("sparse-spmv-spgemm", "mutant-spmv-transposed"),
                                          ("flash-attention-backward", "mutant-flash-backward-dv-wrong-axis")])
def test_a_newer_packs_class_scores_the_reference_full_and_the_mutant_its_cases(name: str, mutant: str,
                                                                                tmp_path: Path, cache_dir: Path) -> None:
    """A class of two real repositories (the reference, a mutant) of a newer pack (the python ones, FlashAttention
    (II) in C++), graded as flash-attention-cpu's."""
    pack = load_assignment(name)
    ada, _ = make_repo(tmp_path, pack, [(None, -1)])
    ben, _ = make_repo(tmp_path, pack, [(mutant, -1)])
    roster = tmp_path / "roster.csv"
    roster.write_text(f"student,repository\nada,{ada}\nben,{ben}\n")
    store = tmp_path / "grades.sqlite"
    # The session's build cache, but a clone cache of its own: a batch holds its clone cache's lock.
    assert run_batch(str(roster), "-a", name, "--deadline", DEADLINE, "--store", str(store),
                     "--cache-dir", str(cache_dir), "--repos-dir", str(tmp_path / "clones")) == 0
    results = {r.student: r for r in Store(store).latest(name)}
    assert results["ada"].score == results["ada"].max_score == pack.max_score
    sample = next(v for v in variants(pack) if v.name == mutant)
    (kernel,) = [k for k in results["ben"].kernels if k.name == sample.kernel]
    assert kernel.status == sample.expect and sample.failed_cases
    assert [c.name for c in kernel.cases if not c.passed] == list(sample.failed_cases)
