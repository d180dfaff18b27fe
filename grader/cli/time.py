"""`grader time SUBMISSION --assignment NAME [--against-reference]`: each kernel's speed, per variant, as a table;
`--competition`: the assignment's competition run set instead (tokens/s per run, their geometric mean, the gate);
`--ncu`: what ncu measures of the variants whose claim is one (grader.ncu), beside kernels/'s figures."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from grader.device import unavailable_reason
from grader.errors import GraderError, SubmissionError
from grader.options import Options, default_cache_dir
from grader.sandbox import SANDBOX_NAMES
from grader.assignment import load_assignment
from grader.sweeps import render_page, sweep_page_named, sweep_page_names

if TYPE_CHECKING:
    from grader.assignment import Assignment
    from grader.sweeps import SweepPage
    from grader.timing.points import SpeedupAward
    from grader.timing.results import SubmissionTiming
    from grader.timing.spec import TimingSpec


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("time", help="time each kernel of a submission, per variant, against its own "
                                              "kernels/ and the reference (instructors; needs the kernels' GPU)")
    parser.add_argument("submission", type=Path, help="the submission's folder (a git checkout or a plain folder)")
    parser.add_argument("--assignment", "-a", required=True, help="assignment name (see `grader list`)")
    parser.add_argument("--against-reference", action="store_true",
                        help="time the reference's kernels too, the same way, for the 'vs reference' column")
    parser.add_argument("--kernels", help="comma-separated kernels or variants to time (default: all); req_0 picks "
                                          "a variant's kernels, req_0/matmul one of them")
    parser.add_argument("--json", type=Path, default=None,
                        help="where the timings and the table go as JSON (default: timing-<assignment>.json here)")
    parser.add_argument("--sweep", action="store_true",
                        help="time each kernel on each of its sweep cases (its sweep_cases, else its cases that "
                             "carry the swept parameter, else all), not on its timed case alone (a figure against a "
                             "case parameter: runtime against density)")
    parser.add_argument("--sweep-html", "--density-html", dest="sweep_html", type=Path, default=None, metavar="FILE",
                        help="with --sweep: write the sweep as an HTML page (a matplotlib figure where it is "
                             "installed), the one the assignment's [timing] sweep_page names (" + ", ".join(
                                 sweep_page_names()) + "; docs/timing.md). The default, density: runtime against "
                             "each case's density (or the assignment's [timing] sweep_parameter, e.g. N), with the GPU/CPU "
                             "speed-up and its crossover density; where each call's peak extra memory was counted "
                             "(CPU kernels), memory too, with its fitted exponents and flags. --sweep-html is its name; "
                             "--density-html, its older one, still works")
    parser.add_argument("--with", dest="with_timings", type=Path, action="append", default=[], metavar="JSON",
                        help="with --sweep-html: another sweep's JSON (`grader time --sweep` of the other device's "
                             "assignment) drawn beside this one; may be repeated")
    parser.add_argument("--competition", action="store_true",
                        help="run the assignment's [competition] instead (gpt2-m3): greedy generation through the "
                             "submission's kernels (kernels/ with its competition folder laid over it), timed per run, "
                             "gated on the logits; writes competition-<assignment>.json (or --json), which `grader "
                             "export gradescope-results --competition` and `grader report dashboard --competition` "
                             "read")
    parser.add_argument("--ncu", action="store_true",
                        help="measure, under Nsight Compute in the sandbox, the variants whose claim ncu can show "
                             "(their ncu_metrics: gpt2-m3's op_11 and op_12 bank conflicts, op_18 the L2 hit rate) "
                             "beside kernels/'s build, one call of the timed case each; reported, not scored. "
                             "--kernels names other variants to measure; writes ncu-<assignment>.json (or --json)")
    parser.add_argument("--student", default=None,
                        help="with --competition: the name its leaderboard entry shows (default: the folder's name)")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="builds, inputs and gold outputs (default: $KERNEL_GRADER_CACHE or ~/.cache/kernel-grader)")
    parser.add_argument("--sandbox", default="local", choices=SANDBOX_NAMES, help="where student code runs")
    parser.add_argument("--jobs", type=int, default=None, help="parallel compiles (default: all cores)")
    parser.add_argument("--cuda-arch", default=None, help="e.g. sm_90 (default: GPU 0's)")
    parser.set_defaults(run=run)


def run(arguments: argparse.Namespace) -> int:
    from grader.timing.run import time_submission
    from grader.timing.spec import load_timing
    from grader.timing.table import clocks_summary, render, speedup_table

    console = Console()
    assignment = load_assignment(arguments.assignment)
    if arguments.competition:
        return _competition(arguments, assignment, console)
    if arguments.ncu:
        return _ncu(arguments, assignment, console)
    timing = load_timing(assignment)  # a broken [timing] table is said before anything is built
    if not arguments.submission.exists():
        raise SubmissionError(f"submission {arguments.submission}: no such folder")
    if reason := unavailable_reason(assignment.target, assignment.python_packages):
        raise GraderError(f"cannot time {assignment.name}'s kernels on this machine: {reason}. Timing needs the "
                          f"{assignment.target} device the kernels run on; `grader grade` still compiles them here")
    options = Options(cache_dir=arguments.cache_dir or default_cache_dir(), sandbox=arguments.sandbox,
                      kernels=tuple(k.strip() for k in arguments.kernels.split(",")) if arguments.kernels else (),
                      jobs=arguments.jobs, cuda_arch=arguments.cuda_arch)
    if arguments.sweep_html and not arguments.sweep:
        raise GraderError("--sweep-html draws a sweep: add --sweep")
    if arguments.sweep:
        return _sweep(arguments, assignment, options, timing, console)
    student = time_submission(arguments.submission, assignment, options, timing)
    reference = time_submission(assignment.reference_dir, assignment, options, timing) \
        if arguments.against_reference else None
    table = speedup_table(student, reference, timing)
    render(table, console, f"{assignment.name}: {arguments.submission}")
    console.print(clocks_summary(student.kernels + (reference.kernels if reference else ())), highlight=False)
    awards = _awards(student, assignment, timing, console)
    path = arguments.json or Path(f"timing-{assignment.name}.json")
    document = {"student": student.to_dict(), "reference": reference.to_dict() if reference else None,
                "table": table.to_dict(), "speedup_points": [a.to_dict() for a in awards],
                "timing_spec": timing.where}
    path.write_text(json.dumps(document, indent=2))
    console.print(f"timings (JSON) written to {escape(str(path))}", highlight=False, soft_wrap=True)
    return 0


def _sweep(arguments: argparse.Namespace, assignment: Assignment, options: Options, timing: TimingSpec,
           console: Console) -> int:
    """Every case of each kernel timed: a table of them, the JSON, and where asked the assignment's sweep page."""
    from grader.timing.results import SubmissionTiming
    from grader.timing.run import time_submission

    page = sweep_page_named(timing.sweep_page)
    if arguments.with_timings and not page.takes_others:
        raise GraderError(f"--with draws another assignment's sweep on the density page; {assignment.name}'s page "
                          f"([timing] sweep_page = \"{page.name}\") draws this sweep alone")
    others = []
    for path in arguments.with_timings:  # read first: a wrong path costs no timing
        try:
            document = json.loads(path.read_text())
            others.append(SubmissionTiming.from_dict(document["student"]))
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise GraderError(f"--with {path}: not the JSON of `grader time --sweep` ({error})") from None
    student = time_submission(arguments.submission, assignment, options, timing, sweep=True)
    _show_sweep(page, student, others, assignment, timing, console,
                arguments.json or Path(f"timing-{assignment.name}.json"), arguments.sweep_html,
                f"{assignment.name}: {arguments.submission} (every swept case)")
    return 0


