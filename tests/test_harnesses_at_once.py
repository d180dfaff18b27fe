"""Several kernels' harnesses at once: the same verdicts as one at a time, each kernel still in a
sandbox of its own, and the run's wall time shorter than its harnesses' sum.

The attacks that could reach the kernel beside them (processes, memory, files, inputs, the
progress channel, the logs) and the C++ pipeline's crash and loop tests run here again, unchanged,
with two harnesses at once ($KERNEL_GRADER_HARNESSES, the machine's default for `--harnesses`).
The rest of the corpora computes a wrong or right answer in its own process: running beside another
changes nothing there, and `test_two_harnesses_at_once_grade_as_one_at_a_time` compares one of each
kind, verdict for verdict.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path

import pytest

from grader.options import Options
from grader.pipeline import grade
from grader.results import Result
from grader.runner import run_calls
from grader.gate import Gate, Held
from grader.runner.slots import HARNESSES_ENV, harnesses_for
from grader.samples import variants
from grader.sandbox import sandbox_named
from grader.sandbox.process import ProcessSandbox
from grader.assignment import Assignment

from conftest import grade_variant
from probe_pack import make_probe, probe_calls
# The same tests, collected again in this module, where every grade runs two harnesses at once.
from test_pipeline_cpu import (test_infinite_loop_costs_only_its_kernel_and_is_stopped_at_the_limit,  # noqa: F401
                               test_reference_scores_full_marks, test_segfault_message_names_the_signal_and_the_case)

# Crashing, void and wrong: each fails its own kernel, and the other kernel runs beside it. (Looping: the infinite loop's
# test, imported above, runs here with two harnesses. The attacks beside another harness of the same submission: the
# local class of tests/test_batch_isolation.py runs two harnesses a submission.)
COMPARED = ("hostile-flash-segfault", "attack-forge-progress",
            "hostile-flash-static-constructor-crash", "mutant-standard-transposed-k")


@pytest.fixture(autouse=True)
def two_harnesses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HARNESSES_ENV, "2")


def verdicts(result: Result) -> list[tuple]:
    """What grading decided, without the figures that differ from run to run (times, paths)."""
    return [(k.name, k.status, k.score, [(c.name, c.status, c.passed, c.limit, c.signal) for c in k.cases])
            for k in result.kernels]


@pytest.mark.parametrize("name", [None, *COMPARED])
def test_two_harnesses_at_once_grade_as_one_at_a_time(name: str | None, flash: Assignment, tmp_path: Path,
                                                      cache_dir: Path) -> None:
    variant = next((v for v in variants(flash) if v.name == name), None)
    alone = grade_variant(flash, variant, tmp_path / "one", cache_dir, harnesses=1)
    beside = grade_variant(flash, variant, tmp_path / "two", cache_dir)
    assert verdicts(beside) == verdicts(alone)
    assert [k.message for k in beside.kernels] == [k.message for k in alone.kernels]
    assert alone.environment.harnesses_at_once == 1 and beside.environment.harnesses_at_once == 2
    assert Result.from_json(beside.to_json()) == beside


WRITER = """\
// Into every other run's outbox this process can see: a neighbour's outputs are the prize.
std::error_code error;
for (auto& run : std::filesystem::directory_iterator("{tmp}", error)) {{
    if (run.path().filename().string().rfind("kg-run-", 0) == 0)
        std::ofstream(run.path() / "out" / "writer-was-here") << "x";
}}"""
# Its own outbox is its working folder's parent; it waits up to 3 s for the writer, who runs beside it.
READER = """\
bool touched = false;
for (int i = 0; i < 60 && !touched; ++i) {
    touched = std::filesystem::exists("../writer-was-here");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
}
if (touched) { for (int i = 0; i < N; ++i) out[i] = -1.0f; return; }"""


@pytest.fixture
def process_as_the_graders_user(monkeypatch: pytest.MonkeyPatch) -> None:
    """`process` as a grader not run as root has it: every harness runs as the grader's own user."""
    original = ProcessSandbox.__init__

    def as_the_graders_user(self: ProcessSandbox) -> None:
        original(self)
        self.as_root = False

    monkeypatch.setattr(ProcessSandbox, "__init__", as_the_graders_user)


@pytest.mark.parametrize("sandbox, own_uids, reached", [("local", True, False), ("process", True, False),
                                                        ("process", False, True)])
def test_a_kernel_cannot_write_into_the_outbox_of_a_kernel_beside_it(sandbox: str, own_uids: bool, reached: bool,
                                                                      tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      request: pytest.FixtureRequest) -> None:
    """Run at once, the reader finds no file of the writer's in its folder.

    `process` as root gives each harness a uid of its own, and the writer's uid cannot write into the
    reader's folder. `process` as the grader's own user (no isolation of files): the control, where it can.
    """
    if os.geteuid() != 0 and own_uids and sandbox == "process":
        pytest.skip("a uid of its own per harness needs the grader to run as root")
    if not own_uids:
        request.getfixturevalue("process_as_the_graders_user")
    # The runs' folders in a temporary folder of this test's: the control's writer, which can write into
    # every run's outbox it finds, must not reach the runs of tests beside it (their folders were left behind).
    runs = tmp_path / "runs"
    runs.mkdir(mode=0o755)
    monkeypatch.setattr(tempfile, "tempdir", str(runs))
    assignment, submission = make_probe(tmp_path, {"writer": WRITER.format(tmp=runs), "reader": READER})
    result = grade(submission, assignment, Options(cache_dir=tmp_path / "cache", sandbox=sandbox, harnesses=2))
    assert result.environment.harnesses_at_once == 2
    by_name = {k.name: k for k in result.kernels}
    assert by_name["writer"].status == "passed", by_name["writer"].message
    assert (by_name["reader"].status == "failed") is reached, by_name["reader"].message


