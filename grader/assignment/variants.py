"""The [[variants]] tables into `Variant`s (folders laid over the base), and the kernels of the result: each
kernel and each check copied into every variant ("req_0/matmul"), weighted as the spec says."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from grader.checks import CheckSpec
from grader.errors import SpecError
from grader.assignment.document import Reader, table_reader
from grader.assignment.kernels import load_tolerance
from grader.assignment.model import (EVIDENCE, NCU_METRICS, TENSOR_CORE_PRECISIONS, Buffer, Case, CreditGroup, Kernel,
                               Signature, Tolerance, Untouched, Variant)

VARIANT_KEYS = ("name", "title", "folder", "onto", "weight", "partial_credit", "must_change", "forbidden_symbols",
                "required_symbols", "evidence", "evidence_penalty", "tensor_core_precisions", "precision_penalty",
                "tolerances", "kernels", "defines", "evidence_in", "required_files", "source_patterns",
                "ncu_metrics", "untouched")
ADDITIONAL_KEYS = ("variants", "minimum", "extra_credit_cap", "exclusive", "title")
UNTOUCHED_KEYS = ("buffer", "at_most_written", "penalty", "meaning")
VARIANT_TABLE = "a table with name, folder, weight, must_change, ..."


def load_variants(tables: list[tuple[Any, str]], source_dirs: tuple[str, ...],
                  kernels: tuple[Kernel, ...], checks: tuple[str, ...] = ()) -> tuple[Variant, ...]:
    """Every [[variants]] table; `source_dirs`: the assignment's, the first one what a variant is laid over; `checks`:
    the names of the assignment's checks (a variant may be graded on one alone)."""
    variants: list[Variant] = []
    for table, where in tables:
        variant = _load_variant(table, where, source_dirs, kernels, checks)
        named = f"{where.rsplit(' ', 1)[0]} variant '{variant.name}' key 'name'"
        if any(v.name == variant.name for v in variants):
            raise SpecError(f"{named}: another variant has this name; each variant needs its own")
        if any(k.name == variant.name for k in kernels):
            raise SpecError(f"{named}: a kernel has this name; a variant's name must differ from every kernel's")
        variants.append(variant)
    return tuple(variants)


