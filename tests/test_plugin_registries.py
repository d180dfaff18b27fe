"""A sweep page and a report format are plug-ins: one module each, written outside grader/ (here in tmp_path),
registered by name, and every command that offers pages or formats finds them without a line of grader/ changed."""

from __future__ import annotations

import argparse
import shutil
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import grader.report.formats as formats
import grader.sweeps as sweeps
from grader.boundary.timing_statistics import Summary
from grader.cli import main
from grader.cli.options import add_report_options, write_reports
from grader.errors import SpecError
from grader.report.formats import REPORT, ReportFormat, register_format
from grader.report.render import number
from grader.assignment import PROJECT_ROOT, load_assignment
from grader.status import TimingStatus
from grader.sweeps import register_sweep_page
from grader.timing.results import KernelTiming, SubmissionTiming
from grader.timing.spec import load_timing, parse_timing

from test_store import result as small_result

# A course's page: each timed case and its time (through a filter every report has), and a line the command prints.
PAGE_MODULE = '''
from dataclasses import dataclass
from pathlib import Path

from grader.sweeps import SweepNote


@dataclass(frozen=True)
class TallyPage:
    name: str = "tally"
    template: str = "tally.html.j2"
    template_folder: Path = Path(__file__).parent
    takes_others: bool = False

    def points(self, timing, assignment, parameter):
        return [(t.kernel, t.case, t.median_us) for t in timing.kernels if t.median_us is not None]

    def notes(self, timing, assignment, spec):
        return [SweepNote(f"tally: {len(timing.kernels)} cases timed against {spec.sweep_parameter}")]

    def context(self, points, title, spec, award_words):
        return {"title": title, "points": points, "award_words": award_words}

    def written(self, parameter):
        return f"the tally against {parameter} (HTML)"


PAGE = TallyPage()
'''
PAGE_TEMPLATE = '''<h1>{{ title }}</h1>
{% for kernel, case, us in points %}<p class="point">{{ kernel }} {{ case }}: {{ us | num }} µs</p>
{% endfor %}{% for words in award_words %}<p class="award">{{ words }}</p>
{% endfor %}'''
# A course's format: a one-line tally of a result.
FORMAT_MODULE = '''
def render(result):
    return f"{result.student}: {result.score:g} of {result.max_score:g} ({len(result.kernels)} kernels)\\n"


def write(result, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(result))
'''


