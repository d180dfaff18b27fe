"""The small `extern "C"` shim that the harness calls instead of the student's function (C targets).

The shim fixes one C ABI for every kernel, whatever C++ name mangling the student's header
produces, and does what the harness can't do reliably from Python: (CUDA) clear stale errors,
synchronise every stream, read the sticky error; and time the call from inside the library.
Each C target brings its template (`cpp.py`, `cuda.py`); every shim exports:

    int kg_call(<the host function's parameters>, double* wall_ms, double* device_ms,
                char* error, int error_capacity)

returning 0 on success, non-zero with a message in `error` otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.boundary.c_abi import SHIM_SYMBOL
from grader.targets import target_named

if TYPE_CHECKING:
    from grader.assignment import Kernel

__all__ = ["SHIM_SYMBOL", "render_shim", "shim_source"]


def render_shim(template: str, kernel: Kernel) -> str:
    """A target's template filled in with the kernel's header, parameters, function and arguments; then the kernel's
    `defines` (its variant's), after the header that may declare them extern, as the course's program defines them."""
    parameters = "".join(f"{p.declaration}, " for p in kernel.signature.parameters)
    arguments = ", ".join(p.name for p in kernel.signature.parameters)
    shim = template.format(header=kernel.header, parameters=parameters, function=kernel.signature.function,
                           arguments=arguments)
    if not kernel.defines:
        return shim
    # Every library of the variant has its own copy (a harness loads each privately): a check's program composed
    # of several of them keeps their values in step itself.
    definitions = "".join(f"{d};\n" for d in kernel.defines)
    return f"{shim}\n// The variant {kernel.variant!r}'s `defines`: globals its program defines.\n{definitions}"


def shim_source(kernel: Kernel, target: str) -> str:
    """The shim the target named `target` generates for `kernel`."""
    return target_named(target).shim_source(kernel)
