"""The harness's imports' bytecode, filled once where the machine keeps none (grader/runner/bytecode.py)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

import grader.pipeline
from grader.runner import bytecode
from grader.runner.bytecode import STAMP, harness_bytecode
from grader.sandbox import Limits, Mounts, sandbox_named
from grader.sandbox.local import LocalSandbox
from grader.assignment import Assignment
from grader.status import KernelStatus

from conftest import grade_variant

_WHICH = shutil.which


def _compiled_for(folder: Path, module: str) -> Path:
    """Where an interpreter run with PYTHONPYCACHEPREFIX=folder looks for `module`'s bytecode."""
    source = Path(importlib.util.find_spec(module).origin).resolve()  # type: ignore[arg-type, union-attr]
    return folder / source.parent.relative_to("/") / f"{source.stem}.{sys.implementation.cache_tag}.pyc"


def test_nothing_is_filled_where_numpy_has_its_own_bytecode(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bytecode, "lacks_bytecode", lambda module="numpy": False)
    assert harness_bytecode(tmp_path) is None
    assert not (tmp_path / "bytecode").exists()


def test_the_folder_is_filled_once_and_again_when_the_sources_change(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    folder = harness_bytecode(tmp_path, needed=True)
    assert folder is not None
    for module in ("numpy", "numpy._core.numeric", "grader.boundary.harness", "grader.boundary.c_abi", "json"):
        assert _compiled_for(folder, module).is_file(), module
    stamp = folder / STAMP
    filled = stamp.stat().st_mtime_ns
    assert harness_bytecode(tmp_path, needed=True) == folder
    assert stamp.stat().st_mtime_ns == filled  # up to date: not filled again
    pyc = _compiled_for(folder, "grader.boundary.harness")
    pyc.unlink()
    monkeypatch.setattr(bytecode, "_sources_digest", lambda: "the grader was edited")
    assert harness_bytecode(tmp_path, needed=True) == folder
    assert pyc.is_file() and stamp.read_text() == "the grader was edited"


@pytest.fixture(params=["process", "bwrap", "unshare"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "bwrap" and _WHICH("bwrap") is None:
        pytest.skip("bubblewrap is not installed (bash ci/setup/sandbox.sh)")
    if request.param == "unshare":
        if not LocalSandbox()._can_unshare():
            pytest.skip("the unshare fallback needs root, setpriv and util-linux unshare")
        monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "bwrap" else _WHICH(name, *a, **k))
    return request.param


def test_a_sandboxed_harness_imports_from_the_folder_and_cannot_write_it(backend: str, tmp_path: Path) -> None:
    folder = harness_bytecode(tmp_path / "cache", needed=True)
    assert folder is not None
    writable = tmp_path / "w"
    writable.mkdir()
    code = ("import sys, numpy, grader.boundary.harness\n"
            "try:\n"
            f"    open({str(folder / 'planted.pyc')!r}, 'w').write('x')\n"
            "    print('WROTE')\n"
            "except OSError as error:\n"
            "    print('REFUSED', type(error).__name__)\n")
    sandbox = sandbox_named("local" if backend != "process" else "process")
    process = sandbox.start([sys.executable, "-v", "-c", code], cwd=writable,
                            mounts=Mounts(read_only=(folder,), writable=writable), limits=Limits(),
                            stdout=tmp_path / "o", stderr=tmp_path / "e",
                            env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1",
                                 "PYTHONPATH": str(bytecode.GRADER_ROOT), "PYTHONPYCACHEPREFIX": str(folder)})
    try:
        assert process.wait(60) == 0, (tmp_path / "e").read_text()
    finally:
        process.kill()
    verbose = (tmp_path / "e").read_text()
    # `python -v` names the bytecode each module was loaded from.
    for module in ("numpy", "grader.boundary.harness"):
        assert f"code object from '{_compiled_for(folder, module)}'" in verbose, module
    assert (tmp_path / "o").read_text().startswith("REFUSED")
    assert not (folder / "planted.pyc").exists()


def test_a_submission_graded_with_the_folder_gets_its_marks(flash: Assignment, tmp_path: Path, cache_dir: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    filled: list[Path | None] = []

    def always(cache: Path, needed: bool | None = None) -> Path | None:
        filled.append(harness_bytecode(tmp_path / "cache", needed=True))
        return filled[-1]

    monkeypatch.setattr(grader.pipeline, "harness_bytecode", always)
    result = grade_variant(flash, None, tmp_path, cache_dir, sandbox="local")
    assert filled and filled[0] is not None
    assert result.score == result.max_score > 0
    assert all(k.status is KernelStatus.PASSED for k in result.kernels), [(k.name, k.status) for k in result.kernels]