def _show_sweep(page: SweepPage, student: SubmissionTiming, others: list[SubmissionTiming], assignment: Assignment,
                timing: TimingSpec, console: Console, json_path: Path, html_path: Path | None, heading: str) -> None:
    """A sweep's timings shown: a table of every case, the page's notes, the speed-up points, the JSON, and where
    asked (`html_path`) the page, the `others`' sweeps drawn beside this one."""
    from rich.table import Table

    from grader.timing.points import award_words
    from grader.timing.spec import load_timing

    shown = Table(title=heading, title_justify="left")
    for column in ("kernel", "case", "median (µs)", "±", "peak extra (KiB)", "status"):
        shown.add_column(column)
    for timed in student.kernels:
        summary, peak = timed.summary, timed.peak_extra_bytes
        shown.add_row(timed.kernel, timed.case, f"{timed.median_us:,.1f}" if timed.median_us is not None else "–",
                      f"{summary.rse:.1%}" if summary is not None else "",
                      f"{peak / 1024:,.1f}" if peak is not None else "–", timed.message or timed.status.value)
    console.print(shown)
    parameter = timing.sweep_parameter
    for note in page.notes(student, assignment, timing):
        if note.flagged:
            console.print(f"[bold red]flagged:[/] {escape(note.words)}", soft_wrap=True)
        else:
            console.print(escape(note.words), highlight=False, soft_wrap=True)
    awards = _awards(student, assignment, timing, console)
    json_path.write_text(json.dumps({"student": student.to_dict(), "sweep": True,
                                     "speedup_points": [a.to_dict() for a in awards], "timing_spec": timing.where},
                                    indent=2))
    console.print(f"timings (JSON) written to {escape(str(json_path))}", highlight=False, soft_wrap=True)
    if html_path is None:
        return
    points, assignments = page.points(student, assignment, parameter), [assignment]
    for other in others:
        assignments.append(load_assignment(other.assignment))
        points += page.points(other, assignments[-1], load_timing(assignments[-1]).sweep_parameter)
    # One assignment: its title; with others beside it (the CPU and GPU halves), their names.
    title = assignment.title if len(assignments) == 1 else " and ".join(p.name for p in assignments)
    html_path.parent.mkdir(parents=True, exist_ok=True)
    html_path.write_text(render_page(page, points, title, timing, [award_words(a, parameter) for a in awards]),
                         encoding="utf-8")
    console.print(f"{page.written(parameter)} written to {escape(str(html_path))}", highlight=False, soft_wrap=True)


