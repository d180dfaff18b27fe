"""One submission never hurts another: the attacker's corpus graded as one class beside correct and
buggy submissions, and grading failures that are the machine's graded again alone, never charged.

The class is a real roster of real git repositories, graded by `grader batch`'s Python entry
with 4 run slots on the `local` and `docker` sandboxes (a per-call limit of 30 s: LIMIT_S says why).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from grader.batch.grade_class import ClassBatch, Fetching, grade_class
from grader.dispatch import Job
from grader.dispatch.faults import machine_fault
import grader.dispatch.local as local
from grader.dispatch.local import LocalExecutor
from grader.errors import MachineError
from grader.options import Options
from grader.pipeline import grade
from grader.results import Result, Retry
from grader.runner.slots import HARNESSES_ENV
from grader.samples import Sample, compose, variants
from grader.sandbox.host import make_searchable
from grader.assignment import Assignment, load_assignment
from grader.store import Store

from conftest import with_time_limit
from sandbox_fixtures import backend, docker_ready, orphaned_harnesses, run_folders  # noqa: F401  (fixtures)
from test_batch import at, commit, submission
from test_sandbox_attacks import ESCAPES, SECRET, check_attack, host_listener, victim  # noqa: F401  (fixtures)

RUN_SLOTS = 4
# Per call: long enough that every attack meets its own bound (memory, processes, files) before the time
# limit, with four submissions' harnesses on two cores and another test suite beside them: at 5 s the host
# memory hog (touching 64 MiB blocks up to its 1 GiB limit) once met the time limit first on a loaded
# machine; at 20 s, under docker with two suites at once, it met it first again (its cgroup reclaiming at the
# 1 GiB bound before the kernel's OOM kill).
LIMIT_S = 30.0
LOOPING = "hostile-flash-infinite-loop"


# The local class's innocent neighbours: two alternatives and two mutants, whose verdicts must come out as
# they do alone (every sample alone: tests/test_pipeline_cpu.py).
LOCAL_NEIGHBOURS = ("alt-flash-row-outer", "alt-standard-online-softmax", "mutant-flash-no-rescale",
                    "mutant-standard-transposed-k")


# The docker class: the attacks on what a container shares with its neighbours (the host's memory, processes, disk,
# files and network). The attacks on the harness's protocol (forged progress, fake stdout, writes past a buffer, a
# crash at load) are held by the harness, the same in every backend: the local class has them beside others.
DOCKER_NEIGHBOURS = ("attack-fork-bomb", "attack-memory-hog", "attack-host-memory-hog", "attack-fill-private-tmp",
                     "attack-flood-output-files", "attack-huge-stdout", "attack-network", "attack-write-outside",
                     "attack-read-secrets", "attack-mutate-inputs")


def corpus(flash: Assignment, backend: str = "local") -> dict[str, Sample | None]:
    """Every student of the class, with the reference.

    Local: every attack and hostile sample but the looping one, beside LOCAL_NEIGHBOURS. Docker: DOCKER_NEIGHBOURS,
    the attacks on what containers share (those whose checks go further than a class's, alone on each backend:
    tests/test_sandbox_attacks.py).
    The looping sample is in neither: it spins a core for 2 x LIMIT_S and is confirmed alone after the class, the
    longest part of a class; a loop beside another harness is in tests/test_harnesses_at_once.py, and the local
    sandbox (the default) stops it in tests/test_pipeline_cpu.py and tests/test_sandbox_attacks.py.
    """
    def wanted(name: str) -> bool:
        if backend == "docker":
            return name in DOCKER_NEIGHBOURS
        return (name.startswith(("attack-", "hostile-")) and name != LOOPING) or name in LOCAL_NEIGHBOURS

    students: dict[str, Sample | None] = {"reference": None}
    students.update({v.name: v for v in variants(flash) if wanted(v.name)})
    return students


@pytest.fixture(scope="module")
def pack() -> Assignment:
    return with_time_limit(load_assignment("flash-attention-cpu"), LIMIT_S)


@pytest.fixture(scope="module")
def classroom(pack: Assignment, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A roster of one git repository per student, each with its submission committed."""
    root = tmp_path_factory.mktemp("isolation-class")
    lines = ["student,repository"]
    for name, variant in {**corpus(pack, "local"), **corpus(pack, "docker")}.items():  # both classes' students
        repo = root / "repos" / name
        repo.mkdir(parents=True)
        subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
        commit(repo, submission(pack, variant.name if variant else None, root / "scratch" / name), at(-1), "work")
        lines.append(f"{name},{repo}")
    roster = root / "roster.csv"
    roster.write_text("\n".join(lines) + "\n")
    return roster


