"""`grader audit`: a pack's reference mutated by universalmutator and graded through the batch's pipeline.

The pack is array-kernels-python copied with its matvec written as the course writes it (serial loops, an
accumulator per row), so that the library's mutants of the accumulation are what a weak case set misses.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from lxml import html

from grader.assignment import ASSIGNMENTS_DIR, load_assignment
from grader.audit.mutants import Mutant, mutants_of
from grader.audit.run import audit
from grader.cli import main
from grader.options import Options
from grader.report.audit import render_page
from grader.status import MutantStatus

MATVEC = """\
\"\"\"matvec: y = A x, a row at a time.\"\"\"


def matvec(A, x, y, M, N):
    for i in range(M):
        total = 0.0
        for j in range(N):
            total += A[i, j] * x[j]
        y[i] = total
"""
FILE = "kernels/matvec.py"
KEPT_SAMPLES = ("course-serial-loops", "mutant-matvec-last-column-skipped")


def weak_pack(root: Path, matvec_cases: str) -> Path:
    """array-kernels-python with the loop matvec as its reference, these matvec cases, and two of its samples."""
    folder = root / "array-kernels-weak"
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(ASSIGNMENTS_DIR / "array-kernels-python", folder)
    (folder / "reference" / FILE).write_text(MATVEC)
    spec = (folder / "assignment.toml").read_text()
    spec = spec.replace('name = "array-kernels-python"', 'name = "array-kernels-weak"')
    matvec_at = spec.index('name = "matvec"')
    head, tail = spec[:matvec_at], spec[matvec_at:]
    tail = re.sub(r"cases = \[\n.*?\n\]", f"cases = [\n{matvec_cases}\n]", tail, flags=re.S)
    (folder / "assignment.toml").write_text(head + tail)
    for sample in (folder / "samples").iterdir():
        if sample.name not in KEPT_SAMPLES:
            shutil.rmtree(sample)
    return folder


ONE_BY_ONE = '  { name = "one-by-one", public = true, M = 1, N = 1 },'
TALL = '  { name = "tall", public = true, M = 7, N = 5 },'


def accumulation_mutants(pack) -> list[Mutant]:
    """universalmutator's mutants of the accumulation line (`+=` made `=+`, `-=`, ...)."""
    found, _ = mutants_of(pack, [FILE])
    return [m for m in found if "total +=" in m.original and "total =+" in m.mutated]


def test_a_weak_case_set_has_survivors_that_the_missing_case_kills_and_a_second_run_grades_nothing(
        tmp_path: Path) -> None:
    options = Options(cache_dir=tmp_path / "cache", secret="audit-test")
    weak = load_assignment(weak_pack(tmp_path, ONE_BY_ONE))
    mutants = accumulation_mutants(weak)
    assert mutants, "universalmutator no longer makes `total =+ ...` of `total += ...`"
    report = audit(weak, options, mutants=mutants, with_samples=False)
    # With N = 1 the sum has one term: keeping only the last product changes nothing the cases see ...
    (survivor,) = report.verdicts
    assert survivor.status is MutantStatus.SURVIVED, survivor.words
    assert "matvec/one-by-one" in survivor.passed and survivor.mutant.kernels == ("matvec",)
    # ... but a case one size larger does: not shown equivalent, and said where its outputs moved.
    assert "differ from the reference's" in survivor.words and "one-by-one~wider" in survivor.words
    assert report.kernel_scores()["matvec"] == (0, 1) and report.score == 0
    weak_page = tmp_path / "weak.html"
    weak_page.write_text(render_page(report.to_dict()))
    (row,) = html.fromstring(weak_page.read_text()).xpath("//tr[@class='survived']")
    assert "total =+" in row.text_content() and "kernels/matvec.py:8" in row.text_content()
    if shutil.which("chromium") or shutil.which("chromium-browser"):  # the page as a browser draws it
        from test_report_browser import decode_png, screenshot

        screenshot(weak_page, tmp_path / "weak.png", tmp_path / "profile")
        _, _, rows = decode_png(tmp_path / "weak.png")
        red = sum(1 for r in rows for x in range(0, len(r) - 3, 4)  # the survivor's row, in #cf222e
                  if r[x] > 180 and r[x + 1] < 80 and r[x + 2] < 90)
        assert red > 50

    strong = load_assignment(weak_pack(tmp_path, f"{ONE_BY_ONE}\n{TALL}"))
    report = audit(strong, options, mutants=accumulation_mutants(strong), with_samples=False)
    (killed,) = report.verdicts
    assert killed.status is MutantStatus.KILLED and not killed.cached
    assert killed.failed == ("matvec/tall",)
    assert report.kills_by_case["matvec/tall"] == 1 and "matvec/one-by-one" in report.cases_killing_nothing

    again = audit(strong, options, mutants=accumulation_mutants(strong), with_samples=False)
    assert [v.cached for v in again.verdicts] == [True] and again.verdicts[0].status is MutantStatus.KILLED

    page = html.fromstring(render_page(report.to_dict()))
    assert "matvec" in page.text_content() and "100%" in page.text_content()


def test_the_equivalence_check_keeps_a_mutant_that_only_reorders_a_sum(tmp_path: Path) -> None:
    pack = load_assignment(weak_pack(tmp_path, f"{ONE_BY_ONE}\n{TALL}"))
    line = MATVEC.splitlines(keepends=True).index("        for j in range(N):\n") + 1
    reordered = Mutant(FILE, line, "        for j in range(N):\n", "        for j in reversed(range(N)):\n",
                       "a sum in the other order", ("matvec",))
    dropped = Mutant(FILE, line, "        for j in range(N):\n", "        for j in range(N - 1):\n",
                     "the last term dropped", ("matvec",))
    report = audit(pack, Options(cache_dir=tmp_path / "cache", secret="audit-test"), mutants=[reordered, dropped],
                   with_samples=False)
    verdicts = {v.mutant.rule: v for v in report.verdicts}
    assert verdicts["a sum in the other order"].status is MutantStatus.EQUIVALENT, verdicts["a sum in the other order"].words
    assert "fresh draws" in verdicts["a sum in the other order"].words
    assert verdicts["the last term dropped"].status is MutantStatus.KILLED
    assert report.score == 1.0  # the equivalent one is not counted


def test_a_sample_that_no_longer_fails_where_it_says_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = weak_pack(tmp_path, f"{ONE_BY_ONE}\n{TALL}")
    meta = folder / "samples" / "mutant-matvec-last-column-skipped" / "VARIANT.toml"
    meta.write_text(meta.read_text().replace('failed_cases = ["one-by-one", "tall", "wide"]',
                                             'failed_cases = ["one-by-one", "tall", "wide"]'.replace(', "wide"', '')
                                             .replace('"one-by-one", ', '')))
    page = tmp_path / "audit.html"
    assert main(["audit", str(folder), "--limit", "0", "--cache-dir", str(tmp_path / "cache"),
                 "--html", str(page)]) == 1
    out = " ".join(capsys.readouterr().out.split())
    # Its inner loop to N - 1 fails one-by-one too (N = 1: nothing summed), which its VARIANT.toml no longer says.
    assert "sample mutant-matvec-last-column-skipped not as it says" in out
    assert "VARIANT.toml says failed failing tall; it got failed failing one-by-one, tall" in out
    assert "course-serial-loops" not in out.split("not as it says")[0]
    rows = html.fromstring(page.read_text()).xpath("//tr[@class='disagrees']/td[1]/text()")
    assert rows == ["mutant-matvec-last-column-skipped"]
