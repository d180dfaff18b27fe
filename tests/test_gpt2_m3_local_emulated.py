"""gpt2-m3's req_5 kernels run on the CPU, where no GPU runs them: the reference's and each sample's
kernels_req_5/local_attention.cuh compiled with g++ against the stand-in for cuda_runtime.h
(tests/cuda_emulation/fibers/: a block's threads are fibers, __syncthreads() and the warp shuffles a round's end),
on the very inputs and gold of the pack's cases, judged by its tolerance. Each must fail exactly the cases its
VARIANT.toml lists, among those emulated (gpt2-full left out: 49,152 rows of fibers). The GPU tests
(tests/test_gpu_gpt2_m3_local.py) run the real kernels; this catches a wrong kernel or expectation before them."""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from grader.cases import Seed, make_case_inputs
from grader.samples import Sample, variants
from grader.assignment import Assignment, Case, load_assignment

EMULATION = Path(__file__).parent / "cuda_emulation" / "fibers"
LAUNCH = re.compile(r"([A-Za-z_]\w*)\s*<<<(.*?)>>>\s*\((.*?)\)\s*;", re.S)
DYNAMIC_SHARED = re.compile(r"extern\s+__shared__\s+(\w+)\s+(\w+)\s*\[\s*\]\s*;")
MOST_ROWS = 8_000  # query rows (B * NH * T) per emulated case
# The course's utils/cuda_utils.cuh as far as the kernel files use it (the real one includes cuBLAS).
UTILS = "#pragma once\n#include <cuda_runtime.h>\n#define CEIL_DIV(M, N) (((M) + (N) - 1) / (N))\n" \
        "#define cudaCheck(err) ((void)(err))\n"

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


@cache
def pack() -> Assignment:
    return load_assignment("gpt2-m3")


def emulated_cases() -> list[Case]:
    return [c for c in pack().kernel("local_attention").cases
            if c.params["B"] * c.params["NH"] * c.params["T"] <= MOST_ROWS]


@cache
def case_data(case_name: str) -> tuple[np.ndarray, np.ndarray]:
    """The case's packed input as the grader draws it (public seed), and its float64 gold."""
    kernel = pack().kernel("local_attention")
    case = next(c for c in kernel.cases if c.name == case_name)
    inp = make_case_inputs(pack(), kernel, case, Seed(pack().public_seed))["inp"]
    return inp, pack().numpy_reference().local_attention(inp, **case.params)["out"]


def _split_top_level(text: str) -> list[str]:
    """A launch configuration's arguments: commas inside parentheses (CEIL_DIV(n, 256)) are not separators."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += (char == "(") - (char == ")")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [*parts, current]


def _launch(match: re.Match) -> str:
    grid, block = _split_top_level(match[2])[:2]  # dynamic shared memory: the stand-in's statics are large enough
    return f"kg_launch({grid}, {block}, [=] {{ {match[1]}({match[3]}); }});"


def compile_emulator(header: Path, workdir: Path) -> Path:
    text = header.read_text()
    function = next(name for name in pack().kernel("local_attention").functions
                    if re.search(rf"\bvoid\s+{name}\s*\(", text))
    (workdir / "kernels").mkdir()
    (workdir / "utils").mkdir()
    (workdir / "utils" / "cuda_utils.cuh").write_text(UTILS)
    source = workdir / "kernels" / "local_attention.cuh"
    source.write_text(LAUNCH.sub(_launch, DYNAMIC_SHARED.sub(r"static \1 \2[1 << 16];", text)))
    binary = workdir / "emulator"
    subprocess.run(["g++", "-std=c++17", "-O1", "-w", f"-I{EMULATION}", f"-DKERNEL_TEXT=\"{source}\"",
                    f"-DKG_FUNCTION={function}", str(EMULATION / "local_attention_main.cpp"), "-o", str(binary)],
                   check=True, capture_output=True, text=True, timeout=120)
    return binary


def failed_cases(folder: Path, workdir: Path) -> list[str]:
    """The emulated cases the folder's kernel fails, by the spec's tolerance (NaN, i.e. never written, fails)."""
    kernel = pack().kernel("local_attention")
    binary = compile_emulator(folder / "kernels_req_5" / "local_attention.cuh", workdir)
    failed = []
    for case in emulated_cases():
        inp, gold = case_data(case.name)
        inp.tofile(workdir / "inp.bin")
        p = case.params
        subprocess.run([str(binary), str(workdir / "inp.bin"), str(workdir / "out.bin"),
                        *(str(p[n]) for n in ("B", "T", "NH", "HS"))], check=True, capture_output=True, text=True,
                       timeout=300)
        produced = np.fromfile(workdir / "out.bin", dtype=np.float32).reshape(gold.shape).astype(np.float64)
        tolerance = kernel.tolerance_for(case)
        if not np.all(np.abs(produced - gold) <= tolerance.atol + tolerance.rtol * np.abs(gold)):
            failed.append(case.name)
    return failed


def runnable() -> list:
    """The reference, and the samples that build (one defining neither name has nothing to run)."""
    samples = [s for s in variants(pack()) if s.kernel == "req_5/local_attention" and s.expect != "compile_error"]
    return [pytest.param(None, id="reference"), *(pytest.param(s, id=s.name) for s in samples)]


def test_the_emulated_cases_reach_past_the_window() -> None:
    assert any(c.params["T"] > 129 for c in emulated_cases()) and any(c.params["T"] <= 128 for c in emulated_cases())


@pytest.mark.parametrize("sample", runnable())
def test_each_kernel_fails_exactly_its_expected_emulated_cases(sample: Sample | None, tmp_path: Path) -> None:
    folder = sample.folder if sample else pack().reference_dir
    emulated = {c.name for c in emulated_cases()}
    expected = [c for c in (sample.failed_cases or ()) if c in emulated] if sample else []
    assert failed_cases(folder, tmp_path) == expected