class ProcessCount(threading.Thread):
    """The machine's process count (every task of /proc), sampled every 50 ms: its peak, for the log."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, sum(1 for entry in os.scandir("/proc") if entry.name.isdigit()))
            time.sleep(0.05)


def check_student(name: str, variant: Sample | None, result: Result) -> None:
    """The reference full marks; every other student as graded alone (`check_attack`: the attacked kernel its own
    status, failed cases and words, every other kernel full marks); never `error`."""
    assert result.status == "graded", (name, result.message)
    if variant is None:
        assert result.score == result.max_score, [(k.name, k.message) for k in result.kernels]
        return
    check_attack(name, variant, result, LIMIT_S)


def test_the_attackers_corpus_graded_as_one_class_hurts_no_one(backend: str, pack: Assignment, classroom: Path,
                                                                tmp_path: Path, cache_dir: Path, host_listener,
                                                                victim: Path, monkeypatch: pytest.MonkeyPatch,
                                                                run_folders: set[str]) -> None:
    monkeypatch.setenv("KERNEL_GRADER_SECRET", SECRET)
    if backend == "local":
        # Two harnesses a submission, as on a machine of four cores: each attack is beside its own submission's
        # other kernel too, not only beside the other students' (under docker each harness has its own container).
        monkeypatch.setenv(HARNESSES_ENV, "2")
    store = tmp_path / "grades.sqlite"
    students = corpus(pack, backend)
    roster = tmp_path / "roster.csv"
    roster.write_text("".join(line for line in classroom.read_text().splitlines(keepends=True)
                              if line.split(",")[0] in {"student", *students}))
    batch = ClassBatch(roster, pack, Options(cache_dir=cache_dir, sandbox=backend, secret=SECRET), store,
                       LocalExecutor(build_jobs=2, run_slots=RUN_SLOTS), Fetching(tmp_path / "repos"))
    output = io.StringIO()
    processes = ProcessCount()
    processes.start()
    started = time.monotonic()
    try:
        assert grade_class(batch, Console(file=output, width=200)) == 0
    finally:
        processes.stop.set()
        processes.join()
    seconds = time.monotonic() - started
    results = {r.student: r for r in Store(store).latest(pack.name)}
    retried = {s: [f"{r.stage}: {r.fault}" for r in result.retries] for s, result in results.items() if result.retries}
    # The log of the run, for whoever reads the test's output: how long, how many processes, what was retried.
    print(f"{backend}: {len(results)} submissions with {RUN_SLOTS} run slots in {seconds:.1f} s; "
          f"the machine's process count peaked at {processes.peak}; retried alone: {retried or 'none'}")
    assert set(results) == set(students), output.getvalue()
    assert [s for s, r in results.items() if r.status == "error"] == [], \
        {s: r.message for s, r in results.items() if r.status == "error"}
    for name, variant in students.items():
        check_student(name, variant, results[name])
    everything = json.dumps([r.to_dict() for r in results.values()])
    assert "ATTACK SUCCEEDED" not in everything and SECRET not in everything
    assert host_listener == []
    assert [path for path in ESCAPES if path.exists()] == []
    time.sleep(0.1)
    assert orphaned_harnesses(run_folders) == []
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    assert processes.peak < pid_max // 4, processes.peak


# ---------------------------------------------------------------- the machine's failures, graded again alone


def _as_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The run slots as threads of this process, so that what they run can be watched."""
    monkeypatch.setattr(local, "_run_pool", lambda device: ThreadPoolExecutor(max_workers=1))


