"""A submission's competition: its six kernels built (kernels/, with the competition folder laid over it where the
submission has one), each run of the run set generated and timed in the sandbox with the GPU held alone (the timing
lock: one job per GPU), then judged outside: the gate, the speed, the geometric mean."""

from __future__ import annotations

import json
import shutil
import tempfile
from contextlib import nullcontext
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from grader.boundary.protocol import Composition, Space
from grader.build import Artifact, build_submission
from grader.checkout import checkout_folder
from grader.checks.forward.inputs import PARAMETERS_FILE, prepare_forward_inputs
from grader.checks.forward.layout import activation_tensors, logits_offset, parameter_tensors, regions, steps_of, total
from grader.checks.forward.spec import Forward
from grader.competition import harness_half as harness
from grader.competition.judge import cached_gold, judge_run
from grader.competition.results import CompetitionResult, RunResult
from grader.competition.spec import Competition, Run
from grader.cache import content_key, is_complete, new_entry, publish_folder
from grader.options import Options
from grader.runner import Call, run_calls
from grader.sandbox import sandbox_named
from grader.sources import Overlay, gather_sources
from grader.assignment import Assignment, Case, Kernel, Signature, Tolerance
from grader.assignment.model import Buffer
from grader.status import BuildStatus, TimingStatus
from grader.targets import target_of
from grader.timing.lock import gpu_lock
from grader.timing.run import LOCK_WAIT_S

NAME = "competition"  # the runs' kernel in the runner's words


def compete(path: Path, assignment: Assignment, options: Options, competition: Competition,
            student: str | None = None) -> CompetitionResult:
    """Build, run and judge the competition for the submission at `path`."""
    checkout = checkout_folder(path)
    composed = tuple(k for k in assignment.base_kernels if k.name in competition.forward.composes)
    laid = (checkout.root / competition.folder).is_dir()
    onto = assignment.source_dirs[0] if assignment.source_dirs else "kernels"
    folder = f"{onto}/ with {competition.folder}/ laid over it" if laid else f"{onto}/ ({competition.folder}/ is not " \
        "in the submission)"
    sources = gather_sources(assignment, checkout.root, composed, overlay=Overlay(competition.folder, onto)
                             if laid else None, upload=options.upload)
    artifacts = build_submission(assignment, sources, options.cache_dir, composed, options.jobs, options.cuda_arch,
                                 sandbox=sandbox_named(options.sandbox))
    # Anything that builds competes (the course set no rules: cuBLAS, as req_2 uses it, links); what a kernel calls
    # from a library the graded kernels may not call is said beside the entry.
    libraries = tuple(f"{k.name} calls {', '.join(linked)}" for k in composed
                      if (linked := (*artifacts[k.name].forbidden_symbols, *artifacts[k.name].watched)))
    result = CompetitionResult(str(path), assignment.name, student or checkout.root.resolve().name, folder, (),
                               commit=checkout.commit, notes=libraries)
    broken = [k.name for k in composed if artifacts[k.name].status != BuildStatus.BUILT
              or artifacts[k.name].library is None]
    if broken:
        words = f"does not compile ({', '.join(broken)}): {_first_error(artifacts[broken[0]])}"
        return replace(result, runs=tuple(RunResult(r.name, r.B, r.prompt, r.generate, TimingStatus.COMPILE_ERROR,
                                                    words) for r in competition.runs))
    inputs = prepare_competition_inputs(assignment, competition, options.cache_dir)
    kernel = competition_kernel(competition)
    target = target_of(assignment)
    truth = assignment.numpy_reference()
    with tempfile.TemporaryDirectory(prefix="kg-compete-") as scratch:
        work = Path(scratch)
        copies = {}
        (work / "libraries").mkdir()
        for k in composed:
            copies[k.name] = str(work / "libraries" / f"{k.name}.so")
            shutil.copyfile(artifacts[k.name].library, copies[k.name])  # type: ignore[arg-type]
        calls = [Call(kernel, kernel.cases[i], work / "libraries", inputs, work / "outputs" / run.name,
                      composition_of(assignment, competition, run, copies, inputs))
                 for i, run in enumerate(competition.runs)]
        # One job per GPU: the runs hold it alone, as `grader time` holds it for a kernel.
        with gpu_lock(exclusive=True, timeout_s=LOCK_WAIT_S) if target.needs_gpu else nullcontext():
            report = run_calls(assignment, calls, sandbox_named(options.sandbox),
                               time_limit_s=kernel.time_budget_s)
        runs = []
        for run, outcome in zip(competition.runs, report.outcomes):
            f = competition.forward_of(run)
            steps = steps_of(f, {k.name: k for k in composed}, competition.where)
            prompt = np.load(inputs / tokens_file(run))
            runs.append(judge_run(run, f, outcome, prompt,
                                  lambda sequence, f=f, steps=steps: cached_gold(truth, f, steps, inputs, sequence,
                                                                                 options.cache_dir)))
    return replace(result, runs=tuple(runs), device=report.device)


