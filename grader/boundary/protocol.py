"""The runner↔harness contract, in one place: the plan the runner writes, the progress events the
harness writes back, its exit codes, the poison and the margins around buffers, the C scalar types.

The harness process imports this module, and so does the spec: the standard library only (NumPy
arrays are handled, never imported).

A harness writes one JSON object a line to its progress file, in this grammar:

    hello, (device | device_unavailable), then for each call i from START to STOP:
    start i, [loading i, loaded i,]... [sealed i]... end i; and finally finished

`loading`/`loaded` surround the first load of a library (its static constructors run between
them; a composed call loads each of its kernels'). `sealed` is a composed call's: one output saved,
with its digest, written before the next step's student code runs (the runner reads the events live,
so a later rewrite of that file is found). Anything out of this order was written by the code under test.
"""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    import numpy as np

# The C types a host signature may use, and the NumPy dtype each one carries (its ctypes type is c_<name>).
SCALAR_DTYPES = {"int": "int32", "float": "float32", "double": "float64", "long": "int64"}

# The poison: signalling NaNs whose payloads say where they were set. A copy keeps a signalling NaN as it is, while
# arithmetic on one (x86 SSE, ARM, NumPy) returns it quieted with its payload kept; neither produces these payloads
# from finite inputs. So an element of an output that still holds its poison exactly was never written (or was
# written with a copy of its own poison, which no bits can tell apart), one that holds the poison quieted (or
# negated) was computed from an output read before it was written, and one that holds a margin's payload was
# computed from memory just outside a buffer. A GPU's arithmetic returns its one canonical NaN instead (0x7FFFFFFF):
# there a NaN computed from poison is told apart as computed, not by what it was computed from.
# Payloads are float32's 22 bits below the quiet bit; a float64 holds the same payload shifted up by 29 bits, where
# converting a float32 NaN to float64 puts it (and converting back takes it), so that both widths are read alike.
OUTPUT_PAYLOAD = 0x00DEAD  # outputs, poisoned scratch, and mutable inputs past what their data fills
MARGIN_TAG, MARGIN_TAG_MASK = 0x2D0000, 0x3F0000  # margins: the tag, then the buffer's position << 1, then the side
MARGIN_POSITIONS = 1 << 15  # positions a margin's payload can name (pointer parameters, in the signature's order)
_WIDTHS = {4: (0x7F800000, 1 << 22, 0, "uint32"), 8: (0x7FF0000000000000, 1 << 51, 29, "uint64")}


def nan_bits(itemsize: int, payload: int, quiet: bool = False) -> int:
    """The NaN of a float of `itemsize` bytes that carries `payload` (22 bits), signalling unless `quiet`."""
    exponent, quiet_bit, shift, _ = _WIDTHS[itemsize]
    return exponent | (quiet_bit if quiet else 0) | (payload << shift)


def margin_payload(position: int, after: bool) -> int:
    """The payload of the margin before (or `after`) the buffer of the `position`-th pointer parameter."""
    return MARGIN_TAG | (position % MARGIN_POSITIONS) << 1 | int(after)


def margin_bits(dtype: str, position: int, after: bool) -> int:
    """The bit pattern a margin of a buffer of `dtype` is filled with (integers share their width's float pattern)."""
    return nan_bits(POISON_WIDTH[dtype], margin_payload(position, after))


POISON_WIDTH = {"float32": 4, "float64": 8, "int32": 4, "int64": 8}
# By dtype: the unsigned integer type of the same width, and the outputs' bit pattern.
POISON_BITS = {dtype: (_WIDTHS[width][3], nan_bits(width, OUTPUT_PAYLOAD)) for dtype, width in POISON_WIDTH.items()}
MARGIN_BYTES = 1024  # poisoned margin on each side of a buffer; keeps the buffer 256-byte aligned

EXIT_DEVICE_ERROR = 3  # the CUDA context is unusable after a sticky error: a fresh harness takes over
EXIT_NO_DEVICE = 4  # no device to run on (no driver, no GPU): the machine's problem

STRINGS_KEPT, STRING_LENGTH = 16, 200  # what a list of words in an event may carry: the file is the code's to write


