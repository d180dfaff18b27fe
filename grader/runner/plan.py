"""The plan: the runner's calls, spelt as the harness reads them (`grader.boundary.protocol.Plan`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grader.boundary.protocol import Argument, BufferArgument, Composition, Plan, PlannedCall, ScalarArgument
from grader.boundary.runtimes import own_sources
from grader.runner.limits import device_memory_limit
from grader.assignment import Assignment, Case, Kernel, allocation_of, shape_of
from grader.targets import target_of


@dataclass(frozen=True)
class Call:
    """One kernel on one case, as the harness will perform it.

    A composed call (`composition`, a check's) calls several kernels: `library` is then the folder that
    holds their libraries (the sandbox shows it whole), and `kernel` the check's (`grader.checks`).
    """

    kernel: Kernel
    case: Case
    library: Path
    inputs_dir: Path
    output_dir: Path
    composition: Composition | None = None


def plan_for(assignment: Assignment, calls: list[Call], outbox: Path, sanitizer: bool) -> Plan:
    """Every call of a run, each writing its outputs to its own folder of the sandbox's `outbox`."""
    target = target_of(assignment)
    return Plan(target=assignment.target, device_module=target.device_module, sanitizer=sanitizer,
                device_memory_limit=device_memory_limit(assignment),
                calls=tuple(planned(call, outbox / str(index)) for index, call in enumerate(calls)),
                device_code=target.device_code(), runtimes=own_sources(assignment.runtimes))


def planned(call: Call, output_dir: Path) -> PlannedCall:
    """One call as the harness performs it: every parameter of the signature, in order, with the case's values."""
    arguments: list[Argument] = []
    if call.composition is not None:
        return PlannedCall(call.kernel.name, call.case.name, str(call.library), str(call.inputs_dir), str(output_dir),
                           (), call.composition)
    for parameter in call.kernel.signature.parameters:
        if not parameter.pointer:
            arguments.append(ScalarArgument(parameter.name, parameter.ctype, call.case.params[parameter.name]))
            continue
        buffer = call.kernel.buffer(parameter.name)
        arguments.append(BufferArgument(buffer.name, buffer.role, buffer.dtype, shape_of(buffer, call.case.params),
                                        allocation_of(buffer, call.case.params), buffer.name in call.case.null,
                                        buffer.mutable, buffer.init, buffer.count_written))
    return PlannedCall(call.kernel.name, call.case.name, str(call.library), str(call.inputs_dir), str(output_dir),
                       tuple(arguments))
