"""Fixtures that build real things: packs copied to temp folders, real compiles, real harness runs."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from grader.pipeline import Options, grade
from grader.results import Result
from grader.samples import Sample, compose, variants
from grader.spec import PROJECT_ROOT, Assignment, load_assignment


def gpu_skip_reason() -> str | None:
    from grader.device import unavailable_reason

    return unavailable_reason("cuda")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not any("gpu" in item.keywords for item in items):
        return
    reason = gpu_skip_reason()
    if reason:
        marker = pytest.mark.skip(reason=f"needs a CUDA GPU: {reason}")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(marker)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One build/inputs/gold cache for the whole session, as one grading machine would have."""
    return tmp_path_factory.mktemp("cache")


def with_time_limit(assignment: Assignment, seconds: float) -> Assignment:
    """The same pack with a shorter per-call limit, so that hostile loops are stopped quickly."""
    kernels = tuple(dataclasses.replace(k, time_limit_s=seconds, time_budget_s=2 * seconds) for k in assignment.kernels)
    # The forward-pass checks compose the kernels: a looping one would cost them their own limit.
    checks = tuple(dataclasses.replace(k, time_limit_s=seconds, time_budget_s=seconds) for k in assignment.forward_kernels)
    return dataclasses.replace(assignment, kernels=kernels, forward_kernels=checks, submission_time_limit_s=None)


@pytest.fixture(scope="session")
def flash() -> Assignment:
    return with_time_limit(load_assignment("flash-attention-cpu"), 3.0)


def grade_variant(assignment: Assignment, variant: Sample | None, workdir: Path, cache_dir: Path,
                  **options: object) -> Result:
    folder = compose(assignment, variant, workdir / (variant.name if variant else "reference"))
    return grade(folder, assignment, Options(cache_dir=cache_dir, **options))  # type: ignore[arg-type]


def variant_params(name: str) -> list:
    assignment = load_assignment(name)
    return [pytest.param(v, id=v.name) for v in variants(assignment)]


def copy_pack(name: str, destination: Path) -> Path:
    """A writable copy of a pack with its reference and template beside it, as in the repository."""
    for folder in ("assignments", "reference", "student_template"):
        shutil.copytree(PROJECT_ROOT / folder / name, destination / folder / name)
    return destination / "assignments" / name
