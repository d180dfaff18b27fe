"""Grade a pack's mutants and samples through the batch's pipeline, and say what its cases miss.

Every mutant and sample is a job of one `LocalExecutor.grade` call: built in parallel, run in the sandbox on the
run slots, compared and scored as a student's submission is. A mutant's verdict is cached by what it is (the
mutated line and the file it is in) and by the cases that judged it: a kill stays valid while its killing cases
are unchanged, a survivor while the whole case set is, so a re-audit after adding a case grades only the survivors.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from grader import __version__
from grader.assignment import Assignment, Case, Kernel
from grader.audit.mutants import Mutant, syntax_tree, choose, mutants_of
from grader.device import unavailable_reason
from grader.dispatch import Job
from grader.dispatch.local import LocalExecutor
from grader.errors import GraderError
from grader.options import Options
from grader.pipeline import build_stage, execute_stage, load_outputs
from grader.results import Result
from grader.samples import Sample, compose, variants
from grader.status import CallStatus, CaseStatus, KernelStatus, MutantStatus, SubmissionStatus

FRESH_SECRETS = 2  # fresh draws of the secret cases a survivor's outputs are compared on, beside the audit's own
# A survivor is equivalent where its outputs stay this close to the reference's, as a share of the kernel's
# tolerance, on every case: rounding (a sum in another order) moves an output far less than the tolerance allows.
EQUIVALENT_SHARE = 0.01
REFERENCE = "reference"
SAMPLE_PREFIX = "sample:"

Progress = Callable[[int, int, str], None]  # (done, total, what just finished)


@dataclass(frozen=True)
class MutantVerdict:
    mutant: Mutant
    status: MutantStatus
    failed: tuple[str, ...] = ()  # "kernel/case" it failed (a kill's cases)
    passed: tuple[str, ...] = ()  # "kernel/case" it passed
    words: str = ""
    cached: bool = False

    def to_dict(self) -> dict:
        m = self.mutant
        return {"key": m.key, "file": m.file, "line": m.line, "rule": m.rule, "kernels": list(m.kernels),
                "diff": m.diff, "status": self.status.value, "failed": list(self.failed), "passed": list(self.passed),
                "words": self.words, "cached": self.cached}


@dataclass(frozen=True)
class SampleCheck:
    """A sample's VARIANT.toml against its grade: the status and the failed cases it says it has."""

    sample: str
    kernel: str
    expected: str
    got: str
    expected_failed: tuple[str, ...] | None
    got_failed: tuple[str, ...]

    @property
    def agrees(self) -> bool:
        return self.expected == self.got and (self.expected_failed is None
                                              or set(self.expected_failed) == set(self.got_failed))

    @property
    def words(self) -> str:
        if self.agrees:
            return f"{self.kernel}: {self.got}" + (f", fails {', '.join(self.got_failed)}" if self.got_failed else "")
        said = f"{self.expected}" + (f" failing {', '.join(self.expected_failed) or 'no case'}"
                                     if self.expected_failed is not None else "")
        return (f"{self.kernel}: VARIANT.toml says {said}; it got {self.got}"
                + (f" failing {', '.join(self.got_failed)}" if self.got_failed else " failing no case"))

    def to_dict(self) -> dict:
        return {"sample": self.sample, "kernel": self.kernel, "expected": self.expected, "got": self.got,
                "expected_failed": list(self.expected_failed) if self.expected_failed is not None else None,
                "got_failed": list(self.got_failed), "agrees": self.agrees, "words": self.words}