def never_written(output: np.ndarray) -> np.ndarray:
    """Mask of elements still holding the poison bit pattern."""
    unsigned, bits = POISON_BITS[output.dtype.name]
    raw = output.view(unsigned)
    return raw == raw.dtype.type(bits)


# The plan: what the runner asks one harness to do, written once per run as PLAN.json.

@dataclass(frozen=True)
class ScalarArgument:
    """A scalar parameter of the host function and the case's value for it."""

    name: str
    ctype: str  # a key of SCALAR_DTYPES
    value: int | float


@dataclass(frozen=True)
class BufferArgument:
    """A pointer parameter: what the harness allocates, fills or poisons, and checks after the call."""

    name: str
    role: str  # "input", "output" or "scratch"
    dtype: str
    shape: tuple[int, ...]
    allocate: int  # elements allocated: the shape's, or more (scratch reuse)
    null: bool  # passed as NULL in this case
    mutable: bool  # an input the kernel may overwrite
    init: str  # scratch: "zeros", "poison" or "leftover"
    # Scratch that must stay (nearly) unwritten (a variant's `untouched`): the harness counts the elements the call
    # changed from what they started as, the poison or zeros (`Ended.written`).
    count_written: bool = False


Argument = Union[ScalarArgument, BufferArgument]


@dataclass(frozen=True)
class SliceArgument:
    """A pointer parameter of one step of a composed call: a slice of one of the call's allocations."""

    name: str
    role: str  # "input", "output" or "scratch", as the kernel's spec says
    dtype: str
    space: str  # the allocation: a key of the composition's `spaces`
    offset: int  # elements from the allocation's start
    count: int  # elements the kernel is given (its spec's allocation)
    shape: tuple[int, ...]  # what the step's gold function sees (the spec's shape)
    null: bool = False
    mutable: bool = False  # an input the kernel may overwrite (as the kernel's spec says)


StepArgument = Union[ScalarArgument, SliceArgument]


@dataclass(frozen=True)
class Step:
    """One kernel call of a composed program: its library's kernel, its arguments, the file its output is saved as."""

    kernel: str  # the composed kernel's base name: the key of its library (and of its gold function)
    arguments: tuple[StepArgument, ...]
    output: str  # file stem ("step-024")


@dataclass(frozen=True)
class Space:
    """One allocation a composed program's steps share: its elements, and what it holds before the first step."""

    dtype: str
    count: int
    file: str = ""  # a .npy of `count` elements written into it (uploaded straight from its pages); "": zeros


@dataclass(frozen=True)
class Region:
    """A named slice of one allocation ("layer 3's ln2"), for saying where a stray write landed."""

    name: str
    space: str
    offset: int
    count: int
    gold: bool  # a step's graded output (its gold is swapped in); else scratch the kernels may leave anything in


@dataclass(frozen=True)
class Composition:
    """A composed call: several of the student's kernels called in order over shared allocations, as a whole
    program calls them, each step's output saved and sealed before the next step runs.

    What the program does with its steps (which ones it runs, how often, what it saves) is its check's
    harness half, the module `runner` names: its `run(composition, output_dir, device, libraries, emit,
    index)` returns a `grader.boundary.device.Completion` for the whole call (`grader.checks`).
    """

    runner: str  # the check's harness half, which the harness imports by this name
    libraries: dict[str, str]  # composed kernel (base name) -> its library
    spaces: dict[str, Space]  # allocation name -> what it is
    steps: tuple[Step, ...]
    sealed: tuple[str, ...]  # what the harness seals, in its order: the one sequence a `sealed` event may follow
    regions: tuple[Region, ...] = ()  # the allocations' named slices
    settings: dict[str, Any] = field(default_factory=dict)  # the runner's own (JSON values): which pass, shapes

    @classmethod
    def from_dict(cls, document: dict[str, Any]) -> Composition:
        steps = tuple(Step(s["kernel"], tuple(_step_argument(a) for a in s["arguments"]), s["output"])
                      for s in document["steps"])
        return cls(**{**document, "spaces": {name: Space(**space) for name, space in document["spaces"].items()},
                      "steps": steps, "sealed": tuple(document["sealed"]),
                      "regions": tuple(Region(**r) for r in document["regions"])})


