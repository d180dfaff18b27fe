"""benchmarks/tiled_matmul_traffic.py off the GPU: ncu's launches attributed to the right kernel and call, the table's
ratio of the naive kernel's L2 reads to each tile's, and a clear refusal where there is no GPU. (The measurement itself
runs on the H200: `bash ci/gpu/run-gpu-checks.sh traffic`.)"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from grader.assignment import PROJECT_ROOT

SIZE = 64


@pytest.fixture(scope="module")
def traffic() -> ModuleType:
    path = PROJECT_ROOT / "benchmarks" / "tiled_matmul_traffic.py"
    spec = importlib.util.spec_from_file_location("tiled_matmul_traffic", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


def launches_for(traffic: ModuleType, l2_by_run: list[float]) -> list[tuple[str, dict[str, float]]]:
    """What ncu lists for runs whose timed call reads `l2` sectors: per call the spin kernel, the kernel, the
    harness's checksum; the re-check's call reads a different (wrong, if taken) amount."""
    def counted(l2: float) -> dict[str, float]:
        return {traffic.L1_REQUESTS: l2 / 4, traffic.L1_SECTORS: 3 * l2, traffic.L2_SECTORS: l2,
                traffic.DRAM_BYTES: 1e6}
    listed = []
    for l2 in l2_by_run:
        for call in (l2, 7.0):  # the timed call, then the re-check
            listed += [("kg_spin", {traffic.L2_SECTORS: 5.0}), ("matmul_kernel", counted(call)),
                       ("kg_digest", {traffic.L2_SECTORS: 11.0})]
    return listed


def test_each_run_gets_its_timed_calls_loads_and_the_ratio_to_the_naive_kernel(traffic: ModuleType) -> None:
    runs = traffic.cases_for(SIZE, [8, 16, 32])
    assert [(k, c.params.get("tile")) for k, c in runs] == [("naive", None), ("tiled", 8), ("tiled", 16), ("tiled", 32)]
    naive_sectors = 2 * SIZE * SIZE * SIZE * 4 / traffic.SECTOR_BYTES  # 2 N floats per output, no reuse
    l2 = [naive_sectors] + [naive_sectors / t for t in (8, 16, 32)]
    rows = traffic.measured(launches_for(traffic, l2), runs, SIZE)
    assert [r.l2_sectors for r in rows] == l2 and [r.l1_sectors for r in rows] == [3 * x for x in l2]
    assert rows[0].l2_bytes_per_output == 2 * SIZE * 4
    # One warp-wide request per 32 lane-loads: 2 N^3 loads are 2 N^3 / 32 requests (a quarter of these sectors).
    assert rows[0].loads_per_output == 2 * SIZE and rows[2].loads_per_output == 2 * SIZE / 16
    page = traffic.table(rows, SIZE, "a GPU")
    for row, tile in zip(rows[1:], (8, 16, 32)):
        assert f"| tiled | {tile} | {2 * SIZE / tile:,.1f} | {tile:.2f} | {tile} |" in page
        assert f"| {rows[0].l2_sectors / row.l2_sectors:.2f} |" in page


def test_a_listing_that_does_not_match_the_runs_is_refused(traffic: ModuleType) -> None:
    runs = traffic.cases_for(SIZE, [8, 16])
    with pytest.raises(RuntimeError, match="expected 6"):
        traffic.measured(launches_for(traffic, [1.0, 2.0]), runs, SIZE)


def test_without_a_gpu_it_says_so_and_writes_nothing(traffic: ModuleType, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KERNEL_GRADER_NO_GPU", "1")
    assert traffic.main(["--out", str(tmp_path / "t.md"), "--json", str(tmp_path / "t.json")]) == 2
    assert "cannot measure here" in capsys.readouterr().err and not list(tmp_path.iterdir())
    with pytest.raises(SystemExit):
        traffic.main(["--tiles", "8,12"])  # the reference takes 8, 16 and 32 only
