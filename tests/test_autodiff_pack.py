"""The autodiff-reverse pack (python target, CPU): reverse mode in simpleautodiff, graded through the pack's adapter.

Real builds and real harnesses for the reference, the template (the course's own repository) and every sample; the
gold checked against central finite differences, the intermediate nodes' too; the adapter's words where a
submission lacks what the handout names; the package's documented behaviour (reset, twice, after adding nodes, no
recursion) in-process.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Callable

import numpy as np
import pytest

from grader.cases import Seed, make_case_inputs
from grader.options import Options
from grader.pipeline import grade
from grader.report.hints import kernel_hints
from grader.samples import Sample, compose
from grader.assignment import Assignment, load_assignment

from conftest import variant_params
from pack_samples import Graded, assert_expected_verdicts, graded_once, kernel_of, sample_named

PACK = "autodiff-reverse"
# Graded on every kernel: what each loses beside its own kernel is asserted below.
WHOLE = ("mutant-forward-sweep-per-input", "course-fork-recursive-backward", "mutant-inputs-only-partial-derivative")
MISMATCH = "raised autodiff_grading.HandoutMismatch: "  # the adapter's words, where the handout's names are missing
NOT_READ = ("`partial_derivative` of every input is {} `backward(output)`: the assignment reads d output / d node "
            "from each node's `partial_derivative`")


@pytest.fixture(scope="module")
def pack() -> Assignment:
    return load_assignment(PACK)


@pytest.fixture(scope="module")
def graded(pack: Assignment, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Graded:
    return graded_once(pack, tmp_path_factory, cache_dir, whole=WHOLE)


def test_reference_scores_full_marks_in_one_sweep(graded: Graded) -> None:
    result = graded(None)
    assert result.score == result.max_score == 10
    assert all(c.passed for k in result.kernels for c in k.cases)
    evidence = kernel_of(result, "reverse_mode_evidence")
    assert "1 sweep(s)" in evidence.log and "on 3,200 nodes and 1,000 inputs" in evidence.log, evidence.log


def test_the_template_is_the_courses_repository_and_is_told_that_backward_is_missing(pack: Assignment,
                                                                                      cache_dir: Path) -> None:
    template = pack.template_dir
    assert sorted(p.relative_to(template).as_posix() for p in template.rglob("*.py")) == [
        "autodiff_grading.py", "main.py", "simpleautodiff/__init__.py", "simpleautodiff/simpleautodiff.py"]
    assert (template / "simpleautodiff" / "__init__.py").read_text().startswith("from .simpleautodiff import *\n")
    handout = (template / "readme.md").read_text()
    assert "`simpleautodiff.backward(output)`" in handout and "each node's `partial_derivative`" in handout
    result = grade(template, pack, Options(cache_dir=cache_dir, public_only=True))
    assert result.score == 0
    for kernel in result.kernels:
        assert kernel.status == "crashed" and kernel.cases, kernel.message
        for case in kernel.cases:
            assert case.message.startswith(MISMATCH + "simpleautodiff has no `backward`: the assignment calls "
                                           "`simpleautodiff.backward(output)`"), case.message


@pytest.mark.parametrize("sample", variant_params(PACK))
def test_each_sample_fails_exactly_its_expected_cases(sample: Sample, graded: Graded) -> None:
    assert_expected_verdicts(graded(sample), sample)


@pytest.mark.parametrize("name", ["mutant-forward-sweep-per-input", "hostile-adapter-edited-to-hide-sweeps"])
def test_a_sweep_per_input_gets_the_numbers_right_and_loses_only_the_evidence(name: str, graded: Graded,
                                                                             pack: Assignment) -> None:
    result = graded(sample_named(pack, name))
    if name in WHOLE:  # forward mode never gives d output / d node of the other nodes: node_derivatives is lost too
        assert [(k.name, k.score == k.max_score) for k in result.kernels] == [
            ("gradients", True), ("node_derivatives", False), ("backward_again", True),
            ("reverse_mode_evidence", False)]
    evidence = kernel_of(result, "reverse_mode_evidence")
    (case,) = evidence.cases
    # The gradients are within tolerance: the one buffer named is the sweep count, with its figure.
    assert case.message.startswith("sweeps: 1 of 1 elements outside tolerance"), case.message
    assert "grads" not in case.message
    sweeps = int(case.message.rsplit("got ", 1)[1])
    assert sweeps > 10 and case.message.endswith(f"expected 1, got {sweeps}")
    assert f"{sweeps} sweep(s)" in evidence.log  # the adapter's count, for instructors


def test_recursion_on_the_deep_graphs_is_told_in_words(graded: Graded, pack: Assignment) -> None:
    kernel = kernel_of(graded(sample_named(pack, "hostile-recursive-topological-sort")), "gradients")
    for case in (c for c in kernel.cases if not c.passed):
        assert case.status == "crashed"
        assert case.message.startswith("raised RecursionError: maximum recursion depth exceeded"), case.message
        assert "backward() recursed deeper than Python allows (1,000 frames) on this graph of 10,000 nodes" \
               in case.message and "a loop and a list as the stack" in case.message
        assert 'File "simpleautodiff/simpleautodiff.py"' in case.message and "earlier frame(s) left out" in case.message


def test_a_course_fork_with_a_recursive_order_loses_only_the_deep_graphs(graded: Graded, pack: Assignment) -> None:
    result = graded(sample_named(pack, "course-fork-recursive-backward"))
    assert [(k.name, [c.name for c in k.cases if not c.passed]) for k in result.kernels] == [
        ("gradients", ["deep-chain", "deep-diamonds"]), ("node_derivatives", []), ("backward_again", []),
        ("reverse_mode_evidence", [])]
    assert result.score == pytest.approx(10 - 3 * 2 / 10)


def test_results_kept_in_another_attribute_are_told_where_the_assignment_reads(graded: Graded,
                                                                              pack: Assignment) -> None:
    """Every kernel's cases stop on the same words (one crash costs a fresh harness: backward_again's three cases,
    after forward and on fresh graphs, are graded here)."""
    kernel = kernel_of(graded(sample_named(pack, "mutant-results-in-adjoint")), "backward_again")
    assert kernel.status == "crashed" and kernel.score == 0, kernel.message
    for case in kernel.cases:
        # After forward(x1), forward(x2), the inputs hold 1: "unchanged", not "still 0".
        still = "unchanged by" if case.name == "after-forward" else "still 0 after"
        assert case.message.startswith(MISMATCH + NOT_READ.format(still) +
                                       "; backward changed `adjoint` on the inputs instead"), case.message
        assert "expected" not in case.message
    assert kernel_hints(kernel) == []  # nothing was compared: no hint about resets


def test_a_backward_that_writes_only_the_inputs_loses_the_node_derivatives_alone(graded: Graded,
                                                                                 pack: Assignment) -> None:
    result = graded(sample_named(pack, "mutant-inputs-only-partial-derivative"))
    assert [(k.name, k.score) for k in result.kernels] == [
        ("gradients", 3), ("node_derivatives", 0), ("backward_again", 2), ("reverse_mode_evidence", 3)]
    (first, *_) = kernel_of(result, "node_derivatives").cases
    assert first.message.startswith("derivatives: ") and first.message.endswith("got 0"), first.message


def test_a_backward_under_another_name_is_told_the_handouts_name(pack: Assignment, tmp_path: Path,
                                                                cache_dir: Path) -> None:
    folder = compose(pack, None, tmp_path / "fork")
    module = folder / "simpleautodiff" / "simpleautodiff.py"
    module.write_text(module.read_text().replace("def backward(", "def reverse_mode("))
    result = grade(folder, pack, Options(cache_dir=cache_dir, public_only=True, kernels=("backward_again",)))
    (kernel,) = result.kernels
    (case,) = kernel.cases
    assert case.message.startswith(MISMATCH + "simpleautodiff has no `backward`: the assignment calls "
                                   "`simpleautodiff.backward(output)` (it has `reverse_mode`: the handout names the "
                                   "function `backward`; rename it, or add `backward = reverse_mode` below it)"), \
        case.message


def test_hints_are_the_packs_own(graded: Graded, pack: Assignment) -> None:
    """A sign error passes the one-operator graph and fails the larger ones: the hint is about local derivatives and
    shared nodes, the pack's, not the generic one about strides and tiles."""
    kernel = kernel_of(graded(sample_named(pack, "mutant-sub-gradient-sign")), "gradients")
    hints = kernel_hints(kernel)
    assert hints == list(pack.kernel("gradients").hints) and "sub's are 1 and -1" in hints[0]
    assert not any("strides" in h or "tile" in h for h in hints)
    assert kernel_hints(kernel_of(graded(sample_named(pack, "mutant-no-reset-before-accumulating")),
                                  "backward_again"))[0].startswith("Reset before accumulating")
    assert kernel_hints(kernel_of(graded(None), "gradients")) == []  # a kernel that lost nothing gets none