@dataclass(frozen=True)
class PlannedCall:
    """One kernel on one case, as the harness performs it."""

    kernel: str
    case: str
    library: str
    inputs_dir: str
    output_dir: str  # inside the sandbox's one writable folder
    arguments: tuple[Argument, ...]
    composition: Composition | None = None  # a composed call (a check's): its program (no `arguments` of its own)


@dataclass(frozen=True)
class Plan:
    """Every call of a run; each harness performs a slice of them (START to STOP)."""

    target: str  # the target's name, for messages
    device_module: str  # the target's harness half, which the harness imports by this name
    sanitizer: bool  # under compute-sanitizer: no margins, one device allocation per buffer (it checks each end)
    device_memory_limit: int | None  # bytes a call may keep allocated on the device after it returns
    calls: tuple[PlannedCall, ...]
    device_code: str = ""  # the harness's own device code from the target (CUDA: its checksum kernel's PTX)
    # The sources of the assignment's own runtime modules by name (`grader.boundary.runtimes`), which the harness registers.
    runtimes: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        document = asdict(self)
        document["calls"] = [{**{k: v for k, v in asdict(call).items() if k != "composition"},
                              "arguments": [_argument_json(a) for a in call.arguments],
                              **({"composition": _composition_json(call.composition)} if call.composition else {})}
                             for call in self.calls]
        return json.dumps(document)

    @classmethod
    def from_json(cls, text: str) -> Plan:
        document = json.loads(text)
        calls = tuple(PlannedCall(**{**call, "arguments": tuple(_argument(a) for a in call["arguments"]),
                                     "composition": Composition.from_dict(call["composition"])
                                     if call.get("composition") else None})
                      for call in document.pop("calls"))
        return cls(**document, calls=calls)


_SCALAR, _BUFFER = "scalar", "buffer"  # an argument's "kind" in the plan file


def _argument_json(argument: Argument | StepArgument) -> dict[str, Any]:
    return {"kind": _SCALAR if isinstance(argument, ScalarArgument) else _BUFFER, **asdict(argument)}


def _argument(document: dict[str, Any]) -> Argument:
    fields = {k: v for k, v in document.items() if k != "kind"}
    if document["kind"] == _SCALAR:
        return ScalarArgument(**fields)
    return BufferArgument(**{**fields, "shape": tuple(fields["shape"])})


def _step_argument(document: dict[str, Any]) -> StepArgument:
    fields = {k: v for k, v in document.items() if k != "kind"}
    if document["kind"] == _SCALAR:
        return ScalarArgument(**fields)
    return SliceArgument(**{**fields, "shape": tuple(fields["shape"])})


def _composition_json(composition: Composition) -> dict[str, Any]:
    return {**asdict(composition), "steps": [{"kernel": s.kernel, "output": s.output,
                                              "arguments": [_argument_json(a) for a in s.arguments]}
                                             for s in composition.steps]}


# The events: what the harness writes to its progress file, and how the runner reads them back.

class Event(str, enum.Enum):
    """What one progress line says happened (its "event"); the grammar is in the module docstring."""

    HELLO = "hello"  # the harness's interpreter runs
    DEVICE = "device"  # a usable device, before any student code ran: `Ready`'s fields
    DEVICE_UNAVAILABLE = "device_unavailable"  # none: `message` says why
    START = "start"  # call `index` begins (before its library is loaded)
    LOADING = "loading"  # call `index`'s library is being loaded: its static constructors run
    LOADED = "loaded"
    SEALED = "sealed"  # a composed call saved one output: `Sealed`'s fields
    END = "end"  # call `index` ended: `Ended`'s fields
    FINISHED = "finished"  # every planned call of this harness ended
    # Never the harness's: the runner's watcher puts it in place of a flooded progress file's lines.
    OVERSIZED = "oversized"


class EndStatus(str, enum.Enum):
    """How a call ended, as the harness saw it."""

    OK = "ok"
    DEVICE_ERROR = "device_error"  # the kernel left a CUDA error (the context is unusable)
    EXCEPTION = "exception"  # the kernel's own code raised an exception (a Python kernel): `message` says what and where
    DEVICE_MEMORY = "device_memory"  # it kept more device memory allocated than the plan allows


def new_event(kind: Event, index: int | None = None, **fields: Any) -> dict[str, Any]:
    """An event as the progress file holds it: its call's index (if it has one), its kind, its fields."""
    return {**({"index": index} if index is not None else {}), "event": kind.value, **fields}


