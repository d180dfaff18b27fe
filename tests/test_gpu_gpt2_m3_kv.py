"""gpt2-m3's req_6 (the KV cache) on a real GPU: the reference scores 12/12 (the decode check's four cases, and its
six kernels' own cases with the cache off), the course-style cache too; a cache that ignores g_current_pos fails
with the step and the position named; one that leaks into the next program fails every program after the first; one
that recomputes attention over the whole sequence passes and is flagged, at a cost only where the spec says so.

Marked `gpu`: skipped with the reason where there is no CUDA device. Each grade is of req_6 alone.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from grader.results import KernelResult, Result, VariantResult
from grader.samples import Sample, variants
from grader.assignment import Assignment, load_assignment
from grader.status import KernelStatus, Outcome

from conftest import grade_variant

pytestmark = pytest.mark.gpu

CACHE_MIB = 12 * 2 * 1024 * 768 * 4 / 2 ** 20  # the reference's cache per row: 12 layers, K and V, maxT x C floats


@pytest.fixture(scope="module")
def m3() -> Assignment:
    return load_assignment("gpt2-m3")


@pytest.fixture(scope="module")
def reference(m3: Assignment, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Result:
    return grade_variant(m3, None, tmp_path_factory.mktemp("m3-kv-reference"), cache_dir, kernels=("req_6",))


def sample(m3: Assignment, name: str) -> Sample:
    return next(v for v in variants(m3) if v.name == name)


def graded(m3: Assignment, name: str, tmp_path: Path, cache_dir: Path) -> Result:
    return grade_variant(m3, sample(m3, name), tmp_path, cache_dir, public_only=True, kernels=("req_6",))


def decode_of(result: Result) -> KernelResult:
    return next(k for k in result.kernels if k.name == "req_6/decode")


def req_6(result: Result) -> VariantResult:
    return next(v for v in result.variants if v.name == "req_6")


def attention_speed_up(message: str) -> float:
    return float(re.search(r"attention calls alone: ([0-9.e+]+)x", message).group(1))  # type: ignore[union-attr]


def test_reference_scores_12_on_req_6(reference: Result) -> None:
    assert {k.name: k.status for k in reference.kernels} == {
        name: KernelStatus.PASSED for name in ("req_6/encoder", "req_6/layernorm", "req_6/matmul", "req_6/attention",
                                               "req_6/residual", "req_6/gelu", "req_6/decode")}, \
        [(k.name, k.message) for k in reference.kernels if k.status is not KernelStatus.PASSED]
    variant = req_6(reference)
    assert (variant.status, variant.score, variant.max_score) == (Outcome.PASSED, 12, 12), variant.message
    decode = decode_of(reference)
    assert [c.name for c in decode.cases if c.passed] == ["prefill-decode-b1", "prefill-decode-b4", "second-run",
                                                          "speed-up"]
    assert not decode.deductions and not decode.check_hints and "FLAGGED" not in decode.message


def test_reference_reports_its_speed_ups_and_its_caches_memory(reference: Result) -> None:
    cases = {c.name: c for c in decode_of(reference).cases}
    for case in cases.values():
        print(case.name, case.message)
    # One row at prompt 16: the reference's one allocation for 12 layers of K and V over maxT (the driver's granule
    # may add to it).
    found = re.search(r"the cache took ([0-9.]+) MiB", cases["prefill-decode-b1"].message)
    assert found is not None
    taken = float(found.group(1))
    assert CACHE_MIB <= taken <= CACHE_MIB + 8
    speed_up = cases["speed-up"]
    assert attention_speed_up(speed_up.message) >= 3  # a decode step's attention over 8 rows of 480+ cached tokens
    average = float(re.search(r"([0-9.]+)x on average", speed_up.message).group(1))  # type: ignore[union-attr]
    print(f"whole forward {average}x, attention {attention_speed_up(speed_up.message)}x")
    assert average >= 3  # the whole forward over one token against one over 480+


def test_a_course_style_cache_scores_12_unflagged(m3: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    result = graded(m3, "course-kv-cache", tmp_path, cache_dir)
    decode = decode_of(result)
    assert decode.status is KernelStatus.PASSED and "FLAGGED" not in decode.message, decode.message
    assert req_6(result).score == 12, req_6(result).message
    print(attention_speed_up(next(c for c in decode.cases if c.name == "speed-up").message))


def test_a_cache_that_ignores_g_current_pos_fails_req_6_with_the_step_named(m3: Assignment, tmp_path: Path,
                                                                           cache_dir: Path) -> None:
    name = "mutant-kv-ignores-current-pos"
    result = graded(m3, name, tmp_path, cache_dir)
    decode = decode_of(result)
    assert decode.status is KernelStatus.FAILED
    assert [c.name for c in decode.cases if not c.passed] == list(sample(m3, name).failed_cases or ())
    first = decode.cases[0]
    assert first.message.startswith("16 tokens after a prompt of 16 (B=1), with the cache: decode step 1 of 15 (the "
                                    "token at position 16), row 0: logit "), first.message
    assert "decode steps differ; the prefill's logits match" in first.message
    assert any("g_current_pos" in hint for hint in decode.check_hints)
    variant = req_6(result)
    assert variant.score == 0 and variant.message.startswith("req_6 is all or nothing: decode failed 4 of 4 cases")


def test_a_cache_that_leaks_into_the_next_program_fails_every_one_after_the_first(m3: Assignment, tmp_path: Path,
                                                                                  cache_dir: Path) -> None:
    name = "mutant-kv-leaks-between-runs"
    result = graded(m3, name, tmp_path, cache_dir)
    decode = decode_of(result)
    assert [c.name for c in decode.cases if not c.passed] == list(sample(m3, name).failed_cases or ()), decode.message
    assert "g_kv_cache was never set" in decode.cases[0].message
    assert any(hint.startswith("The first program in the harness's process is right") for hint in decode.check_hints)
    assert req_6(result).score == 0


def test_a_recomputing_cache_is_flagged_and_costs_only_where_the_spec_says(m3: Assignment, tmp_path: Path,
                                                                          cache_dir: Path) -> None:
    result = graded(m3, "mutant-kv-recomputes", tmp_path / "reported", cache_dir)
    decode = decode_of(result)
    assert decode.status is KernelStatus.PASSED and req_6(result).score == 12, decode.message
    assert decode.message.startswith("the KV cache is not faster: in 'speed-up' (480 + 16 tokens) the attention calls "
                                     "with the cache take ") and "(reported, not scored)" in decode.message
    speed_up = next(c for c in decode.cases if c.name == "speed-up")
    assert speed_up.passed and "FLAGGED" in speed_up.message and attention_speed_up(speed_up.message) < 1.5
    costly = dataclasses.replace(m3, checks=tuple(dataclasses.replace(c, speedup_penalty=1.0) if c.name == "decode"
                                                  else c for c in m3.checks))
    result = grade_variant(costly, sample(m3, "mutant-kv-recomputes"), tmp_path / "costly", cache_dir,
                           public_only=True, kernels=("req_6",))
    assert decode_of(result).deductions and req_6(result).score == 0, req_6(result).message
