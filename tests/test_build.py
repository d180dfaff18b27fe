"""Real builds: nvcc for the CUDA pack (compile only on a machine without a GPU), g++ for the shim ABI."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from grader.build import build_submission, library_flags, save_build, summarise_compiler_output, toolchain_for
from grader.targets.shim import SHIM_SYMBOL, shim_source
from grader.assignment import Assignment, load_assignment

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
needs_cublas = pytest.mark.skipif(shutil.which("nvcc") is None or not library_flags(("cublas",), toolchain_for("cuda")),
                                  reason="needs nvcc and cuBLAS (the CUDA toolkit's, or `pip install nvidia-cublas`)")


@pytest.fixture(scope="module")
def gpt2() -> Assignment:
    return load_assignment("gpt2-m1")


def test_cuda_shim_synchronises_checks_errors_and_forwards_every_argument(gpt2: Assignment) -> None:
    source = shim_source(gpt2.kernel("attention"), "cuda")
    assert '#include "kernels/attention.cuh"' in source
    assert "kg_call(float* out, float* qkvr, float* att, float* inp, int B, int T, int C, int NH, double* wall_ms" in source
    assert "attention_forward(out, qkvr, att, inp, B, T, C, NH);" in source
    assert source.index("attention_forward(") < source.index("cudaDeviceSynchronize()") < source.index("cudaGetErrorName")


def test_cpp_shim_calls_the_function_and_measures_time(tmp_path: Path) -> None:
    flash = load_assignment("flash-attention-cpu")
    kernel = flash.kernel("standard_attention")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "standard_attention.h").write_text(
        "#pragma once\nvoid standard_attention(const float* Q, const float* K, const float* V, float* O, int N, int d)"
        " { for (int i = 0; i < N * d; ++i) O[i] = Q[i] + K[i] + V[i]; }\n")
    (tmp_path / "shim.cpp").write_text(shim_source(kernel, "cpp"))
    subprocess.run(["g++", "-O2", "-fPIC", "-shared", "-I.", "shim.cpp", "-o", "lib.so"], cwd=tmp_path, check=True)
    function = getattr(ctypes.CDLL(str(tmp_path / "lib.so")), SHIM_SYMBOL)
    q = np.arange(6, dtype=np.float32)
    out = np.zeros(6, dtype=np.float32)
    wall, device = ctypes.c_double(-5), ctypes.c_double(-5)
    pointer = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    status = function(pointer(q), pointer(q), pointer(q), pointer(out), 2, 3, ctypes.byref(wall), ctypes.byref(device),
                      ctypes.create_string_buffer(64), 64)
    assert status == 0 and np.array_equal(out, 3 * q)
    assert 0 <= wall.value < 1000 and device.value == -1.0


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("which", ["reference", "template"])
def test_every_gpt2_kernel_compiles_with_nvcc(gpt2: Assignment, which: str, cache_dir: Path) -> None:
    root = gpt2.reference_dir if which == "reference" else gpt2.template_dir
    artifacts = build_submission(gpt2, root, cache_dir, cuda_arch="sm_90")
    assert {a.kernel: a.status for a in artifacts.values()} == {k.name: "built" for k in gpt2.kernels}, \
        {a.kernel: a.message for a in artifacts.values() if a.status != "built"}
    assert all(a.library is not None and a.library.is_file() and not (a.forbidden_symbols or a.watched) for a in artifacts.values())
    again = build_submission(gpt2, root, cache_dir, cuda_arch="sm_90")
    assert all(a.cached for a in again.values())


@needs_nvcc
def test_cuda_compile_error_names_file_and_line_and_costs_one_kernel(gpt2: Assignment, tmp_path: Path,
                                                                      cache_dir: Path) -> None:
    root = shutil.copytree(gpt2.reference_dir, tmp_path / "submission")
    gelu = root / "kernels" / "gelu.cuh"
    lines = gelu.read_text().splitlines()
    lines.insert(5, "this is not CUDA;")
    gelu.write_text("\n".join(lines))
    kernels = (gpt2.kernel("gelu"), gpt2.kernel("residual"))
    artifacts = build_submission(gpt2, root, cache_dir, kernels, cuda_arch="sm_90")
    assert artifacts["gelu"].status == "compile_error"
    assert "kernels/gelu.cuh(6): error" in artifacts["gelu"].message
    assert artifacts["residual"].status == "built"


@needs_cublas
def test_forbidden_cublas_call_is_found_in_the_library(gpt2: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    root = shutil.copytree(gpt2.reference_dir, tmp_path / "submission")
    (root / "kernels" / "residual.cuh").write_text(
        '#pragma once\n#include "../utils/cuda_utils.cuh"\n'
        "float cublas_lookalike_defined_here = 0.0f;  // defined, not called: not a use of cuBLAS\n"
        "void residual_forward(float* out, float* inp1, float* inp2, int N) {\n"
        "    float one = 1.0f;\n"
        "    cudaMemcpy(out, inp2, N * sizeof(float), cudaMemcpyDeviceToDevice);\n"
        "    cublasCheck(cublasSaxpy(cublas_handle, N, &one, inp1, 1, out, 1)); }\n")
    artifacts = build_submission(gpt2, root, cache_dir, (gpt2.kernel("residual"),), cuda_arch="sm_90")
    assert artifacts["residual"].status == "built", artifacts["residual"].message
    # Watched, not charged: whether it runs is the harness's to see (the watch's trampoline marks it called).
    assert artifacts["residual"].forbidden_symbols == ()
    assert artifacts["residual"].watched == ("cublasSaxpy_v2()",)
    assert ("cublasSaxpy_v2()", "kernels/residual.cuh", 7) in artifacts["residual"].forbidden_named
    exported = subprocess.run(["nm", "-D", "--defined-only", str(artifacts["residual"].library)], capture_output=True,
                              text=True, check=True).stdout
    assert "__wrap_cublasSaxpy_v2" in exported and "kg_watched_take" in exported
    # Linked as the course's build links it, so that the harness can load it and create the handle.
    assert "libcublas" in _needed(artifacts["residual"].library)


@needs_cublas
def test_only_a_library_that_calls_cublas_depends_on_it(gpt2: Assignment, cache_dir: Path) -> None:
    artifacts = build_submission(gpt2, gpt2.reference_dir, cache_dir, (gpt2.kernel("gelu"),), cuda_arch="sm_90")
    assert artifacts["gelu"].status == "built" and "libcublas" not in _needed(artifacts["gelu"].library)
    assert artifacts["gelu"].forbidden_symbols == ()


@needs_cublas
def test_the_provided_header_offers_what_the_courses_does(gpt2: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    """FLT_MAX (float.h), memset (string.h), cublas_compute_type and the handle compile with only our header."""
    root = shutil.copytree(gpt2.reference_dir, tmp_path / "submission")
    (root / "kernels" / "gelu.cuh").write_text(
        '#pragma once\n#include "../utils/cuda_utils.cuh"\n'
        "__global__ void course_gelu(float* out, const float* inp, int N, float floor_value) {\n"
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i < N) out[i] = fmaxf(floor_value, 0.5f * inp[i] * (1.0f + tanhf(0.79788456f * inp[i])));\n}\n"
        "void gelu_forward(float* out, const float* inp, int N) {\n"
        "    float lowest = -FLT_MAX; char scratch[16]; memset(scratch, 0, sizeof(scratch));\n"
        "    cublasComputeType_t unused = cublas_compute_type; (void)unused; (void)cublas_handle;\n"
        "    course_gelu<<<CEIL_DIV(N, 256), 256>>>(out, inp, N, lowest);\n    cudaCheck(cudaGetLastError());\n}\n")
    artifacts = build_submission(gpt2, root, cache_dir, (gpt2.kernel("gelu"),), cuda_arch="sm_90")
    assert artifacts["gelu"].status == "built", artifacts["gelu"].message
    assert artifacts["gelu"].forbidden_symbols == ()  # naming the handle is not calling cuBLAS


@needs_nvcc
def test_kernel_files_may_include_each_other(gpt2: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    """The course compiles kernels/ as one program: attention may reuse its own matmul.cuh."""
    root = shutil.copytree(gpt2.reference_dir, tmp_path / "submission")
    attention = (root / "kernels" / "attention.cuh").read_text()
    (root / "kernels" / "attention.cuh").write_text(attention.replace(
        '#include "../kernels/softmax.cuh"', '#include "../kernels/softmax.cuh"\n#include "./matmul.cuh"\n'
        '#include "attention_helpers.cuh"'))
    (root / "kernels" / "attention_helpers.cuh").write_text("#pragma once\nconstexpr int HELPER_TILE = 16;\n")
    artifacts = build_submission(gpt2, root, cache_dir, (gpt2.kernel("attention"),), cuda_arch="sm_90")
    assert artifacts["attention"].status == "built", artifacts["attention"].message
    assert {"kernels/matmul.cuh", "kernels/attention_helpers.cuh", "utils/cuda_utils.cuh"} <= set(
        artifacts["attention"].files)
    # A change in an included file is a change in the kernel's build: never a stale cached library.
    (root / "kernels" / "matmul.cuh").write_text((root / "kernels" / "matmul.cuh").read_text() + "\n// edited\n")
    rebuilt = build_submission(gpt2, root, cache_dir, (gpt2.kernel("attention"),), cuda_arch="sm_90")
    assert not rebuilt["attention"].cached


def test_a_kernel_file_that_is_a_symlink_is_named_as_such(gpt2: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    root = shutil.copytree(gpt2.reference_dir, tmp_path / "submission")
    (root / "kernels" / "gelu.cuh").unlink()
    (root / "kernels" / "gelu.cuh").symlink_to(root / "kernels" / "residual.cuh")
    artifacts = build_submission(gpt2, root, cache_dir, (gpt2.kernel("gelu"),), cuda_arch="sm_90")
    assert artifacts["gelu"].status == "compile_error"
    assert artifacts["gelu"].message == "kernels/gelu.cuh is a symbolic link; submit the file itself"


def _needed(library: Path | None) -> str:
    assert library is not None
    return subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True).stdout


@needs_nvcc
def test_student_utils_are_ignored_in_favour_of_the_graders(gpt2: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    root = shutil.copytree(gpt2.reference_dir, tmp_path / "submission")
    (root / "utils" / "cuda_utils.cuh").write_text('#error "a student\'s own utils must never be used"\n')
    artifacts = build_submission(gpt2, root, cache_dir, (gpt2.kernel("encoder"),), cuda_arch="sm_90")
    assert artifacts["encoder"].status == "built", artifacts["encoder"].message


def test_compiler_output_puts_errors_first_and_is_bounded() -> None:
    output = "note: in file included\nkernels/x.cuh(3): error: identifier \"y\" is undefined\n" + "warning\n" * 2000
    summary = summarise_compiler_output(output)
    assert summary.startswith('kernels/x.cuh(3): error')
    assert len(summary) < 4200 and summary.endswith("[... compiler output truncated]")


def test_graders_building_the_same_kernel_at_once_all_get_a_whole_library(tmp_path: Path) -> None:
    """Slurm tasks and batch threads share one build cache: simultaneous writers of one entry must not clash."""
    flash = load_assignment("flash-attention-cpu")
    cache = tmp_path / "cache"
    with ThreadPoolExecutor(max_workers=4) as pool:
        artifacts = list(pool.map(lambda _: build_submission(flash, flash.reference_dir, cache)["flash_attention"],
                                  range(4)))
    assert {a.status for a in artifacts} == {"built"} and len({a.library for a in artifacts}) == 1
    library = ctypes.CDLL(str(artifacts[0].library))
    assert hasattr(library, SHIM_SYMBOL)
    entry = artifacts[0].library.parent
    assert sorted(p.name for p in entry.iterdir()) == ["build.json", "lib.so"]  # no stray temporaries


def test_simultaneous_writers_of_one_cache_entry_never_clash(tmp_path: Path) -> None:
    library = tmp_path / "built.so"
    library.write_bytes(bytes(range(256)) * 4096)  # 1 MiB: long enough for writers to overlap
    entry = tmp_path / "entry"
    entry.mkdir()
    record = {"status": "built", "message": "", "forbidden_symbols": []}
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda _: save_build(entry, library, record), range(64)))  # raises if one clashed
    assert (entry / "lib.so").read_bytes() == library.read_bytes()
    assert sorted(p.name for p in entry.iterdir()) == ["build.json", "lib.so"]


# ---------------------------------------------------------------- a C++ pack's src/: one program

FLASH_CALLS = """#include "flash_attention.h"
#include "{header}"

