"""Score one kernel from its build, its run outcomes and its verdicts, as the spec says; then the variants.

Partial credit is the fraction of cases passed, or all-or-nothing; a case that crashed or timed
out costs that case (and the kernel's status says so); forbidden symbols deduct the spec's share of the kernel's weight.
A variant's kernels are scored like any other, then as the variant says: all or nothing across
them, and the share of its weight that missing evidence or a missing required symbol costs. Then the
assignment's credit rules (`apply_credit_rules`): an [assignment.additional] group's exclusive sets and
extra-credit cap, and a compile error that makes the whole grade 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from grader.build import Artifact
from grader.compare import Verdict
from grader.evidence import TILE_EVIDENCE, LibraryEvidence, tile_shortfall_words, tile_shortfalls
from grader.results import (EVIDENCE_WORDS, CaseResult, Deduction, ForbiddenUse, GroupResult, KernelResult, LaunchedKernel,
                            MarginRead, MemoryBoundResult, MemoryMeasured, Mismatch, ScratchWritten, VariantResult)
from grader.runner import CallOutcome
from grader.targets import target_of
from grader.sandbox import size_in_words
from grader.sanitizer import SanitizerReport, findings_of, has_errors
from grader.sources import VariantSources
from grader.assignment import Assignment, Case, Kernel, MemoryBound, Tolerance, Variant
from grader.assignment.model import MEMORY_FLOOR_BYTES
from grader.status import BuildStatus, CallStatus, CaseStatus, KernelStatus, Outcome, SubmissionStatus


def case_result(case: Case, outcome: CallOutcome | None, verdict: Verdict | None,
                tolerance: Tolerance | None = None,
                reported: dict[str, list[float | None]] | None = None,
                reported_gold: dict[str, list[float | None]] | None = None) -> CaseResult:
    """One case's line in the result, from how its call ended and, if it ran, its verdict (and the values of the
    outputs its kernel reports, its own and gold's)."""
    judged = {"atol": tolerance.atol, "rtol": tolerance.rtol} if tolerance else {}
    if outcome is None:
        return CaseResult(case.name, case.public, CaseStatus.NOT_RUN, False, "not run: the kernel did not build",
                          params=_sizes(case))
    if outcome.status != CallStatus.OK or verdict is None:
        # A call that ended well but left nothing to judge (no outputs read back) is a crash of the case.
        status = CaseStatus.CRASHED if outcome.status == CallStatus.OK \
            else CaseStatus.of_call(CallStatus(outcome.status))
        return CaseResult(case.name, case.public, status, False, outcome.message, wall_ms=outcome.wall_ms,
                          device_ms=outcome.device_ms, params=_sizes(case),
                          while_loading=outcome.while_loading or None, limit=outcome.limit,
                          out_of_bounds=list(outcome.out_of_bounds), inputs_modified=list(outcome.inputs_modified),
                          signal=outcome.signal, uncaught=outcome.uncaught, forbidden_used=_uses_of(outcome))
    first = verdict.first_mismatch
    passed, message = verdict.passed, verdict.message
    if outcome.inputs_modified:
        # The next case (or the caller, in the real program) would read corrupted inputs: not a pass.
        passed = False
        message = f"wrote into its input(s) {', '.join(outcome.inputs_modified)}, which it must only read; " + message
    if outcome.out_of_bounds:
        # Memory the kernel does not own: in the real program another tensor, silently corrupted.
        passed = False
        message = f"wrote out of bounds: {'; '.join(outcome.out_of_bounds)}; " + message
    return CaseResult(
        name=case.name, public=case.public, status=CaseStatus.PASSED if passed else CaseStatus.FAILED, passed=passed,
        message=message, max_abs_err=verdict.max_abs_err, max_rel_err=verdict.max_rel_err,
        rel_l2_err=verdict.rel_l2_err, tolerance_used=verdict.tolerance_used, mismatches=verdict.mismatches, elements=verdict.elements,
        never_written=verdict.never_written,
        first_mismatch=Mismatch(first.buffer, list(first.index), first.expected, first.got, first.poison,
                                list(first.axes)) if first else None,
        wall_ms=outcome.wall_ms, device_ms=outcome.device_ms,
        nonfinite=verdict.nonfinite, read_before_written=verdict.read_before_written,
        read_out_of_bounds=verdict.read_out_of_bounds,
        margins_read=[MarginRead(m.buffer, m.after) for m in verdict.margins_read], zeros=verdict.zeros, transposed=verdict.transposed, row_shift=verdict.row_shift,
        params=_sizes(case), out_of_bounds=list(outcome.out_of_bounds), inputs_modified=list(outcome.inputs_modified),
        signal=outcome.signal, scratch_written=[ScratchWritten(w.buffer, w.written, w.elements) for w in outcome.written],
        peak_extra_bytes=None if outcome.peak_extra_bytes is None else int(outcome.peak_extra_bytes),
        reported=reported or {}, reported_gold=reported_gold or {}, forbidden_used=_uses_of(outcome),
        launched=[LaunchedKernel(k.kernel, list(k.block), k.dynamic_shared_bytes) for k in outcome.launched], **judged,
    )


