"""Sample submissions: the reference with one sample folder (an alternative, a mutant or a
hostile file) laid over it. An assignment's samples are `assignments/<name>/samples/<sample>/`, each
with its VARIANT.toml. The demo grades them; the tests build their corpus the same way."""

from __future__ import annotations

import shutil
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from dataclasses import dataclass
from pathlib import Path

from grader.errors import SpecError
from grader.sources import overlay_files
from grader.assignment import Assignment
from grader.status import KernelStatus

VARIANT_FILE = "VARIANT.toml"  # what a sample is, beside its files: never part of the submission


ALL_KERNELS = "all"  # a VARIANT.toml's kernel for a whole submission (a course-style family)


@dataclass(frozen=True)
class Sample:
    """One sample submission (not to be confused with an assignment's optimization variants, `grader.assignment.Variant`)."""

    name: str
    folder: Path
    kernel: str  # the kernel it changes, or "all" for a whole submission
    kind: str  # alternative, course (as students of the course write it), mutant or hostile
    expect: KernelStatus  # the kernel's expected status (every kernel's, for "all")
    why: str
    failed_cases: tuple[str, ...] | None = None  # where known: exactly the cases it must fail

    @property
    def whole(self) -> bool:
        return self.kernel == ALL_KERNELS


def variants(assignment: Assignment) -> list[Sample]:
    """The assignment's samples (`Assignment.samples_dir`), by name."""
    found = []
    for folder in sorted(assignment.samples_dir.glob(f"*/{VARIANT_FILE}")):
        meta = tomllib.loads(folder.read_text())
        failed = meta.get("failed_cases")
        if meta["expect"] not in {s.value for s in KernelStatus}:
            raise SpecError(f"{folder}: expect {meta['expect']!r} is not a kernel status "
                            f"(one of {', '.join(s.value for s in KernelStatus)})")
        found.append(Sample(folder.parent.name, folder.parent, meta["kernel"], meta["kind"],
                             KernelStatus(meta["expect"]),
                             meta.get("why", ""), tuple(failed) if failed is not None else None))
    return found


def compose(assignment: Assignment, variant: Sample | None, destination: Path) -> Path:
    """A submission folder: the reference, with the variant's files (if any) replacing its own.

    The variant is laid over by the course's overlay rule (`grader.sources.overlay_files`), the
    rule an assignment's variant folders are graded by.
    """
    shutil.copytree(assignment.reference_dir, destination, dirs_exist_ok=True)
    if variant is not None:
        for relative, path in overlay_files(variant.folder, leave_out=(VARIANT_FILE,)).items():
            target = destination / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    return destination
