"""What `grader grade` and `grader check` print (rich): a table of each kernel's figures (the base
kernels, then each optimization variant's line and kernels), the score, then what to act on for each
kernel that lost points, as the Markdown report gives it: its hints, the compiler's message, each
failed case with its sizes, its message and its hints.

Everything that comes from the submission or the compiler (paths, messages, logs) is printed as
`Text`, never read as markup (square brackets are C++), and on lines of its own that the terminal
soft-wraps: a path or a message is never cut, nor split inside a table cell. A kernel's name is
never cut either: where the table does not fit the console, each name gets a line of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console
from rich.table import Table
from rich.text import Text

from grader.report.credit import credit_lines
from grader.report.evidence import variant_evidence
from grader.report.render import (KernelView, compiled_files, context, later_commit_words, sizes, variant_flags,
                                  written_words)
from grader.results import KernelResult, Result
from grader.status import KernelStatus, Outcome

STATUS_STYLE = {KernelStatus.PASSED: "green", KernelStatus.FAILED: "red", KernelStatus.FORBIDDEN: "red",
                KernelStatus.COMPILE_ERROR: "magenta", KernelStatus.CRASHED: "red bold", KernelStatus.TIMEOUT: "yellow",
                KernelStatus.NOT_RUN: "dim", KernelStatus.NOT_SUBMITTED: "dim"}
VARIANT_STYLE = {Outcome.PASSED: "green", Outcome.NOT_SUBMITTED: "dim", Outcome.COMPILE_ERROR: "magenta",
                 Outcome.TIMEOUT: "yellow"}
# Kernels whose cases all share one reason (no build, no device, no folder): the kernel's message says it once.
ONE_REASON = (KernelStatus.COMPILE_ERROR, KernelStatus.NOT_RUN, KernelStatus.NOT_SUBMITTED)
HINT_INDENT = 4


@dataclass(frozen=True)
class _Row:
    """One line of the figures: a kernel's, or a variant's (bold, its kernels' sum)."""

    name: str
    status: str
    style: str
    cases: str
    score: str
    time: str
    bold: bool = False


def render(result: Result, console: Console | None = None, verbose: bool = False) -> None:
    """Print the result; `verbose` adds what each kernel printed (the end of its stdout/stderr)."""
    console = console or Console()
    scope = "public cases" if result.public_only else "all cases"
    _line(console, Text.assemble((result.title, "bold"), f" ({scope})"))
    _line(console, Text(result.submission.path))  # a line of its own: a path the terminal wraps only if it must
    _print_rows(console, _rows(result))
    for variant in result.variants:
        _line(console, Text.assemble((variant.name, "bold"), ": ", variant.title))
        _line(console, Text("  " + variant.message))  # it starts with the variant's name
        for flag in variant_flags(variant):
            _line(console, Text.assemble("  ", ("flag", "yellow"), ": ", flag))
        for evidence in variant_evidence(variant):
            _line(console, Text("  " + evidence))
    _line(console, Text(f"score {result.score:.4g} / {result.max_score:g}", "bold"))
    for line in credit_lines(result):
        _line(console, Text(line))
    _line(console, Text(f"device: {result.environment.device or 'none'}   compiler: {result.environment.compiler}   "
                        f"took {result.stages.get('total', 0):.1f} s", "dim"))
    if result.environment.determinism:
        _line(console, Text(f"determinism: {'; '.join(result.environment.determinism)}", "dim"))
    if result.message:
        _line(console, Text(result.message, "yellow"))
    if later := later_commit_words(result):
        _line(console, Text(later, "yellow"))
    written, warning = written_words(result)
    if written:
        _line(console, Text(written, "yellow" if warning else "dim"))
    builds = compiled_files(result)
    for kernels, files in builds:  # which of the student's files each build saw
        named = f" ({', '.join(kernels)})" if len(builds) > 1 else ""
        console.print(f"compiled{named}: {', '.join(files)}", markup=False, highlight=False, style="dim")
    for view in context(result)["details"]:
        if view.kernel.status is not KernelStatus.PASSED or view.sanitizer:
            _print_details(console, view)
        elif view.notes:  # a kernel with full marks: its notes alone
            console.print()
            _line(console, Text.assemble((view.kernel.name, "bold"), ": ", ("passed", "green")))
            for note in view.notes:
                _line(console, Text.assemble("  ", ("note", "cyan"), ": ", note))
    if verbose:
        for kernel in result.kernels:
            if kernel.log:
                console.print()
                _line(console, Text(f"what {kernel.name} printed (the end of its stdout/stderr):", "dim"))
                _line(console, Text(kernel.log.rstrip()))


def _line(console: Console, text: Text) -> None:
    """One piece of text whole: never wrapped or cut by rich (the terminal wraps it), never read as markup."""
    console.print(text, soft_wrap=True, highlight=False)


def _rows(result: Result) -> list[_Row]:
    variants = {v.name for v in result.variants}
    rows = [_kernel_row(k) for k in result.kernels if k.variant not in variants]
    for variant in result.variants:
        rows.append(_Row(variant.name, str(variant.status), VARIANT_STYLE.get(variant.status, "red"), "",
                         f"{variant.score:.4g}/{variant.max_score:g}", "", bold=True))
        rows += [_kernel_row(k) for k in result.kernels if k.variant == variant.name]
    return rows


def _kernel_row(kernel: KernelResult) -> _Row:
    return _Row(kernel.name, str(kernel.status), STATUS_STYLE.get(kernel.status, ""),
                f"{kernel.cases_passed}/{len(kernel.cases)}", f"{kernel.score:.4g}/{kernel.max_score:g}",
                _slowest(kernel))


def _print_rows(console: Console, rows: list[_Row]) -> None:
    """The rows as a table where it fits the console with every name whole, else one name a line."""
    table = Table()
    table.add_column("kernel", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("cases", justify="right", no_wrap=True)
    table.add_column("score", justify="right", no_wrap=True)
    table.add_column("time (ms)", justify="right", no_wrap=True)
    for row in rows:
        if row.bold:
            table.add_section()
        table.add_row(Text(row.name, "bold" if row.bold else ""), Text(row.status, row.style), row.cases,
                      Text(row.score, "bold" if row.bold else ""), row.time)
    needed = console.measure(table, options=console.options.update(max_width=10_000)).maximum
    if needed <= console.width:
        console.print(table)
        return
    for row in rows:
        _line(console, Text(row.name, "bold" if row.bold else ""))
        figures = [f"{row.cases} cases" if row.cases else "", row.score, f"{row.time} ms" if row.time not in ("", "-") else ""]
        _line(console, Text.assemble("    ", (row.status, row.style), *(f"   {f}" for f in figures if f)))


def _print_details(console: Console, view: KernelView) -> None:
    """What a student acts on for one kernel: as the Markdown report's section of it."""
    kernel = view.kernel
    console.print()
    _line(console, Text.assemble((kernel.name, "bold"), ": ", (str(kernel.status).replace("_", " "),
                                 STATUS_STYLE.get(kernel.status, "")), f" ({kernel.score:.4g}/{kernel.max_score:g})"))
    for hint in view.hints:
        _hint(console, hint, indent=2)
    for note in view.notes:
        _line(console, Text.assemble("  ", ("note", "cyan"), ": ", note))
    for deduction in kernel.deductions:
        _line(console, Text(f"  −{deduction.points:.3g}: {deduction.reason}"))
    if view.sanitizer:
        _line(console, Text("  compute-sanitizer findings:"))
        for finding in view.sanitizer:
            _line(console, Text(finding))
    if kernel.status in ONE_REASON:
        # The compiler's message as it wrote it, line by line: file:line:column stays one piece.
        _line(console, Text(kernel.message.rstrip()))
        return
    for failure in view.failures:
        case = failure.case
        if len(failure.cases) == 1:
            where = f" ({sizes(case)})" if case.params else ""
            hidden = "" if case.public else " [hidden]"
            named = Text.assemble((case.name, "bold"), where, (hidden, "dim"))
        else:  # one message for all of them, said once
            named = Text.assemble((f"{len(failure.cases)} cases", "bold"), f" ({failure.names})")
        status = str(case.status).replace("_", " ")
        # "not run: not run: ...": a message that starts with its status says it once.
        _line(console, Text.assemble("  ", named, ": ", (status, "red"), ": ", case.message.removeprefix(f"{status}: ")))
        for hint in failure.hints:
            _hint(console, hint, indent=HINT_INDENT)


def _hint(console: Console, hint: str, indent: int) -> None:
    # The grader's own words: wrapped at spaces under their indent, so that they read as one paragraph.
    text = Text.assemble(("hint", "cyan"), ": ", hint)
    for line in text.wrap(console, max(20, console.width - indent)):
        line.rstrip()
        _line(console, Text(" " * indent) + line)


def _slowest(kernel: KernelResult) -> str:
    times = [c.device_ms if c.device_ms is not None else c.wall_ms for c in kernel.cases]
    measured = [t for t in times if t is not None]
    return f"{max(measured):.3g}" if measured else "-"
