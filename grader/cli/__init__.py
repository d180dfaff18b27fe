"""The `grader` command: one module per subcommand, each adding its parser and its `run`."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.markup import escape

from grader import __version__
from grader.cli import batch, check, demo, export, grade, listing, report, time
from grader.errors import GraderError

COMMANDS = (grade, check, listing, demo, report, export, batch, time)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="grader", description="Grade GPU programming assignments.")
    parser.add_argument("--version", action="version", version=f"kernel-grader {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
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