def test_harnesses_at_once_overlap_in_wall_time(tmp_path: Path) -> None:
    sleep = "std::this_thread::sleep_for(std::chrono::seconds(2));"
    assignment, submission = make_probe(tmp_path, {"first": sleep, "second": sleep})
    calls, _ = probe_calls(assignment, submission, tmp_path / "cache", tmp_path / "outputs")
    report = run_calls(assignment, calls, sandbox_named("local"), parallel=2)
    assert [o.status for o in report.outcomes] == ["ok", "ok"], [o.message for o in report.outcomes]
    called = sum(o.wall_ms for o in report.outcomes) / 1000  # type: ignore[misc]
    assert called >= 4.0 and report.harnesses_at_once == 2 and report.harness_starts == 2
    # The baseline, at the machine's pace now: the same two calls one after the other, in two harnesses.
    serial = run_calls(assignment, calls, sandbox_named("local"), parallel=1)
    assert serial.harnesses_at_once == 1 and serial.harness_starts == 2
    assert report.seconds < serial.seconds - 1.0, (report.seconds, serial.seconds)  # two 2 s calls overlapped
    assert report.calls_seconds <= report.seconds
    assert len(report.logs) == 2  # one harness's stdout each


def test_the_default_is_one_harness_per_kernel_up_to_half_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(HARNESSES_ENV)
    monkeypatch.setattr("grader.runner.slots.usable_cores", lambda: 16)
    assert harnesses_for(6) == 6 and harnesses_for(12) == 8 and harnesses_for(6, requested=2) == 2
    monkeypatch.setattr("grader.runner.slots.usable_cores", lambda: 2)
    assert harnesses_for(6) == 1
    monkeypatch.setenv(HARNESSES_ENV, "3")
    assert harnesses_for(6) == 3 and harnesses_for(6, requested=1) == 1


def test_a_harness_run_alone_waits_for_the_others_and_holds_off_new_ones() -> None:
    slots = Gate(3)
    order: list[str] = []
    entered, release = threading.Event(), threading.Event()
    held: dict[str, Held] = {}

    def shared(name: str, wait: threading.Event | None = None) -> None:
        with slots.hold() as hold:
            held[name] = hold
            order.append(name)
            entered.set()
            if wait is not None:
                wait.wait(5)

    def alone() -> None:
        with slots.hold(alone=True) as hold:
            held["alone"] = hold
            order.append("alone")
            time.sleep(0.2)

    threads = [threading.Thread(target=shared, args=("first", release))]
    threads[0].start()
    entered.wait(5)
    threads.append(threading.Thread(target=alone))
    threads[1].start()
    deadline = time.monotonic() + 30
    while not slots.alone_waiting and time.monotonic() < deadline:  # a loaded machine starts a thread late
        time.sleep(0.01)
    time.sleep(0.2)  # the alone run now waits for the first to end; a new start waits behind it
    threads.append(threading.Thread(target=shared, args=("later",)))
    threads[2].start()
    time.sleep(0.2)
    release.set()
    for thread in threads:
        thread.join(5)
    assert order == ["first", "alone", "later"]
    assert not any(hold.shared for hold in held.values()) and slots.peak == 1
    assert held["alone"].waited >= 0.3 and held["later"].waited >= 0.3


def test_harnesses_side_by_side_know_they_shared() -> None:
    slots = Gate(2)
    with slots.hold() as first, slots.hold() as second:
        pass
    with slots.hold() as third:
        pass
    assert first.shared and second.shared and not third.shared and slots.peak == 2


class OnTheGpu:
    """The C++ target, as if its kernels ran on a GPU: neighbours' failures then need confirming alone."""

    needs_gpu = True

    def __init__(self, target) -> None:
        self.target = target

    def __getattr__(self, name: str):
        return getattr(self.target, name)


# It holds "the card" (a marker file) for 2 s, then crashes, alone or not.
HOG = """\
std::ofstream("{marker}") << "x";
std::this_thread::sleep_for(std::chrono::seconds(2));
std::filesystem::remove("{marker}");
abort();"""
# It fails while the hog holds the card, as a kernel whose cudaMalloc fails beside a hog would.
VICTIM = """\
for (int i = 0; i < 30; ++i) {{
    if (std::filesystem::exists("{marker}")) abort();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
}}"""


def test_a_gpu_failure_beside_others_counts_only_once_confirmed_alone(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import grader.runner
    from grader.targets import target_of

    marker = tmp_path / "card-held"
    assignment, submission = make_probe(tmp_path, {"hog": HOG.format(marker=marker),
                                                   "victim": VICTIM.format(marker=marker)})
    calls, _ = probe_calls(assignment, submission, tmp_path / "cache", tmp_path / "outputs")
    monkeypatch.setattr(grader.runner, "target_of", lambda a: OnTheGpu(target_of(a)))
    # `process` as the grader's own user: both harnesses see the test's folder, where the marker is (as
    # two kernels see one GPU); it mounts no GPU.
    sandbox = sandbox_named("process")
    sandbox.as_root = False  # type: ignore[attr-defined]
    report = run_calls(assignment, calls, sandbox, parallel=2)
    hogged, spared = report.outcomes
    assert hogged.status == "crashed" and hogged.signal == "SIGABRT", hogged.message
    assert spared.status == "ok", spared.message
    # Each ran twice: beside the other (both failed), then alone (the hog failed again, the victim passed).
    assert report.harness_starts == 4 and report.harnesses_at_once == 2