def test_the_adapter_is_the_graders_in_every_build(pack: Assignment, graded: Graded) -> None:
    assert pack.provided == ("autodiff_grading.py",)
    assert (pack.reference_dir / "autodiff_grading.py").read_bytes() == \
        (pack.template_dir / "autodiff_grading.py").read_bytes()
    hostile = sample_named(pack, "hostile-adapter-edited-to-hide-sweeps")
    assert (hostile.folder / "autodiff_grading.py").read_bytes() != (pack.template_dir / "autodiff_grading.py").read_bytes()
    assert "autodiff_grading.py" in kernel_of(graded(hostile), "reverse_mode_evidence").built_from


# Central differences in float64: truncation ~h^2 |f'''| and rounding ~eps |f| / h (h = 1e-5 |x|) stay below
# 1e-5 of the largest gradient on these graphs, while every sample's mistake is a whole term or more.
FD_STEP = 1e-5
FD_TOLERANCE = 1e-5
FD_INPUTS = 8  # nodes checked per case (a random few of the large graphs): 2 evaluations each


def output_with(arrays: dict[str, np.ndarray], node: int, delta: float) -> float:
    """The output's value with node `node`'s value moved by delta, and every node after it recomputed from it."""
    ops, left, right = (arrays[k].tolist() for k in ("ops", "left", "right"))
    found = [float(v) for v in arrays["values"]]
    for i in range(len(ops)):
        if i >= len(found):
            a, b = found[left[i]], found[right[i]] if right[i] >= 0 else 0.0
            found.append([0.0, a + b, a - b, a * b, math.log(a) if a > 0 else math.nan, math.sin(a)][ops[i]])
        if i == node:
            found[i] += delta
    return found[-1]


