"""The sanitizer's runs without a GPU: a stand-in for compute-sanitizer around real C++ harnesses.

The stand-in prints what compute-sanitizer prints (a finding and its summary) around the harness
it wraps, and logs each run: enough to prove that findings are cached by content, that a run
without a count is not, and that the runs take the kernels' slots once their own runs ended.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from grader import pipeline
from grader.build import Artifact
from grader.options import Options
from grader.runner import run_calls
from grader.sandbox import sandbox_named
from grader.sanitizer import SanitizerCheck, SanitizerReport, cached_report, sanitizer_version
from grader.assignment import Assignment

from probe_pack import make_probe, probe_calls

FINDING = ("========= Invalid __global__ write of size 4 bytes\n"
           "=========     at probe_kernel(float *)+0x10 in src/plain.h:9\n"
           "========= ERROR SUMMARY: 1 error")


def stand_in(folder: Path, log: Path, version: str = "2099.1", summary: bool = True) -> Path:
    """A `compute-sanitizer` that runs the harness it wraps, prints a finding and its count, and logs the tool."""
    script = folder / f"compute-sanitizer-{version}"
    printed = "\n".join(f"echo '{line}'" for line in FINDING.splitlines()) if summary else ":"
    script.write_text(f"""#!/bin/sh
if [ "$1" = "--version" ]; then echo "compute-sanitizer stand-in, version {version}"; exit 0; fi
echo "$2" >> {log}
shift 8  # --tool T --error-exitcode N --print-limit N --show-backtrace no
"$@"
status=$?
{printed}
exit $status
""")
    script.chmod(0o755)
    # As root the `process` sandbox runs the wrapper as a uid of its own: the log is open to any user.
    log.touch()
    log.chmod(0o666)
    for above in (folder, log.parent):
        above.chmod(above.stat().st_mode | 0o005)
    return script


def check_for(assignment: Assignment, artifacts: dict[str, Artifact], calls, binary: Path,
              cache_dir: Path) -> SanitizerCheck:
    inputs = {(c.kernel.name, c.case.name): c.inputs_dir for c in calls}
    # `process`: the stand-in lives in the test's folder, which a real sandbox does not show.
    return SanitizerCheck(assignment, artifacts, inputs, sandbox_named("process"), str(binary),
                          sanitizer_version(str(binary)), None, cache_dir)


def runs_logged(log: Path) -> int:
    return len(log.read_text().splitlines())


def test_findings_are_cached_by_library_tool_inputs_and_version(tmp_path: Path) -> None:
    assignment, submission = make_probe(tmp_path, {"plain": ""}, sanitizer=("memcheck",))
    calls, artifacts = probe_calls(assignment, submission, tmp_path / "cache", tmp_path / "outputs")
    log = tmp_path / "runs.log"
    check = check_for(assignment, artifacts, calls, stand_in(tmp_path, log), tmp_path / "cache")
    kernel = assignment.kernel("plain")
    (run,) = check.runs(kernel)
    first = run(None)
    assert first.errors == 1 and first.findings[0].startswith("Invalid __global__ write of size 4 bytes at probe")
    assert not first.cached and first.seconds > 0 and runs_logged(log) == 1
    again = run(None)
    assert again.cached and again.seconds == 0 and runs_logged(log) == 1
    assert (again.kernel, again.tool, again.errors, again.findings, again.note) == \
        (first.kernel, first.tool, first.errors, first.findings, first.note)
    # Another build of the kernel (another build key), or another version of the tool: run again.
    library = artifacts["plain"].library
    assert library is not None
    rebuilt = tmp_path / "cache" / "builds" / "another-build" / library.name
    rebuilt.parent.mkdir(parents=True)
    shutil.copyfile(library, rebuilt)
    other = dataclasses.replace(check, artifacts={"plain": dataclasses.replace(artifacts["plain"], library=rebuilt)})
    assert not other.runs(kernel)[0](None).cached and runs_logged(log) == 2
    newer = check_for(assignment, artifacts, calls, stand_in(tmp_path, log, version="2100.0"), tmp_path / "cache")
    assert not newer.runs(kernel)[0](None).cached and runs_logged(log) == 3
    assert newer.runs(kernel)[0](None).cached and runs_logged(log) == 3


def test_a_run_without_the_tools_count_is_not_cached(tmp_path: Path) -> None:
    assignment, submission = make_probe(tmp_path, {"plain": ""}, sanitizer=("memcheck",))
    calls, artifacts = probe_calls(assignment, submission, tmp_path / "cache", tmp_path / "outputs")
    log = tmp_path / "runs.log"
    check = check_for(assignment, artifacts, calls, stand_in(tmp_path, log, summary=False), tmp_path / "cache")
    reports = [check.runs(assignment.kernel("plain"))[0](None) for _ in range(2)]
    assert [r.errors for r in reports] == [-1, -1] and not any(r.cached for r in reports)
    assert runs_logged(log) == 2


def test_cached_report_stores_only_what_the_tool_counted(tmp_path: Path) -> None:
    ran: list[str] = []

    def counted() -> SanitizerReport:
        ran.append("counted")
        return SanitizerReport("k", "racecheck", 0, ())

    def crashed() -> SanitizerReport:
        ran.append("crashed")
        return SanitizerReport("k", "racecheck", -1, (), "the run under racecheck crashed: ...")

    assert not cached_report(tmp_path, "a", counted).cached
    assert cached_report(tmp_path, "a", counted) == SanitizerReport("k", "racecheck", 0, (), cached=True)
    cached_report(tmp_path, "b", crashed)
    assert cached_report(tmp_path, "b", crashed).note.startswith("the run under racecheck crashed")
    assert cached_report(None, "a", counted).cached is False  # no cache folder: always run
    assert ran == ["counted", "crashed", "crashed", "counted"]


def test_sanitizer_runs_follow_each_kernel_in_the_slots_and_skip_a_kernel_that_timed_out(tmp_path: Path) -> None:
    loop = "for (volatile int spin = 0; ; ) {}"
    assignment, submission = make_probe(tmp_path, {"plain": "", "loops": loop}, time_limit=1.5, budget=3.0,
                                        sanitizer=("memcheck", "racecheck"))
    calls, artifacts = probe_calls(assignment, submission, tmp_path / "cache", tmp_path / "outputs")
    log = tmp_path / "runs.log"
    check = check_for(assignment, artifacts, calls, stand_in(tmp_path, log), tmp_path / "cache")
    report = run_calls(assignment, calls, sandbox_named("process"), parallel=2, then=check.after_run)
    assert [o.status for o in report.outcomes] == ["ok", "timeout"]
    assert list(report.after) == ["plain"] and [r.tool for r in report.after["plain"]] == ["memcheck", "racecheck"]
    assert report.harnesses_at_once == 2  # plain's tools beside the looping kernel's harness
    assert sorted(log.read_text().split()) == ["memcheck", "racecheck"]
    assert report.calls_seconds <= report.seconds


def test_a_regrade_is_not_sanitized_again_and_the_stage_times_say_so(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    assignment, submission = make_probe(tmp_path, {"plain": "", "other": ""}, sanitizer=("memcheck",))
    log = tmp_path / "runs.log"
    binary = stand_in(tmp_path, log)

    def with_stand_in(assignment, artifacts, inputs, sandbox, deadline=None, cache_dir=None) -> SanitizerCheck:
        return SanitizerCheck(assignment, artifacts, inputs, sandbox, str(binary), sanitizer_version(str(binary)),
                              deadline, cache_dir)

    monkeypatch.setattr(pipeline, "sanitizer_check", with_stand_in)
    options = Options(cache_dir=tmp_path / "cache", sandbox="process", sanitizer=True, harnesses=2)
    first = pipeline.grade(submission, assignment, options)
    again = pipeline.grade(submission, assignment, options)
    assert runs_logged(log) == 2  # one per kernel, the first time only
    for result, cached in ((first, 0), (again, 2)):
        stages = result.stages
        assert stages["sanitizer_cached"] == cached and "sanitizer" in stages, stages
        assert (stages["sanitizer_harnesses"] > 0) is (cached == 0), stages
        # The sanitizer's runs overlap the kernels': its parts are not laps, and the laps add up to the total.
        laps = sum(v for k, v in stages.items() if k not in ("run_start", "sanitizer_harnesses", "sanitizer_cached",
                                                             "total"))
        assert abs(stages["total"] - laps) < 0.01 * len(stages), stages
        assert all(k.sanitizer[0].startswith("memcheck: Invalid __global__ write") for k in result.kernels)
    assert [k.sanitizer for k in again.kernels] == [k.sanitizer for k in first.kernels]
