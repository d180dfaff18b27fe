"""gpt2-m3's additional optimizations without a GPU: the op_7 ... op_18 tables as the course's table has them, the
reference's op_7, op_8, op_9 and op_17 folders built here with nvcc and the evidence their binaries show, and the
samples whose evidence is missing. As if every case passed (they do on a GPU: tests/test_gpu_gpt2_m3_ops.py), the
binaries and the folders decide the rest. Nothing built runs here."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest

from grader import evidence
from grader.options import Options
from grader.pipeline import Built, build_stage
from grader.report.evidence import variant_evidence
from grader.report.render import variant_flags
from grader.results import KernelResult, VariantResult
from grader.samples import compose, variants
from grader.scoring import apply_credit_rules, score_variants
from grader.assignment import Assignment, load_assignment
from grader.status import BuildStatus, KernelStatus, Outcome

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
needs_sass = pytest.mark.skipif(
    evidence.find_cuobjdump() is None or evidence.find_nvdisasm() is None,
    reason="cuobjdump and nvdisasm are not installed (the CUDA toolkit's, or "
           "`pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`)")

# The course's sp26 table (../shared/course/gpt2-milestones.md §1.3): op -> weight.
COURSE_WEIGHTS = {"op_7": 3, "op_8": 2, "op_9": 1, "op_10": 3, "op_11": 3, "op_12": 3, "op_13": 2, "op_14": 3,
                  "op_15": 5, "op_16": 4, "op_17": 4, "op_18": 2}
# What a binary can show of each op (grader.evidence), and what ncu measures of the others' claims.
EVIDENCE = {"op_8": ("constant_memory",), "op_9": ("restrict_loads",), "op_11": ("shared_memory",),
            "op_12": ("shared_memory",), "op_14": ("cutlass",), "op_15": ("ptx_mma",), "op_16": ("cutlass",),
            "op_17": ("async_copies",)}
NCU = {"op_11": ("shared_bank_conflicts",), "op_12": ("shared_bank_conflicts",), "op_18": ("l2_hit_rate",)}
# The reference's additional optimizations: 3 + 2 + 1 + 4 = the course's 10.
REFERENCE_OPS = ("op_7", "op_8", "op_9", "op_17")


@pytest.fixture(scope="module")
def m3() -> Assignment:
    return load_assignment("gpt2-m3")


def test_op_tables_are_the_courses(m3: Assignment) -> None:
    ops = {v.name: v for v in m3.variants if v.name.startswith("op_")}
    assert {name: v.weight for name, v in ops.items()} == COURSE_WEIGHTS
    for name, variant in ops.items():
        assert variant.folder == f"kernels_{name}" and variant.onto == "kernels"
        assert variant.partial_credit == "all_or_nothing" and variant.kernels is None  # all six and the forward check
        assert variant.evidence == EVIDENCE.get(name, ()) and variant.evidence_penalty == 0, name
        assert variant.ncu_metrics == NCU.get(name, ()), name
        assert variant.evidence_in == ("any" if variant.evidence else "each"), name
        assert {k.base for k in m3.kernels_of(name)} == {k.name for k in m3.base_kernels}
    assert ops["op_7"].must_change == () and "kernels_op_7/*.py" in ops["op_7"].required_files
    assert {"kernels_op_7/*.sh", "kernels_op_7/*.slurm"} <= set(ops["op_7"].required_files)
    assert ops["op_13"].required_files == ("kernels_op_13/gpt2.cuh",) and "aligned allocations" in ops["op_13"].source_patterns
    group = m3.additional
    assert group.variants == tuple(COURSE_WEIGHTS) and group.minimum == 10 and group.extra_credit_cap == 10
    assert group.exclusive == (("op_14", "op_15", "op_16"),) and not m3.compile_error_zeroes
    # The maximum: the required optimizations' weights and the group's 10, not its 35.
    required = sum(v.weight for v in m3.variants if v.name not in group.variants)
    assert m3.max_score == required + 10


def test_the_reference_holds_ops_worth_the_courses_minimum(m3: Assignment) -> None:
    held = [v.name for v in m3.variants if v.name in COURSE_WEIGHTS and (m3.reference_dir / v.folder).is_dir()]
    assert held == list(REFERENCE_OPS) and sum(COURSE_WEIGHTS[n] for n in held) == m3.additional.minimum
    for name in held:  # only replacements of base files, besides op_7's script
        for path in (m3.reference_dir / f"kernels_{name}").iterdir():
            assert name == "op_7" or (m3.reference_dir / "kernels" / path.name).is_file(), path


@pytest.fixture(scope="module")
def built(m3: Assignment, cache_dir: Path) -> Built:
    """The reference's op_7, op_8, op_9 and op_17: six kernels each, built once."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    return build_stage(m3.reference_dir, m3, Options(cache_dir=cache_dir, kernels=REFERENCE_OPS))