def event_line(kind: Event, index: int | None = None, **fields: Any) -> str:
    """One line of the progress file (without its newline)."""
    return json.dumps(new_event(kind, index, **fields))


def parse_event(line: bytes) -> dict[str, Any] | None:
    """One progress line as read back; None for a torn or forged line, which carries nothing to rely on."""
    try:
        event = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: a line of 100,000 nested brackets
        return None
    return event if isinstance(event, dict) else None


def kind_of(event: dict[str, Any]) -> object:
    return event.get("event")


def index_of(event: dict[str, Any]) -> object:
    return event.get("index")


def message_of(event: dict[str, Any]) -> str:
    """A `device_unavailable` or `end` event's message ("" if it has none)."""
    return str(event.get("message", ""))


@dataclass(frozen=True)
class Network:
    """The network as the harness sees it from its own namespace, before any student code runs."""

    interfaces: tuple[str, ...]  # socket.if_nameindex()'s names
    routes: int  # routes in /proc/net/route (0: nowhere to send a packet but loopback)

    def words(self) -> str:
        """For the enforcement record: "network: loopback only, seen from inside the harness: lo"."""
        seen = ", ".join(self.interfaces) or "no interface"
        if set(self.interfaces) <= {"lo"} and self.routes == 0:
            return f"network: loopback only, seen from inside the harness: {seen}"
        return f"network: not isolated, seen from inside the harness: {seen}; {self.routes} route(s)"


def network_seen() -> Network:
    """What this process sees of the network (the harness's own view, for `Ready`)."""
    import socket

    try:
        interfaces = tuple(sorted(name for _, name in socket.if_nameindex()))
    except OSError:
        interfaces = ()
    try:
        with open("/proc/net/route") as table:
            routes = sum(1 for line in table.readlines()[1:] if line.strip())
    except OSError:
        routes = 0
    return Network(interfaces, routes)


@dataclass(frozen=True)
class Ready:
    """The `device` event's fields: the device a harness found, when, how much of its memory was free,
    and the network it sees (None: a harness that did not say)."""

    name: str
    at: float | None
    free_bytes: int | None
    network: Network | None = None

    def fields(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def read(cls, event: dict[str, Any]) -> Ready:
        free = event.get("free_bytes")
        seen = event.get("network")
        network = None
        if isinstance(seen, dict) and isinstance(seen.get("routes"), int):
            network = Network(strings(seen.get("interfaces")), seen["routes"])
        return cls(str(event.get("name", "")), number(event.get("at")), free if isinstance(free, int) else None,
                   network)


@dataclass(frozen=True)
class Written:
    """How much of one scratch buffer a call wrote: the elements no longer holding what they started as, of all."""

    buffer: str
    written: int
    elements: int

    @classmethod
    def read(cls, value: object) -> Written | None:
        """One entry of an `end` line's `written`; None where it is not what the harness writes."""
        if not isinstance(value, dict) or not isinstance(value.get("buffer"), str):
            return None
        written, elements = value.get("written"), value.get("elements")
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (written, elements)) \
                or written > elements:  # type: ignore[operator]
            return None
        return cls(value["buffer"][:STRING_LENGTH], written, elements)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ForbiddenUse:
    """Something the assignment forbids that the kernel's code did during a call: a module it imported
    ("scipy.linalg") or a method it called (".toarray", the spec's pattern's leading dot kept), and the line of the
    submission that did it (its innermost frame in the submission's files; "" and 0 where none was on the stack)."""

    name: str
    file: str
    line: int

    @classmethod
    def read(cls, value: object) -> ForbiddenUse | None:
        """One entry of an `end` line's `forbidden`; None where it is not what the harness writes."""
        if not isinstance(value, dict) or not isinstance(value.get("name"), str) \
                or not isinstance(value.get("file"), str):
            return None
        line = value.get("line")
        if not isinstance(line, int) or isinstance(line, bool) or line < 0:
            return None
        return cls(value["name"][:STRING_LENGTH], value["file"][:STRING_LENGTH], line)