def test_finite_differences_agree_with_the_reference_gold(pack: Assignment) -> None:
    """Each kernel's gold, d output / d node, against central differences: at the inputs, and for node_derivatives
    at intermediate nodes too (the node's value moved, what depends on it recomputed)."""
    truth = pack.numpy_reference()
    seed = Seed(pack.public_seed)
    for kernel in pack.kernels:
        for case in kernel.cases:
            arrays = make_case_inputs(pack, kernel, case, seed)
            outputs = getattr(truth, kernel.name)(**arrays, **case.params)
            gold = outputs.get("grads", outputs.get("derivatives"))
            found = truth.node_values(arrays["ops"], arrays["left"], arrays["right"], arrays["values"])
            scale = np.abs(gold).max()
            picked = np.random.default_rng(0).choice(len(gold), min(FD_INPUTS, len(gold)), replace=False)
            if "derivatives" in outputs:  # every node's: its inputs' part is the gradients' gold, output's own 1
                assert len(gold) == case.params["n_nodes"] and gold[-1] == 1.0
                np.testing.assert_array_equal(gold[:case.params["n_inputs"]],
                                              truth.gradients(**arrays, **case.params)["grads"])
                assert picked.max() >= case.params["n_inputs"]  # an intermediate node among them
            for i in picked:
                h = FD_STEP * max(1.0, abs(found[i]))
                difference = (output_with(arrays, i, h) - output_with(arrays, i, -h)) / (2 * h)
                assert abs(difference - gold[i]) <= FD_TOLERANCE * (scale + abs(gold[i])), \
                    (kernel.name, case.name, int(i), difference, gold[i])


def test_the_course_example_has_the_courses_derivatives(pack: Assignment) -> None:
    kernel = pack.kernel("gradients")
    case = next(c for c in kernel.cases if c.name == "course-example")
    arrays = make_case_inputs(pack, kernel, case, Seed(pack.public_seed))
    x1, x2 = arrays["values"]
    assert (x1, x2) == (2.0, 5.0)
    assert pack.numpy_reference().output_value(**{k: arrays[k] for k in ("ops", "left", "right", "values")}) == \
        pytest.approx(math.log(x1) + x1 * x2 - math.sin(x2), rel=1e-15)
    gold = pack.numpy_reference().gradients(**arrays, **case.params)["grads"]
    assert gold == pytest.approx([1 / x1 + x2, x1 - math.cos(x2)], rel=1e-15)


def test_graphs_are_deterministic_and_have_what_their_cases_say(pack: Assignment) -> None:
    kernel = pack.kernel("gradients")
    seed = Seed(pack.public_seed)
    for case in kernel.cases:
        arrays = make_case_inputs(pack, kernel, case, seed)
        again = make_case_inputs(pack, kernel, case, seed)
        assert all(np.array_equal(arrays[k], again[k]) for k in arrays)
        ops, left, right = arrays["ops"], arrays["left"], arrays["right"]
        n_inputs = case.params["n_inputs"]
        assert (ops[:n_inputs] == 0).all() and (ops[n_inputs:] != 0).all()
        assert all(left[i] < i and right[i] < i for i in range(n_inputs, len(ops)))  # parents first
    secret = make_case_inputs(pack, kernel, kernel.cases[4], Seed(pack.public_seed, "s3cret"))
    assert not np.array_equal(secret["values"], make_case_inputs(pack, kernel, kernel.cases[4], seed)["values"])
    gold = {c.name: pack.numpy_reference().gradients(**make_case_inputs(pack, kernel, c, seed), **c.params)["grads"]
            for c in kernel.cases}
    unused = next(c for c in kernel.cases if c.name == "unused-inputs")
    # Exactly the unused inputs have a zero gradient: no branch of a random graph cancels to 0 (a - a).
    assert {name: int((g == 0).sum()) for name, g in gold.items() if (g == 0).any()} == \
        {"unused-inputs": unused.params["unused"]}

    def shares_a_node(case) -> bool:  # some node is a parent twice (of two nodes, or twice of one)
        arrays = make_case_inputs(pack, kernel, case, seed)
        parents = np.concatenate([arrays[k][case.params["n_inputs"]:] for k in ("left", "right")])
        parents = parents[parents >= 0]
        return len(set(parents.tolist())) < len(parents)

    assert {c.name for c in kernel.cases if not shares_a_node(c)} == {"single-operator", "tree-no-sharing"}


