"""gpt2-m3's competition on a real GPU: the reference (milestone 1's kernels) is gated in with a speed on every run,
a matmul that ignores its bias is gated out with the words, and kernels_competition/ is what competes.

Marked `gpu`: skipped with the reason where there is no CUDA device. Each submission runs the whole run set (GPT-2
124M's shapes, three runs, a warm-up and at least three timed generations each).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from grader.competition.results import CompetitionResult
from grader.competition.run import compete
from grader.competition.spec import load_competition
from grader.options import Options
from grader.assignment import Assignment, load_assignment
from grader.status import TimingStatus

pytestmark = pytest.mark.gpu

BIAS_MUTANT = load_assignment("gpt2-m1").root / "samples" / "mutant-matmul-ignores-bias" / "kernels" / "matmul.cuh"


@pytest.fixture(scope="module")
def m3() -> Assignment:
    return load_assignment("gpt2-m3")


def team(m3: Assignment, folder: Path, files: dict[str, Path]) -> Path:
    """The reference's repository with `files` (path in the submission -> the file to put there)."""
    shutil.copytree(m3.reference_dir, folder)
    for relative, source in files.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, folder / relative)
    return folder


def run(m3: Assignment, folder: Path, cache_dir: Path) -> CompetitionResult:
    return compete(folder, m3, Options(cache_dir=cache_dir), load_competition(m3))


def test_the_reference_is_gated_in_with_a_speed_on_every_run(m3: Assignment, cache_dir: Path) -> None:
    result = run(m3, m3.reference_dir, cache_dir)
    assert result.entered, result.words
    assert [r.name for r in result.runs] == ["b1-p16-g16", "b1-p16-g64", "b4-p16-g32"]
    for r in result.runs:
        assert r.status is TimingStatus.TIMED and r.message.startswith("gated in: "), r.message
        assert len(r.samples_s) >= 3 and all(s > 0 for s in r.samples_s)
        assert r.tokens_per_s is not None and r.tokens_per_s > 0
        assert r.max_abs_err is not None and r.max_abs_err <= 0.1 and r.rmse <= 4e-3
        # The kernels' time is part of the generation's wall clock, never more.
        assert r.median_s <= sorted(r.wall_samples_s)[len(r.wall_samples_s) // 2] * 1.05
    assert result.geomean_tokens_per_s > 0 and result.device
    assert result.folder == "kernels/ (kernels_competition/ is not in the submission)"
    assert result.notes == ()  # milestone 1's kernels call no cuBLAS
    print(f"\n{result.device}: {result.words}; " + ", ".join(f"{r.name} {r.tokens_per_s:,.1f} tokens/s "
                                                          f"(±{100 * r.rse:.1f}%)" for r in result.runs))


def test_a_matmul_that_ignores_its_bias_is_gated_out_with_the_words(m3: Assignment, cache_dir: Path,
                                                                    tmp_path: Path) -> None:
    result = run(m3, team(m3, tmp_path / "mutant", {"kernels/matmul.cuh": BIAS_MUTANT}), cache_dir)
    assert not result.entered and result.geomean_tokens_per_s is None
    assert all(r.status is TimingStatus.WRONG and r.tokens_per_s is None for r in result.runs)
    assert result.words.startswith("not entered: run b1-p16-g16 (B=1, 16 tokens) gated out: the logits of generated "
                                   "token 1 of 16: largest error "), result.words


def test_kernels_competition_is_what_competes(m3: Assignment, cache_dir: Path, tmp_path: Path) -> None:
    """The reference's kernels/ with the bias mutant in kernels_competition/: the folder's matmul is the one run."""
    folder = team(m3, tmp_path / "overlaid", {"kernels_competition/matmul.cuh": BIAS_MUTANT})
    result = run(m3, folder, cache_dir)
    assert result.folder == "kernels/ with kernels_competition/ laid over it"
    assert not result.entered and "gated out: the logits" in result.words
