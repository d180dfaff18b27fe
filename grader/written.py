"""The written part of a study (the stage after fetch, beside the build): the report file the graded commit holds.

The assignment names its report's file and alternatives ([assignment.written] `report`). The first the checkout
holds is the report, also where only its case differs (`report.md` for `REPORT.md`). A symbolic link or a file
over the size limit is not collected, and the result says why; a missing report is said in the student's words
before they submit (`grader check`) and counted in the batch. The batch keeps the report's bytes in the store
(`Store.save_written`), so that the dashboard links it at the graded commit whatever the repository does later.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from grader.assignment.model import WrittenPart
from grader.results import WrittenReport


def find_report(part: WrittenPart | None, root: Path) -> WrittenReport | None:
    """What the checkout at `root` holds of the assignment's report; None where the assignment asks for none."""
    if part is None or not part.report:
        return None
    return find_file(part.report, root, part.max_bytes, "written report")


def find_file(names: tuple[str, ...], root: Path, max_bytes: int, noun: str) -> WrittenReport:
    """The first of `names` the checkout at `root` holds (the report, a results file): a file of the repository
    itself, not over `max_bytes`; where none is, why, with `noun` naming what the assignment asks for."""
    expected = list(names)
    for name in names:
        path = _named(root, name)
        if path is None:
            continue
        relative = path.relative_to(root).as_posix()
        if path.is_symlink() or not path.resolve().is_relative_to(root.resolve()):  # a link could name the grader's
            return WrittenReport(expected, message=f"{relative} is a symbolic link: the {noun} must be a file of "
                                                   "the repository itself")
        size = path.stat().st_size
        if size > max_bytes:
            return WrittenReport(expected, relative, size, message=f"{relative} is {size / 2**20:.1f} MiB, over the "
                                                                   f"{max_bytes / 2**20:g} MiB the assignment "
                                                                   "collects: make it smaller (compress its images)")
        return WrittenReport(expected, relative, size, hashlib.sha256(path.read_bytes()).hexdigest())
    return WrittenReport(expected, message=f"no {noun}: the assignment asks for {_one_of(expected)} "
                                           "in the repository, and this commit has none")


def report_bytes(report: WrittenReport | None, root: Path) -> bytes | None:
    """The collected report's bytes, read again from the checkout; None where none was collected or it changed."""
    if report is None or not report.collected:
        return None
    path = root / report.file
    if path.is_symlink() or not path.is_file() or not path.resolve().is_relative_to(root.resolve()):
        return None
    content = path.read_bytes()
    return content if hashlib.sha256(content).hexdigest() == report.sha256 else None


def _named(root: Path, name: str) -> Path | None:
    """The file at `name`, or the one beside it whose name differs only in case (`report.md` for `REPORT.md`)."""
    path = root / name
    if path.is_file() or path.is_symlink():
        return path
    folder = path.parent
    if not folder.is_dir() or folder.is_symlink():
        return None
    return next((p for p in sorted(folder.iterdir()) if p.name.lower() == path.name.lower()
                 and (p.is_file() or p.is_symlink())), None)


def _one_of(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"one of {', '.join(names[:-1])} or {names[-1]}"
