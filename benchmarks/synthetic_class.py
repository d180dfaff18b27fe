"""A synthetic class for the batch benchmarks: git repositories of bundled variants, their roster,
and one `grader batch` over them, timed, with its process tree and the GPU sampled meanwhile.

`batch.py` and `class_on_gpu.py` build their classes and take their figures here, so that both
measure the same way:
- submissions per hour: N / wall time of the whole batch (clones, builds, gold, runs, store);
- CPU utilisation: CPU seconds (user + system) of the batch's whole process tree / (wall x cores), the
  tree's CPU time read from /proc every 50 ms (rusage of reaped children is kept beside it: it
  misses the sandboxed harness, which is reaped inside its own PID namespace);
- GPU utilisation (CUDA assignments): nvidia-smi's utilization.gpu sampled every 0.5 s, mean over the batch;
- compile vs run share: the share of wall time during which at least one compiler process (g++,
  nvcc, cc1plus, cicc, ptxas, ...) or one harness process ran, and both.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader.batch.summary import outcome  # noqa: E402
from grader.samples import Sample, compose  # noqa: E402
from grader.assignment import Assignment  # noqa: E402
from grader.store import Store  # noqa: E402

COMPILERS = {"g++", "gcc", "c++", "cc1plus", "as", "ld", "collect2", "nvcc", "cicc", "ptxas", "fatbinary", "nvlink",
             "cudafe++", "cc1"}
DEADLINE = "2030-01-01 00:00 UTC"
# A result's stages (`StageTimes`), and the local executor's `shared_run`: a first run beside another
# submission that crashed, so that it was run again with the GPU alone (grader.dispatch.local).
STAGES = ("fetch", "sources", "build", "inputs", "shared_run", "run", "run_start", "sanitizer", "gold",
          "compare_and_score")
REPOSITORY_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Member:
    """One student of the class: what kind of submission, and the bundled variant it holds (None: the reference)."""

    kind: str  # correct, broken, crashing or timeout
    variant: Sample | None


def make_class(assignment: Assignment, members: list[Member], folder: Path, tag: str = "") -> Path:
    """A git repository per member under `folder`/repos, and the roster naming them; returns the roster.

    Every source file gets a comment of its own (`tag` and the member's number), so no two
    submissions share a build key, within a class or across classes with different tags.
    """
    lines = ["student,repository"]
    for number, member in enumerate(members):
        student = f"s{number:03d}-{member.kind}"
        repo = folder / "repos" / student
        compose(assignment, member.variant, repo)
        for source in repo.rglob("*"):
            if source.suffix in (".cu", ".cpp", ".cuh", ".h") and source.is_file():
                source.write_text(source.read_text() + f"\n// submission {tag}{number}\n")
        git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.edu"]
        subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
        subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
        subprocess.run([*git, "commit", "-q", "-m", "submission"], cwd=repo, check=True)
        lines.append(f"{student},{repo}")
    roster = folder / "roster.csv"
    roster.write_text("\n".join(lines) + "\n")
    return roster


class TreeSampler(threading.Thread):
    """Samples the batch's process tree: is a compiler running, is a harness running, CPU time used."""

    def __init__(self, root_pid: int, interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.root_pid, self.interval = root_pid, interval
        self.samples: list[tuple[bool, bool]] = []
        self.cpu_ticks: dict[tuple[int, int], int] = {}  # (pid, start time) -> utime + stime last seen
        self.kinds: dict[tuple[int, int], str] = {}  # (pid, start time) -> what it is (see _kind)
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

    def cpu_seconds_by_kind(self) -> dict[str, float]:
        """The tree's CPU time split into compiling, kernel harnesses, compute-sanitizer (its harnesses
        included) and the grader's own processes (coordinator, run slots, git)."""
        split: dict[str, float] = {}
        for key, used in self.cpu_ticks.items():
            kind = self.kinds.get(key, "grader")
            split[kind] = split.get(kind, 0.0) + used / os.sysconf("SC_CLK_TCK")
        return {kind: round(seconds, 1) for kind, seconds in sorted(split.items())}

    def _kind(self, pid: int, names: dict[int, str], parents: dict[int, int]) -> str:
        """compile, sanitizer, harness or grader: by the process's name, its command line and its ancestors'."""
        if names.get(pid) in COMPILERS:
            return "compile"
        ancestors, at = [], pid
        while at in parents and at not in ancestors and at != self.root_pid:
            ancestors.append(at)
            at = parents[at]
        if any(names.get(a, "").startswith("compute-sanitiz") for a in ancestors):
            return "sanitizer"
        try:
            if b"grader.boundary.harness" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return "harness"
        except OSError:
            pass
        return "grader"

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
                if self.kinds.get((pid, start), "grader") == "grader":  # until it has exec'd into what it is
                    self.kinds[(pid, start)] = self._kind(pid, names, parents)
        compiling = any(names.get(p) in COMPILERS for p in tree)
        running = False
        for pid in tree:
            try:
                if b"grader.boundary.harness" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    running = True
                    break
            except OSError:
                continue
        return compiling, running


class GpuSampler(threading.Thread):
    """nvidia-smi's utilization.gpu every 0.5 s (the mean over the GPUs it lists); stops quietly where there is none."""

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


def batch_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment with the repository importable (`python -m grader` from anywhere)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPOSITORY_ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return {**env, **(extra or {})}


def time_batch(assignment: Assignment, roster: Path, store: Path, cache: Path, batch_options: list[str],
               env: dict[str, str] | None = None, echo: bool = True) -> dict:
    """Run `grader batch` on the roster in a subprocess, as an instructor does, and return its figures.

    Raises SystemExit if the batch fails. `echo` passes the batch's output through as it comes, so
    a long batch shows its progress in the log.
    """
    store.unlink(missing_ok=True)
    command = [sys.executable, "-m", "grader", "batch", str(roster), "-a", assignment.name, "--deadline", DEADLINE,
               "--store", str(store), "--cache-dir", str(cache), *batch_options]
    print("$", " ".join(command), flush=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=env or batch_environment())
    tree = TreeSampler(process.pid)
    gpu = GpuSampler() if assignment.target == "cuda" else None
    tree.start()
    if gpu:
        gpu.start()
    assert process.stdout is not None
    tail: list[str] = []
    for line in process.stdout:
        tail = (tail + [line])[-40:]
        if echo:
            print(line, end="", flush=True)
    process.wait()
    wall = time.perf_counter() - started
    tree.stop.set()
    if gpu:
        gpu.stop.set()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if process.returncode != 0:
        raise SystemExit(f"grader batch exited with {process.returncode}:\n{''.join(tail)}")
    cpu_seconds = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    cores = os.cpu_count() or 1
    results = Store(store).latest(assignment.name)
    outcomes: dict[str, int] = {}
    for result in results:
        # The batch's own words, with time-outs told apart from crashes (the mix builds both).
        kind = "timeout" if any(k.status == "timeout" for k in result.kernels) else outcome(result)
        outcomes[kind] = outcomes.get(kind, 0) + 1
    samples = tree.samples or [(False, False)]
    return {
        "assignment": assignment.name, "submissions": len(results), "cores": cores,
        "batch_options": batch_options, "wall_s": round(wall, 2),
        "submissions_per_hour": round(len(results) / wall * 3600) if results else 0,
        "seconds_per_submission": round(wall / len(results), 2) if results else None,
        "cpu_utilisation": round(max(cpu_seconds, tree.cpu_seconds) / (wall * cores), 3),
        "cpu_seconds_sampled_tree": round(tree.cpu_seconds, 1), "cpu_seconds_rusage_reaped": round(cpu_seconds, 1),
        "cpu_seconds_by_kind": tree.cpu_seconds_by_kind(),
        "gpu_utilisation_mean": round(statistics.mean(gpu.samples) / 100, 3) if gpu and gpu.samples else None,
        "share_compiling": round(sum(c for c, _ in samples) / len(samples), 3),
        "share_running": round(sum(r for _, r in samples) / len(samples), 3),
        "share_both": round(sum(c and r for c, r in samples) / len(samples), 3),
        "share_neither": round(sum(not c and not r for c, r in samples) / len(samples), 3),
        "summed_stage_seconds": {stage: round(sum(r.stages.get(stage, 0.0) for r in results), 1) for stage in STAGES},
        "runs_again_alone": sum("shared_run" in r.stages for r in results),
        "outcomes": outcomes,
    }
