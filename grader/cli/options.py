"""Options that `grade`, `check` and `demo` share, and turning them into pipeline Options."""

from __future__ import annotations

import argparse
from pathlib import Path

from grader.cases import read_secret
from grader.pipeline import Options, default_cache_dir


def add_grading_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kernels", help="comma-separated kernel names to grade (default: all)")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="builds, inputs and gold outputs (default: $KERNEL_GRADER_CACHE or ~/.cache/kernel-grader)")
    parser.add_argument("--sandbox", default="local", help="where student code runs (default: local)")
    parser.add_argument("--jobs", type=int, default=None, help="parallel compiles (default: all cores)")
    parser.add_argument("--cuda-arch", default=None, help="e.g. sm_90 (default: GPU 0's, else sm_90)")
    parser.add_argument("--json", type=Path, default=None, help="write the result as JSON to this file")
    parser.add_argument("--verbose", "-v", action="store_true", help="print every failed case's full message")


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
    )
