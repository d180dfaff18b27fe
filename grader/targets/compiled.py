"""The build half the C targets share: a compiler found by its `--version`, the kg_call shim, forbidden things found
as undefined symbols of the library (nm), and the watch that tells whether those ran (`watch_source`)."""

from __future__ import annotations

import fnmatch
import re
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from grader.boundary.c_abi import LAUNCH_TAKE, LAUNCHES_KEPT, WATCH_COUNT, WATCH_NAME, WATCH_TAKE
from grader.targets import HostTarget, Toolchain
from grader.targets.shim import render_shim

if TYPE_CHECKING:
    from grader.assignment import Kernel

COMPILED_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx")
# A C file is always compiled apart into the archive, as C (the target's object command says with what): C is not
# C++ (`int new;`, `int* p = malloc(n)`), so never among the files the link command compiles.
C_SUFFIX = ".c"
ARCHIVE_FILE = "kg_folder.a"  # the source folder's other compiled files, as objects the link takes what it needs from
WATCH_FILE = "kg_watch.cpp"  # the grader's trampolines for the forbidden functions a library links (`watch_source`)
SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # a name the watch's assembly can take as it is


class CompiledTarget(HostTarget):
    """A target whose kernels are compiled with the shim into a shared library (see `Target`)."""

    name: str
    needs_gpu: bool
    compute_sanitizer: bool
    python_packages: tuple[str, ...]
    harness_env: dict[str, str]
    determinism: tuple[str, ...]
    device_module: str
    shim_file: str
    shim_template: str
    importable: tuple[str, ...] = ()
    # The runtime's function that a kernel launch (`<<<...>>>`) calls, where the launch watch can record it (CUDA).
    launch_symbol: str | None = None

    def compiler(self) -> str:
        raise NotImplementedError

    def version_of(self, lines: list[str]) -> str:
        """The line of `--version`'s output that names the compiler's version."""
        raise NotImplementedError

    def arch_flags(self, cuda_arch: str | None) -> tuple[str, ...]:
        return ()

    def toolchain(self, cuda_arch: str | None = None) -> Toolchain:
        compiler = self.compiler()
        try:
            out = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.TimeoutExpired) as error:
            return Toolchain(self.name, compiler, f"{compiler} unavailable ({error})", ())
        lines = [line for line in out.splitlines() if line.strip()]
        version = self.version_of(lines) if lines else compiler
        return Toolchain(self.name, compiler, version, self.arch_flags(cuda_arch))

    def shim_source(self, kernel: Kernel) -> str:
        return render_shim(self.shim_template, kernel)

    def library_flags(self, libraries: tuple[str, ...]) -> tuple[str, ...]:
        return ()

    def library_versions(self, libraries: tuple[str, ...]) -> tuple[str, ...]:
        """The versions of the header libraries a build uses (CUTLASS's), for its cache key: an upgrade at the same
        path builds again."""
        return ()

    def library_missing(self, libraries: tuple[str, ...], compiler_output: str) -> str | None:
        """Why a build failed for want of a library the assignment provides and this machine lacks, or None: the
        grading machine's problem, not the submission's."""
        return None

    def folder_sources(self, kernel: Kernel, files: Iterable[str]) -> list[str]:
        return folder_sources(kernel, files)

    def archive_command(self, objects: list[str]) -> list[str]:
        return ["ar", "rcs", ARCHIVE_FILE, *objects]

    def watched_link(self, link: list[str], symbols: tuple[str, ...], launches: bool = False) -> list[str]:
        """The link command with the watch: WATCH_FILE compiled beside the shim, and every reference the student's
        objects make to each symbol (and, with `launches`, to the launch function) sent through its trampoline (the
        linker's --wrap)."""
        at = link.index(self.shim_file) + 1
        wrapped = (*symbols, *((self.launch_symbol,) if launches and self.launch_symbol else ()))
        wraps = [part for symbol in wrapped for part in ("-Xlinker", f"--wrap={symbol}")]
        return [*link[:at], WATCH_FILE, *link[at:link.index("-o")], *wraps, *link[link.index("-o"):]]

    def forbidden_in(self, library: Path, patterns: tuple[str, ...]) -> tuple[str, ...]:
        """Symbols the library needs from elsewhere that match the spec's forbidden patterns.

        Only undefined symbols count: the provided header itself defines `cublas_handle`, while a call
        into cuBLAS shows up as an undefined `cublas...` symbol.
        """
        if not patterns:
            return ()
        try:
            listing = subprocess.run(["nm", "-D", "--undefined-only", str(library)], capture_output=True, text=True,
                                     timeout=60).stdout
        except (OSError, subprocess.TimeoutExpired):
            return ()
        names = {line.split()[-1].split("@")[0] for line in listing.splitlines() if line.split()}
        return tuple(sorted(n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)))