def _uses_of(outcome: CallOutcome) -> list[ForbiddenUse]:
    return [ForbiddenUse(u.name, u.file, u.line) for u in outcome.forbidden]


def forbidden_uses(cases: list[CaseResult]) -> list[ForbiddenUse]:
    """What the kernel's calls did that the assignment forbids, each use once, in file and line order."""
    return sorted({u for c in cases for u in c.forbidden_used}, key=lambda u: (u.file, u.line, u.name))


def forbidden_words(uses: list[ForbiddenUse], kernel: str) -> str:
    """The uses as a student reads them: "calls .toarray (at kernels/k.py:19, during spgemm's call)", "imports
    scipy.linalg (at kernels/k.py:1, during axpy's call)"."""
    parts = []
    for verb, calls in (("calls", True), ("imports", False)):
        for name in dict.fromkeys(u.name for u in uses if u.is_call == calls):
            where = [u.where for u in uses if u.name == name and u.where]
            at = f"at {', '.join(where)}, " if where else ""
            parts.append(f"{verb} {name} ({at}during {kernel}'s call)")
    return " and ".join(parts)


def _named_only(artifact: Artifact, used: list[ForbiddenUse]) -> list[ForbiddenUse]:
    """What the kernel's files name that the patterns forbid but never ran while it was graded (an import line that
    ran counts as run, whichever module of it was recorded)."""
    ran = {(u.name, u.file, u.line) for u in used if u.is_method} | {(u.file, u.line) for u in used if not u.is_call}
    functions = {u.name for u in used if u.is_function}  # a C function's watch knows no line: its name ran
    named = [ForbiddenUse(name, file, line) for name, file, line in artifact.forbidden_named]
    return [n for n in named if n.name not in functions and (
        (n.name, n.file, n.line) if n.is_method else (n.file, n.line)) not in ran]


def _sizes(case: Case) -> dict[str, int]:
    """The case's integer parameters, which reports show and compare ("right only for small sizes")."""
    return {k: v for k, v in case.params.items() if isinstance(v, int) and not isinstance(v, bool)}


def score_kernel(kernel: Kernel, artifact: Artifact, cases: list[CaseResult],
                 sanitizer: list[SanitizerReport] | None = None, log: str = "") -> KernelResult:
    """Score one kernel: the fraction (or all) of its cases, less the forbidden-symbol and sanitizer deductions.

    A crashed or timed-out case costs that case; a kernel none of whose cases passed takes the status
    of its first crash or timeout. sanitizer: compute-sanitizer's reports on this kernel (a finding
    costs `sanitizer_penalty` of the weight).
    """
    # Forbidden things found in the library (a C kernel's symbols it does not watch), or seen while its calls ran (a
    # python kernel's imports and methods, a C kernel's watched functions); of those, only what this kernel forbids.
    cases = [c if all(map(artifact.forbids, c.forbidden_used)) else dataclasses.replace(
        c, forbidden_used=[u for u in c.forbidden_used if artifact.forbids(u)]) for c in cases]
    used = forbidden_uses(cases)
    symbols = [*artifact.forbidden_symbols, *(f"{u.name} (at {u.where})" if u.where else u.name for u in used)]
    what = " and ".join(part for part in (f"calls {', '.join(artifact.forbidden_symbols)}"
                                          if artifact.forbidden_symbols else "", forbidden_words(used, kernel.name))
                        if part)
    findings = findings_of(sanitizer or [])
    build = {"build_seconds": round(artifact.seconds, 3), "build_cached": artifact.cached,
             "sanitizer": findings, "forbidden_symbols": symbols,
             "built_from": list(artifact.files), "log": log, "variant": kernel.variant, "hints": list(kernel.hints),
             "forbidden_named": _named_only(artifact, used)}
    if artifact.status == BuildStatus.COMPILE_ERROR:
        return KernelResult(kernel.name, 0.0, kernel.weight, KernelStatus.COMPILE_ERROR, artifact.message, cases,
                            **build)
    passed = sum(c.passed for c in cases)
    ran = [c for c in cases if c.status.ran]
    if cases and not ran:
        if symbols:  # found in the library: no run is needed to say so
            return KernelResult(kernel.name, 0.0, kernel.weight, KernelStatus.FORBIDDEN,
                                f"{what}, which this assignment forbids ({cases[0].message})", cases, **build)
        return KernelResult(kernel.name, 0.0, kernel.weight, KernelStatus.NOT_RUN, cases[0].message, cases, **build)
    broken = next((c for c in cases if c.status.stopped_harness), None)
    # A forbidden library is what is wrong first (the dense copy a forbidden .toarray made may be what ran out of
    # memory): its status stays `forbidden`, and the crash is the first failed case's message.
    if broken and not passed and not symbols:
        return KernelResult(kernel.name, 0.0, kernel.weight, KernelStatus(broken.status.value),
                            f"case '{broken.name}': {broken.message}", cases, **build)
    if kernel.partial_credit == "all_or_nothing":
        earned = kernel.weight if passed == len(cases) else 0.0
    else:
        earned = kernel.weight * passed / len(cases)
    memory = judge_memory_bound(kernel.memory_bound, cases)
    judged = _Judged(kernel, artifact, cases, passed, symbols, what, sanitizer or [], findings, memory)
    deductions: list[Deduction] = []
    notes: list[str] = []
    for rule in KERNEL_RULES:  # each takes from what the ones before it left
        outcome = rule(judged, earned - sum(d.points for d in deductions))
        if outcome is not None and outcome.deduction is not None:
            deductions.append(outcome.deduction)
            if rule is _memory_bound and memory is not None:  # the bound's result says what it cost
                memory = dataclasses.replace(memory, points=round(outcome.deduction.points, 6))
        elif outcome is not None:
            notes.append(outcome.note)
    flagged = has_errors(sanitizer or [])
    score = max(0.0, earned - sum(d.points for d in deductions))
    status = KernelStatus.FORBIDDEN if symbols else \
        KernelStatus.PASSED if passed == len(cases) and not (flagged and kernel.sanitizer_penalty > 0) \
        and score >= earned - 1e-9 else KernelStatus.FAILED
    first_failure = next((c for c in cases if not c.passed), None)
    messages = [d.reason for d in deductions] + notes
    if first_failure:
        messages.append(f"case '{first_failure.name}': {first_failure.message}")
    message = "; ".join(messages) or f"all {len(cases)} cases passed"
    message = f"{passed}/{len(cases)} cases passed; " + message if first_failure else message
    if artifact.function_found:  # which of the names it may have was called (".. defines <that name>")
        message = f"{message} ({artifact.function_found})"
    return KernelResult(kernel.name, round(score, 6), kernel.weight, status, message, cases, deductions,
                        memory_bound=memory, **build)


