"""The written part of a study (issue 44, items 1 and 2): the report collected at the graded commit and flagged
where missing, the TA's rubric sheet written, checked whole and imported, and its scores in the gradebook and the
dashboard. A real class: git repositories graded by `grader batch` on flash-attention-cpu."""

from __future__ import annotations

import csv
import json
import io
import shutil
import subprocess
from pathlib import Path

import pytest
from rich.console import Console

from grader.assignment import Assignment, load_assignment
from grader.assignment.written import load_written
from grader.cli import main
from grader.errors import SpecError
from grader.rubric import SheetError, read_sheet
from grader.store import Store
from grader.written import find_report, report_bytes

from test_batch import commit, at, DEADLINE

PACK = "flash-attention-cpu"
REPORT = "# Why Algorithm 1 wins\n\nIt never writes the N x N matrix to slow memory...\n"


@pytest.fixture(scope="module")
def flash() -> Assignment:
    return load_assignment(PACK)


def test_the_spec_names_each_mistake_of_a_written_table() -> None:
    where = "a.toml [assignment.written]"
    assert load_written(None, where) is None
    cases = [({"report": ["R.md"], "pages": 3}, "unknown key(s) ['pages']"),
             ({"report": ["../R.md"]}, "a path inside the repository"),
             ({"rubric": [{"name": "Explanation", "points": 2}]}, "lower-case letters"),
             ({"rubric": [{"name": "x", "points": 0}]}, "'points' must be > 0"),
             ({"rubric": [{"name": "x", "points": 1}, {"name": "x", "points": 2}]}, "names repeat"),
             ({}, "give a 'report' file, rubric items, or both")]
    for table, words in cases:
        with pytest.raises(SpecError, match=words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                           .replace("]", r"\]").replace(".", r"\.")):
            load_written(table, where)
    part = load_written({"report": ["REPORT.md"], "rubric": [{"name": "x", "points": 2.5, "earns": "e"}]}, where)
    assert part.points == 2.5 and part.rubric[0].earns == "e"


def test_a_report_is_found_by_its_name_or_case_and_a_link_or_a_huge_file_is_not_collected(flash: Assignment,
                                                                                          tmp_path: Path) -> None:
    part = flash.written
    assert part is not None and part.report == ("REPORT.md", "report.pdf")
    (tmp_path / "report.md").write_text(REPORT)  # the case differs from the handout's REPORT.md
    found = find_report(part, tmp_path)
    assert found.collected and found.file == "report.md" and found.size == len(REPORT)
    assert report_bytes(found, tmp_path) == REPORT.encode()
    (tmp_path / "report.md").write_text("changed after grading")
    assert report_bytes(found, tmp_path) is None  # never a file other than the one graded

    empty = tmp_path / "empty"
    empty.mkdir()
    missing = find_report(part, empty)
    assert not missing.collected and missing.message == ("no written report: the assignment asks for one of "
                                                         "REPORT.md or report.pdf in the repository, and this commit "
                                                         "has none")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "REPORT.md").symlink_to("/etc/passwd")
    assert "symbolic link" in find_report(part, linked).message and report_bytes(find_report(part, linked), linked) is None
    huge = tmp_path / "huge"
    huge.mkdir()
    with open(huge / "report.pdf", "wb") as out:
        out.truncate(part.max_bytes + 1)
    too_large = find_report(part, huge)
    assert not too_large.collected and "over the 20 MiB" in too_large.message


def repository(root: Path, flash: Assignment, name: str, report: tuple[str, str] | None) -> Path:
    """A student's fork of the template with the reference's solution, and their report (name, text) if any."""
    files = root / "files" / name
    shutil.copytree(flash.reference_dir, files)
    if report:
        (files / report[0]).write_text(report[1])
    repo = root / "repos" / name
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    commit(repo, files, at(-1), "done")
    return repo


