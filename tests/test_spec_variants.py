"""What a variant is graded on: all of the assignment's kernels and checks by default, or those its `kernels` key
names (a variant-only kernel, a variant-only check); a based_on assignment adding kernels to the inherited ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.errors import SpecError
from grader.assignment import load_assignment

from conftest import copy_assignment

LOCAL = '''
[[kernels]]
name = "local_attention"
variant_only = true
weight = 1
header = "kernels/local_attention.cuh"
sources = ["kernels/local_attention.cuh"]
signature = "void local_attention_forward(float* out, float* qkvr, float* inp, int B, int T, int NH, int HS)"
tolerance = { atol = 1e-3, rtol = 1e-3 }
buffers.out = { role = "output", shape = "B, T, NH * HS" }
buffers.qkvr = { role = "scratch", shape = "3, B, NH, T, HS" }
buffers.inp = { role = "input", shape = "B, T, 3, NH, HS", mutable = true }
cases = [{ name = "small", public = true, B = 1, T = 3, NH = 1, HS = 4 }]
'''


def _child(tmp_path: Path, body: str) -> Path:
    """An assignment based on gpt2-m2 (and so gpt2-m1), beside copies of both, with `body` after its [assignment]."""
    for parent in ("gpt2-m1", "gpt2-m2"):
        copy_assignment(parent, tmp_path)
    folder = tmp_path / "assignments" / "child"
    folder.mkdir()
    (folder / "assignment.toml").write_text(
        '[assignment]\nname = "child"\nbased_on = "gpt2-m2"\nbase_weight = 0\n' + body)
    return folder


def test_a_variant_named_kernels_is_graded_on_them_alone_and_its_weight_is_theirs(tmp_path: Path) -> None:
    folder = _child(tmp_path, LOCAL + '''
[[variants]]
name = "flash"
folder = "kernels_flash"
weight = 6

[[variants]]
name = "local"
folder = "kernels_local"
weight = 2
kernels = ["local_attention"]
''')
    a = load_assignment(folder)
    names = {k.name: k.weight for k in a.kernels}
    # The inherited six come first, the added kernel after them; it is no base kernel and in no default variant.
    assert [k.name for k in a.base_kernels] == ["encoder", "layernorm", "matmul", "attention", "residual", "gelu"]
    assert "local_attention" not in names and "flash/local_attention" not in names
    assert names["local/local_attention"] == 2
    assert [k.name for k in a.kernels_of("local")] == ["local/local_attention"]
    # The default: every kernel that is not variant-only, shared by their base weights, and the forward check.
    assert sum(w for n, w in names.items() if n.startswith("flash/")) == pytest.approx(6)
    assert names["flash/attention"] == pytest.approx(6 * 3 / 10)
    assert [k.name for k in a.check_kernels] == ["forward", "flash/forward"]
    assert a.max_score == 8
    # Its gold and inputs are keyed by the definition's name, which the assignment still finds.
    assert a.kernel("local_attention").variant_only


def test_a_variant_graded_on_a_check_alone_builds_the_kernels_it_composes_with_no_weight(tmp_path: Path) -> None:
    folder = _child(tmp_path, '''
[forward]
variant_only = true
weight = 1
B = 1
T = 8

[[variants]]
name = "cache"
folder = "kernels_cache"
weight = 12
kernels = ["forward"]

[[variants]]
name = "flash"
folder = "kernels_flash"
weight = 6
''')
    a = load_assignment(folder)
    # A variant-only check has no base result and no copy in a variant that does not name it.
    assert [(k.name, k.weight) for k in a.check_kernels] == [("cache/forward", 12)]
    composed = {k.name: k.weight for k in a.kernels_of("cache")}
    assert composed == {f"cache/{n}": 0 for n in ("encoder", "layernorm", "matmul", "attention", "residual", "gelu")}
    assert sum(k.weight for k in a.kernels_of("flash")) == pytest.approx(6)
    assert a.max_score == 18
    assert a.select(("cache",)) == a.kernels_of("cache")


@pytest.mark.parametrize(("body", "expected"), [
    ('[[variants]]\nname = "v"\nfolder = "kv"\nweight = 1\nkernels = ["softmax"]\n',
     r"variant 'v': key 'kernels' names \['softmax'\], which are neither kernels nor checks of the assignment "
     r"\(have encoder, layernorm, matmul, attention, residual, gelu, forward\)"),
    ('[[variants]]\nname = "v"\nfolder = "kv"\nweight = 1\nkernels = []\n', r"variant 'v': key 'kernels' is empty"),
    ('[forward]\nvariant_only = "yes"\nweight = 0\nB = 1\nT = 8\n', r"\[forward\]: key 'variant_only' must be bool"),
])
def test_what_a_variant_is_graded_on_is_checked_with_the_file_and_key(tmp_path: Path, body: str,
                                                                       expected: str) -> None:
    with pytest.raises(SpecError, match=expected):
        load_assignment(_child(tmp_path, body))


def test_a_kernel_of_the_same_name_replaces_the_inherited_one_in_its_place(tmp_path: Path) -> None:
    inherited = (Path(__file__).parent.parent / "assignments" / "gpt2-m1" / "assignment.toml").read_text()
    gelu = inherited[inherited.index('[[kernels]]\nname = "gelu"'):].replace("weight = 1", "weight = 5", 1)
    a = load_assignment(_child(tmp_path, gelu))
    assert [(k.name, k.weight) for k in a.base_kernels][-2:] == [("residual", 0), ("gelu", 0)]
    assert load_assignment(_child(tmp_path / "w", gelu.replace("base_weight", "x"))).kernel("gelu") is not None


def test_a_kernel_of_the_same_name_with_some_keys_changes_those_and_keeps_the_rest(tmp_path: Path) -> None:
    inherited = load_assignment("gpt2-m1").kernel("gelu")
    a = load_assignment(_child(tmp_path, '[[kernels]]\nname = "gelu"\ntolerance = { atol = 0.5, rtol = 0.0 }\n'))
    gelu = a.kernel("gelu")
    assert [k.name for k in a.base_kernels][-1] == "gelu"
    assert gelu.tolerance.atol == 0.5 and gelu.tolerance != inherited.tolerance
    assert (gelu.cases, gelu.signature, gelu.sources) == (inherited.cases, inherited.signature, inherited.sources)
    # A wrong key in the few given is named where it was written.
    with pytest.raises(SpecError, match=r"child/assignment\.toml kernel 'gelu': key 'tolerance' must be dict"):
        load_assignment(_child(tmp_path / "bad", '[[kernels]]\nname = "gelu"\ntolerance = "tight"\n'))
