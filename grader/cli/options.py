"""Options that `grade`, `check` and `demo` share, and turning them into pipeline Options."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from grader.cases import read_secret
from grader.options import Options, default_cache_dir
from grader.sandbox import SANDBOX_NAMES


def add_grading_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kernels", help="comma-separated kernel names to grade (default: all); a variant's name "
                                          "(req_0) picks all of its kernels, req_0/matmul one of them")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="builds, inputs and gold outputs (default: $KERNEL_GRADER_CACHE or ~/.cache/kernel-grader)")
    parser.add_argument("--sandbox", default="local", choices=SANDBOX_NAMES,
                        help="where student code runs: local (namespaces, bubblewrap), docker (the ci/Dockerfile "
                             "image), process (no isolation) (default: local; see docs/sandbox.md)")
    parser.add_argument("--sanitizer", action=argparse.BooleanOptionalAction, default=None,
                        help="compute-sanitizer on one small case per CUDA kernel, as the spec asks "
                             "(default: on for `grade`, off for `check`)")
    parser.add_argument("--jobs", type=int, default=None, help="parallel compiles (default: all cores)")
    parser.add_argument("--harnesses", type=_at_least_one, default=None, metavar="N",
                        help="kernel harnesses run at once, each in its own sandbox; the compute-sanitizer's runs "
                             "share them (default: $KERNEL_GRADER_HARNESSES, else one per kernel, at most half "
                             "the cores)")
    parser.add_argument("--cuda-arch", default=None, help="e.g. sm_90 (default: GPU 0's, else sm_90)")
    parser.add_argument("--json", type=Path, default=None, help="write the result as JSON to this file")
    parser.add_argument("--verbose", "-v", action="store_true", help="also print what each kernel printed (the end of its stdout and stderr)")


def options_from(arguments: argparse.Namespace, public_only: bool) -> Options:
    secret = None if public_only else read_secret(getattr(arguments, "secret_file", None))
    return Options(
        cache_dir=arguments.cache_dir or default_cache_dir(),
        public_only=public_only,
        secret=secret,
        sandbox=arguments.sandbox,
        kernels=tuple(k.strip() for k in arguments.kernels.split(",")) if arguments.kernels else (),
        jobs=arguments.jobs,
        cuda_arch=arguments.cuda_arch,
        sanitizer=arguments.sanitizer if getattr(arguments, "sanitizer", None) is not None else not public_only,
        upload=getattr(arguments, "upload", False),  # `grade --upload` only
        harnesses=arguments.harnesses,
    )


def exposure_warning(options: Options) -> str | None:
    """What `process` cannot keep from student code when the grader is not root, in words; None where nothing.

    As root, `process` runs each harness (and its compiler) as a uid of its own that cannot open the
    gold cache or a secret file of mode 0600. As any other user there is no such uid to drop to.
    """
    if options.sandbox != "process" or os.geteuid() == 0:
        return None
    hidden = "the secret file and " if options.secret is not None else ""
    return (f"--sandbox process as a user other than root: student code runs as your own user and can read "
            f"{hidden}the gold outputs in {options.cache_dir}, so hidden cases are not secret; use --sandbox local "
            "or docker (docs/sandbox.md), or grade as root")


def _at_least_one(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return count


def add_report_options(parser: argparse.ArgumentParser) -> None:
    """`--html`, `--markdown`, `--junit` (each registered format: `grader.report.formats`): the reports `grade` and
    `check` write beside the terminal table."""
    from grader.report.formats import report_formats

    for found in report_formats():
        parser.add_argument(f"--{found.name}", type=Path, default=None, metavar="FILE", help=found.option_help)


def write_reports(result, arguments: argparse.Namespace) -> list[tuple[str, Path]]:
    """Write the reports that `add_report_options` asked for; returns (what, path) for each file written."""
    from grader.report.formats import report_formats

    written = []
    for found in report_formats():
        path = getattr(arguments, found.name, None)
        if path is not None:
            found.renderer().write(result, path)
            written.append((found.what, path))
    return written
