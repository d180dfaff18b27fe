"""What a variant's binaries show of its technique, in the reports' words: a sentence per kind of evidence.

grader.evidence reads the built libraries (cuobjdump, nm); a result keeps what it read per base kernel
(`VariantResult.libraries`, `LibraryFacts`), and these sentences are made from that.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from grader.results import FunctionFacts, LibraryFacts, VariantResult

NAME_LIMIT = 60  # characters of a function's name in a sentence (templated names run to hundreds)
FUNCTIONS_NAMED = 3  # per kernel in a sentence; the rest are counted

# Each kind of evidence a spec may ask for (its words: grader.results.EVIDENCE_WORDS): its report sentences.
SENTENCES_OF = {"tensor_cores": ("tensor_cores",), "shared_memory": ("shared_memory", "registers"),
                "cublas": ("cublas",), "constant_memory": ("constant_memory",), "restrict_loads": ("restrict_loads",),
                "async_copies": ("async_copies",), "ptx_mma": ("tensor_cores", "ptx_mma"), "cutlass": ("cutlass",)}


@dataclass(frozen=True)
class EvidenceSummary:
    """The sentences a report shows for a set of kernels, one per kind of evidence."""

    tensor_cores: str
    cublas: str
    shared_memory: str
    registers: str
    warp_shuffles: str
    # Milestone 3's techniques: said only where a variant asks for them (SENTENCES_OF), not in `lines`.
    constant_memory: str = ""
    restrict_loads: str = ""
    async_copies: str = ""
    ptx_mma: str = ""
    cutlass: str = ""

    @property
    def lines(self) -> tuple[str, ...]:
        """The sentences every evidence summary shows."""
        return self.tensor_cores, self.cublas, self.shared_memory, self.registers, self.warp_shuffles


def variant_evidence(variant: VariantResult) -> list[str]:
    """What the variant's binaries show, a sentence per kind of evidence it asks for; [] where none was read.

    A result stored before its libraries' facts were kept has the sentences it was stored with.
    """
    folder = _folder_sentences(variant)
    if not variant.libraries:
        return list(variant.evidence) + folder
    summary = summarize_evidence(variant.libraries)
    lines = [getattr(summary, line) for kind in variant.evidence_kinds for line in SENTENCES_OF.get(kind, ())]
    return list(dict.fromkeys(lines)) + folder  # ptx_mma says the tensor-core sentence too: once


def _folder_sentences(variant: VariantResult) -> list[str]:
    """What the folder's files show (presence and text only, nothing run), and what ncu measures of it elsewhere."""
    lines = []
    if variant.required_files and variant.status.value != "not_submitted":
        lines.append(f"files: {', '.join(variant.required_found)} (matching {', '.join(variant.required_files)}; "
                     "a presence check only)" if variant.required_found
                     else f"files: none matching {', '.join(variant.required_files)}")
    for label, files in variant.source_patterns.items():
        lines.append(f"{label}: in {', '.join(files)} (the text only)" if files
                     else f"{label}: not found in {variant.folder}/ (the text only)")
    if variant.ncu_metrics:
        lines.append(f"ncu: {', '.join(m.replace('_', ' ') for m in variant.ncu_metrics)} measured on a GPU runner "
                     "(`grader time --ncu`), reported, not scored")
    return lines


def summarize_evidence(by_kernel: Mapping[str, LibraryFacts]) -> EvidenceSummary:
    """The report's sentences for kernels (spec names, in the order given) and their libraries' evidence."""
    return EvidenceSummary(
        _tensor_core_sentence(by_kernel), _cublas_sentence(by_kernel), _shared_memory_sentence(by_kernel),
        _register_sentence(by_kernel), _shuffle_sentence(by_kernel),
        constant_memory=_functions_sentence("__constant__ memory", "read in", "read", by_kernel,
                                            lambda f: f.constant_reads, needs_sass=True),
        restrict_loads=_functions_sentence("read-only loads (__restrict__, __ldg)", "in", "in", by_kernel,
                                           lambda f: f.readonly_loads, needs_sass=True),
        async_copies=_functions_sentence("cp.async into shared memory", "in", "in", by_kernel,
                                         lambda f: f.async_copies, needs_sass=True),
        ptx_mma=_ptx_mma_sentence(by_kernel),
        cutlass=_functions_sentence("CUTLASS/CuTe kernels", "in", "in", by_kernel,
                                    lambda f: int(f.is_cutlass), needs_sass=False, counted=False))


