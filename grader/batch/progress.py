"""A batch's progress as it happens: counts per outcome, an honest ETA, the repository it waits on,
and the summary at the end. Display only: the results it is shown are already scored and saved.

On a terminal a rich progress bar; anywhere else (a log file, a pipe) plain lines that are never
cut: one per result, and a progress line every few results and whenever a fetch is stuck.
"""

from __future__ import annotations

import datetime
import threading
import time
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from grader.batch.summary import OUTCOMES, ClassSummary, outcome
from grader.dispatch import Job, Running
from grader.results import Result

STUCK_S = 10.0  # a fetch running this long is named on the progress line
LONG_RUN_S = 30.0  # a submission running this long on a slot may be one that runs to its time limits
PLAIN_EVERY_S = 15.0  # plain layout: a progress line at least this often while something is stuck


# What the fetcher is waiting on: (student, repository, seconds so far) of the longest fetch in flight.
Waiting = Callable[[], "tuple[str, str, float] | None"]


def eta_seconds(total: int | None, done: int, graded_at: list[float], at_least: float = 0.0) -> float | None:
    """Seconds left, from the pace of graded submissions after the first, and never below `at_least`.

    The first graded result comes after the gold and the first builds, so its time says nothing
    about the pace; quick outcomes (a repository not submitted) are not a pace either. None until
    two submissions have been graded. `at_least`: what a stuck fetch may still take before its
    time limit stops it (the batch cannot end before that).
    """
    if total is None or len(graded_at) < 2:
        return None
    pace = (graded_at[-1] - graded_at[0]) / (len(graded_at) - 1)
    return max(0.0, (total - done) * pace, at_least)


def _clock(seconds: float) -> str:
    return str(datetime.timedelta(seconds=int(seconds)))