@dataclass(frozen=True)
class Launch:
    """One kernel launch a call made, as the library's launch watch recorded it: the launched function (its name in
    the binary, mangled), its block's shape and the dynamic shared memory it asked for at launch."""

    kernel: str
    block: tuple[int, int, int]
    dynamic_shared_bytes: int

    @classmethod
    def read(cls, value: object) -> Launch | None:
        """One entry of an `end` line's `launched`; None where it is not what the harness writes."""
        if not isinstance(value, dict) or not isinstance(value.get("kernel"), str):
            return None
        block, shared = value.get("block"), value.get("dynamic_shared_bytes")
        if not isinstance(block, list) or len(block) != 3 or not all(
                isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (*block, shared)):
            return None
        return cls(value["kernel"][:STRING_LENGTH], (block[0], block[1], block[2]), shared)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Ended:
    """The `end` event's fields: how the call ended and what the harness measured."""

    status: str  # an EndStatus where the harness wrote it; a forged line may hold anything
    wall_ms: float | None = None
    device_ms: float | None = None  # None where the target has no device clock
    inputs_modified: tuple[str, ...] = ()  # input buffers the call wrote into
    out_of_bounds: tuple[str, ...] = ()  # writes into a buffer's margins, in words
    message: str = ""  # device_error: the error, in the runtime's words; exception: what was raised, and where
    held_bytes: float | None = None  # device_memory: what it kept, and the limit
    device_memory_limit: float | None = None
    written: tuple[Written, ...] = ()  # the scratch buffers planned with count_written: how much of each it wrote
    # Those calls' device memory: the most the call took beyond what was in use when it began (sampled; None: not read).
    peak_extra_bytes: float | None = None
    # What the call did that the assignment forbids (a python kernel's imports and methods, seen while it ran).
    forbidden: tuple[ForbiddenUse, ...] = ()
    # The kernels the call launched, where its library watches launches (a CUDA kernel whose spec asks its tile).
    launched: tuple[Launch, ...] = ()

    def fields(self) -> dict[str, Any]:
        return {**asdict(self), "status": EndStatus(self.status).value}

    @classmethod
    def read(cls, event: dict[str, Any]) -> Ended | None:
        """An `end` line's fields (values of the wrong type read as absent); None if its status is no string."""
        status = event.get("status")
        if not isinstance(status, str):
            return None
        return cls(status, number(event.get("wall_ms")), number(event.get("device_ms")),
                   strings(event.get("inputs_modified")), strings(event.get("out_of_bounds")), message_of(event),
                   number(event.get("held_bytes")), number(event.get("device_memory_limit")),
                   _written(event.get("written")),
                   number(event.get("peak_extra_bytes")), _forbidden(event.get("forbidden")),
                   _launched(event.get("launched")))


def _forbidden(value: object) -> tuple[ForbiddenUse, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(u for u in (ForbiddenUse.read(item) for item in value[:STRINGS_KEPT]) if u is not None)


def _launched(value: object) -> tuple[Launch, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(launch for launch in (Launch.read(item) for item in value[:STRINGS_KEPT]) if launch is not None)


def _written(value: object) -> tuple[Written, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(w for w in (Written.read(item) for item in value[:STRINGS_KEPT]) if w is not None)


def number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def strings(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(str(item)[:STRING_LENGTH] for item in value[:STRINGS_KEPT] if isinstance(item, str))


def seal_of(data: bytes) -> str:
    """The digest a `sealed` event carries of a saved output's bytes (its elements, not the .npy header)."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@dataclass(frozen=True)
class Sealed:
    """The `sealed` event's fields: one output of a composed call, saved before the next step ran."""

    file: str  # its stem in the call's output folder ("step-024", "logits", "tokens")
    digest: str  # seal_of its elements' bytes
    inputs_modified: tuple[str, ...] = ()  # the step's inputs it wrote into
    outside: tuple[str, ...] = ()  # regions outside its arguments that changed during the step, named

    def fields(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def read(cls, event: dict[str, Any]) -> Sealed | None:
        """A `sealed` line's fields; None where its file or digest is no string."""
        file, digest = event.get("file"), event.get("digest")
        if not isinstance(file, str) or not isinstance(digest, str):
            return None
        return cls(file[:STRING_LENGTH], digest[:STRING_LENGTH], strings(event.get("inputs_modified")),
                   strings(event.get("outside")))
