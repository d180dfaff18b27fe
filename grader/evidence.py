"""Evidence of an optimization technique, read from a built CUDA library rather than taken on trust.

The course checks by hand that each milestone-2 optimization is really used (tensor cores, cuBLAS,
shared-memory and register tiling, a reduction). Beside that check the grader gives what the
binary shows, per CUDA function of the library:

- its SASS (`cuobjdump --dump-sass`): tensor-core instructions (HMMA on sm_70+, HGMMA from wgmma
  on sm_90a, and the other `*MMA` forms), shared-memory loads, stores, atomics and async copies
  (LDGSTS: cp.async), ldmatrix (LDSM), warp shuffles, non-coherent global loads (LDG.E.CONSTANT: what
  a `const T* __restrict__` load or `__ldg` compiles to) and reads of the user's `__constant__` data
  (operands in constant bank 3, `c[0x3][...]`: bank 0 holds the kernel's parameters, bank 2 the
  compiler's own constants, bank 4 addresses of globals; verified with nvcc 13 on sm_80 and sm_90).
  Counts are static (instructions in the code), not how often they execute;
- its PTX (`cuobjdump --dump-ptx`, read only where the SASS shows tensor cores): raw `mma.sync`
  (inline PTX, CuTe's MMA atoms, CUTLASS) apart from wmma's `wmma.mma.sync`, which compile to the same
  HMMA. `-arch=sm_XX` embeds PTX beside the SASS; a build without PTX leaves this unread;
- its functions' names: CUTLASS's and CuTe's kernels (`cutlass::Kernel<...>`) by their namespace;
- its resources (`cuobjdump --dump-resource-usage`): registers per thread, static shared memory
  per block, stack and local bytes per thread;
- the library's undefined `cublas*` symbols (the cuda target's `nm` scan), i.e. calls into cuBLAS;
- per tile edge a tiled kernel's cases ask for (`tile_shortfalls`): whether the kernel each case launched (where
  the library's launch watch recorded it) or else some function has the shared memory a tile of that edge needs.
  One fixed 16 x 16 tile, whatever `tile` says, has none for tile 32.

A student's binary never makes this raise: a library without device code, an unreadable file or a
missing cuobjdump gives evidence with a note in words. Reading a library runs nothing in it.

What a result keeps of it is `LibraryEvidence.facts()` (grader.results.LibraryFacts); the reports'
sentences are made from that (grader.report.evidence).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from grader.results import CUTLASS_NAMESPACES, FunctionFacts, FunctionTechniques, LibraryFacts, LibraryTechniques
from grader.sandbox import size_in_words
from grader.targets.cuda import TARGET as CUDA

if TYPE_CHECKING:
    from grader.assignment import Kernel

T = TypeVar("T")

ELF_MAGIC = b"\x7fELF"
CUBLAS_SYMBOLS = ("cublas*",)  # cuBLAS and cuBLASLt entry points alike
TOOL_TIMEOUT_S = 120
MAX_LIBRARY_BYTES = 256 << 20  # a SASS listing is ~10x the code it lists: past this, the listing would be the problem
# From sm_90 on, a block's shared memory starts with 1 KiB the system reserves; cuobjdump's SHARED counts it in
# for every function with shared memory (5248 for a 4224-byte tile), ptxas -v and the source do not.
RESERVED_SHARED_BYTES = 1024
NAME_LIMIT = 60  # characters of a function's name in a deduction's words (templated names run to hundreds)

# Opcodes (before the first '.') by what they show. HFMA2.MMA is an FMA issued on the MMA pipe, not a tensor-core
# op: its opcode is HFMA2, so "ends in MMA" on the opcode alone picks HMMA, HGMMA, IMMA, DMMA, UTCHMMA, ... only.
SHARED_LOADS = frozenset({"LDS", "LDSM"})
SHARED_STORES = frozenset({"STS", "STSM"})
SHARED_ATOMICS = frozenset({"ATOMS"})
SHARED_ASYNC_COPIES = frozenset({"LDGSTS", "UTMALDG", "UBLKCP"})  # cp.async, TMA and bulk copies into shared memory
WARP_SHUFFLES = frozenset({"SHFL"})
LDMATRIX = frozenset({"LDSM"})
# parse_sass's counts beside the mnemonics (none is a mnemonic: no '[' in one): instructions with an operand in
# constant bank 3, where nvcc places the user's __constant__ variables.
USER_CONSTANT_READS = "c[0x3]"
_FAMILIES = {"D": "FP64", "Q": "FP8", "O": "FP4", "B": "1-bit"}  # tensor-core opcodes by first letter (H, I: below)

_ARCH = re.compile(r"^\s*arch = (sm_\w+)")
_SASS_FUNCTION = re.compile(r"^\s*Function : (\S+)")
# "/*0250*/   @!P0 HMMA.1684.F32.TF32 R12, ..." -> the mnemonic, with its modifiers
_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-fA-F]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][^\s;]*)([^;]*)")
_USER_CONSTANT = re.compile(r"\bc\[0x3\]\[")
# PTX: a function's start (".visible .entry _Z6kernelPf(", ".func  (.param ...) _Z3dotv("), and a raw mma.sync
# (mma.sync.aligned.m16n8k8..., mma.sp...; not wmma.mma.sync, which `\b` after a letter rules out).
_PTX_FUNCTION = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+|\.extern\s+)*\.(?:entry|func)\s+(?:\([^)]*\)\s*)?([\w$]+)")
_PTX_MMA = re.compile(r"(?<![\w.])mma\.(?:sync|sp)")
_RESOURCE_FUNCTION = re.compile(r"^\s*Function (\S+?):\s*$")
_RESOURCE = re.compile(r"([A-Z]+(?:\[\d+\])?):(\d+)")
_TOOL_MESSAGE = re.compile(r"^\S+ (?:fatal|error|info|warning)\s*: ", re.I)
# The case parameter that names a tiled kernel's tile edge (tiled-matmul's `tile`), and the evidence kind that
# asks each edge's shared memory of the binary (grader.assignment.model.EVIDENCE).
TILE_PARAMETER = "tile"
TILE_EVIDENCE = "shared_memory_per_tile"


@dataclass(frozen=True)
class FunctionEvidence(FunctionTechniques):
    """One CUDA function of a library, for one arch: what its code and its resources show."""

    name: str  # as in the binary (mangled)
    demangled: str  # "void ns::tile<64>(float*)"; the name itself where it is not C++
    short_name: str  # without return type and parameters: "ns::tile<64>"
    arch: str  # "sm_90"
    registers: int = 0  # per thread
    shared_bytes: int = 0  # static shared memory per block, as declared (the system's reserved part left out)
    stack_bytes: int = 0  # per thread: local arrays and register spills
    local_bytes: int = 0  # per thread: .local variables
    tensor_core_instructions: int = 0
    tensor_core_forms: tuple[str, ...] = ()  # distinct mnemonics: "HMMA.1684.F32.TF32", "HGMMA.64x8x16.F32"
    shared_loads: int = 0
    shared_stores: int = 0
    shared_atomics: int = 0
    shared_async_copies: int = 0
    warp_shuffles: int = 0
    constant_reads: int = 0  # instructions reading user __constant__ data (constant bank 3)
    readonly_loads: int = 0  # LDG...CONSTANT: non-coherent loads (__restrict__ const pointers, __ldg)
    ldmatrix_instructions: int = 0  # LDSM
    ptx_mma_instructions: int = 0  # raw mma.sync in its PTX (0 where the PTX was not read)

    @property
    def shared_instructions(self) -> int:
        return self.shared_loads + self.shared_stores + self.shared_atomics + self.shared_async_copies

    @property
    def async_copies(self) -> int:
        return self.shared_async_copies

    @property
    def is_cutlass(self) -> bool:
        return any(namespace in self.demangled for namespace in CUTLASS_NAMESPACES)

    @property
    def tensor_core_precisions(self) -> tuple[str, ...]:
        """The input types its tensor-core instructions take: "TF32", "FP16", "BF16", ..."""
        return tuple(sorted({_precision_of(form) for form in self.tensor_core_forms}))


@dataclass(frozen=True)
class LibraryEvidence(LibraryTechniques):
    """What one built library shows: its CUDA functions and its calls into cuBLAS."""

    library: str
    functions: tuple[FunctionEvidence, ...] = ()
    cublas_symbols: tuple[str, ...] = ()  # undefined symbols: what it calls in cuBLAS
    sass_read: bool = False  # its SASS was read: "no tensor-core instruction" is then a finding, not a gap
    note: str = ""  # why some or all of the evidence is missing, in words
    readable: bool = True  # a file with an ELF header: its symbols could be read (no cuBLAS is then a finding)
    ptx_read: bool = False  # its embedded PTX was read (only where its SASS shows tensor cores)

    def facts(self) -> LibraryFacts:
        """What a result keeps of it: the figures the reports' sentences read, each function by its short name."""
        return LibraryFacts(
            functions=[FunctionFacts(
                name=f.short_name, arch=f.arch, registers=f.registers, shared_bytes=f.shared_bytes,
                stack_bytes=f.stack_bytes, local_bytes=f.local_bytes, tensor_core_instructions=f.tensor_core_instructions,
                tensor_core_precisions=list(f.tensor_core_precisions), shared_instructions=f.shared_instructions,
                warp_shuffles=f.warp_shuffles, constant_reads=f.constant_reads, readonly_loads=f.readonly_loads,
                async_copies=f.async_copies, ldmatrix_instructions=f.ldmatrix_instructions,
                ptx_mma_instructions=f.ptx_mma_instructions) for f in self.functions],
            cublas_symbols=list(self.cublas_symbols), sass_read=self.sass_read, readable=self.readable, note=self.note,
            ptx_read=self.ptx_read)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as a build's record keeps it."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LibraryEvidence:
        functions = tuple(FunctionEvidence(**{**f, "tensor_core_forms": tuple(f.get("tensor_core_forms", ()))})
                          for f in data.get("functions", ()))
        return cls(**{**data, "functions": functions, "cublas_symbols": tuple(data.get("cublas_symbols", ()))})


