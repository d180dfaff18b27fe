"""Score one kernel from its build, its run outcomes and its verdicts, as the spec says.

Partial credit is the fraction of cases passed, or all-or-nothing; a crash or a timeout fails
the whole kernel; forbidden symbols deduct the spec's share of the kernel's weight.
"""

from __future__ import annotations

from grader.build import Artifact
from grader.compare import Verdict
from grader.results import CaseResult, Deduction, KernelResult, Mismatch
from grader.runner import CallOutcome
from grader.spec import Case, Kernel


def case_result(case: Case, outcome: CallOutcome | None, verdict: Verdict | None) -> CaseResult:
    """One case's line in the result, from how its call ended and, if it ran, its verdict."""
    if outcome is None:
        return CaseResult(case.name, case.public, "not_run", False, "not run: the kernel did not build")
    if outcome.status != "ok" or verdict is None:
        status = outcome.status if outcome.status != "ok" else "crashed"
        return CaseResult(case.name, case.public, status, False, outcome.message, wall_ms=outcome.wall_ms,
                          device_ms=outcome.device_ms)
    first = verdict.first_mismatch
    return CaseResult(
        name=case.name, public=case.public, status="passed" if verdict.passed else "failed", passed=verdict.passed,
        message=verdict.message, max_abs_err=verdict.max_abs_err, max_rel_err=verdict.max_rel_err,
        rel_l2_err=verdict.rel_l2_err, tolerance_used=verdict.tolerance_used, mismatches=verdict.mismatches, elements=verdict.elements,
        never_written=verdict.never_written,
        first_mismatch=Mismatch(first.buffer, list(first.index), first.expected, first.got) if first else None,
        wall_ms=outcome.wall_ms, device_ms=outcome.device_ms,
    )


def score_kernel(kernel: Kernel, artifact: Artifact, cases: list[CaseResult]) -> KernelResult:
    build = {"build_seconds": round(artifact.seconds, 3), "build_cached": artifact.cached}
    if artifact.status == "compile_error":
        return KernelResult(kernel.name, 0.0, kernel.weight, "compile_error", artifact.message, cases, **build)
    for failure in ("timeout", "crashed"):
        failed = next((c for c in cases if c.status == failure), None)
        if failed:
            return KernelResult(kernel.name, 0.0, kernel.weight, failure,
                                f"case '{failed.name}': {failed.message}", cases, **build)
    passed = sum(c.passed for c in cases)
    if kernel.partial_credit == "all_or_nothing":
        earned = kernel.weight if passed == len(cases) else 0.0
    else:
        earned = kernel.weight * passed / len(cases)
    deductions = []
    if artifact.forbidden_symbols:
        points = min(earned, kernel.weight * kernel.forbidden_penalty)
        deductions.append(Deduction(f"uses forbidden symbol(s) {', '.join(artifact.forbidden_symbols)}", points))
    score = max(0.0, earned - sum(d.points for d in deductions))
    status = "passed" if passed == len(cases) and not artifact.forbidden_symbols else "failed"
    first_failure = next((c for c in cases if not c.passed), None)
    messages = [d.reason for d in deductions]
    if first_failure:
        messages.append(f"case '{first_failure.name}': {first_failure.message}")
    message = "; ".join(messages) or f"all {len(cases)} cases passed"
    return KernelResult(kernel.name, round(score, 6), kernel.weight, status,
                        f"{passed}/{len(cases)} cases passed; " + message if first_failure else message,
                        cases, deductions, **build)
