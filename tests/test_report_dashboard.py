"""The class dashboard and the gradebook CSV, from a real store of graded sample submissions."""

from __future__ import annotations

import collections
import dataclasses

import csv
import io
import re
from pathlib import Path

import pytest

from grader.cli import main
from grader.report import dashboard
from grader.results import KernelResult, Result
from grader.assignment import PROJECT_ROOT
from grader.status import KernelStatus

from report_fixtures import class_results, class_store  # noqa: F401  (fixtures)
from test_store import result as small_result


@pytest.fixture(scope="module")
def board(class_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dashboard")
    assert main(["report", "dashboard", "--store", str(class_store), "--assignment", "flash-attention-cpu",
                 "--out", str(out)]) == 0
    return out


def student_order(page: str) -> list[str]:
    body = page[page.index("<h2>Students</h2>"):]
    return re.findall(r"<tr>\n<td class=\"student\"><a href=\"[^\"]+\">([a-z]+)", body)


def test_dashboard_links_every_graded_student_to_a_report_that_exists(board: Path,
                                                                       class_results: dict[str, Result]) -> None:
    page = (board / "index.html").read_text()
    for student, result in class_results.items():
        assert f">{student}<" in page
        link = f'href="students/{student}.html"'
        if result.status == "graded":
            assert link in page and (board / "students" / f"{student}.html").is_file()
        else:
            assert link not in page
    assert "no commit before the deadline" in page  # ivan, not submitted


def test_dashboard_figures_match_the_results(class_results: dict[str, Result]) -> None:
    results = list(class_results.values())
    summary = dashboard.summarise(results, "flash-attention-cpu")
    graded = [r for r in results if r.status == "graded"]
    assert sum(summary["histogram"]) == len(graded) == 8
    assert summary["histogram"][9] == 1 and summary["histogram"][0] == 1  # ada 3/3; fatima 0/3
    rates = {p["kernel"]: (p["passed"], p["total"]) for p in summary["pass_rates"]}
    assert rates == {"standard_attention": (4, 8), "flash_attention": (5, 8)}
    counts = dict(summary["status_counts"])
    assert counts["not submitted"] == 1 and counts["late"] == 1 and counts["crashed"] == 1
    assert counts["compile errors"] == 1
    top = summary["failures"][0]
    assert (top["count"], top["kernel"], sorted(top["students"])) == (2, "standard_attention", ["chen", "fatima"])
    assert "never written" in top["message"] and "16" not in top["message"]  # figures masked


def test_dashboard_is_static_html_with_inline_svg_charts(board: Path) -> None:
    page = (board / "index.html").read_text()
    # Scores, pass rates, one distribution per kernel, late days.
    assert page.count("<svg") == 5
    assert "50% (4/8)" in page and "62% (5/8)" in page


def test_no_dashboard_page_has_javascript_as_the_readme_says(board: Path) -> None:
    readme = (PROJECT_ROOT / "README.md").read_text()
    bullet = readme[readme.index("- **Class dashboard**"):]
    assert "No JavaScript" in " ".join(bullet[:bullet.index("\n- ")].split())  # what this test holds it to
    pages = sorted(board.rglob("*.html"))
    assert len(pages) > 10  # the sorted tables, every student's report and history
    for page in pages:
        text = page.read_text().lower()
        assert "<script" not in text and "javascript:" not in text, page
        assert re.search(r"<[^>]+\son[a-z]+\s*=", text) is None, page  # no inline event handlers either


@pytest.mark.parametrize("score, max_score, expected", [(2.4, 3, 8), (2.1, 3, 7), (0.3, 3, 1), (0.7, 1, 7),
                                                        (2.99, 3, 9), (3, 3, 9), (0, 3, 0), (0, 0, 0)])
def test_a_score_lands_in_the_bin_its_percentage_names(score: float, max_score: float, expected: int) -> None:
    # 2.4 / 3 is 0.7999999999999999 in floats: 80%, the 80–90% bin, not the 70–80% one.
    assert dashboard.score_bin(score, max_score) == expected
    assert dashboard.summarise([scored(score, max_score)], "a")["histogram"][expected] == 1


def test_the_late_student_with_2_4_of_3_is_in_the_80_to_90_bin(class_results: dict[str, Result]) -> None:
    summary = dashboard.summarise(list(class_results.values()), "flash-attention-cpu")
    assert class_results["hana"].score == pytest.approx(2.4) and summary["bin_labels"][8] == "80–90%"
    by_bin = collections.Counter(dashboard.score_bin(r.score, r.max_score) for r in class_results.values()
                                 if r.status == "graded")
    assert summary["histogram"] == [by_bin[i] for i in range(dashboard.BINS)] and by_bin[8] >= 1


def scored(score: float, max_score: float) -> Result:
    kernel = KernelResult("k", score, max_score, KernelStatus.FAILED, "", [])
    return dataclasses.replace(small_result("ada"), score=score, max_score=max_score, kernels=[kernel])


def test_each_column_header_links_to_the_table_sorted_by_it(board: Path) -> None:
    by_student = student_order((board / "index.html").read_text())
    assert by_student == sorted(by_student)
    by_score = student_order((board / "by-score.html").read_text())
    assert by_score[0] == "ada" and by_score[-2:] == ["fatima", "ivan"]
    assert student_order((board / "by-late.html").read_text())[0] == "hana"
    assert 'href="by-kernel-flash_attention.html"' in (board / "index.html").read_text()
    for page in board.glob("by-*.html"):
        assert sorted(student_order(page.read_text())) == by_student


def test_dashboard_of_a_missing_store_is_one_clear_error(tmp_path: Path, capsys) -> None:
    status = main(["report", "dashboard", "--store", str(tmp_path / "none.sqlite"), "--assignment", "x",
                   "--out", str(tmp_path / "out")])
    assert status == 2 and "none.sqlite: no such file" in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "none.sqlite").exists()


