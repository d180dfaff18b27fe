"""The command line says what each option does, in the README's words, and reads a result file the
same way in every command: `RESULT` or `--result RESULT`."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

import pytest

from grader.batch.roster import POSITIONAL
from grader.cli import command_modules, main
from grader.assignment import PROJECT_ROOT

from test_store import result as small_result


def command_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grader")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in command_modules():
        command.add_parser(commands)
    return parser


def every_action(parser: argparse.ArgumentParser, path: str = "grader"):
    """(command path, action) for every argument of every command and subcommand, and each subcommand itself."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helped = {choice.dest: choice for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield f"{path} {name}", helped.get(name)
                yield from every_action(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction):
            yield path, action


def parser_of(*path: str) -> argparse.ArgumentParser:
    parser = command_parser()
    for name in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return parser


def help_of(parser: argparse.ArgumentParser, flag: str) -> str:
    return next(a.help for a in parser._actions if flag in a.option_strings)


def test_every_option_and_command_has_help() -> None:
    missing = [f"{path}: {'/'.join(action.option_strings) or action.dest}" if action else f"{path} (the command)"
               for path, action in every_action(command_parser())
               if action is None or not action.help or action.help == argparse.SUPPRESS]
    assert missing == []
    assert len(list(every_action(command_parser()))) > 100  # the walk reached every subcommand


def test_late_options_say_what_the_readme_says() -> None:
    readme = (PROJECT_ROOT / "README.md").read_text()
    said = dict(re.findall(r"^\s+\w+ = [\d.]+\s+# (--[\w-]+): (.+)$", readme, flags=re.MULTILINE))
    batch = parser_of("batch")
    flags = ("--grace-days", "--penalty-per-day", "--late-cap", "--max-late-days")
    assert set(said) == set(flags)
    for flag in flags:
        assert help_of(batch, flag) == said[flag], flag
    assert "max score" in help_of(batch, "--penalty-per-day")


def test_batch_help_names_every_roster_column() -> None:
    roster_help = next(a.help for a in parser_of("batch")._actions if a.dest == "roster")
    assert re.sub(r"[\[\]]", "", roster_help).startswith("CSV: " + ",".join(POSITIONAL))


@pytest.mark.parametrize("command, out", [
    (["export", "junit"], "junit.xml"),
    (["export", "gradescope-results"], "results.json"),
    (["report", "html"], "r.html"),
    (["report", "markdown"], "r.md"),
])
def test_a_result_file_is_read_as_result_or_as_the_result_option(tmp_path: Path, command: list[str],
                                                                 out: str) -> None:
    result = tmp_path / "r.json"
    result.write_text(dataclasses.replace(small_result("ada"), seed={"mode": "public", "fingerprint": "0"}).to_json())
    positional, option = tmp_path / "positional" / out, tmp_path / "option" / out
    positional.parent.mkdir()
    option.parent.mkdir()
    assert main([*command, str(result), "--out", str(positional)]) == 0
    assert main([*command, "--result", str(result), "--out", str(option)]) == 0
    assert positional.read_text() == option.read_text() != ""
    assert main([*command, str(result), "--result", str(result), "--out", str(option)]) == 0  # the same file twice
    other = tmp_path / "other.json"
    assert main([*command, str(result), "--result", str(other), "--out", str(option)]) == 2
    assert main([*command, "--out", str(option)]) == 2