def _load_variant(table: Any, where: str, source_dirs: tuple[str, ...], kernels: tuple[Kernel, ...],
                  checks: tuple[str, ...]) -> Variant:
    if not isinstance(table, dict):
        raise SpecError(f"{where}: expected {VARIANT_TABLE}")
    name = Reader(table, where).get("name", str)
    where = f"{where.rsplit(' ', 1)[0]} variant '{name}'"
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name):
        raise SpecError(f"{where}: key 'name' must be a plain name (letters, digits, '_', '.', '-'), found {name!r}")
    read = table_reader(table, where, VARIANT_KEYS, VARIANT_TABLE)
    folder = _folder(read, "folder", ...)
    if "onto" not in table and not source_dirs:
        raise SpecError(f"{where}: key 'onto' is needed: the assignment has no source_dirs for '{folder}' "
                        "to be laid over")
    onto = _folder(read, "onto", source_dirs[0] if source_dirs else ...)
    if folder == onto or Path(onto) in Path(folder).parents or Path(folder) in Path(onto).parents:
        raise SpecError(f"{where}: key 'folder' ({folder!r}) must be a folder beside '{onto}', not it or inside it")
    weight = read.at_least("weight", 0)
    must_change = read.strings("must_change", ())
    for path in must_change:
        parts = Path(path).parts
        if Path(path).is_absolute() or ".." in parts or parts[:len(Path(onto).parts)] != Path(onto).parts \
                or len(parts) <= len(Path(onto).parts):
            raise SpecError(f"{where}: key 'must_change' names {path!r}, which is not a file under '{onto}/' "
                            "(the folder the variant is laid over)")
    # shared_memory_per_tile reads a kernel's cases: a variant has none of its own.
    evidence = read.among("evidence", tuple(e for e in EVIDENCE if e != "shared_memory_per_tile"), "evidence",
                          " (shared_memory_per_tile reads a kernel's cases: a kernel's key)")
    penalty = read.share("evidence_penalty", 0.0, of="the variant's weight")
    precisions = read.among("tensor_core_precisions", TENSOR_CORE_PRECISIONS, "precision")
    precision_penalty = read.share("precision_penalty", 1.0, of="the variant's weight")
    required_files = read.strings("required_files", ())
    for pattern in required_files:
        if Path(pattern).is_absolute() or ".." in Path(pattern).parts or not pattern.startswith(f"{folder}/"):
            raise SpecError(f"{where}: key 'required_files' names {pattern!r}, which is not a pattern under "
                            f"'{folder}/' (the variant's folder)")
    source_patterns = read.get("source_patterns", dict, {})
    for label, pattern in source_patterns.items():
        try:
            re.compile(pattern if isinstance(pattern, str) else "(")
        except re.error as error:
            raise SpecError(f"{where}: key 'source_patterns' {label!r}: expected a regular expression, found "
                            f"{pattern!r} ({error})") from None
    ncu_metrics = read.among("ncu_metrics", NCU_METRICS, "metric")
    tolerances = {}
    names = [k.name for k in kernels]
    for kernel, tolerance in read.get("tolerances", dict, {}).items():
        if kernel not in names:
            raise SpecError(f"{where}: key 'tolerances' names kernel {kernel!r}, which the assignment does not have "
                            f"(have {', '.join(names)})")
        if not isinstance(tolerance, dict):
            raise SpecError(f"{where} tolerances.{kernel}: expected a table with atol and rtol, found {tolerance!r}")
        tolerances[kernel] = load_tolerance(tolerance, f"{where} tolerances.{kernel}")
    graded = read.strings("kernels") if "kernels" in table else None
    if graded is not None:
        if not graded:
            raise SpecError(f"{where}: key 'kernels' is empty; name the kernels and checks the variant is graded on, "
                            "or leave the key out for all of them")
        if unknown_names := [n for n in graded if n not in (*names, *checks)]:
            raise SpecError(f"{where}: key 'kernels' names {unknown_names}, which are neither kernels nor checks of "
                            f"the assignment (have {', '.join((*names, *checks))})")
    defines = tuple(_definition(d, where) for d in read.strings("defines", ()))
    return Variant(
        name=name, title=read.get("title", str, name), folder=folder, onto=onto, weight=weight,
        partial_credit=read.choice("partial_credit", ("fraction", "all_or_nothing"),  # type: ignore[arg-type]
                                   "all_or_nothing"),
        must_change=must_change,
        forbidden_symbols=read.strings("forbidden_symbols") if "forbidden_symbols" in table else None,
        tolerances=tolerances, required_symbols=read.strings("required_symbols", ()),
        evidence=evidence,  # type: ignore[arg-type]
        evidence_penalty=penalty,
        tensor_core_precisions=precisions,
        precision_penalty=precision_penalty,
        evidence_in=read.choice("evidence_in", ("each", "any"), "each"),  # type: ignore[arg-type]
        kernels=graded,
        defines=defines,
        required_files=required_files,
        source_patterns=dict(source_patterns),
        ncu_metrics=ncu_metrics,
        untouched=_untouched(table.get("untouched"), f"{where} key 'untouched'", kernels),
    )


def _definition(text: str, where: str) -> str:
    """One of `defines`: a C++ variable definition at namespace scope ("bool g_enable_kv_cache = false"), its ';'
    optional; one line, no preprocessor, no second statement."""
    definition = text.strip().removesuffix(";").strip()
    declarator, _, value = definition.partition("=")
    if not re.fullmatch(r"[A-Za-z_][\w:<>,\s]*[\s*&]+[A-Za-z_]\w*", declarator.strip()) \
            or any(c in definition for c in ";{}#\n") or ("=" in definition and not value.strip()):
        raise SpecError(f"{where}: key 'defines': {text!r} is not one C++ variable definition (a type, a name and "
                        "maybe '= value', as in \"bool g_enable_kv_cache = false\")")
    return definition


