"""The mutants of a pack's reference: each one line of the trusted solution changed by universalmutator's rules.

universalmutator (a maintained regexp mutation tool) has rules per language: its universal ones (operators, bounds,
constants, swapped arguments, `while` for `if`, a `break` added), C-like ones (a dropped statement: a removed
`__syncthreads()` or a deleted accumulation is one; a negated condition) and Python's (`pass` for a statement,
`return None`). Only the files of the pack's own `reference/` folder are mutated: what the solution changes in the
template is what a student writes.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import hashlib
import io
import random
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

from grader.assignment import Assignment, Kernel
from grader.assignment.trees import solution_files

# Each suffix's rule files, as universalmutator names its built-in ones.
RULES = {
    ".py": ("universal.rules", "python.rules"),
    ".c": ("universal.rules", "c_like.rules", "c.rules"),
    ".h": ("universal.rules", "c_like.rules", "c.rules"),
    **{suffix: ("universal.rules", "c_like.rules", "cpp.rules")
       for suffix in (".cc", ".cpp", ".cxx", ".hpp", ".cu", ".cuh")},
}
# Lines never mutated: the reference's comments and the harness-facing declarations that only name things.
IGNORE = (r"^\s*#\s*include", r"^\s*#\s*pragma", r"^\s*(import|from)\s", r"^\s*//", r"^\s*#")


@dataclass(frozen=True)
class Mutant:
    """One changed line of one reference file."""

    file: str  # relative to the reference's tree (the submission's layout)
    line: int  # 1-based
    original: str
    mutated: str
    rule: str  # universalmutator's rule, as its rule file writes it
    kernels: tuple[str, ...]  # the kernels whose code the line is in

    @property
    def key(self) -> str:
        """Its identity: the file and what the line becomes (the cache's key, with the pack's cases)."""
        return hashlib.sha256(f"{self.file}\0{self.line}\0{self.mutated}".encode()).hexdigest()[:16]

    @property
    def diff(self) -> str:
        return "".join(difflib.unified_diff([self.original], [self.mutated], f"a/{self.file}", f"b/{self.file}",
                                            n=0, lineterm="\n")).replace("@@ -1 +1 @@", f"@@ line {self.line} @@")

    def apply(self, source: str) -> str:
        lines = source.splitlines(keepends=True)
        lines[self.line - 1] = self.mutated
        return "".join(lines)


def reference_files(assignment: Assignment) -> list[str]:
    """The reference's own files that the rules can mutate and a kernel builds, relative to the submission's root
    (a file no kernel names, a demo script or another pack's half, is left out, unless no file is named at all)."""
    solution = solution_files(assignment.lineage or (assignment.root,))  # this pack's layer, or its bases'
    files = sorted(relative for relative, path in solution.items() if path.suffix in RULES)
    named = {name for k in assignment.kernels for name in (*k.sources, k.header)}
    # A variant's kernels are built from its folder's copies of the base files.
    named |= {v.overlay_path(name) for v in assignment.variants for name in set(named)
              if name.startswith(v.onto.rstrip("/") + "/")}
    return [f for f in files if f in named] or files


def mutants_of(assignment: Assignment, files: list[str] | None = None) -> tuple[list[Mutant], int]:
    """Every mutant of the reference's files, and how many were dropped before grading as changing nothing that
    runs (a docstring or comment: the same Python syntax tree)."""
    found: list[Mutant] = []
    unchanged = 0
    root = assignment.reference_dir
    for relative in files if files is not None else reference_files(assignment):
        path = root / relative
        source = path.read_text(encoding="utf-8", errors="replace")
        lines = source.splitlines(keepends=True)
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        owners = _owners(assignment, relative)
        with contextlib.redirect_stdout(io.StringIO()):  # it prints the rules it read
            from universalmutator import mutator

            raw = mutator.mutants_regexp(lines, list(RULES[path.suffix]), ignorePatterns=list(IGNORE),
                                         ignoreStringOnly=True)
        tree = syntax_tree(source) if path.suffix == ".py" else None
        for line, mutated, (rule, _where), _ in raw:
            mutant = Mutant(relative, line, lines[line - 1], mutated, rule.strip(),
                            _enclosing(lines, line, owners))
            if tree is not None and syntax_tree(mutant.apply(source)) == tree:
                unchanged += 1
                continue
            found.append(mutant)
    return found, unchanged


def choose(mutants: list[Mutant], limit: int | None, seed: str) -> list[Mutant]:
    """At most `limit` of them, drawn the same way every run (so that a re-audit finds its cache), in file order."""
    if limit is None or len(mutants) <= limit:
        return mutants
    drawn = set(random.Random(seed).sample(range(len(mutants)), limit))
    return [m for i, m in enumerate(mutants) if i in drawn]


def syntax_tree(source: str) -> str | None:
    """The module's syntax tree without docstrings, as text (None: it does not parse)."""
    try:
        with warnings.catch_warnings():  # a mutant's `2(a)`: Python warns of the call it will fail
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
            compile(tree, "<mutant>", "exec")  # what parsing lets through: `break` outside a loop
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body:
            # A docstring, or a `pass` beside other statements, runs nothing.
            kept = [n for i, n in enumerate(body) if not isinstance(n, ast.Pass) and not (
                i == 0 and isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str))]
            node.body = kept or [ast.Pass()]  # type: ignore[attr-defined]
    return ast.dump(tree)


def _owners(assignment: Assignment, relative: str) -> tuple[Kernel, ...]:
    """The kernels that build this file: those naming it, else (a folder compiled whole) every kernel."""
    variant = next((v.name for v in assignment.variants if relative.startswith(v.folder.rstrip("/") + "/")), None)
    kernels = tuple(k for k in assignment.kernels if k.variant == variant)
    base = next((v.onto.rstrip("/") + relative[len(v.folder.rstrip("/")):] for v in assignment.variants
                 if v.name == variant), relative)
    named = tuple(k for k in kernels if base in (*k.sources, k.header))
    return named or kernels or tuple(assignment.kernels)


def _enclosing(lines: list[str], line: int, owners: tuple[Kernel, ...]) -> tuple[str, ...]:
    """The owner whose function the line is in, found by the nearest definition above it; all owners where none."""
    if len(owners) == 1:
        return (owners[0].name,)
    names = {name: k.name for k in owners for name in (k.signature.function, *k.functions, k.name.rsplit("/", 1)[-1])}
    definition = re.compile(r"^(?:def\s+|\S[^=;(]*?\b)(" + "|".join(map(re.escape, names)) + r")\s*\(")
    for text in reversed(lines[:line]):
        if match := definition.match(text):
            return (names[match.group(1)],)
    return tuple(k.name for k in owners)
