"""The per-kernel table that `grader grade` and `grader check` print (rich): the base kernels, then each
optimization variant's line and kernels, then the variants' messages, flags and evidence."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from grader.report.render import compiled_files, variant_flags
from grader.results import KernelResult, Result
from grader.status import KernelStatus, Outcome

STATUS_STYLE = {KernelStatus.PASSED: "green", KernelStatus.FAILED: "red", KernelStatus.FORBIDDEN: "red",
                KernelStatus.COMPILE_ERROR: "magenta", KernelStatus.CRASHED: "red bold", KernelStatus.TIMEOUT: "yellow",
                KernelStatus.NOT_RUN: "dim", KernelStatus.NOT_SUBMITTED: "dim"}
VARIANT_STYLE = {Outcome.PASSED: "green", Outcome.NOT_SUBMITTED: "dim", Outcome.COMPILE_ERROR: "magenta",
                 Outcome.TIMEOUT: "yellow"}


def render(result: Result, console: Console | None = None, verbose: bool = False) -> None:
    console = console or Console()
    scope = "public cases" if result.public_only else "all cases"
    table = Table(title=f"{result.title} — {result.submission.path} ({scope})", title_justify="left")
    table.add_column("kernel")
    table.add_column("status")
    table.add_column("cases", justify="right")
    table.add_column("score", justify="right")
    table.add_column("time (ms)", justify="right")
    table.add_column("message", overflow="fold")
    variants = {v.name for v in result.variants}
    for kernel in result.kernels:
        if kernel.variant not in variants:
            _add_kernel(table, kernel, verbose)
    for variant in result.variants:
        table.add_section()
        style = VARIANT_STYLE.get(variant.status, "red")
        table.add_row(f"[bold]{variant.name}[/]", f"[{style}]{variant.status}[/]", "",
                      f"[bold]{variant.score:.4g}/{variant.max_score:g}[/]", "", variant.title)
        for kernel in result.kernels:
            if kernel.variant == variant.name:
                _add_kernel(table, kernel, verbose)
    console.print(table)
    for variant in result.variants:
        console.print(variant.message, highlight=False)  # it starts with the variant's name
        for flag in variant_flags(variant):
            console.print(f"  [yellow]flag[/]: {flag}", highlight=False)
        for line in variant.evidence:
            console.print(f"  {line}", highlight=False)
    console.print(f"[bold]score {result.score:.4g} / {result.max_score:g}[/]   "
                  f"device: {result.environment.device or 'none'}   compiler: {result.environment.compiler}   "
                  f"took {result.stages.get('total', 0):.1f} s")
    if result.message:
        console.print(f"[yellow]{result.message}[/]", highlight=False)
    builds = compiled_files(result)
    for kernels, files in builds:  # which of the student's files each build saw
        named = f" ({', '.join(kernels)})" if len(builds) > 1 else ""
        console.print(f"compiled{named}: {', '.join(files)}", markup=False, highlight=False, style="dim")
    if verbose:
        for kernel in result.kernels:
            for case in kernel.cases:
                if not case.passed:
                    console.print(f"[red]{kernel.name} / {case.name}[/]: {case.message}", markup=True, highlight=False)
        for kernel in result.kernels:
            if kernel.log:
                console.print(f"[dim]what {kernel.name} printed (the end of its stdout/stderr):[/]")
                console.print(kernel.log.rstrip(), markup=False, highlight=False)


def _add_kernel(table: Table, kernel: KernelResult, verbose: bool) -> None:
    style = STATUS_STYLE.get(kernel.status, "")
    table.add_row(kernel.name, f"[{style}]{kernel.status}[/]", f"{kernel.cases_passed}/{len(kernel.cases)}",
                  f"{kernel.score:.4g}/{kernel.max_score:g}", _slowest(kernel), _first_line(kernel.message, verbose))


def _slowest(kernel: KernelResult) -> str:
    times = [c.device_ms if c.device_ms is not None else c.wall_ms for c in kernel.cases]
    measured = [t for t in times if t is not None]
    return f"{max(measured):.3g}" if measured else "-"


def _first_line(message: str, verbose: bool) -> str:
    if verbose:
        return message
    lines = message.strip().splitlines()
    first = lines[0] if lines else ""
    return first[:200] + (" …" if len(lines) > 1 or len(first) > 200 else "")
