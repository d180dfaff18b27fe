"""The executors: run slots that each see one GPU (several slots to a GPU, a crash beside another
submission run again alone), one submission's failure kept to itself, and the Slurm job script
filled in from the spec."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

from grader.dispatch import Job, executor_named
import grader.dispatch.local as local
from grader.dispatch.local import SHARED_RUN, LocalExecutor, _run_pool
from grader.dispatch.slurm import SlurmExecutor, time_limit_minutes
from grader.gate import Gate
from grader.options import Options
from grader.samples import compose, variants
from grader.assignment import load_assignment


def test_each_run_slot_process_sees_only_its_gpu() -> None:
    import os

    pools = [_run_pool("2"), _run_pool("5")]
    try:
        seen = [pool.submit(os.getenv, "CUDA_VISIBLE_DEVICES").result(timeout=60) for pool in pools]
        pids = {pool.submit(os.getpid).result(timeout=60) for pool in pools}
    finally:
        for pool in pools:
            pool.shutdown()
    assert seen == ["2", "5"] and len(pids) == 2 and os.getpid() not in pids


def test_one_slot_per_gpu_for_cuda_and_run_slots_for_cpp() -> None:
    assert LocalExecutor(gpus=["0", "1", "3"], run_slots=1).slots(load_assignment("gpt2-m1")) == ["0", "1", "3"]
    assert LocalExecutor(run_slots=3).slots(load_assignment("flash-attention-cpu")) == [None] * 3


def test_run_slots_share_each_gpu_four_by_default_where_the_cores_allow(monkeypatch) -> None:
    gpt2 = load_assignment("gpt2-m1")
    assert LocalExecutor(gpus=["0", "1"], run_slots=3).slots(gpt2) == ["0", "1"] * 3  # spread over the GPUs
    monkeypatch.setattr(local, "usable_cores", lambda: 16)
    assert LocalExecutor(gpus=["0"]).slots(gpt2) == ["0"] * 4
    monkeypatch.setattr(local, "usable_cores", lambda: 2)
    assert LocalExecutor(gpus=["0"]).slots(gpt2) == ["0", "0"]  # no more slots than cores
    monkeypatch.setattr(local, "usable_cores", lambda: 1)
    assert LocalExecutor(gpus=["0"]).slots(gpt2) == ["0"]


def test_the_slots_share_the_cores_among_their_harnesses_unless_asked(monkeypatch) -> None:
    monkeypatch.setattr(local, "usable_cores", lambda: 16)
    monkeypatch.delenv(local.HARNESSES_ENV, raising=False)
    options = Options(cache_dir=Path("cache"))
    assert local.harnesses_beside(options, 2).harnesses == 8
    assert local.harnesses_beside(options, 32).harnesses == 1
    assert local.harnesses_beside(Options(cache_dir=Path("cache"), harnesses=3), 2).harnesses == 3
    monkeypatch.setenv(local.HARNESSES_ENV, "5")
    assert local.harnesses_beside(options, 2).harnesses is None  # the runner reads the machine's setting itself


def test_a_shared_gpu_marks_runs_beside_another_and_lets_a_run_alone_go_first() -> None:
    gpu = Gate()  # as each GPU's run slots share it: any number at once
    with gpu.hold() as first:
        with gpu.hold() as second:
            pass
    with gpu.hold() as lone:
        pass
    assert first.shared and second.shared and not lone.shared

    order: list[str] = []
    release, inside = threading.Event(), threading.Event()

    def shared(name: str, hold: bool) -> None:
        with gpu.hold():
            order.append(f"{name} in")
            if hold:
                inside.set()
                release.wait(30)
            order.append(f"{name} out")

    def alone() -> None:
        with gpu.hold(alone=True):
            order.append("alone in")
            order.append("alone out")

    threads = [threading.Thread(target=shared, args=("s1", True))]
    threads[0].start()
    assert inside.wait(30)
    threads.append(threading.Thread(target=alone))
    threads[1].start()
    while not gpu.alone_waiting:  # the run alone now waits for s1 to end
        time.sleep(0.01)
    threads.append(threading.Thread(target=shared, args=("s2", False)))
    threads[2].start()
    release.set()
    for thread in threads:
        thread.join(30)
    # s2 came while the run alone waited: it runs after it, never beside it.
    assert order == ["s1 in", "s1 out", "alone in", "alone out", "s2 in", "s2 out"]


def _slow_reference(flash, folder: Path, milliseconds: int) -> Path:
    """The reference, with standard_attention sleeping before each call: its harness lives for a while."""
    compose(flash, None, folder)
    source = folder / "src" / "standard_attention.cpp"
    signature = "void standard_attention(const float* Q, const float* K, const float* V, float* O, int N, int d) {"
    text = source.read_text()
    assert signature in text
    source.write_text("#include <chrono>\n#include <thread>\n" + text.replace(
        signature, signature + f"\n    std::this_thread::sleep_for(std::chrono::milliseconds({milliseconds}));"))
    return folder


class HarnessWatch(threading.Thread):
    """Which run slots (direct children of this process) have a harness process alive, sampled every 10 ms."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.most_slots_at_once = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            parents: dict[int, int] = {}
            harnesses = []
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
            slots = set()
            for pid in harnesses:
                while pid in parents and parents[pid] not in (os.getpid(), 0, 1):
                    pid = parents[pid]
                if parents.get(pid) == os.getpid():
                    slots.add(pid)
            self.most_slots_at_once = max(self.most_slots_at_once, len(slots))
            time.sleep(0.01)


