"""Load and validate an assignment pack (`assignments/<name>/assignment.toml`) into typed objects.

The spec is the single source of truth for a kernel: its C signature, which arguments are inputs,
outputs or scratch (with dtype and shape), its weight, tolerance, cases and limits. Every error
names the file, the key and what was expected.
"""

from __future__ import annotations

import ast
import importlib.util
import math
import operator
import os
import re
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Literal

from grader.errors import SpecError

Target = Literal["cuda", "cpp"]
Role = Literal["input", "output", "scratch"]
PartialCredit = Literal["fraction", "all_or_nothing"]
# What a scratch buffer holds when the kernel is called: zeros (as a program that cudaMemsets its
# activations leaves it), the NaN poison, or deterministic finite garbage (as a reused allocation).
# Outputs are always poisoned, so that an element never written is told apart.
Init = Literal["zeros", "poison", "leftover"]
INITS: tuple[str, ...] = ("zeros", "poison", "leftover")
GoldSource = Literal["reference", "numpy"]
# Libraries a pack may link when the machine has them (their use can still be forbidden).
LIBRARIES = ("cublas",)

# The C types a host signature may use, and the NumPy dtype each one carries.
SCALAR_DTYPES = {"int": "int32", "float": "float32", "double": "float64", "long": "int64"}

# Where assignments/, reference/ and student_template/ live: beside the package in a clone (the
# README's editable install), or wherever $KERNEL_GRADER_HOME points for any other install.
PROJECT_ROOT = Path(os.environ.get("KERNEL_GRADER_HOME") or Path(__file__).resolve().parent.parent)


@dataclass(frozen=True)
class Parameter:
    """One parameter of a host function, as its C signature spells it."""

    name: str
    ctype: str  # base type without const or '*': "float", "int", ...
    pointer: bool
    const: bool

    @property
    def dtype(self) -> str:
        return SCALAR_DTYPES[self.ctype]

    @property
    def declaration(self) -> str:
        return f"{'const ' if self.const else ''}{self.ctype}{'*' if self.pointer else ''} {self.name}"


@dataclass(frozen=True)
class Signature:
    function: str
    parameters: tuple[Parameter, ...]

    @property
    def text(self) -> str:
        return f"void {self.function}({', '.join(p.declaration for p in self.parameters)})"


@dataclass(frozen=True)
class Buffer:
    """A pointer argument: what the harness allocates, fills or poisons, and what gets graded."""

    name: str
    role: Role
    dtype: str
    shape: tuple[str, ...]  # expressions over the case's parameters
    allocate: str | None = None  # element count when larger than the shape (scratch reuse)
    nullable: bool = False
    mutable: bool = False  # an input the kernel may overwrite as scratch
    init: Init = "poison"  # scratch only: what it holds when the kernel is called (outputs: always poison)


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float


@dataclass(frozen=True)
class Case:
    name: str
    public: bool
    params: dict[str, Any]  # integers for scalar arguments and shapes, plus generator knobs
    null: tuple[str, ...] = ()  # nullable buffers passed as NULL in this case
    tolerance: Tolerance | None = None  # overrides the kernel's for an ill-conditioned case


@dataclass(frozen=True)
class Kernel:
    name: str
    weight: float
    header: str
    sources: tuple[str, ...]
    signature: Signature
    buffers: tuple[Buffer, ...]
    tolerance: Tolerance
    cases: tuple[Case, ...]
    time_limit_s: float
    partial_credit: PartialCredit
    forbidden_symbols: tuple[str, ...]
    forbidden_penalty: float
    # compute-sanitizer tools run on one small case ("memcheck", "racecheck"), and the share of the
    # weight a finding costs (1.0: the kernel fails).
    sanitizer: tuple[str, ...] = ()
    sanitizer_penalty: float = 0.0
    # Wall time for all of this kernel's cases together, harness starts included: a looping kernel
    # costs its own budget, not the per-call limit once per case.
    time_budget_s: float | None = None

    def buffer(self, name: str) -> Buffer:
        return next(b for b in self.buffers if b.name == name)

    def buffers_with(self, role: Role) -> tuple[Buffer, ...]:
        return tuple(b for b in self.buffers if b.role == role)

    def tolerance_for(self, case: Case) -> Tolerance:
        return case.tolerance or self.tolerance

    @property
    def budget_s(self) -> float:
        """The kernel's whole budget: the spec's, else twice the per-call limit."""
        return self.time_budget_s or 2 * self.time_limit_s


