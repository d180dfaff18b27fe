"""A term rehearsed on the CPU, as an instructor runs it: two packs, four students each (correct, broken, a fix
pushed after the deadline, a repository that cannot be reached), graded by `grader batch` from real git
repositories, then exported. No wrong zero anywhere: the unreachable student's gradebook cells are empty with the
status beside them, and the late fix is named in the batch summary and in the student's report. A third pack that
imports a package this machine lacks is stopped before anyone is graded."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from grader.cli import main
from grader.assignment import load_assignment

from conftest import copy_assignment
from test_batch import DEADLINE, make_repo, run_batch

MUTANTS = {"flash-attention-cpu": "mutant-flash-no-rescale", "array-kernels-python": "mutant-matvec-last-column-skipped"}
UNREACHABLE = "http://127.0.0.1:9/nobody.git"  # loopback, nothing listens: the fetch fails, the student is not absent


@pytest.mark.parametrize("pack", sorted(MUTANTS))
def test_a_term_holds_no_wrong_zero_and_names_the_late_fix(pack: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assignment = load_assignment(pack)
    correct, _ = make_repo(tmp_path, assignment, [(None, -1)])
    broken, _ = make_repo(tmp_path, assignment, [(MUTANTS[pack], -1)])
    late, late_shas = make_repo(tmp_path, assignment, [(MUTANTS[pack], -1), (None, 10 / 24)])
    roster = tmp_path / "roster.csv"
    roster.write_text(f"student,repository\ncorrect,{correct}\nbroken,{broken}\nlate,{late}\n"
                      f"unreachable,{UNREACHABLE}\n")
    store, everyone = tmp_path / "grades.sqlite", tmp_path / "all.json"

    run_batch(str(roster), "-a", pack, "--deadline", DEADLINE, "--store", str(store), "--json", str(everyone),
              "--cache-dir", str(tmp_path / "cache"))
    said = " ".join(capsys.readouterr().out.split())
    assert main(["export", "gradebook", "--store", str(store), "--assignment", pack,
                 "--out", str(tmp_path / "grades.csv")]) == 0
    assert main(["report", "markdown", str(everyone), "--out", str(tmp_path / "reports")]) == 0

    rows = {r["student_id"]: r for r in csv.DictReader(io.StringIO((tmp_path / "grades.csv").read_text()))}
    full = f"{assignment.max_score:g}"
    assert rows["correct"]["total"] == full and rows["correct"]["status"] == "passed"
    assert 0 < float(rows["broken"]["total"]) < assignment.max_score and rows["broken"]["status"] == "failed"
    assert rows["late"]["total"] == rows["broken"]["total"]  # the commit before the deadline, graded
    assert rows["unreachable"]["status"] == "fetch_failed"
    assert rows["unreachable"]["total"] == "" and rows["unreachable"]["raw_score"] == ""
    assert all(rows["unreachable"][k.name] == "" for k in assignment.kernels)
    words = f"commit {late_shas[1][:7]}, 10 h after the deadline, was not graded"
    assert f"late commit not graded: late: {words}" in said
    assert words in (tmp_path / "reports" / "late.md").read_text()
    assert "was not graded" not in (tmp_path / "reports" / "broken.md").read_text()
    stored = {r["student"]: r for r in json.loads(everyone.read_text())}
    assert stored["late"]["submission"]["later"]["commit"] == late_shas[1]


def test_a_pack_whose_package_is_missing_here_grades_nobody(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    pack = copy_assignment("array-kernels-python", tmp_path / "packs")
    spec = pack / "assignment.toml"
    spec.write_text(spec.read_text().replace("[assignment]\n", '[assignment]\npython_packages = ["kg_nowhere"]\n', 1))
    repo, _ = make_repo(tmp_path, load_assignment(pack), [(None, -1)])
    roster = tmp_path / "roster.csv"
    roster.write_text(f"student,repository\ncorrect,{repo}\n")
    store = tmp_path / "grades.sqlite"

    status = run_batch(str(roster), "-a", str(pack), "--deadline", DEADLINE, "--store", str(store),
                       "--cache-dir", str(tmp_path / "cache"))

    assert status != 0
    assert "python3 -m pip install kg_nowhere" in " ".join(capsys.readouterr().err.split())
    assert not store.exists()
