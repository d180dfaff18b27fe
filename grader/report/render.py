"""The Jinja2 environment the HTML, Markdown and dashboard templates share, and the figures they show."""

from __future__ import annotations

import dataclasses
import datetime
import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from grader.report.credit import credit_lines
from grader.report.evidence import variant_evidence
from grader.report.hints import case_hints, forbidden_notes, kernel_hints
from grader.results import (EVIDENCE_WORDS, NEVER_WRITTEN, READ_BEFORE_WRITTEN, READ_OUT_OF_BOUNDS, CaseResult,
                            KernelResult, Mismatch, Result, VariantResult, index_in_words)
from grader.status import CaseStatus, KernelStatus, Outcome, SubmissionStatus

if TYPE_CHECKING:
    import jinja2


@functools.cache
def environment(autoescape: bool) -> jinja2.Environment:
    import jinja2  # here: the terminal report of `grader check` needs no template engine

    env = jinja2.Environment(loader=jinja2.PackageLoader("grader.report", "templates"), autoescape=autoescape,
                             trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    env.filters.update(num=number, ms=milliseconds, md=markdown_cell, sizes=sizes, at=mismatch_at, got=mismatch_got,
                       used=tolerance_used)
    # Templates compare statuses with the enums' members, never with spelled-out strings.
    env.globals.update(KernelStatus=KernelStatus, CaseStatus=CaseStatus, SubmissionStatus=SubmissionStatus,
                       Outcome=Outcome)
    return env


def number(value: float | None, digits: int = 3) -> str:
    """A figure for people: 3 significant digits, '–' where nothing was measured."""
    if value is None:
        return "–"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return f"{value:.{digits}g}"


TOLERANCE_SHOWN = 1000  # beyond this many tolerances off, the multiple says nothing more: "over 1000x"


def tolerance_used(value: float | None) -> str:
    """How much of its tolerance a case's worst element used: "0.31x" (passed), "4.2x"; "over 1000x" for an
    answer that is not near at all (2.09e+08 says no more, and reads as an error of the grader)."""
    if value is None or value != value:
        return "–"
    return f"over {TOLERANCE_SHOWN}x" if value > TOLERANCE_SHOWN else f"{number(value)}x"


def milliseconds(case: CaseResult) -> str:
    if case.device_ms is not None:
        return f"{case.device_ms:.3g} ms (device)"
    return f"{case.wall_ms:.3g} ms" if case.wall_ms is not None else "–"


def sizes(case: CaseResult) -> str:
    """The case's parameters as the spec names them: "N=37, d=24"."""
    return ", ".join(f"{k}={v}" for k, v in (case.params or {}).items())


def mismatch_at(mismatch: Mismatch) -> str:
    """Where a first mismatch is: "O[N=5, d=3]" along the axes the spec names, else "O[5, 3]"."""
    return index_in_words(mismatch.buffer, mismatch.index, mismatch.axes) if mismatch.axes else \
        f"{mismatch.buffer}{list(mismatch.index)}"


# What a NaN that is the poison, or was computed from one, is called in a report's cell.
POISON_WORDS = {NEVER_WRITTEN: "never written", READ_BEFORE_WRITTEN: "NaN (from the output read before it was written)",
                READ_OUT_OF_BOUNDS: "NaN (from memory outside a buffer)"}


def mismatch_got(mismatch: Mismatch) -> str:
    """What a first mismatch holds: its value, or what its poison says."""
    if mismatch.poison in POISON_WORDS:
        return POISON_WORDS[mismatch.poison]
    return "NaN" if mismatch.got is None or mismatch.got != mismatch.got else number(mismatch.got, 7)


def markdown_cell(text: object) -> str:
    """Text safe inside a Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


@dataclass(frozen=True)
class Failure:
    """Failed cases that share their words: one message and one set of hints, said once for all of them (an import
    error every case raises is one paragraph, with the cases it cost)."""

    cases: list[CaseResult]
    hints: list[str]

    @property
    def case(self) -> CaseResult:
        """The first of them: its status, message and first mismatch are every one's."""
        return self.cases[0]

    @property
    def names(self) -> str:
        """ "one-row, odd-sizes [hidden], square-tiles [hidden]" """
        return ", ".join(c.name + ("" if c.public else " [hidden]") for c in self.cases)


def failures(failed_cases: list[tuple[CaseResult, list[str]]]) -> list[Failure]:
    """The failed cases grouped by what a report says of each (status, message, first mismatch, hints), in the order
    their first case comes."""
    groups: dict[tuple, Failure] = {}
    for case, hints in failed_cases:
        key = (case.status, case.message, repr(case.first_mismatch), tuple(hints))
        if key in groups:
            groups[key].cases.append(case)
        else:
            groups[key] = Failure([case], hints)
    return list(groups.values())


@dataclass(frozen=True)
class KernelView:
    kernel: KernelResult
    hints: list[str]
    failed_cases: list[tuple[CaseResult, list[str]]]
    notes: list[str] = dataclasses.field(default_factory=list)  # what costs nothing but is worth knowing

    @property
    def failures(self) -> list[Failure]:
        """The failed cases, those a report says the same words of together (`failures`)."""
        return failures(self.failed_cases)

    @property
    def sanitizer(self) -> list[str]:
        """compute-sanitizer's findings on this kernel, where it ran."""
        return list(getattr(self.kernel, "sanitizer", None) or [])

    @property
    def slowest(self) -> str:
        measured = [c for c in self.kernel.cases if c.device_ms is not None or c.wall_ms is not None]
        return milliseconds(max(measured, key=lambda c: c.device_ms or c.wall_ms or 0)) if measured else "–"


def kernel_views(result: Result) -> list[KernelView]:
    return [KernelView(k, kernel_hints(k), [(c, case_hints(c)) for c in k.cases if not c.passed], forbidden_notes(k))
            for k in result.kernels]


@dataclass(frozen=True)
class VariantView:
    """One optimization variant as the reports show it: its line, its flags and evidence, then its kernels."""

    variant: VariantResult
    kernels: list[KernelView]
    flags: list[str]
    evidence: list[str]  # what its binaries show, a sentence per kind of evidence


def variant_flags(variant: VariantResult) -> list[str]:
    """What the grader flags for the instructor's check of a variant, in words."""
    flags = []
    if variant.status is not Outcome.NOT_SUBMITTED and variant.changes_nothing:
        flags.append(f"{variant.folder}/ changes none of the files this optimization must change "
                     f"({', '.join(variant.must_change)})")
    for kernel, kinds in variant.missing_evidence.items():
        words = [EVIDENCE_WORDS.get(k, k) for k in kinds]
        if ", " in kernel:  # evidence_in = "any": shown by none of them
            flags.append(f"{kernel}: none of their binaries shows any {' or any '.join(words)}")
        else:
            flags.append(f"{kernel}: its binary shows no {' and no '.join(words)}")
    for kernel, patterns in variant.missing_symbols.items():
        flags.append(f"{kernel}: calls nothing matching {', '.join(patterns)}, which {variant.name} requires")
    if variant.overwritten and variant.untouched is not None:
        bound = f"more than {variant.at_most_written:.0%} of " if variant.at_most_written else ""
        flags.append(f"wrote {bound}{variant.untouched}, which {variant.name} must leave untouched, in "
                     f"{len(variant.overwritten)} case(s): {', '.join(variant.overwritten)}")
    return flags


def grouped(result: Result) -> tuple[list[KernelView], list[VariantView]]:
    """The base kernels' views, then each variant's with its kernels' (in the result's order)."""
    views = kernel_views(result)
    names = {variant.name for variant in result.variants}
    base = [v for v in views if v.kernel.variant not in names]
    variants = [VariantView(variant, [v for v in views if v.kernel.variant == variant.name], variant_flags(variant),
                            variant_evidence(variant))
                for variant in result.variants]
    return base, variants


def compiled_files(result: Result) -> list[tuple[list[str], list[str]]]:
    """The files each build was compiled from (`built_from`), as (kernels, files), kernels built from the
    same files together: one line for an assignment whose kernels all see one folder."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for kernel in result.kernels:
        if kernel.built_from:
            groups.setdefault(tuple(kernel.built_from), []).append(kernel.name)
    return [(kernels, list(files)) for files, kernels in groups.items()]


def later_commit_words(result: Result) -> str:
    """The commit a batch left ungraded after the deadline, in the student's words ("" if none): "commit 73a8aa1,
    10 h after the deadline, was not graded: no late policy accepts a later one"."""
    later = result.submission.later
    if later is None:
        return ""
    hours = (datetime.datetime.fromisoformat(later.committed_at)
             - datetime.datetime.fromisoformat(later.deadline)).total_seconds() / 3600
    after = f"{hours:.0f} h" if hours < 48 else f"{hours / 24:.1f} days"
    why = (f"it is past the {later.accepted_days:g} late day(s) the late policy accepts" if later.accepted_days
           else "there is no late policy, so nothing after the deadline counts")
    return f"commit {later.commit[:7]}, {after} after the deadline, was not graded: {why}"


def written_words(result: Result) -> tuple[str, bool]:
    """The written report in the student's words, and whether it is a warning ("" where none is asked for):
    "written report: REPORT.md (12.3 KiB), collected for your TA, who grades it by hand"."""
    written = result.written
    if written is None:
        return "", False
    if not written.collected:
        return written.message, True
    size = f"{written.size / 1024:.1f} KiB" if written.size >= 1024 else f"{written.size} bytes"
    return f"written report: {written.file} ({size}), collected for your TA, who grades it by hand", False


def context(result: Result) -> dict:
    """What the per-submission templates read."""
    raw = result.raw_score if result.raw_score is not None else result.score
    base, variants = grouped(result)
    # A variant that was not submitted has nothing to show kernel by kernel: its line says why.
    unsubmitted = {g.variant.name for g in variants if g.variant.status is Outcome.NOT_SUBMITTED}
    kernels = kernel_views(result)
    return {"r": result, "kernels": kernels, "base": base, "variants": variants, "raw_score": raw,
            "details": [v for v in kernels if v.kernel.variant not in unsubmitted],
            "percent": 100 * result.score / result.max_score if result.max_score else 0.0,
            "scope": "public cases only" if result.public_only else "all cases",
            "hidden_cases": sum(not c.public for k in result.kernels for c in k.cases),
            "compiled": compiled_files(result), "credit": credit_lines(result), "later": later_commit_words(result),
            "written": written_words(result)}