@dataclass(frozen=True)
class TileShortfall:
    """A tile edge a kernel's cases ask for that it lacks the shared memory for: no function of its binary has the
    static shared memory (judged from the binary), or the kernel the cases launched had less (judged from the run)."""

    tile: int
    cases: tuple[str, ...]  # the cases at this tile that are short, in the spec's order
    needed_bytes: int  # a tile x tile tile of each input: 2 * tile * tile * 4 for two float32 matrices
    inputs: tuple[str, ...]  # the inputs tiled ("A", "B")
    largest: str  # the function with the most shared memory (its short name), and how much it has
    largest_bytes: int
    largest_tile: int | None  # the biggest edge among the cases' whose tiles fit in that; None where none does
    # Judged from the run: `largest` is the kernel those cases launched (and its block), not the binary's biggest.
    launched: bool = False
    block: tuple[int, ...] = ()


def tile_shortfalls(kernel: Kernel, evidence: LibraryTechniques, cases: Iterable[Any] = ()) -> tuple[TileShortfall, ...]:
    """The tile edges `kernel`'s cases ask for (their `tile`) that it lacks the shared memory for: a tile x tile
    tile of each input.

    Where its library watched its launches (`cases`: results with `launched`), a case is judged by what it ran:
    the kernel it launched must have that shared memory, declared in the binary or asked for at launch. A kernel
    instantiated at every tile whose host always launches the 16 x 16 one is short for tile 32 there.

    Otherwise from the binary alone: some function must have the static shared memory. A kernel templated on the
    tile has one instantiation per edge; one whose tiles are sized for the biggest edge (and used in part) has them
    too. () there where it can't be told: no SASS read, no shared memory at all (the `shared_memory` evidence says
    that), or a function using shared memory with none declared (dynamic shared memory, sized at launch).
    """
    by_tile: dict[int, list[str]] = {}
    for case in kernel.cases:
        tile = case.params.get(TILE_PARAMETER)
        if isinstance(tile, int) and not isinstance(tile, bool) and tile > 0:
            by_tile.setdefault(tile, []).append(case.name)
    inputs = kernel.buffers_with("input")
    if not by_tile or not inputs:
        return ()
    per_element = sum(_itemsize(b.dtype) for b in inputs)
    ran = _launched_shared(evidence, cases)
    shortfalls = []
    unjudged: dict[int, list[str]] = {}
    for tile, names in sorted(by_tile.items()):
        needed = tile * tile * per_element
        judged = [n for n in names if n in ran]
        if not judged:
            unjudged[tile] = names
            continue
        short = [n for n in judged if ran[n][1] < needed]
        if short:
            function, most, block = ran[short[0]]
            fits = [t for t in by_tile if t * t * per_element <= most]
            shortfalls.append(TileShortfall(tile, tuple(short), needed, tuple(b.name for b in inputs), function, most,
                                            max(fits, default=None), launched=True, block=block))
    shared = [f for f in evidence.functions if f.uses_shared_memory]
    if unjudged and evidence.sass_read and shared and not any(f.shared_bytes == 0 for f in shared):
        largest = max(shared, key=lambda f: f.shared_bytes)
        name = getattr(largest, "short_name", largest.name)  # FunctionEvidence's short name; FunctionFacts' name is it
        fitting = [t for t in by_tile if t * t * per_element <= largest.shared_bytes]
        shortfalls += [TileShortfall(tile, tuple(names), tile * tile * per_element, tuple(b.name for b in inputs), name,
                                     largest.shared_bytes, max(fitting, default=None))
                       for tile, names in unjudged.items() if tile * tile * per_element > largest.shared_bytes]
    return tuple(sorted(shortfalls, key=lambda s: s.tile))


