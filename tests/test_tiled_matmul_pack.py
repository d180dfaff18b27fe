"""tiled-matmul without a GPU: the spec (three kernels, a tile per case, cuBLAS allowed in one), the float64 gold
and the tolerance it is judged by, and the reference, template and every sample built here with nvcc: the shared
memory the tiled kernels' SASS shows and the naive kernel's lacks, the cuBLAS calls where they are allowed and
where they are not. Nothing built runs here (tests/test_gpu_tiled_matmul.py runs it)."""

from __future__ import annotations

import fnmatch
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from grader import evidence
from grader.cases import Seed, make_case_inputs, prepare_inputs
from grader.evidence import LibraryEvidence, TileShortfall, evidence_of, tile_shortfalls
from grader.gold import gold_outputs
from grader.options import Options
from grader.pipeline import Built, build_stage
from grader.results import CaseResult, LaunchedKernel
from grader.samples import Sample, compose, variants
from grader.sandbox import sandbox_named
from grader.sanitizer import smallest_case
from grader.scoring import score_kernel
from grader.assignment import Assignment, Kernel, load_assignment
from grader.status import BuildStatus, CaseStatus, KernelStatus
from grader.timing.spec import load_timing

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
needs_sass = pytest.mark.skipif(
    evidence.find_cuobjdump() is None or evidence.find_nvdisasm() is None,
    reason="cuobjdump and nvdisasm are not installed (the CUDA toolkit's, or "
           "`pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`)")

TILES = (8, 16, 32)
KERNELS = ("naive", "tiled", "cublas")


@pytest.fixture(scope="module")
def pack() -> Assignment:
    return load_assignment("tiled-matmul")