def load_additional(table: Any, where: str, variants: tuple[Variant, ...]) -> CreditGroup | None:
    """[assignment.additional]: the chosen variants (names or glob patterns), their minimum, the extra-credit cap and
    the exclusive sets; None where the assignment has none."""
    if table is None:
        return None
    read = table_reader(table, where, ADDITIONAL_KEYS, f"a table with {', '.join(ADDITIONAL_KEYS)}")
    patterns = read.strings("variants") if isinstance(table.get("variants"), list) else (read.get("variants", str),)
    names = [v.name for v in variants]
    chosen = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    if not chosen:
        raise SpecError(f"{where}: key 'variants' ({', '.join(patterns)}) matches none of the variants "
                        f"({', '.join(names) or 'none'})")
    minimum = read.get("minimum", float)
    cap = read.get("extra_credit_cap", float, None)
    if minimum < 0 or (cap is not None and cap < 0):
        raise SpecError(f"{where}: keys 'minimum' and 'extra_credit_cap' are points >= 0, found {minimum}, {cap}")
    exclusive = read.get("exclusive", list, [])
    sets = []
    for entry in exclusive:
        if not isinstance(entry, list) or len(entry) < 2 or not all(isinstance(n, str) for n in entry):
            raise SpecError(f"{where}: key 'exclusive' is a list of lists of two or more variant names, found {entry!r}")
        if outside := [n for n in entry if n not in chosen]:
            raise SpecError(f"{where}: key 'exclusive' names {outside}, which are not among the group's variants "
                            f"({', '.join(chosen)})")
        sets.append(tuple(entry))
    return CreditGroup(variants=tuple(chosen), minimum=minimum, extra_credit_cap=cap, exclusive=tuple(sets),
                       title=read.get("title", str, "additional optimizations"))


def _untouched(table: Any, where: str, kernels: tuple[Kernel, ...]) -> Untouched | None:
    """The `untouched` table: a scratch buffer of some kernel, the share of it that may be written, and its cost."""
    if table is None:
        return None
    read = table_reader(table, where, UNTOUCHED_KEYS,
                        f"a table like {{ buffer = \"att\", at_most_written = 0.01 }}, found {table!r}")
    buffer = read.get("buffer", str)
    scratch = sorted({b.name for k in kernels for b in k.buffers_with("scratch")})
    if buffer not in scratch:
        raise SpecError(f"{where}: buffer {buffer!r} is no kernel's scratch buffer (scratch buffers: "
                        f"{', '.join(scratch) or 'none'})")
    if leftover := sorted(k.name for k in kernels for b in k.buffers_with("scratch")
                          if b.name == buffer and b.init == "leftover"):
        raise SpecError(f"{where}: buffer {buffer!r} starts as leftover garbage in {', '.join(leftover)}: its writes "
                        "can be counted only where it starts as zeros or poison (scratch_init, or the buffer's init)")
    return Untouched(buffer, read.share("at_most_written"), read.share("penalty", 0.0), read.get("meaning", str, ""))


def _counted(kernel: Kernel, variant: Variant) -> tuple[Buffer, ...]:
    """The kernel's buffers, the variant's untouched scratch with its writes counted."""
    if variant.untouched is None:
        return kernel.buffers
    return tuple(replace(b, count_written=True) if b.name == variant.untouched.buffer and b.role == "scratch" else b
                 for b in kernel.buffers)


def _folder(read: Reader, key: str, default: Any) -> str:
    """A folder of the submission: relative, without '..' (a variant folder must not reach outside it)."""
    value = read.get(key, str, default)
    path = Path(value.rstrip("/"))
    if not value.strip("/") or path.is_absolute() or ".." in path.parts or path.parts[0] == ".":
        raise SpecError(f"{read.where}: key '{key}' must be a folder inside the submission (a relative path "
                        f"without '..'), found {value!r}")
    return path.as_posix()


def _graded(variant: Variant, kernels: tuple[Kernel, ...], checks: tuple[CheckSpec, ...],
            variant_only_checks: tuple[str, ...]) -> dict[str, float]:
    """The base weights of what the variant is graded on, by name: its kernels and checks; a kernel that only a graded
    check composes is graded with weight 0 (it must build and pass, as part of the check's program)."""
    graded = {k.name: k.weight for k in kernels if variant.grades(k.name, k.variant_only)}
    graded |= {c.name: c.weight for c in checks if variant.grades(c.name, c.name in variant_only_checks)}
    composed = {name: 0.0 for c in checks if c.name in graded for name in c.composes if name not in graded}
    return graded | composed