def _launched_shared(evidence: LibraryTechniques, cases: Iterable[Any]) -> dict[str, tuple[str, int, tuple[int, ...]]]:
    """Per case whose launches the watch recorded and the binary's functions name: the launched kernel with the most
    shared memory (static, as declared, plus what it asked for at launch): its short name, that memory, its block."""
    functions = {f.name: f for f in evidence.functions}
    ran = {}
    for case in cases:
        found = [(functions[k.kernel], k) for k in getattr(case, "launched", ()) if k.kernel in functions]
        if found:
            function, launch = max(found, key=lambda fk: fk[0].shared_bytes + fk[1].dynamic_shared_bytes)
            ran[case.name] = (getattr(function, "short_name", function.name),
                              function.shared_bytes + launch.dynamic_shared_bytes, tuple(launch.block))
    return ran


def tile_shortfall_words(shortfalls: tuple[TileShortfall, ...]) -> str:
    """What a kernel's cases ask of its tile that it lacks, one clause per tile edge, as the deduction says it: "cases
    tile-32-ragged and ragged-medium ask for tile 32, and no kernel in its binary has the shared memory a 32 x 32
    tile needs (8 KiB for a 32 x 32 tile of A and one of B); the most any has is 2 KiB (matmul_tiled_kernel), a 16 x 16
    tile's: ..."; from the run: "... ask for tile 32, and the kernel they launched, matmul_tiled<16> (block 16 x 16),
    has 2 KiB of shared memory, a 16 x 16 tile's, less than a 32 x 32 tile needs (...)"; "" where nothing is short."""
    clauses = []
    for s in shortfalls:
        cases = f"case {s.cases[0]} asks" if len(s.cases) == 1 else \
            f"cases {', '.join(s.cases[:-1])} and {s.cases[-1]} ask"
        edge = f"{s.tile} x {s.tile} tile"
        fits = f", {_a(s.largest_tile)} {s.largest_tile} x {s.largest_tile} tile's" if s.largest_tile else ""
        name = s.largest if len(s.largest) <= NAME_LIMIT else s.largest[:NAME_LIMIT] + "…"
        needs = f"({size_in_words(s.needed_bytes)} for {_a(s.tile)} {edge} of {' and one of '.join(s.inputs)})"
        if s.launched:
            they = "it" if len(s.cases) == 1 else "they"
            block = f" (block {' x '.join(str(n) for n in s.block if n > 1) or '1'})" if s.block else ""
            clauses.append(f"{cases} for tile {s.tile}, and the kernel {they} launched, {name}{block}, has "
                           f"{size_in_words(s.largest_bytes)} of shared memory{fits}, less than {_a(s.tile)} {edge} "
                           f"needs {needs}")
        else:
            clauses.append(f"{cases} for tile {s.tile}, and no kernel in its binary has the shared memory {_a(s.tile)} "
                           f"{edge} needs {needs}; the most any has is {size_in_words(s.largest_bytes)} ({name}){fits}")
    return "; ".join(clauses) + ": each case must run at its own tile, not one tile for all" if clauses else ""


