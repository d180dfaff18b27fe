"""A process cap per sandbox: each harness runs as a uid of its own (grader/sandbox/uids.py), whose
RLIMIT_NPROC counts that sandbox alone, and a fork bomb is ended at its cap, beside others too.

Real sandboxes, real forks (bounded by the cap under test), real flocks across processes. As root
only: a grader that is not root has no uids to hand out.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grader.errors import GraderError
from grader.samples import variants
from grader.sandbox import Limits, Mounts, sandbox_named
from grader.sandbox.uids import LEASES, UidRange, lease_uid, processes_of, uid_range
from grader.assignment import Assignment

from conftest import grade_variant, with_time_limit

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="sandbox uids are handed out by a grader running as root")

BOMB_KERNEL = "standard_attention"
# Far below pid_max (32768 on the runners of issue 20): three sandboxes' harnesses and compiles, and one
# bomb at its cap of 64, fit many times over.
MACHINE_HEADROOM = 300


def leased_here() -> set[int]:
    """The sandbox uids this process holds a lease on now (an open lock file under LEASES): its own sandboxes'
    uids, not those of another grader or test run on the machine, which lease from the same range."""
    held = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = Path(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
        if target.parent == LEASES and target.name.isdigit():
            held.add(int(target.name))
    return held


class ProcessCounter:
    """Counts the machine's processes (/proc entries) and the tasks of each sandbox uid every 50 ms, from a thread."""

    def __init__(self) -> None:
        self.uids = uid_range()
        # (time, processes, tasks by sandbox uid, the uids this process's sandboxes held)
        self.samples: list[tuple[float, int, dict[int, int], set[int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ProcessCounter:
        self.at_start = self._count()[0]
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append((time.monotonic(), *self._count()))  # after the gradings: what they left

    def _count(self) -> tuple[int, dict[int, int], set[int]]:
        processes, tasks, ours = 0, {}, leased_here()
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            processes += 1
            try:
                status = Path(f"/proc/{name}/status").read_text()
            except OSError:
                continue
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            uid = int(fields.get("Uid", "0").split()[0])
            # A zombie runs nothing: its parent, or the machine's init, reaps it.
            if self.uids.first <= uid <= self.uids.last and not fields.get("State", "").strip().startswith("Z"):
                tasks[uid] = tasks.get(uid, 0) + int(fields.get("Threads", "1"))
        return processes, tasks, ours

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.samples.append((time.monotonic(), *self._count()))

    def most(self) -> int:
        return max((count for _, count, _, _ in self.samples), default=self.at_start)

    def bomb_spans(self, cap: int) -> list[float]:
        """Each bomb's seconds, from the first sample where its uid, leased by this process, had more tasks than
        any harness or compiler starts (a quarter of the cap) to the first where it had none; one bomb a harness
        (a case each)."""
        spans, since = [], {}
        for at, _, tasks, ours in self.samples:
            for uid, count in tasks.items():
                if count > cap // 4 and uid in ours:
                    since.setdefault(uid, at)
            for uid in [u for u in since if tasks.get(u, 0) == 0]:
                spans.append(at - since.pop(uid))
        assert not since, f"a bomb still running when sampling stopped: {since}"
        return spans


@pytest.mark.parametrize("cgroups", [pytest.param(True, id="cgroup"), pytest.param(False, id="uid-rlimit")])
def test_a_fork_bomb_ends_at_its_cap_within_seconds_beside_other_sandboxes(cgroups: bool, flash: Assignment,
                                                                          tmp_path: Path, cache_dir: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The bomb's kernel ends with the limit's words within 5 s of its first fork; the two gradings beside it
    (two harnesses each) and its own other kernel pass; the machine's process count stays bounded."""
    if not cgroups:
        monkeypatch.setenv("KERNEL_GRADER_NO_CGROUPS", "1")
    # 30 s a case: the time limit is not what ends the bomb (the bound under test is 5 s from its first forks;
    # on a loaded 2-core machine its 64 forks of a NumPy process alone can take a second or two).
    flash = with_time_limit(flash, 30.0)
    bomb = next(v for v in variants(flash) if v.name == "attack-fork-bomb")
    grade_variant(flash, None, tmp_path / "warm", cache_dir)  # builds, inputs and gold cached: the runs overlap
    with ProcessCounter() as counter, ThreadPoolExecutor(3) as pool:
        neighbours = [pool.submit(grade_variant, flash, None, tmp_path / f"neighbour-{n}", cache_dir, harnesses=2)
                      for n in range(2)]
        attacked = pool.submit(grade_variant, flash, bomb, tmp_path / "bomb", cache_dir, harnesses=2).result()
        beside = [future.result() for future in neighbours]
    spans = counter.bomb_spans(64)
    print(f"machine processes: {counter.at_start} at start, at most {counter.most()} ({len(counter.samples)} "
          f"samples every 50 ms); each bomb's tasks gone this long after it passed 16: "
          f"{', '.join(f'{span:.2f} s' for span in spans)}")
    kernels = {k.name: k for k in attacked.kernels}
    assert kernels[BOMB_KERNEL].status == "crashed", kernels[BOMB_KERNEL].message
    assert "reached the process/thread limit (64)" in kernels[BOMB_KERNEL].message
    assert all(k.status == "passed" and k.score == k.max_score for k in kernels.values() if k.name != BOMB_KERNEL)
    for result in beside:
        assert result.score == result.max_score, [(k.name, k.message) for k in result.kernels]
    assert spans and max(spans) < 5.0
    assert counter.most() <= counter.at_start + MACHINE_HEADROOM


def _started(sandbox_name: str, tmp_path: Path, name: str, code: str, limits: Limits = Limits()):
    writable = tmp_path / name
    writable.mkdir()
    process = sandbox_named(sandbox_name).start(
        [sys.executable, "-c", code], cwd=writable, mounts=Mounts(writable=writable), limits=limits,
        stdout=tmp_path / f"{name}.out", stderr=tmp_path / f"{name}.err", env={"PATH": "/usr/bin:/bin"})
    return process, tmp_path / f"{name}.out"


def _printed_uid(output: Path, process) -> int:
    deadline = time.monotonic() + 60
    while not output.read_text().strip():
        assert process.poll() is None and time.monotonic() < deadline, output.with_suffix(".err").read_text()
        time.sleep(0.05)
    return int(output.read_text().split()[0])


def _lease_is_free(uid: int) -> bool:
    with open(LEASES / str(uid), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(lock, fcntl.LOCK_UN)
        return True


@pytest.mark.parametrize("sandbox_name", ["local", "process"])
def test_sandboxes_at_once_run_as_distinct_uids_each_freed_with_its_leftovers(sandbox_name: str,
                                                                             tmp_path: Path) -> None:
    """Three at once: three uids of the range, each held while its sandbox runs; after `kill` the uid is free
    and no process of it is left, also the one its code left behind in the background."""
    # Prints its uid, leaves a child behind (its own session: out of the process group), and waits.
    code = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(600)\n"
            "print(os.getuid(), flush=True)\ntime.sleep(600)")
    started = [_started(sandbox_name, tmp_path, f"sandbox-{n}", code) for n in range(3)]
    try:
        uids = [_printed_uid(output, process) for process, output in started]
        assert len(set(uids)) == 3 and all(uid_range().first <= uid <= uid_range().last for uid in uids), uids
        assert not any(_lease_is_free(uid) for uid in uids)
        assert all(len(processes_of(uid)) >= 2 for uid in uids)  # the harness and the child it left
    finally:
        for process, _ in started:
            process.kill()
    assert all(_lease_is_free(uid) for uid in uids)
    assert [processes_of(uid) for uid in uids] == [set(), set(), set()]


def _as(uid: int) -> None:
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def test_a_uid_is_handed_out_only_without_leftovers_and_held_across_processes(tmp_path: Path) -> None:
    """A range of one uid: a process of it left running (a grader that died mid-run) is killed when it is
    leased; another process's lease (a second grader) makes it unavailable until that process dies."""
    uids = UidRange(uid_range().last, uid_range().last)
    folder = tmp_path / "leases"
    leftover = subprocess.Popen(["sleep", "600"], preexec_fn=lambda: _as(uids.first))
    try:
        lease = lease_uid(uids, folder)
        assert lease.uid == uids.first
        assert leftover.wait(timeout=10) == -9  # killed before the uid was handed out
        lease.release()
        holder = subprocess.Popen(
            [sys.executable, "-c", "import sys, time\nfrom pathlib import Path\n"
             "from grader.sandbox.uids import UidRange, lease_uid\n"
             f"lease = lease_uid(UidRange({uids.first}, {uids.last}), Path({str(folder)!r}))\n"
             "print(lease.uid, flush=True)\ntime.sleep(600)"],
            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
        assert holder.stdout.readline().strip() == str(uids.first)  # type: ignore[union-attr]
        with pytest.raises(GraderError, match=f"every sandbox uid of {uids} is held"):
            lease_uid(uids, folder)
        holder.kill()  # a grader killed: its flock goes with it
        holder.wait()
        again = lease_uid(uids, folder)
        assert again.uid == uids.first
        again.release()
    finally:
        leftover.kill()


def test_a_uid_range_is_configured_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNEL_GRADER_SANDBOX_UIDS", "70000-70099")
    assert uid_range() == UidRange(70000, 70099)
    monkeypatch.setenv("KERNEL_GRADER_SANDBOX_UIDS", "0-10")  # root's and the system's: refused
    with pytest.raises(GraderError, match="KERNEL_GRADER_SANDBOX_UIDS"):
        uid_range()


def test_the_process_limit_is_the_sandbox_uid_s_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No cgroup: threads past the cap fail inside the sandbox (RLIMIT_NPROC of its uid), and the watchdog ends
    the run at its cap; a sandbox started beside it, and the grader's own threads, are not counted with it."""
    monkeypatch.setenv("KERNEL_GRADER_NO_CGROUPS", "1")
    code = ("import os, threading, time\nstarted = 0\ntry:\n    for _ in range(200):\n"
            "        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n        started += 1\n"
            "except RuntimeError:\n    pass\nprint(os.getuid(), started, flush=True)\ntime.sleep(30)")
    process, output = _started("local", tmp_path, "threads", code, Limits(processes=32))
    try:
        assert process.wait(60) == -9  # ended at its cap, long before its 30 s sleep
        assert process.limit_hit() == "reached the process/thread limit (32)"
    finally:
        process.kill()
    words = output.read_text().split()
    if words:  # printed before the watchdog ended it: its threads failed at the cap, inside
        assert int(words[1]) < 32
    neighbour, neighbour_output = _started("local", tmp_path, "neighbour", "import os\nprint(os.getuid(), flush=True)")
    try:
        assert neighbour.wait(60) == 0
    finally:
        neighbour.kill()
    assert neighbour_output.read_text().strip()
    helper = threading.Thread(target=time.sleep, args=(0,))
    helper.start()  # the grader's own threads are not counted with any sandbox's
    helper.join()
