"""A [[kernels]] table into a `Kernel`: its signature and buffers, its cases, its tolerances and its limits."""

from __future__ import annotations

from typing import Any

from grader.errors import SpecError
from grader.assignment.document import Reader, table_reader
from grader.assignment.model import EVIDENCE, INITS, Buffer, Case, Kernel, MemoryBound, Tolerance
from grader.assignment.shapes import evaluate
from grader.assignment.signature import parse_signature

SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")


def load_kernel(table: dict[str, Any], where: str, defaults: dict[str, Any]) -> Kernel:
    """One kernel; `defaults`: the [assignment] keys a kernel may set for itself (time_limit_s, sanitizer, ...)."""
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
                report=b.get("report", bool, False),
                judged_against=b.get("judged_against", str, None),
                element=b.get("element", str, None),
            )
        )
        if buffers[-1].report and role != "output":
            raise SpecError(f"{where} buffers.{parameter.name}: 'report' keeps an output's values in the result; "
                            f"this buffer's role is '{role}'")
    unknown = set(buffers_table) - {b.name for b in buffers}
    if unknown:
        raise SpecError(f"{where}: 'buffers' names {sorted(unknown)}, which are not pointer parameters of the signature")
    if not any(b.role == "output" for b in buffers):
        raise SpecError(f"{where}: no buffer has role 'output', so nothing would be graded")
    _check_judged_against(buffers, where)

    tolerance = load_tolerance(read.get("tolerance", dict), f"{where} tolerance")

    scalars = [p.name for p in signature.parameters if not p.pointer]
    cases = _load_cases(read.get("cases", list), "cases", scalars, buffers, where)
    if len(cases) == 0:
        raise SpecError(f"{where}: no cases")
    # Cases for `grader time --sweep` alone (a size or density series): never graded, so they may be slow.
    sweep_cases = _load_cases(read.get("sweep_cases", list, []), "sweep_cases", scalars, buffers, where)
    if len({c.name for c in cases + sweep_cases}) != len(cases) + len(sweep_cases):
        raise SpecError(f"{where}: case names repeat (in cases and sweep_cases together)")

    weight = read.get("weight", float)
    if weight < 0:
        raise SpecError(f"{where}: weight must be >= 0, found {weight}")
    evidence = read.among("evidence", EVIDENCE, "evidence")
    evidence_penalty = read.share("evidence_penalty", 0.0, of="the kernel's weight")
    functions = read.strings("functions", ())
    if functions and signature.function not in functions:
        raise SpecError(f"{where}: key 'functions' must list the signature's name {signature.function!r} among the "
                        f"names it accepts, found {list(functions)}")
    if bad := [f for f in functions if not f.isidentifier()]:
        raise SpecError(f"{where}: key 'functions': {bad} are not C identifiers")
    entries = load_source_entries(read.get("sources", list), f"{where} key 'sources'")
    return Kernel(
        name=name,
        weight=weight,
        header=read.get("header", str),
        sources=tuple(entry[0] for entry in entries),
        source_entries=entries,
        signature=signature,
        buffers=tuple(buffers),
        tolerance=tolerance,
        cases=tuple(cases),
        sweep_cases=tuple(sweep_cases),
        time_limit_s=read.get("time_limit_s", float, defaults["time_limit_s"]),
        partial_credit=read.choice("partial_credit", ("fraction", "all_or_nothing"), defaults["partial_credit"]),  # type: ignore[arg-type]
        forbidden_symbols=read.strings("forbidden_symbols", defaults["forbidden_symbols"]),
        forbidden_penalty=read.get("forbidden_penalty", float, defaults["forbidden_penalty"]),
        sanitizer=_sanitizer_tools(read.strings("sanitizer", defaults["sanitizer"]), f"{where} key 'sanitizer'"),
        sanitizer_penalty=read.get("sanitizer_penalty", float, defaults["sanitizer_penalty"]),
        time_budget_s=read.get("time_budget_s", float, defaults["kernel_time_limit_s"]),
        provided=tuple(defaults.get("provided", ())),
        evidence=evidence,  # type: ignore[arg-type]
        required_symbols=read.strings("required_symbols", ()),
        evidence_penalty=evidence_penalty,
        variant_only=read.get("variant_only", bool, False),
        functions=tuple(dict.fromkeys(functions)),
        hints=read.strings("hints", ()),
        memory_bound=load_memory_bound(table.get("memory_bound"), cases, f"{where} key 'memory_bound'"),
    )


