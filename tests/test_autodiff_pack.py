"""The autodiff-reverse pack (python target, CPU): reverse mode in simpleautodiff, graded through the pack's adapter.

Real builds and real harnesses for the reference, the template and every sample; the gold checked against central
finite differences; the package's documented behaviour (reset, twice, after adding nodes, no recursion) in-process.
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
from grader.samples import Sample
from grader.spec import Assignment, load_assignment

from conftest import variant_params
from pack_samples import Graded, assert_expected_verdicts, graded_once, kernel_of, sample_named

PACK = "autodiff-reverse"
WHOLE = ("mutant-forward-sweep-per-input",)  # graded on every kernel: it must lose the evidence kernel alone


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


def test_template_scores_zero_and_says_backward_is_yours_to_write(pack: Assignment, cache_dir: Path) -> None:
    result = grade(pack.template_dir, pack, Options(cache_dir=cache_dir, public_only=True))
    assert result.score == 0
    for kernel in result.kernels:
        assert kernel.status == "crashed" and kernel.cases, kernel.message
        for case in kernel.cases:
            assert case.message.startswith("raised NotImplementedError: backward(output) is yours to write"), \
                case.message
            assert 'File "simpleautodiff/reverse.py"' in case.message


@pytest.mark.parametrize("sample", variant_params(PACK))
def test_each_sample_fails_exactly_its_expected_cases(sample: Sample, graded: Graded) -> None:
    assert_expected_verdicts(graded(sample), sample)


@pytest.mark.parametrize("name", ["mutant-forward-sweep-per-input", "hostile-adapter-edited-to-hide-sweeps"])
def test_a_sweep_per_input_gets_the_numbers_right_and_loses_only_the_evidence(name: str, graded: Graded,
                                                                             pack: Assignment) -> None:
    result = graded(sample_named(pack, name))
    if name in WHOLE:
        assert [(k.name, k.score == k.max_score) for k in result.kernels] == [
            ("gradients", True), ("backward_again", True), ("reverse_mode_evidence", False)]
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
        assert 'File "simpleautodiff/reverse.py"' in case.message and "earlier frame(s) left out" in case.message


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
FD_INPUTS = 8  # inputs checked per case (a random few of the large graphs): 2 evaluations each


def test_finite_differences_agree_with_the_reference_gold(pack: Assignment) -> None:
    truth = pack.numpy_reference()
    seed = Seed(pack.public_seed)
    for kernel in pack.kernels:
        for case in kernel.cases:
            arrays = make_case_inputs(pack, kernel, case, seed)
            gold = getattr(truth, kernel.name)(**arrays, **case.params)["grads"]
            values = arrays["values"]
            scale = np.abs(gold).max()
            picked = np.random.default_rng(0).choice(len(values), min(FD_INPUTS, len(values)), replace=False)
            for i in picked:
                h = FD_STEP * max(1.0, abs(values[i]))
                up, down = values.copy(), values.copy()
                up[i] += h
                down[i] -= h
                difference = (truth.output_value(arrays["ops"], arrays["left"], arrays["right"], up) -
                              truth.output_value(arrays["ops"], arrays["left"], arrays["right"], down)) / (2 * h)
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


def test_reference_backward_and_the_templates_forward_need_no_recursion(package, pack: Assignment) -> None:
    for folder in (pack.reference_dir, pack.template_dir):
        ad = package(folder)
        x = ad.Node(0.5)
        s = x
        for _ in range(10_000):
            s = ad.add(s, x)  # ds/dx = 10,001, 10,000 deep: ten times the recursion limit
        assert sys.getrecursionlimit() < 10_000
        ad.forward(x)
        assert s.partial_derivative == 10_001.0
        if folder == pack.reference_dir:
            ad.backward(s)
            assert x.partial_derivative == 10_001.0
        else:
            with pytest.raises(NotImplementedError, match="is yours to write"):
                ad.backward(s)


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
