"""gpt2-m3's req_5, local attention, without a GPU: the spec (a variant-only kernel graded in req_5 alone), its
float64 truth against a plain loop, its tolerance against course-style float32 families emulated on the very case
inputs (and the mutants' distances, which must match what their VARIANT.toml files expect), the host function's
accepted names found in the sources, and the reference and every sample built here with nvcc. Nothing built runs
here (tests/test_gpu_gpt2_m3_local.py runs them)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from grader.build import Artifact, build_submission
from grader.cases import Seed, make_case_inputs
from grader.errors import SpecError
from grader.options import Options
from grader.pipeline import grade
from grader.results import CaseResult
from grader.samples import compose, variants
from grader.scoring import score_kernel
from grader.sources import Origin, SourceFile, defined_function
from grader.assignment import Assignment, load_assignment
from grader.assignment.kernels import load_kernel
from grader.status import BuildStatus, CaseStatus, KernelStatus

from local_attention_emulation import FAMILIES, heads, truth

NAMES = ("local_attention_forward_gpu", "local_attention_forward")
WINDOW = 128
# The mutants' windows as (lo, hi): keys t - lo ... t + hi.
MUTANT_WINDOWS = {"mutant-window-127": (127, 0), "mutant-exclusive-end": (128, -1), "mutant-wrong-side": (0, 128)}


@pytest.fixture(scope="module")
def m3() -> Assignment:
    return load_assignment("gpt2-m3")


def local(m3: Assignment):
    return m3.kernel("local_attention")


def case_inputs(m3: Assignment, case) -> np.ndarray:
    return make_case_inputs(m3, local(m3), case, Seed(m3.public_seed))["inp"]


def sizes(case) -> dict[str, int]:
    return {n: case.params[n] for n in ("B", "T", "NH", "HS")}


# --- the spec ---------------------------------------------------------------------------------------------------

def test_local_attention_is_graded_in_req_5_alone_with_the_courses_weight(m3: Assignment) -> None:
    kernel = local(m3)
    assert kernel.variant_only and kernel.functions == NAMES and kernel.signature.function in NAMES
    assert [p.name for p in kernel.signature.parameters] == ["out", "qkvr", "inp", "B", "T", "NH", "HS"]
    assert "local_attention" not in {k.name for k in m3.kernels}  # not in kernels/ (the base) ...
    assert not any(k.base == "local_attention" for k in m3.kernels if k.variant != "req_5")  # ... nor in req_4
    req_5 = m3.kernels_of("req_5")
    assert [(k.name, k.weight, k.partial_credit) for k in req_5] == [("req_5/local_attention", 2, "all_or_nothing")]
    assert m3.variant("req_5").folder == "kernels_req_5" and m3.variant("req_5").partial_credit == "all_or_nothing"
    # inp is reused as scratch by the course's reference: mutable, allocated at least as large as its shape.
    assert kernel.buffer("inp").mutable and kernel.buffer("qkvr").role == "scratch"


def test_cases_cover_both_sides_of_the_window(m3: Assignment) -> None:
    cases = local(m3).cases
    lengths = [c.params["T"] for c in cases]
    assert any(T <= WINDOW for T in lengths) and any(T > WINDOW + 1 for T in lengths)
    assert WINDOW + 1 in lengths  # where a window of 127 first differs (row 128 loses key 0)
    assert 35 in lengths and 1024 in lengths and any(T % 2 for T in lengths)
    assert {c.params["HS"] for c in cases} == {64} and {c.params["B"] for c in cases} >= {1, 4}
    assert {c.params["NH"] for c in cases} >= {12, 2}
    assert any(c.public and c.params["T"] > WINDOW for c in cases)  # a public grade already sees the window


@pytest.mark.parametrize(("functions", "error"), [
    (["local_attention_forward"], r"must list the signature's name 'f' among the names it accepts"),
    (["f", "not a name"], r"\['not a name'\] are not C identifiers"),
])
def test_accepted_names_must_include_the_signatures_and_be_identifiers(functions: list[str], error: str) -> None:
    table = {"name": "k", "weight": 1, "header": "k.cuh", "sources": ["k.cuh"], "signature": "void f(float* out, int N)",
             "functions": functions, "tolerance": {"atol": 0, "rtol": 0},
             "buffers": {"out": {"role": "output", "shape": "N"}}, "cases": [{"name": "c", "N": 1}]}
    defaults = {"scratch_init": "zeros", "time_limit_s": 1.0, "partial_credit": "fraction", "forbidden_symbols": (),
                "forbidden_penalty": 1.0, "sanitizer": (), "sanitizer_penalty": 0.0, "kernel_time_limit_s": 2.0}
    with pytest.raises(SpecError, match=r"kernel 'k': key 'functions'.*" + error):
        load_kernel(table, "assignment.toml kernels[0]", defaults)


# --- the truth and the tolerance -----------------------------------------------------------------------------------

def _naive(inp: np.ndarray, B: int, T: int, NH: int, HS: int) -> np.ndarray:
    """The course's CPU loops, row by row, in float64: keys max(0, t - 128) ... t inclusive."""
    qkv = inp.astype(np.float64).reshape(B, T, 3, NH, HS)
    out = np.zeros((B, T, NH * HS))
    for b in range(B):
        for h in range(NH):
            for t in range(T):
                q, start = qkv[b, t, 0, h], max(0, t - WINDOW)
                scores = np.array([q @ qkv[b, j, 1, h] for j in range(start, t + 1)]) / np.sqrt(HS)
                weights = np.exp(scores - scores.max())
                out[b, t, h * HS:(h + 1) * HS] = (weights / weights.sum()) @ qkv[b, start:t + 1, 2, h]
    return out


