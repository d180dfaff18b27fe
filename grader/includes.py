"""Which of a build's files can reach its compiler: what its cache key must hash.

A submission's folder holds every kernel's files, and a variant folder (gpt2-m2's `kernels_req_0/`) replaces a few
of them. Hashing the whole folder gave each variant's copy of a kernel it leaves alone (req_0's encoder) a build of
its own. The key leaves out only the files that are another kernel's sources (the spec names them) and that nothing
compiled includes, by a literal `#include`, directly or through other files. Every other file counts, whatever its
name: a student's `stdlib.h` may stand in for the system's through `-I.`. A file the sources stage took from beyond
the build's folders for an include (`../cpu_kernels/x.h`, `included_from`) counts only where the compiled files
reach it, as another kernel's source.

Where a file could read another by any other means (an include through a macro, `#include_next`,
`__has_include_next`, `#embed`, an assembler `.incbin`, a comment inside the directive), every file counts.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Collection, Iterable

_SPLICE = re.compile(rb"\\\r?\n")  # a backslash-newline joins two lines before any directive is read
_DIRECTIVE = re.compile(rb"^[ \t]*#(.*)$", re.M)
_LITERAL_INCLUDE = re.compile(rb"include[ \t]*[<\"]([^>\"\n]+)[>\"]")
_HAS_INCLUDE = re.compile(rb"__has_include")
_LITERAL_HAS_INCLUDE = re.compile(rb"__has_include[ \t]*\([ \t]*[<\"]([^>\"\n]+)[>\"][ \t]*\)")


def compiler_inputs(files: dict[str, bytes], compiled: Iterable[str], shim: str,
                    other_kernels_sources: Iterable[str]) -> dict[str, bytes]:
    """`files` less the other kernels' sources that neither `compiled` (the files the build compiles) nor the shim
    includes, transitively."""
    droppable = set(other_kernels_sources) - set(compiled)
    if not droppable & files.keys():
        return files
    reached: set[str] = set()
    pending: list[tuple[str, bytes]] = [("", shim.encode())]
    pending += [(path, files[path]) for path in compiled if path in files]
    reached.update(path for path, _ in pending if path)
    while pending:
        path, text = pending.pop()
        names = _included_names(text)
        if names is None:
            return files
        folder = posixpath.dirname(path)
        for name in names:
            for found in _matches(name, folder, files):
                if found not in reached:
                    reached.add(found)
                    pending.append((found, files[found]))
    return {path: content for path, content in files.items() if path in reached or path not in droppable}


def included_from(files: dict[str, bytes], start: Iterable[str], others: Collection[str],
                  read: Callable[[str], bytes | None]) -> list[str] | None:
    """The paths among `others` (a checkout's files outside a build) that the build's files `start` (its C files)
    include by a literal name, directly or through each other, in the order reached; None where a file may read
    one by other means. `files`: all the build's.

    An include is looked for where the compiler looks, the first found: beside the including file, then from the
    build's root (`-I.`): `kernels/attention.cuh`'s `"../kernels_op_9/softmax.cuh"` is `kernels_op_9/softmax.cuh`.
    `read`: a file's bytes, None for one not to ship (too large, unreadable)."""
    outside = set(others)
    reached: list[str] = []
    pending = [(path, files[path]) for path in start]
    while pending:
        path, text = pending.pop(0)
        names = _included_names(text)
        if names is None:
            return None
        folder = posixpath.dirname(path)
        for name in names:
            # The first place the compiler finds it: a file of the build there is walked already.
            found = next((p for p in (posixpath.normpath(posixpath.join(folder, name)), posixpath.normpath(name))
                          if p in files or p in outside), None)
            if found in outside and found not in reached and (content := read(found)) is not None:
                reached.append(found)
                pending.append((found, content))
    return reached


def _included_names(text: bytes) -> list[str] | None:
    """The names a file includes literally; None where it may read a file some other way."""
    text = _SPLICE.sub(b"", text)
    asked = _LITERAL_HAS_INCLUDE.findall(text)  # `#if __has_include(<cublas_v2.h>)`: as an include of that name
    if b"incbin" in text or len(asked) != len(_HAS_INCLUDE.findall(text)):
        return None
    names = [name.decode(errors="replace") for name in asked]
    for directive in _DIRECTIVE.finditer(text):
        body = directive.group(1).lstrip(b" \t")
        if body.startswith(b"/"):
            return None  # a comment between the `#` and the directive's name
        if body.startswith((b"include", b"import", b"embed")):
            literal = _LITERAL_INCLUDE.match(body)  # not `include_next`, `import`, `embed` nor a macro's name
            if literal is None:
                return None
            names.append(literal.group(1).decode(errors="replace"))
    return names


def _matches(name: str, folder: str, files: dict[str, bytes]) -> Iterable[str]:
    """The files an include of `name` could open: beside the including file, or anywhere its path ends in it
    (the compiler's -I folders)."""
    beside = posixpath.normpath(posixpath.join(folder, name))
    tail = posixpath.normpath(name)
    while tail.startswith("../"):
        tail = tail[3:]
    return [path for path in files if path in (beside, tail) or path.endswith("/" + tail)]
