"""The grader's own data files travel inside the package: an installed grader (not the editable
install of this checkout) needs the repository only for its assignments, through $KERNEL_GRADER_HOME."""

from __future__ import annotations

import glob
import importlib.resources
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import grader
from grader.dispatch import slurm
from grader.assignment import PROJECT_ROOT

PACKAGE = Path(grader.__file__).resolve().parent
NOT_DATA = ("*.py", "*.pyc", "*.so", "*.o")  # the package's code, and what running it leaves


def data_files() -> set[str]:
    """Every file in the package that is not its Python code, relative to the repository's root."""
    return {p.relative_to(PACKAGE.parent).as_posix() for p in PACKAGE.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and not any(p.match(n) for n in NOT_DATA)}


def declared_files() -> set[str]:
    """The files that pyproject's [tool.setuptools.package-data] puts into a wheel."""
    package_data = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    found = set()
    for package, patterns in package_data.items():
        folder = PACKAGE.parent / package.replace(".", "/")
        for pattern in patterns:
            found |= {Path(p).relative_to(PACKAGE.parent).as_posix()
                      for p in glob.glob(str(folder / pattern), recursive=True) if Path(p).is_file()}
    return found


def test_the_slurm_job_template_is_inside_the_package() -> None:
    assert slurm.TEMPLATE.is_file() and slurm.TEMPLATE.is_relative_to(PACKAGE)
    resource = importlib.resources.files("grader.dispatch").joinpath("templates", "grade-array.sbatch")
    assert resource.read_text() == slurm.TEMPLATE.read_text()
    assert "{{ task_command }}" in resource.read_text()


def test_every_data_file_of_the_package_is_declared_as_package_data() -> None:
    data = data_files()
    assert "grader/dispatch/templates/grade-array.sbatch" in data
    assert "grader/report/templates/report.html.j2" in data
    assert data - declared_files() == set(), "add them to [tool.setuptools.package-data] in pyproject.toml"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package as setuptools lays it out for a wheel (`build_py`, offline: no wheel, no pip install), in a
    folder of its own, beside no repository: what site-packages holds after a non-editable install."""
    pytest.importorskip("setuptools")
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copyfile(PROJECT_ROOT / name, source / name)
    shutil.copytree(PACKAGE, source / "grader", ignore=shutil.ignore_patterns("__pycache__", *NOT_DATA[1:]))
    built = subprocess.run([sys.executable, "-c", "import sys, setuptools; sys.argv = ['setup.py', '-q', 'build_py', "
                            f"'--build-lib', {str(root / 'site-packages')!r}]; setuptools.setup()"],
                           cwd=source, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    return root / "site-packages"


def run_installed(installed: Path, code: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KERNEL_GRADER_HOME")}
    return subprocess.run([sys.executable, "-c", code], cwd=installed.parent, capture_output=True, text=True,
                          env={**environment, "PYTHONPATH": str(installed), **env}, timeout=300)


def test_a_built_package_holds_its_data_files(installed: Path) -> None:
    built = {p.relative_to(installed).as_posix() for p in installed.rglob("*")
             if p.is_file() and not any(p.match(n) for n in NOT_DATA)}
    assert built == data_files()


def test_an_installed_grader_finds_its_template_and_asks_for_kernel_grader_home(installed: Path) -> None:
    code = ("import grader, grader.dispatch.slurm as s, grader.report.render as r\n"
            "print(grader.__file__); print(s.TEMPLATE.is_file(), s.TEMPLATE)\n"
            "r.environment(autoescape=True).get_template('report.html.j2')\n"
            "from grader.assignment import list_assignments\n"
            "print(' '.join(a.name for a in list_assignments()))\n")
    alone = run_installed(installed, code)
    assert alone.returncode == 1 and alone.stdout.startswith(str(installed / "grader")), alone.stdout + alone.stderr
    assert f"True {installed / 'grader' / 'dispatch' / 'templates' / 'grade-array.sbatch'}" in alone.stdout
    assert "no assignments folder at" in alone.stderr and "set KERNEL_GRADER_HOME" in alone.stderr
    with_home = run_installed(installed, code, KERNEL_GRADER_HOME=str(PROJECT_ROOT))
    assert with_home.returncode == 0, with_home.stderr
    assert "flash-attention-cpu" in with_home.stdout.splitlines()[-1].split()