@pytest.mark.parametrize("name", ["course-t35", "t129-first-full-window", "odd-t201-two-heads"])
def test_numpy_reference_is_the_courses_loop(m3: Assignment, name: str) -> None:
    case = next(c for c in local(m3).cases if c.name == name)
    inp = case_inputs(m3, case)
    gold = m3.numpy_reference().local_attention(inp, **case.params)["out"]
    B, T, NH, HS = sizes(case).values()
    assert gold.dtype == np.float64 and gold.shape == (B, T, NH * HS)
    np.testing.assert_allclose(gold, _naive(inp, **sizes(case)), rtol=0, atol=1e-12)


def _errors(m3: Assignment) -> dict[str, dict[str, float]]:
    """Per case, each family's and mutant's largest |x - e| / (atol + rtol |e|) against the float64 gold (the share
    of the tolerance a grade reports as tolerance_used; inf where it is not finite). gpt2-full on two of its 48 heads
    (the first and the last): every head of it was measured once, see assignment.toml."""
    kernel = local(m3)
    tolerance = kernel.tolerance
    found: dict[str, dict[str, float]] = {}
    for case in kernel.cases:
        inp = case_inputs(m3, case)
        B, NH = case.params["B"], case.params["NH"]
        gold = m3.numpy_reference().local_attention(inp, **case.params)["out"].reshape(
            B, case.params["T"], NH, case.params["HS"])
        used: dict[str, float] = {}
        for b, h, q, k, v in heads(inp, **sizes(case)):
            if case.name == "gpt2-full" and (b, h) not in ((0, 0), (B - 1, NH - 1)):
                continue
            expected = gold[b, :, h]
            outputs = {name: family(q, k, v) for name, family in FAMILIES.items()}
            with np.errstate(all="ignore"):
                outputs |= {name: truth(q, k, v, lo, hi) for name, (lo, hi) in MUTANT_WINDOWS.items()}
                outputs["no-window"] = truth(q, k, v, lo=case.params["T"])  # causal attention over every key
                for name, output in outputs.items():
                    share = np.abs(output - expected) / (tolerance.atol + tolerance.rtol * np.abs(expected))
                    worst = float(np.max(np.where(np.isfinite(share), share, np.inf)))
                    used[name] = max(used.get(name, 0.0), worst)
        found[case.name] = used
    return found


@pytest.fixture(scope="module")
def errors(m3: Assignment) -> dict[str, dict[str, float]]:
    return _errors(m3)


def test_course_style_float32_families_stay_far_within_the_tolerance(errors: dict[str, dict[str, float]]) -> None:
    for case, used in errors.items():
        # float32 in the course's serial order or as an online softmax: ~1.5e-7 off, 1e-4 of the tolerance.
        assert used["serial"] < 1e-3 and used["online"] < 1e-3, (case, used)
        # Tensor-core (TF32) operands: ~4.3e-4 off, under half of it.
        assert used["tf32"] < 0.5, (case, used)