@dataclass(frozen=True)
class _Judged:
    """What a kernel's deduction rules read: the kernel, its build and cases, and what it did that it must not."""

    kernel: Kernel
    artifact: Artifact
    cases: list[CaseResult]
    passed: int
    symbols: list[str]  # the forbidden things it called or imported
    forbidden: str  # those in words: "calls cublasSgemm and imports scipy.linalg (...)"
    sanitizer: list[SanitizerReport]
    findings: list[str]  # compute-sanitizer's, one line each
    memory: MemoryBoundResult | None


@dataclass(frozen=True)
class _Taken:
    """What one rule did: a deduction from the kernel's score (of 0 points, where nothing was left), or a note."""

    deduction: Deduction | None = None
    note: str = ""


def _points(left: float, cost: float) -> float:
    """The points a deduction takes: its cost, but never more than what is left of the score, nor less than 0."""
    return max(0.0, min(left, cost))


def _forbidden(k: _Judged, left: float) -> _Taken | None:
    """A forbidden call or import costs `forbidden_penalty` of the weight."""
    if not k.symbols:
        return None
    cases = len(k.cases)
    outputs = ("its outputs were correct" if k.passed == cases
               else f"its outputs were correct in {k.passed} of {cases} cases")
    return _Taken(Deduction(f"{k.forbidden}, which this assignment forbids ({outputs})",
                            _points(left, k.kernel.weight * k.kernel.forbidden_penalty)))


def _technique(k: _Judged, left: float) -> _Taken | None:
    """Evidence or a required symbol its binary lacks costs `evidence_penalty` of the weight (0: said only)."""
    if not (missing := _missing_technique(k.kernel, k.artifact, k.cases)):
        return None
    reason = f"{k.kernel.name} must show its technique: {missing}"
    if k.kernel.evidence_penalty > 0:
        return _Taken(Deduction(reason, _points(left, k.kernel.weight * k.kernel.evidence_penalty)))
    return _Taken(note=f"{reason} (reported, not scored)")


def _memory_bound(k: _Judged, left: float) -> _Taken | None:
    """A memory bound exceeded costs the bound's `penalty` of the weight (0: said only)."""
    if k.memory is None or not k.memory.exceeded:
        return None
    reason = memory_bound_words(k.memory, k.cases)
    penalty = k.kernel.memory_bound.penalty  # type: ignore[union-attr]
    if (points := _points(left, k.kernel.weight * penalty)) > 0:
        return _Taken(Deduction(reason, points))
    # Reported only, or nothing left to take (a forbidden call took it all).
    return _Taken(note=f"{reason} (reported, not scored)" if penalty == 0 else reason)


def _sanitizer(k: _Judged, left: float) -> _Taken | None:
    """compute-sanitizer's errors cost `sanitizer_penalty` of the weight (0: not scored, and not said here)."""
    if not (has_errors(k.sanitizer) and k.kernel.sanitizer_penalty > 0):
        return None
    tools = ", ".join(sorted({r.tool for r in k.sanitizer if r.errors != 0}))
    first = next(iter(k.findings), "")
    return _Taken(Deduction(f"compute-sanitizer ({tools}) reported errors: {first}",
                            _points(left, k.kernel.weight * k.kernel.sanitizer_penalty)))


