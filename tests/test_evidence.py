"""Evidence of the technique, read from libraries nvcc builds here: nothing built runs, cuobjdump reads the binaries."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from grader import evidence
from grader.evidence import LibraryEvidence, evidence_of
from grader.report.evidence import EvidenceSummary, summarize_evidence, variant_evidence
from grader.results import LibraryFacts, VariantResult
from grader.spec import PROJECT_ROOT
from grader.targets.cuda import TARGET as CUDA

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
needs_sass = pytest.mark.skipif(
    evidence.find_cuobjdump() is None or evidence.find_nvdisasm() is None,
    reason="cuobjdump and nvdisasm are not installed (the CUDA toolkit's, or "
           "`pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`)")


def sentences(by_kernel: dict[str, LibraryEvidence]) -> EvidenceSummary:
    """The reports' sentences for the libraries' evidence, from what a result keeps of it."""
    return summarize_evidence({kernel: library.facts() for kernel, library in by_kernel.items()})

WMMA_TF32_KERNEL = r"""// tf32-wmma-matmul: one warp per 16x16 tile of out, K in steps of 8.
__global__ void matmul_tf32_kernel(float* out, const float* inp, const float* weight, int M, int C, int OC) {
    int tile_row = blockIdx.y * 16, tile_col = blockIdx.x * 16;
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < C; k += 8) {
        wmma::load_matrix_sync(a, inp + tile_row * C + k, C);
        wmma::load_matrix_sync(b, weight + tile_col * C + k, C);
        for (int i = 0; i < a.num_elements; i++) a.x[i] = wmma::__float_to_tf32(a.x[i]);
        for (int i = 0; i < b.num_elements; i++) b.x[i] = wmma::__float_to_tf32(b.x[i]);
        wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(out + tile_row * OC + tile_col, acc, OC, wmma::mem_row_major);
}
"""

NAIVE_MATMUL_KERNEL = r"""__global__ void matmul_naive_kernel(float* out, const float* inp, const float* weight, int M, int C, int OC) {
    int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M || col >= OC) return;
    float sum = 0.0f;
    for (int k = 0; k < C; k++) sum = fmaf(inp[row * C + k], weight[col * C + k], sum);
    out[row * OC + col] = sum;
}
"""

# Three matmuls as students write them, one library per arch, each kernel behind its own extern "C" entry.
MATMULS = r"""
#include <mma.h>
using namespace nvcuda;

""" + WMMA_TF32_KERNEL + r"""
// course-naive-matmul: the CPU reference's loops, one thread per output.
""" + NAIVE_MATMUL_KERNEL + r"""
// course-tiled-matmul: a 32x32 tile of weight in shared memory, padded against bank conflicts.
__global__ void matmul_tiled_kernel(float* out, const float* inp, const float* weight, int M, int C, int OC) {
    __shared__ float tile[32][33];
    int row = blockIdx.y * 32 + threadIdx.y, col = blockIdx.x * 32 + threadIdx.x;
    float sum = 0.0f;
    for (int k0 = 0; k0 < C; k0 += 32) {
        tile[threadIdx.y][threadIdx.x] = weight[(blockIdx.x * 32 + threadIdx.y) * C + k0 + threadIdx.x];
        __syncthreads();
        for (int k = 0; k < 32; k++) sum += inp[row * C + k0 + k] * tile[threadIdx.x][k];
        __syncthreads();
    }
    if (row < M && col < OC) out[row * OC + col] = sum;
}

