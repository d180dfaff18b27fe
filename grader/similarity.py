"""Similarity across a class, for the instructor only: the pairs of graded submissions whose code is most alike.

Each student's code is read at the commit that was graded (from their repository's history, whatever its work
tree holds now), fingerprinted with copydetect's winnowing (a maintained library: its tokenizer drops names and
comments, so renamed variables still match), and every pair of submissions compared. The template's own code is
boilerplate: its fingerprints are dropped before comparing, so two students who only kept the starter code are not
alike. Earlier terms' stores may be added as a corpus: their submissions are compared with this term's, not with
each other. A pair's share is the share of both sides' code together that matches: two students who each wrote
the one canonical loop nest of a short function (a dot product every student writes alike) share little of their
code as a whole, while a copy, identifiers renamed, shares nearly all of it. The page gives each side's share too.

Nothing here reaches a student: the page is written where the instructor says (`grader similarity --out`), and
the dashboard links it only where it lies beside it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import git
import numpy as np
from copydetect import CodeFingerprint, compare_files
from copydetect.utils import highlight_overlap

from grader.assignment import Assignment
from grader.results import Result

# A language's files are fingerprinted together, under a name whose suffix picks copydetect's tokenizer.
LANGUAGES = {".cu": "code.cpp", ".cuh": "code.cpp", ".cpp": "code.cpp", ".cc": "code.cpp", ".c": "code.cpp",
             ".h": "code.cpp", ".hpp": "code.cpp", ".py": "code.py"}
MAX_FILE_BYTES = 512 * 1024  # a larger "source" is data, not code a student wrote
NOISE_TOKENS = 25  # copydetect's k: a match shorter than this many tokens is noise
WINDOW = 1  # winnowing's window: every fingerprint kept (classes are small enough)
DEFAULT_THRESHOLD = 0.5


@dataclass(frozen=True)
class Submitted:
    """One submission's code: its student, the commit graded, the term (a corpus store's name; "" for this one)."""

    student: str
    commit: str | None
    files: dict[str, str]  # relative path -> text
    term: str = ""

    @property
    def label(self) -> str:
        return f"{self.student} ({self.term})" if self.term else self.student


@dataclass(frozen=True)
class Side:
    """One side of a pair as the page shows it: the share of its code the other holds, and its code marked."""

    submitted: Submitted
    share: float
    marked: str  # HTML: the code, escaped, with the matching parts in <mark>


@dataclass(frozen=True)
class Pair:
    first: Side
    second: Side
    tokens: int  # matching tokens
    share: float  # of the pair's code (both sides' tokens together), the share that matches


def code_at_commit(result: Result, suffixes: tuple[str, ...] = tuple(LANGUAGES)) -> dict[str, str] | None:
    """The code files of a graded submission at its commit (None where neither its repository nor its folder
    can be read any more)."""
    root = Path(result.submission.path)
    if result.submission.commit:
        try:
            tree = git.Repo(root, search_parent_directories=False).commit(result.submission.commit).tree
        except (git.GitError, ValueError, OSError):
            return None
        return {blob.path: blob.data_stream.read().decode("utf-8", "replace") for blob in tree.traverse()
                if blob.type == "blob" and PurePosixPath(blob.path).suffix in suffixes and blob.size <= MAX_FILE_BYTES}
    if not root.is_dir():
        return None
    return {p.relative_to(root).as_posix(): p.read_text(errors="replace") for p in sorted(root.rglob("*"))
            if p.is_file() and not p.is_symlink() and p.suffix in suffixes and ".git" not in p.parts
            and p.stat().st_size <= MAX_FILE_BYTES}


def template_code(assignment: Assignment) -> dict[str, str]:
    """The starter code, whose fingerprints are boilerplate."""
    root = assignment.template_dir
    return {p.relative_to(root).as_posix(): p.read_text(errors="replace") for p in sorted(root.rglob("*"))
            if p.is_file() and p.suffix in LANGUAGES and p.stat().st_size <= MAX_FILE_BYTES}


def similar_pairs(class_: list[Submitted], corpus: list[Submitted], boilerplate: dict[str, str],
                  threshold: float = DEFAULT_THRESHOLD) -> list[Pair]:
    """The pairs at or above `threshold`, most alike first: this term's among each other, and each with the corpus."""
    dropped = {name: _fingerprint(name, text).hashes for name, text in _by_language(boilerplate).items()}
    prints = {id(s): {name: _fingerprint(name, text, dropped.get(name, set()))
                      for name, text in _by_language(s.files).items()} for s in (*class_, *corpus)}
    candidates = [*itertools.combinations(class_, 2), *itertools.product(class_, corpus)]
    pairs = []
    for a, b in candidates:
        pair = _compare(a, b, prints[id(a)], prints[id(b)])
        if pair is not None and pair.share >= threshold:
            pairs.append(pair)
    return sorted(pairs, key=lambda p: (-p.share, p.first.submitted.label, p.second.submitted.label))


def _by_language(files: dict[str, str]) -> dict[str, str]:
    """A submission's files joined per language, each headed by its path (so the page says where a match is)."""
    joined: dict[str, list[str]] = {}
    for path in sorted(files):
        joined.setdefault(LANGUAGES[PurePosixPath(path).suffix], []).append(f"// {path}\n{files[path]}\n")
    return {name: "".join(parts) for name, parts in joined.items()}


def _fingerprint(name: str, text: str, boilerplate: set[int] | None = None) -> CodeFingerprint:
    import io

    return CodeFingerprint(name, NOISE_TOKENS, WINDOW, list(boilerplate or ()), fp=io.StringIO(text))


def _compare(a: Submitted, b: Submitted, prints_a: dict[str, CodeFingerprint],
             prints_b: dict[str, CodeFingerprint]) -> Pair | None:
    tokens = 0
    covered = [0, 0]
    matched = [0, 0]
    marked: list[list[str]] = [[], []]
    for name in sorted(set(prints_a) | set(prints_b)):
        first, second = prints_a.get(name), prints_b.get(name)
        for side, fingerprint in enumerate((first, second)):
            covered[side] += fingerprint.token_coverage if fingerprint else 0
        if first is None or second is None:
            for side, fingerprint in enumerate((first, second)):
                if fingerprint is not None:
                    marked[side].append(_escaped(fingerprint.raw_code))
            continue
        overlap, shares, slices = compare_files(first, second)
        tokens += int(overlap)
        for side, fingerprint in enumerate((first, second)):
            matched[side] += int(round(shares[side] * fingerprint.token_coverage))
            if overlap and np.asarray(slices[side]).size:
                text, _ = highlight_overlap(fingerprint.raw_code, slices[side], "<mark>", "</mark>", escape_html=True)
                marked[side].append(text)
            else:
                marked[side].append(_escaped(fingerprint.raw_code))
    if not tokens:
        return None
    shares_of = [min(matched[side] / covered[side], 1.0) if covered[side] else 0.0 for side in (0, 1)]
    pooled = min(sum(matched) / sum(covered), 1.0) if sum(covered) else 0.0
    return Pair(Side(a, shares_of[0], "".join(marked[0])), Side(b, shares_of[1], "".join(marked[1])), tokens, pooled)


def _escaped(text: str) -> str:
    from markupsafe import escape

    return str(escape(text))