_KernelRule = Callable[[_Judged, float], _Taken | None]
# A kernel's deductions, in the order they take from its score (and are said): each one from what the ones before it
# left.
KERNEL_RULES: tuple[_KernelRule, ...] = (_forbidden, _technique, _memory_bound, _sanitizer)


def judge_memory_bound(bound: MemoryBound | None, cases: list[CaseResult]) -> MemoryBoundResult | None:
    """The kernel's memory bound against the peaks its cases measured (None: it has none). A part of the bound whose
    cases did not run, or ran uncounted, is not judged (`measured` says whether any part was)."""
    if bound is None:
        return None
    by_name = {c.name: c for c in cases}

    def measured(name: str | None) -> MemoryMeasured | None:
        case = by_name.get(name or "")
        if case is None or case.peak_extra_bytes is None:
            return None
        sizes = bound.sizes or tuple(case.params or {})
        return MemoryMeasured(case.name, case.peak_extra_bytes, {k: v for k, v in (case.params or {}).items()
                                                                   if k in sizes})

    at, small, large = measured(bound.case), measured(bound.small), measured(bound.large)
    over = at is not None and bound.max_extra_bytes is not None and at.peak_extra_bytes > bound.max_extra_bytes
    growth = None
    if small is not None and large is not None and bound.max_growth is not None:
        growth = max(large.peak_extra_bytes, MEMORY_FLOOR_BYTES) / max(small.peak_extra_bytes, MEMORY_FLOOR_BYTES)
        over = over or growth > bound.max_growth
    return MemoryBoundResult(bound.max_extra_bytes, bound.max_growth, MEMORY_FLOOR_BYTES, at, small, large,
                             None if growth is None else round(growth, 3), over,
                             at is not None or growth is not None, meaning=bound.meaning)


def memory_bound_words(memory: MemoryBoundResult, cases: list[CaseResult]) -> str:
    """Why a kernel exceeded its memory bound, as the student reads it: "peak extra memory 16 MiB at N = 2048, d = 8
    (case 'n-2048'), over its bound of 4 MiB: an N x N matrix: Algorithm 1 keeps O(N d) (its outputs there were
    correct)"."""
    def at(measured: MemoryMeasured) -> str:
        sizes = ", ".join(f"{k} = {v}" for k, v in measured.params.items())
        return f"{sizes} (case '{measured.case}')" if sizes else f"case '{measured.case}'"

    parts = []
    judged: list[MemoryMeasured] = []
    case = memory.case
    if case is not None and memory.max_extra_bytes is not None and case.peak_extra_bytes > memory.max_extra_bytes:
        parts.append(f"peak extra memory {size_in_words(case.peak_extra_bytes)} at {at(case)}, over its bound of "
                     f"{size_in_words(memory.max_extra_bytes)}")
        judged.append(case)
    small, large = memory.small, memory.large
    if small is not None and large is not None and memory.growth is not None and memory.max_growth is not None \
            and memory.growth > memory.max_growth:
        parts.append(f"peak extra memory grew {memory.growth:.3g} times from {size_in_words(small.peak_extra_bytes)} "
                     f"at {at(small)} to {size_in_words(large.peak_extra_bytes)} at {at(large)}, more than the "
                     f"{memory.max_growth:g} times allowed")
        judged.append(large)
    words = "; ".join(parts) + (f": {memory.meaning}" if memory.meaning else "")
    right = [c.passed for c in cases if c.name in {m.case for m in judged}]
    if right and all(right):
        words += " (its outputs there were correct)"
    return words


def score_variants(assignment: Assignment, results: list[KernelResult], folders: tuple[VariantSources, ...],
                   artifacts: dict[str, Artifact]) -> tuple[list[KernelResult], list[VariantResult]]:
    """The kernels' results with each variant's policy applied (all or nothing, evidence), and one result per variant.

    folders: what the sources stage found of each variant's folder.
    """
    rescored = {r.name: r for r in results}
    variants = []
    for folder in folders:
        variant = assignment.variant(folder.variant)
        members = [r for r in results if r.variant == variant.name]
        if members:
            scored, outcome = _score_variant(assignment, variant, folder, members, artifacts)
            rescored.update((r.name, r) for r in scored)
            variants.append(outcome)
    return [rescored[r.name] for r in results], variants


