"""`grader list`: the assignments this grader knows, with their kernels and weights."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from grader.assignment import survey_assignments


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("list", help="list assignments with their kernels and weights")
    parser.set_defaults(run=run)


def run(arguments: argparse.Namespace) -> int:
    table = Table(title="assignments")
    for column in ("assignment", "target", "kernel", "weight", "cases (public)", "tolerance"):
        table.add_column(column)
    assignments, broken = survey_assignments()
    for assignment in assignments:
        for i, kernel in enumerate(assignment.kernels):
            public = sum(c.public for c in kernel.cases)
            table.add_row(assignment.name if i == 0 else "", assignment.target if i == 0 else "", kernel.name,
                          f"{kernel.weight:g}", f"{len(kernel.cases)} ({public})",
                          f"atol {kernel.tolerance.atol:g}, rtol {kernel.tolerance.rtol:g}")
        table.add_row("", "", "[bold]total[/]", f"[bold]{assignment.max_score:g}[/]", "", "", end_section=True)
    console = Console()
    if not console.is_terminal:  # a pipe or a file: the table at its full width, so no name is cut
        console = Console(width=max(console.width, table_width(table, console)))
    console.print(table)
    # An assignment that does not load is listed with its error; every other assignment keeps working.
    for failed in broken:
        console.print(f"[red]broken[/] {failed.name}: {escape(failed.error)}", soft_wrap=True, highlight=False)
    return 0


def table_width(table: Table, console: Console) -> int:
    """The width `table` needs to show every cell whole."""
    return console.measure(table, options=console.options.update(max_width=10_000)).maximum
