"""Loading .npy files and parsing expressions from many threads at once, as a grade's scoring does."""

from __future__ import annotations

import pickle
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from grader.threadsafe import load_npy, parse_expression


@pytest.mark.parametrize("array", [np.arange(12, dtype=np.float32).reshape(3, 4),
                                   np.asfortranarray(np.arange(12, dtype=np.float64).reshape(3, 4)),
                                   np.arange(5, dtype=">i4"), np.zeros((0, 3), dtype=np.float32),
                                   np.float32(7.5).reshape(())])
def test_loads_what_numpy_saved(array: np.ndarray, tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", array)
    for mmap in (False, True):
        loaded = load_npy(tmp_path / "a.npy", mmap=mmap)
        assert loaded.dtype == array.dtype and loaded.shape == array.shape and np.array_equal(loaded, array)


def test_refuses_pickles_and_truncated_files(tmp_path: Path) -> None:
    np.save(tmp_path / "objects.npy", np.array([{"x": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="Python objects"):
        load_npy(tmp_path / "objects.npy")
    np.save(tmp_path / "whole.npy", np.arange(100, dtype=np.float32))
    (tmp_path / "cut.npy").write_bytes((tmp_path / "whole.npy").read_bytes()[:-40])
    with pytest.raises(ValueError, match="truncated"):
        load_npy(tmp_path / "cut.npy")
    (tmp_path / "pickle.npy").write_bytes(pickle.dumps([1, 2, 3]))
    with pytest.raises(ValueError):
        load_npy(tmp_path / "pickle.npy")


def test_many_threads_at_once(tmp_path: Path) -> None:
    for i in range(8):
        np.save(tmp_path / f"{i}.npy", np.full((64, 64), i, dtype=np.float32))

    def work(i: int) -> bool:
        expression = parse_expression(f"B * T * max(3 * C, NH * {i})")
        value = eval(compile(expression, "<shape>", "eval"), {"max": max}, {"B": 2, "T": 3, "C": 4, "NH": 1})
        return value == 2 * 3 * max(12, i) and float(load_npy(tmp_path / f"{i % 8}.npy")[0, 0]) == i % 8

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(work, range(2000)))