def test_gradebook_has_one_row_per_student_with_the_breakdown(class_store: Path, tmp_path: Path,
                                                              class_results: dict[str, Result]) -> None:
    out = tmp_path / "grades.csv"
    assert main(["export", "gradebook", "--store", str(class_store), "--assignment", "flash-attention-cpu",
                 "--out", str(out)]) == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert list(rows[0]) == ["student_id", "total", "max_score", "standard_attention", "flash_attention",
                             "late_days", "late_penalty", "raw_score", "status", "commit", "graded_at"]
    by_id = {r["student_id"]: r for r in rows}
    assert set(by_id) == set(class_results)
    assert by_id["hana"]["total"] == "2.4" and by_id["hana"]["raw_score"] == "3"
    assert by_id["hana"]["late_days"] == "2" and by_id["hana"]["late_penalty"] == "0.6"
    assert by_id["brian"]["flash_attention"] == "0.4444" and by_id["brian"]["standard_attention"] == "1"
    assert by_id["ivan"]["status"] == "not_submitted" and by_id["ivan"]["total"] == "0"
    # The outcome word the batch summary counts, not "graded" for a crash or a compile error.
    assert {sid: row["status"] for sid, row in by_id.items()} == {sid: r.outcome for sid, r in class_results.items()}
    assert by_id["dana"]["status"] == "crashed" and by_id["emil"]["status"] == "compile_error"
    assert by_id["ada"]["status"] == "passed" and by_id["brian"]["status"] == "failed"
    assert by_id["ada"]["commit"] == class_results["ada"].submission.commit and len(by_id["ada"]["commit"]) == 40
    for row in rows:  # what an LMS import needs: the total is a plain number
        float(row["total"])


def test_every_student_has_a_history_page_with_every_stored_result(class_results: dict[str, Result],
                                                                     tmp_path: Path) -> None:
    from grader.store import Store

    store = Store(tmp_path / "s.sqlite")
    for result in class_results.values():
        store.save(result)
    run = store.start_run("flash-attention-cpu", "regrade", ["ada"])
    regraded = dataclasses.replace(class_results["ada"], graded_at="2099-01-01T00:00:00+00:00", score=2.5)
    store.save(regraded, run.id)
    store.close()
    out = tmp_path / "board"
    assert main(["report", "dashboard", "--store", str(tmp_path / "s.sqlite"), "-a", "flash-attention-cpu",
                 "--out", str(out)]) == 0
    ada = (out / "students" / "ada-history.html").read_text()
    assert "Every result (2), newest first" in ada and ada.index("2099-01-01") < ada.index(class_results["ada"].graded_at[:10])
    assert f"<td>{run.id}</td>" in ada
    index = (out / "index.html").read_text()
    assert 'href="students/ada-history.html"' in index
    for student, result in class_results.items():
        assert (out / "students" / f"{student}-history.html").is_file()


def test_failures_are_grouped_by_kernel_and_case_and_nobody_is_cut(board: Path,
                                                                   class_results: dict[str, Result]) -> None:
    page = (board / "index.html").read_text()
    failures = page[page.index("<h2>Failures by kernel and case</h2>"):page.index("<h2>Nothing graded")]
    assert failures.count("<h3>") == 2 and "failing cases" in failures
    failed = {s for s, r in class_results.items() if r.status == "graded" and any(k.status != "passed" for k in r.kernels)}
    for student in failed:
        assert f">{student}</a>" in failures
    assert "…" not in re.sub(r"\[…\]", "", page)  # masked indices only; no list is cut
    nothing = page[page.index("<h2>Nothing graded"):page.index("<h2>Students</h2>")]
    assert ">ivan</a>" in nothing and "no commit before the deadline" in nothing


def test_summary_has_kernel_distributions_and_late_days(class_results: dict[str, Result]) -> None:
    summary = dashboard.summarise(list(class_results.values()), "flash-attention-cpu")
    graded = [r for r in class_results.values() if r.status == "graded"]
    assert [d["kernel"] for d in summary["distributions"]] == summary["kernels"]
    assert all(sum(d["bins"]) == len(graded) for d in summary["distributions"])
    assert sum(n for _, n in summary["late_days"]) == len(graded) and dict(summary["late_days"])[2] == 1  # hana
    assert [n["student"] for n in summary["not_submitted"]] == ["ivan"]

