"""An assignment's template and reference as whole folders, each file stored once.

A reference is what the course's own solution is: a fork of the starting repository with the solution written in.
So its folder holds only what the solution changes, laid over the template (the grader's adapters, the interface
headers and the untouched kernels are the template's). An assignment `based_on` another starts from that one's
trees: gpt2-m2's template is gpt2-m1's with milestone 2's folders added, and a GPU version of a CPU assignment
holds only the files it changes. The layers, bottom first, for an assignment A based on B:

    template(A)  = template(B) + A/template
    reference(A) = reference(B) + A/template + A/reference

A file of a higher layer replaces the same path below it. Where one layer holds every file, that folder is the
tree; otherwise the tree is written once, keyed by its files' contents, under the cache (`trees/`), and every
command that needs a folder (a gold build, `grader time`, a sample's overlay, the demo's template) reads it there.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Literal

from grader.options import default_cache_dir

TreeKind = Literal["template", "reference"]
SKIPPED_SUFFIXES = (".pyc", ".so", ".o")  # what a run may leave in a pack's folder: never part of a tree

_folders: dict[tuple, Path] = {}  # (kind, each file's path, size and mtime) -> its tree's folder, this process


def layers(lineage: tuple[Path, ...], kind: TreeKind) -> tuple[Path, ...]:
    """The folders a tree is laid from, bottom first; lineage: the assignments' folders, the base's first."""
    parts: tuple[str, ...] = ("template",) if kind == "template" else ("template", "reference")
    return tuple(folder / part for folder in lineage for part in parts)


def tree_files(lineage: tuple[Path, ...], kind: TreeKind) -> dict[str, Path]:
    """Each relative path of the tree, with the file of the highest layer that holds it."""
    return {relative: layer / relative for relative, layer in _layer_of(lineage, kind).items()}


def solution_files(lineage: tuple[Path, ...]) -> dict[str, Path]:
    """The reference tree's files that a `reference/` layer gives (what the solution writes), with their files."""
    return {relative: layer / relative for relative, layer in _layer_of(lineage, "reference").items()
            if layer.name == "reference"}


def _layer_of(lineage: tuple[Path, ...], kind: TreeKind) -> dict[str, Path]:
    """Each relative path of the tree, with the highest layer that holds it."""
    found: dict[str, Path] = {}
    for layer in layers(lineage, kind):
        if layer.is_dir():
            for path in sorted(layer.rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts and path.suffix not in SKIPPED_SUFFIXES:
                    found[path.relative_to(layer).as_posix()] = layer
    return found


def tree_file(lineage: tuple[Path, ...], kind: TreeKind, relative: str) -> Path:
    """The file the tree holds at `relative` (the highest layer's); the top layer's path where none holds it."""
    for layer in reversed(layers(lineage, kind)):
        if (layer / relative).is_file():
            return layer / relative
    return layers(lineage, kind)[-1] / relative


def tree_folder(name: str, lineage: tuple[Path, ...], kind: TreeKind) -> Path:
    """A folder holding the whole tree: the one layer that gives every file, or the tree written under the cache."""
    layer_of = _layer_of(lineage, kind)
    given = set(layer_of.values())
    if len(given) <= 1:  # one folder holds it all: that folder is the tree
        return next(iter(given), layers(lineage, kind)[-1])
    files = {relative: layer / relative for relative, layer in layer_of.items()}
    signature = (kind, *((relative, path.stat().st_size, path.stat().st_mtime_ns) for relative, path in files.items()))
    if signature in _folders and _folders[signature].is_dir():
        return _folders[signature]
    digest = hashlib.sha256()
    for relative, path in files.items():
        digest.update(f"{relative}\0{path.stat().st_mode & 0o111}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    folder = default_cache_dir() / "trees" / f"{name}-{kind}-{digest.hexdigest()[:20]}"
    if not folder.is_dir():
        _write(folder, files)
    _folders[signature] = folder
    return folder


def _write(folder: Path, files: dict[str, Path]) -> None:
    """The tree written beside its final name, then renamed: a concurrent writer's finished copy is kept."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}-"))
    try:
        for relative, path in files.items():
            target = staging / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
        os.chmod(staging, 0o755 & ~_umask())
        os.rename(staging, folder)
    except OSError:
        if not folder.is_dir():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