@dataclass(frozen=True)
class LatePolicy:
    """What a late submission costs: whole late days past the grace days, each a fraction of max_score."""

    grace_days: float = 0.0
    penalty_per_day: float = 0.0  # fraction of max_score per late day past the grace days
    cap: float = 1.0  # the most the policy takes, as a fraction of max_score
    max_late_days: float | None = None  # commits later than this are not accepted; None: until the cap is reached

    @property
    def accepted_days(self) -> float:
        """How long after the deadline a commit still counts."""
        if self.max_late_days is not None:
            return self.max_late_days
        if self.penalty_per_day <= 0:
            return self.grace_days
        return self.grace_days + math.ceil(self.cap / self.penalty_per_day - 1e-9)


@dataclass(frozen=True)
class Assignment:
    name: str
    title: str
    version: str
    target: Target
    root: Path  # the pack folder
    provided: tuple[str, ...]
    public_seed: int
    compile_flags: tuple[str, ...]
    kernels: tuple[Kernel, ...]
    late: LatePolicy | None = None  # [assignment.late]; None: nothing is accepted after the deadline
    # The sandbox's limits for this pack (None: the grader's defaults, see grader.sandbox.Limits).
    memory_limit_mb: int | None = None
    process_limit: int | None = None
    device_memory_limit_mb: int | None = None  # device memory a call may keep after returning (None: 8 GiB)
    submission_time_limit_s: float | None = None  # the whole run stage; None: the sum of the kernels' budgets
    # Folders of the submission that every kernel's build sees whole (the course compiles kernels/
    # as one program, so kernel files include each other); `sources` are the files that must exist.
    source_dirs: tuple[str, ...] = ()
    libraries: tuple[str, ...] = ()  # linked where installed (e.g. cuBLAS); forbidden_symbols still apply
    gold: GoldSource = "reference"  # what gold comes from: the reference run the same way, or numpy_reference.py

    @property
    def spec_file(self) -> Path:
        return self.root / "assignment.toml"

    @property
    def reference_dir(self) -> Path:
        return self.root.parent.parent / "reference" / self.name

    @property
    def template_dir(self) -> Path:
        return self.root.parent.parent / "student_template" / self.name

    @property
    def max_score(self) -> float:
        return sum(k.weight for k in self.kernels)

    def kernel(self, name: str) -> Kernel:
        for k in self.kernels:
            if k.name == name:
                return k
        raise SpecError(f"{self.spec_file}: no kernel named {name!r} (have {', '.join(k.name for k in self.kernels)})")

    def make_inputs(self) -> Callable[..., dict]:
        return _load_function(self.root / "inputs.py", "make_inputs")

    def numpy_reference(self) -> ModuleType:
        return _load_module(self.root / "numpy_reference.py")


# ---------------------------------------------------------------- shape expressions

