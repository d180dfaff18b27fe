"""The per-GPU lock across processes: timing has its GPU alone, correctness harnesses share it."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.timing.lock import LOCKS_ENV, GpuBusy, gpu_key, gpu_lock

HOLDER = """\
import sys, time
from pathlib import Path
from grader.timing.lock import gpu_lock
with gpu_lock(exclusive=sys.argv[1] == "exclusive", gpu=sys.argv[2]):
    print("held", flush=True)
    time.sleep(float(sys.argv[3]))
    if len(sys.argv) > 4:
        Path(sys.argv[4]).touch()  # the last thing done while it still holds the lock
"""


@pytest.fixture()
def locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(LOCKS_ENV, str(tmp_path))
    return tmp_path


def hold(mode: str, gpu: str, seconds: float, locks: Path, done: Path | None = None) -> subprocess.Popen:
    """Another process holding GPU `gpu`'s lock for `seconds`, once it says so; it touches `done` just before
    it lets go."""
    process = subprocess.Popen([sys.executable, "-c", HOLDER, mode, gpu, str(seconds), *([str(done)] if done else [])],
                               stdout=subprocess.PIPE,
                               text=True, env={"PYTHONPATH": str(Path(__file__).resolve().parent.parent),
                                               LOCKS_ENV: str(locks), "PATH": "/usr/bin:/bin"})
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    return process


def test_timing_waits_for_a_correctness_harness_on_its_gpu(locks: Path) -> None:
    harness = hold("shared", "0", 30, locks)
    try:
        with pytest.raises(GpuBusy, match="GPU 0 is busy"):
            with gpu_lock(exclusive=True, gpu="0", timeout_s=0.3):
                pass
        with gpu_lock(exclusive=False, gpu="0", timeout_s=0.3) as held:  # another harness shares it
            assert not held.exclusive
        with gpu_lock(exclusive=True, gpu="1", timeout_s=0.3):  # another GPU is free
            pass
    finally:
        harness.kill()
        harness.wait()
    with gpu_lock(exclusive=True, gpu="0", timeout_s=5) as held:  # its holder died: the lock went with it
        assert held.exclusive


def test_a_harness_waits_while_timing_holds_the_gpu(locks: Path, tmp_path: Path) -> None:
    done = tmp_path / "timing-done"
    timing = hold("exclusive", "0", 1.0, locks, done)
    with gpu_lock(exclusive=False, gpu="0", timeout_s=30):
        # The order of events, not seconds: the timing job had finished its work when the harness got the GPU.
        assert done.exists(), "the harness got the GPU while the timing job held it"
    timing.wait()


def wait_for_turnstile(path: Path) -> None:
    """Until another process holds the turnstile exclusively (a shared take of it fails)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with open(path, "a") as turnstile:
            try:
                fcntl.flock(turnstile, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return
        time.sleep(0.02)
    raise AssertionError("the timing job never reached the turnstile")


def test_waiting_timing_is_not_starved_by_new_harnesses(locks: Path) -> None:
    harness = hold("shared", "0", 1.0, locks)
    timing = subprocess.Popen([sys.executable, "-c", HOLDER, "exclusive", "0", "1.0"], stdout=subprocess.PIPE, text=True,
                              env={"PYTHONPATH": str(Path(__file__).resolve().parent.parent), LOCKS_ENV: str(locks),
                                   "PATH": "/usr/bin:/bin"})
    wait_for_turnstile(locks / "0.turnstile")  # timing waits for the first harness, past the turnstile
    with pytest.raises(GpuBusy):  # a new harness queues behind it instead of slipping in
        with gpu_lock(exclusive=False, gpu="0", timeout_s=0.3):
            pass
    for process in (harness, timing):
        process.wait()


def test_the_gpu_is_the_first_visible_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-3f2a, 1")
    assert gpu_key() == "GPU-3f2a"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert gpu_key() == "0"