def _functions_sentence(label: str, found: str, verb: str, by_kernel: Mapping[str, LibraryFacts],
                        count: Callable[[FunctionFacts], int], needs_sass: bool, counted: bool = True) -> str:
    """"label: read in matmul (kernel: 3); not in gelu; no evidence for ...": the kernels whose functions count."""
    shown, absent = [], []
    for kernel, evidence in by_kernel.items():
        if not (evidence.sass_read if needs_sass else evidence.functions):
            continue
        named = [f"{name}: {count(f)}" if counted else name for name, f in _by_name(evidence) if count(f)]
        (shown.append(f"{kernel} ({_first(named)})") if named else absent.append(kernel))
    return f"{label}: " + _join(
        f"{found} {', '.join(shown)}" if shown else "",
        (f"not in {', '.join(absent)}" if shown else f"not {verb} {', '.join(absent)}") if absent else "",
        *_unread(by_kernel, needs_sass=needs_sass))


def _ptx_mma_sentence(by_kernel: Mapping[str, LibraryFacts]) -> str:
    """Raw mma.sync (inline PTX, CuTe) apart from wmma: both are HMMA in SASS, only the embedded PTX tells them apart."""
    raw, wmma, none, unread = [], [], [], _unread(by_kernel, needs_sass=True)
    for kernel, evidence in by_kernel.items():
        if not evidence.sass_read:
            continue
        if not evidence.uses_tensor_cores:
            none.append(kernel)
        elif not evidence.ptx_read:
            unread.append(f"no evidence for {kernel} (no PTX embedded: mma.sync cannot be told from wmma)")
        elif named := [f"{name}: {f.ptx_mma_instructions}" + (f", ldmatrix {f.ldmatrix_instructions}"
                                                               if f.ldmatrix_instructions else "")
                       for name, f in _by_name(evidence) if f.ptx_mma_instructions]:
            raw.append(f"{kernel} ({_first(named)})")
        else:
            wmma.append(kernel)
    return "mma.sync (raw PTX or CuTe): " + _join(
        f"used in {', '.join(raw)}" if raw else "",
        f"tensor cores through wmma only in {', '.join(wmma)}" if wmma else "",
        f"no tensor cores in {', '.join(none)}" if none else "", *unread)


# Sentences. Each groups a set of kernels by what their libraries show; a kernel whose library could not be read
# is listed apart with the reason, so that "not used" is never said for want of evidence.

def _tensor_core_sentence(by_kernel: Mapping[str, LibraryFacts]) -> str:
    used, unused, unread = [], [], _unread(by_kernel, needs_sass=True)
    for kernel, evidence in by_kernel.items():
        if not evidence.sass_read:
            continue
        if evidence.uses_tensor_cores:
            named = [f"{name}: {'/'.join(f.tensor_core_precisions)}" for name, f in _by_name(evidence)
                     if f.uses_tensor_cores]
            used.append(f"{kernel} ({_first(named)})")
        else:
            unused.append(kernel)
    return "tensor cores: " + _join(
        f"used in {', '.join(used)}" if used else "",
        (f"not in {', '.join(unused)}" if used else f"not used in {', '.join(unused)}") if unused else "", *unread)


def _cublas_sentence(by_kernel: Mapping[str, LibraryFacts]) -> str:
    called = [f"{k} ({_first(list(e.cublas_symbols))})" for k, e in by_kernel.items() if e.calls_cublas]
    uncalled = [k for k, e in by_kernel.items() if e.readable and not e.calls_cublas]
    unread = {k: e for k, e in by_kernel.items() if not e.readable}
    return "cuBLAS: " + _join(
        f"called in {', '.join(called)}" if called else "",
        (f"not in {', '.join(uncalled)}" if called else f"not called in {', '.join(uncalled)}") if uncalled else "",
        *_unread(unread, needs_sass=True))