extern "C" void matmul_tf32(float* out, const float* inp, const float* weight, int M, int C, int OC) {
    matmul_tf32_kernel<<<dim3(OC / 16, M / 16), 32>>>(out, inp, weight, M, C, OC);
}
extern "C" void matmul_naive(float* out, const float* inp, const float* weight, int M, int C, int OC) {
    matmul_naive_kernel<<<dim3(OC / 16, M / 16), dim3(16, 16)>>>(out, inp, weight, M, C, OC);
}
extern "C" void matmul_tiled(float* out, const float* inp, const float* weight, int M, int C, int OC) {
    matmul_tiled_kernel<<<dim3(OC / 32, M / 32), dim3(32, 32)>>>(out, inp, weight, M, C, OC);
}
"""

# Hopper's warpgroup MMA, written as inline PTX the way hand-tuned kernels do; needs sm_90a.
WGMMA = r"""
#include <cstdint>
__global__ void matmul_wgmma_kernel(float* out, uint64_t a_descriptor, uint64_t b_descriptor) {
    float d0 = 0, d1 = 0, d2 = 0, d3 = 0;
    asm volatile("wgmma.fence.sync.aligned;\n");
    asm volatile("wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {%0, %1, %2, %3}, %4, %5, 0, 1, 1;\n"
                 : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "l"(a_descriptor), "l"(b_descriptor));
    asm volatile("wgmma.commit_group.sync.aligned;\n");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n");
    out[threadIdx.x] = d0 + d1 + d2 + d3;
}
"""

# cublas-matmul: req_2's way, the course's row-major matmul as a column-major Sgemm.
CUBLAS_MATMUL = r"""
#include <cublas_v2.h>
static cublasHandle_t handle = nullptr;
extern "C" void matmul_forward(float* out, const float* inp, const float* weight, int M, int C, int OC) {
    if (handle == nullptr) cublasCreate(&handle);
    const float one = 1.0f, zero = 0.0f;
    cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, OC, M, C, &one, weight, C, inp, C, &zero, out, OC);
}
"""

# The gpt2-m1 reference's matmul and layernorm, built as the grader's shim builds them: one file that includes each.
REFERENCE_TU = '#include "kernels/{name}.cuh"\n'


def nvcc(source: str, folder: Path, name: str, *flags: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.cu").write_text(source)
    library = folder / f"{name}.so"
    subprocess.run(["nvcc", *flags, "-Xcompiler", "-fPIC", "-shared", f"{name}.cu", "-o", library.name],
                   cwd=folder, check=True, capture_output=True, timeout=300)
    return library


@pytest.fixture(scope="module")
def matmuls(tmp_path_factory: pytest.TempPathFactory) -> dict[str, LibraryEvidence]:
    """The three matmuls' evidence, by arch."""
    folder = tmp_path_factory.mktemp("matmuls")
    return {arch: evidence_of(nvcc(MATMULS, folder / arch, "matmuls", f"-arch={arch}")) for arch in ("sm_80", "sm_90")}


def function(library: LibraryEvidence, short_name: str) -> evidence.FunctionEvidence:
    return next(f for f in library.functions if f.short_name == short_name)


@needs_nvcc
@needs_sass
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_wmma_tf32_matmul_shows_hmma_and_the_others_none(matmuls: dict[str, LibraryEvidence], arch: str) -> None:
    library = matmuls[arch]
    assert library.sass_read and not library.note
    tf32 = function(library, "matmul_tf32_kernel")
    assert tf32.arch == arch and tf32.uses_tensor_cores
    assert tf32.tensor_core_forms == ("HMMA.1684.F32.TF32",) and tf32.tensor_core_precisions == ("TF32",)
    assert tf32.demangled == "matmul_tf32_kernel(float*, float const*, float const*, int, int, int)"
    # The naive loop's HFMA2.MMA (a move on the MMA pipe, on both arches) is no tensor-core instruction.
    for plain in ("matmul_naive_kernel", "matmul_tiled_kernel"):
        assert function(library, plain).tensor_core_instructions == 0
    assert library.uses_tensor_cores and not library.calls_cublas


@needs_nvcc
@needs_sass
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_tiled_matmul_shows_its_shared_tile_and_registers(matmuls: dict[str, LibraryEvidence], arch: str) -> None:
    tiled = function(matmuls[arch], "matmul_tiled_kernel")
    # As declared: sm_90's 1 KiB reserved for the system, which cuobjdump counts in, is left out.
    assert tiled.shared_bytes == 32 * 33 * 4
    assert tiled.shared_loads > 0 and tiled.shared_stores > 0 and tiled.uses_shared_memory
    naive = function(matmuls[arch], "matmul_naive_kernel")
    assert naive.shared_bytes == 0 and naive.shared_instructions == 0 and not naive.uses_shared_memory
    assert all(f.registers > 0 and f.stack_bytes == 0 for f in matmuls[arch].functions)


