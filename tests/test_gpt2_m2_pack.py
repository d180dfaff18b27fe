"""gpt2-m2 without a GPU: the pack (milestone 1 inherited, the course's four variants), its reference and template
laid out as the course's overlay rule needs, and every variant's kernels built here with nvcc: the tensor cores,
cuBLAS calls and shared memory their binaries show. Nothing built runs here."""

from __future__ import annotations

import fnmatch
import shutil
from pathlib import Path

import pytest

from grader import evidence
from grader.device import unavailable_reason
from grader.evidence import evidence_of
from grader.options import Options
from grader.pipeline import Built, build_stage, run_stage
from grader.report.evidence import variant_evidence
from grader.results import KernelResult
from grader.samples import compose, variants
from grader.scoring import score_variants
from grader.assignment import PROJECT_ROOT, Assignment, load_assignment
from grader.status import BuildStatus, KernelStatus

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
needs_sass = pytest.mark.skipif(
    evidence.find_cuobjdump() is None or evidence.find_nvdisasm() is None,
    reason="cuobjdump and nvdisasm are not installed (the CUDA toolkit's, or "
           "`pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`)")

# The course's milestone 2: folder -> weight.
COURSE_WEIGHTS = {"req_0": 6, "req_1": 5, "req_2": 4, "req_3": 3}
CUBLAS_CALLS = ("cublasSgemm_v2", "cublasSgemmStridedBatched")
# Where each optimization is "applicable": more than one kernel each.
APPLIED_TO = {"req_0": ("matmul", "attention"), "req_1": ("matmul", "attention"), "req_2": ("matmul", "attention"),
              "req_3": ("layernorm", "attention")}


@pytest.fixture(scope="module")
def m2() -> Assignment:
    return load_assignment("gpt2-m2")


@pytest.fixture(scope="module")
def m2_cache(cache_dir: Path) -> Path:
    """The session's: the base kernels are gpt2-m1's, which other tests build there too."""
    return cache_dir


