"""While one submission is graded (`grader check`, `grader grade`): which kernel's case runs now, and
for how long, so that a looping kernel is not silence until its time limit.

On a terminal a line on stderr, redrawn a few times a second and gone when the grade ends. Anywhere
else (a pipe, a CI log) nothing, unless a grade goes on for `PLAIN_EVERY_S`: then one plain line
that often, saying what runs.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from grader.runner import Call

PLAIN_EVERY_S = 30.0  # in a log: at most one line this often


@dataclass(frozen=True)
class Running:
    kernel: str
    case: str
    since: float  # time.monotonic() when it started
    limit_s: float  # its time limit


class LiveLine:
    """`with LiveLine(console, what) as live: grade(..., on_case=live.on_case)`."""

    def __init__(self, console: Console, what: str) -> None:
        self.console = console  # stderr's
        self.what = what
        self.started = time.monotonic()
        self._running: dict[str, Running] = {}  # by kernel: kernels may run side by side
        self._lock = threading.Lock()
        self._live: Live | None = None
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()
        self._spinner = Spinner("dots", style="cyan")
        self._any_started = False

    def __enter__(self) -> LiveLine:
        self.started = time.monotonic()
        if self.console.is_terminal:
            self._live = Live(console=self.console, get_renderable=self._renderable, refresh_per_second=4,
                              transient=True, redirect_stdout=False, redirect_stderr=False)
            self._live.start()
        else:
            self._ticker = threading.Thread(target=self._plain_lines, name="kg-live-line", daemon=True)
            self._ticker.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._live is not None:
            self._live.stop()
        if self._ticker is not None:
            self._ticker.join()

    def on_case(self, call: Call, running: bool) -> None:
        """The runner's hook (`grader.runner.CaseWatcher`): called from the harnesses' threads."""
        with self._lock:
            if running:
                self._any_started = True
                self._running[call.kernel.name] = Running(call.kernel.name, call.case.name, time.monotonic(),
                                                          call.kernel.time_limit_s)
            elif (now := self._running.get(call.kernel.name)) is not None and now.case == call.case.name:
                del self._running[call.kernel.name]

    def lines(self, now: float | None = None) -> list[str]:
        """What runs, in words: one line per kernel running, or what the grade is doing before any runs."""
        now = time.monotonic() if now is None else now
        with self._lock:
            running = sorted(self._running.values(), key=lambda r: r.since)
            started = self._any_started
        total = f"{now - self.started:.0f} s in all"
        if not running:
            doing = "starting a harness or comparing outputs" if started else "compiling and preparing the cases"
            return [f"{self.what}: {doing} ({total})"]
        return [f"{self.what}: {r.kernel} / {r.case} running {now - r.since:.0f} s (limit {r.limit_s:g} s; {total})"
                for r in running]

    def _renderable(self) -> Spinner:
        self._spinner.update(text=Text("\n".join(self.lines())))  # Text: nothing in it is read as markup
        return self._spinner

    def _plain_lines(self) -> None:
        while not self._stop.wait(PLAIN_EVERY_S):
            for line in self.lines():
                self.console.print(Text(line), soft_wrap=True, highlight=False)
