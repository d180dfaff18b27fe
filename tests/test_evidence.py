"""Evidence of the technique, read from libraries nvcc builds here: nothing built runs, cuobjdump reads the binaries."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from grader import evidence
from grader.evidence import FunctionEvidence, LibraryEvidence, evidence_of, tile_shortfall_words, tile_shortfalls
from grader.report.evidence import EvidenceSummary, summarize_evidence, variant_evidence
from grader.results import CaseResult, FunctionFacts, LaunchedKernel, LibraryFacts, VariantResult
from grader.status import CaseStatus
from grader.assignment import PROJECT_ROOT, load_assignment
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
    reference = load_assignment("gpt2-m1").reference_dir  # its utils/ the template's
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


# Milestone 3's optimizations as students write them: each kernel beside the same kernel without the technique.
M3_TECHNIQUES = r"""
#include <mma.h>
#include <cuda_fp16.h>
#include <cuda_pipeline.h>
#include <cstdint>
using namespace nvcuda;

// course-constant-layernorm-weight: layernorm's weight and bias read from __constant__ memory.
__constant__ float c_weight[768];
__constant__ float c_bias[768];
__global__ void layernorm_constant_kernel(float* out, const float* inp, const float* mean, const float* rstd, int C) {
    int row = blockIdx.x, c = threadIdx.x;
    out[row * C + c] = (inp[row * C + c] - mean[row]) * rstd[row] * c_weight[c] + c_bias[c];
}
__global__ void layernorm_global_kernel(float* out, const float* inp, const float* mean, const float* rstd,
                                        const float* weight, const float* bias, int C) {
    int row = blockIdx.x, c = threadIdx.x;
    out[row * C + c] = (inp[row * C + c] - mean[row]) * rstd[row] * weight[c] + bias[c];
}
// course-restrict-residual: the same elementwise add with __restrict__ pointers, and with __ldg.
__global__ void residual_restrict_kernel(float* __restrict__ out, const float* __restrict__ a,
                                         const float* __restrict__ b, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = a[i] + b[i];
}
__global__ void residual_ldg_kernel(float* out, const float* a, const float* b, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = __ldg(a + i) + __ldg(b + i);
}
__global__ void residual_plain_kernel(float* out, const float* a, const float* b, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = a[i] + b[i];
}
// course-cp-async-tile: a tile of a row staged through shared memory by __pipeline_memcpy_async.
__global__ void tile_async_kernel(float* out, const float* in) {
    __shared__ float tile[2][128];
    __pipeline_memcpy_async(&tile[0][threadIdx.x], in + threadIdx.x, sizeof(float));
    __pipeline_commit();
    __pipeline_memcpy_async(&tile[1][threadIdx.x], in + 128 + threadIdx.x, sizeof(float));
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    out[threadIdx.x] = tile[0][(threadIdx.x + 1) % 128] + tile[1][(threadIdx.x + 3) % 128];
}
__global__ void tile_sync_kernel(float* out, const float* in) {
    __shared__ float tile[2][128];
    tile[0][threadIdx.x] = in[threadIdx.x];
    tile[1][threadIdx.x] = in[128 + threadIdx.x];
    __syncthreads();
    out[threadIdx.x] = tile[0][(threadIdx.x + 1) % 128] + tile[1][(threadIdx.x + 3) % 128];
}
// ptx-mma: ldmatrix and mma.sync as inline PTX (op_15's raw-PTX route).
__global__ void mma_ptx_kernel(float* out, const half* a) {
    __shared__ half tile[16 * 16];
    tile[threadIdx.x] = a[threadIdx.x];
    __syncthreads();
    uint32_t r0, r1, r2, r3;
    uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(tile + (threadIdx.x % 16) * 16));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(address));
    float d0 = 0, d1 = 0, d2 = 0, d3 = 0;
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n" : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
                 : "r"(r0), "r"(r1), "r"(r2), "r"(r3), "r"(r0), "r"(r1));
    out[threadIdx.x] = d0 + d1 + d2 + d3;
}
// wmma from shared memory: the same HMMA and LDSM in SASS, wmma.mma.sync in PTX.
__global__ void mma_wmma_kernel(float* out, const half* a) {
    __shared__ half tile[16 * 16];
    for (int i = threadIdx.x; i < 256; i += 32) tile[i] = a[i];
    __syncthreads();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::load_matrix_sync(fa, tile, 16);
    wmma::load_matrix_sync(fb, tile, 16);
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync(out, acc, 16, wmma::mem_row_major);
}
"""

# The name rule for CUTLASS: a stand-in kernel in its namespace, named as CUTLASS's device GEMM names its kernel
# (cutlass::Kernel<Operator>); CUTLASS's headers are not installed here.
CUTLASS_NAMED = r"""
namespace cutlass { namespace gemm { struct GemmTf32 { float alpha; }; }
template <typename Operator> __global__ void Kernel(typename Operator::Params* params, float* out) {
    out[threadIdx.x] = 2.0f * out[threadIdx.x];
} }
struct Op { using Params = cutlass::gemm::GemmTf32; };
template __global__ void cutlass::Kernel<Op>(cutlass::gemm::GemmTf32*, float*);
__global__ void own_gemm_kernel(float* out) { out[threadIdx.x] = 3.0f * out[threadIdx.x]; }
"""


@pytest.fixture(scope="module")
def techniques(tmp_path_factory: pytest.TempPathFactory) -> dict[str, evidence.FunctionEvidence]:
    """Milestone 3's technique kernels, each by its short name, from one sm_90 library."""
    library = evidence_of(nvcc(M3_TECHNIQUES, tmp_path_factory.mktemp("m3"), "m3", "-arch=sm_90", "-O3"))
    assert library.sass_read and library.ptx_read and not library.note
    return {f.short_name: f for f in library.functions}