@pytest.mark.parametrize("raised, fault", [
    pytest.param(lambda: RuntimeError("can't start new thread"), "thread", id="thread"),
    pytest.param(lambda: BlockingIOError(11, "Resource temporarily unavailable"), "resources", id="eagain"),
    pytest.param(lambda: MachineError("this machine cannot run cuda kernels: DriverError: cuInit failed: "
                                      "CUDA_ERROR_OPERATING_SYSTEM", "device"), "device", id="device"),
])
@pytest.mark.parametrize("on_gpu", [False, True], ids=["cpu", "gpu"])
def test_a_run_the_machine_failed_beside_others_is_graded_again_alone_and_the_retry_kept(
        raised, fault: str, on_gpu: bool, flash: Assignment, tmp_path: Path, cache_dir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    if on_gpu:  # the C++ pack stands in for a CUDA one (no GPU here): its runs go through one GPU's slots
        monkeypatch.setattr(local, "target_of", lambda assignment: SimpleNamespace(needs_gpu=True))
    _as_threads(monkeypatch)
    meeting = threading.Barrier(2, timeout=120)
    running: list[str] = []
    runs: list[tuple[str, list[str]]] = []  # (submission, the submissions running beside it)
    guard = threading.Lock()
    real_execute = local.execute_stage

    def execute(built, assignment, options, outputs):
        name = built.checkout.root.name
        with guard:
            first = not any(n == name for n, _ in runs)
            runs.append((name, [n for n in running if n != name]))
            running.append(name)
        try:
            if first:
                meeting.wait()  # both first runs overlap for certain
                if name == "victim":
                    raise raised()  # what a neighbour's fork bomb made of the grader's own run
            return real_execute(built, assignment, options, outputs)
        finally:
            with guard:
                running.remove(name)

    monkeypatch.setattr(local, "execute_stage", execute)
    jobs = [Job(0, "neighbour", compose(flash, None, tmp_path / "neighbour")),
            Job(1, "victim", compose(flash, None, tmp_path / "victim"))]
    results: dict[str, Result] = {}
    LocalExecutor(build_jobs=2, gpus=["0"], run_slots=2).grade(
        jobs, flash, Options(cache_dir=cache_dir), lambda job, result: results.__setitem__(job.student, result))
    victim = results["victim"]
    assert victim.status == "graded" and victim.score == victim.max_score == 3, victim.message
    assert [(r.stage, r.fault, r.alone) for r in victim.retries] == [("run", fault, True)]
    assert str(raised()).split(":")[0] in victim.retries[0].detail
    assert results["neighbour"].score == 3 and results["neighbour"].retries == []
    # Run twice, the second time with nothing beside it (the first met the neighbour at the barrier, though
    # either may have come in first: what was beside it as it came in is not the test).
    victim_runs = [beside for name, beside in runs if name == "victim"]
    assert len(victim_runs) == 2 and victim_runs[-1] == []
    assert Result.from_json(victim.to_json()).retries == victim.retries  # stored and loaded back


def test_a_failure_again_alone_is_an_error_that_says_it_is_the_graders(flash: Assignment, tmp_path: Path,
                                                                      cache_dir: Path, monkeypatch) -> None:
    _as_threads(monkeypatch)

    def execute(built, assignment, options, outputs):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(local, "execute_stage", execute)
    results: dict[str, Result] = {}
    LocalExecutor(build_jobs=2, run_slots=2).grade(
        [Job(0, "ada", compose(flash, None, tmp_path / "ada"))], flash, Options(cache_dir=cache_dir),
        lambda job, result: results.__setitem__(job.student, result))
    ada = results["ada"]
    assert ada.status == "error" and ada.outcome == "error"
    assert ada.message.startswith("the grader failed on this submission (a bug in the grader or its machine, "
                                  "not in your code): graded again with nothing beside it, the machine could not "
                                  "start a thread of the grader's"), ada.message
    assert [(r.stage, r.fault) for r in ada.retries] == [("run", "thread")]


def test_a_bug_in_the_grader_is_an_error_that_says_so_and_is_not_retried(flash: Assignment, tmp_path: Path,
                                                                       cache_dir: Path, monkeypatch) -> None:
    _as_threads(monkeypatch)
    calls: list[str] = []

    def execute(built, assignment, options, outputs):
        calls.append(built.checkout.root.name)
        raise KeyError("kernels")

    monkeypatch.setattr(local, "execute_stage", execute)
    results: dict[str, Result] = {}
    LocalExecutor(build_jobs=2, run_slots=2).grade(
        [Job(0, "ada", compose(flash, None, tmp_path / "ada"))], flash, Options(cache_dir=cache_dir),
        lambda job, result: results.__setitem__(job.student, result))
    ada = results["ada"]
    assert ada.status == "error" and ada.retries == [] and calls == ["ada"]
    assert ada.message.startswith("the grader failed on this submission (a bug in the grader, not in your code): "
                                  "KeyError: 'kernels'"), ada.message


def _slot_processes() -> dict[int, list[int]]:
    """This process's children (the run slots' processes) and the harnesses below each."""
    parents: dict[int, int] = {}
    harnesses: list[int] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
            if b"grader.boundary.harness" in Path(f"/proc/{entry.name}/cmdline").read_bytes():
                harnesses.append(int(entry.name))
        except OSError:
            continue
        parents[int(entry.name)] = int(stat[stat.rindex(")") + 2:].split()[1])
    below: dict[int, list[int]] = {pid: [] for pid, parent in parents.items() if parent == os.getpid()}
    for harness in harnesses:
        pid = harness
        while pid in parents and parents[pid] not in (os.getpid(), 0, 1):
            pid = parents[pid]
        if pid in below:
            below[pid].append(harness)
    return below


def test_a_run_slot_process_that_dies_costs_no_one_and_its_submission_is_graded_again(
        flash: Assignment, tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real death: the slot process running a submission is killed (SIGKILL) while its harness runs."""
    from test_batch_dispatch import _slow_reference

    # Nothing removes a killed slot's run folder: the slots' temporary folders under tmp_path, not /tmp.
    scratch = tmp_path / "tmp"
    scratch.mkdir(mode=0o755)
    monkeypatch.setenv("TMPDIR", str(scratch))  # the slots are processes started anew
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    # The gold first, unkilled: on a fresh cache the slot computes it before any harness, and the kill is the run's.
    grade(flash.reference_dir, flash, Options(cache_dir=cache_dir))

    jobs = [Job(i, f"s{i}", _slow_reference(flash, tmp_path / f"s{i}", 300)) for i in range(3)]
    killed: list[int] = []
    stop = threading.Event()

    def kill_one_slot() -> None:
        while not stop.is_set() and not killed:
            for slot, harnesses in _slot_processes().items():
                if harnesses:
                    os.kill(slot, 9)
                    killed.append(slot)
                    break
            time.sleep(0.05)

    killer = threading.Thread(target=kill_one_slot, daemon=True)
    killer.start()
    results: dict[str, Result] = {}
    try:
        LocalExecutor(build_jobs=2, run_slots=2).grade(
            jobs, flash, Options(cache_dir=cache_dir), lambda job, result: results.__setitem__(job.student, result))
    finally:
        stop.set()
        killer.join()
    assert killed, "no slot process was seen running a harness"
    assert {s: (r.status, r.score) for s, r in results.items()} == {f"s{i}": ("graded", 3) for i in range(3)}, \
        {s: r.message for s, r in results.items()}
    retried = [r for result in results.values() for r in result.retries]
    assert [(r.stage, r.fault) for r in retried] == [("run", "process_died")]


def test_the_grader_tells_the_machines_failures_from_its_own_bugs_as_the_kernel_raises_them(tmp_path: Path) -> None:
    """Real refusals: a process run as nobody with RLIMIT_NPROC 1 can start neither a thread nor a process."""
    probe = """
import json, os, resource, subprocess, threading
resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))
raised = []
for start in (lambda: threading.Thread(target=lambda: None).start(), lambda: subprocess.Popen(["true"])):
    try:
        start()
        raised.append(None)
    except Exception as error:
        raised.append([type(error).__name__, getattr(error, "errno", None), str(error)])
