"""Throughput of `grader batch`: N synthetic submissions of one assignment, graded as a class.

    python benchmarks/batch.py ASSIGNMENT [-n N] [--mix correct=12,broken=6,crashing=3,timeout=3] [batch options]

Each submission is a git repository holding the reference with one bundled variant laid over it
(an alternative: correct; a mutant or a compile error: broken; a hostile crash; an infinite loop:
timing out), with a comment of its own in every source file so that every submission really
compiles. The batch runs as `grader batch` in a subprocess, exactly as an instructor runs it.

Measured, not estimated:
- submissions per hour: N / wall time of the whole batch (clones, builds, gold, runs, store);
- CPU utilisation: CPU seconds (user + system) of the batch's whole process tree / (wall x cores), the
  tree's CPU time read from /proc every 50 ms (rusage of reaped children is printed beside it: it
  misses the sandboxed harness, which is reaped inside its own PID namespace);
- GPU utilisation (CUDA assignments): nvidia-smi's utilization.gpu sampled every 0.5 s, mean over the batch;
- compile vs run share: the process tree sampled every 50 ms; the share of wall time during which at
  least one compiler process (g++, nvcc, cc1plus, cicc, ptxas, ...) or one harness process ran, and both.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader.batch.summary import outcome  # noqa: E402
from grader.samples import compose, variants  # noqa: E402
from grader.spec import load_assignment  # noqa: E402
from grader.store import Store  # noqa: E402

COMPILERS = {"g++", "gcc", "c++", "cc1plus", "as", "ld", "collect2", "nvcc", "cicc", "ptxas", "fatbinary", "nvlink",
             "cudafe++", "cc1"}
DEADLINE = "2030-01-01 00:00 UTC"


def kinds_of(assignment) -> dict[str, list]:
    bundled = variants(assignment)
    return {
        "correct": [None] + [v for v in bundled if v.expect == "passed"],
        "broken": [v for v in bundled if v.expect in ("failed", "compile_error")],
        "crashing": [v for v in bundled if v.expect == "crashed"],
        "timeout": [v for v in bundled if v.expect == "timeout"],
    }


def make_class(assignment, mix: dict[str, int], folder: Path) -> Path:
    kinds = kinds_of(assignment)
    lines = ["student,repository"]
    number = 0
    for kind, count in mix.items():
        pool = kinds[kind]
        if count and not pool:
            raise SystemExit(f"{assignment.name} has no bundled {kind} variant")
        for i in range(count):
            variant = pool[i % len(pool)]
            repo = folder / "repos" / f"s{number:03d}-{kind}"
            compose(assignment, variant, repo)
            for source in repo.rglob("*"):
                if source.suffix in (".cu", ".cpp", ".cuh", ".h") and source.is_file():
                    source.write_text(source.read_text() + f"\n// submission {number}\n")
            git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.edu"]
            subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
            subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
            subprocess.run([*git, "commit", "-q", "-m", "submission"], cwd=repo, check=True)
            lines.append(f"s{number:03d}-{kind},{repo}")
            number += 1
    roster = folder / "roster.csv"
    roster.write_text("\n".join(lines) + "\n")
    return roster


class TreeSampler(threading.Thread):
    """Samples the batch's process tree: is a compiler running, is a harness running."""

    def __init__(self, root_pid: int, interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.root_pid, self.interval = root_pid, interval
        self.samples: list[tuple[bool, bool]] = []
        self.cpu_ticks: dict[tuple[int, int], int] = {}  # (pid, start time) -> utime + stime last seen
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.samples.append(self._sample())
            time.sleep(self.interval)

    @property
    def cpu_seconds(self) -> float:
        """CPU time of every process seen in the tree (the sandboxed harness too, which rusage misses:
        it is reaped inside its own PID namespace); a process's last 50 ms may be missed."""
        return sum(self.cpu_ticks.values()) / os.sysconf("SC_CLK_TCK")

    def _sample(self) -> tuple[bool, bool]:
        parents: dict[int, int] = {}
        names: dict[int, str] = {}
        ticks: dict[int, tuple[int, int]] = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry.name}/stat").read_text()
            except OSError:
                continue
            name = stat[stat.index("(") + 1: stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2:].split()
            parents[int(entry.name)] = int(fields[1])
            names[int(entry.name)] = name
            ticks[int(entry.name)] = (int(fields[19]), int(fields[11]) + int(fields[12]))  # starttime, utime + stime
        tree, frontier = set(), [self.root_pid]
        children: dict[int, list[int]] = {}
        for pid, ppid in parents.items():
            children.setdefault(ppid, []).append(pid)
        while frontier:
            pid = frontier.pop()
            tree.add(pid)
            frontier.extend(children.get(pid, []))
        for pid in tree:
            if pid in ticks:
                start, used = ticks[pid]
                self.cpu_ticks[(pid, start)] = max(used, self.cpu_ticks.get((pid, start), 0))
        compiling = any(names.get(p) in COMPILERS for p in tree)
        running = False
        for pid in tree:
            try:
                if b"grader.harness" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    running = True
                    break
            except OSError:
                continue
        return compiling, running