def _a(number: int) -> str:
    """The article before a number said aloud: "an 8 x 8 tile", "an 18 x 18", "a 16 x 16"."""
    return "an" if str(number).startswith(("8", "11", "18")) else "a"


def evidence_of(library: Path) -> LibraryEvidence:
    """What `library` shows of tensor cores, cuBLAS, shared memory and registers; never raises on its content."""
    library = Path(library)
    if not library.is_file():
        return LibraryEvidence(str(library), note=f"no library at {library}", readable=False)
    try:
        with library.open("rb") as file:
            header, size = file.read(4), os.fstat(file.fileno()).st_size
    except OSError as error:
        return LibraryEvidence(str(library), note=f"{library.name} could not be read ({error})", readable=False)
    if header != ELF_MAGIC:
        return LibraryEvidence(str(library), note=f"{library.name} is not a shared library (no ELF header)",
                               readable=False)
    cublas = CUDA.forbidden_in(library, CUBLAS_SYMBOLS)
    if size > MAX_LIBRARY_BYTES:
        return LibraryEvidence(str(library), cublas_symbols=cublas,
                               note=f"the library is over {MAX_LIBRARY_BYTES >> 20} MiB: its SASS is not read")
    cuobjdump = find_cuobjdump()
    if cuobjdump is None:
        return LibraryEvidence(str(library), cublas_symbols=cublas, note="cuobjdump is not installed: no SASS evidence")
    environment = _tool_environment()
    resources, problem = _dump(cuobjdump, "--dump-resource-usage", library, list, environment)
    if resources is None:
        return LibraryEvidence(str(library), cublas_symbols=cublas, note=problem)
    sass, sass_problem = _dump(cuobjdump, "--dump-sass", library, parse_sass, environment)
    reserved, _ = _dump(cuobjdump, "--dump-elf-symbols", library, reserved_shared_functions, environment)
    functions = _merge(parse_resource_usage(resources), sass or {}, reserved or frozenset())
    notes = [f"{sass_problem}: no SASS evidence"] if sass is None else []
    if not functions:
        notes.append("only PTX, no SASS: the driver compiles it when the library is loaded"
                     if any("Fatbin ptx code" in line for line in resources)
                     else "no CUDA functions in the library's device code")
    ptx = None
    if any(f.uses_tensor_cores for f in functions):  # only then can raw mma.sync be told from wmma
        ptx, _ = _dump(cuobjdump, "--dump-ptx", library, parse_ptx, environment)
        if ptx:
            functions = tuple(dataclasses.replace(f, ptx_mma_instructions=ptx.get(f.name, 0)) for f in functions)
        else:
            notes.append("no PTX embedded: mma.sync cannot be told from wmma")
    return LibraryEvidence(str(library), functions, cublas, sass is not None and bool(functions), "; ".join(notes),
                           ptx_read=bool(ptx))