_OPERATORS: dict[type, Callable[..., Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.floordiv,  # sizes are integers: C / NH means the head size
}
_FUNCTIONS: dict[str, Callable[..., int]] = {"max": max, "min": min}


def evaluate(expression: str, params: dict[str, Any]) -> int:
    """Evaluate a shape expression such as `B * T * max(3 * C, NH * T)` over a case's parameters."""

    def walk(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in params:
                raise KeyError(node.id)
            return int(params[node.id])
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS:
            return _FUNCTIONS[node.func.id](*(walk(a) for a in node.args))
        raise ValueError(f"unsupported element {ast.dump(node)[:40]}")

    return walk(ast.parse(expression, mode="eval"))


def shape_of(buffer: Buffer, params: dict[str, Any]) -> tuple[int, ...]:
    return tuple(evaluate(e, params) for e in buffer.shape)


def allocation_of(buffer: Buffer, params: dict[str, Any]) -> int:
    """Elements to allocate: the shape's size, or the spec's larger `allocate` expression."""
    size = math.prod(shape_of(buffer, params))
    return max(size, evaluate(buffer.allocate, params)) if buffer.allocate else size


# ---------------------------------------------------------------- signatures

_SIGNATURE = re.compile(r"^\s*void\s+([A-Za-z_]\w*)\s*\((.*)\)\s*;?\s*$", re.S)


def parse_signature(text: str, where: str) -> Signature:
    """Parse `void name(const float* a, int n)`; only the flat types kernels need are accepted."""
    match = _SIGNATURE.match(text)
    if not match:
        raise SpecError(f"{where}: expected a signature like 'void name(float* out, int N)', found {text!r}")
    parameters = []
    for raw in (p.strip() for p in match.group(2).split(",") if p.strip()):
        normalised = re.sub(r"\s+", " ", raw.replace("*", " * ")).strip()
        tokens = normalised.split()
        const = tokens[0] == "const"
        if const:
            tokens = tokens[1:]
        pointer = "*" in tokens
        tokens = [t for t in tokens if t != "*"]
        if len(tokens) != 2 or tokens[0] not in SCALAR_DTYPES or not tokens[1].isidentifier():
            raise SpecError(
                f"{where}: parameter {raw!r} must be one of {', '.join(SCALAR_DTYPES)} or a pointer to one, with a name"
            )
        parameters.append(Parameter(name=tokens[1], ctype=tokens[0], pointer=pointer, const=const))
    names = [p.name for p in parameters]
    if len(set(names)) != len(names):
        raise SpecError(f"{where}: parameter names repeat in {text!r}")
    return Signature(function=match.group(1), parameters=tuple(parameters))


# ---------------------------------------------------------------- loading

class _Reader:
    """Reads typed keys from one TOML table, naming file and key in every error."""

    def __init__(self, table: dict[str, Any], where: str) -> None:
        self.table = table
        self.where = where

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        if key not in self.table:
            if default is ...:
                raise SpecError(f"{self.where}: missing key '{key}'")
            return default
        value = self.table[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, float)):
            expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise SpecError(f"{self.where}: key '{key}' must be {expected}, found {value!r}")
        return value

    def choice(self, key: str, choices: tuple[str, ...], default: Any = ...) -> str:
        value = self.get(key, str, default)
        if value not in choices:
            raise SpecError(f"{self.where}: key '{key}' must be one of {', '.join(choices)}, found {value!r}")
        return value

    def strings(self, key: str, default: Any = ...) -> tuple[str, ...]:
        value = self.get(key, list, default)
        if not all(isinstance(v, str) for v in value):
            raise SpecError(f"{self.where}: key '{key}' must be a list of strings, found {value!r}")
        return tuple(value)


def find_pack(name: str, packs_dir: Path | None = None) -> Path:
    packs = packs_dir or PROJECT_ROOT / "assignments"
    pack = packs / name
    if not (pack / "assignment.toml").is_file():
        known = sorted(p.name for p in packs.iterdir() if (p / "assignment.toml").is_file()) if packs.is_dir() else []
        raise SpecError(f"no assignment named {name!r} in {packs} (known: {', '.join(known) or 'none'})")
    return pack


def list_assignments(packs_dir: Path | None = None) -> list[Assignment]:
    packs = packs_dir or PROJECT_ROOT / "assignments"
    if not packs.is_dir():
        raise SpecError(f"no assignments folder at {packs}: set KERNEL_GRADER_HOME to the grader's repository")
    return [load_assignment(p.name, packs) for p in sorted(packs.iterdir()) if (p / "assignment.toml").is_file()]


def load_assignment(name_or_path: str | Path, packs_dir: Path | None = None) -> Assignment:
    """Load `assignments/<name>/assignment.toml` (or a pack folder given as a path)."""
    candidate = Path(name_or_path)
    pack = candidate if (candidate / "assignment.toml").is_file() else find_pack(str(name_or_path), packs_dir)
    spec_file = pack / "assignment.toml"
    try:
        document = tomllib.loads(spec_file.read_text())
    except tomllib.TOMLDecodeError as error:
        raise SpecError(f"{spec_file}: not valid TOML: {error}") from None

    top = _Reader(document.get("assignment", {}), f"{spec_file} [assignment]")
    if "assignment" not in document:
        raise SpecError(f"{spec_file}: missing table [assignment]")
    defaults = {
        "time_limit_s": top.get("time_limit_s", float, 60.0),
        "partial_credit": top.choice("partial_credit", ("fraction", "all_or_nothing"), "fraction"),
        "forbidden_symbols": top.strings("forbidden_symbols", ()),
        "forbidden_penalty": top.get("forbidden_penalty", float, 1.0),
        "sanitizer": top.strings("sanitizer", ()),
        "sanitizer_penalty": top.get("sanitizer_penalty", float, 0.0),
        "scratch_init": top.choice("scratch_init", INITS, "poison"),
        "kernel_time_limit_s": top.get("kernel_time_limit_s", float, None),
    }
    kernels_table = document.get("kernels")
    if not isinstance(kernels_table, list) or not kernels_table:
        raise SpecError(f"{spec_file}: expected at least one [[kernels]] table")
    kernels = tuple(
        _load_kernel(table, f"{spec_file} kernels[{i}]", defaults) for i, table in enumerate(kernels_table)
    )
    names = [k.name for k in kernels]
    if len(set(names)) != len(names):
        raise SpecError(f"{spec_file}: kernel names repeat: {names}")
    assignment = Assignment(
        name=top.get("name", str),
        title=top.get("title", str, top.get("name", str)),
        version=str(top.get("version", (str, int))),
        target=top.choice("target", ("cuda", "cpp")),  # type: ignore[arg-type]
        root=pack.resolve(),
        provided=top.strings("provided", ()),
        public_seed=top.get("public_seed", int),
        compile_flags=top.strings("compile_flags", ()),
        kernels=kernels,
        late=_load_late_policy(document["assignment"].get("late"), f"{spec_file} [assignment.late]"),
        memory_limit_mb=top.get("memory_limit_mb", int, None),
        process_limit=top.get("process_limit", int, None),
        device_memory_limit_mb=top.get("device_memory_limit_mb", int, None),
        submission_time_limit_s=top.get("submission_time_limit_s", float, None),
        source_dirs=tuple(d.strip("/") for d in top.strings("source_dirs", ())),
        libraries=_libraries(top.strings("libraries", ()), f"{spec_file} [assignment] key 'libraries'"),
        gold=top.choice("gold", ("reference", "numpy"), "reference"),  # type: ignore[arg-type]
    )
    if assignment.name != pack.name:
        raise SpecError(f"{spec_file} [assignment]: name {assignment.name!r} must match the folder {pack.name!r}")
    for module in ("inputs.py", "numpy_reference.py"):
        if not (pack / module).is_file():
            raise SpecError(f"{pack}: missing {module} (every pack has input generators and a NumPy reference)")
    return assignment


def _load_late_policy(table: Any, where: str) -> LatePolicy | None:
    if table is None:
        return None
    if not isinstance(table, dict):
        raise SpecError(f"{where}: expected a table with grace_days, penalty_per_day, cap, max_late_days")
    read = _Reader(table, where)
    unknown = set(table) - {"grace_days", "penalty_per_day", "cap", "max_late_days"}
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {sorted(unknown)}; expected grace_days, penalty_per_day, cap, "
                        "max_late_days")
    policy = LatePolicy(grace_days=read.get("grace_days", float, 0.0),
                        penalty_per_day=read.get("penalty_per_day", float, 0.0), cap=read.get("cap", float, 1.0),
                        max_late_days=read.get("max_late_days", float, None))
    if policy.grace_days < 0 or policy.penalty_per_day < 0 or (policy.max_late_days or 0) < 0:
        raise SpecError(f"{where}: grace_days, penalty_per_day and max_late_days must be >= 0, found {policy}")
    if not 0 <= policy.cap <= 1:
        raise SpecError(f"{where}: key 'cap' is a fraction of the score between 0 and 1, found {policy.cap}")
    return policy


