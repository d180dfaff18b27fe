"""The `grader` command: one module per subcommand, each adding its parser and its `run`."""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType

from rich.console import Console
from rich.markup import escape

from grader import __version__
from grader.errors import GraderError

# Each command's module (its parser and its `run`). Only the command given is imported: a student's `grader
# check` need not load batch grading's fetch, store and Slurm modules. `grader --help` imports them all.
COMMAND_MODULES = {"grade": "grader.cli.grade", "check": "grader.cli.check", "list": "grader.cli.listing",
                   "demo": "grader.cli.demo", "report": "grader.cli.report", "export": "grader.cli.export",
                   "batch": "grader.cli.batch", "time": "grader.cli.time", "rubric": "grader.cli.rubric",
                   "similarity": "grader.cli.similarity", "claims": "grader.cli.claims",
                   "audit": "grader.cli.audit"}


def command_modules(names: list[str] | None = None) -> list[ModuleType]:
    """The modules of these commands (default: every command), in the help's order."""
    return [importlib.import_module(COMMAND_MODULES[name]) for name in names or COMMAND_MODULES]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    given = next((word for word in argv if not word.startswith("-")), None)
    parser = argparse.ArgumentParser(prog="grader", description="Grade GPU programming assignments.")
    parser.add_argument("--version", action="version", version=f"kernel-grader {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in command_modules([given] if given in COMMAND_MODULES else None):
        command.add_parser(commands)
    arguments = parser.parse_args(argv)
    try:
        return arguments.run(arguments)
    except GraderError as error:
        # Never wrapped: a path in the message must stay one piece to be copied.
        Console(stderr=True).print(f"[red]error:[/] {escape(str(error))}", highlight=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