GLOB_CHARACTERS = "*?["  # a `sources` path holding one of these is a glob (`src/*.cpp`), matched in the checkout


def is_glob(path: str) -> bool:
    return any(c in path for c in GLOB_CHARACTERS)


def load_source_entries(entries: list[Any], where: str) -> tuple[tuple[str, ...], ...]:
    """A kernel's `sources`: each entry a path, a glob (`"src/*.cpp"`: every file it matches, at least one), or a
    list of alternatives (`["simpleautodiff/simpleautodiff.py", "simpleautodiff/core.py"]`: the first the checkout
    has), each a path or a glob; relative to the checkout's root, none above it."""
    loaded = []
    for i, entry in enumerate(entries):
        alternatives = entry if isinstance(entry, list) else [entry]
        if not alternatives or not all(isinstance(a, str) and a.strip() for a in alternatives):
            raise SpecError(f"{where}: entry {i} must be a path, a glob or a non-empty list of alternative paths "
                            f"or globs (strings), found {entry!r}")
        for path in alternatives:
            parts = path.split("/")
            if path.startswith("/") or ".." in parts or "" in parts or "." in parts:
                raise SpecError(f"{where}: entry {i}: {path!r} must be a plain path relative to the submission's "
                                "root (no leading /, no empty, '.' or '..' parts)")
        if len(set(alternatives)) != len(alternatives):
            raise SpecError(f"{where}: entry {i} names an alternative twice: {alternatives!r}")
        loaded.append(tuple(alternatives))
    return tuple(loaded)




MEMORY_BOUND_KEYS = ("case", "max_extra_mb", "small", "large", "max_growth", "penalty", "meaning", "sizes")


def load_memory_bound(table: Any, cases: list[Case], where: str) -> MemoryBound | None:
    """A kernel's `memory_bound` (absent: None): `case` with `max_extra_mb` (MiB), and/or `small`, `large` with
    `max_growth`; each a case of the kernel's graded `cases`, so that `grade` (and, for a public case, `check`)
    measures it."""
    if table is None:
        return None
    read = table_reader(table, where, MEMORY_BOUND_KEYS,
                        "a table with case and max_extra_mb, and/or small, large and max_growth")
    names = [c.name for c in cases]
    for key in ("case", "small", "large"):
        if key in table and read.get(key, str) not in names:
            raise SpecError(f"{where}: key '{key}' names case {table[key]!r}, which is not among the kernel's cases "
                            f"({', '.join(names)}); a sweep case is never graded")
    peak, growth = ("case" in table, "max_extra_mb" in table), [k in table for k in ("small", "large", "max_growth")]
    if any(peak) and not all(peak):
        raise SpecError(f"{where}: 'case' and 'max_extra_mb' go together (the peak extra memory allowed at that case)")
    if any(growth) and not all(growth):
        raise SpecError(f"{where}: 'small', 'large' and 'max_growth' go together (how many times the peak may grow "
                        "from the small case to the large one)")
    if not any(peak) and not any(growth):
        raise SpecError(f"{where}: bounds nothing; expected case and max_extra_mb, and/or small, large and max_growth")
    max_extra_mb = read.get("max_extra_mb", float, None)
    if max_extra_mb is not None and max_extra_mb <= 0:
        raise SpecError(f"{where}: key 'max_extra_mb' must be > 0 (MiB), found {max_extra_mb}")
    max_growth = read.at_least("max_growth", 1, None, unit=" (times the small case's peak)")
    if all(growth) and table["small"] == table["large"]:
        raise SpecError(f"{where}: 'small' and 'large' name the same case {table['small']!r}")
    penalty = read.share("penalty", 1.0, of="the kernel's weight")
    sizes = read.strings("sizes", ())
    measured = [c for c in cases if c.name in (table.get("case"), table.get("small"), table.get("large"))]
    if missing := [s for s in sizes if any(s not in c.params for c in measured)]:
        raise SpecError(f"{where}: key 'sizes' names {missing}, which the bound's cases do not all set")
    return MemoryBound(case=read.get("case", str, None),
                       max_extra_bytes=None if max_extra_mb is None else int(max_extra_mb * (1 << 20)),
                       small=read.get("small", str, None), large=read.get("large", str, None), max_growth=max_growth,
                       penalty=penalty, meaning=read.get("meaning", str, ""), sizes=sizes)