@needs_nvcc
@needs_sass
def test_wgmma_on_sm90a_is_a_tensor_core_instruction(tmp_path: Path) -> None:
    library = evidence_of(nvcc(WGMMA, tmp_path, "wgmma", "-gencode", "arch=compute_90a,code=sm_90a"))
    wgmma = function(library, "matmul_wgmma_kernel")
    assert wgmma.arch == "sm_90a" and wgmma.tensor_core_forms == ("HGMMA.64x8x8.F32.TF32",)
    assert wgmma.tensor_core_precisions == ("TF32",)


@needs_nvcc
def test_cublas_call_is_listed_with_its_symbol(tmp_path: Path) -> None:
    flags = CUDA.library_flags(("cublas",))
    if not flags:
        pytest.skip("cuBLAS is not installed (the CUDA toolkit's, or `pip install nvidia-cublas`)")
    library = evidence_of(nvcc(CUBLAS_MATMUL, tmp_path, "cublas_matmul", "-arch=sm_90", *flags))
    assert library.calls_cublas and "cublasSgemm_v2" in library.cublas_symbols
    assert "cublasCreate_v2" in library.cublas_symbols
    summary = sentences({"matmul": library})
    assert summary.cublas.startswith("cuBLAS: called in matmul (cublasCreate_v2, cublasSgemm_v2")


def test_host_only_cpp_library_gives_a_note_not_an_exception(tmp_path: Path) -> None:
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed")
    (tmp_path / "matmul.cpp").write_text(
        'extern "C" void matmul_forward(float* out, const float* a, const float* b, int n) {\n'
        "    for (int i = 0; i < n; i++) out[i] = a[i] * b[i];\n}\n")
    subprocess.run(["g++", "-O2", "-fPIC", "-shared", "matmul.cpp", "-o", "lib.so"], cwd=tmp_path, check=True)
    library = evidence_of(tmp_path / "lib.so")
    assert library.functions == () and not library.sass_read and not library.uses_tensor_cores
    if evidence.find_cuobjdump() is None:
        assert library.note == "cuobjdump is not installed: no SASS evidence"
    else:
        assert library.note == "no device code: the library has no CUDA functions"


@pytest.mark.parametrize("content", [b"\x00garbage" * 100, b"\x7fELF\x02\x01\x01" + b"\xff" * 500],
                         ids=["not-elf", "truncated-elf"])
def test_corrupt_library_gives_a_note(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "lib.so").write_bytes(content)
    library = evidence_of(tmp_path / "lib.so")
    assert library.functions == () and not library.sass_read and library.note
    assert "tensor cores: no evidence for matmul (" in sentences({"matmul": library}).tensor_cores


def test_missing_library_gives_a_note(tmp_path: Path) -> None:
    library = evidence_of(tmp_path / "lib.so")
    assert library.note == f"no library at {tmp_path / 'lib.so'}" and not library.readable
    assert sentences({"gelu": library}).cublas == f"cuBLAS: no evidence for gelu ({library.note})"


@needs_nvcc
def test_without_cuobjdump_the_evidence_says_so(matmuls: dict[str, LibraryEvidence],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evidence, "find_cuobjdump", lambda: None)
    library = evidence_of(Path(matmuls["sm_90"].library))
    assert library.note == "cuobjdump is not installed: no SASS evidence" and not library.sass_read
    summary = sentences({"matmul": library})
    assert summary.tensor_cores == "tensor cores: no evidence for matmul (cuobjdump is not installed: no SASS evidence)"
    assert summary.cublas == "cuBLAS: not called in matmul"  # nm still reads the symbols


