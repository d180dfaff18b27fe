"""A tiny GPT-2 pack on the CPU (target "cpp"): gpt2-m1's six kernels, signatures, inputs.py and
numpy_reference.py, with serial C++ ports of the kernels as its reference, and a [forward] table at
tiny shapes, so that the whole forward-pass check (harness, composition, swap-in, logits,
generation, compare, score) runs on a machine without a GPU.

The kernels are in tests/forward_cpu/*.h, ported from the course's CPU reference; a mutant is a
submission with some of them replaced by the files of tests/forward_cpu/mutants/<name>/
(`submission(root, name, mutant(name))`). `make_variant_pack` adds a milestone-2-like pack based on it.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from grader.assignment import PROJECT_ROOT, Assignment, load_assignment

KERNELS_DIR = Path(__file__).parent / "forward_cpu"
NAME = "gpt2-cpu"

HEADER = """\
[assignment]
name = "gpt2-cpu"
title = "GPT-2 forward pass on the CPU (tests)"
version = "1"
target = "cpp"
source_dirs = ["kernels"]
public_seed = 408
compile_flags = ["-O2", "-std=c++17"]
gold = "numpy"
scratch_init = "zeros"
partial_credit = "fraction"
time_limit_s = {time_limit}
kernel_time_limit_s = {budget}

[forward]
weight = {weight}
B = 1
T = 16
C = 64
NH = 4
L = 2
V = 500
Vp = 512
maxT = 64
seed = 3
generate = 3
# Random weights at these shapes give small logits: a tie margin fit for them.
tie_margin = 1e-3
time_limit_s = {forward_time_limit}
# The pack's matmul tolerance is set for unit-scale inputs; the forward pass's projections are ~100
# times smaller, and float32 on the CPU is far inside this.
tolerances = {{ matmul = {{ atol = 1e-4, rtol = 1e-3 }} }}
"""

# Small cases, each matmul its own shape (as gpt2-m1's are): a shape-keyed cache passes them all.
CASES = {
    "encoder": '{ name = "small", public = true, B = 2, T = 5, C = 16, V = 300, maxT = 64 }',
    "layernorm": '{ name = "small", public = true, B = 2, T = 5, C = 48 }',
    "matmul": '{ name = "small", public = true, B = 2, T = 5, C = 80, OC = 24 }, '
              '{ name = "wider", public = true, B = 1, T = 7, C = 96, OC = 40 }',
    "attention": '{ name = "small", public = true, B = 2, T = 9, C = 32, NH = 4 }',
    "residual": '{ name = "small", public = true, N = 77 }',
    "gelu": '{ name = "small", public = true, N = 77 }',
}


def make_forward_pack(root: Path, weight: float = 1.0, time_limit: float = 20.0) -> Assignment:
    """The pack under root/assignments/gpt2-cpu (with its reference/ inside, as in the repository);
    `time_limit`: each call's, and the forward check's for its three passes."""
    pack = root / "assignments" / NAME
    pack.mkdir(parents=True)
    m1 = PROJECT_ROOT / "assignments" / "gpt2-m1"
    for module in ("inputs.py", "numpy_reference.py"):
        shutil.copyfile(m1 / module, pack / module)
    spec = HEADER.format(weight=weight, time_limit=time_limit, budget=2 * time_limit,
                         forward_time_limit=time_limit) + "".join(_kernel_table(t) for t in _tables((m1 / "assignment.toml").read_text()))
    (pack / "assignment.toml").write_text(spec)
    submission(pack, "reference")
    return load_assignment(pack)


def _tables(spec: str) -> list[str]:
    return spec.split("[[kernels]]\n")[1:]


def _kernel_table(table: str) -> str:
    """gpt2-m1's kernel table for the CPU: its header and sources as .h files, no sanitizer, small cases."""
    name = re.search(r'^name = "(\w+)"', table, re.M).group(1)  # type: ignore[union-attr]
    table = re.sub(r"^sanitizer = .*\n", "", table, flags=re.M)
    table = table.replace(".cuh", ".h").replace('"kernels/softmax.h"', "")
    table = re.sub(r"cases = \[.*?\n\]\n", f"cases = [{CASES[name]}]\n", table, flags=re.S)
    table = re.sub(r"sources = \[(.*?),?\s*\]", lambda m: f"sources = [{m.group(1).strip().rstrip(',')}]", table)
    return "[[kernels]]\n" + table


def submission(folder: Path, name: str, replaced: dict[str, str] | None = None) -> Path:
    """A submission of the serial C++ kernels under folder/name/kernels, with `replaced` files' texts instead."""
    kernels = folder / name / "kernels"
    kernels.mkdir(parents=True)
    for source in KERNELS_DIR.glob("*.h"):
        shutil.copyfile(source, kernels / source.name)
    for file, text in (replaced or {}).items():
        (kernels / file).write_text(text)
    return folder / name


def mutant(name: str) -> dict[str, str]:
    """The files of tests/forward_cpu/mutants/<name>/, by file name."""
    return {path.name: path.read_text() for path in sorted((KERNELS_DIR / "mutants" / name).glob("*.h"))}


VARIANT_PACK = """\
[assignment]
name = "gpt2-cpu-m2"
title = "GPT-2 on the CPU, optimizations (tests)"
version = "1"
based_on = "gpt2-cpu"
base_weight = 0

[[variants]]
name = "req_0"
title = "A faster matmul"
folder = "kernels_req_0"
weight = 6
must_change = ["kernels/matmul.h"]
"""


def make_variant_pack(root: Path) -> Assignment:
    """gpt2-cpu (made first) and a pack based on it with one all-or-nothing variant laid over kernels/."""
    pack = root / "assignments" / "gpt2-cpu-m2"
    pack.mkdir(parents=True)
    (pack / "assignment.toml").write_text(VARIANT_PACK)
    return load_assignment(pack)