void flash_attention(const float* Q, const float* K, const float* V, float* O, int N, int d, int Br, int Bc) {{
    (void)Br; (void)Bc;
    {call}
}}
"""


def _defined(library: Path | None) -> set[str]:
    assert library is not None
    listing = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True).stdout
    return {line.split()[-1] for line in listing.splitlines() if line.split()}


def _flash_submission(tmp_path: Path) -> tuple[Assignment, Path]:
    flash = load_assignment("flash-attention-cpu")
    return flash, shutil.copytree(flash.reference_dir, tmp_path / "submission")


def test_a_kernel_links_the_function_it_calls_from_a_helper_file_of_its_folder(tmp_path: Path,
                                                                               cache_dir: Path) -> None:
    flash, root = _flash_submission(tmp_path)
    (root / "src" / "scale.h").write_text("#pragma once\nvoid scale_rows(float* O, int n, float by);\n")
    (root / "src" / "scale.cpp").write_text(
        '#include "scale.h"\nvoid scale_rows(float* O, int n, float by) { for (int i = 0; i < n; ++i) O[i] *= by; }\n')
    (root / "src" / "flash_attention.cpp").write_text('#include "standard_attention.h"\n' + FLASH_CALLS.format(
        header="scale.h", call="standard_attention(Q, K, V, O, N, d); scale_rows(O, N * d, 1.0f);"))
    artifacts = build_submission(flash, root, cache_dir)
    assert artifacts["flash_attention"].status == "built", artifacts["flash_attention"].message
    # What flash_attention calls is in its library; the standard kernel's build took nothing of scale.cpp.
    assert {"_Z10scale_rowsPfif", "_Z18standard_attentionPKfS0_S0_Pfii"} <= _defined(artifacts["flash_attention"].library)
    assert "_Z10scale_rowsPfif" not in _defined(artifacts["standard_attention"].library)
    assert {"src/scale.cpp", "src/scale.h"} <= set(artifacts["standard_attention"].files)


def test_a_file_included_as_source_is_not_linked_twice(tmp_path: Path, cache_dir: Path) -> None:
    """A course habit: flash_attention.cpp #includes standard_attention.cpp; the archive then adds nothing."""
    flash, root = _flash_submission(tmp_path)
    (root / "src" / "flash_attention.cpp").write_text(FLASH_CALLS.format(
        header="standard_attention.cpp", call="standard_attention(Q, K, V, O, N, d);"))
    artifacts = build_submission(flash, root, cache_dir)
    assert {a.status for a in artifacts.values()} == {"built"}, [a.message for a in artifacts.values()]