def find_cuobjdump() -> Path | None:
    """cuobjdump on PATH, beside nvcc, in $CUDA_HOME/bin or /usr/local/cuda/bin, or from PyPI's nvidia-cuda-cuobjdump."""
    return _find_tool("cuobjdump")


def find_nvdisasm() -> Path | None:
    """nvdisasm, which cuobjdump runs to print SASS: where cuobjdump is looked for, and beside cuobjdump."""
    cuobjdump = find_cuobjdump()
    beside = cuobjdump.parent / "nvdisasm" if cuobjdump else None
    return beside if beside and os.access(beside, os.X_OK) else _find_tool("nvdisasm")


def parse_sass(text: str | Iterable[str]) -> dict[tuple[str, str], Counter[str]]:
    """How often each mnemonic ("HMMA.1684.F32.TF32", "LDS.128") occurs per (arch, function) in `--dump-sass` output."""
    histograms: dict[tuple[str, str], Counter[str]] = {}
    arch, current = "", None
    for line in _lines(text):
        if found := _ARCH.match(line):
            arch, current = found.group(1), None
        elif found := _SASS_FUNCTION.match(line):
            # First seen wins: one template instantiated in two files is the same code twice.
            key = (arch, found.group(1))
            current = None if key in histograms else histograms.setdefault(key, Counter())
        elif current is not None and (found := _INSTRUCTION.match(line)):
            current[found.group(1)] += 1
            if _USER_CONSTANT.search(found.group(2)):
                current[USER_CONSTANT_READS] += 1
    return histograms


