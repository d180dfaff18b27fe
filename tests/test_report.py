"""Per-submission reports (HTML, Markdown) and their hints, on real graded samples."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from grader.cli import main
from grader.compare import compare
from grader.report import html, markdown, terminal
from grader.report.hints import case_hints, kernel_hints
from grader.results import CaseResult, Environment, KernelResult, MarginRead, Mismatch, Result, Submission
from grader.assignment import Tolerance, load_assignment

from report_fixtures import class_results  # noqa: F401  (a fixture)

TOLERANCE = Tolerance(atol=1e-4, rtol=1e-3)


def kernel(result: Result, name: str) -> KernelResult:
    return next(k for k in result.kernels if k.name == name)


# ---------------------------------------------------------------- compare's pattern figures


def gold(rows: int = 6, columns: int = 4) -> np.ndarray:
    return np.random.default_rng(0).uniform(0.5, 1.5, (rows, columns)).astype(np.float32)


def test_compare_recognises_an_output_stored_transposed() -> None:
    g = gold()
    verdict = compare({"O": np.ascontiguousarray(g.T).reshape(g.shape)}, {"O": g}, TOLERANCE)
    assert not verdict.passed and verdict.transposed is True and verdict.row_shift is None


def test_compare_recognises_an_output_one_row_down() -> None:
    g = gold()
    shifted = np.full_like(g, 7.0)
    shifted[1:] = g[:-1]
    verdict = compare({"O": shifted}, {"O": g}, TOLERANCE)
    assert verdict.row_shift == 1 and verdict.transposed is False


def test_compare_counts_computed_nan_apart_from_poison_and_zeros() -> None:
    g = gold()
    y = g.copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        y[0, :2] = np.float32(0) / np.float32(0)  # a computed NaN, not the poison's bit pattern
    y[1, :] = 0
    verdict = compare({"O": y}, {"O": g}, TOLERANCE)
    assert verdict.nonfinite == 2 and verdict.zeros == 4 and verdict.never_written == 0


def test_a_right_answer_has_no_pattern_figures() -> None:
    g = gold()
    verdict = compare({"O": g.copy()}, {"O": g}, TOLERANCE)
    assert verdict.passed and verdict.transposed is None and verdict.nonfinite is None


# ---------------------------------------------------------------- hints


def failed_case(**figures) -> CaseResult:
    base = dict(name="c", public=True, status="failed", passed=False, message="O: wrong", elements=24, mismatches=24,
                never_written=0)
    return CaseResult(**{**base, **figures})


@pytest.mark.parametrize("figures, words", [
    (dict(never_written=24), "Nothing was written"),
    (dict(transposed=True), "rows and columns swapped"),
    (dict(row_shift=1), "moved down by one row"),
    (dict(row_shift=-1), "moved up by one row"),
    (dict(nonfinite=3), "division by zero"),
    (dict(zeros=24), "exactly 0"),
    (dict(never_written=4, mismatches=4, first_mismatch=Mismatch("O", [5, 0], 1.0, None, "never_written")),
     "last row (row 5)"),
    (dict(read_out_of_bounds=24, margins_read=[MarginRead("K", True)]), "memory past the end of K"),
    (dict(read_before_written=24), "reads an output before writing it"),
], ids=["never-written", "transposed", "row-down", "row-up", "nan", "zeros", "last-row", "read-past-k",
        "read-before-written"])
def test_each_recognisable_pattern_gets_its_hint(figures: dict, words: str) -> None:
    hints = case_hints(failed_case(**figures))
    assert any(words in h for h in hints), hints


def test_an_unrecognised_failure_gets_no_hint() -> None:
    assert case_hints(failed_case(zeros=0, nonfinite=0, transposed=False)) == []


def test_right_only_for_small_sizes_compares_the_case_sizes() -> None:
    def case(name: str, n: int, passed: bool) -> CaseResult:
        return dataclasses.replace(failed_case(name=name, elements=16 * n, params={"N": n, "d": 16}),
                                   passed=passed, status="passed" if passed else "failed")

    small_only = KernelResult("k", 0.4, 1, "failed", "", [case("a", 1, True), case("b", 8, True), case("c", 37, False)])
    assert "N up to 8 ('b')" in kernel_hints(small_only)[0]
    mixed = KernelResult("k", 0.4, 1, "failed", "", [case("a", 1, True), case("b", 8, False), case("c", 37, True)])
    assert kernel_hints(mixed) == []


# ---------------------------------------------------------------- the reports, on real results


def test_html_report_is_one_self_contained_file(class_results: dict[str, Result]) -> None:
    for result in class_results.values():
        if result.status != "graded":
            continue
        page = html.render(result)
        assert page.startswith("<!DOCTYPE html>") and "<style>" in page and "<svg" in page
        assert "<script" not in page.lower()
        # Nothing fetched from anywhere: no external stylesheet, image, font or script.
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
        assert re.search(r"<link\b", page) is None


def test_html_report_explains_a_never_written_last_row(class_results: dict[str, Result]) -> None:
    page = html.render(class_results["chen"])
    assert "2 / 3" in page
    assert "Only the last row (row 36) was never written" in page
    # The index along the axes the spec's shape names ("N, d"), and the poison named for what it is.
    assert "at <code>O[N=36, d=0]</code>" in page and "got <code>never written</code>" in page
    assert "N=37, d=24" in page  # the case's sizes


def test_html_escapes_what_comes_from_the_submission(class_results: dict[str, Result]) -> None:
    result = class_results["emil"]
    evil = dataclasses.replace(kernel(result, "standard_attention"), message="<script>alert(1)</script>")
    page = html.render(dataclasses.replace(result, kernels=[evil, *result.kernels[1:]]))
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_markdown_report_shows_the_breakdown_and_the_compiler_error(class_results: dict[str, Result]) -> None:
    text = markdown.render(class_results["emil"])
    assert "| `standard_attention` | compile error | 1 | 0/6 | none | 0/1 |" in text
    assert "src/standard_attention.cpp:12:" in text and "```text" in text
    assert "| `flash_attention` | passed | 2 | 9/9 |" in text


def test_markdown_report_hints_right_only_for_small_sizes(class_results: dict[str, Result]) -> None:
    text = markdown.render(class_results["gus"])
    assert "Right only for small sizes: every case with N up to 1 ('one-row')" in text
    assert "`odd-sizes` (N=37, d=24) | public | failed |" in text


def test_markdown_report_shows_the_late_penalty(class_results: dict[str, Result]) -> None:
    late = markdown.render(class_results["hana"])
    assert "2 days late" in late and "| late penalty |" in late and "−0.6" in late
    assert "late penalty" not in markdown.render(class_results["ada"])


def test_markdown_tables_keep_one_row_per_line(class_results: dict[str, Result]) -> None:
    for result in class_results.values():
        for line in markdown.render(result).splitlines():
            if line.startswith("|"):
                assert line.endswith("|"), line


def test_check_writes_html_markdown_and_junit_and_still_fails(tmp_path: Path, cache_dir: Path) -> None:
    template = shutil.copytree(load_assignment("flash-attention-cpu").template_dir, tmp_path / "repo")
    out = tmp_path / "out"
    status = main(["check", str(template), "--cache-dir", str(cache_dir), "--html", str(out / "r.html"),
                   "--markdown", str(out / "r.md"), "--junit", str(out / "j.xml")])
    assert status == 1
    assert "Nothing was written" in (out / "r.html").read_text()
    assert (out / "r.md").read_text().startswith("## ❌")
    assert "<failure" in (out / "j.xml").read_text()


def test_report_command_renders_a_saved_result(class_results: dict[str, Result], tmp_path: Path) -> None:
    saved = tmp_path / "brian.json"
    class_results["brian"].write(saved)
    assert main(["report", "html", str(saved), "--out", str(tmp_path / "b.html")]) == 0
    assert main(["report", "markdown", str(saved), "--out", str(tmp_path / "b.md")]) == 0
    assert "brian" in (tmp_path / "b.html").read_text() and "1.44 / 3" in (tmp_path / "b.md").read_text()


def test_report_command_names_a_file_that_is_not_a_result(tmp_path: Path, capsys) -> None:
    bogus = tmp_path / "bogus.json"
    bogus.write_text("{}")
    assert main(["report", "html", str(bogus), "--out", str(tmp_path / "x.html")]) == 2
    assert "bogus.json: not a result" in " ".join(capsys.readouterr().err.split())


def test_sanitizer_findings_are_reported(class_results: dict[str, Result]) -> None:
    result = class_results["ada"]
    if not hasattr(result.kernels[0], "sanitizer"):
        pytest.skip("this result model has no sanitizer findings")
    finding = "========= Invalid __global__ read of size 4 bytes at attention_kernel+0x1a0"
    flagged = dataclasses.replace(result.kernels[0], sanitizer=[finding])
    flagged_result = dataclasses.replace(result, kernels=[flagged, *result.kernels[1:]])
    assert "compute-sanitizer findings" in html.render(flagged_result) and finding in html.render(flagged_result)
    assert finding in markdown.render(flagged_result)
    assert "compute-sanitizer" not in markdown.render(result)


def test_a_reported_curve_is_drawn_beside_golds_and_the_caption_says_both_where_they_differ() -> None:
    """A case that reports two outputs (contextual-sparsity's accuracy against k/width) is drawn with gold's curve
    under it, so a student sees where theirs leaves it."""
    pytest.importorskip("matplotlib", reason="the report draws its figures with matplotlib")
    from grader.report.curves import curves_of, figure_svg

    ks = [1 / 16, 1 / 8, 1 / 4, 1 / 2, 1]
    theirs, gold = [0.31, 0.42, 0.8, 0.9, 0.93], [0.67, 0.85, 0.91, 0.93, 0.93]
    case = CaseResult("held-out", True, "failed", False, "accuracy: 3 of 5 elements differ",
                      reported={"k_over_width": ks, "accuracy": theirs},
                      reported_gold={"k_over_width": ks, "accuracy": gold})
    result = Result(assignment="contextual-sparsity", assignment_version="1", title="t", score=0, max_score=2,
                    kernels=[KernelResult("classifier_accuracy", 0, 2, "failed", "", [case])],
                    submission=Submission("team"), environment=Environment("0", "python", "cpu", "Python", "local",
                                                                             [], "host", "3.11"),
                    stages={}, seed={"mode": "public", "fingerprint": "0"}, public_only=False,
                    graded_at="2026-12-05T00:00:00+00:00")
    (curve,) = curves_of(result)
    assert curve.points == tuple(zip(ks, theirs)) and curve.gold_points == tuple(zip(ks, gold))
    svg = figure_svg(curve)
    assert svg is not None and "gold (the reference)" in svg and "this submission" in svg and "differs from gold" in svg
    page = html.render(result)
    assert "0.0625: 0.31" in page and "; gold: 0.0625: 0.67" in page
    # Where they match, the caption gives the values once; a result without gold's values draws one curve.
    same = dataclasses.replace(case, status="passed", passed=True, reported_gold={"k_over_width": ks, "accuracy": theirs})
    assert "; gold:" not in html.render(dataclasses.replace(result, kernels=[dataclasses.replace(
        result.kernels[0], status="passed", cases=[same])]))
    older = dataclasses.replace(case, reported_gold={})
    (curve,) = curves_of(dataclasses.replace(result, kernels=[dataclasses.replace(result.kernels[0], cases=[older])]))
    assert curve.gold_points == () and "gold (the reference)" not in (figure_svg(curve) or "")


def test_markdown_total_row_belongs_to_the_kernel_table(class_results: dict[str, Result]) -> None:
    for result in class_results.values():
        lines = markdown.render(result).splitlines()
        if not any(line.startswith("| **total** |") for line in lines):
            continue
        header = next(i for i, line in enumerate(lines) if line.startswith("| kernel |"))
        total = next(i for i, line in enumerate(lines) if line.startswith("| **total** |"))
        # A blank line ends a Markdown table: the totals row would be a table of its own, with no header.
        assert all(line.startswith("|") for line in lines[header:total + 1]), lines[header:total + 1]


def test_report_command_renders_a_class_list_as_one_file_a_student(class_results: dict[str, Result],
                                                                   tmp_path: Path) -> None:
    saved = tmp_path / "all.json"  # as `grader batch --json` writes it
    chosen = [dataclasses.replace(class_results[n], student=n) for n in ("ada", "brian")]
    saved.write_text(json.dumps([r.to_dict() for r in chosen]))
    assert main(["report", "html", str(saved), "--out", str(tmp_path / "html")]) == 0
    assert main(["report", "markdown", str(saved), "--out", str(tmp_path / "md")]) == 0
    assert sorted(p.name for p in (tmp_path / "html").iterdir()) == ["ada.html", "brian.html"]
    assert "1.44 / 3" in (tmp_path / "md" / "brian.md").read_text()


def test_tolerance_used_reads_as_a_multiple_and_a_wild_answer_as_over_a_thousand() -> None:
    from grader.report.render import tolerance_used

    assert tolerance_used(0.31) == "0.31x" and tolerance_used(4.2) == "4.2x"
    assert tolerance_used(2.09e8) == "over 1000x" and tolerance_used(2.24e31) == "over 1000x"
    assert tolerance_used(None) == "–" and tolerance_used(float("nan")) == "–"


def test_a_message_many_cases_share_is_said_once_with_the_cases_it_applies_to(class_results: dict[str, Result]) -> None:
    # A kernel whose module fails to import: every case raises the same error, one case fails otherwise.
    result = class_results["emil"]
    flash = kernel(result, "flash_attention")
    error = "ModuleNotFoundError: No module named 'inference' (while importing model.py)"
    cases = [dataclasses.replace(c, status="crashed", passed=False, message=error) for c in flash.cases[:-1]]
    cases.append(dataclasses.replace(flash.cases[-1], status="failed", passed=False, message="O: 3 of 8 wrong"))
    broken = dataclasses.replace(flash, status="crashed", score=0.0, cases=cases)
    result = dataclasses.replace(result, kernels=[broken if k is flash else k for k in result.kernels])
    names = [c.name for c in cases[:-1]]
    page, text = html.render(result), markdown.render(result)
    console = Console(file=io.StringIO(), width=100)
    terminal.render(result, console)
    printed = " ".join(console.file.getvalue().split())
    for output in (page.replace("&#39;", "'"), text, printed):
        assert output.count(error) == 1 and output.count("O: 3 of 8 wrong") == 1
    listed = ", ".join(c.name + ("" if c.public else " [hidden]") for c in cases[:-1])
    assert f"{len(names)} cases ({listed}): crashed: {error}" in printed
    assert f"**{len(names)} cases** ({', '.join(f'`{n}`' for n in names)}): {error}" in text
    assert f"{cases[-1].name} (" in printed  # a case alone keeps its sizes