def _awards(student: SubmissionTiming, assignment: Assignment, timing: TimingSpec,
            console: Console) -> list[SpeedupAward]:
    """The assignment's speed-up points judged on these timings, each printed in words."""
    from grader.timing.points import award_words, speedup_awards

    awards = speedup_awards(timing.speedup_points, student, assignment, timing.sweep_parameter)
    for award in awards:
        console.print(f"points: {escape(award_words(award, timing.sweep_parameter))}", highlight=False,
                      soft_wrap=True)
    return awards


def _one_run_options(arguments: argparse.Namespace, assignment: Assignment, what: str, excluded: dict[str, bool],
                     doing: str) -> Options:
    """The options of a mode that is one run of its own (--ncu, --competition), once the submission is there, no
    option it ignores was given, and the machine has the kernels' device."""
    if not arguments.submission.exists():
        raise SubmissionError(f"submission {arguments.submission}: no such folder")
    if any(excluded.values()):
        names = list(excluded)
        raise GraderError(f"{what}: {', '.join(names[:-1])} and {names[-1]} do not apply to it")
    if reason := unavailable_reason(assignment.target, assignment.python_packages):
        raise GraderError(f"cannot {doing} on this machine: {reason}")
    return Options(cache_dir=arguments.cache_dir or default_cache_dir(), sandbox=arguments.sandbox,
                   jobs=arguments.jobs, cuda_arch=arguments.cuda_arch)


def _ncu(arguments: argparse.Namespace, assignment: Assignment, console: Console) -> int:
    """ncu's figures of the chosen variants beside kernels/'s: a table, the notes, the JSON."""
    from grader.ncu import measure_variants

    options = _one_run_options(arguments, assignment, "--ncu measures one call per kernel",
                               {"--sweep": arguments.sweep, "--against-reference": arguments.against_reference,
                                "--competition": arguments.competition},
                               f"measure {assignment.name}'s kernels under ncu")
    names = [k.strip() for k in arguments.kernels.split(",")] if arguments.kernels else None
    report = measure_variants(arguments.submission, assignment, options, names)
    if report.figures:
        console.print(f"{assignment.name}: {escape(str(arguments.submission))}, ncu's figures (reported, not scored)",
                      highlight=False, soft_wrap=True)
        console.print(escape(report.table()), highlight=False, soft_wrap=True)
    for note in report.notes:
        console.print(f"note: {escape(note)}", highlight=False, soft_wrap=True)
    path = arguments.json or Path(f"ncu-{assignment.name}.json")
    path.write_text(json.dumps(report.to_json(), indent=2))
    console.print(f"ncu's figures (JSON) written to {escape(str(path))}", highlight=False, soft_wrap=True)
    return 0 if report.figures else 1


def _competition(arguments: argparse.Namespace, assignment: Assignment, console: Console) -> int:
    """The competition's runs: a table of them, the geometric mean or why there is none, and the JSON."""
    from rich.table import Table

    from grader.competition.run import compete
    from grader.competition.spec import load_competition

    competition = load_competition(assignment)  # a broken [competition] table is said before anything is built
    options = _one_run_options(arguments, assignment, "--competition runs the assignment's run set",
                               {"--sweep": arguments.sweep, "--against-reference": arguments.against_reference,
                                "--kernels": bool(arguments.kernels)},
                               f"run {assignment.name}'s competition")
    result = compete(arguments.submission, assignment, options, competition, arguments.student)
    shown = Table(title=f"{assignment.name} competition: {arguments.submission} ({result.folder})",
                  title_justify="left")
    for column, justify in (("run", "left"), ("B", "right"), ("prompt", "right"), ("generate", "right"),
                            ("median s", "right"), ("RSE", "right"), ("tokens/s", "right"), ("gate", "left")):
        shown.add_column(column, justify=justify, overflow="fold")
    for run in result.runs:
        shown.add_row(run.name, str(run.B), str(run.prompt), str(run.generate),
                      f"{run.median_s:.4f}" if run.median_s is not None else "–",
                      f"{100 * run.rse:.1f}%" if run.rse is not None and run.median_s is not None else "",
                      f"{run.tokens_per_s:,.1f}" if run.tokens_per_s is not None else "–",
                      escape(run.message or run.status.value))
    console.print(shown)
    for note in result.notes:
        console.print(f"note: {escape(note)}", highlight=False, soft_wrap=True)
    console.print(("[bold green]entered:[/] " if result.entered else "[bold red]") + escape(result.words)
                  + ("" if result.entered else "[/]"), highlight=False, soft_wrap=True)
    path = arguments.json or Path(f"competition-{assignment.name}.json")
    path.write_text(json.dumps({"competition": result.to_dict(), "competition_spec": competition.where}, indent=2))
    console.print(f"competition (JSON) written to {escape(str(path))}", highlight=False, soft_wrap=True)
    return 0