@pytest.fixture(scope="module")
def graded_class(flash: Assignment, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """ada and bob wrote their reports (bob's named report.md); cy wrote none."""
    root = tmp_path_factory.mktemp("written")
    repos = {"ada": repository(root, flash, "ada", ("REPORT.md", REPORT)),
             "bob": repository(root, flash, "bob", ("report.md", "bob's report\n")),
             "cy": repository(root, flash, "cy", None)}
    roster = root / "roster.csv"
    roster.write_text("student,repository\n" + "".join(f"{s},{r}\n" for s, r in repos.items()))
    store = root / "grades.sqlite"
    output = io.StringIO()
    patch = pytest.MonkeyPatch()
    patch.setattr("grader.cli.batch.Console", lambda *a, **k: Console(file=output, width=200))
    try:
        code = main(["batch", str(roster), "-a", PACK, "--deadline", DEADLINE, "--store", str(store),
                     "--cache-dir", str(root / "cache")])
    finally:
        patch.undo()
    assert code == 0, output.getvalue()
    return {"root": root, "store": store, "output": output.getvalue()}


def test_the_batch_keeps_each_report_at_its_commit_and_names_whose_is_missing(graded_class: dict) -> None:
    output = graded_class["output"]
    assert "written report not collected for 1 student(s):" in output
    assert "cy: no written report: the assignment asks for one of REPORT.md or report.pdf" in output
    store = Store(graded_class["store"], read_only=True)
    try:
        kept = store.written_reports(PACK)
        results = {r.student: r for r in store.latest(PACK)}
    finally:
        store.close()
    assert set(kept) == {"ada", "bob"}
    assert kept["ada"].name == "REPORT.md" and kept["ada"].content == REPORT.encode()
    assert kept["bob"].name == "report.md" and kept["ada"].commit == results["ada"].submission.commit
    assert results["ada"].score == results["ada"].max_score  # the written part is the TA's: no autograded points
    assert results["cy"].written is not None and not results["cy"].written.collected


def sheet_rows(path: Path) -> list[list[str]]:
    return list(csv.reader(path.read_text().splitlines()))


def test_a_sheet_with_every_kind_of_bad_row_is_refused_whole_naming_each(graded_class: dict, flash: Assignment,
                                                                         tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("student_id,explanation,validation,style\n"
                   "ada,4,3,1\n"             # style: no such item
                   "bob,5,3,\n"              # 5 > 4 points
                   "bob,1,1,\n"              # bob twice
                   "zed,1,1,\n"              # not in the store
                   "cy,,two,\n")             # empty cell, not a number
    with pytest.raises(SheetError) as caught:
        read_sheet(flash, bad, {"ada", "bob", "cy"})
    words = str(caught.value)
    for expected in ("row 1, style: no rubric item of flash-attention-cpu is named so (its items: explanation, "
                     "validation)",
                     "row 3, explanation: bob: 5 is over the item's 4 point(s)",
                     "row 4, student_id: 'bob' is also on row 3",
                     "row 5, student_id: 'zed' has no result of flash-attention-cpu in the store",
                     "row 6, explanation: cy: the cell is empty (give 0 for no points)",
                     "row 6, validation: cy: 'two' is not a number", "nothing was imported"):
        assert expected in words, (expected, words)
    missing = tmp_path / "missing.csv"
    missing.write_text("student_id,explanation\nada,4\n")
    words = str(pytest.raises(SheetError, read_sheet, flash, missing, {"ada", "bob"}).value)
    assert "row 1, validation: this item has no column" in words and "no row for 1 student(s) of the store: bob" in words
    imports = len(Store(graded_class["store"], read_only=True).rubric_imports(PACK))
    refused = io.StringIO()
    patch = pytest.MonkeyPatch()
    patch.setattr("grader.cli.Console", lambda *a, **k: Console(file=refused, width=300))
    try:
        code = main(["rubric", "import", "--store", str(graded_class["store"]), "-a", PACK, str(bad)])
    finally:
        patch.undo()
    assert code != 0 and "6 problem(s); nothing was imported" in refused.getvalue().replace("\n", " ")
    assert len(Store(graded_class["store"], read_only=True).rubric_imports(PACK)) == imports


def test_ta_scores_are_imported_replaced_and_join_the_gradebook_and_the_dashboard(graded_class: dict,
                                                                                  tmp_path: Path) -> None:
    store = str(graded_class["store"])
    sheet = tmp_path / "rubric.csv"
    assert main(["rubric", "sheet", "--store", store, "-a", PACK, "--out", str(sheet)]) == 0
    assert sheet_rows(sheet) == [["student_id", "explanation", "validation"], ["ada", "", ""], ["bob", "", ""],
                                 ["cy", "", ""]]
    sheet.write_text("student_id,explanation,validation\nada,4,3\nbob,2.5,1\ncy,0,0\n")
    assert main(["rubric", "import", "--store", store, "-a", PACK, str(sheet)]) == 0
    corrected = tmp_path / "rubric-corrected.csv"
    corrected.write_text("student_id,explanation,validation\nada,4,3\nbob,3.5,1\ncy,0,0\n")  # bob re-marked
    assert main(["rubric", "import", "--store", store, "-a", PACK, str(corrected)]) == 0

    opened = Store(graded_class["store"], read_only=True)
    try:
        history = opened.rubric_imports(PACK)
        assert [i.scores["bob"]["explanation"] for i in history[-2:]] == [2.5, 3.5]  # both imports kept
        assert opened.rubric_scores(PACK)["bob"] == {"explanation": 3.5, "validation": 1.0}
    finally:
        opened.close()
    again = tmp_path / "again.csv"
    assert main(["rubric", "sheet", "--store", store, "-a", PACK, "--out", str(again)]) == 0
    assert sheet_rows(again)[2] == ["bob", "3.5", "1"]  # the sheet carries what was imported

    book = tmp_path / "grades.csv"
    assert main(["export", "gradebook", "--store", store, "-a", PACK, "--out", str(book)]) == 0
    rows = {row["student_id"]: row for row in csv.DictReader(book.read_text().splitlines())}
    assert rows["bob"]["rubric_explanation"] == "3.5" and rows["bob"]["rubric_validation"] == "1"
    assert rows["bob"]["autograded"] == "3" and rows["bob"]["total"] == "7.5" and rows["bob"]["max_score"] == "10"

    out = tmp_path / "dashboard"
    assert main(["report", "dashboard", "--store", store, "-a", PACK, "--out", str(out)]) == 0
    page = (out / "index.html").read_text()
    assert "explanation (rubric, 4 points)" in page and "3.5 / 4" in page
    assert 'href="students/ada-written/REPORT.md"' in page and (out / "students/ada-written/REPORT.md").read_text() == REPORT
    assert 'title="no written report: the assignment asks for one of REPORT.md or report.pdf' in page  # cy's badge
    assert (out / "by-written.html").is_file() and (out / "by-rubric-explanation.html").is_file()


@pytest.mark.skipif(shutil.which("chromium") is None and shutil.which("chromium-browser") is None,
                    reason="no chromium on PATH: run ci/setup/chromium.sh to render the pages in a browser")
def test_the_browser_draws_the_dashboards_written_part(graded_class: dict, tmp_path: Path) -> None:
    """The dashboard with its rubric columns, distributions and report links, opened in headless Chromium."""
    from test_report_browser import HEIGHT, decode_png, ink, screenshot

    store = str(graded_class["store"])
    sheet = tmp_path / "rubric.csv"
    sheet.write_text("student_id,explanation,validation\nada,4,3\nbob,3.5,1\ncy,0,0\n")
    assert main(["rubric", "import", "--store", store, "-a", PACK, str(sheet)]) == 0
    out = tmp_path / "dashboard"
    assert main(["report", "dashboard", "--store", store, "-a", PACK, "--out", str(out)]) == 0
    png = tmp_path / "dashboard.png"
    screenshot(out / "index.html", png, tmp_path / "profile")
    _, _, rows = decode_png(png)
    assert ink(rows, 0, 300) > 0.02 and ink(rows, 0, HEIGHT) < 0.6
    purple = sum(1 for row in rows for x in range(0, len(row) - 3, 4)
                 if 120 < row[x] < 140 and 70 < row[x + 1] < 90 and row[x + 2] > 210)  # the distributions' #8250df
    assert purple > 500


def test_the_ta_scores_join_the_gradescope_results_as_tests_of_their_own(graded_class: dict, tmp_path: Path) -> None:
    from grader.report.gradescope import RubricScore, results_json

    store = str(graded_class["store"])
    sheet = tmp_path / "rubric.csv"
    sheet.write_text("student_id,explanation,validation\nada,4,2.5\nbob,3.5,1\ncy,0,0\n")
    assert main(["rubric", "import", "--store", store, "-a", PACK, str(sheet)]) == 0
    saved = Store(graded_class["store"], read_only=True)
    try:
        ada = next(r for r in saved.latest(PACK) if r.student == "ada")
    finally:
        saved.close()
    (tmp_path / "ada.json").write_text(ada.to_json())
    out = tmp_path / "results.json"
    assert main(["export", "gradescope-results", "--result", str(tmp_path / "ada.json"), "--rubric-store", store,
                 "--out", str(out)]) == 0
    document = json.loads(out.read_text())
    written = {t["name"]: t for t in document["tests"] if "rubric" in t.get("tags", [])}
    assert {n: (t["score"], t["max_score"]) for n, t in written.items()} == {
        "written part: explanation": (4.0, 4.0), "written part: validation": (2.5, 3.0)}
    assert document["score"] == pytest.approx(ada.score + 6.5)
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((Path(__file__).parent / "schemas" / "gradescope-results.schema.json").read_text())
    jsonschema.validate(document, schema)
    # An item no TA scored yet counts nothing and is said, never a zero.
    pending = results_json(ada, rubric=(RubricScore("explanation", 4, "why", None),))
    assert pending["score"] == pytest.approx(ada.score) and not any("rubric" in t.get("tags", [])
                                                                   for t in pending["tests"])
    assert "Written part not scored yet: explanation" in pending["output"]
