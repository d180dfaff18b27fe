"""The nanogpt-kvcache pack (python target, torch on the CPU): KV caching for NanoGPT's generate, graded through the
pack's adapter on its public cases (tiny configs: 2 layers, 64 wide, block 64).

Real builds and real harnesses for the reference, the template and every sample; the reference's gold checked
in-process against a float64 NumPy GPT-2 that generates without a cache (numpy_reference.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from grader.cases import Seed, make_case_inputs
from grader.options import Options
from grader.pipeline import grade
from grader.samples import Sample
from grader.spec import Assignment, load_assignment
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
    # The CPU has no allocator count: the per-case device memory is left unmeasured, not zero.
    assert all(c.peak_extra_bytes is None for k in result.kernels for c in k.cases)


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
        tokens, logits = np.full_like(gold["tokens"], -1), np.full_like(gold["logits"], np.nan, dtype=np.float32)
        function = grading.cached_generation if cached else grading.uncached_generation
        function(prompt, tokens, logits, *(int(p[name]) for name in SIZES))
        assert np.array_equal(tokens, gold["tokens"]), case.name
        # float32 against float64: the pack's tolerance (atol 2e-4, rtol 1e-4) holds with room.
        assert np.allclose(logits, gold["logits"], atol=2e-4, rtol=1e-4), (case.name, np.abs(logits - gold["logits"]).max())
        if case.name == "past-block-size":
            assert p["prompt_len"] + p["new_tokens"] > p["block_size"]  # the case crops


def test_cuda_pack_grades_the_same_files(pack: Assignment) -> None:
    cuda = load_assignment("nanogpt-kvcache-cuda")
    for name in ("model.py", "kvcache_grading.py"):
        for folder in ("reference", "template"):
            assert (cuda.root / folder / name).read_bytes() == (pack.root / folder / name).read_bytes(), (folder, name)