def test_each_mutant_fails_exactly_the_cases_its_variant_file_names(m3: Assignment,
                                                                    errors: dict[str, dict[str, float]]) -> None:
    samples = {s.name: s for s in variants(m3)}
    for mutant in MUTANT_WINDOWS:
        failing = [case for case, used in errors.items() if used[mutant] > 1]
        assert failing == list(samples[mutant].failed_cases or ()), mutant
        # Far outside where it fails, exact where it passes: no case sits near the bound.
        assert all(errors[c][mutant] > 10 for c in failing), (mutant, {c: errors[c][mutant] for c in failing})
        assert all(used[mutant] == 0 for case, used in errors.items() if case not in failing), mutant


def test_causal_attention_without_a_window_fails_the_cases_longer_than_129(errors: dict[str, dict[str, float]],
                                                                          m3: Assignment) -> None:
    lengths = {c.name: c.params["T"] for c in local(m3).cases}
    failing = {case for case, used in errors.items() if used["no-window"] > 1}
    assert failing == {case for case, T in lengths.items() if T > WINDOW + 1} and failing
    assert all(errors[case]["no-window"] > 10 for case in failing)


def test_window_127_passes_up_to_t_128_and_fails_every_longer_case(errors: dict[str, dict[str, float]],
                                                                    m3: Assignment) -> None:
    lengths = {c.name: c.params["T"] for c in local(m3).cases}
    assert {case for case, used in errors.items() if used["mutant-window-127"] > 1} == \
        {case for case, T in lengths.items() if T > WINDOW}


# --- the host function's name --------------------------------------------------------------------------------------

def _file(path: str, text: str, origin: Origin = Origin.SUBMISSION, taken_from: str = "") -> SourceFile:
    return SourceFile(path, text.encode(), origin, taken_from)


HEADER = "kernels/local_attention.cuh"
BODY = "(float* out, float* qkvr, float* inp, int B, int T, int NH, int HS) {\n}\n"


@pytest.mark.parametrize(("text", "found"), [
    ("void local_attention_forward_gpu" + BODY, "local_attention_forward_gpu"),
    ("void local_attention_forward" + BODY, "local_attention_forward"),
    # Both: the first accepted name wins (the signature's).
    ("void local_attention_forward" + BODY + "void local_attention_forward_gpu" + BODY, "local_attention_forward_gpu"),
    # A definition spread over lines, with a comment inside the parameter list.
    ("void\nlocal_attention_forward(float* out, float* qkvr, /* scratch */ float* inp,\n int B, int T, int NH, int HS)\n{}",
     "local_attention_forward"),
    # The name in a comment, a prototype, a call or a __global__ kernel of that name is not the host function.
    ("// void local_attention_forward_gpu" + BODY + "/* void local_attention_forward" + BODY + "*/", ""),
    ("void local_attention_forward_gpu(float* out, float* qkvr, float* inp, int B, int T, int NH, int HS);\n", ""),
    ("void run(float* o) {\n    local_attention_forward(o, o, o, 1, 1, 1, 1);\n}\n", ""),
    ("__global__ void local_attention_forward(float* out, int T) {\n}\n", ""),
    ("__global__ void local_attention_forward(float* out, int T) {\n}\nvoid local_attention_forward_gpu" + BODY,
     "local_attention_forward_gpu"),
    # A longer name that begins with an accepted one.
    ("void local_attention_forward_kernel" + BODY, ""),
])
def test_the_accepted_name_a_file_defines_is_found(m3: Assignment, text: str, found: str) -> None:
    own = [_file(HEADER, text, Origin.OVERLAY, "kernels_req_5/local_attention.cuh")]
    function, words = defined_function(local(m3), own, own)
    assert function == found
    if found:
        assert words == f"kernels_req_5/local_attention.cuh defines {found}"
    else:
        assert words.startswith("kernels_req_5/local_attention.cuh defines none of local_attention_forward_gpu, "
                                "local_attention_forward (the names the assignment accepts")


def test_a_definition_in_another_file_of_the_build_is_found_and_named(m3: Assignment) -> None:
    own = [_file(HEADER, '#include "local_attention_impl.cuh"\n')]
    other = _file("kernels/local_attention_impl.cuh", "void local_attention_forward" + BODY)
    assert defined_function(local(m3), own, [*own, other]) == \
        ("local_attention_forward", "kernels/local_attention_impl.cuh defines local_attention_forward")