@pytest.fixture(scope="module")
def built(m2: Assignment, m2_cache: Path) -> Built:
    """The reference's 30 kernels (6 base, 6 per variant) built once; the samples' builds reuse the cache."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    return build_stage(m2.reference_dir, m2, Options(cache_dir=m2_cache))


def test_pack_is_milestone_1_with_the_courses_four_variants(m2: Assignment) -> None:
    m1 = load_assignment("gpt2-m1")
    assert m2.based_on == "gpt2-m1" and m2.module_root == m1.root
    assert [k.name for k in m2.base_kernels] == [k.name for k in m1.kernels]
    assert all(k.weight == 0 for k in m2.base_kernels)  # the baseline: graded, not scored
    assert {v.name: v.weight for v in m2.variants} == COURSE_WEIGHTS
    assert {v.name: v.folder for v in m2.variants} == {name: f"kernels_{name}" for name in COURSE_WEIGHTS}
    assert m2.max_score == 18
    for variant in m2.variants:
        assert variant.partial_credit == "all_or_nothing" and variant.onto == "kernels"
        assert len(variant.must_change) > 1  # "applied everywhere it is applicable": more than one kernel
        for kernel in m2.kernels_of(variant.name):
            base = m1.kernel(kernel.base)
            assert (kernel.signature, kernel.cases, kernel.tolerance) == (base.signature, base.cases, base.tolerance)
            forbids_cublas = any(fnmatch.fnmatchcase(call, p) for call in CUBLAS_CALLS for p in kernel.forbidden_symbols)
            assert forbids_cublas == (variant.name != "req_2"), kernel.name
    assert all(fnmatch.fnmatchcase("cublasSgemm_v2", p) for p in m2.variant("req_2").required_symbols)


def test_reference_and_template_lay_out_the_folders_as_the_overlay_rule_needs(m2: Assignment) -> None:
    m1 = load_assignment("gpt2-m1")
    for pack, m1_folder in ((m2.reference_dir, m1.reference_dir), (m2.template_dir, m1.template_dir)):
        for base in ("kernels", "utils"):
            files = sorted(p.relative_to(pack).as_posix() for p in (pack / base).iterdir())
            assert files == sorted(p.relative_to(m1_folder).as_posix() for p in (m1_folder / base).iterdir())
            assert all((pack / f).read_bytes() == (m1_folder / f).read_bytes() for f in files), pack
    for variant in m2.variants:
        # The reference's folder holds only replacements of base files (and the template's README, which it forks),
        # and changes every file it must.
        replaced = sorted(p.name for p in (m2.reference_dir / variant.folder).iterdir() if p.name != "README.md")
        assert replaced and all((m2.reference_dir / "kernels" / name).is_file() for name in replaced), replaced
        for base_file in variant.must_change:
            ours = m2.reference_dir / variant.overlay_path(base_file)
            assert ours.read_bytes() != (m2.reference_dir / base_file).read_bytes(), ours
        # The template's says what goes there, in a file no build compiles.
        assert [p.name for p in (m2.template_dir / variant.folder).iterdir()] == ["README.md"]


@needs_nvcc
def test_every_variants_kernels_compile_with_nothing_forbidden(m2: Assignment, built: Built) -> None:
    artifacts = built.artifacts
    assert {name: a.status for name, a in artifacts.items()} == {k.name: BuildStatus.BUILT for k in m2.kernels}, \
        {name: a.message for name, a in artifacts.items() if a.status != BuildStatus.BUILT}
    # Every kernel sees the whole overlaid kernels/ folder, so a variant's kernels are built apart from the base's.
    assert artifacts["req_1/matmul"].library != artifacts["matmul"].library
    assert not any((a.forbidden_symbols or a.watched) for a in artifacts.values())


@needs_nvcc
@needs_sass
def test_tensor_cores_show_in_req_1s_matmul_and_attention_and_nowhere_else(m2: Assignment, built: Built) -> None:
    for kernel in m2.kernels:
        library = built.artifacts[kernel.name].evidence or evidence_of(Path(built.artifacts[kernel.name].library))
        assert library.sass_read, (kernel.name, library.note)
        expected = kernel.variant == "req_1" and kernel.base in APPLIED_TO["req_1"]
        assert library.uses_tensor_cores == expected, kernel.name
        if expected:
            # Both of attention's batched matmuls, not just one, and TF32 in each. attention.cuh includes
            # matmul.cuh for the kernel, so matmul_forward's instantiation is in its library too.
            tensor_functions = [f for f in library.functions if f.uses_tensor_cores]
            assert len(tensor_functions) == (1 if kernel.base == "matmul" else 3), [f.short_name for f in tensor_functions]
            assert all(f.tensor_core_precisions == ("TF32",) for f in tensor_functions)


@needs_nvcc
def test_cublas_is_called_in_req_2s_matmul_and_attention_and_nowhere_else(m2: Assignment, built: Built) -> None:
    calls = {name: set(a.evidence.cublas_symbols) if a.evidence else None for name, a in built.artifacts.items()}
    assert {"cublasSgemm_v2"} <= calls["req_2/matmul"] and {"cublasSgemmStridedBatched"} <= calls["req_2/attention"]
    assert not built.artifacts["req_2/matmul"].missing_symbols and not built.artifacts["req_2/attention"].missing_symbols
    for name, symbols in calls.items():
        if name not in ("req_2/matmul", "req_2/attention"):
            assert not symbols, name
    # The base kernels carry no evidence of their own: their undefined symbols are what the forbidden scan reads.
    assert all(not (built.artifacts[k.name].forbidden_symbols or built.artifacts[k.name].watched) for k in m2.base_kernels)


@needs_nvcc
@needs_sass
def test_tiling_and_reduction_show_in_shared_memory_and_shuffles(m2: Assignment, built: Built) -> None:
    def largest_tile(name: str) -> int:
        return max(f.shared_bytes for f in built.artifacts[name].evidence.functions)

    # req_0: two 8 x (128 + 4) float tiles per block; more than milestone 1's two 16 x (64 + 1).
    assert largest_tile("req_0/matmul") == largest_tile("req_0/attention") == 2 * 8 * 132 * 4
    assert largest_tile("req_0/matmul") > max(f.shared_bytes for f in evidence_of(Path(built.artifacts["matmul"].library)).functions)
    registers = max(f.registers for f in built.artifacts["req_0/matmul"].evidence.functions)
    assert registers >= 64, registers  # 8 x 8 accumulators per thread live in registers
    # req_3: each block reduces through shuffles, then shared memory across its warps.
    for name, function in (("req_3/layernorm", "layernorm_forward_kernel"), ("req_3/attention", "softmax_forward_kernel")):
        found = next(f for f in built.artifacts[name].evidence.functions if f.short_name == function)
        assert found.warp_shuffles and found.shared_bytes and found.shared_stores and found.shared_loads, (name, found)


@needs_nvcc
@pytest.mark.skipif(unavailable_reason("cuda") is None, reason="this machine has a GPU: the cases would run")
def test_without_a_gpu_the_grade_compiles_only_and_says_so(m2: Assignment, built: Built, m2_cache: Path) -> None:
    result = run_stage(built, m2, Options(cache_dir=m2_cache))
    assert result.message.startswith("compiled only:") and result.score == 0 and result.max_score == 18
    assert {k.status for k in result.kernels} == {KernelStatus.NOT_RUN}
    by_name = {v.name: v for v in result.variants}
    assert list(by_name) == list(COURSE_WEIGHTS) and not any(v.unchanged_files for v in by_name.values())
    if evidence.find_cuobjdump() is not None:
        assert any(line.startswith("tensor cores: used in matmul") and "attention" in line
                   for line in variant_evidence(by_name["req_1"])), variant_evidence(by_name["req_1"])


@needs_nvcc
def test_a_req_0_matmul_calling_cublas_is_forbidden_there_only(m2: Assignment, built: Built, m2_cache: Path,
                                                               tmp_path: Path) -> None:
    sample = next(v for v in variants(m2) if v.name == "forbidden-req0-matmul-cublas")
    folder = compose(m2, sample, tmp_path / sample.name)
    artifacts = build_stage(folder, m2, Options(cache_dir=m2_cache, kernels=("req_0", "req_2"))).artifacts
    # Watched: the harness sees whether it runs (tests/test_gpu_gpt2_m2.py grades it).
    assert "cublasSgemm_v2()" in artifacts["req_0/matmul"].watched
    # attention includes matmul.cuh for its tiled kernel, so its library links the same call.
    assert "cublasSgemm_v2()" in artifacts["req_0/attention"].watched
    assert not any((a.forbidden_symbols or a.watched) for name, a in artifacts.items() if name not in ("req_0/matmul", "req_0/attention"))


@needs_nvcc
def test_a_req_2_matmul_without_cublas_misses_the_required_symbol(m2: Assignment, built: Built, m2_cache: Path,
                                                                  tmp_path: Path) -> None:
    sample = next(v for v in variants(m2) if v.name == "mutant-req2-matmul-without-cublas")
    folder = compose(m2, sample, tmp_path / sample.name)
    artifacts = build_stage(folder, m2, Options(cache_dir=m2_cache, kernels=("req_2",))).artifacts
    assert artifacts["req_2/matmul"].missing_symbols == ("cublas*",)
    assert not artifacts["req_2/attention"].missing_symbols  # attention still calls cuBLAS
    assert not any((a.forbidden_symbols or a.watched) for a in artifacts.values())


@needs_nvcc
@needs_sass
def test_a_req_1_on_fp16_tensor_cores_loses_req_1_for_its_precision(m2: Assignment, m2_cache: Path,
                                                                     tmp_path: Path) -> None:
    sample = next(v for v in variants(m2) if v.name == "mutant-req1-fp16-wmma")
    folder = compose(m2, sample, tmp_path / sample.name)
    built = build_stage(folder, m2, Options(cache_dir=m2_cache, kernels=("req_1",)))
    # As if every case passed, as they do on a GPU (tests/test_gpu_gpt2_m2.py): the binaries decide the rest.
    passed = [KernelResult(k.name, k.weight, k.weight, KernelStatus.PASSED, "all cases passed", [], variant=k.variant)
              for k in built.kernels]
    kernels, (req_1,) = score_variants(m2, passed, built.variants, built.artifacts)
    assert set(req_1.wrong_precision) == {"matmul", "attention"}
    assert all(f.startswith("FP16 in wmma_matmul_kernel") for found in req_1.wrong_precision.values() for f in found)
    assert req_1.score == 0 and req_1.penalty == pytest.approx(COURSE_WEIGHTS["req_1"])
    assert req_1.message.startswith("req_1 must use TF32 tensor cores: matmul's binary shows FP16 in wmma_matmul_kernel")
    assert all(k.deductions and k.score == 0 for k in kernels)


@needs_nvcc
def test_a_template_folder_holding_only_its_readme_builds_like_the_base(m2: Assignment, m2_cache: Path) -> None:
    # The overlay lays README.md into kernels/ too; only the shim is compiled, so it changes nothing but the cache key.
    built = build_stage(m2.template_dir, m2, Options(cache_dir=m2_cache, kernels=("gelu", "req_0/gelu")))
    base, variant = built.artifacts["gelu"], built.artifacts["req_0/gelu"]
    assert base.status == variant.status == BuildStatus.BUILT, variant.message
    assert "kernels/README.md (from kernels_req_0/README.md)" in variant.files
    assert [v.unchanged for v in built.variants] == [m2.variant("req_0").must_change]


def test_grader_check_recognises_a_milestone_2_repository_as_such() -> None:
    """An m2 repository holds every file of m1 (kernels/): its variant folders decide, not a tie."""
    from grader.cli.check import recognise

    assert recognise(PROJECT_ROOT / "assignments" / "gpt2-m2" / "template").name == "gpt2-m2"
    assert recognise(PROJECT_ROOT / "assignments" / "gpt2-m2" / "reference").name == "gpt2-m2"
    assert recognise(PROJECT_ROOT / "assignments" / "gpt2-m1" / "template").name == "gpt2-m1"