def _score_variant(assignment: Assignment, variant: Variant, folder: VariantSources, members: list[KernelResult],
                   artifacts: dict[str, Artifact]) -> tuple[list[KernelResult], VariantResult]:
    max_score = round(sum(m.max_score for m in members), 6)
    facts = {"name": variant.name, "title": variant.title, "folder": variant.folder, "weight": variant.weight,
             "max_score": max_score, "kernels": [m.name for m in members], "must_change": list(variant.must_change),
             "unchanged_files": list(folder.unchanged), "required_files": list(variant.required_files),
             "required_found": list(folder.required_found),
             "source_patterns": {label: list(files) for label, files in folder.pattern_files.items()},
             "ncu_metrics": list(variant.ncu_metrics)}
    if not folder.submitted:
        # Not a compile error: there was nothing to compile. The batch then counts the student as failed.
        missing = f"{variant.folder}/ is not in the submission"
        members = [dataclasses.replace(m, status=KernelStatus.NOT_SUBMITTED, message=missing) for m in members]
        return members, VariantResult(score=0.0, status=Outcome.NOT_SUBMITTED, **facts,
                                      message=f"{missing}, so {variant.name} scores 0/{max_score:g}")
    kernels = {m.name: assignment.kernel(m.name) for m in members}
    built = {m.name: artifacts[m.name] for m in members if m.name in artifacts}
    # What each base kernel's library shows: the reports say it in sentences (grader.report.evidence).
    libraries = {kernels[name].base: a.evidence.facts() for name, a in built.items() if a.evidence is not None}
    shortfalls = _shortfalls(variant, kernels, built)
    overwritten, words = _overwritten(members, variant) if variant.untouched is not None else ([], "")
    judged = _VariantJudged(variant, folder, max_score, shortfalls.missing_evidence, shortfalls.missing_symbols,
                            shortfalls.wrong_precision, overwritten, words)
    messages, penalty = [], 0.0
    for rule in VARIANT_RULES:  # each takes from what the ones before it left
        cut = rule(judged, members)
        if cut is None:
            continue
        if cut.all_of_it:
            members = [_deducted(m, cut.reason, m.score) for m in members]
        elif cut.points > 0:
            members = _spread(members, cut.reason, cut.points)
            penalty += cut.points
        messages.append(cut.said)
    peak: tuple[int, str] | None = None  # the most device memory one call took beyond its arguments, and its case
    notes: list[str] = []  # said after the outcome, whatever it is
    if variant.untouched is not None:
        peak = max(((c.peak_extra_bytes, f"{m.name.split('/', 1)[-1]}/{c.name}") for m in members for c in m.cases
                    if c.peak_extra_bytes is not None), default=None)
        if peak is not None and target_of(assignment).needs_gpu:  # on the CPU the figure is the heap, not the device
            kernel, case = peak[1].split("/", 1)
            notes.append(f"{kernel}'s calls took at most {size_in_words(peak[0])} of device memory beyond their "
                         f"arguments (case '{case}'; sampled while it ran)")
    score = round(sum(m.score for m in members), 6)
    status = Outcome.of(SubmissionStatus.GRADED, (m.status for m in members))
    if status is Outcome.PASSED and score < max_score - 1e-9:
        status = Outcome.FAILED
    message = "; ".join((messages or [f"all {len(members)} kernels passed"]) + notes)
    if not message.startswith(variant.name):
        message = f"{variant.name}: {message}"
    return members, VariantResult(score=score, status=status, message=message,
                                  missing_evidence=shortfalls.missing_evidence,
                                  missing_symbols=shortfalls.missing_symbols,
                                  wrong_precision=shortfalls.wrong_precision,
                                  evidence_unread=shortfalls.unread, evidence_kinds=list(variant.evidence),
                                  libraries=libraries, penalty=round(penalty, 6),
                                  untouched=variant.untouched.buffer if variant.untouched else None,
                                  at_most_written=variant.untouched.at_most_written if variant.untouched else None,
                                  overwritten=overwritten, peak_extra_bytes=peak[0] if peak else None,
                                  peak_case=peak[1] if peak else None, **facts)


@dataclass(frozen=True)
class _Shortfalls:
    """What the variant's must-change kernels' binaries lack of what it asks, per base kernel."""

    missing_evidence: dict[str, list[str]]
    unread: dict[str, str]  # why there is no evidence, where it could not be read
    missing_symbols: dict[str, list[str]]
    wrong_precision: dict[str, list[str]]


def _shortfalls(variant: Variant, kernels: dict[str, Kernel], built: dict[str, Artifact]) -> _Shortfalls:
    missing_evidence: dict[str, list[str]] = {}
    unread: dict[str, str] = {}
    missing_symbols: dict[str, list[str]] = {}
    wrong_precision: dict[str, list[str]] = {}
    for name, artifact in built.items():
        base = kernels[name].base
        if not variant.must_change_kernel(kernels[name]) or artifact.status != BuildStatus.BUILT:
            continue
        if artifact.evidence is not None:
            shown = {kind: artifact.evidence.shows(kind) for kind in variant.evidence}
            if absent := [kind for kind, seen in shown.items() if seen is False]:
                missing_evidence[base] = absent
            if any(seen is None for seen in shown.values()):
                unread[base] = artifact.evidence.note or "its binary could not be read"
            if variant.tensor_core_precisions and (wrong := _wrong_precisions(artifact.evidence, variant)):
                wrong_precision[base] = wrong
        if artifact.missing_symbols:
            missing_symbols[base] = list(artifact.missing_symbols)
    if variant.evidence_in == "any" and missing_evidence:
        # One kernel showing it is enough; shown by none, the kernels are named together.
        checked = [kernels[n].base for n, a in built.items()
                   if variant.must_change_kernel(kernels[n]) and a.status == BuildStatus.BUILT and a.evidence]
        absent = [kind for kind in variant.evidence
                  if all(kind in missing_evidence.get(base, ()) for base in checked)]
        missing_evidence = {", ".join(checked): absent} if absent else {}
    return _Shortfalls(missing_evidence, unread, missing_symbols, wrong_precision)