def test_the_name_found_is_said_in_the_kernels_message(m3: Assignment) -> None:
    kernel = m3.kernel("req_5/local_attention")
    artifact = Artifact(kernel.name, BuildStatus.BUILT, Path("kg_kernel.so"), "", (), False, 0.0,
                        function_found="kernels_req_5/local_attention.cuh defines local_attention_forward")
    passed = [CaseResult(c.name, c.public, CaseStatus.PASSED, True, "") for c in kernel.cases]
    result = score_kernel(kernel, artifact, passed)
    assert result.status is KernelStatus.PASSED and result.message == \
        "all 6 cases passed (kernels_req_5/local_attention.cuh defines local_attention_forward)"
    failed = [CaseResult(c.name, c.public, CaseStatus.FAILED, False, "off") for c in kernel.cases]
    assert score_kernel(kernel, artifact, failed).message.endswith("(kernels_req_5/local_attention.cuh defines "
                                                                   "local_attention_forward)")


# --- nvcc builds of the reference and the samples ------------------------------------------------------------------

@pytest.fixture(scope="module")
def builds(m3: Assignment, cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Artifact]:
    """req_5's kernel of the reference and of every sample, built with nvcc (sm_90), by sample name."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    kernels = m3.kernels_of("req_5")
    built = {}
    for sample in [None, *variants(m3)]:
        name = sample.name if sample else "reference"
        folder = compose(m3, sample, tmp_path_factory.mktemp(name) / "submission")
        built[name] = build_submission(m3, folder, cache_dir, kernels, cuda_arch="sm_90")["req_5/local_attention"]
    return built


def test_reference_and_samples_build_and_say_which_name_they_define(m3: Assignment,
                                                                    builds: dict[str, Artifact]) -> None:
    assert builds["reference"].status is BuildStatus.BUILT, builds["reference"].message
    assert builds["reference"].function_found == "kernels_req_5/local_attention.cuh defines local_attention_forward_gpu"
    assert "kernels/local_attention.cuh (from kernels_req_5/local_attention.cuh)" in builds["reference"].files
    for sample in variants(m3):
        artifact = builds[sample.name]
        if sample.expect is KernelStatus.COMPILE_ERROR:
            continue
        assert artifact.status is BuildStatus.BUILT, (sample.name, artifact.message)
        name = "local_attention_forward" if sample.name == "course-shared-tiles" else "local_attention_forward_gpu"
        assert artifact.function_found == f"kernels_req_5/local_attention.cuh defines {name}", sample.name


def test_a_file_defining_neither_name_is_a_compile_error_naming_the_file_and_the_names(
        builds: dict[str, Artifact]) -> None:
    artifact = builds["mutant-defines-neither-name"]
    assert artifact.status is BuildStatus.COMPILE_ERROR and artifact.library is None and not artifact.function_found
    assert artifact.message.startswith("kernels_req_5/local_attention.cuh defines none of local_attention_forward_gpu, "
                                       "local_attention_forward (the names the assignment accepts"), artifact.message


def test_the_two_names_build_apart(builds: dict[str, Artifact]) -> None:
    # The shim calls the name found: two submissions differing in it never share a cached library.
    assert builds["course-serial-cpu-port"].library != builds["course-shared-tiles"].library


def test_a_file_defining_neither_name_loses_req_5_with_the_words(m3: Assignment, tmp_path: Path,
                                                                 cache_dir: Path) -> None:
    # The sources stage finds no accepted name before anything is compiled: the whole grade says so, GPU or not.
    sample = next(s for s in variants(m3) if s.name == "mutant-defines-neither-name")
    result = grade(compose(m3, sample, tmp_path / "submission"), m3, Options(cache_dir=cache_dir, kernels=("req_5",)))
    assert [k.name for k in result.kernels] == ["req_5/local_attention"] and result.max_score == 2
    kernel = result.kernels[0]
    assert kernel.status is KernelStatus.COMPILE_ERROR and kernel.score == 0
    assert kernel.message.startswith("kernels_req_5/local_attention.cuh defines none of local_attention_forward_gpu, "
                                     "local_attention_forward"), kernel.message
    req_5 = result.variants[0]
    assert req_5.name == "req_5" and req_5.score == 0
    assert req_5.message == "req_5 is all or nothing: local_attention did not build, so req_5 scores 0/2"
