"""gpt2-m3 graded whole on a real GPU, as an instructor grades a team: the reference's required optimizations
(req_4 FlashAttention, req_5 local attention, req_6 KV cache) and its additional ones (op_7, op_8, op_9, op_17: the
course's 10 points) score 30/30 under the pack's own limits; the op folders it does not have score nothing and cost
nothing.

Marked `gpu`: skipped with the reason where there is no CUDA device. Each part's own file
(tests/test_gpu_gpt2_m3_*.py) tests its samples and mutants; this one the whole pack at once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.results import Result
from grader.assignment import Assignment, load_assignment
from grader.status import KernelStatus, Outcome

from conftest import grade_variant

pytestmark = pytest.mark.gpu

REQUIRED = {"req_4": 6, "req_5": 2, "req_6": 12}
REFERENCE_OPS = {"op_7": 3, "op_8": 2, "op_9": 1, "op_17": 4}


@pytest.fixture(scope="module")
def m3() -> Assignment:
    return load_assignment("gpt2-m3")  # the pack as it is: its own time limits


@pytest.fixture(scope="module")
def reference(m3: Assignment, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Result:
    return grade_variant(m3, None, tmp_path_factory.mktemp("m3-reference"), cache_dir)


def test_the_reference_scores_30_of_30_with_every_required_and_chosen_optimization(reference: Result) -> None:
    found = {v.name: v for v in reference.variants}
    graded = {**REQUIRED, **REFERENCE_OPS}
    assert {n: (found[n].status, found[n].score) for n in graded} == {
        n: (Outcome.PASSED, float(w)) for n, w in graded.items()}, [(n, found[n].message) for n in graded]
    # Every kernel of a graded variant passed, the checks (forward, decode) among them.
    failed = [(k.name, k.message) for k in reference.kernels
              if (k.variant in graded or k.variant is None) and k.status is not KernelStatus.PASSED]
    assert not failed, failed
    # The op folders the reference does not have: not submitted, no points, no cost beyond the course's minimum.
    absent = [v for v in found.values() if v.name not in graded]
    assert absent and all(v.status is Outcome.NOT_SUBMITTED and v.score == 0 for v in absent)
    assert reference.score == reference.max_score == 30
    print(f"\ngpt2-m3 reference: {reference.score:g}/{reference.max_score:g}; stages (s): "
          + ", ".join(f"{stage} {seconds:.1f}" for stage, seconds in reference.stages.items()))