@dataclass(frozen=True)
class _VariantJudged:
    """What a variant's rules read: the variant, its folder and points, and what its kernels lack or did."""

    variant: Variant
    folder: VariantSources
    max_score: float
    missing_evidence: dict[str, list[str]]
    missing_symbols: dict[str, list[str]]
    wrong_precision: dict[str, list[str]]
    overwritten: list[str]  # the cases that wrote more of its untouched scratch than it allows
    overwritten_words: str  # the worst of them, in words


@dataclass(frozen=True)
class _Cut:
    """What one of a variant's rules says, and what it takes from the variant's kernels: `points`, spread over them
    in proportion to their scores (the variant's penalty), or, `all_of_it`, every point they have."""

    said: str  # in the variant's message
    reason: str = ""  # in each kernel's deductions
    points: float = 0.0
    all_of_it: bool = False


def _earned(members: list[KernelResult]) -> float:
    return sum(m.score for m in members)


def _share_cut(reason: str, share: float, judged: _VariantJudged, members: list[KernelResult]) -> _Cut:
    """A cut of `share` of the variant's points, at most what its kernels have left."""
    points = _points(_earned(members), judged.max_score * share)
    return _Cut(f"{reason} (−{points:.3g})", reason, points)


def _all_or_nothing(judged: _VariantJudged, members: list[KernelResult]) -> _Cut | None:
    """A kernel short of full marks: said; in an all-or-nothing variant, it costs every point."""
    variant = judged.variant
    if not (failed := [m for m in members if not _full_marks(m)]):
        return None
    if variant.partial_credit != "all_or_nothing":
        return _Cut(f"{len(members) - len(failed)} of {len(members)} kernels have full marks: "
                    f"{'; '.join(_why_not_full(m, variant) for m in failed)}")
    if all(m.status is KernelStatus.NOT_RUN for m in failed):
        return _Cut(f"{variant.name}'s kernels were not run: {failed[0].message.removeprefix('not run: ')}")
    reason = f"{variant.name} is all or nothing: {'; '.join(_why_not_full(m, variant) for m in failed)}"
    return _Cut(f"{reason}, so {variant.name} scores 0/{judged.max_score:g}", reason, all_of_it=True)


def _required_files(judged: _VariantJudged, members: list[KernelResult]) -> _Cut | None:
    """A folder without the files the variant requires scores 0."""
    variant = judged.variant
    if not judged.folder.lacks_required(variant):
        return None
    if _earned(members) > 0:
        reason = (f"{variant.folder}/ holds no file matching {', '.join(variant.required_files)}, which "
                  f"{variant.name} must hold")
        return _Cut(f"{reason}, so {variant.name} scores 0/{judged.max_score:g}", reason, all_of_it=True)
    return _Cut(f"{variant.folder}/ holds no file matching {', '.join(variant.required_files)}")


def _variant_technique(judged: _VariantJudged, members: list[KernelResult]) -> _Cut | None:
    """Evidence or symbols the must-change kernels lack cost `evidence_penalty` of the variant's points."""
    variant = judged.variant
    if (judged.missing_evidence or judged.missing_symbols) and variant.evidence_penalty > 0 and _earned(members) > 0:
        missing = [f"no {EVIDENCE_WORDS[k]} in {base}" for base, kinds in judged.missing_evidence.items()
                   for k in kinds]
        missing += [f"{base} calls nothing matching {', '.join(p)}" for base, p in judged.missing_symbols.items()]
        reason = f"{variant.name} must show its technique: {'; '.join(missing)}"
        return _share_cut(reason, variant.evidence_penalty, judged, members)
    return None


def _precision(judged: _VariantJudged, members: list[KernelResult]) -> _Cut | None:
    """Tensor cores of a precision the variant does not allow cost `precision_penalty` of its points."""
    variant = judged.variant
    if judged.wrong_precision and variant.precision_penalty > 0 and _earned(members) > 0:
        uses = "; ".join(f"{base}'s binary shows {', '.join(found)}" for base, found in judged.wrong_precision.items())
        reason = f"{variant.name} must use {' or '.join(variant.tensor_core_precisions)} tensor cores: {uses}"
        return _share_cut(reason, variant.precision_penalty, judged, members)
    return None


