"""compute-sanitizer on one small case per CUDA kernel: memory errors and races the outputs may hide.

Each kernel the spec asks for (`sanitizer = ["memcheck", "racecheck"]`) runs once more, untimed,
on its smallest case, with the harness under `compute-sanitizer --tool TOOL` inside the same
sandbox. Findings are kept in the tool's own words, per kernel; `scoring` deducts the spec's
`sanitizer_penalty` share of the kernel's weight for them.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from grader.build import Artifact
from grader.runner import Call, run_calls
from grader.sandbox import Sandbox
from grader.spec import Assignment, Case, Kernel, allocation_of
from grader.status import CallStatus
from grader.targets import target_of

MAX_FINDINGS = 5  # per kernel and tool: the first few say enough
ERROR_EXIT = 86  # compute-sanitizer's exit status when it found something (--error-exitcode)
_PREFIX = re.compile(r"^=+ ?")
_HEADLINE = re.compile(r"^(Invalid |Out-of-range |Misaligned |Race reported|Error: Race|Uninitialized |Barrier error|"
                       r"Program hit |Malloc/Free error|Leaked |.*hazard)", re.I)
_SUMMARY = re.compile(r"(ERROR SUMMARY: (\d+) errors?)|(RACECHECK SUMMARY: .*?\((\d+) errors?)", re.I)


@dataclass(frozen=True)
class SanitizerReport:
    """What one tool said about one kernel."""

    kernel: str
    tool: str
    errors: int  # the tool's own count; -1 where the run did not get as far as its summary
    findings: tuple[str, ...]  # headline + location, in the tool's words
    note: str = ""  # why there is no count (crash, time-out)


def sanitizer_binary() -> str | None:
    """compute-sanitizer on PATH, else in $CUDA_HOME or /usr/local/cuda; None if absent."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and os.access(Path(home) / "bin" / "compute-sanitizer", os.X_OK):
            return str(Path(home) / "bin" / "compute-sanitizer")
    return None


def smallest_case(kernel: Kernel) -> Case:
    """The case with the fewest elements allocated: the sanitizer slows kernels down 10-100x."""
    return min(kernel.cases, key=lambda c: sum(allocation_of(b, c.params) for b in kernel.buffers))


def parse_report(text: str, kernel: str, tool: str) -> SanitizerReport:
    """Findings from compute-sanitizer's output: each error's headline with the line that locates it."""
    lines = [_PREFIX.sub("", line).rstrip() for line in text.splitlines() if line.startswith("=")]
    findings: list[str] = []
    errors = -1
    for i, line in enumerate(lines):
        summary = _SUMMARY.search(line)
        if summary:
            errors = int(summary.group(2) or summary.group(4))
            continue
        if _HEADLINE.match(line.strip()) and len(findings) < MAX_FINDINGS:
            where = next((n.strip() for n in lines[i + 1:i + 4] if n.strip().startswith(("at ", "by "))), "")
            findings.append(f"{line.strip()} {where}".strip())
    return SanitizerReport(kernel, tool, errors, tuple(findings))


def sanitize(assignment: Assignment, kernels: tuple[Kernel, ...], artifacts: dict[str, Artifact],
             inputs: dict[tuple[str, str], Path], sandbox: Sandbox,
             deadline: float | None = None) -> dict[str, list[SanitizerReport]]:
    """Run each kernel's tools on its smallest case; reports by kernel name (empty where nothing ran).

    `deadline` (time.monotonic()): the submission's time limit, which the sanitizer's runs share
    with the kernels' own, so that a run slot is never held past it.
    """
    binary = sanitizer_binary()
    reports: dict[str, list[SanitizerReport]] = {}
    if binary is None or not target_of(assignment).compute_sanitizer:
        return reports
    for kernel in kernels:
        artifact = artifacts.get(kernel.name)
        if not kernel.sanitizer or artifact is None or artifact.library is None:
            continue
        case = smallest_case(kernel)
        if (kernel.name, case.name) not in inputs:
            continue
        for tool in kernel.sanitizer:
            with tempfile.TemporaryDirectory(prefix="kg-sanitizer-") as scratch:
                call = Call(kernel, case, artifact.library, inputs[(kernel.name, case.name)], Path(scratch) / "out")
                wrapper = (binary, "--tool", tool, "--error-exitcode", str(ERROR_EXIT), "--print-limit", "20",
                           "--show-backtrace", "no")
                # Untimed: the sanitizer's slowdown must not turn into a time-out; generous but bounded.
                slow = _untimed(kernel)
                left = slow.time_limit_s + 120 if deadline is None else min(slow.time_limit_s + 120,
                                                                           deadline - time.monotonic())
                if left <= 1:
                    reports.setdefault(kernel.name, []).append(SanitizerReport(
                        kernel.name, tool, -1, (), "not run under the sanitizer: the submission's time limit was reached"))
                    continue
                report = run_calls(assignment, [Call(slow, case, call.library, call.inputs_dir, call.output_dir)],
                                   sandbox, wrapper=wrapper, time_limit_s=left, sanitizer=True)
                parsed = parse_report("\n".join(report.logs), kernel.name, tool)
                outcome = report.outcomes[0]
                if outcome.status != CallStatus.OK and parsed.errors < 0:
                    parsed = SanitizerReport(kernel.name, tool, -1, parsed.findings,
                                             f"the run under {tool} {outcome.status}: {outcome.message[:300]}")
                reports.setdefault(kernel.name, []).append(parsed)
    return reports


def _untimed(kernel: Kernel) -> Kernel:
    import dataclasses

    seconds = max(600.0, kernel.time_limit_s * 20)
    return dataclasses.replace(kernel, time_limit_s=seconds, time_budget_s=seconds)


def findings_of(reports: list[SanitizerReport]) -> list[str]:
    """One line per finding, prefixed with its tool, for the result."""
    lines = []
    for report in reports:
        lines += [f"{report.tool}: {finding}" for finding in report.findings]
        if report.errors > len(report.findings):
            lines.append(f"{report.tool}: {report.errors} error(s) in all")
        if report.note:
            lines.append(f"{report.tool}: {report.note}")
    return lines


def has_errors(reports: list[SanitizerReport]) -> bool:
    return any(r.errors > 0 or (r.errors < 0 and r.findings) for r in reports)


__all__ = ["SanitizerReport", "findings_of", "has_errors", "parse_report", "sanitize", "sanitizer_binary",
           "smallest_case"]