@dataclass(frozen=True)
class AuditReport:
    assignment: str
    title: str
    generated: int  # mutants the rules made (after dropping those that change no syntax)
    unchanged: int  # dropped: a docstring's or comment's change, the same program
    verdicts: tuple[MutantVerdict, ...]
    not_graded: int  # left by --limit or --seconds
    samples: tuple[SampleCheck, ...]
    cases: tuple[str, ...]  # every "kernel/case" graded
    seconds: float
    reference_problem: str = ""  # the reference itself lost points: nothing else can be judged
    kills_by_case: dict[str, int] = field(default_factory=dict)

    def of(self, status: MutantStatus) -> list[MutantVerdict]:
        return [v for v in self.verdicts if v.status is status]

    @property
    def score(self) -> float | None:
        counted = [v for v in self.verdicts if v.status.counts]
        return sum(v.status.is_kill for v in counted) / len(counted) if counted else None

    def kernel_scores(self) -> dict[str, tuple[int, int]]:
        """Per kernel: (killed, counted) of the mutants in its code."""
        scores: dict[str, list[int]] = {}
        for v in self.verdicts:
            if v.status.counts:
                for kernel in v.mutant.kernels:
                    entry = scores.setdefault(kernel, [0, 0])
                    entry[0] += v.status.is_kill
                    entry[1] += 1
        return {k: (a, b) for k, (a, b) in sorted(scores.items())}

    @property
    def cases_killing_nothing(self) -> list[str]:
        return [c for c in self.cases if self.kills_by_case.get(c, 0) == 0]

    @property
    def sample_errors(self) -> list[SampleCheck]:
        return [s for s in self.samples if not s.agrees]

    def to_dict(self) -> dict:
        return {"assignment": self.assignment, "title": self.title, "generated": self.generated,
                "unchanged": self.unchanged, "not_graded": self.not_graded, "seconds": round(self.seconds, 1),
                "score": self.score, "reference_problem": self.reference_problem,
                "counts": {s.value: len(self.of(s)) for s in MutantStatus},
                "kernels": {k: {"killed": a, "counted": b} for k, (a, b) in self.kernel_scores().items()},
                "cases_killing_nothing": self.cases_killing_nothing, "kills_by_case": self.kills_by_case,
                "mutants": [v.to_dict() for v in self.verdicts],
                "samples": [s.to_dict() for s in self.samples]}


def audit(assignment: Assignment, options: Options, *, limit: int | None = None, seconds: float | None = None,
          files: list[str] | None = None, slots: int | None = None, with_samples: bool = True,
          fresh_secrets: int = FRESH_SECRETS, on_progress: Progress | None = None,
          mutants: list[Mutant] | None = None) -> AuditReport:
    """Grade the pack's reference, its samples and (at most `limit` of, for at most `seconds`) its mutants
    (`mutants`: these instead of the rules' own)."""
    if reason := unavailable_reason(assignment.target, assignment.python_packages):
        raise GraderError(f"cannot audit {assignment.name} on this machine: its mutants must run, and {reason}")
    started = time.monotonic()
    every, unchanged = (mutants, 0) if mutants is not None else mutants_of(assignment, files)
    chosen = choose(every, limit, assignment.name)
    cases = _case_fingerprints(assignment, options)
    cache = _Cache(options.cache_dir / "audit" / f"{assignment.name}.json")
    verdicts: dict[str, MutantVerdict] = {}
    to_grade: list[Mutant] = []
    source = {m.file: (assignment.reference_dir / m.file).read_text(encoding="utf-8", errors="replace")
              for m in chosen}
    for mutant in chosen:
        if (kept := cache.verdict(mutant, source[mutant.file], cases)) is not None:
            verdicts[mutant.key] = kept
        elif mutant.file.endswith(".py") and syntax_tree(mutant.apply(source[mutant.file])) is None:
            verdicts[mutant.key] = MutantVerdict(mutant, MutantStatus.STILLBORN, words="not valid Python")
        else:
            to_grade.append(mutant)
    samples = variants(assignment) if with_samples else []
    total = 1 + len(samples) + len(to_grade)
    results: dict[str, Result] = {}
    deadline = None if seconds is None else started + seconds
    with tempfile.TemporaryDirectory(prefix="kg-audit-") as scratch:
        folders: dict[str, Path] = {}

        def jobs() -> Iterator[Job]:
            items: list[tuple[str, Callable[[Path], Path]]] = [(REFERENCE, lambda d: compose(assignment, None, d))]
            items += [(SAMPLE_PREFIX + s.name, lambda d, s=s: compose(assignment, s, d)) for s in samples]
            items += [(m.key, lambda d, m=m: _write_mutant(assignment, m, source[m.file], d)) for m in to_grade]
            for index, (name, write) in enumerate(items):
                if deadline is not None and index > 0 and time.monotonic() > deadline:
                    return  # the budget is spent: what was not started is counted as not graded
                folders[name] = write(Path(scratch) / f"job-{index}")
                yield Job(index, name, folders[name])

        def on_result(job: Job, result: Result) -> None:
            results[job.student] = result
            if on_progress:
                on_progress(len(results), total, job.student)

        LocalExecutor(run_slots=slots).grade(jobs(), assignment, options, on_result)
        reference = results.get(REFERENCE)
        problem = _reference_problem(reference)
        if problem:
            return AuditReport(assignment.name, assignment.title, len(every), unchanged, (), len(chosen), (),
                               tuple(cases), time.monotonic() - started, problem)
        assert reference is not None
        by_key = {m.key: m for m in to_grade}
        survivors = []
        for key, result in results.items():
            if key in by_key:
                verdict = judge(by_key[key], result, reference)
                if verdict.status is MutantStatus.SURVIVED:
                    survivors.append((verdict, folders[key]))
                verdicts[key] = verdict
        references: dict[int, tuple[Assignment, Outputs]] = {}
        unchecked: set[str] = set()  # survivors the budget left no time to compare: not cached as judged
        for done, (verdict, folder) in enumerate(survivors):
            if deadline is not None and time.monotonic() > deadline:  # a survivor left unchecked stays one
                verdicts[verdict.mutant.key] = dataclasses.replace(
                    verdict, words=f"{verdict.words}; not compared with the reference on fresh inputs (--seconds)")
                unchecked.add(verdict.mutant.key)
                continue
            verdicts[verdict.mutant.key] = _equivalence(assignment, options, verdict, folder, fresh_secrets,
                                                        Path(scratch) / "fresh" / str(done), references)
            if on_progress:
                on_progress(total, total, f"{verdict.mutant.key} checked on fresh inputs")
        for key in verdicts:
            if key in by_key and key not in unchecked:
                cache.keep(verdicts[key], source[verdicts[key].mutant.file], cases)
        cache.save()
    checks = [check for s in samples if SAMPLE_PREFIX + s.name in results
              for check in check_sample(assignment, s, results[SAMPLE_PREFIX + s.name])]
    ordered = tuple(verdicts[m.key] for m in chosen if m.key in verdicts)
    kills: dict[str, int] = {c: 0 for c in cases}
    for v in ordered:
        if v.status.is_kill:
            for case in v.failed:
                kills[case] = kills.get(case, 0) + 1
    return AuditReport(assignment.name, assignment.title, len(every), unchanged, ordered,
                       len(chosen) - len(ordered), tuple(checks), tuple(cases), time.monotonic() - started,
                       kills_by_case=kills)


