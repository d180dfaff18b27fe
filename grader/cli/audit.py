"""`grader audit NAME`: mutation testing of a pack's reference, to see what its cases miss before the term
(grader.audit).

    grader audit flash-attention-cpu --limit 200 --html audit.html     # 200 mutants, the page with each survivor
    grader audit tiled-matmul --seconds 300                            # as many as 5 minutes grade
    grader audit sparse-spmv-spgemm-cupy --file kernels/cupy_sparse.py # only this file's mutants

Exits 1 where a sample no longer gets what its VARIANT.toml says (or the reference lacks full marks); survivors
are reported, not failed: which of them matter is the author's call.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from grader.assignment import load_assignment
from grader.options import Options, default_cache_dir
from grader.sandbox import SANDBOX_NAMES

if TYPE_CHECKING:
    from grader.audit.run import AuditReport


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("audit", help="mutation testing of a pack's reference: the cases' blind spots")
    parser.add_argument("assignment", help="assignment name (see `grader list`) or folder")
    parser.add_argument("--limit", type=int, default=None, metavar="N",
                        help="grade at most N mutants, drawn the same way each run (default: all)")
    parser.add_argument("--seconds", type=float, default=None, metavar="S",
                        help="start no grade after S seconds; the rest are counted as not graded")
    parser.add_argument("--file", action="append", default=None, metavar="PATH",
                        help="mutate only this file of the reference (repeatable; default: the files its kernels name)")
    parser.add_argument("--no-samples", action="store_true", help="leave out the samples' check")
    parser.add_argument("--fresh", type=int, default=2, metavar="N",
                        help="fresh draws of the secret cases each survivor's outputs are compared on (default: 2)")
    parser.add_argument("--run-slots", type=int, default=None, help="submissions run at once (default: the batch's)")
    parser.add_argument("--no-sanitizer", action="store_true", help="skip compute-sanitizer (CUDA packs)")
    parser.add_argument("--html", type=Path, default=None, help="write the audit page here")
    parser.add_argument("--json", type=Path, default=None, help="write the audit as JSON here")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="builds, gold and the audit's verdicts (default: $KERNEL_GRADER_CACHE or ~/.cache/kernel-grader)")
    parser.add_argument("--sandbox", default="local", choices=SANDBOX_NAMES, help="where the mutants run")
    parser.set_defaults(run=run)


def run(arguments: argparse.Namespace) -> int:
    from grader.audit.run import audit

    console = Console()
    assignment = load_assignment(arguments.assignment)
    options = Options(cache_dir=arguments.cache_dir or default_cache_dir(), sandbox=arguments.sandbox,
                      secret=os.environ.get("KERNEL_GRADER_SECRET") or "audit", sanitizer=not arguments.no_sanitizer)
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[last]}"))
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(f"auditing {assignment.name}", total=None, last="")

        def on_progress(done: int, total: int, what: str) -> None:
            progress.update(task, completed=done, total=total, last=what[:40])

        report = audit(assignment, options, limit=arguments.limit, seconds=arguments.seconds,
                       files=arguments.file, slots=arguments.run_slots, with_samples=not arguments.no_samples,
                       fresh_secrets=arguments.fresh, on_progress=on_progress)
    _show(report, console)
    if arguments.json:
        arguments.json.write_text(json.dumps(report.to_dict(), indent=2))
    if arguments.html:
        from grader.report.audit import render_page

        arguments.html.parent.mkdir(parents=True, exist_ok=True)
        arguments.html.write_text(render_page(report.to_dict()), encoding="utf-8")
        console.print(f"audit page written to {escape(str(arguments.html))}", highlight=False, soft_wrap=True)
    return 1 if report.reference_problem or report.sample_errors else 0


def _show(report: AuditReport, console: Console) -> None:
    from grader.status import MutantStatus

    if report.reference_problem:
        console.print(f"[red]error:[/] {escape(report.reference_problem)}", soft_wrap=True, highlight=False)
        return
    table = Table(title=f"{report.assignment}: mutation score per kernel", title_justify="left")
    for column in ("kernel", "killed", "counted", "score"):
        table.add_column(column, justify="left" if column == "kernel" else "right")
    for kernel, (killed, counted) in report.kernel_scores().items():
        table.add_row(kernel, str(killed), str(counted), f"{100 * killed / counted:.0f}%")
    console.print(table)
    counts = ", ".join(f"{len(report.of(s))} {s.value.replace('_', ' ')}" for s in MutantStatus)
    score = "–" if report.score is None else f"{100 * report.score:.0f}%"
    cached = sum(v.cached for v in report.verdicts)
    console.print(f"{len(report.verdicts)} of {report.generated} mutants judged ({cached} from the cache, "
                  f"{report.not_graded} left by the budget) in {report.seconds:.1f} s: {counts}; mutation score {score}",
                  highlight=False, soft_wrap=True)
    for verdict in report.of(MutantStatus.SURVIVED):
        console.print(f"[bold red]survived[/] {escape(', '.join(verdict.mutant.kernels))} "
                      f"{escape(verdict.mutant.file)}:{verdict.mutant.line}: {escape(verdict.words)}",
                      highlight=False, soft_wrap=True)
        console.print(escape(verdict.mutant.diff.rstrip()), highlight=False, soft_wrap=True)
    if report.cases_killing_nothing:
        console.print(f"[yellow]cases that kill nothing:[/] {escape(', '.join(report.cases_killing_nothing))}",
                      highlight=False, soft_wrap=True)
    for check in report.sample_errors:
        console.print(f"[red]sample {escape(check.sample)} not as it says:[/] {escape(check.words)}",
                      highlight=False, soft_wrap=True)
    if report.samples and not report.sample_errors:
        console.print(f"every sample as its VARIANT.toml says ({len(report.samples)} checks)", highlight=False)
