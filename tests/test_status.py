"""Statuses: enums that read as their strings everywhere, predicates that group them once, facts as fields."""

from __future__ import annotations

import dataclasses
import json

import jinja2
import pytest

from grader.batch.summary import summarise as summarise_class
from grader.report.dashboard import summarise
from grader.report.hints import case_hints
from grader.results import CaseResult, Result
from grader.status import BuildStatus, CallStatus, CaseStatus, KernelStatus, Outcome, SubmissionStatus
from grader.store import upgraded_result_json

from report_fixtures import class_results  # noqa: F401  (a fixture)

ENUMS = (CallStatus, BuildStatus, CaseStatus, KernelStatus, SubmissionStatus, Outcome)


@pytest.mark.parametrize("status", [s for enum in ENUMS for s in enum], ids=lambda s: f"{type(s).__name__}.{s.name}")
def test_a_status_prints_formats_and_serialises_as_its_bare_value(status) -> None:
    assert str(status) == f"{status}" == format(status) == "%s" % status == status.value
    assert f"{status:>15}" == f"{status.value:>15}"
    assert json.dumps({"status": status}) == json.dumps({"status": status.value})
    assert status == status.value and hash(status) == hash(status.value)
    assert jinja2.Environment(autoescape=True).from_string("{{ s }} {{ s|replace('_', ' ') }}").render(s=status) \
        == f"{status.value} {status.value.replace('_', ' ')}"


def test_crash_and_timeout_are_grouped_once() -> None:
    assert [s for s in KernelStatus if s.stopped_harness] == [KernelStatus.CRASHED, KernelStatus.TIMEOUT]
    assert [s for s in CaseStatus if s.stopped_harness] == [CaseStatus.CRASHED, CaseStatus.TIMEOUT]
    assert [s for s in CallStatus if s.stopped_harness] == [CallStatus.CRASHED, CallStatus.TIMEOUT]
    assert [s for s in KernelStatus if s.counts_as_crash] == [KernelStatus.CRASHED]
    assert [s for s in KernelStatus if s.counts_as_timeout] == [KernelStatus.TIMEOUT]


def test_only_passed_and_not_run_are_no_failure_of_the_students_code() -> None:
    blameless = {s for s in KernelStatus if not s.is_failure_of_student_code}
    assert blameless == {KernelStatus.PASSED, KernelStatus.NOT_RUN}


def test_a_regrade_is_worth_it_where_the_run_was_cut_short_or_never_happened() -> None:
    assert {s for s in KernelStatus if s.worth_regrading} == {KernelStatus.CRASHED, KernelStatus.TIMEOUT,
                                                              KernelStatus.NOT_RUN}


def test_only_passed_and_failed_cases_were_judged() -> None:
    assert {s for s in CaseStatus if s.was_judged} == {CaseStatus.PASSED, CaseStatus.FAILED}
    assert {s for s in CaseStatus if not s.ran} == {CaseStatus.NOT_RUN}


def test_a_submission_outcome_puts_a_crash_before_a_timeout_before_a_compile_error() -> None:
    graded = SubmissionStatus.GRADED
    assert Outcome.of(graded, ["compile_error", "timeout", "crashed"]) is Outcome.CRASHED
    assert Outcome.of(graded, ["compile_error", "timeout", "passed"]) is Outcome.TIMEOUT
    assert Outcome.of(graded, ["compile_error", "failed"]) is Outcome.COMPILE_ERROR
    assert Outcome.of(graded, ["passed", "not_run"]) is Outcome.FAILED
    assert Outcome.of(graded, ["passed", "passed"]) is Outcome.PASSED
    assert Outcome.of("not_submitted", []) is Outcome.NOT_SUBMITTED and Outcome.of("error", []) is Outcome.ERROR


def test_stored_strings_load_as_enums_and_save_as_the_same_bytes(class_results: dict[str, Result]) -> None:
    for result in class_results.values():
        text = result.to_json()
        loaded = Result.from_json(text)
        assert loaded.to_json() == text  # (not `loaded == result`: an unbounded error, inf or NaN, is stored as null)
        assert isinstance(loaded.status, SubmissionStatus)
        assert all(isinstance(k.status, KernelStatus) and all(isinstance(c.status, CaseStatus) for c in k.cases)
                   for k in loaded.kernels)
        data = result.to_dict()
        statuses = [data["status"], *(k["status"] for k in data["kernels"]),
                    *(c["status"] for k in data["kernels"] for c in k["cases"])]
        assert all(type(s) is str for s in statuses), statuses  # plain strings, not enum members


