"""contextual-sparsity on a GPU machine: the reference's top-k on CUDA tensors against the float64 gold, and the
reference graded whole through the pack's adapter (marked `gpu`: skipped, with the reason, where there is none).

The adapter computes on the GPU where PyTorch in its harness sees one. The python target shows the harness the GPU
when the pack names torch.cuda: contextual-sparsity does not (it grades on the CPU anywhere), so the last test grades
the reference through a pack based on it that does."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from grader.cases import Seed, make_case_inputs
from grader.options import Options
from grader.pipeline import grade
from grader.assignment import Assignment, load_assignment
from grader.targets import target_of

from conftest import needs_torch
from pack_samples import Graded, graded_once, kernel_of

PACK = "contextual-sparsity"
pytestmark = [pytest.mark.gpu, needs_torch]


@pytest.fixture(scope="module")
def pack() -> Assignment:
    return load_assignment(PACK)


@pytest.fixture(scope="module")
def graded(pack: Assignment, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Graded:
    return graded_once(pack, tmp_path_factory, cache_dir)


@pytest.fixture
def reference_code(pack: Assignment, monkeypatch: pytest.MonkeyPatch):
    """The reference's sparsity/topk.py and the pack's models, imported here (the test's process sees the GPU)."""
    monkeypatch.syspath_prepend(str(pack.reference_dir))
    for name in ("sparsity", "sparsity.topk", "sparsity_models"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import sparsity.topk as topk
    import sparsity_models as models
    return topk, models


def test_reference_topk_on_cuda_matches_the_float64_gold(pack: Assignment, reference_code) -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("PyTorch here sees no CUDA device")
    topk, models = reference_code
    gold = pack.numpy_reference()
    kernel = next(k for k in pack.kernels if k.name == "classifier_logits")
    cuda = torch.device("cuda")
    for case in kernel.cases:
        arrays = make_case_inputs(pack, kernel, case, Seed(pack.public_seed))
        model = models.MLPClassifier().to(device=cuda, dtype=torch.float64)
        with torch.no_grad():
            for layer, w, b in zip([*model.hidden, model.out], ("w1", "w2", "w3"), ("b1", "b2", "b3")):
                layer.weight.copy_(torch.from_numpy(arrays[w].reshape(tuple(layer.weight.shape))))
                layer.bias.copy_(torch.from_numpy(arrays[b]))
            x = torch.from_numpy(arrays["x"].reshape(case.params["batch"], 16)).to(cuda)
            found = topk.topk_forward(model, x, case.params["k"])
        assert found.device.type == "cuda"
        expected = gold.classifier_logits(**arrays, **case.params)["logits"]
        np.testing.assert_allclose(found.cpu().numpy().reshape(-1), expected, rtol=1e-9, atol=1e-10,
                                   err_msg=case.name)


def test_reference_scores_full_marks_on_the_gpu_machine(graded: Graded) -> None:
    result = graded(None)
    assert result.score == result.max_score == 12, [k.message for k in result.kernels]
    assert max(c.tolerance_used for k in result.kernels for c in k.cases) < 1e-3


def test_the_adapter_computes_on_cuda_where_the_harness_sees_the_gpu(pack: Assignment, tmp_path: Path,
                                                                     cache_dir: Path) -> None:
    """The pack names torch alone, so it grades on the CPU anywhere; a pack based on it that names torch.cuda too
    (as nanogpt-kvcache-cuda does) gives the harness the GPU, and the same reference scores full marks there."""
    (tmp_path / PACK).symlink_to(pack.root)  # based_on names a sibling folder
    folder = tmp_path / f"{PACK}-cuda"
    folder.mkdir()
    (folder / "template").symlink_to(pack.template_dir)  # the provided adapter and models are read from it
    (folder / "assignment.toml").write_text(f'[assignment]\nname = "{PACK}-cuda"\nbased_on = "{PACK}"\n'
                                            'python_packages = ["torch", "torch.cuda"]\n')
    on_gpu = load_assignment(folder)
    assert target_of(on_gpu).needs_gpu and not target_of(pack).needs_gpu
    result = grade(pack.reference_dir, on_gpu, Options(cache_dir=cache_dir))
    assert result.score == result.max_score == 12, [k.message for k in result.kernels]
    log = kernel_of(result, "classifier_accuracy").log
    assert "on cuda" in log and "on cpu" not in log, log
