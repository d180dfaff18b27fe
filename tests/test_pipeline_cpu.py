"""The whole pipeline on the C++ assignment: real g++ builds, real harness processes, real verdicts."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from grader.cases import Seed, load_inputs, make_case_inputs, prepare_inputs
from grader.errors import SpecError
from grader.options import Options
from grader.pipeline import grade
from grader.results import Result
from grader.samples import Sample, variants
from grader.assignment import Assignment, load_assignment

from conftest import copy_assignment, grade_variant, variant_params, with_time_limit


def test_reference_scores_full_marks(flash: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    result = grade_variant(flash, None, tmp_path, cache_dir)
    assert result.score == result.max_score == 3
    assert all(k.status == "passed" for k in result.kernels)
    assert all(c.max_abs_err is not None and c.max_abs_err < 1e-5 for k in result.kernels for c in k.cases)


def test_template_compiles_and_scores_zero_as_never_written(flash: Assignment, cache_dir: Path) -> None:
    result = grade(flash.template_dir, flash, Options(cache_dir=cache_dir))
    assert result.score == 0
    for kernel in result.kernels:
        assert kernel.status == "failed"
        assert all("never written" in c.message for c in kernel.cases)


# The attacks have their own tests, with more to check (tests/test_sandbox_attacks.py): so that this module need not
# run alone (SERIAL_GROUPS), it grades the rest.
@pytest.mark.parametrize("variant", [p for p in variant_params("flash-attention-cpu")
                                     if not p.values[0].name.startswith("attack-")])
def test_variant_changes_only_its_own_kernel(variant: Sample, flash: Assignment, tmp_path: Path,
                                             cache_dir: Path) -> None:
    # 3 s per call where the variant is meant to time out; else 30 s: on a loaded machine a hog that the
    # limit under test ends (memory, output files) could meet 3 s first, and time out instead of crash.
    assignment = flash if variant.expect == "timeout" else with_time_limit(flash, 30.0)
    result = grade_variant(assignment, variant, tmp_path, cache_dir)
    by_name = {k.name: k for k in result.kernels}
    for target in (by_name.values() if variant.whole else [by_name[variant.kernel]]):
        assert target.status == variant.expect, target.message
        if variant.expect == "passed":
            assert target.score == target.max_score
        else:
            assert target.score < target.max_score
        if variant.failed_cases is not None:
            assert [c.name for c in target.cases if not c.passed] == list(variant.failed_cases)
    for name, kernel in by_name.items():
        if name != variant.kernel and not variant.whole:
            assert kernel.status == "passed" and kernel.score == kernel.max_score, (name, kernel.message)


def test_segfault_message_names_the_signal_and_the_case(flash: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    segfault = next(v for v in variants(flash) if v.name == "hostile-flash-segfault")
    kernel = next(k for k in grade_variant(flash, segfault, tmp_path, cache_dir).kernels if k.name == "flash_attention")
    assert "SIGSEGV" in kernel.message and "case 'one-row'" in kernel.message
    # Each case runs in a fresh harness after the one before it crashed: every case has its own verdict.
    assert [c.status for c in kernel.cases] == ["crashed"] * len(kernel.cases)


@pytest.mark.parametrize("name, signal, words", [
    ("attack-static-constructor-segfault", "SIGSEGV", "segmentation fault in a static constructor"),
    # abort() raises SIGABRT at itself: the unshare fallback's launcher stays its namespace's init, so that the
    # harness, its child, is not one (an init drops its own abort(), and glibc then faults: SIGSEGV).
    ("hostile-flash-static-constructor-crash", "SIGABRT", "abort in a static constructor"),
    ("hostile-flash-static-constructor-trap", "SIGILL", "illegal instruction in a static constructor"),
])
def test_a_crash_while_the_library_loads_says_so_with_its_signal(name: str, signal: str, words: str, flash: Assignment,
                                                                 tmp_path: Path, cache_dir: Path) -> None:
    variant = next(v for v in variants(flash) if v.name == name)
    kernel = next(k for k in grade_variant(flash, variant, tmp_path, cache_dir).kernels if k.name == variant.kernel)
    first = kernel.cases[0]
    assert kernel.status == "crashed" and first.while_loading and first.signal == signal
    assert f"crashed while its library was being loaded ({words})" in first.message
    assert f"case '{first.name}': crashed while its library was being loaded ({words})" in kernel.message
    assert "never written" not in kernel.message


def test_infinite_loop_costs_only_its_kernel_and_is_stopped_at_the_limit(flash: Assignment, tmp_path: Path,
                                                                          cache_dir: Path) -> None:
    loop = next(v for v in variants(flash) if v.name == "hostile-flash-infinite-loop")
    baseline = grade_variant(flash, None, tmp_path, cache_dir)  # the reference's run at the machine's pace now
    result = grade_variant(flash, loop, tmp_path, cache_dir)
    kernel = next(k for k in result.kernels if k.name == "flash_attention")
    assert kernel.status == "timeout" and "did not finish within 3 s" in kernel.message
    # Its budget (6 s: two calls at their 3 s limit), plus its harnesses' start-ups, which no budget counts (on a
    # loaded machine seconds each), beside what a run costs here, doubled.
    budget = next(k for k in flash.kernels if k.name == "flash_attention").time_budget_s
    assert result.stages["run"] < budget + result.stages["run_start"] + 2 * baseline.stages["run"], \
        (result.stages, baseline.stages)


def test_compile_error_names_file_and_line(flash: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    broken = next(v for v in variants(flash) if v.name == "hostile-standard-compile-error")
    kernel = next(k for k in grade_variant(flash, broken, tmp_path, cache_dir).kernels if k.name == "standard_attention")
    assert kernel.status == "compile_error"
    assert "src/standard_attention.cpp:12:" in kernel.message and "error" in kernel.message


def test_missing_file_is_a_compile_error_naming_it(flash: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    folder = shutil.copytree(flash.reference_dir, tmp_path / "partial")
    (folder / "src" / "flash_attention.cpp").unlink()
    result = grade(folder, flash, Options(cache_dir=cache_dir))
    kernel = next(k for k in result.kernels if k.name == "flash_attention")
    assert kernel.status == "compile_error" and "missing file(s) src/flash_attention.cpp" in kernel.message
    assert next(k for k in result.kernels if k.name == "standard_attention").status == "passed"


def test_result_json_has_the_contract_and_round_trips(flash: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    result = grade_variant(flash, None, tmp_path, cache_dir)
    data = json.loads(result.to_json())
    assert {"assignment", "score", "max_score", "kernels", "submission", "environment", "stages"} <= set(data)
    kernel = data["kernels"][0]
    assert {"name", "score", "max_score", "status", "message", "cases"} <= set(kernel)
    assert {"name", "passed", "max_abs_err", "max_rel_err", "mismatches", "message"} <= set(kernel["cases"][0])
    assert data["environment"]["compiler"].startswith("g++")
    assert {"build", "run", "gold"} <= set(data["stages"])
    assert Result.from_json(result.to_json()) == result


def test_public_only_runs_public_cases_and_secret_changes_hidden_inputs(flash: Assignment, tmp_path: Path,
                                                                        cache_dir: Path) -> None:
    checked = grade_variant(flash, None, tmp_path / "a", cache_dir, public_only=True)
    assert all(c.public for k in checked.kernels for c in k.cases)
    assert checked.seed["mode"] == "public"
    graded = grade_variant(flash, None, tmp_path / "b", cache_dir, secret="s3cret")
    assert graded.seed["mode"] == "secret" and "s3cret" not in graded.to_json()
    kernel = flash.kernel("flash_attention")
    case = kernel.cases[2]
    public = make_case_inputs(flash, kernel, case, Seed(flash.public_seed))
    secret = make_case_inputs(flash, kernel, case, Seed(flash.public_seed, "s3cret"))
    again = make_case_inputs(flash, kernel, case, Seed(flash.public_seed, "s3cret"))
    assert not np.array_equal(public["Q"], secret["Q"])
    assert np.array_equal(secret["Q"], again["Q"])


def test_inputs_written_by_many_threads_at_once_are_whole(flash: Assignment, cache_dir: Path) -> None:
    """A batch's build threads all prepare the same cases at once: each must get complete, identical files."""
    kernel = flash.kernel("flash_attention")
    case = max(kernel.cases, key=lambda c: c.params["N"])
    seed = Seed(flash.public_seed, "s3cret")
    with ThreadPoolExecutor(max_workers=8) as pool:
        folders = list(pool.map(lambda _: prepare_inputs(flash, kernel, case, seed, cache_dir), range(16)))
    assert len(set(folders)) == 1
    expected = make_case_inputs(flash, kernel, case, seed)
    written = load_inputs(folders[0])
    assert written.keys() == expected.keys() and all(np.array_equal(written[k], expected[k]) for k in expected)
    assert [p.name for p in folders[0].parent.iterdir() if ".tmp" in p.name] == []
    assert folders[0].stat().st_mode & 0o005 == 0o005  # readable by the sandbox's unprivileged user


