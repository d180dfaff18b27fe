"""Read `assignments/<name>/assignment.toml` into the model; every error names the file, the key and what was expected.

One module per part of the file: `document` (the TOML read, `based_on` resolved, and `Reader`), `kernels`
([[kernels]], their cases and tolerances), `variants` ([[variants]], and the kernels of the result they
multiply), `late` ([assignment.late]); this one reads [assignment] and composes them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grader.boundary.runtimes import load_pack_runtime
from grader.checks import CheckSpec, check_named
from grader.errors import SpecError
from grader.assignment.assignments import find_assignment
from grader.assignment.document import Reader, read_document
from grader.assignment.kernels import is_glob, load_kernel
from grader.assignment.late import load_late_policy
from grader.assignment.model import INITS, LIBRARIES, Assignment, Kernel
from grader.assignment.claims import load_claims
from grader.assignment.written import load_written
from grader.assignment.variants import check_kernels, expanded, load_additional, load_variants
from grader.targets import TARGET_NAMES


def load_assignment(name_or_path: str | Path, assignments_dir: Path | None = None) -> Assignment:
    """Load `assignments/<name>/assignment.toml` (or an assignment's folder given as a path).

    assignments_dir: where to look the name up (default: the repository's assignments/, see
    `grader.assignment.assignments`). An assignment with `based_on` inherits the other one's [assignment]
    keys, kernels, variants, checks' tables and modules (inputs.py, numpy_reference.py), each given here replacing
    the inherited one.
    """
    candidate = Path(name_or_path)
    folder = candidate if (candidate / "assignment.toml").is_file() else find_assignment(str(name_or_path),
                                                                                         assignments_dir)
    spec_file = folder / "assignment.toml"
    document = read_document(folder.resolve())
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
        "provided": top.strings("provided", ()),
    }
    if not document.kernels:
        raise SpecError(f"{spec_file}: expected at least one [[kernels]] table")
    kernels = tuple(load_kernel(table, where, defaults) for table, where in document.kernels)
    names = [k.name for k in kernels]
    if len(set(names)) != len(names):
        raise SpecError(f"{document.kernels[0][1].rsplit(' ', 1)[0]}: kernel names repeat: {names}")
    source_dirs = (tuple(d.strip("/") for d in top.strings("source_dirs")) if "source_dirs" in top.table
                   else _source_folders(kernels))
    checks, variant_only_checks = _load_checks(document.checks, kernels)
    variants = load_variants(document.variants, source_dirs, kernels, tuple(c.name for c in checks))
    base_weight = top.at_least("base_weight", 0, None)
    kernels_of_result = expanded(kernels, variants, base_weight, checks, variant_only_checks)
    assignment = Assignment(
        name=top.get("name", str),
        title=top.get("title", str, top.get("name", str)),
        version=str(top.get("version", (str, int))),
        target=top.choice("target", TARGET_NAMES),
        root=folder.resolve(),
        provided=top.strings("provided", ()),
        public_seed=top.get("public_seed", int),
        compile_flags=top.strings("compile_flags", ()),
        kernels=kernels_of_result,
        late=load_late_policy(document.assignment.get("late"),
                               top.at("late").replace("[assignment]", "[assignment.late]")),
        memory_limit_mb=top.get("memory_limit_mb", int, None),
        process_limit=top.get("process_limit", int, None),
        device_memory_limit_mb=top.get("device_memory_limit_mb", int, None),
        submission_time_limit_s=top.get("submission_time_limit_s", float, None),
        source_dirs=source_dirs,
        libraries=_libraries(top.strings("libraries", ()), f"{top.at('libraries')} key 'libraries'"),
        python_packages=top.strings("python_packages", ()),
        runtimes=_load_runtimes(top.strings("runtimes", ()), (folder.resolve(), document.module_root),
                                f"{top.at('runtimes')} key 'runtimes'"),
        gold=top.choice("gold", ("reference", "numpy"), "reference"),  # type: ignore[arg-type]
        variants=variants,
        based_on=document.based_on,
        module_root=document.module_root,
        lineage=document.lineage,
        checks=checks,
        check_kernels=check_kernels(checks, kernels, variants, base_weight, variant_only_checks),
        variant_only_kernels=tuple(k for k in kernels if k.variant_only),
        additional=load_additional(document.assignment.get("additional"),
                                   top.at("additional").replace("[assignment]", "[assignment.additional]"), variants),
        compile_error_zeroes=top.get("compile_error_zeroes", bool, False),
        written=load_written(document.assignment.get("written"),
                             top.at("written").replace("[assignment]", "[assignment.written]")),
        claims=load_claims(document.assignment.get("claims"),
                           top.at("claims").replace("[assignment]", "[assignment.claims]"), kernels),
    )
    if assignment.name != folder.name:
        raise SpecError(f"{spec_file} [assignment]: name {assignment.name!r} must match the folder {folder.name!r}")
    return assignment


def _load_runtimes(modules: tuple[str, ...], folders: tuple[Path | None, ...], where: str) -> tuple[str, ...]:
    """The runtimes of the assignment's own, each a module of its folder (or of the one it is based on) defining
    `RUNTIME`, registered (`grader.boundary.runtimes`); their names."""
    names = []
    for module in modules:
        folder = next((f for f in folders if f is not None and (f / f"{module}.py").is_file()), None)
        if folder is None:
            raise SpecError(f"{where}: no {module}.py in the assignment's folder")
        try:
            names.append(load_pack_runtime(folder, module).name)
        except Exception as error:  # its module raised, defines no RUNTIME, or names a built-in runtime
            raise SpecError(f"{where}: {folder / f'{module}.py'}: {error}") from None
    return tuple(names)


def _load_checks(tables: dict[str, tuple[Any, str]],
                 kernels: tuple[Kernel, ...]) -> tuple[tuple[CheckSpec, ...], tuple[str, ...]]:
    """Each check's table as its plug-in reads it, and the names of those marked `variant_only` (a key every check's
    table may have: graded only in the variants that name it, never on the base folder)."""
    checks, variant_only = [], []
    for name, (table, where) in tables.items():
        if isinstance(table, dict) and "variant_only" in table:
            table = dict(table)
            if Reader(table, where).get("variant_only", bool):
                variant_only.append(name)
            del table["variant_only"]
        checks.append(check_named(name).load(table, where, kernels))
    return tuple(checks), tuple(variant_only)


def _source_folders(kernels: tuple[Kernel, ...]) -> tuple[str, ...]:
    """The default `source_dirs`: each top folder that holds a kernel's sources (`src/` for src/flash_attention.cpp).

    A student's own headers and files sit beside the kernel's, and the course compiles them as one
    program. Files at the repository's root give none: an assignment whose sources lie there names its folders.
    Every alternative of an entry gives its folder (a fork's may be another); a glob's folder, where it names one.
    """
    parts = (Path(path).parts for k in kernels for entry in k.source_entries for path in entry)
    return tuple(dict.fromkeys(p[0] for p in parts if len(p) > 1 and not is_glob(p[0])))


def _libraries(names: tuple[str, ...], where: str) -> tuple[str, ...]:
    unknown = [n for n in names if n not in LIBRARIES]
    if unknown:
        raise SpecError(f"{where}: unknown librar(ies) {unknown}; expected some of {', '.join(LIBRARIES)}")
    return names