@needs_nvcc
@needs_sass
def test_constant_memory_is_a_read_of_constant_bank_3(techniques: dict[str, evidence.FunctionEvidence]) -> None:
    # Bank 0 is the kernel's parameters, which every kernel reads: only the user's __constant__ data counts.
    assert techniques["layernorm_constant_kernel"].constant_reads >= 2
    assert all(f.constant_reads == 0 for name, f in techniques.items() if name != "layernorm_constant_kernel")


@needs_nvcc
@needs_sass
def test_restrict_and_ldg_loads_are_non_coherent(techniques: dict[str, evidence.FunctionEvidence]) -> None:
    assert techniques["residual_restrict_kernel"].readonly_loads == 2
    assert techniques["residual_ldg_kernel"].readonly_loads == 2
    assert techniques["residual_plain_kernel"].readonly_loads == 0
    assert techniques["layernorm_global_kernel"].readonly_loads == 0


@needs_nvcc
@needs_sass
def test_pipeline_memcpy_async_is_an_async_copy(techniques: dict[str, evidence.FunctionEvidence]) -> None:
    assert techniques["tile_async_kernel"].async_copies == 2
    assert techniques["tile_sync_kernel"].async_copies == 0 and techniques["tile_sync_kernel"].shared_stores > 0


@needs_nvcc
@needs_sass
def test_raw_mma_sync_is_told_from_wmma_by_the_ptx(techniques: dict[str, evidence.FunctionEvidence]) -> None:
    raw, wmma = techniques["mma_ptx_kernel"], techniques["mma_wmma_kernel"]
    # The same SASS (HMMA fed by LDSM) for both: only the PTX tells them apart.
    assert raw.uses_tensor_cores and wmma.uses_tensor_cores
    assert raw.ldmatrix_instructions > 0 and wmma.ldmatrix_instructions > 0
    assert raw.ptx_mma_instructions == 1 and wmma.ptx_mma_instructions == 0


@needs_nvcc
@needs_sass
def test_each_m3_evidence_kind_is_shown_and_missing(tmp_path: Path) -> None:
    """shows(kind) per library: a library with the technique, one without it; and the reports' sentences."""
    def built(name: str, source: str) -> LibraryEvidence:
        return evidence_of(nvcc(source, tmp_path / name, name, "-arch=sm_90", "-O3"))

    head = "#include <mma.h>\n#include <cuda_fp16.h>\n#include <cuda_pipeline.h>\n#include <cstdint>\n" \
           "using namespace nvcuda;\n"
    # One library per commented part of M3_TECHNIQUES, keyed by its comment's first words.
    parts = {part.split("\n", 1)[0]: part for part in M3_TECHNIQUES.split("\n// ")[1:]}
    source = {key.split(":")[0]: head + "\n// " + part for key, part in parts.items()}
    constant = built("constant", source["course-constant-layernorm-weight"])
    restrict = built("restrict", source["course-restrict-residual"])
    pipeline = built("pipeline", source["course-cp-async-tile"])
    raw = built("raw", source["ptx-mma"])
    wmma = built("wmma", source["wmma from shared memory"])
    cutlass = built("cutlass", CUTLASS_NAMED)
    shown = {name: {kind: library.shows(kind) for kind in ("constant_memory", "restrict_loads", "async_copies",
                                                             "ptx_mma", "cutlass")}
             for name, library in [("constant", constant), ("restrict", restrict), ("pipeline", pipeline),
                                   ("raw", raw), ("wmma", wmma), ("cutlass", cutlass)]}
    assert {name: sorted(k for k, seen in kinds.items() if seen) for name, kinds in shown.items()} == {
        "constant": ["constant_memory"], "restrict": ["restrict_loads"], "pipeline": ["async_copies"],
        "raw": ["ptx_mma"], "wmma": [], "cutlass": ["cutlass"]}
    assert shown["wmma"]["ptx_mma"] is False and wmma.ptx_read
    assert [f.short_name for f in cutlass.functions if f.is_cutlass] == ["cutlass::Kernel<Op>"]
    summary = sentences({"matmul": raw, "attention": wmma, "layernorm": constant, "residual": restrict})
    assert summary.ptx_mma == ("mma.sync (raw PTX or CuTe): used in matmul (mma_ptx_kernel: 1, ldmatrix 1); "
                               "tensor cores through wmma only in attention; no tensor cores in layernorm, residual")
    assert summary.constant_memory.startswith("__constant__ memory: read in layernorm (layernorm_constant_kernel: ")
    assert summary.constant_memory.endswith("; not in matmul, attention, residual")
    assert summary.restrict_loads == ("read-only loads (__restrict__, __ldg): in residual (residual_ldg_kernel: 2, "
                                      "residual_restrict_kernel: 2); not in matmul, attention, layernorm")
    assert sentences({"matmul": cutlass}).cutlass == "CUTLASS/CuTe kernels: in matmul (cutlass::Kernel<Op>)"
    # What a result keeps says the same after a JSON round trip.
    facts = raw.facts()
    assert LibraryFacts.from_dict(json.loads(json.dumps(dataclasses.asdict(facts)))).shows("ptx_mma") is True