def _shares(weights: dict[str, float]) -> Callable[[str], float]:
    """Each one's share of the total weight (all weights 0: equal shares of those)."""
    total = sum(weights.values())
    return lambda name: weights[name] / total if total else 1 / len(weights)


def _base_weights(kernels: tuple[Kernel, ...], checks: tuple[CheckSpec, ...],
                  variant_only_checks: tuple[str, ...]) -> dict[str, float]:
    """What the base folder is graded on: every kernel and check that is not variant-only, by name."""
    return ({k.name: k.weight for k in kernels if not k.variant_only}
            | {c.name: c.weight for c in checks if c.name not in variant_only_checks})


def expanded(kernels: tuple[Kernel, ...], variants: tuple[Variant, ...], base_weight: float | None,
             checks: tuple[CheckSpec, ...] = (), variant_only_checks: tuple[str, ...] = ()) -> tuple[Kernel, ...]:
    """The base kernels, then each variant's copy of the kernels it is graded on ("req_0/matmul"), weighted as the spec
    says.

    Within a variant (and for `base_weight`) a kernel's share of the weight is its base weight's share among what
    that variant (the base) is graded on.
    """
    base_weights = _base_weights(kernels, checks, variant_only_checks)
    share = _shares(base_weights)
    base = tuple(k if base_weight is None else replace(k, weight=round(base_weight * share(k.name), 9))
                 for k in kernels if k.name in base_weights)
    copies: list[Kernel] = []
    for v in variants:
        weights = _graded(v, kernels, checks, variant_only_checks)
        shares = _shares(weights)
        copies += [replace(k, name=f"{v.name}/{k.name}", variant=v.name, base=k.name,
                           weight=round(v.weight * shares(k.name), 9),
                           forbidden_symbols=k.forbidden_symbols if v.forbidden_symbols is None else v.forbidden_symbols,
                           tolerance=v.tolerances.get(k.name, k.tolerance), defines=v.defines,
                           buffers=_counted(k, v))
                   for k in kernels if k.name in weights]
    return base + tuple(copies)


def check_kernels(checks: tuple[CheckSpec, ...], kernels: tuple[Kernel, ...], variants: tuple[Variant, ...],
                  base_weight: float | None, variant_only_checks: tuple[str, ...] = ()) -> tuple[Kernel, ...]:
    """Each check as kernels of the result: its own (named after it; none for a variant-only check), then the copy of
    each variant graded on it ("req_0/" and its name), each with its cases.

    Its buffers are the files the runner collects from its calls' folders (`CheckSpec.outputs`).
    """
    base_weights = _base_weights(kernels, checks, variant_only_checks)
    share = _shares(base_weights)
    result: list[Kernel] = []
    for spec in checks:
        check = Kernel(
            name=spec.name, weight=spec.weight if base_weight is None or spec.name not in base_weights
            else round(base_weight * share(spec.name), 9),
            header="", sources=(), signature=Signature(spec.name, ()),
            buffers=tuple(Buffer(name, "output", "float32", ("1",)) for name in spec.outputs),
            tolerance=Tolerance(0.0, 0.0), cases=tuple(Case(name, True, {}) for name in spec.cases),
            time_limit_s=spec.time_limit_s, partial_credit="fraction", forbidden_symbols=(), forbidden_penalty=0.0,
            # One budget for all its calls: a kernel that loops costs the check what it costs its own cases.
            time_budget_s=spec.time_limit_s, variant_only=spec.name in variant_only_checks)
        if spec.name in base_weights:
            result.append(check)
        for v in variants:
            weights = _graded(v, kernels, checks, variant_only_checks)
            if spec.name in weights:
                result.append(replace(check, name=f"{v.name}/{spec.name}", variant=v.name, base=spec.name,
                                      weight=round(v.weight * _shares(weights)(spec.name), 9)))
    return tuple(result)