def parse_ptx(text: str | Iterable[str]) -> dict[str, int]:
    """Raw mma.sync / mma.sp instructions per function (mangled name) in `--dump-ptx` output; wmma's are not counted.

    Every function's PTX counts, over all the PTX the library embeds (one per virtual arch, summed). A function
    with none is not listed; a listing with no function at all gives {} (nothing read).
    """
    counts: dict[str, int] = {}
    current = None
    for line in _lines(text):
        if found := _PTX_FUNCTION.match(line):
            current = found.group(1)
            counts.setdefault(current, 0)
        elif current is not None and _PTX_MMA.search(line):
            counts[current] += 1
    return counts


def parse_resource_usage(text: str | Iterable[str]) -> dict[tuple[str, str], dict[str, int]]:
    """REG, SHARED, STACK, LOCAL, ... per (arch, function) from `cuobjdump --dump-resource-usage` output."""
    usage: dict[tuple[str, str], dict[str, int]] = {}
    arch, current = "", None
    for line in _lines(text):
        if found := _ARCH.match(line):
            arch, current = found.group(1), None
        elif found := _RESOURCE_FUNCTION.match(line):
            current = found.group(1)
        elif current is not None and (figures := _RESOURCE.findall(line)):
            usage.setdefault((arch, current), {key: int(value) for key, value in figures})
            current = None
    return usage


def reserved_shared_functions(text: str | Iterable[str]) -> frozenset[tuple[str, str]]:
    """(arch, function) pairs whose SHARED includes the system's reserved shared memory (`--dump-elf-symbols`).

    A module that reserves it says so with a RESERVED_SHARED symbol; then each of its functions with
    shared memory has the reserved part at the start of it.
    """
    reserved: set[tuple[str, str]] = set()
    modules: list[tuple[str, list[str]]] = []
    for line in _lines(text):
        if found := _ARCH.match(line):
            modules.append((found.group(1), []))
        elif modules:
            modules[-1][1].append(line)
    for arch, lines in modules:
        if any("RESERVED_SHARED" in line for line in lines):
            reserved.update((arch, line.split()[-1]) for line in lines if line.startswith("FUNC") and line.split())
    return frozenset(reserved)


def _merge(usage: dict[tuple[str, str], dict[str, int]], sass: dict[tuple[str, str], Counter[str]],
           reserved: frozenset[tuple[str, str]]) -> tuple[FunctionEvidence, ...]:
    keys = sorted(set(usage) | set(sass), key=lambda k: (k[1], k[0]))
    names = [name for _, name in keys]
    demangled, short = _demangle(names, short=False), _demangle(names, short=True)
    functions = []
    for arch, name in keys:
        figures = usage.get((arch, name), {})
        shared = figures.get("SHARED", 0)
        if (arch, name) in reserved and shared >= RESERVED_SHARED_BYTES:
            shared -= RESERVED_SHARED_BYTES
        histogram = sass.get((arch, name), Counter())
        opcodes = Counter[str]()
        for mnemonic, count in histogram.items():
            opcodes[mnemonic.split(".")[0]] += count
        tensor = {m: n for m, n in histogram.items() if m.split(".")[0].endswith("MMA")}
        readonly = sum(n for m, n in histogram.items() if m.split(".")[0] == "LDG" and "CONSTANT" in m.split("."))
        functions.append(FunctionEvidence(
            name=name, demangled=demangled.get(name, name), short_name=short.get(name, name), arch=arch,
            registers=figures.get("REG", 0), shared_bytes=shared, stack_bytes=figures.get("STACK", 0),
            local_bytes=figures.get("LOCAL", 0), tensor_core_instructions=sum(tensor.values()),
            tensor_core_forms=tuple(sorted(tensor)), shared_loads=_count(opcodes, SHARED_LOADS),
            shared_stores=_count(opcodes, SHARED_STORES), shared_atomics=_count(opcodes, SHARED_ATOMICS),
            shared_async_copies=_count(opcodes, SHARED_ASYNC_COPIES), warp_shuffles=_count(opcodes, WARP_SHUFFLES),
            constant_reads=histogram[USER_CONSTANT_READS], readonly_loads=readonly,
            ldmatrix_instructions=_count(opcodes, LDMATRIX)))
    return tuple(functions)