@pytest.fixture
def package(pack: Assignment) -> Iterator[Callable[[Path], ModuleType]]:
    """simpleautodiff imported from a folder (the reference's or the template's), in this process; sys.path and
    sys.modules as they were afterwards."""
    path = list(sys.path)

    def imported(folder: Path) -> ModuleType:
        for name in [n for n in sys.modules if n == "simpleautodiff" or n.startswith("simpleautodiff.")]:
            del sys.modules[name]
        sys.path.insert(0, str(folder))
        import simpleautodiff
        return simpleautodiff

    yield imported
    sys.path[:] = path
    for name in [n for n in sys.modules if n == "simpleautodiff" or n.startswith("simpleautodiff.")]:
        del sys.modules[name]


def test_reference_backward_resets_so_twice_after_forward_and_after_growing_agree(package, pack: Assignment) -> None:
    ad = package(pack.reference_dir)
    x1, x2 = ad.Node(2.0), ad.Node(5.0)
    y = ad.sub(ad.add(ad.log(x1), ad.mul(x1, x2)), ad.sin(x2))
    ad.forward(x1)
    ad.forward(x2)
    ad.backward(y)
    first = (x1.partial_derivative, x2.partial_derivative)
    assert first == pytest.approx((1 / 2.0 + 5.0, 2.0 - math.cos(5.0)), rel=1e-15)
    ad.backward(y)
    assert (x1.partial_derivative, x2.partial_derivative) == first
    z = ad.mul(ad.sin(y), y)  # y used twice on top: dz/dx = (cos(y) y + sin(y)) dy/dx
    ad.backward(z)
    factor = math.cos(y.value) * y.value + math.sin(y.value)
    assert (x1.partial_derivative, x2.partial_derivative) == pytest.approx((factor * first[0], factor * first[1]),
                                                                           rel=1e-13)
    unused = ad.Node(3.0)
    ad.sin(unused)  # a dead branch: backward(z) never reaches it
    ad.backward(z)
    assert unused.partial_derivative == 0.0


def test_reference_backward_needs_no_recursion_and_the_template_has_none(package, pack: Assignment) -> None:
    ad = package(pack.reference_dir)
    x = ad.Node(0.5)
    s = x
    for _ in range(10_000):
        s = ad.add(s, x)  # ds/dx = 10,001, 10,000 deep: ten times the recursion limit
    assert sys.getrecursionlimit() < 10_000
    ad.backward(s)
    assert x.partial_derivative == 10_001.0
    # The course's package: forward and its recursive topological_order, no backward (the students' to add).
    ad = package(pack.template_dir)
    assert not hasattr(ad, "backward") and callable(ad.topological_order) and ad.__title__ == "simpleautodiff"


def test_the_templates_forward_mode_gives_every_inputs_derivative_one_sweep_each(package, pack: Assignment) -> None:
    ad = package(pack.template_dir)
    kernel = pack.kernel("gradients")
    case = next(c for c in kernel.cases if c.name == "random-shared")
    arrays = make_case_inputs(pack, kernel, case, Seed(pack.public_seed))
    gold = pack.numpy_reference().gradients(**arrays, **case.params)["grads"]
    operators = {1: ad.add, 2: ad.sub, 3: ad.mul, 4: ad.log, 5: ad.sin}
    nodes = [ad.Node(float(v)) for v in arrays["values"]]
    for op, a, b in zip(*(arrays[k][len(nodes):].tolist() for k in ("ops", "left", "right"))):
        nodes.append(operators[op](nodes[a]) if op in (4, 5) else operators[op](nodes[a], nodes[b]))
    found = []
    for x in nodes[:len(arrays["values"])]:
        ad.forward(x)
        found.append(nodes[-1].partial_derivative)
    np.testing.assert_allclose(found, gold, rtol=1e-9, atol=1e-9)
