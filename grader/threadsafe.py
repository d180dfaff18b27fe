"""Python's parser from several threads at once: shape expressions and .npy headers.

CPython 3.11's parser is not safe in two threads at once (gh-106905: "SystemError: AST constructor
recursion depth mismatch"), and a grade parses in threads: kernels' plans, scoring's output loads
(NumPy reads a .npy header with `ast.literal_eval`). Every parse goes through one lock; reading an
array's data does not hold it.
"""

from __future__ import annotations

import ast
import math
import threading
from pathlib import Path

import numpy as np

PARSER_LOCK = threading.Lock()


def parse_expression(text: str) -> ast.Expression:
    with PARSER_LOCK:
        return ast.parse(text, mode="eval")


def load_npy(path: Path, mmap: bool = False) -> np.ndarray:
    """A .npy file's array, never unpickling (a forged file must not run code in the grader).

    Raises OSError or ValueError for a file that is missing, truncated or not an array of plain values.
    """
    if mmap:
        with PARSER_LOCK:
            return np.load(path, mmap_mode="r", allow_pickle=False)
    with open(path, "rb") as stream:
        with PARSER_LOCK:
            version = np.lib.format.read_magic(stream)
            readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            if version not in readers:
                raise ValueError(f"{path}: .npy format {version[0]}.{version[1]}, which the harness never writes")
            shape, fortran_order, dtype = readers[version](stream)
        if dtype.hasobject:
            raise ValueError(f"{path}: holds Python objects, which are never loaded")
        count = math.prod(shape)
        data = np.fromfile(stream, dtype=dtype, count=count)
    if data.size != count:
        raise ValueError(f"{path}: truncated ({data.size} of {count} elements)")
    return data.reshape(shape, order="F" if fortran_order else "C")
