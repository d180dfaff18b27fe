"""Fixtures that build real things: packs copied to temp folders, real compiles, real harness runs."""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from grader.options import Options
from grader.pipeline import grade
from grader.results import Result
from grader.samples import Sample, compose, variants
from grader.assignment import ASSIGNMENTS_DIR, Assignment, load_assignment

import hermetic

SESSION = pytest.StashKey[hermetic.Session]()
REPLACED = pytest.StashKey[dict]()


# The PyTorch packs' harnesses import torch, which the `test` extra leaves out (pyproject.toml says why).
needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="PyTorch is not installed: the PyTorch packs' harnesses import it (pip install -e '.[test,torch]'; "
           "left out of the test extra for CI's time)")


def gpu_skip_reason() -> str | None:
    from grader.device import unavailable_reason

    return unavailable_reason("cuda")


# Modules whose tests run one after another on one worker under `pytest -n auto --dist loadgroup` (the
# README's command): the hostile corpus (fork bombs and memory hogs load the whole machine; one loopback
# port), Slurm (one node of the machine's CPUs), the GPU suites (timing needs the GPU to itself) and the
# Gradescope images.
SERIAL_GROUPS = {
    "hostile": ("test_sandbox_attacks", "test_harnesses_at_once", "test_sandbox_bounds",
                "test_sandbox", "test_grading_rules", "test_batch_isolation"),
    "slurm": ("test_slurm",),
    # Its autograder images, one per Ubuntu version, made once: workers of their own would each make them.
    "gradescope-images": ("test_gradescope_images",),
    # A module-scoped fixture that builds or sweeps for tens of seconds: its tests on one worker, so that two
    # workers never do the same work at once (the build cache is shared only once a build is done).
    "gpt2-m2-builds": ("test_gpt2_m2_pack",),
    # Each sample graded once per module; every harness imports PyTorch (~1-2 s).
    "contextual-sparsity": ("test_contextual_sparsity_pack",),
    "gpt2-m3-ops-builds": ("test_gpt2_m3_ops",),
    # req_4's six nvcc builds; the FlashAttention emulations on gpt2-full's inputs (~20 s of NumPy).
    "gpt2-m3-flash": ("test_gpt2_m3_flash", "test_gpt2_m3_flash_emulated"),
    "tiled-matmul-builds": ("test_tiled_matmul_pack",),
    "flash-sweep": ("test_flash_attention_sweep",),
    "flash-backward-sweep": ("test_flash_backward_sweep",),
    "gpt2-m3-local-builds": ("test_gpt2_m3_local",),
}


def serial_group(module: str) -> str | None:
    if module.startswith("test_gpu_") or module == "test_device_memory":
        return "gpu"
    return next((group for group, modules in SERIAL_GROUPS.items() if module in modules), None)


@pytest.hookimpl(trylast=True)  # after pytest's tmpdir plugin has made the run's temporary folder
def pytest_configure(config: pytest.Config) -> None:
    """The whole session hermetic (tests/hermetic.py): its own home, cache, locks and working folder, set
    here so that the xdist workers and every subprocess inherit them."""
    factory = getattr(config, "_tmp_path_factory", None)  # what xdist itself reads the base from
    session, replaced = hermetic.isolate(factory.getbasetemp() if factory is not None else None)
    config.stash[SESSION] = session
    config.stash[REPLACED] = replaced


def pytest_unconfigure(config: pytest.Config) -> None:
    if REPLACED in config.stash:
        hermetic.restore(config.stash[REPLACED])


@pytest.fixture(scope="session")
def hermetic_session(pytestconfig: pytest.Config) -> hermetic.Session:
    return pytestconfig.stash[SESSION]


@pytest.fixture(scope="session", autouse=True)
def session_working_folder(hermetic_session: hermetic.Session) -> Iterator[Path]:
    """Every test runs in the session's own folder: a default output (./grades.sqlite) never lands in the
    repository. Set at the first test, not at start-up: the xdist workers are started from the repository."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(hermetic_session.cwd)
        yield hermetic_session.cwd


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if (group := serial_group(item.module.__name__ if item.module else "")) is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    if not any("gpu" in item.keywords for item in items):
        return
    reason = gpu_skip_reason()
    if reason:
        marker = pytest.mark.skip(reason=f"needs a CUDA GPU: {reason}")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(marker)


@pytest.fixture(scope="session")
def cache_dir(hermetic_session: hermetic.Session) -> Path:
    """One build/inputs/gold cache for the whole session, as one grading machine would have: shared by the
    xdist workers of a run (the cache is built for many writers), so that no build is made twice. It is the
    session's $KERNEL_GRADER_CACHE: a test that passes no cache gets the same one, never the user's."""
    return hermetic_session.cache


def with_time_limit(assignment: Assignment, seconds: float) -> Assignment:
    """The same pack with a shorter per-call limit, so that hostile loops are stopped quickly."""
    kernels = tuple(dataclasses.replace(k, time_limit_s=seconds, time_budget_s=2 * seconds) for k in assignment.kernels)
    # The forward-pass checks compose the kernels: a looping one would cost them their own limit.
    checks = tuple(dataclasses.replace(k, time_limit_s=seconds, time_budget_s=seconds) for k in assignment.check_kernels)
    return dataclasses.replace(assignment, kernels=kernels, check_kernels=checks, submission_time_limit_s=None)


def with_sweep_up_to(assignment: Assignment, largest: int, parameter: str = "N") -> Assignment:
    """The same pack with its sweep cases cut at `parameter` <= largest, so that a real sweep stays short."""
    kernels = tuple(dataclasses.replace(k, sweep_cases=tuple(c for c in k.sweep_cases
                                                             if c.params[parameter] <= largest))
                    for k in assignment.kernels)
    return dataclasses.replace(assignment, kernels=kernels)


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


def copy_assignment(name: str, destination: Path) -> Path:
    """A writable copy of an assignment's whole folder (reference, template, samples), as destination/assignments/<name>."""
    return Path(shutil.copytree(ASSIGNMENTS_DIR / name, destination / "assignments" / name))