def test_second_grading_reuses_builds_and_gold(flash: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    grade_variant(flash, None, tmp_path / "first", cache_dir)
    again = grade_variant(flash, None, tmp_path / "second", cache_dir)
    assert all(k.build_cached for k in again.kernels)
    assert len(list((cache_dir / "gold").iterdir())) >= sum(len(k.cases) for k in flash.kernels)


def test_gold_too_small_to_catch_zeros_is_rejected(tmp_path: Path, cache_dir: Path) -> None:
    pack = copy_assignment("flash-attention-cpu", tmp_path)
    spec = pack / "assignment.toml"
    spec.write_text(spec.read_text().replace("tolerance = { atol = 1e-4, rtol = 1e-3 }",
                                             "tolerance = { atol = 1e-1, rtol = 1e-3 }", 1))
    with pytest.raises(SpecError, match=r"kernel 'standard_attention' case '.*': max \|gold\| of 'O' is .* below 100 x atol"):
        grade(load_assignment(pack).reference_dir, load_assignment(pack), Options(cache_dir=tmp_path / "cache"))


def test_numpy_reference_agrees_with_the_cpp_reference(flash: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    """The gold that grades students comes from the C++ reference: check it against float64 NumPy."""
    from grader.cases import prepare_inputs, load_inputs
    from grader.gold import gold_outputs
    from grader.sandbox.local import LocalSandbox

    truth = flash.numpy_reference()
    selection = [(k, c, prepare_inputs(flash, k, c, Seed(flash.public_seed), cache_dir))
                 for k in flash.kernels for c in k.cases]
    gold = gold_outputs(flash, selection, cache_dir, LocalSandbox())
    for kernel, case, inputs in selection:
        expected = getattr(truth, kernel.name)(**load_inputs(inputs), **case.params)["O"]
        got = gold[(kernel.name, case.name)]["O"]
        # Scores near 190 (the large-score cases) are held by float32 only to ~1e-5 each, which every weight of
        # the softmax inherits: a bound 10x looser there, still far below what a wrong kernel is off by.
        bound = 1e-4 if {"score_offset", "score_spread"} & set(case.params) else 1e-5
        assert np.linalg.norm(got - expected) / np.linalg.norm(expected) < bound, (kernel.name, case.name)