@pytest.fixture(scope="module")
def built(pack: Assignment, cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Built]:
    """The reference, the template and every sample (its own kernel), each built once."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    folders: dict[str, tuple[Path, tuple[str, ...]]] = {"reference": (pack.reference_dir, ()),
                                                        "template": (pack.template_dir, ())}
    for sample in variants(pack):
        folders[sample.name] = (compose(pack, sample, tmp_path_factory.mktemp(sample.name) / sample.name),
                                (sample.kernel,))
    return {name: build_stage(folder, pack, Options(cache_dir=cache_dir, kernels=kernels))
            for name, (folder, kernels) in folders.items()}


def library_evidence(build: Built, kernel: str) -> LibraryEvidence:
    artifact = build.artifacts[kernel]
    assert artifact.status == BuildStatus.BUILT and artifact.library is not None, artifact.message
    return evidence_of(Path(artifact.library))


def samples_of(pack: Assignment) -> dict[str, Sample]:
    return {s.name: s for s in variants(pack)}


def test_three_kernels_one_product_and_cublas_allowed_in_its_own_alone(pack: Assignment) -> None:
    assert pack.target == "cuda" and pack.gold == "numpy" and "cublas" in pack.libraries
    assert [k.name for k in pack.kernels] == list(KERNELS)
    for kernel in pack.kernels:
        assert kernel.signature.function == f"matmul_{kernel.name}"
        assert [(p.name, p.ctype, p.pointer, p.const) for p in kernel.signature.parameters[:6]] == [
            ("A", "float", True, True), ("B", "float", True, True), ("C", "float", True, False),
            ("M", "int", False, False), ("N", "int", False, False), ("K", "int", False, False)]
        assert [b.name for b in kernel.buffers_with("output")] == ["C"]
        calls_cublas_ok = not any(fnmatch.fnmatchcase("cublasSgemm_v2", p) for p in kernel.forbidden_symbols)
        assert calls_cublas_ok == (kernel.name == "cublas"), kernel.forbidden_symbols
        assert any(c.public for c in kernel.cases)
    assert pack.kernel("tiled").signature.parameters[-1].name == "tile"


def test_every_tile_edge_has_a_ragged_case_and_every_kernel_is_timed_on_square_4096(pack: Assignment) -> None:
    tiled = pack.kernel("tiled")
    assert {c.params["tile"] for c in tiled.cases} == set(TILES)
    for tile in TILES:
        # M, N and K none of them a multiple of the tile: every edge of the grid and of K is ragged.
        assert any(c.params["tile"] == tile and all(c.params[d] % tile for d in "MNK") for c in tiled.cases), tile
    timing = load_timing(pack)
    for kernel in pack.kernels:
        case = timing.timed_case(kernel)
        assert case.name == "square-4096" and case.params["M"] == case.params["N"] == case.params["K"] == 4096
    # The cases the kernels share are the same shapes, so one comparison reads across all three.
    shapes = {k.name: {c.name: (c.params["M"], c.params["N"], c.params["K"]) for c in k.cases} for k in pack.kernels}
    assert shapes["naive"] == shapes["cublas"]
    assert all(shapes["tiled"][name] == shape for name, shape in shapes["naive"].items() if name in shapes["tiled"])


def test_racecheck_runs_on_a_tiled_case_that_steps_several_tiles_along_k(pack: Assignment) -> None:
    tiled = pack.kernel("tiled")
    assert "racecheck" in tiled.sanitizer
    case = smallest_case(tiled)
    # With one step the second __syncthreads() guards nothing, and a race without it could not be seen.
    assert case.params["K"] // case.params["tile"] >= 2, case


def test_every_sample_lists_real_cases_of_its_kernel_in_the_specs_order(pack: Assignment) -> None:
    samples = samples_of(pack)
    assert {s.kind for s in samples.values()} == {"course", "alternative", "mutant"}
    assert {s.kernel for s in samples.values()} == {"naive", "tiled", "cublas"}
    for sample in samples.values():
        names = [c.name for c in pack.kernel(sample.kernel).cases]
        if sample.failed_cases is not None:
            # The GPU test compares lists: the result's failed cases come in the spec's order.
            assert list(sample.failed_cases) == [n for n in names if n in sample.failed_cases], sample.name
            assert set(sample.failed_cases) <= set(names), sample.name
            # A failed case fails the kernel; a kernel fails with none only for the technique it lacks.
            assert (sample.expect == KernelStatus.FAILED) == bool(sample.failed_cases) or \
                sample.name in WITHOUT_THE_TECHNIQUE, sample.name


def test_the_numpy_gold_is_the_float64_product(pack: Assignment, cache_dir: Path) -> None:
    for name in KERNELS:  # through the grader's own gold stage, as a grading computes it
        kernel = pack.kernel(name)
        case = next(c for c in kernel.cases if c.name == "ragged-small")
        seed = Seed(pack.public_seed)
        inputs = make_case_inputs(pack, kernel, case, seed)
        A, B = inputs["A"], inputs["B"]
        M, N, K = (case.params[d] for d in "MNK")
        assert A.shape == (M, K) and B.shape == (K, N) and A.dtype == B.dtype == np.float32
        assert -1 <= A.min() and A.max() <= 1 and A.std() > 0.4  # uniform in [-1, 1]: std 0.577
        loops = np.array([[sum(float(A[i, k]) * float(B[k, j]) for k in range(K)) for j in range(N)]
                          for i in range(M)])
        folder = prepare_inputs(pack, kernel, case, seed, cache_dir)
        gold = gold_outputs(pack, [(kernel, case, folder)], cache_dir, sandbox_named("process"))[(name, case.name)]["C"]
        assert gold.dtype == np.float64 and gold.shape == (M, N)
        np.testing.assert_allclose(gold, loops, rtol=1e-12, atol=1e-12)


def test_the_tolerance_holds_a_float32_sum_over_k_4096_and_fails_one_product_dropped(pack: Assignment) -> None:
    kernel = pack.kernel("naive")
    case = next(c for c in kernel.cases if c.name == "square-4096")
    inputs = make_case_inputs(pack, kernel, case, Seed(pack.public_seed))
    rows = inputs["A"][:8]  # 8 x 4096 outputs, summed serially in float32 with two roundings a step (no FMA)
    B = inputs["B"]
    gold = rows.astype(np.float64) @ B.astype(np.float64)
    tolerance = kernel.tolerance_for(case)
    allowed = tolerance.atol + tolerance.rtol * np.abs(gold)
    total = np.zeros(gold.shape, np.float32)
    for k in range(B.shape[0]):
        total += np.outer(rows[:, k], B[k]).astype(np.float32)
    # The comment in assignment.toml: ~2e-4 measured, a 10x margin under atol.
    assert np.max(np.abs(total - gold) / allowed) < 0.25, np.max(np.abs(total - gold))
    # A kernel that skips K's last product (a ragged tile lost) fails: most outputs are far outside.
    dropped = total - np.outer(rows[:, -1], B[-1])
    assert np.mean(np.abs(dropped - gold) > allowed) > 0.9


@needs_nvcc
def test_the_reference_the_template_and_every_sample_compile(pack: Assignment, built: dict[str, Built]) -> None:
    for name, build in built.items():
        expected = {k: BuildStatus.BUILT for k in (KERNELS if name in ("reference", "template")
                                                  else (samples_of(pack)[name].kernel,))}
        assert {k: a.status for k, a in build.artifacts.items()} == expected, \
            (name, {k: a.message for k, a in build.artifacts.items() if a.status != BuildStatus.BUILT})


@needs_nvcc
def test_cublas_is_called_in_matmul_cublas_and_forbidden_in_the_tiled_kernel_only(pack: Assignment,
                                                                                   built: dict[str, Built]) -> None:
    reference = built["reference"].artifacts
    assert "cublasSgemm_v2" in library_evidence(built["reference"], "cublas").cublas_symbols
    assert not any((a.forbidden_symbols or a.watched) for a in reference.values())
    forbidden = [name for name, sample in samples_of(pack).items() if sample.expect == KernelStatus.FORBIDDEN]
    assert forbidden == ["forbidden-tiled-calls-cublas"]
    assert "cublasSgemm_v2()" in built[forbidden[0]].artifacts["tiled"].watched  # its run decides (the GPU tests)
    for name, build in built.items():
        if name not in forbidden:
            assert not any((a.forbidden_symbols or a.watched) for a in build.artifacts.values()), name


@needs_nvcc
@needs_sass
def test_the_tiled_kernels_stage_tiles_in_shared_memory_and_the_naive_ones_do_not(pack: Assignment,
                                                                                   built: dict[str, Built]) -> None:
    tiled = library_evidence(built["reference"], "tiled")
    assert tiled.sass_read, tiled.note
    # One instantiation per tile edge, each with its two TILE x TILE float tiles, loaded (LDS) and stored (STS).
    by_tile = {f.short_name: f for f in tiled.functions}
    assert set(by_tile) == {f"matmul_tiled_kernel<{t}>" for t in TILES}, set(by_tile)
    for tile in TILES:
        function = by_tile[f"matmul_tiled_kernel<{tile}>"]
        assert function.shared_bytes == 2 * tile * tile * 4, function
        assert function.shared_loads > 0 and function.shared_stores > 0, function
    naive = library_evidence(built["reference"], "naive")
    assert naive.sass_read and naive.functions and naive.shows("shared_memory") is False, naive
    for name, sample in samples_of(pack).items():
        shown = library_evidence(built[name], sample.kernel)
        if sample.kernel == "naive" or name == "mutant-tiled-without-shared-memory":
            assert shown.shows("shared_memory") is False, name
        elif sample.expect == KernelStatus.FORBIDDEN:
            assert not shown.functions and shown.shows("shared_memory") is None, name  # no device code of its own
        elif sample.kernel == "tiled":
            assert shown.shows("shared_memory") is True, name


TILE_IGNORED = "mutant-tile-ignored-always-16"
# Every tile instantiated, <16> always launched: only the run shows it (the GPU test; here its launches as recorded).
LAUNCHED_16 = "mutant-every-tile-built-16-launched"

# Right in every case, and without the technique their kernel is named for: each loses that kernel's points.
WITHOUT_THE_TECHNIQUE = {
    "mutant-tiled-without-shared-memory": "tiled must show its technique: no shared-memory use in its binary",
    "mutant-cublas-hand-written": "cublas must show its technique: it calls nothing matching cublas*",
    TILE_IGNORED: "tiled must show its technique: cases tile-32-ragged and ragged-medium ask for tile 32, and no "
                  "kernel in its binary has the shared memory a 32 x 32 tile needs (8 KiB for a 32 x 32 tile of A and "
                  "one of B); the most any has is 2 KiB (matmul_tiled_kernel), a 16 x 16 tile's: each case must run "
                  "at its own tile, not one tile for all",
    LAUNCHED_16: "tiled must show its technique: cases tile-32-ragged and ragged-medium ask for tile 32, and the kernel "
                 "they launched, tiledMatMul<16> (block 16 x 16), has 2 KiB of shared memory, a 16 x 16 tile's, less "
                 "than a 32 x 32 tile needs (8 KiB for a 32 x 32 tile of A and one of B): each case must run at its "
                 "own tile, not one tile for all",
}


def launched_as_run(name: str, build: Built, kernel: Kernel) -> list[LaunchedKernel]:
    """What the launch watch records for each case of the sample's tiled kernel, where its host code fixes it
    (LAUNCHED_16: tiledMatMul<16> with 16 x 16 threads, whatever the tile); nothing for the others."""
    if name != LAUNCHED_16 or kernel.name != "tiled":
        return []
    (sixteen,) = [f for f in library_evidence(build, "tiled").functions if f.short_name == "tiledMatMul<16>"]
    return [LaunchedKernel(sixteen.name, [16, 16, 1], 0)]


@needs_nvcc
@needs_sass
def test_every_tile_the_cases_ask_for_has_its_tiles_in_the_binary_except_one_fixed_16_x_16(
        pack: Assignment, built: dict[str, Built]) -> None:
    tiled = pack.kernel("tiled")
    assert "shared_memory_per_tile" in tiled.evidence and tiled.evidence_penalty == 1.0
    at_32 = tuple(c.name for c in tiled.cases if c.params["tile"] == 32)
    tiled_samples = [n for n, s in samples_of(pack).items() if s.kernel == "tiled"]
    assert {"course-template-tile", "course-dynamic-shared-tile", TILE_IGNORED} <= set(tiled_samples)
    for name in ("reference", *tiled_samples):
        shortfalls = tile_shortfalls(tiled, library_evidence(built[name], "tiled"))
        if name == TILE_IGNORED:
            # Two 16 x 16 float tiles (2 KiB) for every tile: enough for tile 8's, short of tile 32's 8 KiB.
            assert shortfalls == (TileShortfall(32, at_32, 2 * 32 * 32 * 4, ("A", "B"), "matmul_tiled_kernel",
                                                2 * 16 * 16 * 4, 16),), shortfalls
        else:
            assert shortfalls == (), (name, shortfalls)
    # One instantiation per tile, each with its own two tiles, as the reference's.
    template = {f.short_name: f.shared_bytes for f in library_evidence(built["course-template-tile"], "tiled").functions}
    assert template == {f"tiledMatMul<{t}>": 2 * t * t * 4 for t in TILES}, template
    # Dynamic shared memory is sized at launch: the binary declares none, so the tiles are not judged from it.
    dynamic = library_evidence(built["course-dynamic-shared-tile"], "tiled")
    assert dynamic.shows("shared_memory") is True and [f.shared_bytes for f in dynamic.functions] == [0], dynamic


@needs_nvcc
@needs_sass
def test_a_kernel_without_the_technique_it_is_named_for_loses_its_points_with_the_words(
        pack: Assignment, built: dict[str, Built]) -> None:
    for name in ("reference", *samples_of(pack)):
        build = built[name]
        for kernel in build.kernels:
            # As if every case passed (no GPU here): what its binary shows decides the rest.
            cases = [CaseResult(c.name, c.public, CaseStatus.PASSED, True, "",
                                launched=launched_as_run(name, build, kernel)) for c in kernel.cases]
            result = score_kernel(kernel, build.artifacts[kernel.name], cases)
            words = WITHOUT_THE_TECHNIQUE.get(name) if name != "reference" else None
            if words is not None:
                assert result.score == 0 and result.status is KernelStatus.FAILED, result.message
                assert result.message == words and result.deductions[0].reason == words
            elif not build.artifacts[kernel.name].forbidden_symbols:
                assert result.score == kernel.weight and result.status is KernelStatus.PASSED, (name, result.message)


@needs_nvcc
def test_only_the_tiled_kernels_library_watches_its_launches_and_it_loads_without_a_gpu(
        built: dict[str, Built]) -> None:
    """The watch is linked where the spec asks each case's tile (the tiled kernel), and reading it before any launch
    finds none: the harness's half, on a library loaded as the harness loads it (no CUDA call is made)."""
    from grader.boundary.c_abi import LAUNCH_TAKE, SharedLibraryDevice

    for name, artifact in built["reference"].artifacts.items():
        exported = subprocess.run(["nm", "-D", "--defined-only", str(artifact.library)], capture_output=True,
                                  text=True, check=True).stdout
        assert (LAUNCH_TAKE in exported and "__wrap___cudaLaunchKernel" in exported) == (name == "tiled"), name
    library = SharedLibraryDevice().load(str(built["reference"].artifacts["tiled"].library))
    assert SharedLibraryDevice().launched(library) == ()