class GpuSampler(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=10).stdout.split()
                if out:
                    self.samples.append(statistics.mean(float(x) for x in out))
            except (OSError, subprocess.TimeoutExpired, ValueError):
                return
            time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("assignment")
    parser.add_argument("-n", type=int, default=24, help="submissions (default 24)")
    parser.add_argument("--mix", default=None, help="e.g. correct=12,broken=6,crashing=3,timeout=3 (default: 1/2, "
                                                   "1/4, 1/8, 1/8 of N)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--keep", type=Path, default=None, help="build the class in this folder and keep it")
    arguments, batch_options = parser.parse_known_args()
    assignment = load_assignment(arguments.assignment)
    n = arguments.n
    if arguments.mix:
        mix = {k: int(v) for k, v in (part.split("=") for part in arguments.mix.split(","))}
    else:
        mix = {"correct": n - n // 4 - 2 * (n // 8), "broken": n // 4, "crashing": n // 8, "timeout": n // 8}
    folder = arguments.keep or Path(tempfile.mkdtemp(prefix="kg-bench-batch-"))
    folder.mkdir(parents=True, exist_ok=True)
    roster = make_class(assignment, mix, folder)
    cache = folder / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    store = folder / "grades.sqlite"
    store.unlink(missing_ok=True)
    command = [sys.executable, "-m", "grader", "batch", str(roster), "-a", assignment.name, "--deadline", DEADLINE,
               "--store", str(store), "--cache-dir", str(cache), *batch_options]
    print("$", " ".join(command), flush=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tree = TreeSampler(process.pid)
    gpu = GpuSampler() if assignment.target == "cuda" else None
    tree.start()
    if gpu:
        gpu.start()
    assert process.stdout is not None
    for line in process.stdout:  # passed through as it comes: a long batch shows its progress in the log
        print(line, end="", flush=True)
    process.wait()
    wall = time.perf_counter() - started
    tree.stop.set()
    if gpu:
        gpu.stop.set()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if process.returncode != 0:
        raise SystemExit(f"grader batch exited with {process.returncode}")
    cpu_seconds = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    cores = os.cpu_count() or 1
    results = Store(store).latest(assignment.name)
    outcomes: dict[str, int] = {}
    for result in results:
        # The batch's own words, with time-outs told apart from crashes (the mix builds both).
        kind = "timeout" if any(k.status == "timeout" for k in result.kernels) else outcome(result)
        outcomes[kind] = outcomes.get(kind, 0) + 1
    samples = tree.samples or [(False, False)]
    figures = {
        "assignment": assignment.name, "submissions": len(results), "mix": mix, "cores": cores,
        "batch_options": batch_options, "wall_s": round(wall, 2),
        "submissions_per_hour": round(len(results) / wall * 3600),
        "cpu_utilisation": round(max(cpu_seconds, tree.cpu_seconds) / (wall * cores), 3),
        "cpu_seconds_sampled_tree": round(tree.cpu_seconds, 1), "cpu_seconds_rusage_reaped": round(cpu_seconds, 1),
        "gpu_utilisation_mean": round(statistics.mean(gpu.samples) / 100, 3) if gpu and gpu.samples else None,
        "share_compiling": round(sum(c for c, _ in samples) / len(samples), 3),
        "share_running": round(sum(r for _, r in samples) / len(samples), 3),
        "share_both": round(sum(c and r for c, r in samples) / len(samples), 3),
        "share_neither": round(sum(not c and not r for c, r in samples) / len(samples), 3),
        "summed_stage_seconds": {stage: round(sum(r.stages.get(stage, 0.0) for r in results), 1)
                                 for stage in ("fetch", "build", "inputs", "gold", "run", "run_start", "sanitizer",
                                               "compare_and_score")},
        "outcomes": outcomes,
    }
    print(json.dumps(figures, indent=1))
    if arguments.json:
        arguments.json.write_text(json.dumps(figures, indent=1) + "\n")
    if not arguments.keep:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