@pytest.mark.parametrize("run_slots", [2, 1])
def test_two_run_slots_on_one_gpu_run_two_submissions_at_once(tmp_path: Path, monkeypatch, run_slots: int) -> None:
    # The C++ pack stands in for a CUDA one (this machine has no GPU): its runs go through the GPU's slots.
    monkeypatch.setattr(local, "target_of", lambda assignment: SimpleNamespace(needs_gpu=True))
    flash = load_assignment("flash-attention-cpu")
    # 5 cases x 0.4 s: each submission's first harness lives 2 s, longer than the builds' spread.
    jobs = [Job(i, f"s{i}", _slow_reference(flash, tmp_path / f"s{i}", 400)) for i in range(2)]
    results = {}
    watch = HarnessWatch()
    watch.start()
    try:
        LocalExecutor(build_jobs=2, gpus=["0"], run_slots=run_slots).grade(
            jobs, flash, Options(cache_dir=tmp_path / "cache"),
            lambda job, result: results.__setitem__(job.student, result))
    finally:
        watch.stop.set()
        watch.join()
    assert [results[s].score for s in ("s0", "s1")] == [3, 3]
    # Two slots: a harness of each alive at one moment. One slot: never (the check sees what it should).
    assert watch.most_slots_at_once == run_slots


