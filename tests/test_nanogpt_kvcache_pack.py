"""The nanogpt-kvcache pack (python target, torch on the CPU): KV caching for NanoGPT's generate, graded through the
pack's adapter on its public cases (tiny configs: 2 layers, 64 wide, block 64).

Real builds and real harnesses for the reference, the template and every sample (nanoGPT forks among them: one on
GPT-2's tanh GELU, one with from_pretrained and a module of its own); the generations judged against the
submission's own model's original generation, which the adapter writes in the same call; the reference's adapter
outputs checked in-process against a float64 NumPy GPT-2 that generates without a cache (numpy_reference.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from grader.cases import Seed, make_case_inputs
from grader.errors import SpecError
from grader.gold import judged_with
from grader.options import Options
from grader.pipeline import grade
from grader.samples import Sample
from grader.assignment import Assignment, load_assignment
from grader.assignment.kernels import load_kernel
from grader.targets import target_of

from conftest import grade_variant, needs_torch, variant_params
from pack_samples import kernel_of

PACK = "nanogpt-kvcache"
SIZES = ("batch", "prompt_len", "new_tokens", "n_layer", "n_head", "n_embd", "block_size", "vocab_size")


@pytest.fixture(scope="module")
def pack() -> Assignment:
    return load_assignment(PACK)


@pytest.fixture(scope="module")
def graded_public(pack: Assignment, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path):
    results = {}

    def result_of(sample: Sample | None):
        name = sample.name if sample else "reference"
        if name not in results:
            kernels = (sample.kernel,) if sample is not None and not sample.whole else ()
            results[name] = grade_variant(pack, sample, tmp_path_factory.mktemp(name), cache_dir, kernels=kernels,
                                          public_only=True)
        return results[name]

    return result_of


@needs_torch
def test_torch_pack_grades_on_the_cpu_with_its_determinism_recorded(pack: Assignment, graded_public) -> None:
    target = target_of(pack)
    assert not target.needs_gpu and "torch" in target.python_packages
    assert target.harness_env["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert target.harness_env["CUDA_VISIBLE_DEVICES"] == ""  # on the CPU on a GPU machine too
    result = graded_public(None)
    assert result.score == result.max_score > 0
    assert all(c.passed for k in result.kernels for c in k.cases)
    assert any("use_deterministic_algorithms" in line for line in result.environment.determinism)
    # On the CPU a case's peak is the heap the grader's counting allocator saw (torch's CPU tensors among it).
    assert all(isinstance(c.peak_extra_bytes, int) and c.peak_extra_bytes > 0 for k in result.kernels for c in k.cases)


def test_cuda_marker_makes_a_torch_pack_need_the_gpu() -> None:
    from grader.targets import packages_to_install, target_with
    assert target_with("python", ("torch", "torch.cuda")).needs_gpu
    assert "CUDA_VISIBLE_DEVICES" not in target_with("python", ("torch", "torch.cuda")).harness_env
    assert not target_with("python", ("torch",)).needs_gpu
    assert "torch.cuda" not in packages_to_install(load_assignment("nanogpt-kvcache-cuda"))


@needs_torch
def test_template_without_a_cache_fails_the_cached_kernels_and_says_how_to_switch_one(
        pack: Assignment, cache_dir: Path) -> None:
    result = grade(pack.template_dir, pack, Options(cache_dir=cache_dir, public_only=True))
    assert kernel_of(result, "uncached_generation").score == kernel_of(result, "uncached_generation").max_score
    for name in ("cached_generation", "cache_evidence"):
        kernel = kernel_of(result, name)
        assert kernel.score == 0 and kernel.cases
        assert all("model.py has no cache switch" in c.message for c in kernel.cases), kernel.cases[0].message
        # The adapter raised it, in its own words: no traceback of the grader's frames as if they were the student's.
        assert all("Traceback" not in c.message for c in kernel.cases), kernel.cases[0].message


@needs_torch
@pytest.mark.parametrize("sample", variant_params(PACK))
def test_each_sample_fails_exactly_its_expected_public_cases(sample: Sample, graded_public) -> None:
    result = graded_public(sample)
    for kernel in (result.kernels if sample.whole else [kernel_of(result, sample.kernel)]):
        assert kernel.status == sample.expect, kernel.message
        graded = [c.name for c in kernel.cases]
        expected = [c for c in (sample.failed_cases or ()) if c in graded]
        assert [c.name for c in kernel.cases if not c.passed] == expected, kernel.message


@pytest.fixture(scope="module")
def adapter(pack: Assignment):
    """The pack's adapter on the reference's model.py, imported in this process (the grader's own code)."""
    sys.path[:0] = [str(pack.reference_dir), str(pack.numpy_reference_file.parent)]
    saved = {name: sys.modules.pop(name) for name in ("model", "kvcache_grading", "numpy_reference")
             if name in sys.modules}
    try:
        import kvcache_grading
        import numpy_reference
        yield kvcache_grading, numpy_reference
    finally:
        del sys.path[:2]
        for name in ("model", "kvcache_grading", "numpy_reference"):
            sys.modules.pop(name, None)
        sys.modules.update(saved)


@needs_torch
@pytest.mark.parametrize("cached", [True, False], ids=["cached", "uncached"])
def test_reference_generation_is_a_float64_gpt2_generating_greedily(pack: Assignment, adapter, cached: bool) -> None:
    grading, truth = adapter
    kernel = next(k for k in pack.kernels if k.name == "cached_generation")
    for case in (c for c in kernel.cases if c.public):
        p = dict(case.params)
        prompt = make_case_inputs(pack, kernel, case, Seed(pack.public_seed, None))["prompt"]
        gold = truth.cached_generation(prompt, **p)
        out = {name: np.full(array.shape, -1, np.int32) if array.dtype.kind == "i" else
               np.full(array.shape, np.nan, np.float32) for name, array in gold.items()}
        function = grading.cached_generation if cached else grading.uncached_generation
        function(prompt, out["generated"], out["logits"], out["original_tokens"], out["original_logits"],
                 *(int(p[name]) for name in SIZES))
        for tokens, logits in (("generated", "logits"), ("original_tokens", "original_logits")):
            assert np.array_equal(out[tokens], gold[tokens]), (case.name, tokens)
            # float32 against float64: the pack's tolerance (atol 2e-4, rtol 1e-4) holds with room.
            assert np.allclose(out[logits], gold[logits], atol=2e-4, rtol=1e-4), \
                (case.name, logits, np.abs(out[logits] - gold[logits]).max())
        if case.name == "past-block-size":
            assert p["prompt_len"] + p["new_tokens"] > p["block_size"]  # the case crops


def test_cuda_pack_grades_the_same_files(pack: Assignment) -> None:
    """The CUDA pack stores no copy of the CPU pack's model and adapter: its trees inherit them (based_on), so
    both grade the same files; its own folders hold only what differs (the handout's install line, the workflow)."""
    cuda = load_assignment("nanogpt-kvcache-cuda")
    for kind in ("reference", "template"):
        for name in ("model.py", "kvcache_grading.py"):
            assert not (cuda.root / kind / name).exists(), (kind, name)
            assert cuda.tree_file(kind, name) == pack.tree_file(kind, name), (kind, name)
    assert (cuda.reference_dir / "model.py").read_bytes() == (pack.reference_dir / "model.py").read_bytes()
    ours, theirs = ((a.template_dir / "README.md").read_text() for a in (cuda, pack))
    assert ours != theirs and ours.split("## Checking your work")[0] == theirs.split("## Checking your work")[0]


@needs_torch
def test_a_wrong_cache_is_judged_against_its_own_uncached_tokens_exactly_by_row_and_step(pack: Assignment,
                                                                                          graded_public) -> None:
    sample = next(p.values[0] for p in variant_params(PACK) if p.values[0].name == "mutant-cache-position-off-by-one")
    kernel = kernel_of(graded_public(sample), "cached_generation")
    wrong = [c for c in kernel.cases if c.first_mismatch is not None and c.first_mismatch.buffer == "generated"]
    assert wrong, [c.message for c in kernel.cases]
    for case in wrong:
        row, step = case.first_mismatch.index  # (batch row, step - 1): the new tokens alone
        assert 0 <= row < case.params["batch"] and 0 <= step < case.params["new_tokens"]
        expected, got = case.first_mismatch.expected, case.first_mismatch.got
        assert expected != got and float(expected).is_integer() and float(got).is_integer(), case.first_mismatch
        assert 0 <= expected < case.params["vocab_size"] and 0 <= got < case.params["vocab_size"]


def test_token_ids_are_compared_exactly_in_every_case(pack: Assignment) -> None:
    """An id is an integer: where the allowance at the largest id is below 1, a different id always fails."""
    for kernel in (k for k in pack.kernels if any(b.name == "generated" for b in k.buffers)):
        for case in (*kernel.cases, *kernel.sweep_cases):
            tolerance = kernel.tolerance_for(case)
            assert tolerance.atol + tolerance.rtol * (case.params["vocab_size"] - 1) < 1, (kernel.name, case.name)


def test_generations_are_judged_against_the_submissions_own_outputs_and_the_truths_are_not_judged(
        pack: Assignment) -> None:
    kernel = next(k for k in pack.kernels if k.name == "cached_generation")
    produced = {"generated": np.array([[3, 4]], np.int32), "logits": np.zeros((1, 2, 2), np.float32),
                "original_tokens": np.array([[3, 5]], np.int32), "original_logits": np.ones((1, 2, 2), np.float32)}
    gold = {name: np.full_like(array, 7) for name, array in produced.items()}  # the reference's: not the truth
    expected = judged_with(kernel, produced, gold)
    assert set(expected) == {"generated", "logits"}
    assert expected["generated"] is produced["original_tokens"] and expected["logits"] is produced["original_logits"]


@pytest.mark.parametrize("buffers, words", [
    ({"out": {"role": "output", "shape": "n", "judged_against": "truth_missing"}}, "another output"),
    ({"out": {"role": "output", "shape": "n", "judged_against": "other"},
      "other": {"role": "output", "shape": "n, n"}}, "dtype and shape"),
    ({"out": {"role": "output", "shape": "n", "judged_against": "other"},
      "other": {"role": "output", "shape": "n", "judged_against": "out"}}, "cannot be judged against"),
])
def test_an_output_judged_against_another_must_name_a_truth_of_its_shape(buffers: dict, words: str) -> None:
    table = {"name": "k", "weight": 1, "header": "k.py", "sources": ["k.py"],
             "signature": "void k(float* out, float* other, int n)" if "other" in buffers else "void k(float* out, int n)",
             "tolerance": {"atol": 0.0, "rtol": 0.0}, "buffers": buffers, "cases": [{"name": "a", "n": 2}]}
    defaults = {"time_limit_s": 1.0, "partial_credit": "fraction", "forbidden_symbols": (), "forbidden_penalty": 1.0,
                "sanitizer": (), "sanitizer_penalty": 0.0, "scratch_init": "poison", "kernel_time_limit_s": None}
    with pytest.raises(SpecError, match=words):
        load_kernel(table, "assignment.toml kernels[0]", defaults)


@needs_torch
def test_a_traceback_marks_the_graders_adapter_frames_and_shows_the_students_as_theirs(graded_public) -> None:
    sample = next(p.values[0] for p in variant_params(PACK) if p.values[0].name == "mutant-cache-keys-not-values")
    case = kernel_of(graded_public(sample), "cached_generation").cases[0]
    lines = case.message.splitlines()
    adapter = [line for line in lines if line.lstrip().startswith('File "kvcache_grading.py"')]
    student = [line for line in lines if line.lstrip().startswith('File "model.py"')]
    assert adapter and student, case.message
    assert all(line.endswith("[the grader's file, not yours]") for line in adapter), case.message
    assert not any("grader's file" in line for line in student), case.message
