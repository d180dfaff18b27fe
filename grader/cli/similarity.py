"""`grader similarity --store FILE -a NAME --out similarity.html`: the pairs of a class's graded submissions whose
code is most alike (grader.similarity), for the instructor; never part of a student's feedback.

    grader similarity --store grades.sqlite -a flash-attention-cpu --out dashboard/similarity.html
    grader similarity ... --corpus fall-2025.sqlite --threshold 0.4     # earlier terms too; a lower bar

Written beside the dashboard (`grader report dashboard --out dashboard`), the dashboard links it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from grader.assignment import load_assignment
from grader.cli.report import stored_results


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("similarity", help="pairs of submissions whose code is most alike (instructors only)")
    parser.add_argument("--store", type=Path, required=True, help="the results store (SQLite file) `grader batch` fills")
    parser.add_argument("--assignment", "-a", required=True, help="assignment name (see `grader list`)")
    parser.add_argument("--out", type=Path, required=True, help="the HTML page to write")
    parser.add_argument("--corpus", type=Path, action="append", default=[], metavar="STORE",
                        help="an earlier term's store: its submissions compared with this term's (repeatable)")
    parser.add_argument("--threshold", type=float, default=None, metavar="SHARE",
                        help="report pairs whose code, both sides together, matches at least this share (default: 0.5)")
    parser.set_defaults(run=run)


def run(arguments: argparse.Namespace) -> int:
    from grader import similarity
    from grader.report.render import environment

    console = Console()
    assignment = load_assignment(arguments.assignment)
    threshold = similarity.DEFAULT_THRESHOLD if arguments.threshold is None else arguments.threshold
    if not 0 < threshold <= 1:
        console.print(f"[red]error:[/] --threshold is a share between 0 and 1, found {threshold}")
        return 2
    skipped: list[str] = []

    def submitted(store: Path, term: str) -> list[similarity.Submitted]:
        found = []
        for result in stored_results(store, assignment.name):
            if not result.status.was_graded or not result.student:
                continue
            files = similarity.code_at_commit(result)
            if files is None:
                skipped.append(f"{result.student} ({term})" if term else result.student)
            elif files:
                found.append(similarity.Submitted(result.student, result.submission.commit, files, term))
        return found

    this_term = submitted(arguments.store, "")
    corpus = [s for store in arguments.corpus for s in submitted(store, store.stem)]
    pairs = similarity.similar_pairs(this_term, corpus, similarity.template_code(assignment), threshold)
    page = environment(autoescape=True).get_template("similarity.html.j2").render(
        title=assignment.title, assignment=assignment.name, compared=len(this_term), corpus=len(corpus),
        threshold=threshold, pairs=pairs, skipped=skipped)
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(page, encoding="utf-8")
    for pair in pairs[:10]:
        console.print(f"{100 * pair.share:3.0f}%  {pair.first.submitted.label} ~ {pair.second.submitted.label} "
                      f"({pair.tokens} matching tokens)", highlight=False)
    console.print(f"{len(pairs)} pair(s) of {len(this_term)} submissions at {100 * threshold:.0f}% or more"
                  + (f" (with {len(corpus)} of earlier terms)" if corpus else "")
                  + (f"; not read: {', '.join(skipped)}" if skipped else "") + f"; written to {arguments.out}",
                  highlight=False)
    return 0
