"""nanogpt-kvcache on the GPU (nanogpt-kvcache-cuda): the reference's full marks with its harnesses on CUDA, the
per-case device memory read from torch's allocator, and the speed-up table of our cache per generated length
(cached against uncached generation, warm-up and medians: `grader time --sweep`'s protocol, on the GPU pack's sweep
cases: 4 layers 1024 wide, a batch of 8); run with -s to see it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.options import Options
from grader.pipeline import grade
from grader.assignment import load_assignment
from grader.timing.run import time_submission
from grader.timing.spec import load_timing
from grader.sweeps.density import sweep_points

from conftest import needs_torch

pytestmark = [pytest.mark.gpu, needs_torch]

PACK = "nanogpt-kvcache-cuda"


def speedup_medians(pack, cache_dir: Path) -> dict[tuple[str, int], float]:
    """(kernel, new_tokens) -> median microseconds of the reference's sweep (`grader time --sweep`'s protocol)."""
    timing = load_timing(pack)
    swept = time_submission(pack.reference_dir, pack, Options(cache_dir=cache_dir), timing, sweep=True)
    return {(p.operation, int(p.density)): p.median_us for p in sweep_points(swept, pack, timing.sweep_parameter)}


def test_reference_scores_full_marks_on_cuda_with_memory_per_case(cache_dir: Path) -> None:
    pack = load_assignment(PACK)
    result = grade(pack.reference_dir, pack, Options(cache_dir=cache_dir))
    assert result.score == result.max_score == 10, [(k.name, k.message) for k in result.kernels]
    assert any("CUBLAS_WORKSPACE_CONFIG" in line for line in result.environment.determinism)
    generation = next(k for k in result.kernels if k.name == "cached_generation")
    assert all(c.peak_extra_bytes is not None and c.peak_extra_bytes > 0 for c in generation.cases), \
        [(c.name, c.peak_extra_bytes) for c in generation.cases]


def test_reference_cache_speeds_up_generation_at_512_tokens(cache_dir: Path) -> None:
    pack = load_assignment(PACK)
    medians = speedup_medians(pack, cache_dir)
    print("\nnew tokens | uncached (ms) | cached (ms) | speed-up")
    for length in sorted({n for _, n in medians}):
        uncached, cached = medians[("uncached_generation", length)], medians[("cached_generation", length)]
        print(f"{length:10d} | {uncached / 1e3:13.1f} | {cached / 1e3:11.1f} | {uncached / cached:8.2f}")
    assert medians[("uncached_generation", 512)] / medians[("cached_generation", 512)] >= 1.5
