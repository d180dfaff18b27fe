"""Checks: whole-program checks beyond one kernel's cases, one plug-in each behind one interface, registered by name.

An assignment asks for a check with a table of the check's name in its assignment.toml; the core names none.
A check's plug-in (`Check`) says how that table is parsed and validated (its `CheckSpec`), which of
the assignment's kernels it composes, its inputs (prepared once, cached by content), the composed programs
its harness runs (`grader.boundary.protocol.Composition`, one call per case), its gold, and how the calls'
outcomes become case results. Its result is a kernel's, named after the check (a variant's copy:
"req_0/" and the check's name), its weight beside the kernels'.

    grading.py    the pipeline's one loop over a grade's checks, whichever they are: what every check shares
    program.py    the harness's half of a composed call, whichever check's: the allocations and the libraries
                  on the device, the steps called, each output saved and sealed, stray writes named
    <name>/       a check's plug-in: a package, its `check` module holding it as `CHECK`; its harness half
                  (`Check.harness_module`, the module its compositions name as their `runner`) keeps to NumPy,
                  `grader.boundary` and `program.py`, since the harness imports it (tests/test_boundary.py)

This module stays light (the spec imports it, and the harness imports the plug-ins' harness halves).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pathlib import Path

    from grader.boundary.protocol import Composition
    from grader.results import KernelResult
    from grader.runner import CallOutcome
    from grader.assignment import Assignment, Kernel

# Check name (its table in assignment.toml, its result's kernel) -> the module that holds it as `CHECK`.
_MODULES = {"forward": "grader.checks.forward.check", "decode": "grader.checks.decode.check"}
CHECK_NAMES = tuple(_MODULES)


class CheckSpec(Protocol):
    """A check's table as its plug-in parsed it: what the spec and the pipeline need of every check."""

    @property
    def name(self) -> str:
        """The check's name: its table, and its result's kernel."""
        ...

    @property
    def weight(self) -> float:
        """Its weight beside the kernels' (a variant's copy: its share of the variant's weight)."""
        ...

    @property
    def time_limit_s(self) -> float:
        """For its calls together (and so for each): its result kernel's limit and budget."""
        ...

    @property
    def composes(self) -> tuple[str, ...]:
        """The base kernels it composes (a variant's copy composes that variant's copies of them)."""
        ...

    @property
    def cases(self) -> tuple[str, ...]:
        """Its cases, as its result names them (all public)."""
        ...

    @property
    def outputs(self) -> tuple[str, ...]:
        """The files its calls save (stems): what the runner collects from their folders."""
        ...


class Check(Protocol):
    """A whole-program check: its table, its inputs, its calls, its gold, and its results."""

    name: str  # its table in assignment.toml, and its result's kernel
    harness_module: str  # its harness half: the module its compositions name as their `runner`

    def load(self, table: Any, where: str, kernels: tuple[Kernel, ...]) -> CheckSpec:
        """Its table, parsed and validated against the assignment's base kernels; every error names `where` (the file
        and the table), the key and what was expected."""
        ...

    def prepare_inputs(self, assignment: Assignment, spec: CheckSpec, cache_dir: Path) -> Path:
        """The folder of what its harness reads (computed once, cached by content; later calls reuse it)."""
        ...

    def plan(self, assignment: Assignment, spec: CheckSpec, libraries: dict[str, str],
             inputs: Path) -> tuple[tuple[str, Composition], ...]:
        """Each case's composed program, by case name, in the order one harness runs them.

        libraries: each composed kernel's library by base name; inputs: `prepare_inputs`' folder.
        """
        ...

    def gold(self, assignment: Assignment, spec: CheckSpec, inputs: Path, cache_dir: Path) -> Any:
        """What its results are judged against: from the cache, or computed now (outside the harness)."""
        ...

    def result(self, assignment: Assignment, spec: CheckSpec, check: Kernel, kernels: dict[str, Kernel],
               outcomes: dict[str, CallOutcome | None], gold: Any, log: str) -> KernelResult:
        """The result of one of its kernels (its own, or a variant's copy), every composed kernel built.

        kernels: the composed kernels by base name (a variant's copies: their tolerances); outcomes: its
        calls' by case name; gold: `gold`'s, None where none of its calls ran to its end. The result names
        the check (`check`) and carries what its failure says beyond its cases (`check_hints`): reports
        read the result alone.
        """
        ...



def check_named(name: str) -> Check:
    """The check registered under `name` (its table in assignment.toml)."""
    if name not in _MODULES:
        raise ValueError(f"unknown check {name!r} (have {', '.join(CHECK_NAMES)})")
    return importlib.import_module(_MODULES[name]).CHECK
