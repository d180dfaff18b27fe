"""How long a sandbox-style spawn (fork + preexec_fn + exec) takes from the grader's process,
alone, after the gold of gpt2-m1 is computed in it, and while NumPy work runs in another thread."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from grader.dispatch.local import prepare_gold_apart  # noqa: E402
from grader.options import Options  # noqa: E402
from grader.pipeline import prepare_gold  # noqa: E402
from grader.assignment import load_assignment  # noqa: E402


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def spawns(n: int, threads: int = 4, limit_s: float = 60.0) -> str:
    """Mean time of a fork + preexec_fn + exec from `threads` threads at once, `n` each; bounded: a stall is said."""
    done: list[float] = []

    def one() -> None:
        for _ in range(n):
            subprocess.run(["/bin/true"], preexec_fn=os.setsid, check=True)
            done.append(time.monotonic())

    started = time.monotonic()
    for _ in range(threads):
        threading.Thread(target=one, daemon=True).start()
    while len(done) < n * threads and time.monotonic() - started < limit_s:
        time.sleep(0.01)
    if len(done) < n * threads:
        return f"STALLED: {len(done)} of {n * threads} spawns done in {limit_s:.0f} s"
    return f"{1000 * (max(done) - started) / (n * threads):.1f} ms a spawn"


def churn(stop: threading.Event) -> None:
    a = np.random.default_rng(0).standard_normal((4096, 4096))
    while not stop.is_set():
        big = np.empty((8, 1024, 1024 * 8))  # 512 MiB written anew each round
        big[:] = 1.0
        a = a @ a.T / 4096


print(f"python {sys.version.split()[0]}, numpy {np.__version__}, cores {os.cpu_count()}", flush=True)
print(f"fresh process: rss {rss_mib():.0f} MiB, spawn {spawns(10)}", flush=True)
cache = Path(tempfile.mkdtemp())
started = time.monotonic()
gpt2 = load_assignment("gpt2-m1")
prepare_gold(gpt2, Options(cache_dir=cache, secret="x"))
print(f"gold of gpt2-m1 (secret seed, cold): {time.monotonic() - started:.1f} s; rss {rss_mib():.0f} MiB", flush=True)
print(f"after gold: spawn {spawns(10)}", flush=True)
apart = threading.Thread(target=prepare_gold_apart, args=(gpt2, Options(cache_dir=Path(tempfile.mkdtemp()), secret="y")))
apart.start()
time.sleep(3)  # the spawned process is computing by now
print(f"beside a cold gold in a process of its own (the batch's way): spawn {spawns(10)}", flush=True)
apart.join()
stop = threading.Event()
thread = threading.Thread(target=churn, args=(stop,), daemon=True)
thread.start()
time.sleep(2)
print(f"beside NumPy BLAS work in another thread: spawn {spawns(5)}", flush=True)
stop.set()
os._exit(0)  # the stalled spawners are daemon threads stuck in fork
