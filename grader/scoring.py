"""Score one kernel from its build, its run outcomes and its verdicts, as the spec says.

Partial credit is the fraction of cases passed, or all-or-nothing; a case that crashed or timed
out costs that case (and the kernel's status says so); forbidden symbols deduct the spec's share of the kernel's weight.
"""

from __future__ import annotations

from grader.build import Artifact
from grader.compare import Verdict
from grader.results import CaseResult, Deduction, KernelResult, Mismatch
from grader.runner import CallOutcome
from grader.sanitizer import SanitizerReport, findings_of, has_errors
from grader.spec import Case, Kernel, Tolerance
from grader.status import BuildStatus, CallStatus, CaseStatus, KernelStatus


def case_result(case: Case, outcome: CallOutcome | None, verdict: Verdict | None,
                tolerance: Tolerance | None = None) -> CaseResult:
    """One case's line in the result, from how its call ended and, if it ran, its verdict."""
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
                          signal=outcome.signal)
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
        first_mismatch=Mismatch(first.buffer, list(first.index), first.expected, first.got) if first else None,
        wall_ms=outcome.wall_ms, device_ms=outcome.device_ms,
        nonfinite=verdict.nonfinite, zeros=verdict.zeros, transposed=verdict.transposed, row_shift=verdict.row_shift,
        params=_sizes(case), out_of_bounds=list(outcome.out_of_bounds), inputs_modified=list(outcome.inputs_modified),
        signal=outcome.signal, **judged,
    )


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
    build = {"build_seconds": round(artifact.seconds, 3), "build_cached": artifact.cached,
             "sanitizer": findings_of(sanitizer or []), "forbidden_symbols": list(artifact.forbidden_symbols),
             "built_from": list(artifact.files), "log": log}
    if artifact.status == BuildStatus.COMPILE_ERROR:
        return KernelResult(kernel.name, 0.0, kernel.weight, KernelStatus.COMPILE_ERROR, artifact.message, cases,
                            **build)
    passed = sum(c.passed for c in cases)
    ran = [c for c in cases if c.status.ran]
    if cases and not ran:
        if artifact.forbidden_symbols:  # found in the library: no run is needed to say so
            return KernelResult(kernel.name, 0.0, kernel.weight, KernelStatus.FORBIDDEN,
                                f"calls {', '.join(artifact.forbidden_symbols)}, which this assignment forbids "
                                f"({cases[0].message})", cases, **build)
        return KernelResult(kernel.name, 0.0, kernel.weight, KernelStatus.NOT_RUN, cases[0].message, cases, **build)
    broken = next((c for c in cases if c.status.stopped_harness), None)
    if broken and not passed:
        return KernelResult(kernel.name, 0.0, kernel.weight, KernelStatus(broken.status.value),
                            f"case '{broken.name}': {broken.message}", cases, **build)
    if kernel.partial_credit == "all_or_nothing":
        earned = kernel.weight if passed == len(cases) else 0.0
    else:
        earned = kernel.weight * passed / len(cases)
    deductions = []
    if artifact.forbidden_symbols:
        points = min(earned, kernel.weight * kernel.forbidden_penalty)
        outputs = "its outputs were correct" if passed == len(cases) else f"its outputs were correct in {passed} of {len(cases)} cases"
        deductions.append(Deduction(f"calls {', '.join(artifact.forbidden_symbols)}, which this assignment forbids "
                                    f"({outputs})", points))
    flagged = has_errors(sanitizer or [])
    if flagged and kernel.sanitizer_penalty > 0:
        tools = ", ".join(sorted({r.tool for r in sanitizer or [] if r.errors != 0}))
        first = next(iter(build["sanitizer"]), "")  # type: ignore[call-overload]
        points = min(earned - sum(d.points for d in deductions), kernel.weight * kernel.sanitizer_penalty)
        deductions.append(Deduction(f"compute-sanitizer ({tools}) reported errors: {first}", max(0.0, points)))
    score = max(0.0, earned - sum(d.points for d in deductions))
    status = KernelStatus.FORBIDDEN if artifact.forbidden_symbols else \
        KernelStatus.PASSED if passed == len(cases) and not (flagged and kernel.sanitizer_penalty > 0) \
        else KernelStatus.FAILED
    first_failure = next((c for c in cases if not c.passed), None)
    messages = [d.reason for d in deductions]
    if first_failure:
        messages.append(f"case '{first_failure.name}': {first_failure.message}")
    message = "; ".join(messages) or f"all {len(cases)} cases passed"
    return KernelResult(kernel.name, round(score, 6), kernel.weight, status,
                        f"{passed}/{len(cases)} cases passed; " + message if first_failure else message,
                        cases, deductions, **build)
