"""Students' repositories as they are: `sources` with alternatives and globs, a fork's sibling module, a C helper
file, and a variant built inside the whole repository (its `../kernels_op_9/` and `../cpu_kernels/` includes)."""

from __future__ import annotations

import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from grader.build import build_key, build_submission, toolchain_for
from grader.errors import SpecError
from grader.options import Options
from grader.pipeline import grade
from grader.sources import Origin, gather_sources, glob_matches
from grader.assignment import Assignment, load_assignment

from conftest import copy_assignment

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")

FLASH_SOURCES = 'header = "src/flash_attention.h"\nsources = ["src/flash_attention.h", "src/flash_attention.cpp"]'


def _flash_pack(tmp_path: Path, sources: str) -> Path:
    """flash-attention-cpu with its flash kernel's `sources` line replaced."""
    pack = copy_assignment("flash-attention-cpu", tmp_path)
    spec = pack / "assignment.toml"
    assert FLASH_SOURCES in spec.read_text(), "test setup: the flash kernel's sources moved"
    spec.write_text(spec.read_text().replace(FLASH_SOURCES, f'header = "src/flash_attention.h"\nsources = {sources}'))
    return pack


# ---------------------------------------------------------------- the spec's form


@pytest.mark.parametrize(("sources", "expected"), [
    ('[[]]', r"entry 0 must be a path, a glob or a non-empty list of alternative paths or globs \(strings\), found \[\]"),
    ('["src/flash_attention.h", [3]]', r"entry 1 must be a path, a glob .*found \[3\]"),
    ('["src/../flash_attention.h"]', r"entry 0: 'src/\.\./flash_attention\.h' must be a plain path relative to the"),
    ('[["src/a.h", "src/a.h"]]', r"entry 0 names an alternative twice"),
], ids=["empty-alternatives", "not-a-string", "above-the-root", "repeated-alternative"])
def test_a_broken_sources_entry_names_file_kernel_key_and_the_form(tmp_path: Path, sources: str,
                                                                   expected: str) -> None:
    with pytest.raises(SpecError) as error:
        load_assignment(_flash_pack(tmp_path, sources))
    assert re.search(r"assignment\.toml kernel 'flash_attention' key 'sources': " + expected,
                     str(error.value)), str(error.value)


def test_alternatives_and_globs_load_and_the_plain_form_reads_as_before(tmp_path: Path) -> None:
    pack = load_assignment(_flash_pack(tmp_path, '[["src/flash_attention.h", "flash/attention.h"], "src/*.cpp"]'))
    flash = pack.kernel("flash_attention")
    assert flash.source_entries == (("src/flash_attention.h", "flash/attention.h"), ("src/*.cpp",))
    assert flash.sources == ("src/flash_attention.h", "src/*.cpp")  # each entry as the template names it
    assert pack.source_dirs == ("src",)  # as given; without it, every alternative's folder (flash/ too)
    standard = pack.kernel("standard_attention")
    assert standard.source_entries == tuple((s,) for s in standard.sources)
    assert glob_matches("src/**/*.cpp", "src/a/b/k.cpp") and glob_matches("**/model.py", "model.py")
    assert not glob_matches("src/*.cpp", "src/a/k.cpp") and not glob_matches("*.py", "kernels/k.py")


# ---------------------------------------------------------------- resolved against the checkout


def test_a_fork_that_renames_the_header_builds_with_its_own_name_and_a_glob_takes_every_match(
        tmp_path: Path, cache_dir: Path) -> None:
    pack = load_assignment(_flash_pack(tmp_path, '[["src/flash_attention.h", "src/flash.h"], "src/flash*.cpp"]'))
    root = shutil.copytree(pack.reference_dir, tmp_path / "fork")
    (root / "src" / "flash_attention.h").rename(root / "src" / "flash.h")
    cpp = root / "src" / "flash_attention.cpp"
    cpp.write_text(cpp.read_text().replace('"flash_attention.h"', '"flash.h"'))
    (root / "src" / "flash_tiles.cpp").write_text('#include "flash.h"\nint flash_tiles_unused() { return 3; }\n')
    flash = pack.kernel("flash_attention")
    sources = gather_sources(pack, root, (flash,)).of("flash_attention")
    assert sources.problem == ""
    assert sources.resolved == ("src/flash.h", "src/flash_attention.cpp", "src/flash_tiles.cpp")
    assert sources.called(flash).header == "src/flash.h"
    artifact = build_submission(pack, root, cache_dir, (flash,))["flash_attention"]
    assert artifact.status == "built", artifact.message
    # None present: each entry named with its alternatives, a glob by what it asks for.
    (root / "src" / "flash.h").unlink()
    for path in (root / "src").glob("flash*.cpp"):
        path.unlink()
    assert gather_sources(pack, root, (flash,)).of("flash_attention").problem == (
        "missing file(s) src/flash_attention.h or src/flash.h, a file matching src/flash*.cpp: the assignment "
        "needs them")


