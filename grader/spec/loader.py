"""Read `assignments/<name>/assignment.toml` into the model; every error names the file, the key and what was expected."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from grader.checks import CHECK_NAMES, CheckSpec, check_named
from grader.errors import SpecError
from grader.spec.model import (EVIDENCE, INITS, LIBRARIES, Assignment, Buffer, Case, Kernel, LatePolicy, Signature,
                               Tolerance, Variant)
from grader.spec.assignments import find_assignment
from grader.spec.shapes import evaluate
from grader.spec.signature import parse_signature
from grader.targets import TARGET_NAMES

class Reader:
    """Reads typed keys from one TOML table, naming file and key in every error (a check's plug-in reads its
    table with it too)."""

    def __init__(self, table: dict[str, Any], where: str, origins: dict[str, str] | None = None) -> None:
        self.table = table
        self.where = where
        self.origins = origins or {}  # an inherited key: the table of the assignment that gave it

    def at(self, key: str) -> str:
        """Where `key` was written: this table, or the assignment's it was inherited from."""
        return self.origins.get(key, self.where)

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
            raise SpecError(f"{self.at(key)}: key '{key}' must be {expected}, found {value!r}")
        return value

    def choice(self, key: str, choices: tuple[str, ...], default: Any = ...) -> str:
        value = self.get(key, str, default)
        if value not in choices:
            raise SpecError(f"{self.at(key)}: key '{key}' must be one of {', '.join(choices)}, found {value!r}")
        return value

    def strings(self, key: str, default: Any = ...) -> tuple[str, ...]:
        value = self.get(key, list, default)
        if not all(isinstance(v, str) for v in value):
            raise SpecError(f"{self.at(key)}: key '{key}' must be a list of strings, found {value!r}")
        return tuple(value)



def load_assignment(name_or_path: str | Path, assignments_dir: Path | None = None) -> Assignment:
    """Load `assignments/<name>/assignment.toml` (or an assignment's folder given as a path).

    assignments_dir: where to look the name up (default: the repository's assignments/, see
    `grader.spec.assignments`). An assignment with `based_on` inherits the other one's [assignment]
    keys, kernels, variants, checks' tables and modules (inputs.py, numpy_reference.py), each given here replacing
    the inherited one.
    """
    candidate = Path(name_or_path)
    folder = candidate if (candidate / "assignment.toml").is_file() else find_assignment(str(name_or_path),
                                                                                         assignments_dir)
    spec_file = folder / "assignment.toml"
    document = _document(folder.resolve(), ())
    top = Reader(document.assignment, f"{spec_file} [assignment]", document.origins)
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
    if not document.kernels:
        raise SpecError(f"{spec_file}: expected at least one [[kernels]] table")
    kernels = tuple(_load_kernel(table, where, defaults) for table, where in document.kernels)
    names = [k.name for k in kernels]
    if len(set(names)) != len(names):
        raise SpecError(f"{document.kernels[0][1].rsplit(' ', 1)[0]}: kernel names repeat: {names}")
    source_dirs = (tuple(d.strip("/") for d in top.strings("source_dirs")) if "source_dirs" in top.table
                   else _source_folders(kernels))
    variants = _load_variants(document.variants, source_dirs, kernels)
    base_weight = top.get("base_weight", float, None)
    if base_weight is not None and base_weight < 0:
        raise SpecError(f"{top.at('base_weight')}: key 'base_weight' must be >= 0, found {base_weight}")
    checks = tuple(check_named(name).load(table, where, kernels) for name, (table, where) in document.checks.items())
    expanded = _expanded(kernels, variants, base_weight, checks)
    assignment = Assignment(
        name=top.get("name", str),
        title=top.get("title", str, top.get("name", str)),
        version=str(top.get("version", (str, int))),
        target=top.choice("target", TARGET_NAMES),
        root=folder.resolve(),
        provided=top.strings("provided", ()),
        public_seed=top.get("public_seed", int),
        compile_flags=top.strings("compile_flags", ()),
        kernels=expanded,
        late=_load_late_policy(document.assignment.get("late"),
                               top.at("late").replace("[assignment]", "[assignment.late]")),
        memory_limit_mb=top.get("memory_limit_mb", int, None),
        process_limit=top.get("process_limit", int, None),
        device_memory_limit_mb=top.get("device_memory_limit_mb", int, None),
        submission_time_limit_s=top.get("submission_time_limit_s", float, None),
        source_dirs=source_dirs,
        libraries=_libraries(top.strings("libraries", ()), f"{top.at('libraries')} key 'libraries'"),
        gold=top.choice("gold", ("reference", "numpy"), "reference"),  # type: ignore[arg-type]
        variants=variants,
        based_on=document.based_on,
        module_root=document.module_root,
        checks=checks,
        check_kernels=_check_kernels(checks, kernels, variants, base_weight),
    )
    if assignment.name != folder.name:
        raise SpecError(f"{spec_file} [assignment]: name {assignment.name!r} must match the folder {folder.name!r}")
    return assignment