def _untouched(judged: _VariantJudged, members: list[KernelResult]) -> _Cut | None:
    """Scratch written that the variant must leave untouched costs the `untouched` penalty (0: said only)."""
    if not judged.overwritten:
        return None
    penalty = judged.variant.untouched.penalty  # type: ignore[union-attr]
    if penalty > 0 and _earned(members) > 0:
        return _share_cut(judged.overwritten_words, penalty, judged, members)
    return _Cut(f"{judged.overwritten_words} (reported, not scored)")


_VariantRule = Callable[[_VariantJudged, list[KernelResult]], _Cut | None]
# A variant's rules, in the order they take from its kernels' scores (and are said).
VARIANT_RULES: tuple[_VariantRule, ...] = (_all_or_nothing, _required_files, _variant_technique, _precision,
                                           _untouched)


def _spread(members: list[KernelResult], reason: str, points: float) -> list[KernelResult]:
    """The kernels less `points` for `reason`, in proportion to their scores (none where they have none)."""
    earned = _earned(members)
    return [_deducted(m, reason, points * m.score / earned) for m in members] if earned > 0 else members


def _overwritten(members: list[KernelResult], variant: Variant) -> tuple[list[str], str]:
    """The variant's cases ("attention/gpt2-full") that wrote more of its untouched scratch than it allows, and the
    worst of them in words: "attention wrote 100% of att (50,331,648 elements) in 5 of 5 cases ...", "" for none."""
    assert variant.untouched is not None
    bound, buffer = variant.untouched.at_most_written, variant.untouched.buffer
    counted = [(m.name.split("/", 1)[-1], c, w) for m in members for c in m.cases for w in c.scratch_written
               if w.buffer == buffer]
    over = [(kernel, case, w) for kernel, case, w in counted if w.share > bound]
    if not over:
        return [], ""
    # The case that wrote the most elements: the largest matrix says most about what was built.
    kernel, case, worst = max(over, key=lambda item: (item[2].written, item[2].share))
    of_kernel = sum(1 for k, _, _ in counted if k == kernel)
    meaning = f": {variant.untouched.meaning}" if variant.untouched.meaning else ""
    words = (f"{kernel} wrote {worst.share:.0%} of {buffer} ({worst.written:,} of {worst.elements:,} elements in case "
             f"'{case.name}'; more than {bound:.0%} in {sum(1 for k, _, _ in over if k == kernel)} of {of_kernel} "
             f"cases){meaning}")
    return [f"{k}/{c.name}" for k, c, _ in over], words


def apply_credit_rules(assignment: Assignment, results: list[KernelResult], variants: list[VariantResult]
                       ) -> tuple[list[KernelResult], list[VariantResult], GroupResult | None, list[str]]:
    """The assignment's credit rules over the scored kernels and variants: in its [assignment.additional] group only
    the best of each exclusive set counts and points beyond minimum + cap do not; with `compile_error_zeroes` a
    kernel that did not build makes every score 0. Returns the kernels, the variants, the group's result and the
    kernels that zeroed the grade."""
    by_variant: dict[str, list[KernelResult]] = {}
    for result in results:
        if result.variant:
            by_variant.setdefault(result.variant, []).append(result)
    rescored = {r.name: r for r in results}
    notes: dict[str, list[str]] = {}
    excluded: dict[str, str] = {}
    capped: dict[str, float] = {}

    def take(variant: str, reason: str, points: float) -> None:
        """Deduct `points` from the variant's kernels, in proportion to their scores."""
        members = [rescored[r.name] for r in by_variant.get(variant, [])]
        rescored.update((m.name, m) for m in _spread(members, reason, points))
        notes.setdefault(variant, []).append(f"{reason} (−{points:.3g})" if points > 0 else reason)

    group, group_result = assignment.additional, None
    if group is not None:
        present = [v for v in variants if v.name in group.variants]
        scores = {v.name: v.score for v in present}
        chosen: dict[str, str | None] = {}
        for members in group.exclusive:
            candidates = [v for v in present if v.name in members]
            if not candidates:
                continue
            best = max(candidates, key=lambda v: scores[v.name])  # the first of equals, in the spec's order
            counted = best.name if scores[best.name] > 0 else None
            chosen[", ".join(members)] = counted
            for v in candidates:
                if counted and v is not best and v.status is not Outcome.NOT_SUBMITTED:
                    excluded[v.name] = best.name
                    take(v.name, f"{v.name} is not counted: only one of {', '.join(members)} counts for credit, "
                                 f"and {best.name} scored more ({scores[best.name]:g})", scores[v.name])
        points = {v.name: scores[v.name] for v in present if v.name not in excluded}
        over = sum(points.values()) - group.most if group.most is not None else 0.0
        for v in reversed(present):  # the last variants in the spec's order give up what is over the cap
            if over <= 1e-9:
                break
            cut = min(over, points.get(v.name, 0.0))
            if cut > 0:
                capped[v.name] = round(cut, 6)
                over -= cut
                take(v.name, f"{group.title} count at most {group.most:g} points ({group.minimum:g} and up to "
                             f"{group.extra_credit_cap:g} extra credit): {cut:g} of {v.name}'s are not counted", cut)
        total = sum(points.values())
        group_result = GroupResult(group.title, [v.name for v in present], {n: round(p, 6) for n, p in points.items()},
                                   group.minimum, group.extra_credit_cap,
                                   round(min(total, group.most) if group.most is not None else total, 6), chosen)
    zeroed = []
    if assignment.compile_error_zeroes:
        broken = [r for r in rescored.values() if r.status is KernelStatus.COMPILE_ERROR]
        if broken:
            zeroed = [r.name for r in broken]
            reason = (f"a compile error is 0 for the whole grade: {', '.join(zeroed[:3])}"
                      f"{f' and {len(zeroed) - 3} more' if len(zeroed) > 3 else ''} did not build "
                      f"({first_error(broken[0].message)})")
            for name, result in list(rescored.items()):
                rescored[name] = _deducted(result, reason, result.score)
            for variant in by_variant:
                notes.setdefault(variant, []).append(reason)
    variants = [dataclasses.replace(
        v, score=round(sum(rescored[r.name].score for r in by_variant.get(v.name, [])), 6),
        excluded_by=excluded.get(v.name), capped=capped.get(v.name, 0.0),
        message="; ".join([v.message, *notes[v.name]]),
        # Not counted (exclusive, capped): the variant still passed; zeroed by a compile error: it lost its points.
        status=Outcome.FAILED if v.status is Outcome.PASSED and zeroed else v.status)
        if v.name in notes else v for v in variants]
    return [rescored[r.name] for r in results], variants, group_result, zeroed


