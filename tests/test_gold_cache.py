"""Gold from the cache: mapped read-only, judged by the facts kept when it was computed, with the same errors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from grader.boundary.protocol import POISON_BITS
from grader.cases import Seed, prepare_inputs
from grader.errors import GoldError, SpecError
import grader.gold
from grader.gold import FACTS_FILE, gold_outputs
from grader.sandbox.local import LocalSandbox
from grader.assignment import Assignment, Tolerance, load_assignment


def small_gpt2_selection(cache_dir: Path) -> tuple[Assignment, list]:
    """gpt2-m1's float64 NumPy gold on two small public cases (computed in this process)."""
    assignment = load_assignment("gpt2-m1")
    kernel = assignment.kernel("layernorm")
    cases = [c for c in kernel.cases if c.public]
    return assignment, [(kernel, c, prepare_inputs(assignment, kernel, c, Seed(assignment.public_seed), cache_dir))
                        for c in cases]


def entry_of(cache_dir: Path, array_name: str = "out") -> list[Path]:
    return sorted(p.parent for p in (cache_dir / "gold").glob(f"*/{array_name}.npy"))


def test_cached_gold_is_mapped_read_only_and_equals_what_was_computed(tmp_path: Path) -> None:
    assignment, selection = small_gpt2_selection(tmp_path)
    computed = gold_outputs(assignment, selection, tmp_path, LocalSandbox())
    again = gold_outputs(assignment, selection, tmp_path, LocalSandbox())
    for key, buffers in again.items():
        for name, array in buffers.items():
            assert type(array) is np.ndarray and not array.flags.writeable and array.dtype == np.float64
            assert np.array_equal(array, computed[key][name])


def test_a_warm_load_judges_the_kept_facts_without_measuring_the_gold_again(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    assignment, selection = small_gpt2_selection(tmp_path)
    gold_outputs(assignment, selection, tmp_path, LocalSandbox())
    for entry in entry_of(tmp_path):
        facts = json.loads((entry / FACTS_FILE).read_text())
        largest = float(np.abs(np.load(entry / "out.npy")).max())
        assert facts == {"out": {"unwritten": False, "largest": largest}}

    def measured(outputs: dict) -> dict:
        raise AssertionError("a warm load measured the gold again")

    monkeypatch.setattr(grader.gold, "_facts_of", measured)
    assert len(gold_outputs(assignment, selection, tmp_path, LocalSandbox())) == len(selection)


def test_an_entry_cached_without_facts_gets_them_measured_and_kept(tmp_path: Path) -> None:
    assignment, selection = small_gpt2_selection(tmp_path)
    gold_outputs(assignment, selection, tmp_path, LocalSandbox())
    kept = {entry: (entry / FACTS_FILE).read_text() for entry in entry_of(tmp_path)}
    for entry in kept:
        (entry / FACTS_FILE).unlink()  # as an older grader left it
    (entry_of(tmp_path)[0] / FACTS_FILE).write_text("{damaged")
    gold_outputs(assignment, selection, tmp_path, LocalSandbox())
    assert {entry: (entry / FACTS_FILE).read_text() for entry in entry_of(tmp_path)} == kept


def test_a_tighter_spec_still_finds_cached_gold_too_small_for_its_atol(tmp_path: Path) -> None:
    # The gold (keyed by content) stays cached while the spec's atol changes: the check is the spec's of now.
    assignment, selection = small_gpt2_selection(tmp_path)
    gold_outputs(assignment, selection, tmp_path, LocalSandbox())
    kernel, case, inputs = selection[0]
    loose = dataclasses.replace(kernel, tolerance=Tolerance(atol=1.0, rtol=1e-4))
    loose_case = dataclasses.replace(case, tolerance=None)
    with pytest.raises(SpecError, match=r"kernel 'layernorm' case '.*': max \|gold\| of 'out' is .* below 100 x atol "
                                        r"= 100, so an all-zeros answer could pass; use larger inputs or a smaller"):
        gold_outputs(assignment, [(loose, loose_case, inputs)], tmp_path, LocalSandbox())


def test_gold_left_unwritten_is_a_gold_error_from_a_warm_load_too(tmp_path: Path) -> None:
    assignment, selection = small_gpt2_selection(tmp_path)
    gold_outputs(assignment, selection, tmp_path, LocalSandbox())
    for entry in entry_of(tmp_path):
        array = np.load(entry / "out.npy")
        unsigned, bits = POISON_BITS["float64"]
        array.view(unsigned)[0] = bits
        np.save(entry / "out.npy", array)
        (entry / FACTS_FILE).unlink()
    with pytest.raises(GoldError, match="the reference left part of 'out' unwritten"):
        gold_outputs(assignment, selection, tmp_path, LocalSandbox())
    with pytest.raises(GoldError, match="the reference left part of 'out' unwritten"):  # now from the kept facts
        gold_outputs(assignment, selection, tmp_path, LocalSandbox())


def test_gold_from_the_reference_run_keeps_its_facts_in_the_entry(flash: Assignment, tmp_path: Path) -> None:
    kernel = flash.kernels[0]
    case = next(c for c in kernel.cases if c.public)
    selection = [(kernel, case, prepare_inputs(flash, kernel, case, Seed(flash.public_seed), tmp_path))]
    gold = gold_outputs(flash, selection, tmp_path, LocalSandbox())
    (name, array), = gold[(kernel.name, case.name)].items()
    entry, = entry_of(tmp_path, name)
    assert json.loads((entry / FACTS_FILE).read_text()) == {name: {"unwritten": False,
                                                                   "largest": float(np.abs(array).max())}}
