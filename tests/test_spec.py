"""Loading assignment packs: the bundled ones load, broken ones fail with a message naming file and key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from grader.errors import SpecError
from grader.assignment import evaluate, list_assignments, load_assignment, parse_signature

from conftest import copy_assignment


def test_bundled_packs_load_with_the_course_weights() -> None:
    packs = {a.name: a for a in list_assignments()}
    gpt2 = packs["gpt2-m1"]
    assert {k.name: k.weight for k in gpt2.kernels} == {
        "encoder": 1, "layernorm": 2, "matmul": 2, "attention": 3, "residual": 1, "gelu": 1}
    assert gpt2.max_score == 10
    assert all(len(k.cases) >= 5 for k in gpt2.kernels)
    assert all(any(c.public for c in k.cases) for a in packs.values() for k in a.kernels)
    assert packs["flash-attention-cpu"].target == "cpp"


def test_signature_parsing_keeps_types_constness_and_order() -> None:
    signature = parse_signature("void matmul_forward(float* out, const float *inp, int B, int OC)", "here")
    assert signature.function == "matmul_forward"
    assert [(p.name, p.ctype, p.pointer, p.const) for p in signature.parameters] == [
        ("out", "float", True, False), ("inp", "float", True, True), ("B", "int", False, False),
        ("OC", "int", False, False)]
    assert signature.text == "void matmul_forward(float* out, const float* inp, int B, int OC)"


def test_shape_expressions_use_case_parameters() -> None:
    assert evaluate("B * T * max(3 * C, NH * T)", {"B": 2, "T": 1024, "C": 768, "NH": 12}) == 2 * 1024 * 12 * 1024
    assert evaluate("C / NH", {"C": 96, "NH": 4}) == 24
    with pytest.raises(ValueError):
        evaluate("__import__('os')", {})


def _broken(tmp_path: Path, old: str, new: str) -> str:
    pack = copy_assignment("flash-attention-cpu", tmp_path)
    spec = pack / "assignment.toml"
    text = spec.read_text()
    assert old in text, f"test setup: {old!r} not in the spec"
    spec.write_text(text.replace(old, new, 1))
    with pytest.raises(SpecError) as error:
        load_assignment(pack)
    return str(error.value)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ('target = "cpp"', 'target = "fortran"', r"assignment\.toml \[assignment\]: key 'target' must be one of cuda, cpp, python, found 'fortran'"),
        ("weight = 2", 'weight = "two"', r"kernel 'flash_attention': key 'weight' must be float, found 'two'"),
        ("void standard_attention(", "standard_attention(", r"kernel 'standard_attention' key 'signature': expected a signature"),
        ("int N, int d)\"\n# Float32", "int N, int d, half h)\"\n# Float32", r"parameter 'half h' must be one of"),
        ('buffers.O = { role = "output", shape = "N, d" }\nbuffers.Q', 'buffers.Q', r"kernel 'standard_attention': pointer parameter 'O' has no entry in 'buffers'"),
        ('{ name = "one-row", public = true, N = 1, d = 16 }', '{ name = "one-row", public = true, N = 1 }', r"kernel 'standard_attention' case 'one-row': missing value for scalar parameter\(s\) d"),
        ('role = "output", shape = "N, d" }', 'role = "result", shape = "N, d" }', r"buffers\.O: key 'role' must be one of input, output, scratch, found 'result'"),
        ('shape = "N, d" }\nbuffers.Q', 'shape = "N, dd" }\nbuffers.Q', r"case 'one-row': shape of 'O' uses 'dd', which the case does not set"),
        ('name = "flash-attention-cpu"', 'name = "flash"', r"name 'flash' must match the folder 'flash-attention-cpu'"),
        ("[assignment]", "[assignment", r"assignment\.toml: not valid TOML"),
        ("public_seed = 2024", "", r"\[assignment\]: missing key 'public_seed'"),
        ('role = "output", shape = "N, d" }', 'role = "output", shape = "N, d", init = "zeros" }',
         r"buffers\.O: 'init' is for scratch buffers only; inputs come from inputs\.py and outputs are always poisoned"),
        ("public_seed = 2024", 'public_seed = 2024\nscratch_init = "garbage"',
         r"key 'scratch_init' must be one of zeros, poison, leftover, found 'garbage'"),
        ("public_seed = 2024", 'public_seed = 2024\nlibraries = ["mkl"]', r"unknown librar\(ies\) \['mkl'\]; expected some of cublas"),
        ('{ name = "one-row", public = true, N = 1, d = 16 }',
         '{ name = "one-row", public = true, N = 1, d = 16, tolerance = { atol = 1e-3 } }',
         r"case 'one-row' tolerance: missing key 'rtol'"),
        ("public_seed = 2024", 'public_seed = 2024\ngold = "oracle"', r"key 'gold' must be one of reference, numpy, found 'oracle'"),
        ("weight = 2", 'weight = 2\nevidence = ["tiling"]',
         r"kernel 'flash_attention': key 'evidence': unknown evidence \['tiling'\]; expected some of tensor_cores"),
        ("weight = 2", 'weight = 2\nevidence_penalty = 1.5',
         r"kernel 'flash_attention': key 'evidence_penalty' is a share of the kernel's weight between 0 and 1, found 1.5"),
    ],
    ids=["bad-target", "bad-weight", "bad-signature", "unsupported-type", "unbuffered-pointer", "missing-scalar",
         "bad-role", "unknown-shape-name", "name-mismatch", "invalid-toml", "missing-seed", "init-on-output",
         "bad-scratch-init", "unknown-library", "case-tolerance-without-rtol", "bad-gold", "unknown-kernel-evidence",
         "kernel-evidence-penalty-above-1"],
)
def test_broken_spec_names_file_key_and_expectation(tmp_path: Path, old: str, new: str, expected: str) -> None:
    message = _broken(tmp_path, old, new)
    assert "assignment.toml" in message
    assert re.search(expected, message), message


def test_missing_numpy_reference_is_named(tmp_path: Path) -> None:
    pack = copy_assignment("flash-attention-cpu", tmp_path)
    (pack / "numpy_reference.py").unlink()
    with pytest.raises(SpecError, match=r"missing numpy_reference\.py"):
        load_assignment(pack)


def test_unknown_assignment_lists_the_known_ones() -> None:
    with pytest.raises(SpecError, match=r"no assignment named 'gpt3'.*known: .*flash-attention-cpu.*gpt2-m1"):
        load_assignment("gpt3")


def test_gpt2_m1_zeroes_scratch_builds_the_whole_kernels_folder_and_judges_against_float64_truth() -> None:
    gpt2 = load_assignment("gpt2-m1")
    assert gpt2.source_dirs == ("kernels",) and gpt2.gold == "numpy" and gpt2.libraries == ("cublas",)
    scratch = {b.name: b.init for k in gpt2.kernels for b in k.buffers if b.role == "scratch"}
    assert scratch == {"mean": "zeros", "rstd": "zeros", "qkvr": "zeros", "att": "zeros"}


def test_a_pack_without_source_dirs_builds_from_the_folders_its_kernels_lie_in(tmp_path: Path) -> None:
    pack = copy_assignment("flash-attention-cpu", tmp_path)
    spec = pack / "assignment.toml"
    assert load_assignment(pack).source_dirs == ("src",)
    spec.write_text(spec.read_text().replace('source_dirs = ["src"]\n', ""))
    assert load_assignment(pack).source_dirs == ("src",)  # the default: src/ holds the kernels' sources
    spec.write_text(spec.read_text().replace("provided = []\n", "provided = []\nsource_dirs = []\n"))
    assert load_assignment(pack).source_dirs == ()  # said so: only the kernels' own files


def test_a_case_may_override_its_kernels_tolerance(tmp_path: Path) -> None:
    pack = copy_assignment("flash-attention-cpu", tmp_path)
    spec = pack / "assignment.toml"
    spec.write_text(spec.read_text().replace('{ name = "one-row", public = true, N = 1, d = 16 }',
                                             '{ name = "one-row", public = true, N = 1, d = 16, '
                                             'tolerance = { atol = 0.5, rtol = 0.25 } }', 1))
    kernel = load_assignment(pack).kernel("standard_attention")
    one_row = next(c for c in kernel.cases if c.name == "one-row")
    assert kernel.tolerance_for(one_row).atol == 0.5 and kernel.tolerance_for(one_row).rtol == 0.25
    assert "tolerance" not in one_row.params
    other = next(c for c in kernel.cases if c.name != "one-row")
    assert kernel.tolerance_for(other) == kernel.tolerance
