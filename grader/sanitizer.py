"""compute-sanitizer on one small case per CUDA kernel: memory errors and races the outputs may hide.

Each kernel the spec asks for (`sanitizer = ["memcheck", "racecheck"]`) runs once more, untimed,
on its smallest case, with the harness under `compute-sanitizer --tool TOOL` inside the same
sandbox. Findings are kept in the tool's own words, per kernel; `scoring` deducts the spec's
`sanitizer_penalty` share of the kernel's weight for them.

A run that got as far as the tool's summary is cached by content (the library's build, the tool,
the case's inputs, the tool's version): a regrade, or a kernel its student did not change, is
not sanitized again.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grader import __version__
from grader.build import Artifact
from grader.cache import content_key, publish_file
from grader.device import cuda_tool
from grader.gate import Gate
from grader.runner import Call, CallOutcome, FollowUp, run_calls
from grader.runner.plan import planned
from grader.sandbox import Sandbox
from grader.assignment import Assignment, Case, Kernel, allocation_of
from grader.status import CallStatus
from grader.targets import target_of

MAX_FINDINGS = 5  # per kernel and tool: the first few say enough
ERROR_EXIT = 86  # compute-sanitizer's exit status when it found something (--error-exitcode)
_PREFIX = re.compile(r"^=+ ?")
_HEADLINE = re.compile(r"^(Invalid |Out-of-range |Misaligned |Race reported|Error: Race|Uninitialized |Barrier error|"
                       r"Program hit |Malloc/Free error|Leaked |.*hazard)", re.I)
_SUMMARY = re.compile(r"(ERROR SUMMARY: (\d+) errors?)|(RACECHECK SUMMARY: .*?\((\d+) errors?)", re.I)
CACHE_FOLDER = "sanitizer"  # under the cache dir: one JSON report per key


@dataclass(frozen=True)
class SanitizerReport:
    """What one tool said about one kernel."""

    kernel: str
    tool: str
    errors: int  # the tool's own count; -1 where the run did not get as far as its summary
    findings: tuple[str, ...]  # headline + location, in the tool's words
    note: str = ""  # why there is no count (crash, time-out)
    cached: bool = False  # read from the cache: this grade ran no harness for it
    seconds: float = 0.0  # the run under the tool, wall clock (0 where cached or not run)


def sanitizer_binary() -> str | None:
    """compute-sanitizer on PATH, else in $CUDA_HOME or /usr/local/cuda; None if absent."""
    return cuda_tool("compute-sanitizer")


@functools.cache
def sanitizer_version(binary: str) -> str:
    """What `compute-sanitizer --version` says (asked once per binary); "" where it says nothing."""
    try:
        answered = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return answered.stdout.strip() if answered.returncode == 0 else ""


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


def cached_report(cache_dir: Path | None, key: str, run: Callable[[], SanitizerReport]) -> SanitizerReport:
    """The report stored under `key`, else `run`'s, stored when the run got as far as the tool's count.

    A crash or a time-out under the tool (no count) is not stored: the next grade tries again.
    """
    path = cache_dir / CACHE_FOLDER / f"{key}.json" if cache_dir is not None else None
    if path is not None and path.is_file():
        try:
            stored = json.loads(path.read_text())
            return SanitizerReport(stored["kernel"], stored["tool"], int(stored["errors"]),
                                   tuple(stored["findings"]), stored.get("note", ""), cached=True)
        except (OSError, ValueError, KeyError, TypeError):
            pass  # unreadable: run it again, and store it anew
    report = run()
    if path is not None and report.errors >= 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        stored = {"kernel": report.kernel, "tool": report.tool, "errors": report.errors,
                  "findings": list(report.findings), "note": report.note}
        publish_file(path, json.dumps(stored).encode())
    return report


@dataclass(frozen=True)
class SanitizerCheck:
    """One submission's runs under compute-sanitizer: the tool, the builds and inputs, the shared deadline."""

    assignment: Assignment
    artifacts: dict[str, Artifact]
    inputs: dict[tuple[str, str], Path]  # (kernel, case) -> the case's inputs folder
    sandbox: Sandbox
    binary: str
    version: str  # the tool's, part of each cached report's key
    # time.monotonic(): the submission's time limit, which the sanitizer's runs share with the
    # kernels' own, so that a run slot is never held past it.
    deadline: float | None = None
    cache_dir: Path | None = None  # where reports are cached (None: not cached)

    def runs(self, kernel: Kernel) -> list[FollowUp]:
        """One run per tool the spec asks for on the kernel's smallest case; none without a library or inputs."""
        artifact = self.artifacts.get(kernel.name)
        if not kernel.sanitizer or artifact is None or artifact.library is None:
            return []
        case = smallest_case(kernel)
        inputs = self.inputs.get((kernel.name, case.name))
        if inputs is None:
            return []
        return [functools.partial(self.run_tool, kernel, case, artifact.library, inputs, tool)
                for tool in kernel.sanitizer]

    def after_run(self, kernel: Kernel, outcomes: list[CallOutcome]) -> list[FollowUp]:
        """The kernel's runs once its cases ran: none for a kernel that timed out (untimed, it could hold the slot)."""
        if any(o.status == CallStatus.TIMEOUT for o in outcomes):
            return []
        return self.runs(kernel)

    def run_tool(self, kernel: Kernel, case: Case, library: Path, inputs: Path, tool: str,
                 slots: Gate | None = None) -> SanitizerReport:
        """One tool on one case, from the cache where it ran before (even past the deadline: it costs nothing);
        `slots`: those of the run it follows."""
        wrapper = (self.binary, "--tool", tool, "--error-exitcode", str(ERROR_EXIT), "--print-limit", "20",
                   "--show-backtrace", "no")

        def run() -> SanitizerReport:
            # Untimed: the sanitizer's slowdown must not turn into a time-out; generous but bounded.
            slow = _untimed(kernel)
            left = slow.time_limit_s + 120 if self.deadline is None else min(slow.time_limit_s + 120,
                                                                              self.deadline - time.monotonic())
            if left <= 1:
                return SanitizerReport(kernel.name, tool, -1, (),
                                       "not run under the sanitizer: the submission's time limit was reached")
            started = time.perf_counter()
            with tempfile.TemporaryDirectory(prefix="kg-sanitizer-") as scratch:
                call = Call(slow, case, library, inputs, Path(scratch) / "out")
                report = run_calls(self.assignment, [call], self.sandbox, wrapper=wrapper, time_limit_s=left,
                                   sanitizer=True, slots=slots)
            parsed = parse_report("\n".join(report.logs), kernel.name, tool)
            outcome = report.outcomes[0]
            if outcome.status != CallStatus.OK and parsed.errors < 0:
                parsed = SanitizerReport(kernel.name, tool, -1, parsed.findings,
                                         f"the run under {tool} {outcome.status}: {outcome.message[:300]}")
            return dataclasses.replace(parsed, seconds=time.perf_counter() - started)

        if not self.version:  # a tool that cannot say its version: its findings are not cached
            return run()
        return cached_report(self.cache_dir, self.key(kernel, case, library, inputs, wrapper[1:]), run)

    def key(self, kernel: Kernel, case: Case, library: Path, inputs: Path, options: tuple[str, ...]) -> str:
        """The run's content: the library's build key, the tool and its options, the case's inputs and
        arguments, the tool's version (and the grader's, whose harness the tool watches)."""
        arguments = json.dumps([dataclasses.asdict(a) for a in planned(Call(kernel, case, library, inputs, inputs),
                                                                        inputs).arguments], default=str)
        return content_key("sanitizer", library.parent.name, " ".join(options), inputs.name, arguments,
                           self.version, __version__)


