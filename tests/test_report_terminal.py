"""What `grader check` and `grader grade` print: compiler messages and paths whole and as written
(never read as markup), kernel names never cut, each failed case with its sizes and hints, and a
live line while a case runs."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from grader.cli import live as live_line
from grader.cli.live import LiveLine
from grader.options import Options
from grader.pipeline import grade
from grader.report import terminal
from grader.report.hints import case_hints, kernel_hints
from grader.report.render import sizes
from grader.results import Result
from grader.runner import Call
from grader.samples import compose, variants
from grader.assignment import PROJECT_ROOT, load_assignment

# The line the compiler quotes, with the square brackets that rich's markup would eat.
SOURCE_LINE = "const float old_scale = std::exp(m[row] - m_new);"
LONG_FOLDER = "a-student-repository-with-a-rather-long-name-that-no-table-cell-holds"


def run_grader(*arguments: str, columns: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "COLUMNS": str(columns)}
    return subprocess.run([sys.executable, "-m", "grader", *arguments], capture_output=True, text=True, env=env,
                          timeout=300)


@pytest.fixture(scope="module")
def broken_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference with `m_new` renamed where it is declared: its uses no longer compile."""
    folder = compose(load_assignment("flash-attention-cpu"), None, tmp_path_factory.mktemp("sub") / LONG_FOLDER)
    source = folder / "src" / "flash_attention.cpp"
    text = source.read_text()
    assert SOURCE_LINE in text
    source.write_text(text.replace("const float m_new = ", "const float m_nw = ", 1))
    return folder


@pytest.mark.parametrize("columns", [60, 80])
def test_a_compile_error_prints_the_source_and_every_path_whole(broken_build: Path, cache_dir: Path,
                                                                 tmp_path: Path, columns: int) -> None:
    saved = tmp_path / "r.json"
    checked = run_grader("check", str(broken_build), "--cache-dir", str(cache_dir), "--json", str(saved),
                         columns=columns)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    out = checked.stdout
    message = next(k for k in json.loads(saved.read_text())["kernels"] if k["name"] == "flash_attention")["message"]
    assert SOURCE_LINE in out  # the brackets as the source has them
    for line in message.splitlines():  # the compiler's message, each line whole and as it wrote it
        assert line in out.splitlines(), line
    where = message.split(": error")[0]  # src/flash_attention.cpp:64:59
    assert where.startswith("src/flash_attention.cpp:") and any(line.startswith(where) for line in out.splitlines())
    assert str(broken_build) in out  # the submission's path, one piece on one line
    hint = kernel_hints(Result.from_json(saved.read_text()).kernels[1])[0]
    assert " ".join(hint.split()) in " ".join(out.split())
    assert "…" not in out


def test_text_from_the_submission_is_never_read_as_markup(broken_build: Path, cache_dir: Path) -> None:
    result = grade(broken_build, load_assignment("flash-attention-cpu"), Options(cache_dir=cache_dir, public_only=True))
    tricky = "[bold]not bold[/bold] m[row][col] [/] [link=x]y[/link]"
    kernel = dataclasses.replace(result.kernels[1], message=tricky, log=tricky)
    submission = dataclasses.replace(result.submission, path="/srv/[red]ada[/red]")
    console = Console(record=True, width=80, file=io.StringIO())
    terminal.render(dataclasses.replace(result, kernels=[result.kernels[0], kernel], submission=submission),
                    console, verbose=True)
    printed = console.export_text()
    assert printed.count(tricky) == 2 and "/srv/[red]ada[/red]" in printed


@pytest.mark.parametrize("columns", [60, 80])
def test_long_kernel_names_are_never_cut(broken_build: Path, cache_dir: Path, columns: int) -> None:
    result = grade(broken_build, load_assignment("flash-attention-cpu"), Options(cache_dir=cache_dir, public_only=True))
    names = ["req_0/standard_attention_with_a_long_name", "req_0/flash_attention_tiled_and_online_softmax"]
    kernels = [dataclasses.replace(k, name=n) for k, n in zip(result.kernels, names)]
    console = Console(record=True, width=columns, file=io.StringIO())
    terminal.render(dataclasses.replace(result, kernels=kernels), console)
    printed = console.export_text()
    for name in names:
        assert name in printed
    assert "…" not in printed
    # A table that would not fit is not drawn, so that none of its borders is cut either.
    assert max((len(line) for line in printed.splitlines() if "─" in line or "│" in line), default=0) <= columns


def test_a_short_name_keeps_the_table_at_80_columns(broken_build: Path, cache_dir: Path) -> None:
    result = grade(broken_build, load_assignment("flash-attention-cpu"), Options(cache_dir=cache_dir, public_only=True))
    console = Console(record=True, width=80, file=io.StringIO())
    terminal.render(result, console)
    rows = [line for line in console.export_text().splitlines() if line.startswith("│")]
    assert [row.split("│")[1].strip() for row in rows] == ["standard_attention", "flash_attention"]


