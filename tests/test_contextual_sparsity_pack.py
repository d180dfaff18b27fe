"""The contextual-sparsity pack (python target, PyTorch on the CPU): top-k forward passes on the pack's trained
classifier and on a GPT-2 MLP block, graded through the pack's adapter.

The data set and training (NumPy) need no PyTorch and always run; grading needs it in the harness, and skips,
saying so, where this machine has none.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from grader.cases import Seed, make_case_inputs
from grader.options import Options
from grader.pipeline import grade
from grader.report import html
from grader.samples import Sample
from grader.assignment import Assignment, load_assignment
from grader.assignment.assignments import load_assignment_module

from conftest import needs_torch, variant_params
from pack_samples import Graded, assert_expected_verdicts, graded_once, kernel_of, sample_named

PACK = "contextual-sparsity"
WHOLE = ("mutant-topk-by-absolute-value", "mutant-topk-over-batch")  # graded on every kernel: see their tests
# Each kernel's width: its k at which top-k keeps everything (the dense pass); 4 heads for attention.
WIDTHS = {"classifier_logits": 64, "gpt2_mlp_topk": 192, "gpt2_attention_topk_heads": 4}


@pytest.fixture(scope="module")
def pack() -> Assignment:
    return load_assignment(PACK)


@pytest.fixture(scope="module")
def inputs(pack: Assignment) -> ModuleType:
    return load_assignment_module(pack.inputs_file)


@pytest.fixture(scope="module")
def reference(pack: Assignment) -> ModuleType:
    return pack.numpy_reference()


@pytest.fixture(scope="module")
def graded(pack: Assignment, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Graded:
    return graded_once(pack, tmp_path_factory, cache_dir, whole=WHOLE)


def cases_of(pack: Assignment, kernel: str) -> list[tuple[object, dict[str, np.ndarray]]]:
    found = next(k for k in pack.kernels if k.name == kernel)
    return [(case, make_case_inputs(pack, found, case, Seed(pack.public_seed))) for case in found.cases]


def test_the_spec_declares_four_torch_kernels_behind_a_provided_adapter(pack: Assignment) -> None:
    assert [k.name for k in pack.kernels] == ["classifier_logits", "classifier_accuracy", "gpt2_mlp_topk",
                                              "gpt2_attention_topk_heads"]
    assert pack.python_packages == ("torch",) and pack.target == "python"
    assert set(pack.provided) == {"sparsity_grading.py", "sparsity_models.py"}
    accuracy = next(k for k in pack.kernels if k.name == "classifier_accuracy")
    assert [b.name for b in accuracy.buffers if b.report] == ["k_over_width", "accuracy"]
    for name in pack.provided:  # the adapter students get is the one that grades them
        assert (pack.template_dir / name).read_text() == (pack.reference_dir / name).read_text()


def test_training_is_deterministic_and_cached_by_content(inputs: ModuleType, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = inputs.train_classifier(), inputs.train_classifier()
    assert all(np.array_equal(first[n], second[n]) for n in inputs.WEIGHT_NAMES)
    cached = inputs.classifier_weights(tmp_path)
    folder = inputs.model_folder(tmp_path)
    assert folder.parent == tmp_path / "models" / "contextual-sparsity" and (folder / "COMPLETE").is_file()
    assert all(np.array_equal(cached[n], first[n]) for n in inputs.WEIGHT_NAMES)

    def trained_again() -> None:
        raise AssertionError("trained again: the cached classifier should have been read")

    monkeypatch.setattr(inputs, "train_classifier", trained_again)
    again = inputs.classifier_weights(tmp_path)
    assert all(np.array_equal(again[n], first[n]) for n in inputs.WEIGHT_NAMES)
    # The key is the script's content: an edited copy of it trains a classifier of its own.
    edited = tmp_path / "edited" / "inputs.py"
    edited.parent.mkdir()
    edited.write_text(Path(inputs.__file__).read_text() + "\n# edited\n")
    assert load_assignment_module(edited).model_key() != inputs.model_key()


def test_the_task_rewards_width_and_the_classifier_learned_it(inputs: ModuleType, reference: ModuleType) -> None:
    weights = inputs.classifier_weights()
    x, labels = inputs.draw_samples(np.random.default_rng(11), 4000)
    arrays = {n: weights[n].reshape(-1) for n in inputs.WEIGHT_NAMES}
    accuracy = {k: float(np.mean(reference.topk_logits(x=x, k=k, **arrays).argmax(1) == labels))
                for k in (4, 16, 64)}
    assert accuracy[64] > 0.9  # dense: the task is learned
    assert accuracy[4] < accuracy[64] - 0.1  # k/width 1/16 costs accuracy: the study has something to show
    np.testing.assert_array_equal(reference.topk_logits(x=x, k=64, **arrays), inputs.dense_logits(weights, x))


def naive_topk_rows(h: np.ndarray, k: int) -> np.ndarray:
    """Each row's k largest values kept (a sort per row, Python loops), the others zeroed."""
    out = np.zeros_like(h)
    for i, row in enumerate(h):
        for j in sorted(range(len(row)), key=lambda j: -row[j])[:k]:
            out[i, j] = row[j]
    return out