def _check_judged_against(buffers: list[Buffer], where: str) -> None:
    """An output judged against another: that one is an output of the same kernel, of its dtype and shape, and a
    truth only (judged against nothing itself)."""
    by_name = {b.name: b for b in buffers}
    for buffer in (b for b in buffers if b.judged_against is not None):
        at = f"{where} buffers.{buffer.name} key 'judged_against'"
        truth = by_name.get(buffer.judged_against)  # type: ignore[arg-type]
        if buffer.role != "output" or truth is None or truth.role != "output" or truth is buffer:
            raise SpecError(f"{at}: an output is judged against another output of the kernel; found "
                            f"{buffer.judged_against!r} for a buffer whose role is '{buffer.role}' (outputs: "
                            f"{', '.join(b.name for b in buffers if b.role == 'output' and b is not buffer)})")
        if truth.dtype != buffer.dtype or truth.shape != buffer.shape:
            raise SpecError(f"{at}: '{truth.name}' must have the dtype and shape of '{buffer.name}' "
                            f"({buffer.dtype}, {', '.join(buffer.shape)}); found {truth.dtype}, "
                            f"{', '.join(truth.shape)}")
        if truth.judged_against is not None:
            raise SpecError(f"{at}: '{truth.name}' is the truth '{buffer.name}' is judged against, so it cannot "
                            f"be judged against '{truth.judged_against}' itself")
    if not any(b.role == "output" and not _is_truth(b, buffers) for b in buffers):
        raise SpecError(f"{where}: every output is another's truth, so nothing would be graded")


def _is_truth(buffer: Buffer, buffers: list[Buffer]) -> bool:
    return any(b.judged_against == buffer.name for b in buffers)


def _load_cases(raw_cases: list[Any], key: str, scalars: list[str], buffers: list[Buffer], where: str) -> list[Case]:
    cases = []
    for i, raw in enumerate(raw_cases):
        c = Reader(raw, f"{where} {key}[{i}]")
        case_name = c.get("name", str)
        params = {k: v for k, v in raw.items() if k not in ("name", "public", "null", "tolerance")}
        override = c.get("tolerance", dict, None)
        case = Case(name=case_name, public=c.get("public", bool, False), params=params, null=c.strings("null", ()),
                    tolerance=load_tolerance(override, f"{where} case '{case_name}' tolerance") if override else None)
        _check_case(case, scalars, buffers, f"{where} case '{case_name}'")
        cases.append(case)
    return cases


def load_tolerance(table: dict[str, Any], where: str) -> Tolerance:
    """A tolerance table (a kernel's, a case's, a variant's or a check's): atol and rtol, both >= 0."""
    read = Reader(table, where)
    unknown = set(table) - {"atol", "rtol"}
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {sorted(unknown)}; expected atol and rtol")
    tolerance = Tolerance(atol=read.get("atol", float), rtol=read.get("rtol", float))
    if tolerance.atol < 0 or tolerance.rtol < 0:
        raise SpecError(f"{where}: atol and rtol must be >= 0, found {tolerance}")
    return tolerance


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