@dataclass(frozen=True)
class _Document:
    """An assignment.toml with what it inherits (`based_on`) resolved; each table with where it was written."""

    assignment: dict[str, Any]
    origins: dict[str, str]  # [assignment] key -> "<file> [assignment]" of the assignment that gave it
    kernels: list[tuple[dict[str, Any], str]]  # (table, "<file> kernels[i]")
    variants: list[tuple[Any, str]]  # (table, "<file> variants[i]")
    module_root: Path  # where inputs.py and numpy_reference.py are
    based_on: str | None
    # Each check's table (grader.checks), by the check's name: (table, where it was written), own or inherited.
    checks: dict[str, tuple[Any, str]] = field(default_factory=dict)


def _document(folder: Path, inheriting: tuple[Path, ...]) -> _Document:
    spec_file = folder / "assignment.toml"
    try:
        document = tomllib.loads(spec_file.read_text())
    except tomllib.TOMLDecodeError as error:
        raise SpecError(f"{spec_file}: not valid TOML: {error}") from None
    own = document.get("assignment")
    if not isinstance(own, dict):
        raise SpecError(f"{spec_file}: missing table [assignment]")
    where = f"{spec_file} [assignment]"
    checks = _check_tables(document, spec_file)
    kernels = _tables(document, "kernels", spec_file)
    variants = _tables(document, "variants", spec_file)
    modules = [m for m in ASSIGNMENT_MODULES if (folder / m).is_file()]
    based_on = own.get("based_on")
    if based_on is None:
        if len(modules) < len(ASSIGNMENT_MODULES):
            raise SpecError(f"{folder}: missing {', '.join(m for m in ASSIGNMENT_MODULES if m not in modules)} "
                            "(every assignment has input generators and a NumPy reference)")
        return _Document(dict(own), {key: where for key in own}, kernels, variants, folder, None, checks)
    if not isinstance(based_on, str):
        raise SpecError(f"{where}: key 'based_on' must be the name of another assignment, found {based_on!r}")
    try:
        parent_folder = find_assignment(based_on, folder.parent).resolve()
    except SpecError as error:
        raise SpecError(f"{where}: key 'based_on': {error}") from None
    if parent_folder in (folder, *inheriting):
        raise SpecError(f"{where}: key 'based_on': {based_on!r} is based on this assignment in turn (a cycle)")
    parent = _document(parent_folder, (*inheriting, folder))
    if modules and len(modules) < len(ASSIGNMENT_MODULES):
        raise SpecError(f"{folder}: has {modules[0]} but not "
                        f"{', '.join(m for m in ASSIGNMENT_MODULES if m not in modules)}; "
                        f"give both, or neither to use {based_on}'s")
    inherited = {key: value for key, value in parent.assignment.items() if key not in NOT_INHERITED}
    return _Document({**inherited, **own}, {**{key: parent.origins[key] for key in inherited},
                                            **{key: where for key in own}},
                     kernels or parent.kernels, variants or parent.variants,
                     folder if modules else parent.module_root, based_on, {**parent.checks, **checks})


ASSIGNMENT_MODULES = ("inputs.py", "numpy_reference.py")
NOT_INHERITED = ("name", "based_on")
# The spec's own tables ([timing] is grader.timing.spec's); every other table is a check's (grader.checks).
TABLES = ("assignment", "kernels", "variants", "timing")


def _check_tables(document: dict[str, Any], spec_file: Path) -> dict[str, tuple[Any, str]]:
    """The checks' tables, by the check's name: every table beside the spec's own must name a check."""
    checks = {}
    for key, table in document.items():
        if key in TABLES:
            continue
        if key not in CHECK_NAMES:
            raise SpecError(f"{spec_file}: unknown table [{key}]; expected [assignment], [[kernels]], [[variants]], "
                            f"[timing] or a check's table ({', '.join(f'[{name}]' for name in CHECK_NAMES)})")
        checks[key] = (table, f"{spec_file} [{key}]")
    return checks


def _tables(document: dict[str, Any], key: str, spec_file: Path) -> list[tuple[Any, str]]:
    tables = document.get(key, [])
    if not isinstance(tables, list):
        raise SpecError(f"{spec_file}: '{key}' must be an array of tables ([[{key}]]), found {tables!r}")
    return [(table, f"{spec_file} {key}[{i}]") for i, table in enumerate(tables)]


VARIANT_KEYS = ("name", "title", "folder", "onto", "weight", "partial_credit", "must_change", "forbidden_symbols",
                "required_symbols", "evidence", "evidence_penalty", "tolerances")


