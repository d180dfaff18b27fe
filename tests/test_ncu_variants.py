"""benchmarks/ncu_variants.py off the GPU: which variants and kernels it measures, ncu's launches attributed to the
right run and call, the figures and the table, and a clear refusal where there is no GPU. (The measurement runs on
the H200: tests/test_gpu_gpt2_m3_ops.py.)"""

from __future__ import annotations

import dataclasses

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from grader.samples import compose
from grader.spec import PROJECT_ROOT, load_assignment


@pytest.fixture(scope="module")
def ncu() -> ModuleType:
    path = PROJECT_ROOT / "benchmarks" / "ncu_variants.py"
    spec = importlib.util.spec_from_file_location("ncu_variants", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


def test_it_measures_the_variants_whose_folders_are_there_and_their_base_kernels(ncu: ModuleType,
                                                                                 tmp_path: Path) -> None:
    m3 = load_assignment("gpt2-m3")
    team = compose(m3, None, tmp_path / "team")
    (team / "kernels_op_18").mkdir()
    (team / "kernels_op_18" / "matmul.cuh").write_text("// rasterized\n")
    chosen = ncu.plan(m3, team, None, None)  # op_11 and op_12 are not there: only op_18 has ncu_metrics and a folder
    assert [(v.name, metrics) for v, metrics in chosen] == [("op_18", ("l2_hit_rate",))]
    runs = ncu.runs_for(m3, chosen)
    assert [(v, k.name, m) for v, k, m in runs] == [
        (None, "matmul", ("shared_bank_conflicts", "l2_hit_rate")), ("op_18", "matmul", ("l2_hit_rate",)),
        (None, "attention", ("shared_bank_conflicts", "l2_hit_rate")), ("op_18", "attention", ("l2_hit_rate",))]
    # Named, with metrics given: a variant without ncu_metrics of its own (the reference's op_17) is measured too.
    assert [(v.name, m) for v, m in ncu.plan(m3, m3.reference_dir, ["op_17"], ["shared_bank_conflicts"])] == [
        ("op_17", ("shared_bank_conflicts",))]


def test_each_runs_timed_call_gives_its_figures(ncu: ModuleType) -> None:
    m3 = load_assignment("gpt2-m3")
    matmul = next(k for k in m3.base_kernels if k.name == "matmul")
    runs = [(None, matmul, ("shared_bank_conflicts", "l2_hit_rate")), ("op_12", matmul, ("shared_bank_conflicts",))]
    load, store = ncu.COUNTERS["shared_bank_conflicts"]
    hit, miss = ncu.COUNTERS["l2_hit_rate"]
    listed = []
    for conflicts, hits in ((1000.0, 30.0), (10.0, 60.0)):
        for call in (1.0, 7.0):  # the timed call, then the re-check (its figures must not be taken)
            listed += [("kg_spin", {load: 5.0, store: 5.0, hit: 5.0, miss: 5.0}),
                       ("matmul_forward_kernel", {load: conflicts * call, store: 1.0, hit: hits * call,
                                                  miss: 100.0 - hits}),
                       ("kg_digest", {load: 11.0, store: 0.0, hit: 1.0, miss: 1.0})]
    rows = ncu.measured(listed, runs)
    assert [(r.variant, r.metric, r.value) for r in rows] == [
        (None, "shared_bank_conflicts", 1001.0), (None, "l2_hit_rate", 30.0), ("op_12", "shared_bank_conflicts", 11.0)]
    page = ncu.table(rows, "a GPU")
    assert f"| op_12 | matmul | {matmul.cases[-1].name} | shared_bank_conflicts | 1,001.0 | 11.0 | 0.011 |" in page
    # Where kernels/ counted none, no ratio (not a bare nan).
    none = [dataclasses.replace(r, value=0.0) for r in rows]
    assert f"| op_12 | matmul | {matmul.cases[-1].name} | shared_bank_conflicts | 0.0 | 0.0 | - |" in ncu.table(none, "a GPU")
    with pytest.raises(RuntimeError, match="expected 6"):
        ncu.measured(listed, runs + [("op_12", matmul, ("l2_hit_rate",))])


def test_without_a_gpu_it_says_so_and_writes_nothing(ncu: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KERNEL_GRADER_NO_GPU", "1")
    assert ncu.main(["--out", str(tmp_path / "t.md"), "--json", str(tmp_path / "t.json")]) == 2
    assert "cannot measure here" in capsys.readouterr().err and not list(tmp_path.iterdir())
    with pytest.raises(SystemExit):
        ncu.main(["--metrics", "l1_hit_rate"])