def test_a_case_stored_before_its_facts_were_fields_gets_them_from_its_message(class_results) -> None:
    data = class_results["dana"].to_dict()
    crashed = next(c for k in data["kernels"] for c in k["cases"] if c["status"] == "crashed")
    for name in ("signal", "out_of_bounds", "inputs_modified"):
        del crashed[name]
    crashed["message"] = "the process was killed by signal SIGSEGV during this case"
    # Read as the store's one-time upgrade (layout 4) rewrites it: reading a result itself parses no message.
    old = Result.from_dict(json.loads(upgraded_result_json(json.dumps(data))))
    case = next(c for k in old.kernels for c in k.cases if c.status.counts_as_crash)
    assert case.signal == "SIGSEGV" and case.out_of_bounds == [] and case.inputs_modified == []
    failed = {"name": "c", "public": True, "status": "failed", "passed": False,
              "message": "wrote out of bounds: 32 element(s) past the end of out; 4 element(s) before the start of x; "
                         "wrote into its input(s) a, b, which it must only read; out: 1 of 8 elements wrong"}
    data["kernels"][0]["cases"] = [failed]
    loaded = Result.from_dict(json.loads(upgraded_result_json(json.dumps(data)))).kernels[0].cases[0]
    assert loaded.out_of_bounds == ["32 element(s) past the end of out", "4 element(s) before the start of x"]
    assert loaded.inputs_modified == ["a", "b"] and loaded.signal is None


def test_hints_read_the_facts_not_the_message() -> None:
    crashed = CaseResult("c", True, "crashed", False, "the process was killed by signal SIGSEGV during this case")
    assert case_hints(crashed) == []  # words alone are no fact
    assert "touched memory it does not own" in case_hints(dataclasses.replace(crashed, signal="SIGSEGV"))[0]
    assert "aborted" in case_hints(dataclasses.replace(crashed, message="", signal="SIGABRT"))[0]
    failed = CaseResult("c", True, "failed", False, "wrote out of bounds: 1 element(s) past the end of O; O: right")
    assert case_hints(failed) == []
    assert "just outside a buffer" in case_hints(dataclasses.replace(failed, out_of_bounds=["1 element(s) past the end of O"]))[0]


def test_batch_summary_and_dashboard_count_crashes_and_timeouts_alike(class_results: dict[str, Result]) -> None:
    # Two students whose kernel crashed, two whose kernel timed out: "crashed 2, timeout 2" in both places.
    crashed = class_results["dana"]
    assert crashed.outcome is Outcome.CRASHED

    def timed_out(result: Result, student: str) -> Result:
        kernels = [dataclasses.replace(k, status=KernelStatus.TIMEOUT) if k.status.counts_as_crash else k
                   for k in result.kernels]
        return dataclasses.replace(result, student=student, kernels=kernels)

    results = [dataclasses.replace(crashed, student="c1"), dataclasses.replace(crashed, student="c2"),
               timed_out(crashed, "t1"), timed_out(crashed, "t2"), class_results["ada"]]
    batch = summarise_class(results, "flash-attention-cpu", crashed.max_score).counts
    dashboard = dict(summarise(results, "flash-attention-cpu")["status_counts"])
    assert batch[Outcome.CRASHED] == dashboard["crashed"] == 2
    assert batch[Outcome.TIMEOUT] == dashboard["timeouts"] == 2
    assert batch[Outcome.PASSED] == 1


def test_a_repository_that_could_not_be_fetched_counts_as_fetch_failed_everywhere(class_results) -> None:
    from grader.report import gradebook, gradescope, junit

    ghost = dataclasses.replace(class_results["ivan"], student="ghost", status=SubmissionStatus.FETCH_FAILED,
                                message="https://git.example.edu/ghost.git: Could not resolve host: git.example.edu")
    assert ghost.outcome is Outcome.FETCH_FAILED and Outcome.of("fetch_failed", []) is Outcome.FETCH_FAILED
    assert {s for s in SubmissionStatus if s.fetch_again} == {SubmissionStatus.FETCH_FAILED}
    assert {s for s in SubmissionStatus if s.worth_regrading} == {SubmissionStatus.FETCH_FAILED, SubmissionStatus.ERROR}
    results = [ghost, class_results["ivan"], class_results["ada"]]
    batch = summarise_class(results, "flash-attention-cpu", ghost.max_score).counts
    dashboard = dict(summarise(results, "flash-attention-cpu")["status_counts"])
    assert batch[Outcome.FETCH_FAILED] == dashboard["fetch failed"] == 1
    assert batch[Outcome.NOT_SUBMITTED] == dashboard["not submitted"] == 1
    assert "ghost,,3,,,,,,fetch_failed," in gradebook.render(results)
    assert 'type="fetch_failed"' in junit.render_class(results) and "Could not resolve host" in junit.render_class(results)
    assert "Not graded (fetch failed): https://git.example.edu/ghost.git" in gradescope.results_json(ghost)["output"]
