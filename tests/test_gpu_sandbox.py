"""The attacker's GPU corpus (assignments/gpt2-m1/samples/attack-*) and compute-sanitizer, on a real GPU.

Marked `gpu`: skipped with the reason where there is no CUDA device. The local
(namespace) backend must work with the GPU visible; docker runs where the daemon has the NVIDIA
runtime and `$KERNEL_GRADER_IMAGE` is the CUDA image (`ci/Dockerfile` with its default base).
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import pytest

from grader.build import build_submission
from grader.cases import Seed, prepare_inputs
from grader.runner import Call, run_calls
from grader.samples import compose, variants
from grader.sandbox.local import LocalSandbox
from grader.sanitizer import sanitizer_binary
from grader.assignment import Assignment, load_assignment

from conftest import grade_variant, with_time_limit
from sandbox_fixtures import ATTACK_PORT, loopback_listener, docker_unavailable_reason

pytestmark = pytest.mark.gpu

ATTACKS = {v.name: v for v in variants(load_assignment("gpt2-m1")) if v.name.startswith("attack-")}
SECRET = "correct-horse-battery-staple"


@pytest.fixture(scope="module")
def gpt2() -> Assignment:
    return with_time_limit(load_assignment("gpt2-m1"), 20.0)


@pytest.fixture
def host_listener():
    with loopback_listener(ATTACK_PORT) as (_, accepted):
        yield accepted


def _backends() -> list:
    return ["local", pytest.param("docker", marks=pytest.mark.skipif(
        os.environ.get("KERNEL_GRADER_GPU_DOCKER") != "1",
        reason="set KERNEL_GRADER_GPU_DOCKER=1 where dockerd has the NVIDIA runtime and the CUDA image is built"))]


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_gpu_attack_is_contained(name: str, backend: str, gpt2: Assignment, tmp_path: Path, cache_dir: Path,
                                 host_listener, monkeypatch: pytest.MonkeyPatch) -> None:
    if backend == "docker" and (reason := docker_unavailable_reason()):
        pytest.skip(reason)
    monkeypatch.setenv("KERNEL_GRADER_SECRET", SECRET)
    variant = ATTACKS[name]
    result = grade_variant(gpt2, variant, tmp_path, cache_dir, sandbox=backend, secret=SECRET)
    by_name = {k.name: k for k in result.kernels}
    assert by_name[variant.kernel].status == variant.expect, by_name[variant.kernel].message
    for kernel_name, kernel in by_name.items():
        if kernel_name not in (variant.kernel, "forward"):  # the check composes the attacker's kernel (weight 0)
            assert kernel.status == "passed" and kernel.score == kernel.max_score, (kernel_name, kernel.message)
    assert "ATTACK SUCCEEDED" not in result.to_json() and SECRET not in result.to_json()
    assert host_listener == []
    if name == "attack-residual-mutates-inputs":
        assert "wrote into its input(s) inp1" in by_name["residual"].message
    if name == "attack-gelu-device-memory-hog":
        assert "case '" in by_name["gelu"].message
    if name == "attack-gelu-small-oob-write":
        assert "wrote out of bounds: 32 element(s) past the end of out" in by_name["gelu"].message
    if name == "attack-static-constructor-segfault":  # not "out: never written": the store really runs
        first = by_name["encoder"].cases[0]
        assert first.while_loading and first.signal == "SIGSEGV", first.message
        assert "crashed while its library was being loaded (segmentation fault in a static constructor)" \
            in by_name["encoder"].message


def test_memcheck_finds_the_read_past_the_end_and_deducts(gpt2: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    if sanitizer_binary() is None:
        pytest.skip("compute-sanitizer is not installed")
    result = grade_variant(gpt2, ATTACKS["attack-gelu-small-oob-read"], tmp_path, cache_dir, sanitizer=True,
                           kernels=("gelu", "residual"))
    gelu = next(k for k in result.kernels if k.name == "gelu")
    assert gelu.status == "failed" and gelu.score == gelu.max_score * 0.5, gelu.message
    assert any("Invalid __global__ read" in line for line in gelu.sanitizer), gelu.sanitizer
    residual = next(k for k in result.kernels if k.name == "residual")
    assert residual.status == "passed" and residual.sanitizer == []


def test_reference_is_clean_under_every_sanitizer_tool_the_spec_asks(gpt2: Assignment, tmp_path: Path,
                                                                      cache_dir: Path) -> None:
    if sanitizer_binary() is None:
        pytest.skip("compute-sanitizer is not installed")
    result = grade_variant(gpt2, None, tmp_path, cache_dir, sanitizer=True)
    for kernel in result.kernels:
        assert kernel.status == "passed" and kernel.sanitizer == [], (kernel.name, kernel.sanitizer)
    assert "sanitizer" in result.stages


def _available_host_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) << 10
    return 0


@pytest.mark.parametrize("name", ["attack-gelu-host-memory-hog", "attack-gelu-pinned-memory-hog"])
def test_host_memory_hog_is_stopped_at_the_specs_limit_without_cgroups(name: str, gpt2: Assignment, tmp_path: Path,
                                                                       cache_dir: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """16 GiB touched (bounded) against a 4 GiB limit, on the path GPU runners without cgroups take."""
    monkeypatch.setenv("KERNEL_GRADER_NO_CGROUPS", "1")
    limited = dataclasses.replace(gpt2, memory_limit_mb=4096)
    before = _available_host_bytes()
    result = grade_variant(limited, ATTACKS[name], tmp_path, cache_dir, kernels=("gelu", "residual"))
    gelu, residual = (next(k for k in result.kernels if k.name == n) for n in ("gelu", "residual"))
    assert gelu.status == "crashed" and gelu.score == 0, gelu.message
    assert all("exceeded the memory limit (4 GiB)" in c.message for c in gelu.cases), [c.message for c in gelu.cases]
    assert residual.status == "passed" and residual.score == residual.max_score
    assert any("memory 4096 MiB" in line for line in result.environment.sandbox_enforced), \
        result.environment.sandbox_enforced
    # Nothing of it stays behind: the machine has its memory back, within seconds (a killed process's 4 GiB, and
    # the pages the driver pinned for it, are freed as it exits, which may end after the grader has moved on).
    deadline = time.monotonic() + 15
    while _available_host_bytes() <= before - (2 << 30) and time.monotonic() < deadline:
        time.sleep(0.25)
    assert _available_host_bytes() > before - (2 << 30), (before >> 20, _available_host_bytes() >> 20)


def test_a_kernel_holding_the_card_fails_alone_and_the_next_harness_finds_it_free(gpt2: Assignment, tmp_path: Path,
                                                                                  cache_dir: Path) -> None:
    folder = compose(gpt2, ATTACKS["attack-gelu-device-memory-hog"], tmp_path / "submission")
    kernels = (gpt2.kernel("gelu"), gpt2.kernel("residual"))
    artifacts = build_submission(gpt2, folder, cache_dir, kernels)
    seed = Seed(gpt2.public_seed)
    calls = [Call(k, c, artifacts[k.name].library, prepare_inputs(gpt2, k, c, seed, cache_dir),  # type: ignore[arg-type]
                  tmp_path / "out" / k.name / c.name) for k in kernels for c in k.cases[:2]]
    report = run_calls(gpt2, calls, LocalSandbox())
    assert [o.status for o in report.outcomes] == ["crashed", "crashed", "ok", "ok"], [o.message for o in report.outcomes]
    assert "of device memory allocated after returning" in report.outcomes[0].message
    # One harness per failed case, then one for residual: each found the card as the first one did.
    assert len(report.free_bytes_at_start) == 3
    first = report.free_bytes_at_start[0]
    assert all(free > first - (1 << 30) for free in report.free_bytes_at_start[1:]), report.free_bytes_at_start


def test_cuda_harnesses_run_as_a_uid_of_their_own_under_its_process_cap(gpt2: Assignment, tmp_path: Path,
                                                                        cache_dir: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """As root without cgroups (the GPU runners' path): each CUDA harness, compute-sanitizer's too, leaves root
    for a uid of the sandbox range, still opens the card (/dev/nvidia* are bound as they are: 0666), and
    says what bounds its processes and what network it sees."""
    if os.geteuid() != 0:
        pytest.skip("sandbox uids are handed out by a grader running as root")
    monkeypatch.setenv("KERNEL_GRADER_NO_CGROUPS", "1")
    sanitizer = sanitizer_binary() is not None
    result = grade_variant(gpt2, None, tmp_path, cache_dir, sanitizer=sanitizer, kernels=("gelu", "residual"))
    for kernel in result.kernels:
        assert kernel.status == "passed" and kernel.score == kernel.max_score, (kernel.name, kernel.message)
        assert kernel.sanitizer == [], (kernel.name, kernel.sanitizer)
    enforced = result.environment.sandbox_enforced
    assert any(line.startswith("runs as uid ") and "this sandbox's alone" in line for line in enforced), enforced
    assert any(line.startswith("processes/threads ") and "RLIMIT_NPROC of uid " in line for line in enforced), enforced
    assert "network: loopback only, seen from inside the harness: lo" in enforced