# ---------------------------------------------------------------- what the graded files import and include


@pytest.fixture(scope="module")
def python_pack() -> Assignment:
    return load_assignment("array-kernels-python")


def test_a_forks_kernel_imports_its_sibling_module_and_scratch_files_cost_nothing(
        python_pack: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    root = shutil.copytree(python_pack.reference_dir, tmp_path / "fork")
    (root / "kernels" / "axpy.py").write_text(
        "from fastmath import fused\n\n\ndef axpy(a, x, y, out, n):\n    fused(a, x, y, out)\n")
    (root / "fastmath.py").write_text("def fused(a, x, y, out):\n    out[:] = a * x + y\n")
    (root / "scratch.py").write_text("def unfinished(:\n")  # never imported: no compile error
    (root / "tools").mkdir()
    (root / "tools" / "plot.py").write_text("import matplotlib\n")
    axpy = python_pack.kernel("axpy")
    origins = {f.path: f.origin for f in gather_sources(python_pack, root, (axpy,)).of("axpy").files}
    assert origins["fastmath.py"] is Origin.IMPORTABLE and origins["tools/plot.py"] is Origin.IMPORTABLE
    artifact = build_submission(python_pack, root, cache_dir, (axpy,))["axpy"]
    assert artifact.status == "built", artifact.message
    assert "fastmath.py" not in artifact.files  # `built_from` lists what the kernel is, not what it might import
    with zipfile.ZipFile(artifact.library) as archive:
        packed = set(archive.namelist())
    assert {"kernels/axpy.py", "kernels/__init__.py", "fastmath.py"} <= packed
    assert not packed & {"scratch.py", "tools/plot.py", "kernels/matvec.py"}  # not imported: not packed
    result = grade(root, python_pack, Options(cache_dir=cache_dir, public_only=True, kernels=("axpy",)))
    assert [k.status for k in result.kernels] == ["passed"], result.kernels[0].message


FLASH_CALLS_C_HELPER = """\
#include "flash_attention.h"
#include "standard_attention.h"

extern "C" void scale_rows(float* O, int n, float by);  // src/scale.c

void flash_attention(const float* Q, const float* K, const float* V, float* O, int N, int d, int Br, int Bc) {
    (void)Br; (void)Bc;
    standard_attention(Q, K, V, O, N, d);
    scale_rows(O, N * d, 1.0f);
}
"""

# C, not C++: `new` is a name, and malloc's void* converts without a cast.
C_HELPER = """\
#include <stdlib.h>
#include <string.h>

void scale_rows(float* O, int n, float by) {
    float* new = malloc(sizeof(float) * (size_t)n);
    for (int i = 0; i < n; ++i) new[i] = O[i] * by;
    memcpy(O, new, sizeof(float) * (size_t)n);
    free(new);
}
"""


def test_a_kernel_calls_a_helper_of_its_folder_written_in_c(tmp_path: Path, cache_dir: Path) -> None:
    pack = load_assignment("flash-attention-cpu")
    root = shutil.copytree(pack.reference_dir, tmp_path / "submission")
    (root / "src" / "flash_attention.cpp").write_text(FLASH_CALLS_C_HELPER)
    (root / "src" / "scale.c").write_text(C_HELPER)
    artifact = build_submission(pack, root, cache_dir, (pack.kernel("flash_attention"),))["flash_attention"]
    assert artifact.status == "built", artifact.message
    assert "src/scale.c" in artifact.files
    defined = subprocess.run(["nm", "-D", "--defined-only", str(artifact.library)], capture_output=True,
                             text=True).stdout.split()
    assert "scale_rows" in defined  # C linkage: compiled as C, not as C++


@pytest.fixture(scope="module")
def m3() -> Assignment:
    return load_assignment("gpt2-m3")


def _m3_fork(m3: Assignment, tmp_path: Path) -> Path:
    """The course's layout: op_9's attention includes the softmax of its own folder, at that folder's path, which
    includes a header of the repository's cpu_kernels/."""
    root = shutil.copytree(m3.reference_dir, tmp_path / "team")
    attention = (root / "kernels" / "attention.cuh").read_text()
    assert '#include "../kernels/softmax.cuh"' in attention, "test setup: attention's includes moved"
    (root / "kernels_op_9" / "attention.cuh").write_text(
        attention.replace('#include "../kernels/softmax.cuh"', '#include "../kernels_op_9/softmax.cuh"'))
    (root / "kernels_op_9" / "softmax.cuh").write_text(
        '#include "../cpu_kernels/softmax_ref.h"\n' + (root / "kernels" / "softmax.cuh").read_text())
    (root / "cpu_kernels").mkdir()
    (root / "cpu_kernels" / "softmax_ref.h").write_text("#pragma once\nconstexpr int SOFTMAX_REF_BLOCK = 256;\n")
    (root / "cpu_kernels" / "softmax_ref.cpp").write_text("this is not C++, and nothing includes it\n")
    return root


TINY_PACK = """\
[assignment]
name = "fill-variants"
version = "1"
target = "cuda"
provided = []
source_dirs = ["kernels"]
public_seed = 1
compile_flags = ["-O1", "-std=c++17"]
gold = "numpy"

[[kernels]]
name = "fill"
weight = 1
header = "kernels/fill.cuh"
sources = ["kernels/fill.cuh"]
signature = "void fill(float* out, int n)"
tolerance = { atol = 0, rtol = 0 }
buffers.out = { role = "output", shape = "n" }
cases = [{ name = "four", public = true, n = 4 }]

[[variants]]
name = "op_9"
folder = "kernels_op_9"
weight = 1
"""

FILL = """\
#pragma once
#include "../kernels_op_9/fill_value.cuh"
#include "../cpu_kernels/fill_ref.h"

__global__ void fill_kernel(float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = FILL_VALUE * FILL_REF_SCALE;
}

void fill(float* out, int n) { fill_kernel<<<(n + 255) / 256, 256>>>(out, n); }
"""


@needs_nvcc
def test_a_variant_is_built_inside_the_whole_repository(tmp_path: Path, cache_dir: Path) -> None:
    """The course copies kernels_op_9/ over kernels/ in the team's repository: its own folder's files and
    cpu_kernels/ stay where they are, for the variant's includes (m3-shaped, one tiny kernel: one nvcc run)."""
    pack = tmp_path / "assignments" / "fill-variants"
    pack.mkdir(parents=True)
    (pack / "assignment.toml").write_text(TINY_PACK)
    (pack / "inputs.py").write_text("def make_inputs(kernel, case, rng):\n    return {}\n")
    (pack / "numpy_reference.py").write_text("import numpy as np\n\n\ndef fill(n, **_):\n"
                                             "    return {'out': np.full(n, 6.0)}\n")
    assignment = load_assignment(pack)
    root = tmp_path / "team"
    for folder in ("kernels", "kernels_op_9", "cpu_kernels"):
        (root / folder).mkdir(parents=True)
    (root / "kernels" / "fill.cuh").write_text("#pragma once\nvoid fill(float* out, int n);\n")  # milestone 1's
    (root / "kernels_op_9" / "fill.cuh").write_text(FILL)
    (root / "kernels_op_9" / "fill_value.cuh").write_text("#pragma once\nconstexpr float FILL_VALUE = 3.0f;\n")
    (root / "cpu_kernels" / "fill_ref.h").write_text("#pragma once\nconstexpr float FILL_REF_SCALE = 2.0f;\n")
    (root / "cpu_kernels" / "fill_ref.cu").write_text("this is not CUDA, and nothing includes it\n")
    kernel = assignment.kernel("op_9/fill")
    origins = {f.path: f.origin for f in gather_sources(assignment, root, (kernel,)).of("op_9/fill").files}
    assert origins["kernels/fill.cuh"] is Origin.OVERLAY and origins["kernels/fill_value.cuh"] is Origin.OVERLAY
    assert origins["kernels_op_9/fill_value.cuh"] is Origin.INCLUDED
    assert origins["cpu_kernels/fill_ref.h"] is Origin.INCLUDED and "cpu_kernels/fill_ref.cu" not in origins
    artifact = build_submission(assignment, root, cache_dir, (kernel,), cuda_arch="sm_90")["op_9/fill"]
    assert artifact.status == "built", artifact.message
    assert {"kernels_op_9/fill_value.cuh", "cpu_kernels/fill_ref.h"} <= set(artifact.files)


def test_a_file_beyond_the_folders_is_in_the_key_of_the_builds_that_include_it_alone(m3: Assignment,
                                                                                     tmp_path: Path) -> None:
    root = _m3_fork(m3, tmp_path)
    toolchain = toolchain_for("cuda", "sm_90")
    chosen = tuple(m3.kernel(n) for n in ("op_9/attention", "op_9/encoder", "encoder"))

    def keys() -> dict[str, str | None]:
        sources = gather_sources(m3, root, chosen)
        return {k.name: build_key(m3, k, sources.of(k.name), toolchain) for k in chosen}

    before = keys()
    assert before["op_9/encoder"] == before["encoder"]  # op_9 leaves encoder alone: one build for both
    (root / "cpu_kernels" / "softmax_ref.h").write_text("#pragma once\nconstexpr int SOFTMAX_REF_BLOCK = 128;\n")
    after = keys()
    assert after["op_9/attention"] != before["op_9/attention"]  # never a stale library
    assert after["op_9/encoder"] == before["op_9/encoder"] == after["encoder"]