def test_the_reference_is_a_top_k_loop_per_input(pack: Assignment, reference: ModuleType) -> None:
    for case, arrays in cases_of(pack, "classifier_logits"):
        batch, k = case.params["batch"], case.params["k"]
        w = {n: arrays[n] for n in ("w1", "b1", "w2", "b2", "w3", "b3")}
        h = naive_topk_rows(np.maximum(arrays["x"].reshape(batch, 16) @ w["w1"].reshape(64, 16).T + w["b1"], 0), k)
        h = naive_topk_rows(np.maximum(h @ w["w2"].reshape(64, 64).T + w["b2"], 0), k)
        naive = h @ w["w3"].reshape(8, 64).T + w["b3"]
        gold = reference.classifier_logits(**arrays, **case.params)["logits"]
        np.testing.assert_allclose(gold, naive.reshape(-1), rtol=1e-13, atol=1e-13, err_msg=case.name)
    for case, arrays in cases_of(pack, "gpt2_mlp_topk"):
        tokens, k = case.params["batch"] * case.params["T"], case.params["k"]
        h = reference.gelu(arrays["x"].reshape(tokens, 48) @ arrays["w_fc"].reshape(192, 48).T + arrays["b_fc"])
        naive = naive_topk_rows(h, k) @ arrays["w_proj"].reshape(48, 192).T + arrays["b_proj"]
        gold = reference.gpt2_mlp_topk(**arrays, **case.params)["out"]
        np.testing.assert_allclose(gold, naive.reshape(-1), rtol=1e-13, atol=1e-13, err_msg=case.name)
    for case, arrays in cases_of(pack, "gpt2_attention_topk_heads"):
        batch, T, k = case.params["batch"], case.params["T"], case.params["k"]
        naive = naive_attention(arrays, batch, T, k)
        gold = reference.gpt2_attention_topk_heads(**arrays, **case.params)["out"]
        np.testing.assert_allclose(gold, naive.reshape(-1), rtol=1e-12, atol=1e-13, err_msg=case.name)


def naive_attention(arrays: dict[str, np.ndarray], batch: int, T: int, k: int) -> np.ndarray:
    """GPT-2's causal attention token by token, head by head (4 heads of 12), each token keeping the k heads whose
    output has the largest norm (a sort per token), c_proj of the heads side by side."""
    w_attn, b_attn = arrays["w_attn"].reshape(144, 48), arrays["b_attn"]
    x = arrays["x"].reshape(batch, T, 48)
    out = np.zeros((batch, T, 48))
    for b in range(batch):
        qkv = x[b] @ w_attn.T + b_attn
        for t in range(T):
            heads = []
            for h in range(4):
                q, keys, values = (qkv[:, i * 48 + 12 * h:i * 48 + 12 * (h + 1)] for i in range(3))
                scores = [float(q[t] @ keys[s]) / np.sqrt(12) for s in range(t + 1)]
                top = max(scores)
                weights = [np.exp(s - top) for s in scores]
                heads.append(sum(w * values[s] for s, w in enumerate(weights)) / sum(weights))
            kept = sorted(range(4), key=lambda h: -np.linalg.norm(heads[h]))[:k]
            joined = np.concatenate([heads[h] if h in kept else np.zeros(12) for h in range(4)])
            out[b, t] = joined @ arrays["w_proj"].reshape(48, 48).T + arrays["b_proj"]
    return out


def kth_gaps(h: np.ndarray, k: int) -> np.ndarray:
    """Per row, the k-th largest value less the (k+1)-th, where the k-th is positive (0s tie harmlessly)."""
    ordered = -np.sort(-h, axis=1)
    gaps = ordered[:, k - 1] - ordered[:, k]
    return gaps[ordered[:, k - 1] > 0]


