"""The course's credit rules as spec options, on synthetic results: an [assignment.additional] group against its
minimum and extra-credit cap, its exclusive sets (the best one counts), and a compile error that makes the whole
grade 0; their words in the reports; the spec's checks of the keys."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from grader.errors import SpecError
from grader.report import markdown, terminal
from grader.report.credit import credit_lines, group_sentence
from grader.report.render import variant_flags
from grader.results import Environment, KernelResult, Result, Submission, VariantResult
from grader.scoring import apply_credit_rules
from grader.assignment import CreditGroup, load_assignment
from grader.assignment.model import max_score_of
from grader.status import KernelStatus, Outcome

from conftest import copy_assignment

# The course's sp26 additional optimizations and their weights.
OPS = {"op_7": 3, "op_8": 2, "op_9": 1, "op_10": 3, "op_11": 3, "op_12": 3, "op_13": 2, "op_14": 3, "op_15": 5,
       "op_16": 4, "op_17": 4, "op_18": 2}
GROUP = CreditGroup(tuple(OPS), minimum=10, extra_credit_cap=10, exclusive=(("op_14", "op_15", "op_16"),))


@pytest.fixture(scope="module")
def m3():
    return load_assignment("gpt2-m3")


def scored(m3, passed: dict[str, bool], group: CreditGroup | None = GROUP, zeroes: bool = False,
           broken: tuple[str, ...] = ()) -> tuple[list[KernelResult], list[VariantResult], object, list[str]]:
    """Each variant as two kernels (matmul 2/3, forward 1/3 of its weight), full marks where `passed`, else 0;
    `broken`: kernels that did not build."""
    kernels, variants = [], []
    for name, ok in passed.items():
        weight = OPS.get(name, 6)
        members = []
        for base, share in (("matmul", 2 / 3), ("forward", 1 / 3)):
            full = round(weight * share, 6)
            status = KernelStatus.COMPILE_ERROR if f"{name}/{base}" in broken else \
                KernelStatus.PASSED if ok else KernelStatus.FAILED
            members.append(KernelResult(f"{name}/{base}", full if status is KernelStatus.PASSED else 0.0, full, status,
                                        "kernels_op_8/matmul.cuh(3): error: identifier \"x\" is undefined"
                                        if status is KernelStatus.COMPILE_ERROR else "", [], variant=name))
        kernels += members
        variants.append(VariantResult(name, name, f"kernels_{name}", weight, sum(m.score for m in members), weight,
                                      Outcome.PASSED if ok else Outcome.FAILED, f"{name}: all 2 kernels passed",
                                      kernels=[m.name for m in members]))
    assignment = dataclasses.replace(m3, additional=group, compile_error_zeroes=zeroes)
    return apply_credit_rules(assignment, kernels, variants)


def total(kernels: list[KernelResult]) -> float:
    return round(sum(k.score for k in kernels), 6)


def test_a_group_short_of_its_minimum_says_how_short(m3) -> None:
    kernels, variants, group, zeroed = scored(m3, {"req_4": True, "op_8": True, "op_9": True, "op_10": False})
    assert total(kernels) == 6 + 2 + 1 and not zeroed
    assert group.points == {"op_8": 2, "op_9": 1, "op_10": 0} and group.credited == 3 and group.shortfall == 7
    assert group_sentence(group) == ("additional optimizations: op_8 (2) + op_9 (1) = 3 of the 10 points the course "
                                     "asks for")
    assert all(v.excluded_by is None and v.capped == 0 for v in variants)


def test_extra_credit_beyond_the_minimum_is_capped(m3) -> None:
    # 3 + 2 + 1 + 3 + 3 + 3 + 2 + 4 + 2 = 23 points of additional optimizations: 20 count.
    chosen = {name: True for name in OPS if name not in ("op_14", "op_15", "op_16")}
    kernels, variants, group, _ = scored(m3, {"req_4": True, **chosen})
    assert group.total == 23 and group.credited == 20 and group.extra_credit == 10
    assert total(kernels) == 6 + 20
    # The last variants in the spec's order give up what is over the cap.
    by_name = {v.name: v for v in variants}
    assert by_name["op_18"].capped == 2 and by_name["op_17"].capped == 1 and by_name["op_18"].score == 0
    assert by_name["op_17"].score == 3 and by_name["op_17"].status is Outcome.PASSED
    assert "additional optimizations count at most 20 points (10 and up to 10 extra credit): 1 of op_17's" \
           in by_name["op_17"].message
    assert group_sentence(group).endswith(": the 10 points the course asks for, 10 extra credit (capped at 10: 3 "
                                          "not counted)")


def test_extra_credit_under_the_cap_counts_whole(m3) -> None:
    kernels, _, group, _ = scored(m3, {"op_7": True, "op_8": True, "op_9": True, "op_10": True, "op_13": True})
    assert group.credited == 11 and group.extra_credit == 1 and total(kernels) == 11
    assert group_sentence(group) == ("additional optimizations: op_7 (3) + op_8 (2) + op_9 (1) + op_10 (3) + op_13 "
                                     "(2) = 11: the 10 points the course asks for, 1 extra credit")


def test_only_the_best_of_the_cutlass_and_tensor_core_ops_counts(m3) -> None:
    kernels, variants, group, _ = scored(m3, {"op_14": True, "op_15": True, "op_16": True})
    by_name = {v.name: v for v in variants}
    assert by_name["op_15"].score == 5 and by_name["op_15"].excluded_by is None
    assert by_name["op_14"].excluded_by == by_name["op_16"].excluded_by == "op_15"
    assert by_name["op_14"].score == by_name["op_16"].score == 0 and total(kernels) == 5
    assert "op_14 is not counted: only one of op_14, op_15, op_16 counts for credit, and op_15 scored more (5)" \
           in by_name["op_14"].message
    assert group.points == {"op_15": 5} and group.exclusive == {"op_14, op_15, op_16": "op_15"}
    # A failed op_15 leaves the best of the others counted.
    _, variants, group, _ = scored(m3, {"op_14": True, "op_15": False, "op_16": True})
    by_name = {v.name: v for v in variants}
    assert by_name["op_16"].score == 4 and by_name["op_14"].excluded_by == "op_16" and by_name["op_15"].score == 0
    assert group.credited == 4


def test_none_of_an_exclusive_set_scoring_excludes_nothing(m3) -> None:
    _, variants, group, _ = scored(m3, {"op_14": False, "op_15": False})
    assert all(v.excluded_by is None for v in variants) and group.exclusive == {"op_14, op_15, op_16": None}


def test_a_compile_error_zeroes_the_whole_grade_where_the_spec_says_so(m3) -> None:
    passed = {"req_4": True, "op_8": True, "op_9": True}
    kernels, variants, _, zeroed = scored(m3, passed, zeroes=True, broken=("op_8/matmul",))
    assert zeroed == ["op_8/matmul"] and total(kernels) == 0
    assert all(v.score == 0 for v in variants) and {v.status for v in variants} == {Outcome.FAILED}
    reason = ('a compile error is 0 for the whole grade: op_8/matmul did not build (kernels_op_8/matmul.cuh(3): '
              'error: identifier "x" is undefined)')
    assert kernels[0].deductions[-1].reason == reason and reason in variants[0].message
    # Off (the default), the compile error costs its variant only.
    kernels, _, _, zeroed = scored(m3, passed, broken=("op_8/matmul",))
    assert not zeroed and total(kernels) == 6 + 1 + round(2 / 3, 6)


def test_max_score_counts_the_groups_minimum_not_its_weights(m3) -> None:
    weights = [(None, 0.0), ("req_4", 6.0)] + [(name, float(w)) for name, w in OPS.items()]
    assert max_score_of(GROUP, weights) == 16 and max_score_of(None, weights) == 6 + sum(OPS.values())
    assert max_score_of(GROUP, [("op_9", 1.0)]) == 1  # a grade of one op alone: out of its own weight
    assert m3.max_score == sum(v.weight for v in m3.variants if v.name.startswith("req_")) + 10


def result_of(kernels: list[KernelResult], variants: list[VariantResult], group, zeroed: list[str]) -> Result:
    environment = Environment("0", "cuda", "H200", "nvcc", "none", [], "host", "3.11")
    weights = [(k.variant, k.max_score) for k in kernels]
    return Result("gpt2-m3", "1", "GPT-2 m3", total(kernels), max_score_of(GROUP, weights), kernels,
                  Submission("/team"), environment, {}, {}, False, "now", variants=variants, additional=group,
                  zeroed_by=zeroed)


def test_reports_say_the_rules_and_show_a_score_above_the_maximum(m3) -> None:
    chosen = {name: True for name in OPS if name not in ("op_14", "op_16")}
    result = result_of(*scored(m3, {"req_4": True, **chosen, "op_14": True}))
    assert result.score == 26 and result.max_score == 16  # 6 + 10 + 10 extra credit
    lines = credit_lines(result)
    assert lines[0].startswith("additional optimizations: op_7 (3) + op_8 (2)") and "10 extra credit" in lines[0]
    assert lines[1] == "only one of op_14, op_15, op_16 counts for credit: op_15"
    text = markdown.render(result)
    assert "**total 26/16**" in text and lines[0] in text
    from io import StringIO

    from rich.console import Console

    out = StringIO()
    terminal.render(result, Console(file=out, width=200))
    assert "score 26 / 16" in out.getvalue() and lines[1] in out.getvalue()
    assert Result.from_json(result.to_json()) == result


def test_a_zeroed_grade_says_which_kernel_did_not_build(m3) -> None:
    result = result_of(*scored(m3, {"op_8": True}, zeroes=True, broken=("op_8/matmul",)))
    assert credit_lines(result)[0] == "score 0: a compile error is 0 for the whole grade, and op_8/matmul did not build"


def test_evidence_shown_by_none_of_the_kernels_is_flagged_once() -> None:
    variant = VariantResult("op_8", "Constant memory", "kernels_op_8", 2, 2, 2, Outcome.PASSED, "",
                            missing_evidence={"encoder, layernorm": ["constant_memory"]})
    assert variant_flags(variant) == ["encoder, layernorm: none of their binaries shows any read of __constant__ "
                                      "memory"]


@pytest.mark.parametrize(("table", "expected"), [
    ('variants = "x_*"\nminimum = 10', "key 'variants' (x_*) matches none of the variants"),
    ('variants = "op_*"\nminimum = 10\nexclusive = [["op_14", "req_4"]]', "key 'exclusive' names ['req_4']"),
    ('variants = "op_*"\nminimum = -1', "keys 'minimum' and 'extra_credit_cap' are points >= 0"),
    ('variants = "op_*"\nminimum = 10\nbonus = 1', "unknown key(s) ['bonus']"),
])
def test_a_broken_additional_table_names_file_and_key(tmp_path: Path, table: str, expected: str) -> None:
    pack = copy_assignment("gpt2-m3", tmp_path)
    copy_assignment("gpt2-m2", tmp_path), copy_assignment("gpt2-m1", tmp_path)
    spec = pack / "assignment.toml"
    text = spec.read_text()
    start = text.index("[assignment.additional]")
    end = text.index("\n\n", start)
    spec.write_text(text[:start] + "[assignment.additional]\n" + table + text[end:])
    with pytest.raises(SpecError, match=r"\[assignment.additional\]") as error:
        load_assignment(pack)
    assert expected in str(error.value)


@pytest.mark.parametrize(("old", "new", "expected"), [
    ('ncu_metrics = ["l2_hit_rate"]', 'ncu_metrics = ["l1_hit_rate"]', "key 'ncu_metrics': unknown metric"),
    ('required_files = ["kernels_op_13/gpt2.cuh"]', 'required_files = ["gpt2.cuh"]',
     "key 'required_files' names 'gpt2.cuh', which is not a pattern under 'kernels_op_13/'"),
    ('evidence = ["restrict_loads"]', 'evidence = ["restrict"]', "key 'evidence': unknown evidence ['restrict']"),
    ('evidence_in = "any"\nevidence_penalty', 'evidence_in = "some"\nevidence_penalty',
     "key 'evidence_in' must be one of each, any, found 'some'"),
])
def test_a_broken_op_table_names_file_and_key(tmp_path: Path, old: str, new: str, expected: str) -> None:
    pack = copy_assignment("gpt2-m3", tmp_path)
    copy_assignment("gpt2-m2", tmp_path), copy_assignment("gpt2-m1", tmp_path)
    spec = pack / "assignment.toml"
    assert old in spec.read_text()
    spec.write_text(spec.read_text().replace(old, new, 1))
    with pytest.raises(SpecError) as error:
        load_assignment(pack)
    assert expected in str(error.value) and "assignment.toml" in str(error.value)