def all_passed(built: Built) -> list[KernelResult]:
    """Every built kernel with full marks, as its cases give on a GPU."""
    return [KernelResult(k.name, k.weight, k.weight, KernelStatus.PASSED, "all cases passed", [], variant=k.variant)
            for k in built.kernels]


def scored(m3: Assignment, built: Built) -> dict[str, VariantResult]:
    kernels, results = score_variants(m3, all_passed(built), built.variants, built.artifacts)
    return {v.name: v for v in results}


@needs_nvcc
@needs_sass
def test_the_reference_ops_show_their_technique_and_score_the_minimum(m3: Assignment, built: Built) -> None:
    assert {a.status for a in built.artifacts.values()} == {BuildStatus.BUILT}, \
        {n: a.message[:300] for n, a in built.artifacts.items() if a.status != BuildStatus.BUILT}
    results = scored(m3, built)
    for name in REFERENCE_OPS:
        assert not results[name].missing_evidence and results[name].score == COURSE_WEIGHTS[name], results[name]
    shows = {name: {k.base for k in m3.kernels_of(name)
                    if built.artifacts[k.name].evidence and built.artifacts[k.name].evidence.shows(kind)}
             for name, kind in (("op_8", "constant_memory"), ("op_9", "restrict_loads"), ("op_17", "async_copies"))}
    assert shows == {"op_8": {"layernorm"}, "op_9": {"matmul", "residual", "gelu"}, "op_17": {"matmul"}}
    assert "__constant__ memory: read in layernorm (layernorm_forward_kernel<true>: " in \
        " ".join(variant_evidence(results["op_8"]))
    # Two copies per step, issued in the prologue and in the loop: four in the code.
    assert variant_evidence(results["op_17"]) == ["cp.async into shared memory: in matmul (matmul_forward_kernel: 4); "
                                                  "not in encoder, layernorm, attention, residual, gelu"]
    # op_7's folder holds only its script: laid over kernels/, it changes nothing, and it is there.
    assert results["op_7"].required_found == ["kernels_op_7/sweep.py"] and results["op_7"].status is Outcome.PASSED
    _, _, group, _ = apply_credit_rules(m3, all_passed(built), list(results.values()))
    assert group.credited == 10 and group.shortfall == 0 and group.extra_credit == 0


@needs_nvcc
@needs_sass
@pytest.mark.parametrize(("sample", "variant", "kind", "words"), [
    ("mutant-op9-const-without-restrict", "op_9", "restrict_loads", "read-only (non-coherent) global load"),
    ("mutant-op8-constant-never-read", "op_8", "constant_memory", "read of __constant__ memory"),
])
def test_a_mutant_without_its_technique_is_flagged_and_keeps_its_points(m3: Assignment, built: Built, cache_dir: Path,
                                                                       tmp_path: Path, sample: str, variant: str,
                                                                       kind: str, words: str) -> None:
    found = next(v for v in variants(m3) if v.name == sample)
    assert found.kernel.startswith(f"{variant}/") and found.expect is KernelStatus.PASSED
    folder = compose(m3, found, tmp_path / sample)
    mutant = build_stage(folder, m3, Options(cache_dir=cache_dir, kernels=(variant,)))
    result = scored(m3, mutant)[variant]
    bases = [k.base for k in m3.kernels_of(variant)]
    assert result.missing_evidence == {", ".join(bases): [kind]}
    assert variant_flags(result)[-1] == f"{', '.join(bases)}: none of their binaries shows any {words}"
    assert result.score == COURSE_WEIGHTS[variant] and result.penalty == 0  # evidence_penalty 0: reported only


@needs_nvcc
@needs_sass
def test_constant_memory_declared_but_never_read_is_in_the_module_not_in_the_sass(m3: Assignment, cache_dir: Path,
                                                                                 tmp_path: Path) -> None:
    """Why the SASS is the signal: the module of a layernorm that copies into __constant__ arrays and never reads
    them still has a constant bank 3 section (.nv.constant3), the one `cuobjdump -elf` would show."""
    found = next(v for v in variants(m3) if v.name == "mutant-op8-constant-never-read")
    folder = compose(m3, found, tmp_path / found.name)
    library = build_stage(folder, m3, Options(cache_dir=cache_dir, kernels=("op_8/layernorm",))).artifacts[
        "op_8/layernorm"].library
    sections = subprocess.run([str(evidence.find_cuobjdump()), "-elf", str(library)], capture_output=True, text=True,
                              env=evidence._tool_environment()).stdout
    assert ".nv.constant3" in sections
    assert evidence.evidence_of(Path(library)).shows("constant_memory") is False