def test_a_file_the_kernel_does_not_call_stays_out_of_its_library(tmp_path: Path, cache_dir: Path) -> None:
    """A student's benchmark driver (main, a static constructor) and a broken scratch file cost no kernel."""
    flash, root = _flash_submission(tmp_path)
    (root / "src" / "main.cpp").write_text(
        '#include <cstdio>\n#include "flash_attention.h"\n'
        'static int started = std::puts("benchmark starts");\nint main() { return started; }\n')
    (root / "src" / "scratch.cpp").write_text("int unfinished( {\n")
    artifacts = build_submission(flash, root, cache_dir)
    for artifact in artifacts.values():
        assert artifact.status == "built", artifact.message
        assert "main" not in _defined(artifact.library) and "scratch.cpp" not in artifact.message
        assert b"benchmark starts" not in artifact.library.read_bytes()  # nor main.cpp's static constructor


def test_a_call_into_a_file_that_does_not_compile_names_that_files_error(tmp_path: Path, cache_dir: Path) -> None:
    flash, root = _flash_submission(tmp_path)
    (root / "src" / "flash_attention.cpp").write_text(FLASH_CALLS.format(
        header="standard_attention.h", call="standard_attention(Q, K, V, O, N, d);"))
    broken = (root / "src" / "standard_attention.cpp").read_text().replace("std::vector<float> P(", "std::vector<float> P((")
    (root / "src" / "standard_attention.cpp").write_text(broken)
    artifacts = build_submission(flash, root, cache_dir)
    message = artifacts["flash_attention"].message
    assert artifacts["flash_attention"].status == "compile_error"
    assert "undefined reference to `standard_attention(" in message
    assert "src/standard_attention.cpp did not compile, so nothing in it could be linked" in message
    assert "src/standard_attention.cpp:" in message.split("did not compile")[1]