print(json.dumps(raised))
"""
    if os.geteuid() != 0:
        pytest.skip("needs root, to run the probe as nobody (RLIMIT_NPROC binds no root process)")

    def as_nobody() -> None:
        os.setgid(65534)
        os.setuid(65534)

    # nobody must reach the interpreter where it is (under /root on some machines), as the `process` sandbox makes
    # it (docs/sandbox.md): before any sandbox of this suite had run, the probe could not start (Permission denied).
    make_searchable(Path(sys.executable).resolve())

    completed = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True, timeout=60,
                               preexec_fn=as_nobody, cwd="/")
    thread, process = json.loads(completed.stdout)
    assert thread is not None and process is not None, completed.stdout
    rebuilt = [RuntimeError(thread[2]) if thread[0] == "RuntimeError" else OSError(thread[1], thread[2]),
               OSError(process[1], process[2]) if process[1] is not None else RuntimeError(process[2])]
    assert [machine_fault(error).kind for error in rebuilt] == ["thread", "resources"], (thread, process)
    assert machine_fault(ValueError("a bug")) is None and machine_fault(FileNotFoundError(2, "gone")) is None


def test_a_machine_error_keeps_its_fault_across_processes() -> None:
    import pickle

    error = pickle.loads(pickle.dumps(MachineError("the harness could not start (timeout): no output", "harness")))
    assert isinstance(error, MachineError) and error.fault == "harness" and str(error).startswith("the harness")
    assert machine_fault(error).kind == "harness"
    assert Retry("run", "harness", str(error)) == Result.from_dict(
        {**_minimal_result(), "retries": [{"stage": "run", "fault": "harness", "detail": str(error)}]}).retries[0]


def _minimal_result() -> dict:
    return {"assignment": "a", "assignment_version": "1", "title": "t", "score": 0.0, "max_score": 1.0, "kernels": [],
            "submission": {"path": "p"}, "stages": {}, "seed": {}, "public_only": False, "graded_at": "now",
            "environment": {"grader_version": "0", "target": "cpp", "device": "", "compiler": "", "sandbox": "local",
                            "sandbox_enforced": [], "host": "h", "python": "3"}}


def test_a_compiler_the_machine_could_not_start_is_no_compile_error() -> None:
    """EAGAIN while starting g++ is the machine's (graded again alone, nothing cached); a missing one is a result."""
    import errno

    from grader.build import _cannot_run

    with pytest.raises(MachineError) as raised:
        _cannot_run(["g++"], BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable"))
    assert machine_fault(raised.value).kind == "resources"
    assert _cannot_run(["nvcc"], FileNotFoundError(errno.ENOENT, "No such file or directory")) == \
        "cannot run nvcc: No such file or directory"