def competition_kernel(competition: Competition) -> Kernel:
    """The runs as the runner sees them: one composed kernel, a case per run, the files its calls seal."""
    return Kernel(name=NAME, weight=0.0, header="", sources=(), signature=Signature(NAME, ()),
                  buffers=tuple(Buffer(name, "output", "float32", ("1",)) for name in harness.SEALED),
                  tolerance=Tolerance(0.0, 0.0), cases=tuple(Case(r.name, True, {}) for r in competition.runs),
                  time_limit_s=competition.time_limit_s, partial_credit="fraction", forbidden_symbols=(),
                  forbidden_penalty=0.0, time_budget_s=competition.time_limit_s * len(competition.runs))


def composition_of(assignment: Assignment, competition: Competition, run: Run, libraries: dict[str, str],
                   inputs: Path) -> Composition:
    """One run as the harness performs it: the forward check's allocations and steps at the run's B and T."""
    f = competition.forward_of(run)
    steps = steps_of(f, {k.name: k for k in assignment.base_kernels}, competition.where)
    rule = competition.rule
    settings = harness.Generation(B=f.B, T=f.T, V=f.V, Vp=f.Vp, prompt=run.prompt, generate=run.generate,
                                  logits_offset=logits_offset(f), warmup=competition.warmup,
                                  min_repeats=rule.min_calls, max_repeats=rule.max_calls, rse=rule.rse,
                                  cap_s=rule.cap_s)
    return Composition(
        runner=harness.__name__, libraries=libraries,
        spaces={"activations": Space("float32", total(activation_tensors(f))),
                "parameters": Space("float32", total(parameter_tensors(f)), str(inputs / PARAMETERS_FILE)),
                "tokens": Space("int32", f.B * f.T, str(inputs / tokens_file(run)))},
        steps=tuple(s.plan for s in steps), sealed=harness.SEALED, regions=regions(f), settings=asdict(settings))


def tokens_file(run: Run) -> str:
    return f"prompts-{run.name}.npy"


def draw_prompts(forward: Forward, run: Run, index: int) -> np.ndarray:
    """A run's prompts (B, T): its first `prompt` columns are given, the rest the generation fills."""
    tokens = np.zeros((run.B, run.T), np.int32)
    tokens[:, :run.prompt] = np.random.default_rng([forward.seed, 2, index]).integers(
        0, forward.V, size=(run.B, run.prompt), dtype=np.int32)
    return tokens


def prepare_competition_inputs(assignment: Assignment, competition: Competition, cache_dir: Path) -> Path:
    """One folder for every run: the [forward] check's weights (linked, not drawn again) and each run's prompts."""
    weights = prepare_forward_inputs(assignment, competition.forward, cache_dir)
    runs = json.dumps([asdict(r) for r in competition.runs])
    folder = cache_dir / "competition" / content_key("inputs", weights.name, runs)
    if is_complete(folder):
        return folder
    staging = new_entry(folder)
    try:
        (staging / PARAMETERS_FILE).hardlink_to(weights / PARAMETERS_FILE)
    except OSError:  # another file system, or no hard links there
        shutil.copyfile(weights / PARAMETERS_FILE, staging / PARAMETERS_FILE)
    for index, run in enumerate(competition.runs):
        np.save(staging / tokens_file(run), draw_prompts(competition.forward, run, index))
    publish_folder(staging, folder)
    return folder


def _first_error(artifact: Artifact) -> str:
    lines = [line for line in artifact.message.splitlines() if "error" in line.lower()]
    return (lines[0] if lines else artifact.message.strip())[:300]