def test_no_positive_ties_at_the_kth_place_and_the_tie_case_ties_at_zero(pack: Assignment,
                                                                       reference: ModuleType) -> None:
    """Any correct top-k picks the gold's neurons: the smallest gap between a k-th and (k+1)-th positive output is
    far above float64 rounding (~1e-15 of the values), on every case; relu-zero-ties does tie at 0."""
    smallest = np.inf
    for case, arrays in cases_of(pack, "classifier_logits"):
        batch, k = case.params["batch"], case.params["k"]
        if k >= 64:
            continue
        h1 = np.maximum(arrays["x"].reshape(batch, 16) @ arrays["w1"].reshape(64, 16).T + arrays["b1"], 0)
        h2 = np.maximum(reference.keep_topk(h1, k) @ arrays["w2"].reshape(64, 64).T + arrays["b2"], 0)
        for h in (h1, h2):
            smallest = min(smallest, kth_gaps(h, k).min(initial=np.inf))
        if case.name == "relu-zero-ties":  # the first layer is cut; the second then ties at 0 across the k-th place
            assert ((h1 > 0).sum(axis=1) > k).all() and ((h2 > 0).sum(axis=1) < k).all()
    for case, arrays in cases_of(pack, "gpt2_mlp_topk"):
        tokens, k = case.params["batch"] * case.params["T"], case.params["k"]
        if k < 192:
            h = reference.gelu(arrays["x"].reshape(tokens, 48) @ arrays["w_fc"].reshape(192, 48).T + arrays["b_fc"])
            ordered = -np.sort(-h, axis=1)
            smallest = min(smallest, (ordered[:, k - 1] - ordered[:, k]).min())
    for case, arrays in cases_of(pack, "gpt2_attention_topk_heads"):
        batch, T, k = case.params["batch"], case.params["T"], case.params["k"]
        if k < 4:
            norms = np.linalg.norm(reference.attention_heads(arrays["x"].reshape(batch, T, 48), arrays["w_attn"],
                                                             arrays["b_attn"]), axis=-1)
            ordered = -np.sort(-norms, axis=1)  # per token, over the heads
            smallest = min(smallest, (ordered[:, k - 1] - ordered[:, k]).min())
    assert smallest > 1e-9, smallest


def test_the_dense_pass_fails_every_case_but_the_dense_ones(pack: Assignment, reference: ModuleType) -> None:
    """A top-k that is computed but never applied is the dense pass: its outputs (the gold at k = width) are off by
    far more than the tolerance on every case with k < width, the held-out accuracy's among them."""
    dense_cases = []
    for kernel, width in WIDTHS.items():
        for case, arrays in cases_of(pack, kernel):
            gold = getattr(reference, kernel)(**arrays, **case.params)
            dense = getattr(reference, kernel)(**arrays, **{**case.params, "k": width})
            (name,) = gold
            if case.params["k"] >= width:
                dense_cases.append(case.name)
                np.testing.assert_array_equal(gold[name], dense[name])
            else:
                assert np.abs(gold[name] - dense[name]).max() > 1e-3, (kernel, case.name)
    assert dense_cases == ["dense-batch-1", "dense-one-token", "all-heads"]  # k = width: one per kernel
    (case, arrays), = cases_of(pack, "classifier_accuracy")
    gold = reference.classifier_accuracy(**arrays, **case.params)["accuracy"]
    dense = reference.classifier_accuracy(**{**arrays, "ks": np.full_like(arrays["ks"], 64)}, **case.params)
    assert np.abs(gold - dense["accuracy"]).max() > 0.1


def test_held_out_labels_do_not_hang_on_rounding(pack: Assignment, reference: ModuleType) -> None:
    """The accuracy's gold is exact for any correct top-k: no sample's two largest logits are within 1e-9."""
    (case, arrays), = cases_of(pack, "classifier_accuracy")
    w = {n: arrays[n] for n in ("w1", "b1", "w2", "b2", "w3", "b3")}
    for k in arrays["ks"]:
        logits = np.sort(reference.topk_logits(x=arrays["x"].reshape(-1, 16), k=int(k), **w), axis=1)
        assert (logits[:, -1] - logits[:, -2]).min() > 1e-9, k


