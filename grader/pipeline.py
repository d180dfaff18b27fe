"""Grade one submission: fetch → build → cases and gold → run → compare → score → result."""

from __future__ import annotations

import datetime
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from grader import __version__
from grader.build import build_submission, toolchain_for
from grader.cases import Seed, prepare_inputs
from grader.compare import compare
from grader.gold import gold_outputs
from grader.repos import checkout_folder
from grader.results import Environment, KernelResult, Result, Submission
from grader.runner import Call, run_calls
from grader.sandbox import sandbox_named
from grader.scoring import case_result, score_kernel
from grader.spec import Assignment, Case, Kernel


def default_cache_dir() -> Path:
    return Path(os.environ.get("KERNEL_GRADER_CACHE", Path.home() / ".cache" / "kernel-grader"))


@dataclass(frozen=True)
class Options:
    cache_dir: Path
    public_only: bool = False  # `grader check`: the public cases with the public seed
    secret: str | None = None
    sandbox: str = "local"
    kernels: tuple[str, ...] = ()  # empty: all
    jobs: int | None = None
    cuda_arch: str | None = None


def grade(path: Path, assignment: Assignment, options: Options) -> Result:
    stages: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        stages[stage] = round(now - clock, 3)
        clock = now

    checkout = checkout_folder(path)
    lap("fetch")
    kernels = tuple(assignment.kernel(n) for n in options.kernels) if options.kernels else assignment.kernels
    artifacts = build_submission(assignment, checkout.root, options.cache_dir, kernels, options.jobs, options.cuda_arch)
    lap("build")

    seed = Seed(assignment.public_seed, None if options.public_only else options.secret)
    selection = [(k, c, prepare_inputs(assignment, k, c, seed, options.cache_dir))
                 for k in kernels for c in k.cases if c.public or not options.public_only]
    lap("inputs")
    sandbox = sandbox_named(options.sandbox)
    gold = gold_outputs(assignment, selection, options.cache_dir, sandbox, options.cuda_arch)
    lap("gold")

    with tempfile.TemporaryDirectory(prefix="kg-outputs-") as scratch:
        calls = [Call(k, c, artifacts[k.name].library, inputs, Path(scratch) / k.name / c.name)  # type: ignore[arg-type]
                 for k, c, inputs in selection if artifacts[k.name].status == "built"]
        report = run_calls(assignment, calls, sandbox) if calls else None
        lap("run")
        outcomes = {(o.kernel, o.case): o for o in report.outcomes} if report else {}
        kernel_results = []
        for kernel in kernels:
            cases = []
            for case in (c for k, c, _ in selection if k is kernel):
                outcome = outcomes.get((kernel.name, case.name))
                verdict = None
                if outcome is not None and outcome.status == "ok" and outcome.output_dir is not None:
                    produced = _load_outputs(outcome.output_dir, kernel)
                    verdict = compare(produced, gold[(kernel.name, case.name)], kernel.tolerance)
                cases.append(case_result(case, outcome, verdict))
            kernel_results.append(score_kernel(kernel, artifacts[kernel.name], cases))
        lap("compare_and_score")

    toolchain = toolchain_for(assignment.target, options.cuda_arch)
    return Result(
        assignment=assignment.name,
        assignment_version=assignment.version,
        title=assignment.title,
        score=round(sum(k.score for k in kernel_results), 6),
        max_score=sum(k.max_score for k in kernel_results),
        kernels=kernel_results,
        submission=Submission(str(checkout.root), checkout.commit, checkout.commit_time, checkout.dirty),
        environment=Environment(
            grader_version=__version__, target=assignment.target, device=report.device if report else "",
            compiler=toolchain.description, sandbox=sandbox.name, sandbox_enforced=sandbox.enforced(),
            host=platform.node(), python=sys.version.split()[0],
        ),
        stages={**stages, "total": round(sum(stages.values()), 3)},
        seed={"mode": seed.mode, "fingerprint": seed.fingerprint},
        public_only=options.public_only,
        graded_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )


def _load_outputs(folder: Path, kernel: Kernel) -> dict[str, np.ndarray]:
    outputs = {}
    for buffer in kernel.buffers_with("output"):
        path = folder / f"{buffer.name}.npy"
        try:
            # allow_pickle=False: a forged .npy must not be able to run code in the grader.
            outputs[buffer.name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError):
            continue  # compare names a missing or unreadable output as such
    return outputs