def _load_kernel(table: dict[str, Any], where: str, defaults: dict[str, Any]) -> Kernel:
    # Errors name the kernel once its name is known: "assignment.toml kernel 'matmul': ...".
    name = _Reader(table, where).get("name", str)
    where = f"{where.rsplit(' ', 1)[0]} kernel '{name}'"
    read = _Reader(table, where)
    signature = parse_signature(read.get("signature", str), f"{where} key 'signature'")
    buffers_table = read.get("buffers", dict)
    buffers = []
    for parameter in signature.parameters:
        if not parameter.pointer:
            continue
        if parameter.name not in buffers_table:
            raise SpecError(f"{where}: pointer parameter '{parameter.name}' has no entry in 'buffers'")
        b = _Reader(buffers_table[parameter.name], f"{where} buffers.{parameter.name}")
        role = b.choice("role", ("input", "output", "scratch"))
        if role == "output" and parameter.const:
            raise SpecError(f"{where} buffers.{parameter.name}: an output cannot be a const pointer")
        shape = tuple(s.strip() for s in b.get("shape", str).split(","))
        init = b.choice("init", INITS, defaults["scratch_init"] if role == "scratch" else "poison")
        if role != "scratch" and "init" in buffers_table[parameter.name]:
            raise SpecError(f"{where} buffers.{parameter.name}: 'init' is for scratch buffers only; inputs come "
                            f"from inputs.py and outputs are always poisoned (found role '{role}')")
        buffers.append(
            Buffer(
                name=parameter.name,
                role=role,  # type: ignore[arg-type]
                dtype=parameter.dtype,
                shape=shape,
                allocate=b.get("allocate", str, None),
                nullable=b.get("nullable", bool, False),
                mutable=b.get("mutable", bool, False),
                init=init,  # type: ignore[arg-type]
            )
        )
    unknown = set(buffers_table) - {b.name for b in buffers}
    if unknown:
        raise SpecError(f"{where}: 'buffers' names {sorted(unknown)}, which are not pointer parameters of the signature")
    if not any(b.role == "output" for b in buffers):
        raise SpecError(f"{where}: no buffer has role 'output', so nothing would be graded")

    tolerance = _tolerance(read.get("tolerance", dict), f"{where} tolerance")

    scalars = [p.name for p in signature.parameters if not p.pointer]
    cases = []
    for i, raw in enumerate(read.get("cases", list)):
        c = _Reader(raw, f"{where} cases[{i}]")
        case_name = c.get("name", str)
        params = {k: v for k, v in raw.items() if k not in ("name", "public", "null", "tolerance")}
        override = c.get("tolerance", dict, None)
        case = Case(name=case_name, public=c.get("public", bool, False), params=params, null=c.strings("null", ()),
                    tolerance=_tolerance(override, f"{where} case '{case_name}' tolerance") if override else None)
        _check_case(case, scalars, buffers, f"{where} case '{case_name}'")
        cases.append(case)
    if len(cases) == 0:
        raise SpecError(f"{where}: no cases")
    if len({c.name for c in cases}) != len(cases):
        raise SpecError(f"{where}: case names repeat")

    weight = read.get("weight", float)
    if weight < 0:
        raise SpecError(f"{where}: weight must be >= 0, found {weight}")
    return Kernel(
        name=name,
        weight=weight,
        header=read.get("header", str),
        sources=read.strings("sources"),
        signature=signature,
        buffers=tuple(buffers),
        tolerance=tolerance,
        cases=tuple(cases),
        time_limit_s=read.get("time_limit_s", float, defaults["time_limit_s"]),
        partial_credit=read.choice("partial_credit", ("fraction", "all_or_nothing"), defaults["partial_credit"]),  # type: ignore[arg-type]
        forbidden_symbols=read.strings("forbidden_symbols", defaults["forbidden_symbols"]),
        forbidden_penalty=read.get("forbidden_penalty", float, defaults["forbidden_penalty"]),
        sanitizer=_sanitizer_tools(read.strings("sanitizer", defaults["sanitizer"]), f"{where} key 'sanitizer'"),
        sanitizer_penalty=read.get("sanitizer_penalty", float, defaults["sanitizer_penalty"]),
        time_budget_s=read.get("time_budget_s", float, defaults["kernel_time_limit_s"]),
    )