# Per tile (shared_memory_per_tile): figures as a result keeps them, judged against tiled-matmul's own cases.

def tiled_library(*functions: tuple[str, int, int], sass_read: bool = True) -> LibraryFacts:
    """A library's facts: (short name, static shared bytes, shared-memory instructions) per function."""
    return LibraryFacts(functions=[FunctionFacts(name, "sm_90", shared_bytes=shared, shared_instructions=instructions)
                                   for name, shared, instructions in functions], sass_read=sass_read)


@pytest.fixture(scope="module")
def tiled_kernel():
    return load_assignment("tiled-matmul").kernel("tiled")


def test_each_tile_needs_a_tile_of_each_input_in_some_function(tiled_kernel) -> None:
    tiles = sorted({c.params["tile"] for c in tiled_kernel.cases})
    assert tiles == [8, 16, 32]
    per_instantiation = tiled_library(*[(f"tile<{t}>", 2 * t * t * 4, 12) for t in tiles])
    assert tile_shortfalls(tiled_kernel, per_instantiation) == ()
    # Tiles sized for the biggest edge and used in part at the smaller ones: it can run every tile.
    assert tile_shortfalls(tiled_kernel, tiled_library(("tile_max", 2 * 32 * 32 * 4, 12))) == ()
    # Padded against bank conflicts (33 columns): more than the tiles need, still each tile's.
    assert tile_shortfalls(tiled_kernel, tiled_library(("padded", 2 * 32 * 33 * 4, 12))) == ()
    fixed = tile_shortfalls(tiled_kernel, tiled_library(("tile16", 2 * 16 * 16 * 4, 12), ("helper", 0, 0)))
    assert [(s.tile, s.cases, s.needed_bytes, s.largest, s.largest_bytes, s.largest_tile) for s in fixed] == [
        (32, tuple(c.name for c in tiled_kernel.cases if c.params["tile"] == 32), 8192, "tile16", 2048, 16)]
    # One tile of A only, at 8 x 8: short of every tile's two, and no tile's fits.
    only_a = tile_shortfalls(tiled_kernel, tiled_library(("a_only", 8 * 8 * 4, 4)))
    assert [s.tile for s in only_a] == tiles and {s.largest_tile for s in only_a} == {None}


def test_what_the_binary_cannot_show_is_not_judged(tiled_kernel) -> None:
    # Dynamic shared memory: shared-memory instructions and no declared size (it is set at launch).
    assert tile_shortfalls(tiled_kernel, tiled_library(("dynamic", 0, 10))) == ()
    assert tile_shortfalls(tiled_kernel, tiled_library(("tile16", 2048, 12), ("dynamic", 0, 10))) == ()
    # No SASS read; no shared memory at all (the shared_memory evidence says that); no tile in the cases.
    assert tile_shortfalls(tiled_kernel, tiled_library(("tile16", 2048, 12), sass_read=False)) == ()
    assert tile_shortfalls(tiled_kernel, tiled_library(("naive", 0, 0))) == ()
    untiled = dataclasses.replace(tiled_kernel, cases=tuple(
        dataclasses.replace(c, params={k: v for k, v in c.params.items() if k != "tile"}) for c in tiled_kernel.cases))
    assert tile_shortfalls(untiled, tiled_library(("tile16", 2048, 12))) == ()


