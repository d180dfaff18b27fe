"""The sparse packs: sparse-spmv-spgemm (SciPy on the CPU, runs anywhere) and sparse-spmv-spgemm-cupy (CuPy on the GPU,
tests marked `gpu`). Real builds in the build sandbox, real harnesses, real verdicts: the reference's full marks, the
template's words, each sample's exact failed cases, the dense-conversion scan with file and line, and the case
too large to be dense; and the python target's rule that a pack naming cupy needs a GPU."""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from grader.boundary.timing_statistics import Summary
from grader.device import unavailable_reason
from grader.options import Options
from grader.pipeline import grade
from grader.report.density import crossovers, render
from grader.report import markdown, terminal
from grader.report.hints import forbidden_notes, kernel_hints
from grader.results import Result
from grader.report.scaling import memory_growths
from grader.samples import Sample, compose, variants
from grader.assignment import Assignment, load_assignment, shape_of
from grader.status import CaseStatus, TimingStatus
from grader.targets import python_build, target_of
from grader.targets.python import import_patterns, named_methods
from grader.timing.results import KernelTiming, SubmissionTiming
from grader.timing.run import time_submission
from grader.timing.spec import load_timing, parse_timing
from grader.report.swept import CPU, GPU, DensityPoint
from grader.sweeps.density import sweep_points

from conftest import grade_variant, variant_params, with_time_limit
from pack_samples import Graded, assert_expected_verdicts, graded_once, kernel_of, sample_named

CPU_PACK, GPU_PACK = "sparse-spmv-spgemm", "sparse-spmv-spgemm-cupy"


@pytest.fixture(scope="module")
def cpu_pack() -> Assignment:
    return with_time_limit(load_assignment(CPU_PACK), 10.0)