def _itemsize(dtype: str) -> int:
    return np.dtype(dtype).itemsize


def _count(opcodes: Counter[str], kinds: frozenset[str]) -> int:
    return sum(opcodes[k] for k in kinds)


def _lines(text: str | Iterable[str]) -> Iterable[str]:
    return text.splitlines() if isinstance(text, str) else text


def _tool_environment() -> dict[str, str]:
    environment = dict(os.environ, LC_ALL="C")
    nvdisasm = find_nvdisasm()
    if nvdisasm is not None:  # cuobjdump runs nvdisasm from beside itself or from PATH
        environment["PATH"] = f"{nvdisasm.parent}{os.pathsep}{environment.get('PATH', '')}"
    return environment


def _dump(cuobjdump: Path, option: str, library: Path, parse: Callable[[Iterable[str]], T],
          environment: dict[str, str]) -> tuple[T | None, str]:
    """cuobjdump's output for one dump option, parsed; or None and why not, in words."""
    # Into a file and parsed line by line: a big library's SASS listing never sits in memory whole.
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as listing:
        try:
            done = subprocess.run([str(cuobjdump), option, str(library)], stdout=listing, stderr=subprocess.PIPE,
                                  text=True, errors="replace", timeout=TOOL_TIMEOUT_S, env=environment)
        except subprocess.TimeoutExpired:
            return None, f"cuobjdump {option} took over {TOOL_TIMEOUT_S} s"
        except OSError as error:
            return None, f"cuobjdump could not be run ({error})"
        message = " ".join(_TOOL_MESSAGE.sub("", line).strip() for line in done.stderr.splitlines() if line.strip())
        if done.returncode != 0:
            if "does not contain device code" in message:
                return None, "no device code: the library has no CUDA functions"
            if "nvdisasm" in message:
                return None, "nvdisasm is not installed (cuobjdump needs it for SASS)"
            return None, f"cuobjdump could not read the library ({message[:300] or f'exit status {done.returncode}'})"
        listing.seek(0)
        return parse(listing), ""


def _demangle(names: list[str], short: bool) -> dict[str, str]:
    """c++filt's reading of each name (`-p`: without parameters); names it can't read stay as they are."""
    unique = sorted(set(names))
    filt = shutil.which("cu++filt") or shutil.which("c++filt")
    if not unique or filt is None:
        return {}
    try:
        out = subprocess.run([filt, *(["-p"] if short else [])], input="\n".join(unique) + "\n",
                             capture_output=True, text=True, timeout=60).stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if len(out) != len(unique):
        return {}
    return {name: readable.strip() or name for name, readable in zip(unique, out)}


def _find_tool(name: str) -> Path | None:
    candidates: list[Path] = []
    on_path = shutil.which(name)
    if on_path:
        candidates.append(Path(on_path))
    nvcc = shutil.which("nvcc")
    if nvcc:  # nvcc may be a wrapper script or a symlink: beside it, and beside what it points to
        candidates += [Path(nvcc).parent / name, Path(nvcc).resolve().parent / name]
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            candidates.append(Path(home) / "bin" / name)
    candidates += _pip_cuda_binaries(name)
    return next((c for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)


def _pip_cuda_binaries(name: str) -> list[Path]:
    """`name` in PyPI's nvidia packages (nvidia/cu13/bin/...), the newest CUDA first."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    locations = (spec.submodule_search_locations or []) if spec else []
    return [binary for location in locations for binary in sorted(Path(location).glob(f"*/bin/{name}"), reverse=True)]


def _precision_of(form: str) -> str:
    """The input type of a tensor-core mnemonic: HMMA.16816.F32 takes FP16, HMMA.1684.F32.TF32 takes TF32."""
    parts = form.upper().split(".")
    family = parts[0].removeprefix("UTC")[:1]  # HMMA, HGMMA and sm_100's UTCHMMA are one family
    if family == "H":
        return next((kind for kind in ("TF32", "BF16") if kind in parts), "FP16")
    if family == "I":
        return "INT4" if {"S4", "U4"} & set(parts) else "INT8"
    return _FAMILIES.get(family, parts[0])