@needs_nvcc
@needs_sass
def test_without_nvdisasm_resources_are_still_read(matmuls: dict[str, LibraryEvidence], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    lonely = tmp_path / "cuobjdump"  # a cuobjdump with no nvdisasm beside it or on PATH
    shutil.copy(evidence.find_cuobjdump(), lonely)
    monkeypatch.setattr(evidence, "find_cuobjdump", lambda: lonely)
    monkeypatch.setattr(evidence, "find_nvdisasm", lambda: None)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    library = evidence_of(Path(matmuls["sm_90"].library))
    if library.sass_read:
        pytest.skip("this cuobjdump finds nvdisasm on its own")
    assert library.note == "nvdisasm is not installed (cuobjdump needs it for SASS): no SASS evidence"
    assert function(library, "matmul_tiled_kernel").shared_bytes == 32 * 33 * 4


@needs_nvcc
@needs_sass
def test_summary_names_kernels_by_what_their_libraries_show(matmuls: dict[str, LibraryEvidence],
                                                            tmp_path: Path) -> None:
    reference = PROJECT_ROOT / "assignments" / "gpt2-m1" / "reference"
    built = {name: evidence_of(nvcc(REFERENCE_TU.format(name=name), tmp_path / name, name, "-arch=sm_90",
                                    "-I", str(reference), "-O3", "-std=c++17"))
             for name in ("layernorm", "residual")}
    summary = sentences({"matmul": matmuls["sm_90"], **built, "gelu": LibraryEvidence("gelu.so",
                         note="no device code: the library has no CUDA functions")})
    assert summary.tensor_cores == ("tensor cores: used in matmul (matmul_tf32_kernel: TF32); not in layernorm, "
                                    "residual; no evidence for gelu (no device code: the library has no CUDA functions)")
    assert summary.cublas == "cuBLAS: not called in matmul, layernorm, residual, gelu"
    assert summary.shared_memory.startswith("shared memory: matmul 4.12 KiB per block (matmul_tiled_kernel); "
                                            "none in layernorm, residual; no evidence for gelu")
    assert summary.registers.startswith("registers per thread: matmul ")
    # The reference's layernorm reduces with warp shuffles, its residual is elementwise.
    assert summary.warp_shuffles.startswith("warp shuffles: used in layernorm; not in matmul, residual")
    assert len(summary.lines) == 5


def test_what_a_result_keeps_of_the_evidence_loads_back_and_says_the_same() -> None:
    """The reports' sentences are made from `LibraryEvidence.facts()`, which a result stores as JSON."""
    def tile(arch: str, **figures: object) -> evidence.FunctionEvidence:
        return evidence.FunctionEvidence("_Z4tileILi64EEvPf", "void tile<64>(float*)", "tile<64>", arch,
                                         shared_bytes=4224, shared_loads=4, **figures)  # type: ignore[arg-type]

    library = LibraryEvidence("matmul.so", (tile("sm_80", registers=40, tensor_core_instructions=8,
                                                 tensor_core_forms=("HMMA.1684.F32.TF32",)),
                                            tile("sm_90", registers=32)), ("cublasSgemm_v2",), sass_read=True)
    facts = library.facts()
    assert LibraryFacts.from_dict(json.loads(json.dumps(dataclasses.asdict(facts)))) == facts
    assert [(f.name, f.arch, f.tensor_core_precisions) for f in facts.functions] == [
        ("tile<64>", "sm_80", ["TF32"]), ("tile<64>", "sm_90", [])]
    summary = summarize_evidence({"matmul": facts})
    assert summary.lines == ("tensor cores: used in matmul (tile<64>: TF32)", "cuBLAS: called in matmul (cublasSgemm_v2)",
                             "shared memory: matmul 4.12 KiB per block (tile<64>)",
                             "registers per thread: matmul 40 (tile<64>)", "warp shuffles: not used in matmul")
    variant = VariantResult("req_1", "tensor cores", "kernels_req_1", 1.0, 1.0, 1.0, "passed", "",
                            evidence_kinds=["tensor_cores", "shared_memory"], libraries={"matmul": facts})
    assert variant_evidence(variant) == [summary.tensor_cores, summary.shared_memory, summary.registers]