def judge(mutant: Mutant, result: Result, reference: Result) -> MutantVerdict:
    """A graded mutant's status: what lost it points, against the reference's own grade."""
    if result.status is not SubmissionStatus.GRADED:
        return MutantVerdict(mutant, MutantStatus.ERROR, words=result.message)
    failed = tuple(f"{k.name}/{c.name}" for k in result.kernels for c in k.cases if not c.passed)
    passed = tuple(f"{k.name}/{c.name}" for k in result.kernels for c in k.cases if c.passed)
    unbuilt = [k.name for k in result.kernels if k.status is KernelStatus.COMPILE_ERROR]
    if unbuilt:
        return MutantVerdict(mutant, MutantStatus.STILLBORN, words=f"does not build ({', '.join(unbuilt)})")
    if result.score >= reference.score - 1e-9:
        return MutantVerdict(mutant, MutantStatus.SURVIVED, failed, passed,
                             f"full marks: passed all {len(passed)} cases")
    statuses = {c.status for k in result.kernels for c in k.cases if not c.passed}
    if failed and statuses <= {CaseStatus.CRASHED, CaseStatus.TIMEOUT}:
        return MutantVerdict(mutant, MutantStatus.WEAK_KILL, failed, passed,
                             f"only {' and '.join(sorted(s.value for s in statuses))} in {', '.join(failed)}: "
                             "no case judged a wrong output")
    lost = [f"{k.name} {k.score:g}/{k.max_score:g}" for k in result.kernels if k.score < k.max_score - 1e-9]
    return MutantVerdict(mutant, MutantStatus.KILLED, failed, passed,
                         f"{', '.join(failed)} failed" if failed else f"lost points: {', '.join(lost)}")


def check_sample(assignment: Assignment, sample: Sample, result: Result) -> list[SampleCheck]:
    """Each kernel the sample speaks of, its status and failed cases against what its VARIANT.toml says."""
    if result.status is not SubmissionStatus.GRADED:
        return [SampleCheck(sample.name, sample.kernel, sample.expect.value, result.status.value,
                            sample.failed_cases, ())]
    kernels = [k for k in result.kernels if sample.whole or k.name == sample.kernel]
    return [SampleCheck(sample.name, k.name, sample.expect.value, k.status.value,
                        sample.failed_cases if not sample.whole else None,
                        tuple(c.name for c in k.cases if not c.passed)) for k in kernels]


