"""An assignment.toml read: its tables, each with where it was written, `based_on` resolved; and `Reader`, which
reads typed keys from one table and names the file and key in every error."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from grader.checks import CHECK_NAMES
from grader.errors import SpecError
from grader.assignment.assignments import find_assignment


def table_reader(value: Any, where: str, keys: tuple[str, ...], expected: str) -> Reader:
    """A `Reader` of a table whose keys are all among `keys`; `expected` says what it should be where it is no table
    ("a table with weight, cases, ...")."""
    if not isinstance(value, dict):
        raise SpecError(f"{where}: expected {expected}")
    if unknown := set(value) - set(keys):
        raise SpecError(f"{where}: unknown key(s) {sorted(unknown)}; expected some of {', '.join(keys)}")
    return Reader(value, where)


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

    def among(self, key: str, known: tuple[str, ...], noun: str, note: str = "") -> tuple[str, ...]:
        """A list of names, each one of `known` (absent: none): "key 'evidence': unknown evidence ['tiling']";
        `note` follows the names expected."""
        values = self.strings(key, ())
        if unknown := [v for v in values if v not in known]:
            raise SpecError(f"{self.at(key)}: key '{key}': unknown {noun} {unknown}; expected some of "
                            f"{', '.join(known)}{note}")
        return values

    def share(self, key: str, default: Any = ..., of: str = "") -> float:
        """A share between 0 and 1 (a penalty: `of` says of what, "the kernel's weight")."""
        value = self.get(key, float, default)
        if not 0 <= value <= 1:
            raise SpecError(f"{self.at(key)}: key '{key}' is a share{f' of {of}' if of else ''} between 0 and 1, "
                            f"found {value}")
        return value

    def at_least(self, key: str, least: float, default: Any = ..., unit: str = "") -> Any:
        """A number of at least `least` (absent: `default`, which may be None); `unit` follows the bound in the
        error: " (times the small case's peak)"."""
        value = self.get(key, float, default)
        if value is not None and value < least:
            raise SpecError(f"{self.at(key)}: key '{key}' must be >= {least:g}{unit}, found {value}")
        return value


@dataclass(frozen=True)
class Document:
    """An assignment.toml with what it inherits (`based_on`) resolved; each table with where it was written."""

    assignment: dict[str, Any]
    origins: dict[str, str]  # [assignment] key -> "<file> [assignment]" of the assignment that gave it
    kernels: list[tuple[dict[str, Any], str]]  # (table, "<file> kernels[i]")
    variants: list[tuple[Any, str]]  # (table, "<file> variants[i]")
    module_root: Path  # where inputs.py and numpy_reference.py are
    based_on: str | None
    # Each check's table (grader.checks), by the check's name: (table, where it was written), own or inherited.
    checks: dict[str, tuple[Any, str]] = field(default_factory=dict)
    lineage: tuple[Path, ...] = ()  # the folders of the assignments it inherits from, the base's first, then its own


ASSIGNMENT_MODULES = ("inputs.py", "numpy_reference.py")
NOT_INHERITED = ("name", "based_on")
# The spec's own tables ([timing] is grader.timing.spec's, [competition] grader.competition.spec's); every other
# table is a check's (grader.checks).
TABLES = ("assignment", "kernels", "variants", "timing", "competition")


def read_document(folder: Path, inheriting: tuple[Path, ...] = ()) -> Document:
    """The folder's assignment.toml, with the assignment it is `based_on` merged beneath it.

    inheriting: the folders whose documents are being read and are based on this one (a cycle is an error).
    """
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
        return Document(dict(own), {key: where for key in own}, kernels, variants, folder, None, checks, (folder,))
    if not isinstance(based_on, str):
        raise SpecError(f"{where}: key 'based_on' must be the name of another assignment, found {based_on!r}")
    try:
        parent_folder = find_assignment(based_on, folder.parent).resolve()
    except SpecError as error:
        raise SpecError(f"{where}: key 'based_on': {error}") from None
    if parent_folder in (folder, *inheriting):
        raise SpecError(f"{where}: key 'based_on': {based_on!r} is based on this assignment in turn (a cycle)")
    parent = read_document(parent_folder, (*inheriting, folder))
    if modules and len(modules) < len(ASSIGNMENT_MODULES):
        raise SpecError(f"{folder}: has {modules[0]} but not "
                        f"{', '.join(m for m in ASSIGNMENT_MODULES if m not in modules)}; "
                        f"give both, or neither to use {based_on}'s")
    inherited = {key: value for key, value in parent.assignment.items() if key not in NOT_INHERITED}
    return Document({**inherited, **own}, {**{key: parent.origins[key] for key in inherited},
                                           **{key: where for key in own}},
                    _merged(parent.kernels, kernels), variants or parent.variants,
                    folder if modules else parent.module_root, based_on, {**parent.checks, **checks},
                    (*parent.lineage, folder))


def _check_tables(document: dict[str, Any], spec_file: Path) -> dict[str, tuple[Any, str]]:
    """The checks' tables, by the check's name: every table beside the spec's own must name a check."""
    checks = {}
    for key, table in document.items():
        if key in TABLES:
            continue
        if key not in CHECK_NAMES:
            raise SpecError(f"{spec_file}: unknown table [{key}]; expected [assignment], [[kernels]], [[variants]], "
                            "[timing], [competition] "
                            f"or a check's table ({', '.join(f'[{name}]' for name in CHECK_NAMES)})")
        checks[key] = (table, f"{spec_file} [{key}]")
    return checks


def _merged(inherited: list[tuple[Any, str]], own: list[tuple[Any, str]]) -> list[tuple[Any, str]]:
    """The inherited [[kernels]] with this assignment's laid over them: one of the same name is laid over the inherited
    one key by key, in its place (nanogpt-kvcache-cuda gives its generation kernels sweep cases of a size a GPU
    shows a cache's speed-up at, and keeps the rest); a new one is added after them (gpt2-m3 adds local attention
    to milestone 1's six)."""
    def name(table: Any) -> Any:
        return table.get("name") if isinstance(table, dict) else None

    replacing = {name(table): (table, where) for table, where in own if name(table) is not None}

    def laid_over(table: Any, where: str) -> tuple[Any, str]:
        if (over := replacing.pop(name(table), None)) is None:
            return table, where
        own_table, own_where = over
        if not isinstance(table, dict) or not isinstance(own_table, dict):
            return own_table, own_where
        return {**table, **own_table}, own_where  # the inherited keys are checked where that assignment loads

    merged = [laid_over(table, where) for table, where in inherited]
    return merged + [(table, where) for table, where in own if name(table) in replacing or name(table) is None]


def _tables(document: dict[str, Any], key: str, spec_file: Path) -> list[tuple[Any, str]]:
    tables = document.get(key, [])
    if not isinstance(tables, list):
        raise SpecError(f"{spec_file}: '{key}' must be an array of tables ([[{key}]]), found {tables!r}")
    return [(table, f"{spec_file} {key}[{i}]") for i, table in enumerate(tables)]
