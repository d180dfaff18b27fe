"""Optimization variants (milestone 2's `kernels_req_x/`): a pack based on flash-attention-cpu with two variant
folders, graded with real g++ builds and real harnesses; and the SASS evidence of a CUDA variant, built with nvcc."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from grader import evidence
from grader.cases import Seed, prepare_inputs
from grader.errors import SpecError
from grader.options import Options
from grader.pipeline import build_stage, grade
from grader.report import gradebook, html, markdown, terminal
from grader.report.evidence import variant_evidence
from grader.results import KernelResult, Result
from grader.scoring import score_variants
from grader.assignment import ASSIGNMENTS_DIR, Assignment, load_assignment
from grader.status import KernelStatus, Outcome
from grader.store import Store

from conftest import copy_assignment
from test_evidence import NAIVE_MATMUL_KERNEL, WMMA_TF32_KERNEL

FLASH = ASSIGNMENTS_DIR / "flash-attention-cpu"
SAMPLES = FLASH / "samples"

# opt_a optimizes standard attention, all or nothing, memcpy forbidden; opt_b stages flash attention's query
# tiles with memcpy (required there), each kernel its own share, and asks for shared-memory evidence.
SPEC = """
[assignment]
name = "flash-variants"
based_on = "flash-attention-cpu"
title = "FlashAttention with two optimizations"
source_dirs = ["src"]

[[variants]]
name = "opt_a"
title = "Standard attention accumulated in double"
folder = "src_opt_a"
weight = 6
must_change = ["src/standard_attention.cpp"]
forbidden_symbols = ["memcpy"]