def test_a_call_to_a_function_nothing_defines_is_a_link_error_naming_it(tmp_path: Path, cache_dir: Path) -> None:
    flash, root = _flash_submission(tmp_path)
    (root / "src" / "flash_attention.cpp").write_text(FLASH_CALLS.format(
        header="standard_attention.h", call="void never_written(float*); never_written(O);"))
    artifact = build_submission(flash, root, cache_dir, (flash.kernel("flash_attention"),))["flash_attention"]
    assert artifact.status == "compile_error" and "undefined reference to `never_written(float*)'" in artifact.message
    assert "did not compile" not in artifact.message  # every other file compiled


def test_a_compiler_a_bound_stopped_is_a_compile_error_that_names_the_bound(tmp_path: Path, monkeypatch) -> None:
    """`#include "/dev/zero"`: the compiler reads without end until the build's memory bound (256 MiB here)."""
    import dataclasses

    import grader.build as build
    from grader.sandbox import sandbox_named

    monkeypatch.setattr(build, "COMPILE_LIMITS", dataclasses.replace(build.COMPILE_LIMITS,
                                                                     memory_limit_bytes=256 << 20, rlimit_data=False))
    flash, root = _flash_submission(tmp_path)
    (root / "src" / "flash_attention.cpp").write_text('#include "/dev/zero"\n')
    artifact = build_submission(flash, root, tmp_path / "cache", (flash.kernel("flash_attention"),),
                                sandbox=sandbox_named("local"))["flash_attention"]
    assert artifact.status == "compile_error"
    assert artifact.message.startswith("g++ was stopped: it exceeded the memory limit (256 MiB)"), artifact.message