def _reference_problem(reference: Result | None) -> str:
    if reference is None:
        return "the reference was not graded"
    if reference.status is not SubmissionStatus.GRADED or reference.score < reference.max_score - 1e-9:
        lost = "; ".join(f"{k.name}: {k.message}" for k in reference.kernels if k.score < k.max_score)
        return (f"the reference scores {reference.score:g}/{reference.max_score:g} here"
                f"{': ' + lost if lost else ''}{': ' + reference.message if reference.message else ''}; "
                "a mutant can only be judged against a reference with full marks")
    return ""


def _write_mutant(assignment: Assignment, mutant: Mutant, source: str, folder: Path) -> Path:
    compose(assignment, None, folder)
    (folder / mutant.file).write_text(mutant.apply(source), encoding="utf-8")
    return folder


Outputs = dict[tuple[str, str], Path | None]  # (kernel, case) -> its outputs' folder, None where the call failed


def _outputs(assignment: Assignment, tree: Path, options: Options, folder: Path,
             pack: Assignment | None = None) -> tuple[Assignment, Outputs]:
    """A tree's outputs on the widened cases (the pack's own where inputs.py cannot make the wider ones)."""
    candidates = [pack] if pack else [widened(assignment), assignment]
    for candidate in candidates:
        try:
            ran = execute_stage(build_stage(tree, candidate, options), candidate, options, folder)
        except Exception:  # inputs.py's own checks on a size it does not take  # noqa: BLE001
            if candidate is candidates[-1]:
                raise
            shutil.rmtree(folder, ignore_errors=True)
            continue
        return candidate, {key: o.output_dir if o.status is CallStatus.OK else None for key, o in ran.outcomes.items()}
    raise AssertionError("unreachable")


def _equivalence(assignment: Assignment, options: Options, verdict: MutantVerdict, folder: Path, fresh: int,
                 scratch: Path, references: dict[int, tuple[Assignment, Outputs]]) -> MutantVerdict:
    """A survivor's outputs against the reference's on every case, under the audit's secret and `fresh` new ones:
    equivalent where they never move by more than EQUIVALENT_SHARE of the tolerance."""
    secrets = [options.secret or "audit", *(f"{options.secret or 'audit'}-fresh-{i}" for i in range(fresh))]
    worst, where = 0.0, ""
    for index, secret in enumerate(secrets):
        seeded = dataclasses.replace(options, secret=secret, sanitizer=False)
        if index not in references:  # the reference's outputs, once per secret for every survivor
            references[index] = _outputs(assignment, assignment.reference_dir, seeded, scratch.parent / f"ref-{index}")
        pack, theirs = references[index]
        ours = _outputs(assignment, folder, seeded, scratch / str(index), pack)[1]
        kernels = {k.name: k for k in pack.kernels}
        for key, reference_dir in theirs.items():
            kernel = kernels.get(key[0])
            if kernel is None or reference_dir is None:
                continue
            mutant_dir = ours.get(key)
            share = _share_of_tolerance(kernel, key[1], reference_dir, mutant_dir)
            if share > worst:
                worst, where = share, f"{key[0]}/{key[1]}" + (f" (fresh inputs {index})" if index else "")
    shutil.rmtree(scratch, ignore_errors=True)
    compared = any(d is not None for _, theirs in references.values() for d in theirs.values())
    if compared and worst <= EQUIVALENT_SHARE:
        return MutantVerdict(verdict.mutant, MutantStatus.EQUIVALENT, verdict.failed, verdict.passed,
                             f"outputs within {worst:.2g} of the tolerance of the reference's on every case, also on "
                             f"{fresh} fresh draws of the secret cases and on each case one size larger",
                             verdict.cached)
    moved = "a crash or a missing output" if worst == float("inf") else f"{worst:.3g} of the tolerance"
    return MutantVerdict(verdict.mutant, MutantStatus.SURVIVED, verdict.failed, verdict.passed,
                         f"{verdict.words}; yet its outputs differ from the reference's by {moved} at {where}"
                         + ("; fresh inputs fail it" if worst > 1 else ""), verdict.cached)


WIDER = "~wider"  # the name's suffix of a case widened for the equivalence check