[[variants]]
name = "opt_b"
title = "Query tiles staged with memcpy"
folder = "src_opt_b"
weight = 3
partial_credit = "fraction"
must_change = ["src/flash_attention.cpp"]
required_symbols = ["memcpy"]
evidence = ["shared_memory"]
tolerances = { flash_attention = { atol = 2e-4, rtol = 2e-3 } }
"""

REFERENCE_FLASH = (FLASH / "reference" / "src" / "flash_attention.cpp").read_text()
REFERENCE_STANDARD = (FLASH / "reference" / "src" / "standard_attention.cpp").read_text()

# course-staged-flash: the query block copied into a tile first (a new header of the variant folder does it).
STAGE_HEADER = """#pragma once
#include <cstring>
// Copies `rows` rows of `d` floats into the tile: the block is then read from one small buffer.
inline const float* stage_rows(float* tile, const float* from, int rows, int d) {
    std::memcpy(tile, from, sizeof(float) * rows * d);
    return tile;
}
"""
STAGED_FLASH = REFERENCE_FLASH.replace('#include "flash_attention.h"', '#include "flash_attention.h"\n#include "stage.h"') \
    .replace("    std::vector<float> pv(d);", "    std::vector<float> pv(d);\n    std::vector<float> q_tile(Br * d);") \
    .replace("const float* Q_i = Q + q_start * d;", "const float* Q_i = stage_rows(q_tile.data(), Q + q_start * d, rows, d);")
# course-memcpy-standard: standard attention that copies each query row first (memcpy, which opt_a forbids).
MEMCPY_STANDARD = REFERENCE_STANDARD.replace("#include <vector>", "#include <vector>\n#include <cstring>") \
    .replace("    for (int i = 0; i < N; ++i) {\n        for (int j = 0; j < N; ++j) {\n            float s = 0.0f;\n"
             "            for (int k = 0; k < d; ++k) s += Q[i * d + k] * K[j * d + k];",
             "    std::vector<float> q(d);\n    for (int i = 0; i < N; ++i) {\n"
             "        std::memcpy(q.data(), Q + i * d, sizeof(float) * d);\n        for (int j = 0; j < N; ++j) {\n"
             "            float s = 0.0f;\n            for (int k = 0; k < d; ++k) s += q[k] * K[j * d + k];")
DOUBLE_STANDARD = (SAMPLES / "alt-standard-double-accumulate" / "src" / "standard_attention.cpp").read_text()
ROW_OUTER_FLASH = (SAMPLES / "alt-flash-row-outer" / "src" / "flash_attention.cpp").read_text()
BROKEN_FLASH = (SAMPLES / "mutant-flash-no-rescale" / "src" / "flash_attention.cpp").read_text()
BROKEN_STANDARD = (SAMPLES / "mutant-standard-missing-normalisation" / "src" / "standard_attention.cpp").read_text()


def test_the_test_sources_are_what_they_claim() -> None:
    assert "stage_rows(q_tile.data()" in STAGED_FLASH and "#include \"stage.h\"" in STAGED_FLASH
    assert "std::memcpy(q.data()" in MEMCPY_STANDARD and "memcpy" not in ROW_OUTER_FLASH


def make_pack(root: Path, spec: str = SPEC, name: str = "flash-variants") -> Path:
    """A variant-bearing pack beside a copy of flash-attention-cpu, with its reference (the base's, and both folders)."""
    if not (root / "assignments" / "flash-attention-cpu").is_dir():
        copy_assignment("flash-attention-cpu", root)
    pack = root / "assignments" / name
    pack.mkdir(parents=True)
    (pack / "assignment.toml").write_text(spec.replace('name = "flash-variants"', f'name = "{name}"', 1))
    reference = pack / "reference"
    shutil.copytree(load_assignment(root / "assignments" / "flash-attention-cpu").reference_dir, reference)
    write(reference, {"src_opt_a/standard_attention.cpp": DOUBLE_STANDARD, "src_opt_b/flash_attention.cpp": STAGED_FLASH,
                      "src_opt_b/stage.h": STAGE_HEADER})
    (pack / "template").mkdir(parents=True)
    return pack


def write(folder: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(text)
    return folder


@pytest.fixture(scope="module")
def pack_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("packs")
    make_pack(root)
    return root


@pytest.fixture(scope="module")
def variants(pack_root: Path) -> Assignment:
    return load_assignment(pack_root / "assignments" / "flash-variants")  # the pack's own time limits: no loops here


def submission(tmp_path: Path, variants: Assignment, files: dict[str, str], without: tuple[str, ...] = ()) -> Path:
    """The reference's base folder with the given variant files (a student's repository)."""
    folder = tmp_path / "submission"
    shutil.copytree(variants.reference_dir / "src", folder / "src")
    write(folder, files)
    for relative in without:
        (folder / relative).unlink()
    return folder


GOOD = {"src_opt_a/standard_attention.cpp": DOUBLE_STANDARD, "src_opt_b/flash_attention.cpp": STAGED_FLASH,
        "src_opt_b/stage.h": STAGE_HEADER}


def graded(folder: Path, assignment: Assignment, cache_dir: Path, **options: object) -> Result:
    return grade(folder, assignment, Options(cache_dir=cache_dir, **options))  # type: ignore[arg-type]


def by_name(result: Result) -> dict:
    return {k.name: k for k in result.kernels} | {v.name: v for v in result.variants}


# ---------------------------------------------------------------- the spec: inheritance, expansion, weights

def test_variant_kernels_are_the_base_kernels_weighted_by_their_share(variants: Assignment) -> None:
    assert [k.name for k in variants.kernels] == [
        "standard_attention", "flash_attention", "opt_a/standard_attention", "opt_a/flash_attention",
        "opt_b/standard_attention", "opt_b/flash_attention"]
    weights = {k.name: k.weight for k in variants.kernels}
    # flash-attention-cpu's weights are 1 and 2: each variant splits its weight 1:2.
    assert weights["opt_a/standard_attention"] == 2 and weights["opt_a/flash_attention"] == 4
    assert weights["opt_b/standard_attention"] == 1 and weights["opt_b/flash_attention"] == 2
    assert variants.max_score == 3 + 6 + 3
    flash, opt_a, opt_b = (variants.kernel(n) for n in ("flash_attention", "opt_a/flash_attention",
                                                         "opt_b/flash_attention"))
    assert opt_a.base == "flash_attention" and opt_a.variant == "opt_a" and flash.base == flash.name
    assert opt_a.tolerance == flash.tolerance and (opt_b.tolerance.atol, opt_b.tolerance.rtol) == (2e-4, 2e-3)
    assert opt_a.forbidden_symbols == ("memcpy",) and flash.forbidden_symbols == () == opt_b.forbidden_symbols
    assert opt_a.cases == flash.cases
    # Inherited from the pack it is based on: the target, flags, limits and its modules.
    base = load_assignment(variants.root.parent / "flash-attention-cpu")
    assert (variants.target, variants.compile_flags, variants.memory_limit_mb) == (
        base.target, base.compile_flags, base.memory_limit_mb)
    assert variants.inputs_file == base.root / "inputs.py" and variants.based_on == "flash-attention-cpu"


def test_base_weight_zero_grades_the_base_without_scoring_it(pack_root: Path) -> None:
    spec = SPEC.replace('source_dirs = ["src"]', 'source_dirs = ["src"]\nbase_weight = 0')
    assignment = load_assignment(make_pack(pack_root, spec, "flash-variants-baseline"))
    assert [k.weight for k in assignment.base_kernels] == [0, 0]
    assert assignment.max_score == 9  # the variants only; their shares still follow the base weights
    assert assignment.kernel("opt_a/flash_attention").weight == 4


def test_a_variant_kernel_gets_its_base_kernels_inputs(variants: Assignment, cache_dir: Path) -> None:
    base, copy = variants.kernel("flash_attention"), variants.kernel("opt_b/flash_attention")
    seed = Seed(variants.public_seed)
    assert prepare_inputs(variants, base, base.cases[1], seed, cache_dir) == \
        prepare_inputs(variants, copy, copy.cases[1], seed, cache_dir)


def test_kernels_are_selected_by_name_or_by_variant(variants: Assignment) -> None:
    assert [k.name for k in variants.select(("opt_a",))] == ["opt_a/standard_attention", "opt_a/flash_attention"]
    assert [k.name for k in variants.select(("opt_b/flash_attention", "standard_attention"))] == [
        "standard_attention", "opt_b/flash_attention"]
    with pytest.raises(SpecError, match=r"no kernel named 'opt_c'.*variants: opt_a, opt_b"):
        variants.select(("opt_c",))


@pytest.mark.parametrize(("old", "new", "expected"), [
    ('evidence = ["shared_memory"]', 'evidence = ["tensor_core"]',
     r"assignment\.toml variant 'opt_b': key 'evidence': unknown evidence \['tensor_core'\]; expected some of "
     r"tensor_cores, shared_memory, cublas"),
    ('folder = "src_opt_a"', 'folder = "/tmp/src_opt_a"',
     r"variant 'opt_a': key 'folder' must be a folder inside the submission .*found '/tmp/src_opt_a'"),
    ('folder = "src_opt_a"', 'folder = "../src_opt_a"',
     r"variant 'opt_a': key 'folder' must be a folder inside the submission .*found '../src_opt_a'"),
    ('name = "opt_b"', 'name = "opt_a"', r"variant 'opt_a' key 'name': another variant has this name"),
    ('based_on = "flash-attention-cpu"', 'based_on = "flash-attention-gpu"',
     r"assignment\.toml \[assignment\]: key 'based_on': no assignment named 'flash-attention-gpu'"),
    ("tolerances = { flash_attention", "tolerances = { flash_attn",
     r"variant 'opt_b': key 'tolerances' names kernel 'flash_attn', which the assignment does not have "
     r"\(have standard_attention, flash_attention\)"),
    ('must_change = ["src/flash_attention.cpp"]', 'must_change = ["kernels/flash_attention.cpp"]',
     r"variant 'opt_b': key 'must_change' names 'kernels/flash_attention.cpp', which is not a file under 'src/'"),
    ('partial_credit = "fraction"', 'partial_credit = "most"',
     r"variant 'opt_b': key 'partial_credit' must be one of fraction, all_or_nothing, found 'most'"),
    ('weight = 3', 'weight = 3\nbonus = 1', r"variant 'opt_b': unknown key\(s\) \['bonus'\]"),
    ('name = "opt_b"', 'name = "flash_attention"', r"key 'name': a kernel has this name"),
    ('weight = 3', 'weight = 3\ntensor_core_precisions = ["TF16"]',
     r"variant 'opt_b': key 'tensor_core_precisions': unknown precision \['TF16'\]; expected some of TF32, FP16"),
    ('weight = 3', 'weight = 3\nprecision_penalty = 2.0',
     r"variant 'opt_b': key 'precision_penalty' is a share of the variant's weight between 0 and 1, found 2.0"),
], ids=["unknown-evidence", "absolute-folder", "dotdot-folder", "duplicate-name", "based-on-missing-pack",
        "tolerance-for-unknown-kernel", "must-change-outside-onto", "bad-partial-credit", "unknown-key",
        "name-of-a-kernel", "unknown-precision", "precision-penalty-above-1"])
def test_broken_variant_specs_name_file_and_key(tmp_path: Path, old: str, new: str, expected: str) -> None:
    assert old in SPEC, f"test setup: {old!r} not in the spec"
    pack = make_pack(tmp_path, SPEC.replace(old, new, 1))
    with pytest.raises(SpecError) as error:
        load_assignment(pack)
    assert str(error.value).startswith(str(pack / "assignment.toml")), error.value
    assert re.search(expected, str(error.value)), error.value


def test_an_inherited_key_that_is_wrong_names_the_pack_that_gave_it(tmp_path: Path) -> None:
    pack = make_pack(tmp_path)
    base_spec = tmp_path / "assignments" / "flash-attention-cpu" / "assignment.toml"
    base_spec.write_text(base_spec.read_text().replace("time_limit_s = 20.0", 'time_limit_s = "long"'))
    with pytest.raises(SpecError, match=re.escape(f"{base_spec.resolve()} [assignment]: key 'time_limit_s' must be "
                                                  "float, found 'long'")):
        load_assignment(pack)


def test_a_variant_without_onto_is_laid_over_the_source_folder_and_needs_one(tmp_path: Path) -> None:
    pack = make_pack(tmp_path, SPEC.replace('source_dirs = ["src"]\n', ""))
    assert {v.onto for v in load_assignment(pack).variants} == {"src"}  # the base pack's folder
    pack = make_pack(tmp_path / "none", SPEC.replace('source_dirs = ["src"]\n', "source_dirs = []\n"))
    with pytest.raises(SpecError, match="variant 'opt_a': key 'onto' is needed: the assignment has no source_dirs"):
        load_assignment(pack)


# ---------------------------------------------------------------- grading: overlays, credit, flags

def test_reference_with_both_folders_scores_full_marks_and_shares_unchanged_builds(
        variants: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    result = graded(submission(tmp_path, variants, GOOD), variants, cache_dir)
    found = by_name(result)
    assert result.score == result.max_score == 12, [(k.name, k.message) for k in result.kernels]
    assert [(v.name, v.status, v.score, v.max_score) for v in result.variants] == [
        ("opt_a", Outcome.PASSED, 6, 6), ("opt_b", Outcome.PASSED, 3, 3)]
    # A same-name replacement, and a new file that joins the base folder.
    assert "src/standard_attention.cpp (from src_opt_a/standard_attention.cpp)" in \
        found["opt_a/standard_attention"].built_from
    assert "src/stage.h (from src_opt_b/stage.h)" in found["opt_b/flash_attention"].built_from
    assert "src/stage.h (from src_opt_b/stage.h)" not in found["flash_attention"].built_from
    # The whole source folder is in every build (the course compiles it as one program): the overlay included.
    assert "src/standard_attention.cpp (from src_opt_a/standard_attention.cpp)" in \
        found["opt_a/flash_attention"].built_from and found["opt_a/flash_attention"].variant == "opt_a"
    assert not found["opt_b"].missing_symbols and not found["opt_b"].changes_nothing
    assert found["opt_b"].message == "opt_b: all 2 kernels passed"


def test_missing_folder_is_not_submitted_and_costs_only_its_variant(variants: Assignment, tmp_path: Path,
                                                                     cache_dir: Path) -> None:
    files = {k: v for k, v in GOOD.items() if not k.startswith("src_opt_a/")}
    found = by_name(graded(submission(tmp_path, variants, files), variants, cache_dir))
    assert found["opt_a"].status is Outcome.NOT_SUBMITTED and found["opt_a"].score == 0
    assert found["opt_a"].message == "src_opt_a/ is not in the submission, so opt_a scores 0/6"
    for name in ("opt_a/standard_attention", "opt_a/flash_attention"):
        assert found[name].cases and all(not c.status.ran for c in found[name].cases)  # not built, so never run
        # Not a compile error: there was nothing to compile.
        assert found[name].status is KernelStatus.NOT_SUBMITTED
        assert found[name].message == "src_opt_a/ is not in the submission"
    assert found["opt_b"].score == 3 and found["standard_attention"].score == 1 and found["flash_attention"].score == 2


def test_optimizing_one_kernel_and_breaking_the_other_loses_that_variant_only(variants: Assignment, tmp_path: Path,
                                                                               cache_dir: Path) -> None:
    files = {**GOOD, "src_opt_a/flash_attention.cpp": BROKEN_FLASH}
    result = graded(submission(tmp_path, variants, files), variants, cache_dir)
    found = by_name(result)
    broken = found["opt_a/flash_attention"]
    failed = len(broken.cases) - broken.cases_passed
    assert broken.status is KernelStatus.FAILED and failed > 0
    assert found["opt_a"].message == (f"opt_a is all or nothing: flash_attention failed {failed} of "
                                      f"{len(broken.cases)} cases, so opt_a scores 0/6")
    optimized = found["opt_a/standard_attention"]
    assert optimized.status is KernelStatus.PASSED and optimized.score == 0
    assert optimized.deductions[-1].reason.startswith("opt_a is all or nothing") and optimized.deductions[-1].points == 2
    assert found["opt_a"].score == 0 and found["opt_a"].status is Outcome.FAILED
    assert found["opt_b"].score == 3 and result.score == 3 + 3


def test_fraction_credit_keeps_the_kernels_that_pass(variants: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    files = {**GOOD, "src_opt_b/standard_attention.cpp": BROKEN_STANDARD}
    found = by_name(graded(submission(tmp_path, variants, files), variants, cache_dir))
    standard, flash = found["opt_b/standard_attention"], found["opt_b/flash_attention"]
    assert standard.score < standard.max_score and flash.score == flash.max_score == 2
    assert found["opt_b"].score == pytest.approx(standard.score + 2)
    assert found["opt_b"].status is Outcome.FAILED
    assert found["opt_b"].message.startswith("opt_b: 1 of 2 kernels have full marks: standard_attention failed")
    assert found["opt_a"].score == 6


def test_a_folder_that_changes_none_of_the_files_it_must_is_flagged(variants: Assignment, tmp_path: Path,
                                                                    cache_dir: Path) -> None:
    files = {**GOOD, "src_opt_a/standard_attention.cpp": REFERENCE_STANDARD}
    result = graded(submission(tmp_path, variants, files), variants, cache_dir)
    opt_a = by_name(result)["opt_a"]
    assert opt_a.changes_nothing and opt_a.unchanged_files == ["src/standard_attention.cpp"]
    assert opt_a.score == 6  # flagged for the instructor's check, not penalised
    # Built from the base's very files: the base's builds, compiled once.
    assert all(by_name(result)[f"opt_a/{k}"].build_cached for k in ("standard_attention", "flash_attention"))
    assert not by_name(result)["opt_b"].changes_nothing
    assert "src_opt_a/ changes none of the files this optimization must change (src/standard_attention.cpp)" in \
        markdown.render(result)


def test_a_symbol_one_variant_forbids_costs_that_variant_only(variants: Assignment, tmp_path: Path,
                                                              cache_dir: Path) -> None:
    # memcpy in opt_a's standard attention (forbidden there) and in opt_b's flash attention (required there).
    files = {**GOOD, "src_opt_a/standard_attention.cpp": MEMCPY_STANDARD}
    result = graded(submission(tmp_path, variants, files), variants, cache_dir)
    found = by_name(result)
    assert found["opt_a/standard_attention"].status is KernelStatus.FORBIDDEN
    # Seen called while it ran (the library's watch), as a function: "memcpy()".
    assert found["opt_a/standard_attention"].forbidden_symbols == ["memcpy()"]
    assert found["opt_a"].score == 0
    assert found["opt_a"].message == "opt_a is all or nothing: standard_attention calls memcpy(), which opt_a forbids, " \
                                     "so opt_a scores 0/6"
    assert found["opt_b/flash_attention"].status is KernelStatus.PASSED and found["opt_b"].score == 3
    assert result.score == 3 + 3


def test_a_missing_required_symbol_is_flagged_and_costs_the_penalty_share(pack_root: Path, tmp_path: Path,
                                                                          cache_dir: Path) -> None:
    penalised = load_assignment(make_pack(
        pack_root, SPEC.replace('evidence = ["shared_memory"]', 'evidence = ["shared_memory"]\nevidence_penalty = 0.5'),
        "flash-variants-penalty"))
    files = {**GOOD, "src_opt_b/flash_attention.cpp": ROW_OUTER_FLASH}
    found = by_name(graded(submission(tmp_path, penalised, files), penalised, cache_dir))
    opt_b = found["opt_b"]
    assert opt_b.missing_symbols == {"flash_attention": ["memcpy"]}
    assert opt_b.penalty == 1.5 and opt_b.score == 1.5
    assert "opt_b must show its technique: flash_attention calls nothing matching memcpy (−1.5)" in opt_b.message
    # A C++ library has no device code: no evidence, which is said and costs nothing.
    assert set(opt_b.evidence_unread) == {"flash_attention"} and not opt_b.missing_evidence
    said = variant_evidence(opt_b)
    assert said and said[0].startswith("shared memory: no evidence for standard_attention, flash_attention (")
    assert found["opt_b/flash_attention"].deductions[-1].points == 1.0  # the penalty in proportion to the scores
    assert found["opt_a"].score == 6 and found["opt_a"].missing_symbols == {}


def test_a_variant_selected_alone_is_graded_alone(variants: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    result = graded(submission(tmp_path, variants, GOOD), variants, cache_dir, kernels=("opt_b",))
    assert [k.name for k in result.kernels] == ["opt_b/standard_attention", "opt_b/flash_attention"]
    assert [v.name for v in result.variants] == ["opt_b"] and result.score == result.max_score == 3


# ---------------------------------------------------------------- the result and its reports

@pytest.fixture(scope="module")
def broken_result(variants: Assignment, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Result:
    folder = submission(tmp_path_factory.mktemp("broken"), variants,
                        {k: v for k, v in {**GOOD, "src_opt_b/flash_attention.cpp": BROKEN_FLASH}.items()
                         if not k.startswith("src_opt_a/")})
    return graded(folder, variants, cache_dir)


def test_variants_round_trip_through_json_and_the_store(broken_result: Result, tmp_path: Path) -> None:
    assert Result.from_json(broken_result.to_json()) == broken_result
    store = Store(tmp_path / "results.sqlite")
    store.save(dataclasses.replace(broken_result, student="ada"))
    loaded = store.latest("flash-variants")[0]
    assert loaded.variants == broken_result.variants and loaded.variants[0].status is Outcome.NOT_SUBMITTED
    # A result stored before variants existed loads with none.
    old = json.loads(broken_result.to_json())
    del old["variants"]
    for kernel in old["kernels"]:
        del kernel["variant"]
    assert Result.from_dict(old).variants == []


def test_a_variant_stored_with_its_evidence_in_sentences_still_shows_them(broken_result: Result) -> None:
    """A result keeps what the binaries show (`libraries`) and the reports say it; one stored before that kept
    the sentences themselves, which the reports show as they were."""
    opt_b = next(v for v in broken_result.variants if v.name == "opt_b")
    said = variant_evidence(opt_b)
    assert said and opt_b.evidence == [] and opt_b.evidence_kinds == ["shared_memory"]
    assert list(opt_b.libraries) == ["standard_attention", "flash_attention"]
    data = broken_result.to_dict()
    stored = next(v for v in data["variants"] if v["name"] == "opt_b")
    del stored["libraries"], stored["evidence_kinds"]
    stored["evidence"] = said
    old = Result.from_dict(data)
    assert variant_evidence(next(v for v in old.variants if v.name == "opt_b")) == said
    assert markdown.render(old) == markdown.render(broken_result) and html.render(old) == html.render(broken_result)


def test_reports_group_kernels_by_variant_base_first(broken_result: Result) -> None:
    text = markdown.render(broken_result)
    base, opt_a, opt_b = (text.index(heading) for heading in (
        "| `standard_attention` |", "#### opt_a: Standard attention accumulated in double",
        "#### opt_b: Query tiles staged with memcpy"))
    assert base < opt_a < opt_b
    assert "src_opt_a/ is not in the submission, so opt_a scores 0/6" in text
    assert text.index("| `opt_b/flash_attention` |") > opt_b
    page = html.render(broken_result)
    assert page.index("opt_a: Standard attention") < page.index("opt_b: Query tiles") < page.index("Where it was graded")
    console = Console(record=True, width=200)
    terminal.render(broken_result, console)
    printed = console.export_text()
    assert "opt_b: 1 of 2 kernels have full marks: flash_attention failed" in printed
    assert "flag: flash_attention: calls nothing matching memcpy, which opt_b requires" in printed
    assert printed.index("opt_a") < printed.index("opt_b/standard_attention")


def test_a_missing_variant_folder_fails_in_junit_and_the_submission_counts_as_failed(broken_result: Result) -> None:
    from xml.etree import ElementTree

    from grader.report import junit

    assert broken_result.outcome is Outcome.FAILED  # not "compile_error": nothing was compiled
    suites = {s.get("name"): s for s in ElementTree.fromstring(junit.render(broken_result)).iter("testsuite")}
    missing = next(s for name, s in suites.items() if name.endswith("opt_a/flash_attention"))
    assert int(missing.get("failures")) == len(list(missing.iter("testcase"))) and missing.get("skipped") == "0"


def test_the_gradebook_has_a_column_per_variant_beside_its_kernels(broken_result: Result) -> None:
    header, row = (line.split(",") for line in gradebook.render([broken_result]).splitlines())
    values = dict(zip(header, row))
    assert header.index("opt_b/flash_attention") < header.index("opt_a") < header.index("opt_b") < header.index("late_days")
    assert values["opt_a"] == "0" and float(values["opt_b"]) == pytest.approx(
        sum(float(values[f"opt_b/{k}"]) for k in ("standard_attention", "flash_attention")))


def test_gradescope_names_a_missing_variant_folder_and_no_hidden_figures(broken_result: Result) -> None:
    from grader.report import gradescope

    summary = gradescope._summary(broken_result)
    assert "variant `opt_a`" in summary and "`src_opt_a/` is not in the submission" in summary
    line = next(line for line in summary.splitlines() if "variant `opt_b`" in line)
    # opt_b failed cases, but its line says nothing of them: they include hidden ones.
    assert "failed" not in line and "cases" not in line, line


# ---------------------------------------------------------------- SASS evidence, from libraries nvcc builds here

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")

CUDA_SPEC = """
[assignment]
name = "{name}"
title = "A matmul on tensor cores"
version = "1"
target = "cuda"
public_seed = 1
compile_flags = ["-O2", "-std=c++17"]
source_dirs = ["kernels"]

[[kernels]]
name = "matmul"
weight = 2
header = "kernels/matmul.cuh"
sources = ["kernels/matmul.cuh"]
signature = "void matmul_forward(float* out, const float* inp, const float* weight, int M, int C, int OC)"
tolerance = {{ atol = 1e-2, rtol = 1e-2 }}
buffers.out = {{ role = "output", shape = "M, OC" }}
buffers.inp = {{ role = "input", shape = "M, C" }}
buffers.weight = {{ role = "input", shape = "OC, C" }}
cases = [{{ name = "square", public = true, M = 16, C = 16, OC = 16 }}]

[[variants]]
name = "tc"
folder = "kernels_tc"
weight = 4
must_change = ["kernels/matmul.cuh"]
evidence = ["tensor_cores"]
evidence_penalty = 0.5
"""

NAIVE_MATMUL = """#pragma once
// course-naive-matmul: one thread per output, the CPU reference's loop.
""" + NAIVE_MATMUL_KERNEL + """void matmul_forward(float* out, const float* inp, const float* weight, int M, int C, int OC) {
    matmul_naive_kernel<<<dim3((OC + 15) / 16, (M + 15) / 16), dim3(16, 16)>>>(out, inp, weight, M, C, OC);
}
"""

WMMA_MATMUL = """#pragma once
#include <mma.h>
using namespace nvcuda;
""" + WMMA_TF32_KERNEL + """void matmul_forward(float* out, const float* inp, const float* weight, int M, int C, int OC) {
    matmul_tf32_kernel<<<dim3(OC / 16, M / 16), 32>>>(out, inp, weight, M, C, OC);
}
"""


def cuda_pack(root: Path, name: str = "tc-matmul") -> Assignment:
    pack = root / "assignments" / name
    pack.mkdir(parents=True)
    (pack / "assignment.toml").write_text(CUDA_SPEC.format(name=name))
    (pack / "inputs.py").write_text("def make_inputs(kernel, params, rng):\n"
                                    "    return {n: rng.standard_normal((params['M'] if n == 'inp' else params['OC'], "
                                    "params['C'])).astype('float32') for n in ('inp', 'weight')}\n")
    (pack / "numpy_reference.py").write_text("def matmul(inp, weight, **sizes):\n    return {'out': inp @ weight.T}\n")
    write(pack / "reference", {"kernels/matmul.cuh": NAIVE_MATMUL, "kernels_tc/matmul.cuh": WMMA_MATMUL})
    return load_assignment(pack)


def built_evidence(assignment: Assignment, files: dict[str, str], root: Path, cache_dir: Path) -> Result:
    """Graded where there is no GPU: compiled only, the evidence read from the libraries."""
    folder = write(root, {"kernels/matmul.cuh": NAIVE_MATMUL, **files})
    result = grade(folder, assignment, Options(cache_dir=cache_dir, kernels=("tc",), cuda_arch="sm_90"))
    return result


@needs_nvcc
@pytest.mark.skipif(evidence.find_cuobjdump() is None or evidence.find_nvdisasm() is None,
                    reason="cuobjdump and nvdisasm are not installed")
def test_tensor_core_evidence_from_the_variants_library(tmp_path: Path) -> None:
    assignment = cuda_pack(tmp_path)
    wmma = built_evidence(assignment, {"kernels_tc/matmul.cuh": WMMA_MATMUL}, tmp_path / "wmma", tmp_path / "cache")
    variant = wmma.variants[0]
    assert variant_evidence(variant) == ["tensor cores: used in matmul (matmul_tf32_kernel: TF32)"]
    assert not variant.missing_evidence and not variant.evidence_unread
    # A folder that changes the file but not the technique: the plain FMA loop shows no HMMA.
    plain = built_evidence(assignment, {"kernels_tc/matmul.cuh": NAIVE_MATMUL.replace("course-naive", "my-naive")},
                           tmp_path / "plain", tmp_path / "cache")
    variant = plain.variants[0]
    assert variant.missing_evidence == {"matmul": ["tensor_cores"]} and not variant.changes_nothing
    assert variant_evidence(variant) == ["tensor cores: not used in matmul"]
    assert "matmul: its binary shows no tensor-core instruction" in markdown.render(plain)


# fp16-wmma-matmul: the way a team wrote req_1 (half fragments, each tile converted as it is staged): tensor cores,
# but not the TF32 the course requires.
FP16_WMMA_MATMUL = r"""#pragma once
#include <cuda_fp16.h>
#include <mma.h>
using namespace nvcuda;
__global__ void matmul_forward_kernel(float* out, const float* inp, const float* weight, int M, int C, int OC) {
    __shared__ half a_tile[16 * 16], b_tile[16 * 16];
    int tile_row = blockIdx.y * 16, tile_col = blockIdx.x * 16;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < C; k += 16) {
        for (int i = threadIdx.x; i < 256; i += 32) {
            a_tile[i] = __float2half(inp[(tile_row + i / 16) * C + k + i % 16]);
            b_tile[i] = __float2half(weight[(tile_col + i / 16) * C + k + i % 16]);
        }
        __syncwarp();
        wmma::load_matrix_sync(a, a_tile, 16);
        wmma::load_matrix_sync(b, b_tile, 16);
        wmma::mma_sync(acc, a, b, acc);
        __syncwarp();
    }
    wmma::store_matrix_sync(out + tile_row * OC + tile_col, acc, OC, wmma::mem_row_major);
}
void matmul_forward(float* out, const float* inp, const float* weight, int M, int C, int OC) {
    matmul_forward_kernel<<<dim3(OC / 16, M / 16), 32>>>(out, inp, weight, M, C, OC);
}
"""


@needs_nvcc
@pytest.mark.skipif(evidence.find_cuobjdump() is None or evidence.find_nvdisasm() is None,
                    reason="cuobjdump and nvdisasm are not installed")
@pytest.mark.parametrize("penalty", [1.0, 0.0])
def test_fp16_tensor_cores_cost_a_variant_that_requires_tf32(tmp_path: Path, penalty: float) -> None:
    assignment = cuda_pack(tmp_path)
    spec = assignment.spec_file.read_text().replace(
        "evidence_penalty = 0.5", f"evidence_penalty = 0.5\ntensor_core_precisions = [\"TF32\"]\n"
                                  f"precision_penalty = {penalty}")
    assignment.spec_file.write_text(spec)
    assignment = load_assignment(assignment.root)
    scored = {}
    for name, source in (("tf32", WMMA_MATMUL), ("fp16", FP16_WMMA_MATMUL)):
        folder = write(tmp_path / name, {"kernels/matmul.cuh": NAIVE_MATMUL, "kernels_tc/matmul.cuh": source})
        built = build_stage(folder, assignment, Options(cache_dir=tmp_path / "cache", kernels=("tc",),
                                                        cuda_arch="sm_90"))
        # As if every case passed (no GPU here): what the binaries show decides the rest.
        passed = [KernelResult(k.name, k.weight, k.weight, KernelStatus.PASSED, "all cases passed", [],
                               variant=k.variant) for k in built.kernels]
        scored[name] = score_variants(assignment, passed, built.variants, built.artifacts)
    (kernel,), (variant,) = scored["tf32"]
    assert variant.score == variant.max_score == 4 and not variant.wrong_precision and not kernel.deductions
    (kernel,), (variant,) = scored["fp16"]
    assert variant.wrong_precision == {"matmul": ["FP16 in matmul_forward_kernel"]}
    assert variant_evidence(variant) == ["tensor cores: used in matmul (matmul_forward_kernel: FP16)"]
    assert variant.score == pytest.approx(4 * (1 - penalty)) and variant.penalty == pytest.approx(4 * penalty)
    words = "tc must use TF32 tensor cores: matmul's binary shows FP16 in matmul_forward_kernel"
    if penalty:
        assert variant.message == f"{words} (−4)" and kernel.deductions[0].reason == words
    else:  # reported by the evidence, costs nothing
        assert variant.message == "tc: all 1 kernels passed" and not kernel.deductions


@needs_nvcc
def test_without_cuobjdump_the_evidence_says_so_and_costs_nothing(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evidence, "find_cuobjdump", lambda: None)
    assignment = cuda_pack(tmp_path)
    result = built_evidence(assignment, {"kernels_tc/matmul.cuh": WMMA_MATMUL}, tmp_path / "wmma", tmp_path / "cache")
    variant = result.variants[0]
    assert variant.evidence_unread == {"matmul": "cuobjdump is not installed: no SASS evidence"}
    assert not variant.missing_evidence and variant.penalty == 0
    assert variant_evidence(variant) == ["tensor cores: no evidence for matmul (cuobjdump is not installed: no SASS evidence)"]


def test_build_stage_asks_for_evidence_only_where_a_variant_does(variants: Assignment, tmp_path: Path,
                                                                 cache_dir: Path) -> None:
    built = build_stage(submission(tmp_path, variants, GOOD), variants, Options(cache_dir=cache_dir))
    assert built.artifacts["opt_b/flash_attention"].evidence is not None
    assert built.artifacts["opt_a/flash_attention"].evidence is None and built.artifacts["flash_attention"].evidence is None
    assert [(v.variant, v.submitted) for v in built.variants] == [("opt_a", True), ("opt_b", True)]