def test_a_kernel_that_crashed_beside_another_submission_is_run_again_alone_and_that_run_counts(
        tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(local, "target_of", lambda assignment: SimpleNamespace(needs_gpu=True))
    # Run slots as threads of this process, so that the run can be watched: both first runs meet
    # at the barrier (they overlap for certain); a run again alone must find nothing beside it.
    monkeypatch.setattr(local, "_run_pool", lambda device: ThreadPoolExecutor(max_workers=1))
    meeting = threading.Barrier(2, timeout=120)
    running: list[str] = []
    reruns: list[tuple[list[str], list[str]]] = []  # (the kernels run again, the submissions running beside it)
    harnesses_again: list[int | None] = []  # its harnesses at once: one (its own kernels hurt none of its own)
    guard = threading.Lock()
    real_execute = local.execute_stage

    def execute(built, assignment, options, outputs):
        name = built.checkout.root.name
        again = SHARED_RUN in dict(built.stages.stages)
        if not again:
            meeting.wait()
        with guard:
            running.append(name)
            if again:
                reruns.append(([k.name for k in built.kernels], [n for n in running if n != name]))
                harnesses_again.append(options.harnesses)
        try:
            return real_execute(built, assignment, options, outputs)
        finally:
            with guard:
                running.remove(name)

    monkeypatch.setattr(local, "execute_stage", execute)
    flash = load_assignment("flash-attention-cpu")
    segfault = next(v for v in variants(flash) if v.name == "hostile-flash-segfault")
    jobs = [Job(0, "good", compose(flash, None, tmp_path / "good")),
            Job(1, "crash", compose(flash, segfault, tmp_path / "crash"))]
    results = {}
    LocalExecutor(build_jobs=2, gpus=["0"], run_slots=2).grade(
        jobs, flash, Options(cache_dir=tmp_path / "cache", harnesses=2),
        lambda job, result: results.__setitem__(job.student, result))
    assert results["good"].score == 3 and SHARED_RUN not in results["good"].stages
    crash = results["crash"]
    # Run again once, the crashed kernel only, with nothing beside it; the other kernel's first run stands.
    assert SHARED_RUN in crash.stages and reruns == [(["flash_attention"], [])]
    assert harnesses_again == [1]
    assert {k.name: k.status for k in crash.kernels} == {"standard_attention": "passed", "flash_attention": "crashed"}
    assert crash.stages["total"] >= crash.stages[SHARED_RUN] + crash.stages["run"]  # both runs are counted


def test_a_crash_is_confirmed_alone_only_once_nothing_else_is_ready_to_run(tmp_path: Path, monkeypatch) -> None:
    """Confirming at once would hold the GPU's other slot idle (behind a minute's time-out, in a class):
    the submissions ready to run go first, then the crash is run again with the GPU to itself."""
    monkeypatch.setattr(local, "target_of", lambda assignment: SimpleNamespace(needs_gpu=True))
    monkeypatch.setattr(local, "_run_pool", lambda device: ThreadPoolExecutor(max_workers=1))
    monkeypatch.setattr(local, "IDLE_S", 5.0)  # every build is done well within it
    meeting = threading.Barrier(2, timeout=120)
    order: list[str] = []  # runs in the order they started; "again" marks the confirmation
    real_execute = local.execute_stage

    def execute(built, assignment, options, outputs):
        name = built.checkout.root.name
        again = SHARED_RUN in dict(built.stages.stages)
        order.append(f"{name} again" if again else name)
        if name in ("crash", "good") and not again:
            meeting.wait()  # the crash runs beside a neighbour for certain
        return real_execute(built, assignment, options, outputs)

    monkeypatch.setattr(local, "execute_stage", execute)
    flash = load_assignment("flash-attention-cpu")
    segfault = next(v for v in variants(flash) if v.name == "hostile-flash-segfault")
    jobs = [Job(0, "good", compose(flash, None, tmp_path / "good")),
            Job(1, "crash", compose(flash, segfault, tmp_path / "crash")),
            Job(2, "later", compose(flash, None, tmp_path / "later"))]
    results = {}
    LocalExecutor(build_jobs=3, gpus=["0"], run_slots=2).grade(
        jobs, flash, Options(cache_dir=tmp_path / "cache"),
        lambda job, result: results.__setitem__(job.student, result))
    assert order.index("crash again") > order.index("later"), order
    assert {s: r.score for s, r in results.items()} == {"good": 3, "crash": 1, "later": 3}
    assert SHARED_RUN in results["crash"].stages


def test_a_submission_the_grader_fails_on_is_an_error_and_the_rest_are_graded(tmp_path: Path) -> None:
    flash = load_assignment("flash-attention-cpu")
    good = compose(flash, None, tmp_path / "good")
    jobs = [Job(0, "gone", tmp_path / "deleted-after-fetch"), Job(1, "good", good)]
    results = {}
    executor_named("local", build_jobs=2).grade(jobs, flash, Options(cache_dir=tmp_path / "cache"),
                                                lambda job, result: results.__setitem__(job.student, result))
    assert results["good"].status == "graded" and results["good"].score == 3
    assert results["gone"].status == "error" and "deleted-after-fetch" in results["gone"].message


def test_sbatch_script_asks_for_a_gpu_and_the_spec_s_time(tmp_path: Path) -> None:
    gpt2 = load_assignment("gpt2-m1")
    script = SlurmExecutor(tmp_path / "shared", sbatch_args=("--partition=gpu",)).render(
        gpt2, Options(cache_dir=tmp_path / "cache"), 300)
    assert "#SBATCH --array=0-299\n" in script and "#SBATCH --gres=gpu:1" in script
    assert f"#SBATCH --time={time_limit_minutes(gpt2)}\n" in script and "#SBATCH --partition=gpu" in script
    assert time_limit_minutes(gpt2) >= 10
    cpu = SlurmExecutor(tmp_path / "shared", max_parallel=4).render(
        load_assignment("flash-attention-cpu"), Options(cache_dir=tmp_path / "cache"), 3)
    assert "#SBATCH --array=0-2%4" in cpu and "--gres" not in cpu
