"""grader.ncu off the GPU: which variants and kernels `grader time --ncu` measures, ncu's CSV read back into each
call's figures, its errors in words, the table, and a clear refusal where there is no GPU. (The measurement itself,
in the sandbox, runs on the H200: tests/test_gpu_gpt2_m3_ops.py.)"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import pytest

from grader.ncu import (COUNTERS, NcuFigure, NcuReport, chosen_variants, launches_of, ncu_errors, per_call, runs_for,
                        submitted_runs, value_of)
from grader.assignment import load_assignment

from test_cli import grader

COLUMNS = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
           "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value"]


def ncu_csv(launches: list[tuple[str, dict[str, float]]]) -> str:
    """What `ncu --csv --print-units base` writes for these launches: one row per launch and counter, values with
    thousands separators, after ncu's own ==PROF== lines and the program's output."""
    out = io.StringIO()
    out.write("==PROF== Connected to process 4242 (/usr/bin/python3.11)\nthe harness printed this\n")
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerow(COLUMNS)
    for index, (name, counters) in enumerate(launches):
        for counter, value in counters.items():
            writer.writerow([index, 4242, "python3.11", "127.0.0.1", name, 1, 7, "(256, 1, 1)", "(96, 1, 1)", 0, 9.0,
                             "Command line profiler metrics", counter, "", f"{value:,.0f}"])
    out.write("==PROF== Disconnected from process 4242\n")
    return out.getvalue()


def test_it_measures_the_variants_with_a_claim_and_the_base_kernels_they_change() -> None:
    m3 = load_assignment("gpt2-m3")
    chosen = chosen_variants(m3)
    assert [(v.name, metrics) for v, metrics in chosen] == [
        ("op_11", ("shared_bank_conflicts",)), ("op_12", ("shared_bank_conflicts",)), ("op_18", ("l2_hit_rate",))]
    runs = runs_for(m3, chosen)
    # Each base kernel once, before the first variant that changes it.
    bases = [k.name for v, k, _ in runs if v is None]
    assert len(bases) == len(set(bases)) and "matmul" in bases
    # Only op_18's folder in the submission: its kernels and their bases, nothing of op_11 or op_12.
    kept = submitted_runs(runs, {"op_18"})
    assert {v for v, _, _ in kept} == {None, "op_18"}
    assert [k.name for v, k, _ in kept if v is None] == [k.name for v, k, _ in kept if v == "op_18"]
    assert submitted_runs(runs, set()) == []
    # Named: a variant without ncu_metrics of its own (the reference's op_17) gets every metric.
    assert [(v.name, m) for v, m in chosen_variants(m3, ["op_17"])] == [
        ("op_17", ("shared_bank_conflicts", "l2_hit_rate"))]


def test_each_call_gets_the_figures_of_its_own_kernels() -> None:
    load, store = COUNTERS["shared_bank_conflicts"]
    hit, miss = COUNTERS["l2_hit_rate"]
    listed = []
    for call in (1.0, 7.0):  # the timed call, then the harness's re-check
        listed += [("kg_spin", {load: 5.0, store: 5.0, hit: 5.0, miss: 5.0}),
                   ("matmul_forward_kernel", {load: 1000.0 * call, store: 1.0, hit: 30.0 * call, miss: 70.0}),
                   ("softmax_kernel", {load: 24.0, store: 0.0, hit: 10.0, miss: 10.0}),
                   ("kg_digest", {load: 11.0, store: 0.0, hit: 1.0, miss: 1.0})]
    launches = launches_of(ncu_csv(listed), tuple(c for m in COUNTERS.values() for c in m))
    assert [name for name, _ in launches] == [name for name, _ in listed]
    calls = {c: per_call(launches, c) for c in (load, store, hit, miss)}
    first = {c: values[0] for c, values in calls.items()}
    assert value_of("shared_bank_conflicts", first) == 1000.0 + 24.0 + 1.0  # the harness's kernels left out
    assert value_of("l2_hit_rate", first) == pytest.approx(100.0 * 40.0 / 120.0)
    assert calls[load][1] == 7000.0 + 24.0
    assert math.isnan(value_of("l2_hit_rate", {hit: 0.0, miss: 0.0}))


def test_ncu_errors_are_kept_in_its_words_and_a_locked_driver_is_explained() -> None:
    log = ("==PROF== Connected to process 17\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to "
           "access NVIDIA GPU Performance Counters on the target device 0.\n==ERROR== ERR_NVGPUCTRPERM - The user "
           "does not have permission to access NVIDIA GPU Performance Counters on the target device 0.\n")
    words = ncu_errors(log)
    assert words.count("ERR_NVGPUCTRPERM") == 1  # once: repeats dropped
    assert "NVreg_RestrictProfilingToAdminUsers=0" in words and "sandbox" in words
    assert ncu_errors("==PROF== Disconnected from process 17\n") == ""


def test_the_table_sets_each_variant_beside_kernels() -> None:
    report = NcuReport((NcuFigure(None, "matmul", "gpt2-full", "shared_bank_conflicts", 1001.0),
                        NcuFigure(None, "matmul", "gpt2-full", "l2_hit_rate", 30.0),
                        NcuFigure("op_12", "matmul", "gpt2-full", "shared_bank_conflicts", 11.0),
                        NcuFigure("op_18", "matmul", "gpt2-full", "l2_hit_rate", 45.0),
                        NcuFigure("op_12", "gelu", "gpt2-full", "shared_bank_conflicts", 0.0)))
    table = report.table()
    assert "| op_12 | matmul | gpt2-full | shared bank conflicts | 1,001.0 | 11.0 | 0.011 |" in table
    assert "| op_18 | matmul | gpt2-full | l2 hit rate | 30.0 % | 45.0 % | 1.500 |" in table
    assert "| op_12 | gelu | gpt2-full | shared bank conflicts | nan | 0.0 | - |" in table  # kernels/ not measured
    assert report.to_json()["figures"][2] == {"variant": "op_12", "kernel": "matmul", "case": "gpt2-full",
                                              "metric": "shared_bank_conflicts", "value": 11.0}


def test_time_ncu_without_a_gpu_says_so_and_writes_nothing(tmp_path: Path, cache_dir: Path) -> None:
    m3 = load_assignment("gpt2-m3")
    ran = grader("time", str(m3.reference_dir), "-a", "gpt2-m3", "--ncu", cache_dir=cache_dir, cwd=tmp_path,
                 env={"KERNEL_GRADER_NO_GPU": "1"})
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert "cannot measure gpt2-m3's kernels under ncu on this machine" in ran.stderr
    assert not list(tmp_path.glob("ncu-*.json"))
    ran = grader("time", str(m3.reference_dir), "-a", "gpt2-m3", "--ncu", "--sweep", cache_dir=cache_dir,
                 cwd=tmp_path)
    assert ran.returncode == 2 and "--ncu measures one call per kernel" in ran.stderr, ran.stderr
