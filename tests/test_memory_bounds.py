"""A kernel's memory bound (`memory_bound` in its [[kernels]] table), measured in `grade` and `check`: the counting
allocator preloaded into CPU harnesses gives each case its peak extra memory, and a kernel over its bound loses the
technique's points, with words that say why. Real g++ builds, real Python kernels, real harnesses."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import git
import pytest

from grader.errors import SpecError
from grader.pipeline import grade
from grader.options import Options
from grader.report.hints import kernel_hints
from grader.results import CaseResult, Result
from grader.samples import compose, variants
from grader.scoring import judge_memory_bound
from grader.assignment import Assignment, MemoryBound, load_assignment
from grader.assignment.model import MEMORY_FLOOR_BYTES
from grader.status import CaseStatus

from conftest import copy_assignment
from test_cli import grader

MEMORY_LINE = re.compile(r"^memory_bound = .*$", re.MULTILINE)


def sample(pack: Assignment, name: str):
    return next(v for v in variants(pack) if v.name == name)


def kernel_of(result: Result, name: str):
    return next(k for k in result.kernels if k.name == name)


# ---------------------------------------------------------------- the spec key

def _broken(tmp_path: Path, bound: str) -> str:
    """flash-attention-cpu's flash_attention with its memory_bound line replaced: the loader's error."""
    pack = copy_assignment("flash-attention-cpu", tmp_path)
    spec = pack / "assignment.toml"
    text = spec.read_text()
    assert len(MEMORY_LINE.findall(text)) == 1, "test setup: one memory_bound line"
    spec.write_text(MEMORY_LINE.sub(lambda _: f"memory_bound = {bound}", text))
    with pytest.raises(SpecError) as error:
        load_assignment(pack)
    return str(error.value)


@pytest.mark.parametrize(("bound", "expected"), [
    ('{ case = "sweep-2048", max_extra_mb = 4 }', r"key 'case' names case 'sweep-2048', which is not among the "
                                                  r"kernel's cases .*a sweep case is never graded"),
    ('{ case = "n-2048" }', r"'case' and 'max_extra_mb' go together"),
    ('{ small = "square-tiles", max_growth = 6 }', r"'small', 'large' and 'max_growth' go together"),
    ('{ small = "n-2048", large = "n-2048", max_growth = 6 }', r"'small' and 'large' name the same case 'n-2048'"),
    ('{ case = "n-2048", max_extra_mb = 0 }', r"key 'max_extra_mb' must be > 0 \(MiB\), found 0"),
    ('{ small = "square-tiles", large = "n-2048", max_growth = 0.5 }', r"key 'max_growth' must be >= 1"),
    ('{ case = "n-2048", max_extra_mb = 4, penalty = 2 }', r"key 'penalty' is a share of the kernel's weight"),
    ('{ case = "n-2048", max_extra_mb = "4" }', r"key 'max_extra_mb' must be float, found '4'"),
    ('{ case = "n-2048", max_extra_mb = 4, max_extra = 1 }', r"unknown key\(s\) \['max_extra'\]"),
    ('{ case = "n-2048", max_extra_mb = 4, sizes = ["T"] }', r"key 'sizes' names \['T'\], which the bound's cases"),
    ('{ meaning = "nothing" }', r"bounds nothing; expected case and max_extra_mb"),
    ('4', r"expected a table with case and max_extra_mb"),
])
def test_a_broken_memory_bound_names_the_file_the_kernel_and_the_key(bound: str, expected: str,
                                                                     tmp_path: Path) -> None:
    message = _broken(tmp_path, bound)
    assert "assignment.toml kernel 'flash_attention' key 'memory_bound'" in message, message
    assert re.search(expected, message), message


def test_the_bundled_bounds_name_public_cases_that_grade_and_check_both_run() -> None:
    for pack, kernel in (("flash-attention-cpu", "flash_attention"),
                         ("flash-attention-backward", "flash_attention_backward"), ("sparse-spmv-spgemm", "spgemm")):
        spec = load_assignment(pack).kernel(kernel)
        bound = spec.memory_bound
        assert bound is not None and bound.penalty == 1.0 and bound.meaning and bound.max_extra_bytes, pack
        case = next(c for c in spec.cases if c.name == bound.case)
        assert case.public, (pack, case.name)
    # Kernels whose technique allows N x N (Algorithm 0) declare none.
    assert load_assignment("flash-attention-cpu").kernel("standard_attention").memory_bound is None


# ---------------------------------------------------------------- judging the figures

def _case(name: str, peak: int | None, n: int) -> CaseResult:
    return CaseResult(name, False, CaseStatus.PASSED, True, "passed", peak_extra_bytes=peak, params={"N": n, "d": 8})


def test_growth_is_judged_between_two_cases_each_counted_as_at_least_the_floor() -> None:
    bound = MemoryBound(small="n-1024", large="n-4096", max_growth=6.0, sizes=("N",))
    # O(N^2): 4 MiB to 64 MiB, 16 times.
    quadratic = judge_memory_bound(bound, [_case("n-1024", 4 << 20, 1024), _case("n-4096", 64 << 20, 4096)])
    assert quadratic is not None and quadratic.exceeded and quadratic.growth == 16.0
    assert quadratic.large is not None and quadratic.large.params == {"N": 4096}
    # A few KiB at both sizes: both count as the floor, not 8 KiB -> 48 KiB (6x, the allocator's noise).
    tiny = judge_memory_bound(bound, [_case("n-1024", 8 << 10, 1024), _case("n-4096", 48 << 10, 4096)])
    assert tiny is not None and not tiny.exceeded and tiny.growth == 1.0 and tiny.floor_bytes == MEMORY_FLOOR_BYTES
    # The small case not run (a check on public cases only) or not counted: nothing is judged.
    unjudged = judge_memory_bound(bound, [_case("n-1024", None, 1024), _case("n-4096", 64 << 20, 4096)])
    assert unjudged is not None and not unjudged.measured and not unjudged.exceeded
    assert judge_memory_bound(None, []) is None


# ---------------------------------------------------------------- grade and check, on real submissions

@pytest.fixture(scope="module")
def flash_backward() -> Assignment:
    return load_assignment("flash-attention-backward")


def test_a_backward_that_builds_p_loses_its_points_in_grade_and_the_reference_keeps_them(
        flash_backward: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    kernel = "flash_attention_backward"
    options = Options(cache_dir=cache_dir, kernels=(kernel,))
    reference = kernel_of(grade(compose(flash_backward, None, tmp_path / "reference"), flash_backward, options), kernel)
    mutant_sample = sample(flash_backward, "mutant-flash-backward-materialises-scores")
    mutant = kernel_of(grade(compose(flash_backward, mutant_sample, tmp_path / "mutant"), flash_backward, options),
                       kernel)
    bound = flash_backward.kernel(kernel).memory_bound
    assert bound is not None and bound.max_extra_bytes is not None
    # Every case carries its peak extra heap memory; the reference's stays O(N d), under a tenth of the bound.
    assert all(c.peak_extra_bytes is not None for c in reference.cases + mutant.cases)
    assert reference.score == reference.max_score and reference.memory_bound is not None
    assert reference.memory_bound.measured and not reference.memory_bound.exceeded
    assert reference.memory_bound.case is not None
    assert reference.memory_bound.case.peak_extra_bytes < bound.max_extra_bytes / 10
    # The mutant's outputs are all right; its N x N P (2048^2 floats) costs the kernel's points.
    assert all(c.passed for c in mutant.cases) and mutant.score == 0 and mutant.status == "failed"
    measured = mutant.memory_bound
    assert measured is not None and measured.exceeded and measured.points == mutant.max_score
    assert measured.case is not None and measured.case.peak_extra_bytes >= 2048 * 2048 * 4
    (deduction,) = mutant.deductions
    assert deduction.reason.startswith("peak extra memory 16") and "at N = 2048, d = 8 (case 'n-2048')" in \
        deduction.reason and "over its bound of 4 MiB: an N x N matrix (P, dP or dS)" in deduction.reason
    assert deduction.reason.endswith("(its outputs there were correct)") and deduction.reason in mutant.message
    assert "one tile or one row at a time" in kernel_hints(mutant)[0]


def _check(repo: Path, cache_dir: Path, out: Path) -> dict:
    completed = grader("check", "--kernels", "flash_attention", "--json", str(out), cwd=repo, cache_dir=cache_dir)
    assert completed.returncode in (0, 1), completed.stdout + completed.stderr
    return {"stdout": completed.stdout, "returncode": completed.returncode, **json.loads(out.read_text())}


def test_algorithm_1_that_builds_the_scores_loses_its_points_in_check_and_keeps_them_without(
        tmp_path: Path, cache_dir: Path) -> None:
    """`grader check` in the student's repository: the reference (the mutant's code with the N x N matrix taken out)
    keeps full marks; the mutant, right on every public case, loses flash_attention's 2 points and is told why.
    (`--kernels flash_attention`: standard_attention, Algorithm 0, has no bound and is not what this proves.)"""
    pack = load_assignment("flash-attention-cpu")
    repo = shutil.copytree(pack.template_dir, tmp_path / "repo")
    compose(pack, None, repo)
    git.Repo.init(repo)
    passing = _check(repo, cache_dir, tmp_path / "reference.json")
    assert passing["returncode"] == 0 and passing["score"] == passing["max_score"] == 2, passing["stdout"]
    flash = next(k for k in passing["kernels"] if k["name"] == "flash_attention")
    assert "n-2048" in [c["name"] for c in flash["cases"]] and not flash["memory_bound"]["exceeded"]
    compose(pack, sample(pack, "mutant-flash-materialises-scores"), repo)
    failing = _check(repo, cache_dir, tmp_path / "mutant.json")
    assert failing["returncode"] == 1 and failing["score"] == 0, failing["stdout"]
    flash = next(k for k in failing["kernels"] if k["name"] == "flash_attention")
    assert all(c["passed"] for c in flash["cases"]) and flash["score"] == 0
    assert flash["memory_bound"]["exceeded"] and flash["memory_bound"]["case"]["params"] == {"N": 2048, "d": 8}
    words = "over its bound of 4 MiB: an N x N matrix: Algorithm 1 keeps O(N d)"
    assert words in flash["deductions"][0]["reason"] and words in " ".join(failing["stdout"].split())


def test_an_spgemm_that_densifies_loses_its_points_and_one_that_stays_sparse_keeps_them(
        tmp_path: Path, cache_dir: Path) -> None:
    """A Python kernel's NumPy arrays are counted too: np.zeros((M, N)) + np.add.at, no forbidden method called,
    right on every public case, is over SpGEMM's bound at the public case density-1e-4 (check's selection)."""
    pack = load_assignment("sparse-spmv-spgemm")
    options = Options(cache_dir=cache_dir, kernels=("spgemm",), public_only=True)
    sparse = kernel_of(grade(compose(pack, None, tmp_path / "reference"), pack, options), "spgemm")
    dense = kernel_of(grade(compose(pack, sample(pack, "mutant-spgemm-densifies-add-at"), tmp_path / "dense"), pack,
                            options), "spgemm")
    assert sparse.score == sparse.max_score and sparse.memory_bound is not None
    # The first call imports the kernel's module (and SciPy's: ~6 MiB); what the import keeps is not the call's.
    assert sparse.cases[0].peak_extra_bytes is not None and sparse.cases[0].peak_extra_bytes < 1 << 20
    assert sparse.memory_bound.measured and not sparse.memory_bound.exceeded
    assert not dense.forbidden_symbols and all(c.passed for c in dense.cases) and dense.score == 0
    assert dense.memory_bound is not None and dense.memory_bound.exceeded
    assert dense.memory_bound.case is not None and dense.memory_bound.case.peak_extra_bytes >= 2000 * 2000 * 8
    assert "at M = 2000, K = 2000, N = 2000 (case 'density-1e-4'), over its bound of 8 MiB: a dense M x N matrix" \
        in dense.message