class Tally:
    """Counts per outcome, the progress display, and the end-of-batch summary."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.counts = {o: 0 for o in OUTCOMES}
        self.total: int | None = None
        self.done = 0
        self.graded_at: list[float] = []  # monotonic times of graded results
        self.started = time.monotonic()
        self.waiting: Waiting = lambda: None
        self.fetch_limit_s: float | None = None  # a fetch's time limit: the ETA counts what a stuck one may take
        # The executor's submissions on a run slot now: the ETA says when long ones' time limits end.
        self.running: Callable[[], list[Running]] = lambda: []
        self._lock = threading.Lock()
        self._progress: Progress | None = None
        self._task = None
        self._plain_every = 1
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()

    # ------------------------------------------------------------------ display

    def progress(self, total: int | None, what: str) -> Tally:
        """Use as `with tally.progress(n, "grading"):`; a bar on a terminal, plain lines elsewhere."""
        self.total, self.what = total, what
        self.started = time.monotonic()
        if self.console.is_terminal:
            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TextColumn("{task.fields[counts]}"), TimeElapsedColumn(), _EtaColumn(self),
                                      _WaitingColumn(self), console=self.console, transient=False)
            self._task = self._progress.add_task(what, total=total, counts="")
        else:
            self._plain_every = max(1, (total or 0) // 20)
        return self

    def __enter__(self) -> Tally:
        if self._progress is not None:
            self._progress.start()
        else:
            self._stop.clear()
            self._ticker = threading.Thread(target=self._tick, daemon=True, name="kg-progress")
            self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        else:
            self._stop.set()
            if self._ticker is not None:
                self._ticker.join()

    def _tick(self) -> None:
        quiet_since = time.monotonic()
        while not self._stop.wait(PLAIN_EVERY_S):
            waiting = self.waiting()
            stuck = waiting is not None and waiting[2] >= STUCK_S
            # Long runs and no result for LONG_RUN_S (a tail of looping submissions): say so that often.
            quiet = time.monotonic() - max(self.graded_at[-1] if self.graded_at else 0.0, quiet_since) >= LONG_RUN_S
            if stuck or (quiet and self.long_runs_text()):
                self.console.print(self.status_line(), highlight=False, markup=False, soft_wrap=True)
                quiet_since = time.monotonic()

    def describe(self, what: str) -> None:
        self.what = what
        if self._progress is not None:
            self._progress.update(self._task, description=what)

    def status_line(self) -> str:
        """The whole progress as one line of text (the plain layout's progress line)."""
        counts = " ".join(f"{k} {v}" for k, v in self.counts.items() if v)
        total = f"/{self.total}" if self.total is not None else ""
        parts = [f"{self.what} {self.done}{total}" + (f" ({counts})" if counts else ""),
                 f"elapsed {_clock(time.monotonic() - self.started)}", self.eta_text()]
        waiting = self.waiting_text()
        if waiting:
            parts.append(waiting)
        return "progress: " + "; ".join(parts)

    def eta_text(self) -> str:
        return self._eta_text() + self.long_runs_text()

    def _eta_text(self) -> str:
        stuck = self.stuck_for()
        eta = eta_seconds(self.total, self.done, self.graded_at, stuck)
        if eta is not None:
            return f"ETA {_clock(eta)}" + (" (a stuck fetch may take that long)" if stuck and eta == stuck else "")
        if stuck:  # no pace yet, but the batch cannot end before the stuck fetch's limit stops it
            return f"ETA at least {_clock(stuck)} (a stuck fetch's time limit)"
        return "ETA after the first graded submissions (gold, builds)" if self.total else "ETA -"

    def long_runs_text(self) -> str:
        """Submissions running long now (kernels that loop until their time limits, as a rule): the pace of
        the results so far can't foresee them, so say how many and when their limits end at the latest."""
        long = [(student, ran, limit) for student, ran, limit in self.running() if ran >= LONG_RUN_S]
        if not long:
            return ""
        latest = max(max(0.0, limit - ran) for _, ran, limit in long)
        return (f" ({len(long)} running over {LONG_RUN_S:.0f} s, e.g. {long[0][0]}: their time limits end within "
                f"{_clock(latest)})")

    def stuck_for(self) -> float:
        """The most a stuck fetch may still take before its time limit stops it (0 if none is stuck)."""
        waiting = self.waiting()
        if waiting is None or waiting[2] < STUCK_S or self.fetch_limit_s is None:
            return 0.0
        return max(0.0, self.fetch_limit_s - waiting[2])

    def waiting_text(self) -> str:
        waiting = self.waiting()
        if waiting is None or waiting[2] < STUCK_S:
            return ""
        student, repository, seconds = waiting
        return f"waiting {seconds:.0f} s on {student}'s repository {repository}"

    # ------------------------------------------------------------------ results

    def record(self, job: Job, result: Result) -> None:
        """Count a saved result and show its line; thread-safe."""
        kind = outcome(result)
        late = f", {result.late.days_late:g} day(s) late, -{result.late.points_deducted:g}" \
            if result.late and result.late.days_late else ""
        line = (f"{job.student}: {kind} {result.score:.4g}/{result.max_score:g}{late}"
                f" ({(result.submission.commit or '')[:10] or job.pinned_by or '-'})")
        if not result.status.was_graded:
            line += f": {result.message.splitlines()[0] if result.message else ''}"
        with self._lock:
            self.counts[kind] += 1
            self.done += 1
            if result.status.was_graded:
                self.graded_at.append(time.monotonic())
            if self._progress is not None:
                self._progress.console.print(line, highlight=False, markup=False)
                self._progress.update(self._task, advance=1,
                                      counts=" ".join(f"{k} {v}" for k, v in self.counts.items() if v))
            else:
                self.console.print(line, highlight=False, markup=False, soft_wrap=True)
                if self.total is not None and (self.done % self._plain_every == 0 or self.done == self.total):
                    self.console.print(self.status_line(), highlight=False, markup=False, soft_wrap=True)

    def show_summary(self, summary: ClassSummary, store: Path) -> None:
        """The end-of-batch table: students per outcome, rejected roster rows, the mean, the slowest."""
        self.console.print(f"{summary.assignment}: {summary.students} student(s) in {store}", highlight=False,
                           soft_wrap=True)
        table = Table()
        table.add_column("outcome", no_wrap=True)
        table.add_column("students", justify="right")
        for name, count in summary.counts.items():
            table.add_row(str(name), str(count))
        if summary.rejected:
            table.add_row("roster rows rejected", str(summary.rejected))
        if summary.mean_score is not None:
            table.add_row("mean score (graded)", f"{summary.mean_score:.2f}/{summary.max_score:g}", end_section=True)
        self.console.print(table)
        if summary.slowest:
            self.console.print("slowest: " + ", ".join(f"{student} {seconds:.1f} s"
                                                       for student, seconds in summary.slowest), soft_wrap=True)
        for student, words in summary.later:  # a fix pushed after the deadline is never dropped without a word
            self.console.print(f"late commit not graded: {student}: {words}", soft_wrap=True, highlight=False,
                               markup=False)
        if summary.unwritten:  # the written part is graded by hand: its TA must know whose report is missing
            self.console.print(f"written report not collected for {len(summary.unwritten)} student(s):",
                               soft_wrap=True, highlight=False)
            for student, words in summary.unwritten:
                self.console.print(f"  {student}: {words}", soft_wrap=True, highlight=False, markup=False)


class _EtaColumn(ProgressColumn):
    def __init__(self, tally: Tally) -> None:
        super().__init__()
        self.tally = tally

    def render(self, task) -> Text:
        return Text(self.tally.eta_text(), style="progress.remaining")


class _WaitingColumn(ProgressColumn):
    def __init__(self, tally: Tally) -> None:
        super().__init__()
        self.tally = tally

    def render(self, task) -> Text:
        return Text(self.tally.waiting_text(), style="yellow")
