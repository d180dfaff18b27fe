"""The forward-pass check on the CPU: the spec's [forward], the layout and the steps, and the whole check
(harness, composition, swap-in, logits, generation, compare, score) on the tiny C++ GPT-2 pack."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from grader.boundary.protocol import Event, Plan, PlannedCall, Sealed, event_line, seal_of
from grader.checks.forward.check import composition_of
from grader.checks.forward.layout import (GRADED, activation_tensors, composition, parameter_tensors, regions,
                                          steps_of, total)
from grader.checks.forward.spec import FORWARD_KERNELS, Forward
from grader.checks.forward.verdict import sealed_output
from grader.errors import SpecError
from grader.options import Options
from grader.pipeline import grade
from grader.report.hints import kernel_hints
from grader.results import Result
from grader.runner import CallOutcome
from grader.assignment import load_assignment
from grader.status import CallStatus
from grader.store import upgraded_result_json

from conftest import copy_assignment
from forward_pack import make_forward_pack, make_variant_pack, mutant, submission

GPT2 = Forward(weight=0.0, B=2, T=32)  # GPT-2 124M's shapes


# The spec

def test_gpt2_m1_declares_the_forward_check_unscored_and_m2_inherits_one_per_variant() -> None:
    m1, m2 = load_assignment("gpt2-m1"), load_assignment("gpt2-m2")
    forward = m1.check("forward")
    assert (forward.C, forward.NH, forward.L, forward.Vp) == (768, 12, 12, 50304)  # check() raises where none
    assert [(k.name, k.weight) for k in m1.check_kernels] == [("forward", 0.0)]
    assert m2.check("forward") == forward
    assert [k.name for k in m2.check_kernels] == ["forward"] + [f"{v.name}/forward" for v in m2.variants]
    assert all(k.variant == k.name.split("/")[0] for k in m2.check_kernels[1:])
    # A variant's check composes that variant's six kernels.
    assert [k.name for k in m2.composed_by(m2.kernel("req_1/forward"))] == [f"req_1/{n}" for n in FORWARD_KERNELS]


def _with_forward(tmp_path: Path, table: str) -> Path:
    pack = copy_assignment("gpt2-m1", tmp_path)
    spec = pack / "assignment.toml"
    text = spec.read_text()
    start = text.index("[forward]")
    end = text.index("[[kernels]]", start)
    spec.write_text(text[:start] + table + "\n" + text[end:])
    return pack


@pytest.mark.parametrize("table, words", [
    ("[forward]\nweight = 0\nT = 32", "missing key 'B'"),
    ("[forward]\nB = 1\nT = 32\nwidth = 3", "unknown key(s) ['width']"),
    ("[forward]\nB = 1\nT = 32\ngenerate = 40", "prompt + generate <= T (32)"),
    ("[forward]\nB = 1\nT = 32\nNH = 5", "C (768) must be a multiple of NH (5)"),
    ("[forward]\nB = 1\nT = 32\nVp = 100", "must be at least V (50257)"),
    ("[forward]\nB = 1\nT = 2048", "must not exceed maxT (1024)"),
    ("[forward]\nB = 1\nT = 32\ntolerances = { softmax = { atol = 1, rtol = 1 } }", "names 'softmax'"),
    ("[forward]\nB = 1\nT = 32\nlogits = { max = 1 }", "expected max_abs and rmse"),
])
def test_a_bad_forward_table_is_named_with_its_key(tmp_path: Path, table: str, words: str) -> None:
    pack = _with_forward(tmp_path, table)
    with pytest.raises(SpecError) as error:
        load_assignment(pack)
    assert "[forward]" in str(error.value) and words in str(error.value)


def test_a_kernel_the_composition_cannot_call_is_named(tmp_path: Path) -> None:
    pack = copy_assignment("gpt2-m1", tmp_path)
    spec = pack / "assignment.toml"
    text = spec.read_text()
    gelu = text.index('name = "gelu"')
    spec.write_text(text[:gelu] + text[gelu:].replace("const float* inp, int N", "const float* x, int N")
                    .replace("buffers.inp =", "buffers.x ="))
    with pytest.raises(SpecError) as error:
        load_assignment(pack)
    assert "kernel 'gelu' cannot be composed" in str(error.value) and "(out, x, N)" in str(error.value)


# The layout and the steps

def test_activations_are_the_courses_tensors_in_order_without_gaps_or_overlap() -> None:
    tensors = activation_tensors(GPT2)
    assert [t.name for t in tensors] == [
        "encoded", "ln1", "ln1_mean", "ln1_rstd", "atty", "att", "attproj", "residual2", "ln2", "ln2_mean",
        "ln2_rstd", "fch", "fch_gelu", "fcproj", "residual3", "lnf", "lnf_mean", "lnf_rstd", "losses", "qkvr", "output"]
    for before, after in zip(tensors, tensors[1:]):
        assert after.offset == before.offset + before.total
    B, T, C, NH, L, Vp = 2, 32, 768, 12, 12, 50304
    expected = B * T * C + L * (B * T * (7 * C + 4 + 8 * C + 3 * C) + B * NH * T * T) + B * T * (C + 3) \
        + B * T * max(3 * C, NH * T, Vp)
    assert total(tensors) == expected
    assert next(t for t in tensors if t.name == "att").shape == (B, NH, T, T)


def test_parameters_are_gpt2_124m() -> None:
    tensors = parameter_tensors(GPT2)
    assert [t.name for t in tensors][:4] == ["wte", "wpe", "ln1w", "ln1b"] and tensors[-1].name == "lnfb"
    C, L = 768, 12
    per_layer = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C
    assert total(tensors) == 50304 * C + 1024 * C + L * per_layer + 2 * C == 124_475_904


def test_the_steps_follow_the_courses_order_and_stay_inside_their_tensors() -> None:
    m1 = load_assignment("gpt2-m1")
    steps = steps_of(GPT2, {k.name: k for k in m1.kernels})
    assert len(steps) == 123 == GPT2.steps
    assert [s.label for s in steps[1:11]] == ["ln1", "qkv", "attention", "attproj", "residual2", "ln2", "fch", "gelu",
                                              "fcproj", "residual3"]
    assert [s.label for s in steps[-2:]] == ["lnf", "logits"]
    assert steps[23].words(123) == "layer 3's attention (step 24 of 123)"
    assert steps[-1].words(123) == "the vocabulary head's matmul (logits) (step 123 of 123)"
    tensors = {t.name: t for t in activation_tensors(GPT2)}
    for step in steps:
        for argument in step.plan.arguments:
            if getattr(argument, "space", None) != "activations" or argument.null:
                continue
            inside = [t for t in tensors.values() if t.offset <= argument.offset < t.offset + t.total]
            assert len(inside) == 1
            tensor = inside[0]
            # Within one layer's slice of its tensor.
            layer_start = tensor.offset + (argument.offset - tensor.offset) // tensor.size * tensor.size
            assert argument.offset + argument.count <= layer_start + tensor.size, (step.words(123), argument.name)
    head = steps[-1].plan.arguments
    assert next(a for a in head if a.name == "bias").null and next(a for a in head if a.name == "weight").count == \
        50304 * 768
    # Layer 2's first layernorm reads layer 1's second residual.
    layer2_ln1 = next(a for a in steps[11].plan.arguments if a.name == "inp")
    assert layer2_ln1.offset == tensors["residual3"].offset


def test_regions_name_every_activation_slice_once() -> None:
    named = regions(GPT2)
    assert sum(r.count for r in named) == total(activation_tensors(GPT2))
    assert named[1].name == "layer 1's ln1" and named[1].gold and not next(r for r in named if r.name == "output").gold
    assert {r.name.split("'s ")[-1] for r in named if r.gold} == set(GRADED)


def test_composition_passes_each_kernel_the_courses_parameters() -> None:
    m1 = load_assignment("gpt2-m1")
    for kernel, _, _, pointers, scalars in composition(GPT2):
        names = [p.name for p in m1.kernel(kernel).signature.parameters]
        assert sorted(names) == sorted([*pointers, *scalars])


# The protocol

def test_a_forward_plan_survives_its_json() -> None:
    m1 = load_assignment("gpt2-m1")
    steps = steps_of(GPT2, {k.name: k for k in m1.kernels})
    plan = composition_of(GPT2, "layer-by-layer", steps[:3], {"matmul": "/x/matmul.so"}, Path("/in"))
    document = Plan("cuda", "grader.boundary.cuda_device", False, None,
                    (PlannedCall("forward", "layer-by-layer", "/lib", "/in", "/out", (), plan),))
    assert Plan.from_json(document.to_json()) == document


def _ended(events: list[dict]):
    from grader.runner.watch import HarnessExit

    return HarnessExit(tuple(events), "exited with status 0", None, None, "", None, "")


def _calls(forward: bool):
    from grader.runner.plan import Call

    m1 = load_assignment("gpt2-m1")
    check = m1.check_kernels[0]
    steps = steps_of(GPT2, {k.name: k for k in m1.kernels})[:2]
    plan = composition_of(GPT2, "layer-by-layer", steps, {}, Path("/in")) if forward else None
    return [Call(check if forward else m1.kernel("gelu"), check.cases[0], Path("/lib"), Path("/in"), Path("/out"),
                 plan)]


def test_seals_are_kept_on_a_forward_calls_outcome_and_forged_ones_elsewhere_void_the_kernel() -> None:
    from grader.runner.events import record

    sealed = json.loads(event_line(Event.SEALED, 0, **Sealed("step-001", "ab").fields()))
    events = [{"event": "hello"}, {"event": "start", "index": 0}, sealed, {"event": "end", "index": 0, "status": "ok"},
              {"event": "finished"}]
    outcomes: dict[int, CallOutcome] = {}
    record(_ended(events), None, _calls(True), 0, 1, outcomes)
    assert outcomes[0].status == CallStatus.OK and outcomes[0].seals == (Sealed("step-001", "ab"),)
    outcomes = {}
    record(_ended(events), None, _calls(False), 0, 1, outcomes)
    assert outcomes[0].tampered


@pytest.mark.parametrize("files", [["step-001", "step-001"], ["step-002"], ["step-001", "step-002", "step-001"]])
def test_a_seal_out_of_the_plans_order_voids_the_check(files: list[str]) -> None:
    # A rewritten output sealed again, or a seal forged ahead of the harness's, breaks the one order it seals in.
    from grader.runner.events import record

    sealed = [json.loads(event_line(Event.SEALED, 0, **Sealed(f, "ab").fields())) for f in files]
    events = [{"event": "hello"}, {"event": "start", "index": 0}, *sealed, {"event": "end", "index": 0, "status": "ok"},
              {"event": "finished"}]
    outcomes: dict[int, CallOutcome] = {}
    record(_ended(events), None, _calls(True), 0, 1, outcomes)
    assert outcomes[0].tampered and outcomes[0].status == CallStatus.CRASHED


def test_an_output_changed_after_its_seal_is_no_output(tmp_path: Path) -> None:
    array = np.arange(6, dtype=np.float32)
    np.save(tmp_path / "step-001.npy", array)
    outcome = CallOutcome("forward", "layer-by-layer", CallStatus.OK, output_dir=tmp_path)
    seal = Sealed("step-001", seal_of(array.tobytes()))
    assert np.array_equal(sealed_output(outcome, seal), array)
    np.save(tmp_path / "step-001.npy", array + 1)  # a thread left running rewrites it
    assert "changed after the step returned" in sealed_output(outcome, seal)  # type: ignore[operator]
    assert sealed_output(outcome, None) == "no output was saved"


# The whole check on the CPU

@pytest.fixture(scope="module")
def cpu_pack(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("gpt2-cpu")
    return make_forward_pack(root), root


def _grade(cpu_pack, name: str, cache_dir: Path) -> Result:
    assignment, root = cpu_pack
    folder = assignment.reference_dir if name == "reference" else submission(root / "submissions", name,
                                                                                    mutant(name))
    return grade(folder, assignment, Options(cache_dir=cache_dir))


def _by_name(result: Result) -> dict:
    return {k.name: k for k in result.kernels}


def test_serial_kernels_pass_every_pass_of_the_forward_check(cpu_pack, cache_dir: Path) -> None:
    result = _grade(cpu_pack, "reference", cache_dir)
    forward = _by_name(result)["forward"]
    assert [(c.name, c.status) for c in forward.cases] == [("layer-by-layer", "passed"), ("logits", "passed"),
                                                           ("generation", "passed")]
    assert result.score == result.max_score == 11
    assert "all 23 steps within tolerance" in forward.cases[0].message
    assert "the reference's top-two logit gaps" in forward.cases[2].message


def test_a_shape_keyed_weight_cache_passes_its_cases_and_fails_from_layer_2(cpu_pack, cache_dir: Path) -> None:
    result = _grade(cpu_pack, "mutant-matmul-shape-keyed-transpose-cache", cache_dir)
    kernels = _by_name(result)
    assert kernels["matmul"].status == "passed"
    layers = kernels["forward"].cases[0]
    assert layers.status == "failed"
    assert layers.message.startswith("layer 2's QKV matmul (step 13 of 23): ")
    assert "(4 of 23 steps failed)" in layers.message  # layer 2's four matmuls; the head has a shape of its own
    assert kernels["forward"].cases[1].status == "failed"  # end to end too
    assert "keeps state between calls" in kernel_hints(kernels["forward"])[0]
    assert result.score == result.max_score - kernels["forward"].max_score + kernels["forward"].score
    assert all(k.score == k.max_score for name, k in kernels.items() if name != "forward")


def test_a_crashing_kernel_costs_its_own_cases_and_the_forward_check(cpu_pack, cache_dir: Path) -> None:
    kernels = _by_name(_grade(cpu_pack, "hostile-attention-segfault", cache_dir))
    assert kernels["attention"].status == "crashed"
    forward = kernels["forward"]
    assert forward.status == "crashed" and forward.score == 0
    assert forward.cases[0].message.startswith("during layer 1's attention (step 4 of 23): ")
    assert "SIGSEGV" in forward.cases[0].message and forward.cases[0].signal == "SIGSEGV"
    assert all(k.score == k.max_score for name, k in kernels.items() if name not in ("attention", "forward"))


def test_a_matmul_summed_in_another_order_passes(cpu_pack, cache_dir: Path) -> None:
    result = _grade(cpu_pack, "course-matmul-reversed-sum", cache_dir)
    assert result.score == result.max_score, [k.message for k in result.kernels]


def test_a_write_past_a_slice_names_the_tensor_it_landed_in(cpu_pack, cache_dir: Path) -> None:
    layers = _by_name(_grade(cpu_pack, "mutant-residual-writes-a-row-past", cache_dir))["forward"].cases[0]
    assert layers.status == "failed"
    assert layers.message.startswith("layer 1's first residual (step 6 of 23): wrote outside its arguments, "
                                     "into layer 2's residual2")


def test_an_output_rewritten_after_its_seal_fails_the_step(cpu_pack, cache_dir: Path) -> None:
    kernels = _by_name(_grade(cpu_pack, "hostile-gelu-rewrites-sealed-outputs", cache_dir))
    layers = kernels["forward"].cases[0]
    assert layers.status == "failed"
    assert "its saved output was changed after the step returned" in layers.message, layers.message
    assert kernels["gelu"].status == "passed"  # its own case has no saved step to rewrite


def test_a_kernel_that_loops_costs_the_check_its_time_limit_once(tmp_path: Path, cache_dir: Path) -> None:
    assignment = make_forward_pack(tmp_path, time_limit=2.0)
    # The baseline, on this machine as loaded as it is now: the same pack's serial kernels, which never loop.
    baseline = grade(submission(tmp_path / "submissions", "serial"), assignment, Options(cache_dir=cache_dir))
    assert baseline.score == baseline.max_score
    folder = submission(tmp_path / "submissions", "looping", mutant("hostile-gelu-infinite-loop"))
    result = grade(folder, assignment, Options(cache_dir=cache_dir))
    kernels = _by_name(result)
    assert kernels["gelu"].status == "timeout"
    forward = kernels["forward"]
    assert forward.status == "timeout" and forward.score == 0
    # The first pass (end to end) timed out; the budget of all three was then spent.
    assert forward.cases[1].status == "timeout"
    assert [c.status for c in (forward.cases[0], forward.cases[2])] == ["not_run", "not_run"]
    assert "time budget (2 s) was spent" in forward.cases[0].message
    # The statuses above prove the one pass; this, that the limits acted in time at the machine's pace: running
    # took what they allow (gelu's budget of 4 s, the check's 2 s) past the baseline's run, whose harness
    # start-ups it at most doubles. A limit that never acts hangs the grade instead.
    assert result.stages["run"] < 2 * baseline.stages["run"] + 4 + 2 + 1, (result.stages, baseline.stages)
    assert all(k.score == k.max_score for name, k in kernels.items() if name not in ("gelu", "forward"))


def test_a_build_failure_costs_the_forward_check_without_running_it(cpu_pack, cache_dir: Path) -> None:
    assignment, root = cpu_pack
    folder = submission(root / "submissions", "broken-gelu", {"gelu.h": "void gelu_forward(float* out, const float* inp, int N) { nope; }"})
    kernels = _by_name(grade(folder, assignment, Options(cache_dir=cache_dir)))
    assert kernels["gelu"].status == "compile_error"
    assert kernels["forward"].status == "not_run" and kernels["forward"].message == "not run: gelu did not compile"
    assert kernels["matmul"].score == kernels["matmul"].max_score


def test_a_variant_whose_forward_check_fails_loses_that_variant_only(cpu_pack, cache_dir: Path) -> None:
    _, root = cpu_pack
    assignment = make_variant_pack(root)
    folder = submission(root / "submissions", "m2-cached-matmul")
    (folder / "kernels_req_0").mkdir()
    (folder / "kernels_req_0" / "matmul.h").write_text(mutant("mutant-matmul-shape-keyed-transpose-cache")["matmul.h"])
    result = grade(folder, assignment, Options(cache_dir=cache_dir))
    kernels = _by_name(result)
    assert kernels["req_0/matmul"].status == "passed" and kernels["forward"].status == "passed"
    assert kernels["req_0/forward"].status == "failed"
    (variant,) = result.variants
    assert variant.score == 0 and "req_0/forward" in variant.kernels
    assert "forward failed 2 of 3 cases" in variant.message or "forward failed 3 of 3 cases" in variant.message


def test_grading_one_kernel_runs_no_forward_check(cpu_pack, cache_dir: Path) -> None:
    assignment, root = cpu_pack
    result = grade(assignment.reference_dir, assignment, Options(cache_dir=cache_dir, kernels=("matmul",)))
    assert [k.name for k in result.kernels] == ["matmul"]
    everything = grade(assignment.reference_dir, assignment, Options(cache_dir=cache_dir, kernels=("forward",)))
    assert "forward" in _by_name(everything) and len(everything.kernels) == 7


def test_the_forward_result_survives_the_store_format(cpu_pack, cache_dir: Path) -> None:
    result = _grade(cpu_pack, "reference", cache_dir)
    assert Result.from_json(result.to_json()) == result
    assert dataclasses.asdict(_by_name(result)["forward"])["cases"][1]["max_abs_err"] < 1e-4
    # The check says what it is; a result stored before it did is known by the check's name (the store's one-time
    # upgrade, layout 4, rewrites it so).
    assert [k.name for k in result.kernels if k.check == "forward"] == ["forward"]
    old = json.loads(result.to_json())
    for kernel in old["kernels"]:
        del kernel["check"]
    assert Result.from_dict(json.loads(upgraded_result_json(json.dumps(old)))) == result


def test_a_compile_only_grade_reports_the_check_not_run_and_draws_no_weights(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Where nothing can run (KERNEL_GRADER_NO_GPU, or no NVIDIA driver), half a gigabyte of weights is not drawn."""
    from grader.device import unavailable_reason

    monkeypatch.setenv("KERNEL_GRADER_NO_GPU", "1")
    unavailable_reason.cache_clear()
    try:
        gpt2 = load_assignment("gpt2-m1")
        result = grade(gpt2.template_dir, gpt2, Options(cache_dir=tmp_path / "cache"))
    finally:
        unavailable_reason.cache_clear()
    forward = next(k for k in result.kernels if k.name == "forward")
    assert forward.status == "not_run" and [c.status for c in forward.cases] == ["not_run"] * 3, forward.message
    assert "KERNEL_GRADER_NO_GPU is set" in forward.cases[0].message
    assert not (tmp_path / "cache" / "forward").exists()
