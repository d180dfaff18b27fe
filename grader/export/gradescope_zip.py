"""The Gradescope autograder zip: setup.sh and run_autograder at its root, the grader and what grading one
assignment needs of its folder.

Gradescope unzips it into /autograder/source, runs setup.sh once to build its image, then
run_autograder per submission, which grades the upload and writes results.json
(grader.report.gradescope) where Gradescope reads it.

The zip ships nothing a student could use that grading does not need: no samples (the autograder
grades uploads), no other assignment than the one exported and the ones it is `based_on` (their spec, NumPy
modules and the layers of its template and reference they hold), and of the reference only what the template
gives students too (the interface headers an upload may lack) where the gold comes from NumPy (`gold = "numpy"`). What it ships is the
grader's alone at run time: run_autograder makes it root's, 0700/0600, before the first build
(docs/sandbox.md).
"""

from __future__ import annotations

import functools
import shutil
import stat
import zipfile
from pathlib import Path

import jinja2

from grader.assignment import PROJECT_ROOT, Assignment
from grader.targets import packages_to_install, target_of

# What the zip carries of this repository: the grader itself (pyproject.toml and the README it names, for
# setup.sh's `pip install -e`) and what grading the one assignment needs of its folder.
PACKAGE_FILES = ("pyproject.toml", "README.md")
ASSIGNMENT_LEFT_OUT = ("samples",)  # the autograder grades uploads, not samples
INHERITED_FILES = ("assignment.toml", "inputs.py", "numpy_reference.py")  # what a `based_on` assignment reads of its base


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
        for path in shipped_files(assignment):
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


def shipped_files(assignment: Assignment) -> list[Path]:
    """The repository's files the zip carries under kernel-grader/, in order."""
    files = [PROJECT_ROOT / name for name in PACKAGE_FILES if (PROJECT_ROOT / name).is_file()]
    files += _tree(PROJECT_ROOT / "grader")
    folder = assignment.root
    files += [p for p in sorted(folder.iterdir()) if p.is_file()]
    for root in sorted(p for p in folder.iterdir() if p.is_dir() and p.name not in ASSIGNMENT_LEFT_OUT):
        found = _tree(root)
        if root.name == "reference" and assignment.gold == "numpy":
            found = [p for p in found if _given_to_students(assignment, p)]
        files += found
    files += _inherited_files(assignment)
    return files


def _tree(root: Path) -> list[Path]:
    return [p for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts
            and p.suffix not in (".pyc", ".so", ".o")]


def _given_to_students(assignment: Assignment, path: Path, folder: Path | None = None) -> bool:
    """Whether the template holds this reference file as it is (an interface header: `interface_headers`)."""
    relative = path.relative_to(folder or assignment.root / "reference").as_posix()
    twin = assignment.tree_file("template", relative)
    return twin.is_file() and twin.read_bytes() == path.read_bytes()


def _inherited_files(assignment: Assignment) -> list[Path]:
    """Of the assignments `assignment` is `based_on`, up the chain: their spec and NumPy modules, and the layers of
    its template and reference they hold (grader.assignment.trees); of a NumPy-gold reference, only what the
    template gives too. Nothing else of them."""
    files: list[Path] = []
    for folder in assignment.lineage[:-1]:
        files += [folder / name for name in INHERITED_FILES if (folder / name).is_file()]
        files += _tree(folder / "template") if (folder / "template").is_dir() else []
        if (folder / "reference").is_dir():
            files += [p for p in _tree(folder / "reference")
                      if assignment.gold == "reference" or _given_to_students(assignment, p, folder / "reference")]
    return files
