"""The flash-attention-backward pack (cpp target): the backward passes of Algorithms 0 and 1, graded against float64
NumPy truth. Real g++ builds and real harnesses for the reference, the template and every sample; the gold checked
against central finite differences of the float64 forward."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from grader.cases import Seed, make_case_inputs
from grader.options import Options
from grader.pipeline import grade
from grader.samples import Sample, variants
from grader.assignment import Assignment, load_assignment

from conftest import variant_params
from pack_samples import Graded, assert_expected_verdicts, graded_once, kernel_of

PACK = "flash-attention-backward"
OUTPUTS = ("dQ", "dK", "dV")


@pytest.fixture(scope="module")
def pack() -> Assignment:
    return load_assignment(PACK)


@pytest.fixture(scope="module")
def graded(pack: Assignment, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Graded:
    return graded_once(pack, tmp_path_factory, cache_dir)


def test_reference_scores_full_marks_well_inside_the_tolerance(pack: Assignment, graded: Graded) -> None:
    result = graded(None)
    assert result.score == result.max_score == 3
    for kernel in result.kernels:
        spec = pack.kernel(kernel.name)
        for case in kernel.cases:
            atol = spec.tolerance_for(next(c for c in spec.cases if c.name == case.name)).atol
            assert case.passed and case.max_abs_err is not None, (kernel.name, case.name, case.message)
            # One key: dQ = dK = 0 and dV = dO come out exact; elsewhere the margin the spec's comments claim.
            assert case.max_abs_err == 0 if case.name == "one-key" else case.max_abs_err < atol / 2, \
                (kernel.name, case.name, case.max_abs_err)


def test_template_compiles_and_scores_zero_as_never_written(pack: Assignment, cache_dir: Path) -> None:
    result = grade(pack.template_dir, pack, Options(cache_dir=cache_dir, public_only=True))
    assert result.score == 0
    for kernel in result.kernels:
        assert kernel.status == "failed" and kernel.cases, kernel.message
        for case in kernel.cases:
            assert all(f"{name}: never written" in case.message for name in OUTPUTS), case.message


@pytest.mark.parametrize("sample", variant_params(PACK))
def test_each_sample_fails_exactly_its_expected_cases(sample: Sample, graded: Graded) -> None:
    assert_expected_verdicts(graded(sample), sample)


def test_a_flash_backward_that_calls_the_students_standard_backward_links_it(pack: Assignment,
                                                                             graded: Graded) -> None:
    """The pack names no source_dirs: its default (src/, where the kernels' sources lie) is one program."""
    assert pack.source_dirs == ("src",)
    sample = next(s for s in variants(pack) if s.name == "course-flash-backward-calls-standard")
    flash = kernel_of(graded(sample), "flash_attention_backward")
    # Right on every case; the standard backward's N x N matrices are over Algorithm 1's memory bound.
    assert all(c.passed for c in flash.cases) and flash.memory_bound is not None and flash.memory_bound.exceeded
    assert {"src/standard_attention_backward.cpp", "src/standard_attention_backward.h"} <= set(flash.built_from)


# ---------------------------------------------------------------- the gold against finite differences

# Central differences of L = sum(dO * O) in float64: truncation ~h^2 |L'''| and rounding ~eps |L| / h stay below
# 1e-7 at h = 1e-5 on these sizes, while a missing term or a wrong axis is off by O(0.1) or more.
FD_STEP = 1e-5
FD_TOLERANCE = 1e-6
FD_CASES = [{"N": 1, "d": 1}, {"N": 5, "d": 3}, {"N": 7, "d": 4}, {"N": 6, "d": 10, "score_offset": 150}]


def finite_differences(forward: Callable, Q: np.ndarray, K: np.ndarray, V: np.ndarray,
                       dO: np.ndarray) -> dict[str, np.ndarray]:
    """dL/dQ, dL/dK, dL/dV of L = sum(dO * forward(Q, K, V)), one central difference per entry."""
    arrays = {"Q": Q.astype(np.float64), "K": K.astype(np.float64), "V": V.astype(np.float64)}
    grads = {}
    for name, x in arrays.items():
        grad = np.zeros_like(x)
        for index in np.ndindex(x.shape):
            values = []
            for step in (FD_STEP, -FD_STEP):
                moved = dict(arrays)
                moved[name] = x.copy()
                moved[name][index] += step
                values.append(float((dO * forward(**moved)).sum()))
            grad[index] = (values[0] - values[1]) / (2 * FD_STEP)
        grads[f"d{name}"] = grad
    return grads


@pytest.mark.parametrize("case", FD_CASES, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_finite_differences_agree_with_the_gold(pack: Assignment, case: dict) -> None:
    truth = pack.numpy_reference()
    inputs = pack.make_inputs()
    for kernel in ("standard_attention_backward", "flash_attention_backward"):
        arrays = inputs(kernel, case | {"Br": 4, "Bc": 4}, np.random.default_rng(7))
        gold = getattr(truth, kernel)(**arrays)
        numeric = finite_differences(truth.forward, arrays["Q"], arrays["K"], arrays["V"],
                                     arrays["dO"].astype(np.float64))
        for name in OUTPUTS:
            scale = max(1.0, float(np.abs(gold[name]).max()))
            assert np.abs(gold[name] - numeric[name]).max() <= FD_TOLERANCE * scale, (kernel, name)
        if case["N"] > 1:
            # The check can fail: dS = P * dP (no rowsum term) is far from the differences.
            P = truth.forward(arrays["Q"], arrays["K"], np.eye(case["N"]))
            wrong = (P * (arrays["dO"].astype(np.float64) @ arrays["V"].astype(np.float64).T)) @ arrays["K"]
            assert np.abs(wrong - numeric["dQ"]).max() > 1e3 * FD_TOLERANCE


def test_large_scores_pass_exps_range_with_the_gradients_of_the_unshifted_scores(pack: Assignment) -> None:
    truth = pack.numpy_reference()
    for kernel in pack.kernels:
        case = next(c for c in kernel.cases if "score_offset" in c.params)
        for seed in (Seed(pack.public_seed), Seed(pack.public_seed, "another-secret")):
            arrays = make_case_inputs(pack, kernel, case, seed)
            scores = arrays["Q"].astype(np.float64) @ arrays["K"].astype(np.float64).T
            assert (np.abs(scores).min(axis=1) > 100).all()  # every row: exp() of any raw score overflows or is 0
            gold = getattr(truth, kernel.name)(**arrays)
            assert all(np.isfinite(gold[name]).all() for name in OUTPUTS)
            # The shift lives in the first 8 columns of Q and K: without them the softmax, so dS, is the same,
            # and so are dV and the other columns of dQ and dK.
            plain = truth.standard_attention_backward(arrays["Q"][:, 8:], arrays["K"][:, 8:], arrays["V"],
                                                      arrays["dO"])
            np.testing.assert_allclose(gold["dV"], plain["dV"], rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(gold["dQ"][:, 8:], plain["dQ"], rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(gold["dK"][:, 8:], plain["dK"], rtol=1e-9, atol=1e-12)
            if kernel.name == "flash_attention_backward":  # the statistics are the forward's, in range
                assert np.allclose(arrays["m"], scores.max(axis=1), rtol=1e-6)
                assert np.isfinite(arrays["l"]).all() and (arrays["l"] >= 1).all()
