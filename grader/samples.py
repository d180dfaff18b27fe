"""Sample submissions: the reference with one variant folder (an alternative, a mutant or a
hostile file) laid over it. The demo grades them; the tests build their corpus the same way."""

from __future__ import annotations

import shutil
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from dataclasses import dataclass
from pathlib import Path

from grader.spec import PROJECT_ROOT, Assignment

VARIANTS_DIR = PROJECT_ROOT / "tests" / "submissions"


ALL_KERNELS = "all"  # a VARIANT.toml's kernel for a whole submission (a course-style family)


@dataclass(frozen=True)
class Variant:
    name: str
    folder: Path
    kernel: str  # the kernel it changes, or "all" for a whole submission
    kind: str  # alternative, course (as students of the course write it), mutant or hostile
    expect: str  # the kernel's expected status (every kernel's, for "all")
    why: str
    failed_cases: tuple[str, ...] | None = None  # where known: exactly the cases it must fail

    @property
    def whole(self) -> bool:
        return self.kernel == ALL_KERNELS


def variants(assignment: Assignment) -> list[Variant]:
    found = []
    for folder in sorted((VARIANTS_DIR / assignment.name).glob("*/VARIANT.toml")):
        meta = tomllib.loads(folder.read_text())
        failed = meta.get("failed_cases")
        found.append(Variant(folder.parent.name, folder.parent, meta["kernel"], meta["kind"], meta["expect"],
                             meta.get("why", ""), tuple(failed) if failed is not None else None))
    return found


def compose(assignment: Assignment, variant: Variant | None, destination: Path) -> Path:
    """A submission folder: the reference, with the variant's files (if any) replacing its own."""
    shutil.copytree(assignment.reference_dir, destination, dirs_exist_ok=True)
    if variant is not None:
        for path in variant.folder.rglob("*"):
            if path.is_file() and path.name != "VARIANT.toml":
                target = destination / path.relative_to(variant.folder)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
    return destination