def sanitizer_check(assignment: Assignment, artifacts: dict[str, Artifact], inputs: dict[tuple[str, str], Path],
                    sandbox: Sandbox, deadline: float | None = None,
                    cache_dir: Path | None = None) -> SanitizerCheck | None:
    """The submission's sanitizer runs; None where compute-sanitizer is absent or cannot check the target."""
    binary = sanitizer_binary()
    if binary is None or not target_of(assignment).compute_sanitizer:
        return None
    return SanitizerCheck(assignment, artifacts, inputs, sandbox, binary, sanitizer_version(binary), deadline,
                          cache_dir)


def sanitize(assignment: Assignment, kernels: tuple[Kernel, ...], artifacts: dict[str, Artifact],
             inputs: dict[tuple[str, str], Path], sandbox: Sandbox, deadline: float | None = None,
             cache_dir: Path | None = None) -> dict[str, list[SanitizerReport]]:
    """Run each kernel's tools on its smallest case, one after another; reports by kernel name.

    Grading runs them beside the kernels' own harnesses instead (`SanitizerCheck.after_run`);
    this is the same check on its own. `deadline` (time.monotonic()): the submission's time limit.
    """
    check = sanitizer_check(assignment, artifacts, inputs, sandbox, deadline, cache_dir)
    if check is None:
        return {}
    reports = {kernel.name: [run(None) for run in check.runs(kernel)] for kernel in kernels}
    return {name: found for name, found in reports.items() if found}


def _untimed(kernel: Kernel) -> Kernel:
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


__all__ = ["SanitizerCheck", "SanitizerReport", "cached_report", "findings_of", "has_errors", "parse_report",
           "sanitize", "sanitizer_binary", "sanitizer_check", "sanitizer_version", "smallest_case"]