@pytest.fixture
def registries(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """The course's modules importable from tmp_path; the registries and the imported modules as they were once the
    test ends."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "course_tally_page.py").write_text(textwrap.dedent(PAGE_MODULE))
    (plugins / "tally.html.j2").write_text(PAGE_TEMPLATE)
    (plugins / "course_tally_format.py").write_text(textwrap.dedent(FORMAT_MODULE))
    monkeypatch.syspath_prepend(str(plugins))
    monkeypatch.setattr(sweeps, "_MODULES", dict(sweeps._MODULES))
    monkeypatch.setattr(formats, "_FORMATS", dict(formats._FORMATS))
    yield plugins
    for name in ("course_tally_page", "course_tally_format"):
        sys.modules.pop(name, None)


def test_a_sweep_page_from_outside_the_grader_is_drawn_by_grader_time(registries: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    import grader.cli.time as time_command
    import grader.timing.run as timing_run

    with pytest.raises(SpecError, match="'sweep_page' must be one of density, matmul, found 'tally'"):
        parse_timing({"sweep_page": "tally"}, "t [timing]")
    register_sweep_page("tally", "course_tally_page")
    assert parse_timing({"sweep_page": "tally"}, "t [timing]").sweep_page == "tally"
    folder = tmp_path / "packs" / "tiled-matmul"
    shutil.copytree(PROJECT_ROOT / "assignments" / "tiled-matmul", folder)
    spec = (folder / "assignment.toml").read_text()
    assert 'sweep_page = "matmul"' in spec
    (folder / "assignment.toml").write_text(spec.replace('sweep_page = "matmul"', 'sweep_page = "tally"'))
    pack = load_assignment(str(folder))
    assert load_timing(pack).sweep_page == "tally"
    # Every sweep case timed at a made-up speed (its N in µs), through the command's own path from there on.
    timings = tuple(KernelTiming(k.name, k.name, None, c.name, TimingStatus.TIMED,
                                 summary=Summary(5, *[float(c.params["N"])] * 4, 0.0, 0.0, "rse"))
                    for k in pack.kernels for c in k.sweep_cases)
    assert len(timings) >= 3
    monkeypatch.setattr(time_command, "unavailable_reason", lambda *_: None)
    monkeypatch.setattr(timing_run, "time_submission", lambda *_, **__: SubmissionTiming("hand-made", pack.name,
                                                                                         timings))
    page = tmp_path / "out" / "tally.html"
    assert main(["time", str(pack.reference_dir), "-a", str(folder), "--sweep", "--json", str(tmp_path / "t.json"),
                 "--sweep-html", str(page)]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert f"tally: {len(timings)} cases timed against N" in said
    assert f"the tally against N (HTML) written to {page}" in said
    html = page.read_text()
    assert html.startswith(f"<h1>{pack.title}</h1>")
    assert html.count('<p class="point">') == len(timings)
    for timed in timings:
        assert f"{timed.kernel} {timed.case}: {number(timed.median_us)} µs" in html
    assert html.count('<p class="award">') == len(load_timing(pack).speedup_points)


def test_a_report_format_from_outside_the_grader_is_offered_by_every_command(registries: Path,
                                                                              tmp_path: Path) -> None:
    register_format(ReportFormat("tally", "course_tally_format", "tally", "write a one-line tally",
                                 "one result (a `--json` file) as a one-line tally", REPORT, ".txt"))
    result = small_result("ada")
    expected = f"ada: {result.score:g} of {result.max_score:g} ({len(result.kernels)} kernels)\n"
    saved = tmp_path / "r.json"
    saved.write_text(result.to_json())
    # `grader report tally`, for one result and for a class's list (a folder, one file a student).
    assert main(["report", "tally", str(saved), "--out", str(tmp_path / "one.txt")]) == 0
    assert (tmp_path / "one.txt").read_text() == expected
    listing = tmp_path / "class.json"
    listing.write_text("[" + ",".join(small_result(s).to_json() for s in ("ada", "bo")) + "]")
    assert main(["report", "tally", str(listing), "--out", str(tmp_path / "class")]) == 0
    assert sorted(p.name for p in (tmp_path / "class").iterdir()) == ["ada.txt", "bo.txt"]
    assert (tmp_path / "class" / "bo.txt").read_text().startswith("bo: ")
    # `grade` and `check`: the option --tally beside --html, written with the others.
    parser = argparse.ArgumentParser()
    add_report_options(parser)
    arguments = parser.parse_args(["--tally", str(tmp_path / "graded.txt"), "--markdown", str(tmp_path / "r.md")])
    written = write_reports(result, arguments)
    assert [what for what, _ in written] == ["Markdown report", "tally"]
    assert (tmp_path / "graded.txt").read_text() == expected and (tmp_path / "r.md").read_text() != ""
    # Not an export: `grader export tally` is no command.
    with pytest.raises(SystemExit):
        main(["export", "tally", str(saved), "--out", str(tmp_path / "x.txt")])


def test_the_sweep_page_option_is_one_option_under_its_name_and_its_older_one(tmp_path: Path) -> None:
    import grader.cli.time as time_command

    parser = argparse.ArgumentParser()
    time_command.add_parser(parser.add_subparsers())
    for spelling in ("--sweep-html", "--density-html"):
        arguments = parser.parse_args(["time", "repo", "-a", "x", "--sweep", spelling, str(tmp_path / "p.html")])
        assert arguments.sweep_html == tmp_path / "p.html" and "density_html" not in vars(arguments)
    (option,) = [a for a in parser._subparsers._group_actions[0].choices["time"]._actions if a.dest == "sweep_html"]
    assert option.option_strings == ["--sweep-html", "--density-html"]