def _shared_memory_sentence(by_kernel: Mapping[str, LibraryFacts]) -> str:
    using, unused, unread = [], [], _unread(by_kernel, needs_sass=False)
    for kernel, evidence in by_kernel.items():
        if not evidence.functions:
            continue
        functions = [(name, f) for name, f in _by_name(evidence) if f.uses_shared_memory]
        if not functions:
            unused.append(kernel)
            continue
        name, largest = max(functions, key=lambda nf: nf[1].shared_bytes)
        size = f"{_bytes(largest.shared_bytes)} per block" if largest.shared_bytes else "dynamic only"
        others = f" and {len(functions) - 1} more" if len(functions) > 1 else ""
        using.append(f"{kernel} {size} ({name}{others})")
    return "shared memory: " + _join(", ".join(using), f"none in {', '.join(unused)}" if unused else "", *unread)


def _register_sentence(by_kernel: Mapping[str, LibraryFacts]) -> str:
    registers, stacks, unread = [], [], _unread(by_kernel, needs_sass=False)
    for kernel, evidence in by_kernel.items():
        if not evidence.functions:
            continue
        named = _by_name(evidence)
        name, most = max(named, key=lambda nf: nf[1].registers)
        registers.append(f"{kernel} {most.registers} ({name})")
        name, deepest = max(named, key=lambda nf: nf[1].stack_bytes + nf[1].local_bytes)
        if deepest.stack_bytes + deepest.local_bytes:
            stacks.append(f"{kernel} {_bytes(deepest.stack_bytes + deepest.local_bytes)} ({name})")
    return "registers per thread: " + _join(", ".join(registers),
                                           f"local memory per thread: {', '.join(stacks)}" if stacks else "", *unread)


def _shuffle_sentence(by_kernel: Mapping[str, LibraryFacts]) -> str:
    read = {k: e for k, e in by_kernel.items() if e.sass_read}
    used = [k for k, e in read.items() if e.uses_warp_shuffles]
    unused = [k for k in read if k not in used]
    return "warp shuffles: " + _join(
        f"used in {', '.join(used)}" if used else "",
        (f"not in {', '.join(unused)}" if used else f"not used in {', '.join(unused)}") if unused else "",
        *_unread(by_kernel, needs_sass=True))


def _unread(by_kernel: Mapping[str, LibraryFacts], needs_sass: bool) -> list[str]:
    """"no evidence for A, B (why)", one part per distinct reason."""
    reasons: dict[str, list[str]] = {}
    for kernel, evidence in by_kernel.items():
        if not (evidence.sass_read if needs_sass else evidence.functions):
            reasons.setdefault(evidence.note or "nothing read", []).append(kernel)
    return [f"no evidence for {', '.join(kernels)} ({reason})" for reason, kernels in reasons.items()]


def _by_name(evidence: LibraryFacts) -> list[tuple[str, FunctionFacts]]:
    """One function per short name (a library built for two arches has each twice): the one with the most to show."""
    chosen: dict[str, FunctionFacts] = {}
    for function in evidence.functions:
        name = function.name if len(function.name) <= NAME_LIMIT else function.name[:NAME_LIMIT] + "…"
        best = chosen.get(name)
        if best is None or (function.tensor_core_instructions, function.shared_bytes, function.registers) > (
                best.tensor_core_instructions, best.shared_bytes, best.registers):
            chosen[name] = function
    return sorted(chosen.items())


def _first(items: list[str]) -> str:
    shown = ", ".join(items[:FUNCTIONS_NAMED])
    return shown + (f" and {len(items) - FUNCTIONS_NAMED} more" if len(items) > FUNCTIONS_NAMED else "")


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p) or "no kernels"


def _bytes(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    return f"{count / 1024:.2f}".rstrip("0").rstrip(".") + " KiB"
