"""tiled-matmul's kernels run on the CPU, where no GPU runs them: the reference, the template and each sample's
kernel file compiled with g++ against a stand-in for cuda_runtime.h (tests/cuda_emulation/fibers/: each block's
threads are fibers, __syncthreads() a round's end), on the very inputs and gold of the pack's cases, judged by its
tolerance. Each must fail exactly the cases its VARIANT.toml lists (square-4096 left out: 7e10 products). The GPU
tests (tests/test_gpu_tiled_matmul.py) run the real kernels; this catches a wrong expectation before them."""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from grader.cases import Seed, make_case_inputs
from grader.samples import variants
from grader.assignment import Assignment, Case, Kernel, load_assignment

EMULATION = Path(__file__).parent / "cuda_emulation" / "fibers"
# `name<T><<<grid, block>>>(args);` -> a launch the stand-in runs.
LAUNCH = re.compile(r"([A-Za-z_]\w*(?:\s*<[^<>;]*>)?)\s*<<<(.*?)>>>\s*\((.*?)\)\s*;", re.S)
# `extern __shared__ float smem[];` -> a pointer to the launch's dynamic shared memory, in the stand-in.
EXTERN_SHARED = re.compile(r"extern\s+__shared__\s+(\w+)\s+(\w+)\s*\[\s*\]\s*;")
MOST_PRODUCTS = 50_000_000  # per case: ~0.1 s emulated

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


@cache
def pack() -> Assignment:
    return load_assignment("tiled-matmul")


def emulated_cases(kernel: Kernel) -> list[Case]:
    return [c for c in kernel.cases if c.params["M"] * c.params["N"] * c.params["K"] <= MOST_PRODUCTS]


@cache
def case_data(kernel_name: str, case_name: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The case's inputs as the grader draws them (public seed), and its float64 gold."""
    kernel = pack().kernel(kernel_name)
    case = next(c for c in kernel.cases if c.name == case_name)
    inputs = make_case_inputs(pack(), kernel, case, Seed(pack().public_seed))
    gold = getattr(pack().numpy_reference(), kernel.base)(**inputs, **case.params)["C"]
    return inputs, gold


def compile_emulator(header: Path, kernel: str, workdir: Path) -> Path:
    source = workdir / header.name
    text = LAUNCH.sub(lambda m: f"kg_launch({m[2]}, [=] {{ {m[1]}({m[3]}); }});", header.read_text())
    source.write_text(EXTERN_SHARED.sub(
        lambda m: f"{m[1]}* {m[2]} = reinterpret_cast<{m[1]}*>(kg::dynamic_shared.data());", text))
    binary = workdir / "emulator"
    subprocess.run(["g++", "-std=c++17", "-O1", "-w", f"-I{EMULATION}", f"-DKERNEL_TEXT=\"{source}\"",
                    *(["-DKG_TILED"] if kernel == "tiled" else []), str(EMULATION / "matmul_main.cpp"), "-o",
                    str(binary)], check=True, capture_output=True, text=True, timeout=120)
    return binary


def failed_cases(folder: Path, kernel_name: str, workdir: Path) -> list[str]:
    """The emulated cases the folder's kernel fails, by the spec's tolerance (NaN, i.e. never written, fails)."""
    kernel = pack().kernel(kernel_name)
    binary = compile_emulator(folder / kernel.header, kernel_name, workdir)
    failed = []
    for case in emulated_cases(kernel):
        inputs, gold = case_data(kernel_name, case.name)
        paths = [workdir / f"{name}.bin" for name in ("A", "B", "C")]
        inputs["A"].tofile(paths[0])
        inputs["B"].tofile(paths[1])
        p = case.params
        scalars = [p["M"], p["N"], p["K"], *([p["tile"]] if kernel_name == "tiled" else [])]
        subprocess.run([str(binary), *map(str, paths), *map(str, scalars)], check=True, capture_output=True,
                       text=True, timeout=120)
        produced = np.fromfile(paths[2], dtype=np.float32).reshape(gold.shape).astype(np.float64)
        tolerance = kernel.tolerance_for(case)
        if not np.all(np.abs(produced - gold) <= tolerance.atol + tolerance.rtol * np.abs(gold)):
            failed.append(case.name)
    return failed


def submissions() -> list:
    """(folder, kernel, expected failed cases, or None where the GPU's schedule decides) for each runnable file."""
    params = [pytest.param(pack().reference_dir, k, [], id=f"reference-{k}") for k in ("naive", "tiled")]
    params += [pytest.param(pack().template_dir, k.name, [c.name for c in emulated_cases(k)], id=f"template-{k.name}")
               for k in pack().kernels if k.name != "cublas"]
    for sample in variants(pack()):
        if (sample.folder / pack().kernel(sample.kernel).header).read_text().find("cublas") >= 0:
            continue  # calls cuBLAS: nothing to emulate
        emulated = {c.name for c in emulated_cases(pack().kernel(sample.kernel))}
        expected = None if sample.failed_cases is None else [c for c in sample.failed_cases if c in emulated]
        params.append(pytest.param(sample.folder, sample.kernel, expected, id=sample.name))
    return params


@pytest.mark.parametrize(("folder", "kernel", "expected"), submissions())
def test_each_kernel_file_fails_exactly_its_expected_cases(folder: Path, kernel: str, expected: list[str] | None,
                                                           tmp_path: Path) -> None:
    failed = failed_cases(folder, kernel, tmp_path)
    if expected is None:
        # The race without the second barrier, where each thread runs to its next barrier in turn: each thread loads
        # the next tiles into its slots before the threads after it have read this step's, so every output but
        # thread 0's reads some of the next step's values, in every case with more than one step along K. Thread 0
        # alone reads before anyone writes: single-output, its only output, comes out right.
        spoiled = [c.name for c in emulated_cases(pack().kernel(kernel))
                   if c.params["K"] > c.params["tile"] and c.params["M"] * c.params["N"] > 1]
        assert "single-output" not in spoiled and len(spoiled) >= 6
        assert failed == spoiled
    else:
        assert failed == expected
