"""The forward-pass check on a real GPU: the course's six kernels composed into GPT-2 124M's forward pass.

Marked `gpu`: skipped with the reason where there is no CUDA device. Few and small: public cases only
where the per-kernel cases are not what is being shown.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from grader.options import Options
from grader.pipeline import grade
from grader.results import Result
from grader.samples import compose
from grader.assignment import Assignment, load_assignment

from conftest import grade_variant, with_time_limit

pytestmark = pytest.mark.gpu

MUTANTS = Path(__file__).parent / "forward_cuda"
CACHED_MATMUL = MUTANTS / "mutant-matmul-shape-keyed-transpose-cache" / "matmul.cuh"


@pytest.fixture(scope="module")
def gpt2() -> Assignment:
    return with_time_limit(load_assignment("gpt2-m1"), 20.0)


def _kernels(result: Result) -> dict:
    return {k.name: k for k in result.kernels}


def test_reference_passes_every_pass_and_generates_the_references_tokens(gpt2: Assignment, tmp_path: Path,
                                                                          cache_dir: Path) -> None:
    result = grade_variant(gpt2, None, tmp_path, cache_dir, public_only=True)
    forward = _kernels(result)["forward"]
    assert [(c.name, c.status) for c in forward.cases] == [("layer-by-layer", "passed"), ("logits", "passed"),
                                                           ("generation", "passed")], forward.message
    assert "all 123 steps within tolerance" in forward.cases[0].message
    assert forward.cases[1].max_abs_err is not None and forward.cases[1].max_abs_err < 1e-2
    # The reference's own tokens, not a near tie accepted.
    assert forward.cases[2].message.startswith("greedy generation gave the reference's 4 token(s)")
    assert result.score == result.max_score == 10
    assert forward.max_score == 0  # reported, not scored in gpt2-m1


def test_a_matmul_caching_its_transposed_weight_by_shape_passes_its_cases_and_fails_from_layer_2(
        gpt2: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    folder = compose(gpt2, None, tmp_path / "cached-matmul")
    shutil.copyfile(CACHED_MATMUL, folder / "kernels" / "matmul.cuh")
    result = grade(folder, gpt2, Options(cache_dir=cache_dir, kernels=("forward",)))
    kernels = _kernels(result)
    assert kernels["matmul"].status == "passed", kernels["matmul"].message  # every one of its own cases
    layers = kernels["forward"].cases[0]
    assert layers.status == "failed"
    assert layers.message.startswith("layer 2's QKV matmul (step 13 of 123): "), layers.message
    assert result.score == result.max_score  # the check weighs nothing in gpt2-m1


def test_a_variant_whose_forward_check_fails_loses_that_variant_only(tmp_path: Path, cache_dir: Path) -> None:
    m2 = with_time_limit(load_assignment("gpt2-m2"), 20.0)
    folder = compose(m2, None, tmp_path / "req3-cached-matmul")
    # req_3's folder changes the reductions; a matmul of its own there is what req_3 is graded with.
    shutil.copyfile(CACHED_MATMUL, folder / "kernels_req_3" / "matmul.cuh")
    result = grade(folder, m2, Options(cache_dir=cache_dir, public_only=True))
    kernels = _kernels(result)
    assert kernels["req_3/matmul"].status == "passed"
    assert kernels["req_3/forward"].status == "failed"
    variants = {v.name: v for v in result.variants}
    assert variants["req_3"].score == 0 and "forward failed" in variants["req_3"].message
    assert all(variants[name].score == variants[name].weight for name in ("req_0", "req_1", "req_2"))
    assert all(kernels[f"{name}/forward"].status == "passed" for name in ("req_0", "req_1", "req_2"))