def compiled_sources(kernel: Kernel) -> list[str]:
    """The kernel's files that are compiled (the rest are headers they include)."""
    return [s for s in kernel.sources if s.endswith(COMPILED_SUFFIXES)]


def is_c(source: str) -> bool:
    return source.endswith(C_SUFFIX)


def folder_sources(kernel: Kernel, files: Iterable[str]) -> list[str]:
    """The compiled files of a kernel's build that are not its own: the rest of the source folder (a helper.cpp,
    another kernel's file, a benchmark's main.cpp).

    Each is compiled on its own into the build's archive, and the link takes from it only what the kernel
    calls: a kernel may call the student's other functions, as in the course's one program, while a file
    it does not call (one that fails to compile, a `main`, a static constructor) stays out of its library.
    Every C file is one, the kernel's own too (`C_SUFFIX`).
    """
    own = set(compiled_sources(kernel))
    return [f for f in files if (f.endswith(COMPILED_SUFFIXES) and f not in own) or is_c(f)]


def watch_source(symbols: tuple[str, ...], launch_symbol: str | None = None) -> str:
    """The watch: for each forbidden function the library links, a trampoline that marks it called and jumps on.

    The linker's --wrap sends the student's calls of `cublasSgemm_v2` to `__wrap_cublasSgemm_v2`, whose `__real_`
    reference is cuBLAS's own. The trampoline's one byte store touches no register that carries an argument, so
    it passes any signature on unchanged (x86-64). The harness reads and clears the marks after every call
    (`grader.boundary.c_abi`): a forbidden function that ran is a forbidden use; one only linked (an unused helper)
    is a note.

    With `launch_symbol` (CUDA's `__cudaLaunchKernel`, which every `<<<...>>>` calls with the kernel's handle, the
    grid and block as two registers each, the arguments, then the dynamic shared memory on the stack), its
    trampoline also keeps the first LAUNCHES_KEPT launches since last asked: the handle, the block and the dynamic
    shared memory, written through the two scratch registers (r10, r11) and rax, which carry no argument.
    """
    names = "".join(f'    "{s}",\n' for s in symbols) or '    "",\n'
    launches = f"""\
.globl __wrap_{launch_symbol}
.type __wrap_{launch_symbol}, @function
__wrap_{launch_symbol}:
    movl kg_launch_count(%rip), %r11d
    cmpl ${LAUNCHES_KEPT}, %r11d
    jae 1f
    leaq kg_launches(%rip), %r10
    shlq $5, %r11
    movq %rdi, (%r10,%r11)
    movq %rcx, 8(%r10,%r11)
    movq %r8, 16(%r10,%r11)
    movq 8(%rsp), %rax
    movq %rax, 24(%r10,%r11)
    incl kg_launch_count(%rip)
1:  jmp __real_{launch_symbol}@PLT
.size __wrap_{launch_symbol}, .-__wrap_{launch_symbol}
""" if launch_symbol else ""
    trampolines = "".join(
        f".globl __wrap_{s}\n.type __wrap_{s}, @function\n__wrap_{s}:\n"
        f"    movb $1, kg_watch_seen+{i}(%rip)\n    jmp __real_{s}@PLT\n.size __wrap_{s}, .-__wrap_{s}\n"
        for i, s in enumerate(symbols))
    return f"""\
// Generated by kernel-grader (grader/targets/compiled.py): the grader's code, not a student's.
extern "C" {{
__attribute__((visibility("hidden"))) unsigned char kg_watch_seen[{max(len(symbols), 1)}];
static const char* const kg_watch_names[{max(len(symbols), 1)}] = {{
{names}}};
int {WATCH_COUNT}() {{ return {len(symbols)}; }}
const char* {WATCH_NAME}(int i) {{ return kg_watch_names[i]; }}
int {WATCH_TAKE}(int i) {{ int seen = kg_watch_seen[i]; kg_watch_seen[i] = 0; return seen; }}
// Each launch: the kernel's handle, blockDim.x | blockDim.y << 32, blockDim.z, the dynamic shared memory.
__attribute__((visibility("hidden"))) unsigned long long kg_launches[{LAUNCHES_KEPT}][4];
__attribute__((visibility("hidden"))) unsigned int kg_launch_count;
int {LAUNCH_TAKE}(unsigned long long* records, int capacity) {{
    int n = kg_launch_count < (unsigned)capacity ? (int)kg_launch_count : capacity;
    for (int i = 0; i < n; ++i) for (int j = 0; j < 4; ++j) records[4 * i + j] = kg_launches[i][j];
    kg_launch_count = 0;
    return n;
}}
}}
asm(R"kg(
.text
{trampolines}{launches})kg");
"""


def watchable(symbols: tuple[str, ...]) -> tuple[str, ...]:
    """The symbols a watch can take (plain C names: a C++ mangled name is one too)."""
    return tuple(s for s in symbols if SYMBOL.fullmatch(s))