@pytest.fixture(scope="module")
def cpu_graded(cpu_pack: Assignment, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Graded:
    return graded_once(cpu_pack, tmp_path_factory, cache_dir)


def densities(pack: Assignment, kernel: str) -> list[float]:
    """Each case's density (stored entries over M N; SpGEMM: A's), computed from the spec."""
    spec = pack.kernel(kernel)
    rows, cols, count = ("M", "N", "nnz") if kernel == "spmv" else ("M", "K", "nnzA")
    return [c.params[count] / (c.params[rows] * c.params[cols]) for c in spec.cases]


# The SciPy half: runs anywhere.

def test_the_cases_span_the_issues_densities_shapes_and_formats(cpu_pack: Assignment) -> None:
    for kernel in ("spmv", "spgemm"):
        spread = densities(cpu_pack, kernel)
        assert min(spread) <= 1e-4 and max(spread) >= 0.3, spread
        cases = cpu_pack.kernel(kernel).cases
        assert {c.params["csr"] for c in cases} == {0, 1}
        assert any(c.params.get("empty_rows") for c in cases) and any(c.params.get("explicit_zeros") for c in cases)
        assert any(c.params.get("nnz", c.params.get("nnzA")) == 1 for c in cases)
        assert any(c.params["M"] > 4 * c.params.get("N", c.params.get("K")) for c in cases)  # tall


def test_reference_scores_full_marks_on_both_kernels(cpu_graded: Graded, cpu_pack: Assignment) -> None:
    result = cpu_graded(None)
    assert result.score == result.max_score == 2
    for kernel in result.kernels:
        assert kernel.status == "passed" and len(kernel.cases) == len(cpu_pack.kernel(kernel.name).cases), kernel.message
    assert result.environment.compiler.startswith("Python ")


def test_template_builds_and_scores_zero_with_words_that_say_what_to_write(cpu_pack: Assignment,
                                                                           cache_dir: Path) -> None:
    result = grade(cpu_pack.template_dir, cpu_pack, Options(cache_dir=cache_dir, public_only=True))
    assert result.score == 0
    for kernel in result.kernels:
        assert kernel.status == "crashed", kernel.message
        for case in kernel.cases:
            assert case.message.startswith(f"raised NotImplementedError: {kernel.name} is not written yet: return A @ ")
            assert 'File "kernels/scipy_sparse.py"' in case.message and "grader" not in case.message.split("\n")[0]


@pytest.mark.parametrize("sample", variant_params(CPU_PACK))
def test_each_sample_fails_exactly_its_expected_cases(sample: Sample, cpu_graded: Graded) -> None:
    assert_expected_verdicts(cpu_graded(sample), sample)


def test_the_samples_cover_the_issues_mutants(cpu_pack: Assignment) -> None:
    names = {s.name for s in variants(cpu_pack)}
    for wanted in ("transposed", "explicit-zeros", "int32", "memoised", "toarray", "todense"):
        assert any(wanted in name for name in names), wanted
    assert any(s.kind == "course" and s.expect == "passed" and s.whole for s in variants(cpu_pack))


@pytest.mark.parametrize("name, kernel, found", [
    ("course-spmv-toarray", "spmv", [".toarray (at kernels/scipy_sparse.py:6)"]),
    ("course-spgemm-todense", "spgemm", [".todense (at kernels/scipy_sparse.py:10)",
                                         ".todense (at kernels/scipy_sparse.py:11)"]),
])
def test_a_dense_conversion_that_runs_is_named_with_file_and_line_and_costs_the_penalty(
        name: str, kernel: str, found: list[str], cpu_graded: Graded, cpu_pack: Assignment) -> None:
    sample = sample_named(cpu_pack, name)
    lines = (sample.folder / "kernels" / "scipy_sparse.py").read_text().splitlines()
    for entry in found:  # the line named is the one that converts
        line = int(entry.rsplit(":", 1)[1].rstrip(")"))
        assert entry.split()[0] in lines[line - 1], (entry, lines[line - 1])
    result = kernel_of(cpu_graded(sample), kernel)
    assert result.forbidden_symbols == found
    method = found[0].split()[0]
    where = ", ".join(entry.split("(at ")[1].rstrip(")") for entry in found)
    assert result.score == 0 and result.deductions
    assert f"calls {method} (at {where}, during {kernel}'s call), which this assignment forbids" in result.message
    assert kernel_hints(result) == [f"This assignment forbids {', '.join(found)}: do the work without "
                                    f"{'it' if len(found) == 1 else 'them'}."]
    # Recorded in every case whose harness lived to report it, one whose dense allocation NumPy refused included (a
    # time-out, or the sandbox's kill at its memory limit, ends the harness, and with it the record of its case).
    assert all(c.forbidden_used and {u.name for u in c.forbidden_used} == {method}
               for c in result.cases if c.status != CaseStatus.TIMEOUT and c.signal != "SIGKILL")
    assert result.forbidden_named == []  # every line that names it ran
    # The runs still happen: the small cases are right, the largest ones crash on the dense allocation.
    assert sum(c.passed for c in result.cases) == len(result.cases) - 2


def test_a_dense_conversion_never_called_costs_nothing_and_is_noted(cpu_graded: Graded,
                                                                    cpu_pack: Assignment) -> None:
    sample = sample_named(cpu_pack, "course-uncalled-toarray-helper")
    line = next(i for i, text in enumerate((sample.folder / "kernels" / "scipy_sparse.py").read_text().splitlines(),
                                           1) if ".toarray()" in text)
    result = cpu_graded(sample)
    assert result.score == result.max_score == 2
    note = (f"kernels/scipy_sparse.py:{line} names .toarray, which this assignment forbids; it never ran during "
            "grading, so it costs nothing")
    for kernel in result.kernels:
        assert kernel.status == "passed" and kernel.forbidden_symbols == [] and not kernel.deductions, kernel.message
        assert [(u.name, u.file, u.line) for u in kernel.forbidden_named] == \
            [(".toarray", "kernels/scipy_sparse.py", line)]
        assert forbidden_notes(kernel) == [note]
    assert note in markdown.render(result)
    console = Console(width=100, record=True, file=io.StringIO())
    terminal.render(result, console)
    assert " ".join(console.export_text().split()).count(note) == 2  # one per kernel
    assert Result.from_json(result.to_json()) == result


def test_the_case_too_large_to_be_dense_fits_sparse_and_fails_dense(cpu_pack: Assignment, cpu_graded: Graded) -> None:
    spmv = cpu_pack.kernel("spmv")
    case = next(c for c in spmv.cases if c.name == "dense-would-not-fit")
    limit = (cpu_pack.memory_limit_mb or 0) << 20
    dense_bytes = case.params["M"] * case.params["N"] * 8
    sparse_bytes = sum(math.prod(shape_of(b, case.params)) * np.dtype(b.dtype).itemsize
                       for b in spmv.buffers_with("input"))
    assert dense_bytes > 100 * limit and sparse_bytes < limit / 100, (dense_bytes, sparse_bytes, limit)
    assert next(c for c in kernel_of(cpu_graded(None), "spmv").cases if c.name == case.name).passed
    dense = kernel_of(cpu_graded(sample_named(cpu_pack, "course-spmv-toarray")), "spmv")
    crashed = next(c for c in dense.cases if c.name == case.name)
    assert crashed.status == "crashed" and "MemoryError: Unable to allocate" in crashed.message, crashed.message


def test_an_input_changed_in_place_is_named(cpu_pack: Assignment, cpu_graded: Graded) -> None:
    kernel = kernel_of(cpu_graded(sample_named(cpu_pack, "mutant-spgemm-drops-explicit-zeros-in-place")), "spgemm")
    case = next(c for c in kernel.cases if not c.passed)
    assert "A_data" in case.inputs_modified and "B_indptr" in case.inputs_modified, case.message


def test_the_build_records_every_attribute_with_file_and_line(tmp_path: Path) -> None:
    files = {"k/__init__.py": "", "k/a.py": "from k import b\ndef f(A):\n    g = A.todense\n    return b.h(A)\n",
             "k/b.py": "def h(A):\n    return A.tocsr().toarray() + A.A.sum() + A.Abs\n", "k/unused.py": "A.toarray()\n"}
    for relative, text in files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    errors, _, attributes = python_build.check({"file": "k/a.py", "function": "f"}, set(files), str(tmp_path))
    assert errors == []
    named = [(str(n), str(p), int(line)) for n, p, line in attributes]
    found = named_methods(named, (".toarray", ".todense", ".A", "numpy"))
    # A method named without a call is found too (the `.A` property, not `.Abs`); a file the kernel never imports
    # is not read.
    assert found == [(".todense", "k/a.py", 3), (".A", "k/b.py", 2), (".toarray", "k/b.py", 2)]
    assert import_patterns((".toarray", "torch", ".to*")) == ("torch",)


def test_a_pack_that_names_cupy_needs_a_gpu_and_says_why_it_cannot_run(cpu_pack: Assignment) -> None:
    gpu_pack = load_assignment(GPU_PACK)
    assert not target_of(cpu_pack).needs_gpu and target_of(gpu_pack).needs_gpu
    assert target_of(gpu_pack).python_packages == ("numpy", "scipy", "cupy")
    assert unavailable_reason(cpu_pack.target, cpu_pack.python_packages) is None
    # Inherited whole but for its adapter and packages: the same kernels, cases and signatures.
    assert [(k.name, k.signature, k.cases) for k in gpu_pack.kernels] == \
        [(k.name, k.signature, k.cases) for k in cpu_pack.kernels]
    assert (gpu_pack.template_dir / "grading" / "adapter.py").read_text() != \
        (cpu_pack.template_dir / "grading" / "adapter.py").read_text()


def test_without_a_gpu_the_cupy_pack_builds_and_runs_nothing(cache_dir: Path, tmp_path: Path) -> None:
    gpu_pack = load_assignment(GPU_PACK)
    reason = unavailable_reason(gpu_pack.target, gpu_pack.python_packages)
    if reason is None:
        pytest.skip("this machine can run the CuPy pack: its runs are the gpu tests'")
    result = grade_variant(gpu_pack, None, tmp_path, cache_dir, public_only=True)
    assert result.score == 0
    for kernel in result.kernels:
        assert kernel.status == "not_run" and reason in kernel.message, kernel.message



def test_the_swept_cases_share_one_size_and_state_their_density(cpu_pack: Assignment) -> None:
    for kernel in ("spmv", "spgemm"):
        cases = cpu_pack.kernel(kernel).cases
        swept = [(c, d) for c, d in zip(cases, densities(cpu_pack, kernel)) if "density" in c.params]
        assert len(swept) >= 4 and len({(c.params["M"], c.params["N"]) for c, _ in swept}) == 1
        assert [c.params["density"] for c, _ in swept] == pytest.approx([d for _, d in swept], rel=0.01)
        assert max(d for _, d in swept) == pytest.approx(0.3)


def timed(kernel: str, case: str, median_us: float) -> KernelTiming:
    summary = Summary(10, median_us, median_us, median_us, median_us, 0.0, 0.0, "rse")
    return KernelTiming(kernel, kernel, None, case, TimingStatus.TIMED, summary=summary)


def test_a_sweep_becomes_four_lines_and_a_crossover_where_the_gpu_starts_winning(cpu_pack: Assignment) -> None:
    gpu_pack = load_assignment(GPU_PACK)
    cases = {c.name: c.params["density"] for c in cpu_pack.kernel("spmv").cases if "density" in c.params}
    low, high = "sweep-1e-4", "sweep-0.3"
    # SpMV: the CPU at 10 and 1000 µs, the GPU at 100 and 100: speed-ups 0.1 and 10, crossing 1 halfway in log.
    cpu = SubmissionTiming("cpu", CPU_PACK, (timed("spmv", low, 10.0), timed("spmv", high, 1000.0),
                                             timed("spmv", "square-csr", 1.0), timed("spgemm", "sweep-0.1", 50.0)))
    gpu = SubmissionTiming("gpu", GPU_PACK, (timed("spmv", low, 100.0), timed("spmv", high, 100.0),
                                             timed("spgemm", "sweep-0.1", 500.0)))
    # As `grader time --sweep --sweep-html` draws them: each pack's points against its own swept parameter.
    points = (sweep_points(cpu, cpu_pack, load_timing(cpu_pack).sweep_parameter)
              + sweep_points(gpu, gpu_pack, load_timing(gpu_pack).sweep_parameter))
    assert "square-csr" not in {p.case for p in points}  # not a swept case: another size, no density stated
    assert {(p.device, p.operation) for p in points} == {(CPU, "spmv"), (GPU, "spmv"), (CPU, "spgemm"), (GPU, "spgemm")}
    found = {c.operation: c for c in crossovers(points)}
    spmv = found["spmv"]
    assert [s.speedup for s in spmv.speedups] == pytest.approx([0.1, 10.0])
    assert spmv.density == pytest.approx(math.sqrt(cases[low] * cases[high])) and spmv.gpu_faster_above is True
    assert found["spgemm"].density is None  # one density: nothing to cross
    page = render(points, "sparse")
    assert "Crossover at density 0.00548: the GPU is faster above it." in page
    assert "does not cross 1 over the densities timed: the CPU is faster at every one" in page
    assert "<svg" in page and "No figure" not in page  # matplotlib is a dependency of the grader's


def test_memory_against_density_is_shown_and_never_fitted_to_an_exponent() -> None:
    # At one size a fixed cost dominates: steps of +5 MiB then +0.2 MiB fit to a meaningless negative slope.
    held = {0.001: 12.0, 0.01: 11.3, 0.1: 16.8, 0.3: 17.1}
    points = [DensityPoint(CPU, "spgemm", f"d{d}", d, 100.0, int(mib * 2**20)) for d, mib in held.items()]
    (growth,) = memory_growths(points, {}, fit=False)
    assert growth.exponent is None and [x for x, _ in growth.points] == sorted(held)
    page = render(points, "sparse")
    assert "peak extra memory, by density" in page and "fitted exponent" not in page
    assert "0.3: 17.1 MiB" in page
    sized = [DensityPoint(CPU, "k", f"n{n}", n, 1.0, 1000 + 8 * n * n) for n in (128, 256, 512, 1024)]
    assert "fitted exponent" in render(sized, "sizes", "N")


def test_two_cases_of_one_density_count_as_their_geometric_mean() -> None:
    points = [DensityPoint(CPU, "spmv", "a", 0.01, 10.0), DensityPoint(CPU, "spmv", "b", 0.01, 40.0),
              DensityPoint(GPU, "spmv", "a", 0.01, 20.0)]
    (only,) = crossovers(points)
    assert only.speedups[0].cpu_us == pytest.approx(20.0) and only.speedups[0].speedup == pytest.approx(1.0)


# The CuPy half: an NVIDIA GPU and CuPy (run with `python3 -m pytest -m gpu tests/test_sparse_pack.py`).

def gpu_pack_reason() -> str | None:
    pack = load_assignment(GPU_PACK)
    return unavailable_reason(pack.target, pack.python_packages)


needs_cupy = pytest.mark.skipif(gpu_pack_reason() is not None, reason=f"the CuPy pack cannot run here: "
                                                                     f"{gpu_pack_reason()}")


@pytest.fixture(scope="module")
def gpu_graded(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Graded:
    return graded_once(with_time_limit(load_assignment(GPU_PACK), 30.0), tmp_path_factory, cache_dir)


@pytest.mark.gpu
@needs_cupy
def test_cupy_reference_scores_full_marks(gpu_graded: Graded) -> None:
    result = gpu_graded(None)
    assert result.score == result.max_score == 2, [k.message for k in result.kernels]


@pytest.mark.gpu
@needs_cupy
@pytest.mark.parametrize("sample", variant_params(GPU_PACK))
def test_each_cupy_sample_fails_exactly_its_expected_cases(sample: Sample, gpu_graded: Graded) -> None:
    assert_expected_verdicts(gpu_graded(sample), sample)


@pytest.mark.gpu
@needs_cupy
def test_a_result_left_on_the_host_is_refused_by_the_cupy_adapter(tmp_path: Path, cache_dir: Path) -> None:
    pack = with_time_limit(load_assignment(GPU_PACK), 30.0)
    folder = compose(pack, None, tmp_path / "host")
    (folder / "kernels" / "cupy_sparse.py").write_text(
        "def spmv(A, x):\n    return (A.tocsr() @ x).get()\n\n\ndef spgemm(A, B):\n    return A.tocsr() @ B.tocsr()\n")
    result = grade(folder, pack, Options(cache_dir=cache_dir, public_only=True, kernels=("spmv",)))
    kernel = kernel_of(result, "spmv")
    assert kernel.score == 0
    assert all("spmv returned numpy.ndarray; it must return A @ x as a dense CuPy vector" in c.message
               for c in kernel.cases), kernel.message


@pytest.mark.gpu
@needs_cupy
def test_a_cupy_call_is_timed_by_cuda_events_with_the_wall_clock_beside(tmp_path: Path, cache_dir: Path) -> None:
    pack = load_assignment(GPU_PACK)
    quick = parse_timing({"warmup": 2, "min_calls": 5, "max_calls": 20, "cap_s": 1.0, "pool": 2}, "tests [timing]")
    timings = time_submission(compose(pack, None, tmp_path / "reference"), pack,
                              Options(cache_dir=cache_dir, kernels=("spmv",)), quick)
    (spmv,) = timings.kernels
    assert spmv.status is TimingStatus.TIMED, spmv.message
    assert spmv.timer["clock"] == "cuda_events", spmv.timer
    assert spmv.median_us is not None and spmv.median_us > 0