@needs_torch
def test_reference_scores_full_marks_far_inside_the_tolerance(graded: Graded) -> None:
    result = graded(None)
    assert result.score == result.max_score == 12
    assert all(c.passed for k in result.kernels for c in k.cases)
    # float64 on both sides: the worst element uses a tiny share of the tolerance (assignment.toml's margin).
    assert max(c.tolerance_used for k in result.kernels for c in k.cases) < 1e-3
    (held_out,) = kernel_of(result, "classifier_accuracy").cases
    assert held_out.reported["k_over_width"] == [1 / 16, 1 / 8, 1 / 4, 1 / 2, 1]
    accuracy = held_out.reported["accuracy"]
    assert accuracy[-1] > 0.9 and accuracy[0] < accuracy[-1] - 0.1


@needs_torch
def test_the_html_report_draws_accuracy_against_k_over_width(graded: Graded, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the report draws its figures with matplotlib")
    from grader.report.curves import curves_of

    result = graded(None)
    (curve,) = curves_of(result)
    assert (curve.kernel, curve.case, curve.x_name, curve.y_name) == ("classifier_accuracy", "held-out",
                                                                      "k_over_width", "accuracy")
    assert [x for x, _ in curve.points] == [1 / 16, 1 / 8, 1 / 4, 1 / 2, 1] and curve.passed
    assert curve.gold_points == curve.points  # gold's curve is drawn too; the reference's lies on it
    page = html.render(result)
    without = html.render(dataclasses.replace(result, kernels=[dataclasses.replace(k, cases=[
        dataclasses.replace(c, reported={}) for c in k.cases]) for k in result.kernels]))
    assert page.count("<svg") == without.count("<svg") + 1 and "accuracy against k over width" in page
    assert "accuracy against" not in without


@needs_torch
def test_template_scores_zero_and_says_topk_is_yours_to_write(pack: Assignment, cache_dir: Path) -> None:
    # Two kernels' public cases (each failed case costs a fresh harness, which imports PyTorch again).
    result = grade(pack.template_dir, pack, Options(cache_dir=cache_dir, public_only=True,
                                                    kernels=("classifier_accuracy", "gpt2_mlp_topk")))
    assert result.score == 0 and [k.name for k in result.kernels] == ["classifier_accuracy", "gpt2_mlp_topk"]
    for kernel in result.kernels:
        assert kernel.cases and all(not c.passed for c in kernel.cases), kernel.message
        assert "is yours to write" in kernel.cases[0].message, kernel.cases[0].message


@needs_torch
@pytest.mark.parametrize("sample", variant_params(PACK))
def test_each_sample_fails_exactly_its_expected_cases(sample: Sample, graded: Graded) -> None:
    assert_expected_verdicts(graded(sample), sample)


@needs_torch
def test_a_top_k_computed_and_never_applied_passes_only_the_dense_cases(graded: Graded, pack: Assignment) -> None:
    result = graded(sample_named(pack, "mutant-topk-computed-not-applied"))
    for kernel in result.kernels:
        width = WIDTHS.get(kernel.name, 0)  # the accuracy's one case has ks below the width
        assert [c.name for c in kernel.cases if c.passed] == \
            [c.name for c in pack.kernel(kernel.name).cases if c.params.get("k", 0) >= width > 0], kernel.name
    assert result.score < 0.15 * result.max_score


@needs_torch
def test_by_absolute_value_is_right_after_relu_and_wrong_after_gelu(graded: Graded, pack: Assignment) -> None:
    result = graded(sample_named(pack, "mutant-topk-by-absolute-value"))
    assert [(k.name, k.score == k.max_score) for k in result.kernels] == [
        ("classifier_logits", True), ("classifier_accuracy", True), ("gpt2_mlp_topk", False),
        ("gpt2_attention_topk_heads", True)]  # a head's output norm is never negative


@needs_torch
def test_one_top_k_for_the_batch_is_caught_on_the_accuracy_too(graded: Graded, pack: Assignment) -> None:
    result = graded(sample_named(pack, "mutant-topk-over-batch"))
    (held_out,) = kernel_of(result, "classifier_accuracy").cases
    assert not held_out.passed and held_out.reported["accuracy"][0] < 0.5  # its curve, drawn red in the report
    assert held_out.reported_gold["accuracy"][0] > 0.5  # beside gold's, which the caption gives too
    assert "; gold: 0.0625: " in html.render(result)
    assert [c.name for c in kernel_of(result, "gpt2_mlp_topk").cases if not c.passed] == [
        "eighth-batch-4", "k1-batch-4", "half-batch-4"]
    assert kernel_of(result, "gpt2_attention_topk_heads").score == 2  # its attention is the reference's
