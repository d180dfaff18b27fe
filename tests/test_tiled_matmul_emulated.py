"""gpt2-m2's reference req_0 matmul kernel, emulated on the CPU: one thread per CUDA thread, so its tiles,
bounds, float4 paths and causal shortcuts are checked here against float64 loops, where no GPU runs it.
A wrong stride or bound fails this (the GPU tests run the real kernel: tests/test_gpu_gpt2_m2.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from grader.assignment import PROJECT_ROOT

KERNEL = PROJECT_ROOT / "assignments" / "gpt2-m2" / "reference" / "kernels_req_0" / "matmul.cuh"
EMULATOR = Path(__file__).parent / "cuda_emulation" / "tiled_matmul.cpp"
# The device code of the header: from the tile constants to the first launch helper.
BEGIN, END = "constexpr int TILED_BK", "// 128 x 128 tiles"


def kernel_text(header: Path) -> str:
    text = header.read_text()
    assert BEGIN in text and END in text, f"{header} no longer holds the markers the emulator cuts at"
    return text[text.index(BEGIN):text.index(END)]


def emulate(kernel: str, workdir: Path) -> subprocess.CompletedProcess:
    (workdir / "kernel.inc").write_text(kernel)
    binary = workdir / "emulator"
    subprocess.run(["g++", "-std=c++20", "-O1", "-fno-strict-aliasing", "-pthread", "-w",
                    f"-DKERNEL_TEXT=\"{workdir / 'kernel.inc'}\"", str(EMULATOR), "-o", str(binary)],
                   check=True, capture_output=True, text=True, timeout=120)
    return subprocess.run([str(binary)], capture_output=True, text=True, timeout=120)


needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


@needs_gxx
def test_the_reference_tiled_matmul_matches_float64_loops(tmp_path: Path) -> None:
    run = emulate(kernel_text(KERNEL), tmp_path)
    assert run.returncode == 0 and run.stdout.strip().endswith("all passed"), run.stdout + run.stderr
    assert run.stdout.count("bad 0") == 16  # 6 matmuls, 5 score and 5 att @ v products


@needs_gxx
def test_a_wrong_stride_between_a_threads_rows_is_caught(tmp_path: Path) -> None:
    kernel = kernel_text(KERNEL)
    mutant = kernel.replace("constexpr int ROW_STRIDE = THREAD_ROWS * 4;", "constexpr int ROW_STRIDE = THREAD_ROWS * 4 + 1;")
    assert mutant != kernel
    run = emulate(mutant, tmp_path)
    assert run.returncode != 0 and "FAILED" in run.stdout, run.stdout