def test_the_words_name_the_cases_the_tile_and_what_the_binary_has(tiled_kernel) -> None:
    one_case = dataclasses.replace(tiled_kernel, cases=tuple(c for c in tiled_kernel.cases if c.name in (
        "tile-8-ragged", "tile-32-ragged")))
    words = tile_shortfall_words(tile_shortfalls(one_case, tiled_library(("k<4>", 2 * 4 * 4 * 4, 12))))
    assert words == (
        "case tile-8-ragged asks for tile 8, and no kernel in its binary has the shared memory an 8 x 8 tile needs "
        "(512 bytes for an 8 x 8 tile of A and one of B); the most any has is 128 bytes (k<4>); "
        "case tile-32-ragged asks for tile 32, and no kernel in its binary has the shared memory a 32 x 32 tile needs "
        "(8 KiB for a 32 x 32 tile of A and one of B); the most any has is 128 bytes (k<4>): each case must run at "
        "its own tile, not one tile for all")
    assert tile_shortfall_words(()) == ""


def launched_library(*functions: tuple[str, str, int]) -> LibraryEvidence:
    """A library's evidence: (mangled name, short name, static shared bytes) per function, each with shared loads."""
    return LibraryEvidence("kg_kernel.so", tuple(FunctionEvidence(name, short, short, "sm_90", shared_bytes=shared,
                                                                  shared_loads=4) for name, short, shared in functions),
                           sass_read=True)


def ran(tiled_kernel, launches: dict[int, tuple[str, tuple[int, int, int], int]]) -> list[CaseResult]:
    """Each case of the kernel as run, launching what `launches` gives for its tile (kernel, block, dynamic shared)."""
    return [CaseResult(c.name, c.public, CaseStatus.PASSED, True, "", launched=[LaunchedKernel(
        launches[c.params["tile"]][0], list(launches[c.params["tile"]][1]), launches[c.params["tile"]][2])])
        for c in tiled_kernel.cases]


def test_each_case_is_judged_by_the_kernel_it_launched(tiled_kernel) -> None:
    # Instantiated at every tile, so the binary alone finds nothing short, while the host launches 16 x 16 always.
    library = launched_library(*[(f"_Z5tiledILi{t}EEvPKfS1_Pfiii", f"tiled<{t}>", 2 * t * t * 4) for t in (8, 16, 32)])
    assert tile_shortfalls(tiled_kernel, library) == ()
    sixteen = ("_Z5tiledILi16EEvPKfS1_Pfiii", (16, 16, 1), 0)
    always_16 = tile_shortfalls(tiled_kernel, library, ran(tiled_kernel, {8: sixteen, 16: sixteen, 32: sixteen}))
    thirty_two = tuple(c.name for c in tiled_kernel.cases if c.params["tile"] == 32)
    assert [(s.tile, s.cases, s.largest, s.largest_bytes, s.launched) for s in always_16] == [
        (32, thirty_two, "tiled<16>", 2048, True)]
    assert tile_shortfall_words(always_16) == (
        f"cases {thirty_two[0]} and {thirty_two[1]} ask for tile 32, and the kernel they launched, tiled<16> "
        "(block 16 x 16), has 2 KiB of shared memory, a 16 x 16 tile's, less than a 32 x 32 tile needs (8 KiB for a "
        "32 x 32 tile of A and one of B): each case must run at its own tile, not one tile for all")
    # Each tile's own instantiation: nothing short. Dynamic shared memory asked for at launch counts with the static.
    own = {t: (f"_Z5tiledILi{t}EEvPKfS1_Pfiii", (t, t, 1), 0) for t in (8, 16, 32)}
    assert tile_shortfalls(tiled_kernel, library, ran(tiled_kernel, own)) == ()
    dynamic = launched_library(("_Z7dynamicPKfS0_Pfiii", "dynamic", 0))
    sized = {t: ("_Z7dynamicPKfS0_Pfiii", (t, t, 1), 2 * t * t * 4) for t in (8, 16, 32)}
    assert tile_shortfalls(tiled_kernel, dynamic, ran(tiled_kernel, sized)) == ()
    sized[32] = ("_Z7dynamicPKfS0_Pfiii", (32, 32, 1), 2048)
    assert [s.tile for s in tile_shortfalls(tiled_kernel, dynamic, ran(tiled_kernel, sized))] == [32]
    # A launch the binary's functions don't name (no watch, an unknown handle): the binary alone judges.
    unknown = {t: ("", (16, 16, 1), 0) for t in (8, 16, 32)}
    assert tile_shortfalls(tiled_kernel, library, ran(tiled_kernel, unknown)) == ()