def _source_folders(kernels: tuple[Kernel, ...]) -> tuple[str, ...]:
    """The default `source_dirs`: each top folder that holds a kernel's sources (`src/` for src/flash_attention.cpp).

    A student's own headers and files sit beside the kernel's, and the course compiles them as one
    program. Files at the repository's root give none: an assignment whose sources lie there names its folders.
    """
    return tuple(dict.fromkeys(Path(s).parts[0] for k in kernels for s in k.sources if len(Path(s).parts) > 1))


def _load_variants(tables: list[tuple[Any, str]], source_dirs: tuple[str, ...],
                   kernels: tuple[Kernel, ...]) -> tuple[Variant, ...]:
    variants: list[Variant] = []
    for table, where in tables:
        variant = _load_variant(table, where, source_dirs, kernels)
        named = f"{where.rsplit(' ', 1)[0]} variant '{variant.name}' key 'name'"
        if any(v.name == variant.name for v in variants):
            raise SpecError(f"{named}: another variant has this name; each variant needs its own")
        if any(k.name == variant.name for k in kernels):
            raise SpecError(f"{named}: a kernel has this name; a variant's name must differ from every kernel's")
        variants.append(variant)
    return tuple(variants)


def _load_variant(table: Any, where: str, source_dirs: tuple[str, ...], kernels: tuple[Kernel, ...]) -> Variant:
    if not isinstance(table, dict):
        raise SpecError(f"{where}: expected a table with name, folder, weight, must_change, ...")
    name = Reader(table, where).get("name", str)
    where = f"{where.rsplit(' ', 1)[0]} variant '{name}'"
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name):
        raise SpecError(f"{where}: key 'name' must be a plain name (letters, digits, '_', '.', '-'), found {name!r}")
    unknown = set(table) - set(VARIANT_KEYS)
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {sorted(unknown)}; expected some of {', '.join(VARIANT_KEYS)}")
    read = Reader(table, where)
    folder = _folder(read, "folder", ...)
    if "onto" not in table and not source_dirs:
        raise SpecError(f"{where}: key 'onto' is needed: the assignment has no source_dirs for '{folder}' "
                        "to be laid over")
    onto = _folder(read, "onto", source_dirs[0] if source_dirs else ...)
    if folder == onto or Path(onto) in Path(folder).parents or Path(folder) in Path(onto).parents:
        raise SpecError(f"{where}: key 'folder' ({folder!r}) must be a folder beside '{onto}', not it or inside it")
    weight = read.get("weight", float)
    if weight < 0:
        raise SpecError(f"{where}: key 'weight' must be >= 0, found {weight}")
    must_change = read.strings("must_change", ())
    for path in must_change:
        parts = Path(path).parts
        if Path(path).is_absolute() or ".." in parts or parts[:len(Path(onto).parts)] != Path(onto).parts \
                or len(parts) <= len(Path(onto).parts):
            raise SpecError(f"{where}: key 'must_change' names {path!r}, which is not a file under '{onto}/' "
                            "(the folder the variant is laid over)")
    evidence = read.strings("evidence", ())
    if unknown_evidence := [e for e in evidence if e not in EVIDENCE]:
        raise SpecError(f"{where}: key 'evidence': unknown evidence {unknown_evidence}; expected some of "
                        f"{', '.join(EVIDENCE)}")
    penalty = read.get("evidence_penalty", float, 0.0)
    if not 0 <= penalty <= 1:
        raise SpecError(f"{where}: key 'evidence_penalty' is a share of the variant's weight between 0 and 1, "
                        f"found {penalty}")
    tolerances = {}
    names = [k.name for k in kernels]
    for kernel, tolerance in read.get("tolerances", dict, {}).items():
        if kernel not in names:
            raise SpecError(f"{where}: key 'tolerances' names kernel {kernel!r}, which the assignment does not have "
                            f"(have {', '.join(names)})")
        if not isinstance(tolerance, dict):
            raise SpecError(f"{where} tolerances.{kernel}: expected a table with atol and rtol, found {tolerance!r}")
        tolerances[kernel] = load_tolerance(tolerance, f"{where} tolerances.{kernel}")
    return Variant(
        name=name, title=read.get("title", str, name), folder=folder, onto=onto, weight=weight,
        partial_credit=read.choice("partial_credit", ("fraction", "all_or_nothing"),  # type: ignore[arg-type]
                                   "all_or_nothing"),
        must_change=must_change,
        forbidden_symbols=read.strings("forbidden_symbols") if "forbidden_symbols" in table else None,
        tolerances=tolerances, required_symbols=read.strings("required_symbols", ()),
        evidence=evidence,  # type: ignore[arg-type]
        evidence_penalty=penalty,
    )


