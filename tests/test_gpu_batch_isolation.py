"""The GPU attacker's corpus graded as one class beside correct and buggy submissions, 4 run slots on one
GPU, local sandbox: no neighbour is hurt, no student is `error` (tests/test_batch_isolation.py's GPU twin).

Marked `gpu`: skipped with the reason where there is no CUDA device. Every attack of
assignments/gpt2-m1/samples is bounded (the memory hogs stop at 16 GiB, the device hog at what the
card has); the looping kernel is stopped by its per-call limit (20 s here).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from rich.console import Console

from grader.batch.grade_class import ClassBatch, Fetching, grade_class
from grader.dispatch.local import LocalExecutor
from grader.options import Options
from grader.results import Result
from grader.samples import Sample, variants
from grader.assignment import Assignment, load_assignment
from grader.store import Store

from conftest import with_time_limit
from sandbox_fixtures import ATTACK_PORT, loopback_listener
from test_batch import at, commit, submission
from test_batch_isolation import ProcessCount

pytestmark = pytest.mark.gpu

RUN_SLOTS = 4
SECRET = "correct-horse-battery-staple"
BESIDE = ("hostile-gelu-infinite-loop", "mutant-gelu-wrong-constant", "mutant-residual-subtracts",
          "mutant-layernorm-unbiased-variance", "mutant-matmul-ignores-bias", "alt-attention-online-softmax")
WORDS: dict[str, tuple[str, ...]] = {
    "attack-residual-mutates-inputs": ("wrote into its input(s) inp1",),
    "attack-gelu-small-oob-write": ("wrote out of bounds: 32 element(s) past the end of out",),
    "attack-gelu-host-memory-hog": ("exceeded the memory limit",),
    "attack-gelu-pinned-memory-hog": ("exceeded the memory limit",),
    "attack-static-constructor-segfault": (
        "crashed while its library was being loaded (segmentation fault in a static constructor)",),
}


@pytest.fixture(scope="module")
def gpt2() -> Assignment:
    return with_time_limit(load_assignment("gpt2-m1"), 20.0)


def students(gpt2: Assignment) -> dict[str, Sample | None]:
    chosen: dict[str, Sample | None] = {"reference": None}
    chosen.update({v.name: v for v in variants(gpt2) if v.name.startswith("attack-") or v.name in BESIDE})
    return chosen


def test_the_gpu_attackers_corpus_graded_as_one_class_hurts_no_one(gpt2: Assignment, tmp_path: Path, cache_dir: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNEL_GRADER_SECRET", SECRET)
    class_ = students(gpt2)
    assert set(BESIDE) <= set(class_), "a sample named in BESIDE is gone"
    lines = ["student,repository"]
    for name, variant in class_.items():
        repo = tmp_path / "repos" / name
        repo.mkdir(parents=True)
        subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
        commit(repo, submission(gpt2, variant.name if variant else None, tmp_path / "scratch" / name), at(-1), "work")
        lines.append(f"{name},{repo}")
    roster = tmp_path / "roster.csv"
    roster.write_text("\n".join(lines) + "\n")
    store = tmp_path / "grades.sqlite"
    batch = ClassBatch(roster, gpt2, Options(cache_dir=cache_dir, sandbox="local", secret=SECRET), store,
                       LocalExecutor(run_slots=RUN_SLOTS), Fetching(tmp_path / "clones"))
    # Live on stdout: seen with -s even when a time box ends the run, and in the report of a failure.
    console = Console(width=200)
    processes = ProcessCount()
    processes.start()
    started = time.monotonic()
    with loopback_listener(ATTACK_PORT) as (_, accepted):
        try:
            assert grade_class(batch, console) == 0
        finally:
            processes.stop.set()
            processes.join()
    seconds = time.monotonic() - started
    results: dict[str, Result] = {r.student: r for r in Store(store).latest(gpt2.name)}
    retried = {s: [f"{r.stage}: {r.fault} ({r.detail[:200]})" for r in result.retries]
               for s, result in results.items() if result.retries}
    print(f"gpt2-m1: {len(results)} submissions with {RUN_SLOTS} run slots on one GPU in {seconds:.1f} s; the "
          f"machine's process count peaked at {processes.peak}; retried alone: {retried or 'none'}")
    assert set(results) == set(class_)
    assert {s: r.message for s, r in results.items() if r.status == "error"} == {}
    for name, variant in class_.items():
        by_name = {k.name: k for k in results[name].kernels}
        attacked = variant.kernel if variant is not None else None
        for kernel_name, kernel in by_name.items():
            # The forward check composes the attacker's kernel (weight 0, reported only).
            if kernel_name not in (attacked, "forward"):
                assert kernel.status == "passed" and kernel.score == kernel.max_score, (name, kernel_name,
                                                                                       kernel.message)
        if variant is not None:
            assert by_name[variant.kernel].status == variant.expect, (name, by_name[variant.kernel].message)
            for words in WORDS.get(name, ()):
                assert words in by_name[variant.kernel].message, (name, words, by_name[variant.kernel].message)
    everything = json.dumps([r.to_dict() for r in results.values()])
    assert "ATTACK SUCCEEDED" not in everything and SECRET not in everything
    assert accepted == []
    assert processes.peak < int(Path("/proc/sys/kernel/pid_max").read_text()) // 4, processes.peak