def widened(assignment: Assignment) -> Assignment:
    """The pack with each case beside a wider one: every integer parameter one larger, every float one moved
    (-1.5 a + 0.75), so that a mutant equal to the reference only at the pack's own sizes and scalars shows. A wider
    case the reference cannot run is not compared (its outputs are missing on both sides)."""
    def wider(case: Case) -> Case:
        params = {k: (v + 1 if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else
                      -1.5 * v + 0.75 if isinstance(v, float) else v) for k, v in case.params.items()}
        return dataclasses.replace(case, name=case.name + WIDER, params=params)

    return dataclasses.replace(assignment, kernels=tuple(
        dataclasses.replace(k, cases=k.cases + tuple(wider(c) for c in k.cases if wider(c).params != c.params))
        for k in assignment.kernels))


def _share_of_tolerance(kernel: Kernel, case_name: str, reference_dir: Path, mutant_dir: Path | None) -> float:
    """The largest |mutant - reference| / (atol + rtol |reference|) over the case's outputs (inf: none to compare)."""
    if mutant_dir is None:
        return float("inf")
    case = next((c for c in kernel.cases if c.name == case_name), None)
    tolerance = kernel.tolerance_for(case) if case is not None else kernel.tolerance
    ours, theirs = load_outputs(reference_dir, kernel), load_outputs(mutant_dir, kernel)
    worst = 0.0
    for name, expected in ours.items():
        got = theirs.get(name)
        if got is None or got.shape != expected.shape:
            return float("inf")
        e, g = expected.astype(np.float64), got.astype(np.float64)
        same = (e == g) | (np.isnan(e) & np.isnan(g))
        if same.all():
            continue
        if not np.isfinite(g[~same]).all():
            return float("inf")
        band = tolerance.atol + tolerance.rtol * np.abs(e)
        worst = max(worst, float(np.max(np.where(same, 0.0, np.abs(g - e) / band))))
    return worst


def _case_fingerprints(assignment: Assignment, options: Options) -> dict[str, str]:
    """Each "kernel/case" with a digest of what judges it: its parameters, tolerance, the inputs and gold code,
    the secret, the grader's version."""
    shared = hashlib.sha256(__version__.encode() + (options.secret or "").encode())
    for path in (assignment.inputs_file, assignment.numpy_reference_file, assignment.spec_file):
        if path.is_file():
            shared.update(path.read_bytes())
    base = shared.hexdigest()
    found = {}
    for kernel in assignment.kernels:
        for case in kernel.cases:
            text = json.dumps([base, kernel.name, case.name, case.params, case.public, list(case.null),
                               vars(kernel.tolerance_for(case))], sort_keys=True, default=str)
            found[f"{kernel.name}/{case.name}"] = hashlib.sha256(text.encode()).hexdigest()[:16]
    return found


class _Cache:
    """Verdicts by mutant (its line and its file's text) and by the cases that judged them: one JSON per pack."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.records: dict[str, dict] = json.loads(path.read_text())
        except (OSError, ValueError):
            self.records = {}

    @staticmethod
    def _key(mutant: Mutant, source: str) -> str:
        return hashlib.sha256(f"{mutant.key}\0{source}".encode()).hexdigest()[:24]

    def verdict(self, mutant: Mutant, source: str, cases: dict[str, str]) -> MutantVerdict | None:
        record = self.records.get(self._key(mutant, source))
        if record is None:
            return None
        status = MutantStatus(record["status"])
        if status.is_kill:  # still killed while each case that killed it is judged the same way
            if not all(cases.get(c) == record["cases"].get(c) for c in record["failed"]):
                return None
        elif status in (MutantStatus.SURVIVED, MutantStatus.EQUIVALENT):  # a new or changed case may kill it
            if record["cases"] != cases:
                return None
        elif status is not MutantStatus.STILLBORN:
            return None
        return MutantVerdict(mutant, status, tuple(record["failed"]), tuple(record["passed"]), record["words"],
                             cached=True)

    def keep(self, verdict: MutantVerdict, source: str, cases: dict[str, str]) -> None:
        if verdict.status is MutantStatus.ERROR:
            return
        self.records[self._key(verdict.mutant, source)] = {
            "status": verdict.status.value, "failed": list(verdict.failed), "passed": list(verdict.passed),
            "words": verdict.words, "cases": cases}

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        staging = self.path.with_suffix(".tmp")
        staging.write_text(json.dumps(self.records))
        staging.replace(self.path)