@needs_nvcc
def test_op_7_without_a_script_scores_0_with_the_patterns_named(m3: Assignment, cache_dir: Path,
                                                                tmp_path: Path) -> None:
    folder = compose(m3, None, tmp_path / "team")
    (folder / "kernels_op_7" / "sweep.py").unlink()
    (folder / "kernels_op_7" / "README.md").write_text("We swept the block sizes by hand: see our report.\n")
    team = build_stage(folder, m3, Options(cache_dir=cache_dir, kernels=("op_7",)))
    assert {a.status for a in team.artifacts.values()} == {BuildStatus.BUILT}  # the README changes no build
    op_7 = scored(m3, team)["op_7"]
    assert op_7.score == 0 and op_7.status is Outcome.FAILED and op_7.required_found == []
    assert op_7.message.startswith("op_7: kernels_op_7/ holds no file matching kernels_op_7/*.py, kernels_op_7/*.sh, ")
    assert op_7.message.endswith("which op_7 must hold, so op_7 scores 0/3")
    assert "files: none matching kernels_op_7/*.py" in variant_evidence(op_7)[0]
    # A shell script is a script too.
    (folder / "kernels_op_7" / "sweep_blocks.sh").write_text("#!/bin/bash\nfor b in 64 128 256; do ./run $b; done\n")
    again = build_stage(folder, m3, Options(cache_dir=cache_dir, kernels=("op_7",)))
    assert scored(m3, again)["op_7"].score == 3


@needs_nvcc
def test_op_13s_gpt2_cuh_is_there_and_its_alignment_is_reported(m3: Assignment, cache_dir: Path,
                                                                tmp_path: Path) -> None:
    folder = compose(m3, None, tmp_path / "team")
    (folder / "kernels_op_13").mkdir()
    (folder / "kernels_op_13" / "gpt2.cuh").write_text(
        '#include "kernels/matmul.cuh"\n'
        "// op_13: every activation starts on a 256-byte boundary.\n"
        "static size_t aligned_bytes(size_t bytes) { return (bytes + 255) & ~(size_t)255; }\n")
    team = build_stage(folder, m3, Options(cache_dir=cache_dir, kernels=("op_13/gelu", "op_13/matmul")))
    assert {a.status for a in team.artifacts.values()} == {BuildStatus.BUILT}  # laid into kernels/, never compiled
    op_13 = scored(m3, team)["op_13"]
    assert op_13.required_found == ["kernels_op_13/gpt2.cuh"] and op_13.score == op_13.max_score
    assert op_13.source_patterns == {"aligned allocations": ["kernels_op_13/gpt2.cuh"]}
    assert "aligned allocations: in kernels_op_13/gpt2.cuh (the text only)" in variant_evidence(op_13)
    (folder / "kernels_op_13" / "gpt2.cuh").write_text('#include "kernels/matmul.cuh"\n')
    plain = scored(m3, build_stage(folder, m3, Options(cache_dir=cache_dir, kernels=("op_13/gelu",))))["op_13"]
    assert plain.source_patterns == {"aligned allocations": []} and plain.score == plain.max_score
    assert "aligned allocations: not found in kernels_op_13/ (the text only)" in variant_evidence(plain)


@needs_nvcc
@needs_sass
def test_raw_mma_sync_shows_ptx_mma_and_wmma_does_not(m3: Assignment, cache_dir: Path, tmp_path: Path) -> None:
    """op_15's evidence: the same TF32 HMMA in both binaries' SASS; only the raw-PTX matmul's PTX has mma.sync."""
    shown = {}
    for name in ("course-op15-mma-sync-tf32", "mutant-op15-wmma"):
        sample = next(v for v in variants(m3) if v.name == name)
        folder = compose(m3, sample, tmp_path / name)
        team = build_stage(folder, m3, Options(cache_dir=cache_dir, kernels=("op_15/matmul",)))
        library = team.artifacts["op_15/matmul"].evidence
        assert team.artifacts["op_15/matmul"].status == BuildStatus.BUILT and library.ptx_read
        assert {p for f in library.functions for p in f.tensor_core_precisions} == {"TF32"}
        shown[name] = (library.shows("ptx_mma"), scored(m3, team)["op_15"])
    raw, raw_result = shown["course-op15-mma-sync-tf32"]
    wmma, wmma_result = shown["mutant-op15-wmma"]
    assert raw is True and not raw_result.missing_evidence
    # Static counts: the k loop is unrolled, so its one mma.sync is in the PTX more than once.
    assert variant_evidence(raw_result)[0] == "tensor cores: used in matmul (matmul_forward_kernel: TF32)"
    assert variant_evidence(raw_result)[1].startswith("mma.sync (raw PTX or CuTe): used in matmul (matmul_forward_kernel: ")
    assert wmma is False and wmma_result.missing_evidence == {"matmul": ["ptx_mma"]}
    assert "mma.sync (raw PTX or CuTe): tensor cores through wmma only in matmul" in variant_evidence(wmma_result)
    assert wmma_result.score == wmma_result.max_score  # reported, not scored