def _tolerance(table: dict[str, Any], where: str) -> Tolerance:
    read = _Reader(table, where)
    unknown = set(table) - {"atol", "rtol"}
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {sorted(unknown)}; expected atol and rtol")
    tolerance = Tolerance(atol=read.get("atol", float), rtol=read.get("rtol", float))
    if tolerance.atol < 0 or tolerance.rtol < 0:
        raise SpecError(f"{where}: atol and rtol must be >= 0, found {tolerance}")
    return tolerance


def _libraries(names: tuple[str, ...], where: str) -> tuple[str, ...]:
    unknown = [n for n in names if n not in LIBRARIES]
    if unknown:
        raise SpecError(f"{where}: unknown librar(ies) {unknown}; expected some of {', '.join(LIBRARIES)}")
    return names


SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")


def _sanitizer_tools(tools: tuple[str, ...], where: str) -> tuple[str, ...]:
    unknown = [t for t in tools if t not in SANITIZER_TOOLS]
    if unknown:
        raise SpecError(f"{where}: unknown compute-sanitizer tool(s) {unknown}; expected some of {', '.join(SANITIZER_TOOLS)}")
    return tools


def _check_case(case: Case, scalars: list[str], buffers: list[Buffer], where: str) -> None:
    missing = [s for s in scalars if s not in case.params]
    if missing:
        raise SpecError(f"{where}: missing value for scalar parameter(s) {', '.join(missing)}")
    for name in case.null:
        buffer = next((b for b in buffers if b.name == name), None)
        if buffer is None or not buffer.nullable:
            raise SpecError(f"{where}: 'null' names {name!r}, which is not a buffer marked nullable = true")
    for buffer in buffers:
        for expression in (*buffer.shape, *([buffer.allocate] if buffer.allocate else [])):
            try:
                size = evaluate(expression, case.params)
            except KeyError as error:
                raise SpecError(f"{where}: shape of '{buffer.name}' uses {error.args[0]!r}, which the case does not set") from None
            except (ValueError, SyntaxError, ZeroDivisionError) as error:
                raise SpecError(f"{where}: shape expression {expression!r} of '{buffer.name}' is invalid: {error}") from None
            if size <= 0:
                raise SpecError(f"{where}: shape of '{buffer.name}' evaluates to {size}; sizes must be positive")


def _load_module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"kernel_grader_pack_{path.parent.name}_{path.stem}".replace("-", "_"), path)
    if spec is None or spec.loader is None:
        raise SpecError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # a broken pack module: name the file and what it raised
        raise SpecError(f"{path}: importing it raised {type(error).__name__}: {error}") from error
    return module


def _load_function(path: Path, name: str) -> Callable[..., Any]:
    module = _load_module(path)
    function = getattr(module, name, None)
    if not callable(function):
        raise SpecError(f"{path}: expected a function named '{name}'")
    return function