def _folder(read: Reader, key: str, default: Any) -> str:
    """A folder of the submission: relative, without '..' (a variant folder must not reach outside it)."""
    value = read.get(key, str, default)
    path = Path(value.rstrip("/"))
    if not value.strip("/") or path.is_absolute() or ".." in path.parts or path.parts[0] == ".":
        raise SpecError(f"{read.where}: key '{key}' must be a folder inside the submission (a relative path "
                        f"without '..'), found {value!r}")
    return path.as_posix()


def _share(kernels: tuple[Kernel, ...], checks: tuple[CheckSpec, ...]) -> Callable[[float], float]:
    """A weight's share of the base weights, the checks' among them (none at all: equal shares)."""
    total = sum(k.weight for k in kernels) + sum(c.weight for c in checks)
    return lambda weight: weight / total if total else 1 / len(kernels)


def _expanded(kernels: tuple[Kernel, ...], variants: tuple[Variant, ...], base_weight: float | None,
              checks: tuple[CheckSpec, ...] = ()) -> tuple[Kernel, ...]:
    """The base kernels, then each variant's copy of every one of them ("req_0/matmul"), weighted as the spec says.

    Within a variant (and for `base_weight`) a kernel's share of the weight is its base weight's share.
    """
    shares = _share(kernels, checks)

    def share(kernel: Kernel) -> float:
        return shares(kernel.weight)

    base = kernels if base_weight is None else tuple(replace(k, weight=round(base_weight * share(k), 9))
                                                     for k in kernels)
    return base + tuple(
        replace(k, name=f"{v.name}/{k.name}", variant=v.name, base=k.name, weight=round(v.weight * share(k), 9),
                forbidden_symbols=k.forbidden_symbols if v.forbidden_symbols is None else v.forbidden_symbols,
                tolerance=v.tolerances.get(k.name, k.tolerance))
        for v in variants for k in kernels)


def _check_kernels(checks: tuple[CheckSpec, ...], kernels: tuple[Kernel, ...], variants: tuple[Variant, ...],
                   base_weight: float | None) -> tuple[Kernel, ...]:
    """Each check as kernels of the result: its own (named after it), then each variant's ("req_0/" and its name),
    each with its cases.

    Its buffers are the files the runner collects from its calls' folders (`CheckSpec.outputs`).
    """
    share = _share(kernels, checks)
    result: list[Kernel] = []
    for spec in checks:
        check = Kernel(
            name=spec.name, weight=spec.weight if base_weight is None else round(base_weight * share(spec.weight), 9),
            header="", sources=(), signature=Signature(spec.name, ()),
            buffers=tuple(Buffer(name, "output", "float32", ("1",)) for name in spec.outputs),
            tolerance=Tolerance(0.0, 0.0), cases=tuple(Case(name, True, {}) for name in spec.cases),
            time_limit_s=spec.time_limit_s, partial_credit="fraction", forbidden_symbols=(), forbidden_penalty=0.0,
            # One budget for all its calls: a kernel that loops costs the check what it costs its own cases.
            time_budget_s=spec.time_limit_s)
        result += [check] + [replace(check, name=f"{v.name}/{spec.name}", variant=v.name, base=spec.name,
                                     weight=round(v.weight * share(spec.weight), 9)) for v in variants]
    return tuple(result)


def _load_late_policy(table: Any, where: str) -> LatePolicy | None:
    if table is None:
        return None
    if not isinstance(table, dict):
        raise SpecError(f"{where}: expected a table with grace_days, penalty_per_day, cap, max_late_days")
    read = Reader(table, where)
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
    name = Reader(table, where).get("name", str)
    where = f"{where.rsplit(' ', 1)[0]} kernel '{name}'"
    read = Reader(table, where)
    signature = parse_signature(read.get("signature", str), f"{where} key 'signature'")
    buffers_table = read.get("buffers", dict)
    buffers = []
    for parameter in signature.parameters:
        if not parameter.pointer:
            continue
        if parameter.name not in buffers_table:
            raise SpecError(f"{where}: pointer parameter '{parameter.name}' has no entry in 'buffers'")
        b = Reader(buffers_table[parameter.name], f"{where} buffers.{parameter.name}")
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

    tolerance = load_tolerance(read.get("tolerance", dict), f"{where} tolerance")

    scalars = [p.name for p in signature.parameters if not p.pointer]
    cases = []
    for i, raw in enumerate(read.get("cases", list)):
        c = Reader(raw, f"{where} cases[{i}]")
        case_name = c.get("name", str)
        params = {k: v for k, v in raw.items() if k not in ("name", "public", "null", "tolerance")}
        override = c.get("tolerance", dict, None)
        case = Case(name=case_name, public=c.get("public", bool, False), params=params, null=c.strings("null", ()),
                    tolerance=load_tolerance(override, f"{where} case '{case_name}' tolerance") if override else None)
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


def load_tolerance(table: dict[str, Any], where: str) -> Tolerance:
    read = Reader(table, where)
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
