"""An assignment's template CI workflow (`template/.github/workflows/grade.yml`): the course's ci/github/grade.yml made
that assignment's.

ci/github/grade.yml runs `grader check` on a self-hosted GPU runner. A template's copy says, for its assignment: GitHub's
hosted runner where its kernels need no GPU; the Python packages its harnesses import, installed beside the grader
(scipy) or as their runtimes say (`grader.boundary.runtimes`: torch from PyTorch's CPU wheel index where there is no
GPU, PyPI's being the multi-GB CUDA build; CuPy's wheel for the runner's CUDA); and `-a NAME`, so that a GPU assignment's
template, which holds its CPU base's files, is never checked as that base.

    python3 -m grader.export.workflow    writes every assignment's copy (tests/test_ci_workflow.py says when one is stale)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grader.assignment import PROJECT_ROOT, Assignment, list_assignments
from grader.boundary.runtimes import needs_gpu_for, pinned, runtimes_of
from grader.targets import packages_to_install, target_of

WORKFLOW = PROJECT_ROOT / "ci" / "github" / "grade.yml"
TEMPLATE_WORKFLOW = Path(".github") / "workflows" / "grade.yml"  # in an assignment's template/
GPU_RUNNER = "runs-on: [self-hosted, gpu]"
HOSTED_RUNNER = "runs-on: ubuntu-latest"
PIP = '"$RUNNER_TEMP/kernel-grader/bin/python" -m pip install --quiet --disable-pip-version-check'
GRADER_INSTALL = f"{PIP} $KERNEL_GRADER_PIP_SPEC"
CHECK = "grader check . --markdown"
INDENT = " " * 10  # a line of the install step's `run: |` block


@dataclass(frozen=True)
class Installs:
    """What a machine set up to check an assignment installs besides the grader, by where each comes from."""

    with_grader: tuple[str, ...]  # from PyPI, in the grader's own pip install (scipy; a GPU assignment's torch)
    # The install step's lines before the grader's, as the assignment's runtimes say (`Runtime.cpu_install`, a CPU assignment's
    # torch from PyTorch's CPU wheel index; `Runtime.apart_install`, CuPy's wheel named for the CUDA major version).
    apart: tuple[str, ...]


def installs(assignment: Assignment) -> Installs:
    """The packages `assignment`'s harnesses import that installing the grader does not bring, by source."""
    packages = packages_to_install(assignment)
    gpu = target_of(assignment).needs_gpu
    apart: list[str] = []
    built_apart: set[str] = set()
    for runtime in runtimes_of(assignment.python_packages):
        entries = [p for p in assignment.python_packages if p in runtime.packages]
        if runtime.cpu_install and not gpu and (own := [pinned(p) for p in entries if pinned(p) in packages]):
            apart += [_line(line, " ".join(own)) for line in runtime.cpu_install]
            built_apart.update(own)
        if runtime.apart_install and any(needs_gpu_for(p) for p in assignment.python_packages
                                         if p.split(".")[0] in runtime.packages):
            apart += [_line(line, "") for line in runtime.apart_install]
    return Installs(tuple(p for p in packages if p not in built_apart), tuple(apart))


def _line(line: str, packages: str) -> str:
    """A runtime's install line with the pip command and its packages put in."""
    return line.replace("{pip}", PIP).replace("{packages}", packages)


def template_workflow(assignment: Assignment) -> str:
    """ci/github/grade.yml as `assignment`'s template carries it."""
    text = WORKFLOW.read_text()
    needed = installs(assignment)
    lines = [*needed.apart, " ".join([GRADER_INSTALL, *needed.with_grader])]
    text = _replace_once(text, f"{INDENT}{GRADER_INSTALL}\n", "".join(f"{INDENT}{line}\n" for line in lines))
    text = _replace_once(text, CHECK, CHECK.replace(" .", f" . -a {assignment.name}"))
    if not target_of(assignment).needs_gpu:
        text = _replace_once(text, f"{GPU_RUNNER}\n", f"{HOSTED_RUNNER}\n")
    return text


def _replace_once(text: str, old: str, new: str) -> str:
    if text.count(old) != 1:  # the course's workflow was edited where a template's copy differs from it
        raise ValueError(f"{WORKFLOW}: expected {old.strip()!r} once, found it {text.count(old)} times")
    return text.replace(old, new)


def main() -> None:
    for assignment in list_assignments():
        path = assignment.root / "template" / TEMPLATE_WORKFLOW  # its own template's: every assignment has one
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template_workflow(assignment))
        print(path)


if __name__ == "__main__":
    main()
