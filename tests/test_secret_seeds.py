"""No secret can break a pack: a secret-seeded case whose NumPy gold is too small for its tolerance to catch an
all-zeros answer is drawn again, never an error that stops a batch. Every case of every NumPy-gold pack whose public
gold lies near its floor is drawn under 50 secrets, and each draw taken is meaningful (the packs' own tests grade
their references on the public seed, where the check is an error of the pack)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from grader.cases import Seed, load_inputs, prepare_inputs
from grader.errors import SpecError
from grader.gold import gold_outputs, meaningful_inputs
from grader.options import Options
from grader.pipeline import grade
from grader.sandbox.local import LocalSandbox
from grader.assignment import ASSIGNMENTS_DIR, Assignment, load_assignment

SECRETS = [f"secret-{i}" for i in range(50)]
# Cases whose inputs hold more elements than this are left out of the sweep: their gold takes seconds, and the
# largest of millions of values does not fall under a floor.
SWEPT_ELEMENTS = 1 << 16
# A case whose public gold's largest |value| is more than this many floors away is not at risk (the one case seen
# at risk, tiled-matmul's single-output, a sum of 64 products, sits ~20 floors up and falls under in 1 draw of 17).
AT_RISK = 200


def numpy_gold_packs() -> list[str]:
    """The packs with NumPy gold of their own (a based_on pack's cases are its base's)."""
    names = sorted(p.parent.name for p in ASSIGNMENTS_DIR.glob("*/assignment.toml"))
    return [n for n in names if (pack := load_assignment(n)).gold == "numpy" and not pack.based_on]


def first_bad_secret(pack: Assignment, cache_dir: Path) -> str:
    """The first of SECRETS whose draw of tiled-matmul's naive single-output case has too small a gold."""
    kernel = pack.kernel("naive")
    case = next(c for c in kernel.cases if c.name == "single-output")
    for secret in SECRETS:
        inputs = prepare_inputs(pack, kernel, case, Seed(pack.public_seed, secret), cache_dir)
        try:
            gold_outputs(pack, [(kernel, case, inputs)], cache_dir, LocalSandbox())
        except SpecError:
            return secret
    raise AssertionError("none of 50 secrets draws a too-small gold for single-output (about 1 in 17 should)")


def test_a_secret_draw_too_small_for_its_tolerance_is_drawn_again(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    pack = load_assignment("tiled-matmul")
    kernel = pack.kernel("naive")
    case = next(c for c in kernel.cases if c.name == "single-output")
    seed = Seed(pack.public_seed, first_bad_secret(pack, tmp_path))
    first = prepare_inputs(pack, kernel, case, seed, tmp_path)

    taken = meaningful_inputs(pack, kernel, case, seed, tmp_path)

    assert taken != first
    assert not all((load_inputs(taken)[n] == load_inputs(first)[n]).all() for n in load_inputs(first))
    gold_outputs(pack, [(kernel, case, taken)], tmp_path, LocalSandbox())  # strict: raises if still too small
    # The score stage under a secret warns where a draw slipped through, and grades on.
    gold_outputs(pack, [(kernel, case, first)], tmp_path, LocalSandbox(), strict=False)
    assert "under this secret seed; the case is graded as drawn" in capsys.readouterr().err


@pytest.mark.parametrize("name", numpy_gold_packs())
def test_every_case_of_a_numpy_pack_near_its_floor_is_meaningful_under_50_secrets(name: str,
                                                                                          tmp_path: Path) -> None:
    pack = load_assignment(name)
    swept = []
    for kernel in pack.kernels:
        for case in kernel.cases:
            public = prepare_inputs(pack, kernel, case, Seed(pack.public_seed), tmp_path)
            if sum(a.size for a in load_inputs(public).values()) > SWEPT_ELEMENTS:
                continue
            gold = gold_outputs(pack, [(kernel, case, public)], tmp_path, LocalSandbox())[kernel.name, case.name]
            floor = 100 * kernel.tolerance_for(case).atol
            if min(float(abs(g[np.isfinite(g)]).max(initial=0.0)) for g in gold.values()) > AT_RISK * floor:
                continue
            swept.append(f"{kernel.name}/{case.name}")
            drawn = [(kernel, case, meaningful_inputs(pack, kernel, case, Seed(pack.public_seed, s), tmp_path))
                     for s in SECRETS]
            gold_outputs(pack, drawn, tmp_path, LocalSandbox())  # strict: raises for a draw still too small
    if name == "tiled-matmul":
        assert "naive/single-output" in swept


@pytest.mark.gpu
def test_the_reference_keeps_full_marks_under_a_secret_whose_first_draw_is_too_small(cache_dir: Path) -> None:
    pack = load_assignment("tiled-matmul")
    secret = first_bad_secret(pack, cache_dir)
    result = grade(pack.reference_dir, pack, Options(secret=secret, kernels=("naive",), cache_dir=cache_dir))
    assert result.score == result.max_score, [(k.name, k.message) for k in result.kernels]