def test_each_failed_case_shows_its_sizes_and_its_hint(tmp_path: Path, cache_dir: Path) -> None:
    flash = load_assignment("flash-attention-cpu")
    sample = next(v for v in variants(flash) if v.name == "mutant-flash-partial-tile-dropped")
    saved = tmp_path / "r.json"
    checked = run_grader("check", str(compose(flash, sample, tmp_path / "sub")), "--cache-dir", str(cache_dir),
                         "--json", str(saved), columns=80)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    flat = " ".join(checked.stdout.split())
    kernel = next(k for k in Result.from_json(saved.read_text()).kernels if k.name == "flash_attention")
    failed = [c for c in kernel.cases if not c.passed]
    assert failed and any(case_hints(c) for c in failed)
    for case in failed:
        assert f"{case.name} ({sizes(case)})" in flat and " ".join(case.message.split()) in flat
        for hint in case_hints(case):
            assert " ".join(hint.split()) in flat
    # The same words the Markdown report has for this case.
    assert "one-row (N=1, d=16, Br=4, Bc=4)" in flat and "Every wrong element is exactly 0" in flat


# ---------------------------------------------------------------- the live line


def calls_of(kernel_name: str) -> list[Call]:
    kernel = next(k for k in load_assignment("flash-attention-cpu").kernels if k.name == kernel_name)
    return [Call(kernel, case, Path("/nonexistent"), Path("/nonexistent"), Path("/nonexistent")) for case in kernel.cases]


def test_the_live_line_names_each_running_case_until_it_ends() -> None:
    line = LiveLine(Console(file=io.StringIO()), "checking")
    assert "compiling" in line.lines()[0]
    flash, standard = calls_of("flash_attention")[0], calls_of("standard_attention")[1]
    line.on_case(flash, True)
    line.on_case(standard, True)
    now = line.lines(time.monotonic() + 12)
    assert len(now) == 2 and "flash_attention / one-row running 12 s (limit 20 s;" in now[0]
    assert "standard_attention / odd-sizes" in now[1]
    line.on_case(flash, False)
    assert [l for l in line.lines() if "flash_attention" in l] == []
    line.on_case(standard, False)
    assert "comparing" in line.lines()[0]


def test_on_a_terminal_the_live_line_is_drawn_on_its_console() -> None:
    out = io.StringIO()
    with LiveLine(Console(file=out, force_terminal=True, width=120), "checking") as line:
        line.on_case(calls_of("flash_attention")[1], True)
        time.sleep(0.6)
    assert "flash_attention / odd-sizes running" in out.getvalue()


def test_a_looping_kernel_is_named_in_a_log_while_it_runs(tmp_path: Path, cache_dir: Path, flash,
                                                          monkeypatch) -> None:
    """In a pipe, a plain line every PLAIN_EVERY_S (30 s; shortened here) names the case that runs."""
    monkeypatch.setattr(live_line, "PLAIN_EVERY_S", 0.5)
    sample = next(v for v in variants(flash) if v.name == "hostile-flash-infinite-loop")
    told: list[tuple[str, str, bool]] = []
    out = io.StringIO()
    with LiveLine(Console(file=out, width=200), "checking") as line:
        def on_case(call: Call, running: bool) -> None:
            told.append((call.kernel.name, call.case.name, running))
            line.on_case(call, running)

        result = grade(compose(flash, sample, tmp_path / "loop"), flash,
                       Options(cache_dir=cache_dir, public_only=True), on_case)
    assert next(k for k in result.kernels if k.name == "flash_attention").status == "timeout"
    assert "checking: flash_attention / one-row running" in out.getvalue()
    assert "(limit 3 s;" in out.getvalue()
    # Every case that started is told as ended, a timed-out one too (its harness sends no end event).
    for kernel in ("standard_attention", "flash_attention"):
        mine = [(case, running) for k, case, running in told if k == kernel]
        assert mine and mine[::2] == [(c, True) for c, _ in mine[::2]] and mine[1::2] == [(c, False) for c, _ in mine[::2]]


def test_in_a_pipe_the_live_line_is_at_most_a_plain_line_every_30_s(cache_dir: Path) -> None:
    started = time.monotonic()
    checked = run_grader("check", str(load_assignment("flash-attention-cpu").reference_dir), "--cache-dir",
                         str(cache_dir), columns=80)
    took = time.monotonic() - started
    assert checked.returncode == 0, checked.stdout + checked.stderr
    lines = checked.stderr.splitlines()  # none for a quick check; a slow machine may see one each 30 s
    assert len(lines) <= took // live_line.PLAIN_EVERY_S, checked.stderr
    assert all(line.startswith("checking: ") for line in lines), checked.stderr
