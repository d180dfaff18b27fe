"""The CUDA arch probe: nvidia-smi is asked once per machine, not once per grader process, and asked
again whenever what could change its answer changes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.targets import cuda


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake driver listing of one GPU and a fake nvidia-smi that counts its calls; the default cache in tmp."""
    gpu = tmp_path / "gpus" / "0000:19:00.0"
    gpu.mkdir(parents=True)
    (gpu / "information").write_text("Model: \t NVIDIA H200\nGPU UUID: \t GPU-1111\nBus Location: \t 0000:19:00.0\n")
    monkeypatch.setattr(cuda, "GPU_LISTING", tmp_path / "gpus")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_smi(bin_dir, "9.0")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("KERNEL_GRADER_CACHE", str(tmp_path / "cache"))
    for name in ("KERNEL_GRADER_CUDA_ARCH", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def fake_smi(bin_dir: Path, answer: str | None) -> None:
    """An nvidia-smi that appends a line to `calls` beside it, then answers (or fails, for None)."""
    body = f"echo {answer}" if answer is not None else "exit 9"
    script = bin_dir / "nvidia-smi"
    script.write_text(f"#!/bin/sh\necho called >> '{bin_dir / 'calls'}'\n{body}\n")
    script.chmod(0o755)


def calls(machine: Path) -> int:
    record = machine / "bin" / "calls"
    return len(record.read_text().splitlines()) if record.exists() else 0


def test_a_second_probe_reads_the_first_ones_answer(machine: Path) -> None:
    assert cuda.detect_cuda_arch() == "sm_90"
    assert cuda.detect_cuda_arch() == "sm_90"
    assert calls(machine) == 1


def test_a_second_grader_process_does_not_ask_nvidia_smi_again(machine: Path) -> None:
    probe = ("from pathlib import Path; from grader.targets import cuda; "
             f"cuda.GPU_LISTING = Path({str(machine / 'gpus')!r}); print(cuda.detect_cuda_arch())")
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
        assert done.stdout.strip() == "sm_90"
    assert calls(machine) == 1


def test_another_gpu_or_another_nvidia_smi_is_asked_again(machine: Path) -> None:
    assert cuda.detect_cuda_arch() == "sm_90"
    information = machine / "gpus" / "0000:19:00.0" / "information"
    information.write_text(information.read_text().replace("H200", "RTX A6000").replace("GPU-1111", "GPU-2222"))
    fake_smi(machine / "bin", "8.6")  # a driver update replaces nvidia-smi too
    assert cuda.detect_cuda_arch() == "sm_86"
    assert calls(machine) == 2
    assert cuda.detect_cuda_arch() == "sm_86"
    assert calls(machine) == 2


def test_a_process_given_other_gpus_asks_for_itself(machine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cuda.detect_cuda_arch() == "sm_90"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert cuda.detect_cuda_arch() == "sm_90"
    assert calls(machine) == 2


def test_a_failed_probe_is_not_kept(machine: Path) -> None:
    fake_smi(machine / "bin", None)
    assert cuda.detect_cuda_arch() == "sm_90"  # the default where nvidia-smi does not answer
    fake_smi(machine / "bin", "8.0")
    assert cuda.detect_cuda_arch() == "sm_80"
    assert calls(machine) == 2


def test_without_a_gpu_listing_nothing_is_kept(machine: Path) -> None:
    shutil.rmtree(machine / "gpus")
    assert cuda.detect_cuda_arch() == "sm_90"
    assert cuda.detect_cuda_arch() == "sm_90"
    assert calls(machine) == 2
    assert not (machine / "cache").exists()


def test_the_environment_override_wins_without_asking(machine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNEL_GRADER_CUDA_ARCH", "sm_75")
    assert cuda.detect_cuda_arch() == "sm_75"
    assert calls(machine) == 0


def test_an_unwritable_cache_still_gives_the_answer(machine: Path) -> None:
    (machine / "cache").write_text("a file where the cache folder should be")
    assert cuda.detect_cuda_arch() == "sm_90"
    assert cuda.detect_cuda_arch() == "sm_90"
    assert calls(machine) == 2


@pytest.mark.gpu
def test_on_this_gpu_the_kept_arch_is_nvidia_smis_and_a_second_process_skips_it(tmp_path: Path) -> None:
    real = shutil.which("nvidia-smi")
    assert real is not None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "nvidia-smi"  # counts the calls, then runs the real one
    wrapper.write_text(f"#!/bin/sh\necho called >> '{bin_dir / 'calls'}'\nexec '{real}' \"$@\"\n")
    wrapper.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "KERNEL_GRADER_CACHE": str(tmp_path)}
    env.pop("KERNEL_GRADER_CUDA_ARCH", None)
    expected = subprocess.run([real, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                              text=True, check=True).stdout.split()[0]
    probe = "from grader.targets import cuda; print(cuda.detect_cuda_arch())"
    answers = [subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                              check=True).stdout.strip() for _ in range(2)]
    assert answers == ["sm_" + expected.replace(".", "")] * 2
    assert len((bin_dir / "calls").read_text().splitlines()) == 1
