"""The timing protocol on a real GPU: a real speed-up is seen, a replayed answer is caught, timings repeat.

Marked `gpu`: skipped with the reason where there is no CUDA device. A few kernels at gpt2-full size, with
a short time cap: about a minute on an H200, most of it nvcc.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from grader.options import Options
from grader.assignment import Assignment, load_assignment
from grader.status import TimingStatus
from grader.timing.results import KernelTiming
from grader.timing.run import time_submission
from grader.timing.spec import parse_timing

pytestmark = pytest.mark.gpu

QUICK = parse_timing({"warmup": 2, "min_calls": 10, "max_calls": 100, "cap_s": 1.0, "pool": 3}, "tests [timing]")


@pytest.fixture(scope="module")
def m2() -> Assignment:
    return load_assignment("gpt2-m2")


def time_matmuls(assignment: Assignment, folder: Path, cache_dir: Path, kernels: tuple[str, ...]) -> dict[str, KernelTiming]:
    timings = time_submission(folder, assignment, Options(cache_dir=cache_dir, kernels=kernels), QUICK)
    return {t.kernel: t for t in timings.kernels}


def test_the_references_req_0_and_req_1_beat_its_milestone_1_matmul_and_the_protocol_is_logged(
        m2: Assignment, cache_dir: Path) -> None:
    # kernels/ holds milestone 1's course-style matmul (16 x 16 shared tiles, one output per thread); the speed-up
    # table teaches something only if the optimizations clearly beat it: req_0 by 1.5x, req_1 (TF32) by 2x.
    timed = time_matmuls(m2, m2.reference_dir, cache_dir, ("matmul", "req_0/matmul", "req_1/matmul"))
    base, tiled, tensor = timed["matmul"], timed["req_0/matmul"], timed["req_1/matmul"]
    for timing in (base, tiled, tensor):
        assert timing.status is TimingStatus.TIMED, timing.message
        assert timing.case == "gpt2-full" and timing.summary.calls >= 10 and timing.pool == 3
        assert timing.timer["clock"] == "cuda_events" and timing.timer["flush_bytes"] >= 2 * timing.timer["l2_bytes"] > 0
        assert not timing.side_streams, timing.gap_median_us
    assert tiled.median_us < base.median_us / 1.5, (tiled.median_us, base.median_us)
    assert tensor.median_us < base.median_us / 2.0, (tensor.median_us, base.median_us)
    if tiled.timer["nvml"] == "ok":
        assert tiled.clocks_before["sm_mhz"] > 0 and tiled.clocks_after["sm_max_mhz"] >= tiled.clocks_after["sm_mhz"]


# The reference's matmul behind a front that skips the work: on inputs it has seen, or after its first call.
CHEATS = {
    "seen-inputs": "static std::set<const float*> seen;\n    if (!seen.insert(inp).second) return;",
    "first-call-only": "static bool done = false;\n    if (done) return;\n    done = true;",
}


@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_a_matmul_that_replays_instead_of_working_gets_no_speed(cheat: str, tmp_path: Path, cache_dir: Path) -> None:
    m1 = load_assignment("gpt2-m1")
    folder = tmp_path / cheat
    shutil.copytree(m1.reference_dir, folder)
    matmul = folder / "kernels" / "matmul.cuh"
    text = matmul.read_text()
    real = re.sub(r"\bvoid matmul_forward\(", "void matmul_forward_real(", text, count=1)
    assert real != text
    matmul.write_text("#include <set>\n" + real + f"""
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int T, int C, int OC) {{
    {CHEATS[cheat]}
    matmul_forward_real(out, inp, weight, bias, B, T, C, OC);
}}
""")
    timing = time_matmuls(m1, folder, cache_dir, ("matmul",))["matmul"]
    assert timing.status in (TimingStatus.NO_WORK, TimingStatus.WRONG), timing
    assert timing.median_us is None


def test_timings_repeat_within_a_few_percent(m2: Assignment, cache_dir: Path) -> None:
    medians = [time_matmuls(m2, m2.reference_dir, cache_dir, ("req_0/matmul",))["req_0/matmul"].median_us
               for _ in range(3)]
    assert all(m is not None for m in medians)
    spread = (max(medians) - min(medians)) / min(medians)
    assert spread < 0.03, medians