def first_error(message: str) -> str:
    """The compiler's first error line in a build's message ("kernels_op_8/matmul.cuh(12): error: ..."), shortened."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    line = next((line for line in lines if "error" in line.lower()), lines[0] if lines else "no message")
    return line if len(line) <= 200 else line[:200] + "…"


def _missing_technique(kernel: Kernel, artifact: Artifact, cases: list[CaseResult] = ()) -> str:  # type: ignore[assignment]
    """What the kernel's own binary lacks of what its spec asks it to show ("no shared-memory use in its binary";
    "it calls nothing matching cublas*"), in words; "" where nothing is missing or nothing could be read."""
    if artifact.evidence is None and not kernel.required_symbols:
        return ""
    absent = [kind for kind in kernel.evidence if artifact.evidence is not None and artifact.evidence.shows(kind) is False]
    words = [f"no {EVIDENCE_WORDS[kind]} in its binary" for kind in absent]
    if TILE_EVIDENCE in kernel.evidence and artifact.evidence is not None and \
            (tiles := tile_shortfall_words(tile_shortfalls(kernel, artifact.evidence, cases))):  # per case's tile
        words.append(tiles)
    missing = [p for p in artifact.missing_symbols if p in kernel.required_symbols]
    if missing:
        words.append(f"it calls nothing matching {', '.join(missing)}")
    return "; ".join(words)


def _wrong_precisions(evidence: LibraryEvidence, variant: Variant) -> list[str]:
    """The library's functions whose tensor-core instructions take a precision the variant does not allow, each as
    "FP16 in wmma_matmul_kernel" (what the SASS shows; nothing where it was not read)."""
    return [f"{precision} in {f.short_name}" for f in evidence.functions for precision in f.tensor_core_precisions
            if precision not in variant.tensor_core_precisions]


def _full_marks(result: KernelResult) -> bool:
    return result.status is KernelStatus.PASSED and not result.deductions and result.score >= result.max_score - 1e-9


def _why_not_full(result: KernelResult, variant: Variant) -> str:
    """Why one of a variant's kernels lost points, named by its base kernel: "layernorm failed 2 of 6 cases"."""
    base = result.name.split("/", 1)[-1]
    status, cases = result.status, len(result.cases)
    if status is KernelStatus.COMPILE_ERROR:
        return f"{base} did not build"
    if status is KernelStatus.FORBIDDEN:
        return f"{base} calls {', '.join(result.forbidden_symbols)}, which {variant.name} forbids"
    if status is KernelStatus.NOT_RUN:
        return f"{base} was not run"
    if result.cases_passed < cases:
        how = f" ({status})" if status.stopped_harness else ""
        return f"{base} failed {cases - result.cases_passed} of {cases} cases{how}"
    return f"{base} lost points ({result.deductions[0].reason})" if result.deductions else f"{base} lost points"


def _deducted(result: KernelResult, reason: str, points: float) -> KernelResult:
    """The kernel's result less `points` for its variant's reason (nothing changes for no points)."""
    points = min(points, result.score)
    if points <= 0:
        return result
    return dataclasses.replace(result, score=round(result.score - points, 6), message=f"{reason}; {result.message}",
                               deductions=[*result.deductions, Deduction(reason, round(points, 6))])
