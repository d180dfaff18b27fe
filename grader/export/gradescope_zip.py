"""The Gradescope autograder zip: setup.sh and run_autograder at its root, the grader and one assignment's folder.

Gradescope unzips it into /autograder/source, runs setup.sh once to build its image, then
run_autograder per submission, which grades the upload and writes results.json
(grader.report.gradescope) where Gradescope reads it.
"""

from __future__ import annotations

import functools
import shutil
import stat
import zipfile
from pathlib import Path

import jinja2

from grader.spec import ASSIGNMENTS_DIR, PROJECT_ROOT, Assignment
from grader.targets import packages_to_install, target_of

# What the zip carries of this repository: the grader itself and the one assignment's folder, but for its
# sample submissions (the autograder grades uploads, not samples).
PACKAGE_FILES = ("pyproject.toml", "README.md")
ASSIGNMENT_LEFT_OUT = ("samples",)


def build_autograder(assignment: Assignment, out_dir: Path, secret: str | None = None,
                     sandbox: str = "local") -> Path:
    """Write `autograder-<name>.zip` (setup.sh, run_autograder, the grader, the assignment) to out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    zip_path = out_dir / f"autograder-{assignment.name}.zip"
    context = {"assignment": assignment, "has_secret": secret is not None, "sandbox": sandbox,
               "needs_gpu": target_of(assignment).needs_gpu, "packages": packages_to_install(assignment)}
    executable = stat.S_IFREG | 0o755
    with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in ("setup.sh", "run_autograder"):
            info = zipfile.ZipInfo(name)
            info.external_attr = executable << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, _templates().get_template(f"gradescope/{name}.j2").render(context))
        if secret is not None:
            archive.writestr("secret", secret + "\n")
        for path in _grader_files(assignment):
            info = zipfile.ZipInfo.from_file(path, f"kernel-grader/{path.relative_to(PROJECT_ROOT).as_posix()}")
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
    return zip_path


def unpack(zip_path: Path, source_dir: Path) -> None:
    """Extract as Gradescope does into /autograder/source, keeping the executable bits."""
    with zipfile.ZipFile(zip_path) as archive:
        for info in archive.infolist():
            target = source_dir / info.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as member, open(target, "wb") as out:
                shutil.copyfileobj(member, out)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                target.chmod(mode)


@functools.cache
def _templates() -> jinja2.Environment:
    """setup.sh's and run_autograder's templates (shell scripts: nothing escaped)."""
    return jinja2.Environment(loader=jinja2.PackageLoader("grader.export", "templates"), autoescape=False,
                              trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True)


def _grader_files(assignment: Assignment) -> list[Path]:
    files = [PROJECT_ROOT / name for name in PACKAGE_FILES if (PROJECT_ROOT / name).is_file()]
    folder = ASSIGNMENTS_DIR / assignment.name
    files += [p for p in sorted(folder.iterdir()) if p.is_file()]
    roots = [PROJECT_ROOT / "grader"] + [p for p in sorted(folder.iterdir())
                                        if p.is_dir() and p.name not in ASSIGNMENT_LEFT_OUT]
    for root in roots:
        files += [p for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts
                  and p.suffix not in (".pyc", ".so", ".o")]
    return files
