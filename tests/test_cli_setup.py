"""A grading machine checked before the first student: a broken pack is listed as broken while the others keep
working, a package a pack's harnesses import but this machine lacks stops `grade` with the install command (never a
student's `crashed`), and `grader demo` says what it skipped and exits 1 where a reference misses full marks."""

from __future__ import annotations

import shutil
from pathlib import Path

from grader.assignment import ASSIGNMENTS_DIR

from test_cli import grader

PACK = "array-kernels-python"  # the smallest pack: two Python kernels, gold from NumPy


def home_with(tmp_path: Path, *packs: str) -> Path:
    """A grader home (KERNEL_GRADER_HOME) whose assignments/ holds copies of `packs`."""
    home = tmp_path / "home"
    for name in packs:
        shutil.copytree(ASSIGNMENTS_DIR / name, home / "assignments" / name)
    return home


def set_in_assignment_table(spec: Path, line: str) -> None:
    text = spec.read_text()
    spec.write_text(text.replace("[assignment]\n", f"[assignment]\n{line}\n", 1))


def test_a_broken_pack_is_listed_with_its_error_and_the_others_still_grade(tmp_path: Path, cache_dir: Path) -> None:
    home = home_with(tmp_path, PACK)
    (home / "assignments" / "broken-pack").mkdir()
    (home / "assignments" / "broken-pack" / "assignment.toml").write_text("[assignment\nname = ")
    env = {"KERNEL_GRADER_HOME": str(home)}

    listed = grader("list", cache_dir=cache_dir, env=env)
    checked = grader("check", str(home / "assignments" / PACK / "reference"), cache_dir=cache_dir, env=env)

    assert listed.returncode == 0, listed.stderr
    assert PACK in listed.stdout and "axpy" in listed.stdout
    assert "broken broken-pack:" in listed.stdout and "assignment.toml" in listed.stdout
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "broken-pack" not in checked.stdout + checked.stderr


def test_a_package_missing_here_stops_grade_before_anyone_is_graded(tmp_path: Path, cache_dir: Path) -> None:
    home = home_with(tmp_path, PACK)
    set_in_assignment_table(home / "assignments" / PACK / "assignment.toml",
                            'python_packages = ["kg_package_nobody_has"]')
    env = {"KERNEL_GRADER_HOME": str(home)}

    graded = grader("grade", str(home / "assignments" / PACK / "reference"), "-a", PACK, "--json",
                    str(tmp_path / "r.json"), cache_dir=cache_dir, env=env)

    assert graded.returncode != 0
    assert "kg_package_nobody_has, which is not installed here (python3 -m pip install kg_package_nobody_has)" \
        in graded.stderr + graded.stdout
    assert "crashed" not in graded.stdout and not (tmp_path / "r.json").exists()


def test_demo_says_what_it_skipped_and_fails_where_a_reference_misses_full_marks(tmp_path: Path,
                                                                                  cache_dir: Path) -> None:
    home = home_with(tmp_path, PACK)
    shutil.copytree(ASSIGNMENTS_DIR / PACK, home / "assignments" / "needs-a-package")
    spec = home / "assignments" / "needs-a-package" / "assignment.toml"
    spec.write_text(spec.read_text().replace(f'name = "{PACK}"', 'name = "needs-a-package"'))
    set_in_assignment_table(spec, 'python_packages = ["kg_package_nobody_has"]')
    axpy = home / "assignments" / PACK / "reference" / "kernels" / "axpy.py"
    axpy.write_text(axpy.read_text().replace("np.float32(a) * x + y", "np.float32(a) * x - y"))

    demo = grader("demo", cache_dir=cache_dir, env={"KERNEL_GRADER_HOME": str(home)})

    assert demo.returncode == 1, demo.stdout + demo.stderr
    assert "skipped needs-a-package:" in demo.stdout and "kg_package_nobody_has" in demo.stdout
    assert f"not as expected: {PACK} reference: expected full marks" in demo.stdout