@needs_cublas
def test_without_cublas_on_the_machine_a_kernel_that_uses_it_is_the_machines_failure(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Not a compile error to fix: the student's cuBLAS kernel (tiled-matmul's matmul_cublas includes cublas_v2.h)
    is the grading machine's fault, named as such and kept out of the build cache."""
    from grader.errors import MachineError
    from grader.assignment import load_assignment
    from grader.targets.cuda import CudaTarget

    pack = load_assignment("tiled-matmul")
    monkeypatch.setattr(CudaTarget, "_cublas_flags", lambda self: ())
    library_flags.cache_clear()
    try:
        with pytest.raises(MachineError) as raised:
            build_submission(pack, pack.reference_dir, tmp_path / "cache", (pack.kernel("cublas"),), cuda_arch="sm_90")
        assert raised.value.fault == "library"
        assert str(raised.value).startswith("the code includes cublas_v2.h, cuBLAS's header, and this grading machine "
                                            "has no cuBLAS"), raised.value
        assert not list((tmp_path / "cache").glob("builds/*/build.json"))
        # A kernel that does not use cuBLAS builds as before.
        built = build_submission(pack, pack.reference_dir, tmp_path / "cache", (pack.kernel("naive"),), cuda_arch="sm_90")
        assert built["naive"].status == "built", built["naive"].message
    finally:
        library_flags.cache_clear()
