"""The compiled-kernel cache carried between one submission's harnesses (grader/runner/kernel_cache.py): what it takes
back from a harness's home and refuses, and, through real harnesses of the python target, that a later harness of the
same submission finds what an earlier one compiled while another grading starts without it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from grader.options import Options
from grader.pipeline import grade
from grader.runner import kernel_cache
from grader.boundary.runtimes import runtime_named
from grader.runner.kernel_cache import FOLDER, KernelCache, uses_kernel_cache
from grader.assignment import load_assignment
from grader.targets import target_with
from grader.timing.run import swept_cases

from conftest import with_time_limit

CUPY_CACHE = (runtime_named("cupy").kernel_cache_env,)  # the variable CuPy's cache folder is named by


def test_only_regular_files_with_cache_names_are_taken_back_and_seeded(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path / "cache", CUPY_CACHE)
    cache.folder.mkdir()
    first = tmp_path / "home-1"
    left = first / FOLDER
    left.mkdir(parents=True)
    (left / "0123abcd_2.0.cubin").write_bytes(b"compiled")
    (left / "link.cubin").symlink_to("/etc/passwd")  # a link to another file is never read
    (left / "folder").mkdir()
    os.mkfifo(left / "pipe")  # reading it would block
    (left / "name with spaces").write_text("x")
    cache.take_back(first)
    assert sorted(p.name for p in cache.folder.iterdir()) == ["0123abcd_2.0.cubin"]

    second = tmp_path / "home-2"
    second.mkdir()
    cache.seed(second)
    assert (second / FOLDER / "0123abcd_2.0.cubin").read_bytes() == b"compiled"
    assert cache.env(second) == {"CUPY_CACHE_DIR": str(second / FOLDER)}


def test_a_cache_folder_replaced_by_a_link_takes_nothing_back(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret_1.cubin").write_text("not the harness's")
    home = tmp_path / "home"
    home.mkdir()
    (home / FOLDER).symlink_to(elsewhere)
    cache = KernelCache(tmp_path / "cache", CUPY_CACHE)
    cache.folder.mkdir()
    cache.take_back(home)
    assert list(cache.folder.iterdir()) == []


def test_a_file_past_the_size_bound_is_not_taken_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernel_cache, "MAX_FILE_BYTES", 4)
    home = tmp_path / "home"
    (home / FOLDER).mkdir(parents=True)
    (home / FOLDER / "big_1.cubin").write_bytes(b"12345")
    (home / FOLDER / "small_1.cubin").write_bytes(b"1234")
    cache = KernelCache(tmp_path / "cache", CUPY_CACHE)
    cache.folder.mkdir()
    cache.take_back(home)
    assert [p.name for p in cache.folder.iterdir()] == ["small_1.cubin"]


def test_only_a_pack_that_compiles_kernels_at_run_time_carries_a_cache() -> None:
    assert uses_kernel_cache(target_with("python", ("scipy", "cupy")))
    assert not uses_kernel_cache(target_with("python", ("scipy",)))
    assert not uses_kernel_cache(target_with("cuda"))


# Its first case leaves a "compiled kernel" in the cache and crashes, so the next case runs in a fresh harness; the
# later cases are right only where that harness found the file.
CARRIED_AXPY = '''\
import os


def axpy(a, x, y, out, n):
    marker = os.path.join(os.environ.get("CUPY_CACHE_DIR", "/nonexistent"), "compiled_1.cubin")
    if n == 1:
        with open(marker, "w") as file:
            file.write("kernel")
        os._exit(3)
    if os.path.exists(marker):
        out[:] = a * x + y
'''


def test_a_later_harness_of_the_submission_finds_what_an_earlier_one_compiled(
        tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pack = with_time_limit(load_assignment("array-kernels-python"), 5.0)
    submission = tmp_path / "submission"
    shutil.copytree(pack.reference_dir, submission)
    (submission / "kernels" / "axpy.py").write_text(CARRIED_AXPY)
    options = Options(cache_dir=cache_dir, kernels=("axpy",))

    without = grade(submission, pack, options)
    assert [c.status for c in without.kernels[0].cases] == ["crashed", "failed", "failed"]

    monkeypatch.setattr(kernel_cache, "cache_variables", lambda target: CUPY_CACHE)
    for _ in range(2):  # each grading starts from an empty cache: the crash is the first case's every time
        carried = grade(submission, pack, options)
        assert [c.status for c in carried.kernels[0].cases] == ["crashed", "passed", "passed"]


def test_a_sweep_times_the_cases_that_carry_its_parameter_or_the_sweep_cases() -> None:
    spmv = load_assignment("sparse-spmv-spgemm").kernel("spmv")
    assert [c.name for c in swept_cases(spmv, "density")] == [c.name for c in spmv.cases if "density" in c.params]
    assert len(swept_cases(spmv, "density")) == 5
    assert swept_cases(spmv, "no-such-parameter") == spmv.cases
    flash = load_assignment("flash-attention-cpu").base_kernels[0]
    assert flash.sweep_cases and swept_cases(flash, "N") == flash.sweep_cases
