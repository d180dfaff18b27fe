"""An assignment's `[timing]` table: which case of each kernel is timed, the protocol's knobs, tiers, the leaderboard.

Read from the assignment's own assignment.toml, else from the assignment it is `based_on` (gpt2-m2 times what
gpt2-m1 says). Every error names the file, the key, what was found and what was expected.

    [timing]
    case = "gpt2-full"                      # every kernel's timed case (default: its last case)
    cases = { attention = "gpt2-full" }     # per base kernel, replacing `case`
    warmup = 3                              # untimed calls first
    min_calls = 10
    max_calls = 200
    rse = 0.01                              # stop once the relative standard error is below this ...
    cap_s = 3.0                             # ... or after this many seconds of timed calls
    pool = 4                                # distinct input sets; pool[0] is the case's own
    spin_us = 200                           # CUDA: a spin kernel ahead of each call hides its launch
    leaderboard = "geomean_speedup_vs_reference"   # or geomean_speedup_vs_m1, or "" for none
    tiers = [{ name = "faster than the reference", min_speedup = 1.0 }, { name = "close", min_speedup = 0.5 }]
    sweep_parameter = "N"                   # `--sweep`'s page: the case parameter its x axis reads (default density)
    memory_exponent_limit = { flash_attention = 1.6 }  # a sweep flags a kernel whose peak extra memory grows
                                                       # like N^this or faster (the fitted exponent)
    sweep_page = "matmul"                   # `--sweep`'s page (grader.sweeps): "density" (runtime against
                                            # the parameter, the default) or "matmul" (GFLOP/s per kernel and tile,
                                            # the sweet spot, cuBLAS's share), or one registered
    # Points for a speed-up: kernel's fastest case at sweep_parameter = at against over's, at least min_speedup
    # times faster (`grader time` and `--sweep` award them; grading does not time).
    speedup_points = [{ kernel = "tiled", over = "naive", at = 4096, min_speedup = 1.5, points = 1 }]
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from grader.boundary.timing_statistics import StopRule
from grader.errors import SpecError
from grader.assignment import Assignment, Case, Kernel, find_assignment
from grader.sweeps import sweep_page_names

LEADERBOARDS = ("geomean_speedup_vs_reference", "geomean_speedup_vs_m1")
KEYS = ("case", "cases", "warmup", "min_calls", "max_calls", "rse", "cap_s", "pool", "spin_us", "leaderboard", "tiers",
        "sweep_parameter", "memory_exponent_limit", "sweep_page", "speedup_points")
SPEEDUP_RULE_KEYS = ("kernel", "over", "at", "min_speedup", "points")


@dataclass(frozen=True)
class Tier:
    """A named tier a kernel reaches at this speed-up (by the leaderboard's measure) or more."""

    name: str
    min_speedup: float


@dataclass(frozen=True)
class SpeedupRule:
    """Points for `kernel` being at least `min_speedup` times faster than `over` where the swept parameter is `at`
    (each kernel's fastest case there: the tiled kernel's best tile)."""

    kernel: str
    over: str
    at: float
    min_speedup: float
    points: float


@dataclass(frozen=True)
class TimingSpec:
    """The assignment's timing protocol (defaults where it has no [timing] table)."""

    where: str  # the file (and table) it was read from, for messages
    case: str | None = None
    cases: tuple[tuple[str, str], ...] = ()  # (base kernel, case)
    warmup: int = 3
    rule: StopRule = StopRule()
    pool: int = 4
    spin_us: float = 200.0
    leaderboard: str = "geomean_speedup_vs_reference"
    tiers: tuple[Tier, ...] = ()  # highest min_speedup first
    sweep_parameter: str = "density"
    memory_exponent_limit: tuple[tuple[str, float], ...] = ()  # (base kernel, exponent)
    sweep_page: str = "density"
    speedup_points: tuple[SpeedupRule, ...] = ()

    def timed_case(self, kernel: Kernel) -> Case:
        """The case a kernel (or a variant's copy of it) is timed on."""
        name = dict(self.cases).get(kernel.base, self.case)
        if name is None:
            return kernel.cases[-1]
        for case in kernel.cases + kernel.sweep_cases:
            if case.name == name:
                return case
        key = f"cases.{kernel.base}" if kernel.base in dict(self.cases) else "case"
        raise SpecError(f"{self.where}: key '{key}': kernel '{kernel.base}' has no case {name!r} "
                        f"(its cases: {', '.join(c.name for c in kernel.cases)})")

    def tier_of(self, speedup: float | None) -> str | None:
        """The highest tier this speed-up reaches (None: none, or no speed-up measured)."""
        if speedup is None:
            return None
        return next((t.name for t in self.tiers if speedup >= t.min_speedup), None)


def load_timing(assignment: Assignment) -> TimingSpec:
    """The [timing] table of the assignment, else of the one it is based on, else the defaults; each kernel's case checked."""
    spec_file, table = _table_of(assignment.spec_file, assignment.root)
    timing = parse_timing(table, f"{spec_file} [timing]") if table is not None else TimingSpec(str(assignment.spec_file))
    known = {k.name for k in assignment.base_kernels}
    for key, named in (("cases", timing.cases), ("memory_exponent_limit", timing.memory_exponent_limit)):
        if unknown := sorted(set(dict(named)) - known):
            raise SpecError(f"{timing.where}: key '{key}' names {unknown}, which are not kernels of "
                            f"{assignment.name} (have {', '.join(sorted(known))})")
    for index, rule in enumerate(timing.speedup_points):
        if unknown := sorted({rule.kernel, rule.over} - known):
            raise SpecError(f"{timing.where}: key 'speedup_points[{index}]' names {unknown}, which are not kernels "
                            f"of {assignment.name} (have {', '.join(sorted(known))})")
    for kernel in assignment.base_kernels:
        timing.timed_case(kernel)
    return timing


def _table_of(spec_file: Path, folder: Path, seen: tuple[Path, ...] = ()) -> tuple[Path, dict[str, Any] | None]:
    """The nearest [timing] table up the `based_on` chain, with the file it is in (cycles are the loader's error)."""
    try:
        document = tomllib.loads(spec_file.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise SpecError(f"{spec_file}: cannot be read as TOML: {error}") from None
    if "timing" in document:
        if not isinstance(document["timing"], dict):
            raise SpecError(f"{spec_file}: 'timing' must be a table ([timing]), found {document['timing']!r}")
        return spec_file, document["timing"]
    based_on = document.get("assignment", {}).get("based_on")
    if not isinstance(based_on, str) or folder in seen:
        return spec_file, None
    parent = find_assignment(based_on, folder.parent)
    return _table_of(parent / "assignment.toml", parent, (*seen, folder))


def parse_timing(table: dict[str, Any], where: str) -> TimingSpec:
    """A [timing] table as the model; `where` names it in errors."""
    if unknown := sorted(set(table) - set(KEYS)):
        raise SpecError(f"{where}: unknown key(s) {unknown}; expected some of {', '.join(KEYS)}")
    defaults = TimingSpec(where)
    case = _typed(table, "case", str, None, where)
    cases = _typed(table, "cases", dict, {}, where)
    if bad := [k for k, v in cases.items() if not isinstance(v, str)]:
        raise SpecError(f"{where}: key 'cases': each value must be a case's name (a string); {bad} are not")
    rule = StopRule(_count(table, "min_calls", defaults.rule.min_calls, where, 2),
                    _count(table, "max_calls", defaults.rule.max_calls, where, 2),
                    _fraction(table, "rse", defaults.rule.rse, where), _positive(table, "cap_s", defaults.rule.cap_s, where))
    if rule.max_calls < rule.min_calls:
        raise SpecError(f"{where}: key 'max_calls' is {rule.max_calls}, below min_calls ({rule.min_calls})")
    leaderboard = _typed(table, "leaderboard", str, defaults.leaderboard, where)
    if leaderboard and leaderboard not in LEADERBOARDS:
        raise SpecError(f"{where}: key 'leaderboard' must be one of {', '.join(LEADERBOARDS)} or \"\", "
                        f"found {leaderboard!r}")
    limits = _typed(table, "memory_exponent_limit", dict, {}, where)
    if bad := [k for k, v in limits.items() if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0]:
        raise SpecError(f"{where}: key 'memory_exponent_limit': each value must be an exponent above 0 (1.6: "
                        f"flagged from N^1.6 on); {bad} are not")
    page = _typed(table, "sweep_page", str, defaults.sweep_page, where)
    if page not in sweep_page_names():
        raise SpecError(f"{where}: key 'sweep_page' must be one of {', '.join(sweep_page_names())}, "
                        f"found {page!r}")
    return TimingSpec(where, case, tuple(sorted(cases.items())), _count(table, "warmup", defaults.warmup, where, 0),
                      rule, _count(table, "pool", defaults.pool, where, 1), _positive(table, "spin_us", 200.0, where, 0.0),
                      leaderboard, _tiers(table.get("tiers", []), where),
                      _typed(table, "sweep_parameter", str, defaults.sweep_parameter, where),
                      tuple(sorted((k, float(v)) for k, v in limits.items())), page,
                      _speedup_rules(table.get("speedup_points", []), where))


def _speedup_rules(value: Any, where: str) -> tuple[SpeedupRule, ...]:
    shape = "{ kernel, over, at, min_speedup, points } tables"
    if not isinstance(value, list):
        raise SpecError(f"{where}: key 'speedup_points' must be a list of {shape}, found {value!r}")
    rules = []
    for index, entry in enumerate(value):
        at = f"{where} speedup_points[{index}]"
        if not isinstance(entry, dict) or set(entry) != set(SPEEDUP_RULE_KEYS):
            raise SpecError(f"{at}: expected a table with exactly {', '.join(SPEEDUP_RULE_KEYS)}, found {entry!r}")
        rule = SpeedupRule(_typed(entry, "kernel", str, ..., at), _typed(entry, "over", str, ..., at),
                           _positive(entry, "at", 0.0, at), _positive(entry, "min_speedup", 0.0, at),
                           _positive(entry, "points", 0.0, at))
        if rule.kernel == rule.over:
            raise SpecError(f"{at}: 'kernel' and 'over' are both {rule.kernel!r}; a speed-up is over another kernel")
        rules.append(rule)
    return tuple(rules)


def _tiers(value: Any, where: str) -> tuple[Tier, ...]:
    if not isinstance(value, list):
        raise SpecError(f"{where}: key 'tiers' must be a list of {{ name, min_speedup }} tables, found {value!r}")
    tiers = []
    for index, entry in enumerate(value):
        at = f"{where} tiers[{index}]"
        if not isinstance(entry, dict) or set(entry) != {"name", "min_speedup"}:
            raise SpecError(f"{at}: expected a table with exactly 'name' and 'min_speedup', found {entry!r}")
        tiers.append(Tier(_typed(entry, "name", str, ..., at), _positive(entry, "min_speedup", 0.0, at)))
    return tuple(sorted(tiers, key=lambda t: -t.min_speedup))


def _typed(table: dict[str, Any], key: str, kind: type, default: Any, where: str) -> Any:
    if key not in table:
        if default is ...:
            raise SpecError(f"{where}: missing key '{key}'")
        return default
    value = table[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise SpecError(f"{where}: key '{key}' must be {kind.__name__}, found {value!r}")
    return value


def _count(table: dict[str, Any], key: str, default: int, where: str, least: int) -> int:
    value = _typed(table, key, int, default, where)
    if value < least:
        raise SpecError(f"{where}: key '{key}' must be at least {least}, found {value}")
    return value


def _positive(table: dict[str, Any], key: str, default: float, where: str, least: float | None = None) -> float:
    value = _typed(table, key, float, default, where)
    if (value < least) if least is not None else value <= 0:
        bound = f"at least {least:g}" if least is not None else "above 0"
        raise SpecError(f"{where}: key '{key}' must be {bound}, found {value:g}")
    return value


def _fraction(table: dict[str, Any], key: str, default: float, where: str) -> float:
    value = _typed(table, key, float, default, where)
    if not 0 < value < 1:
        raise SpecError(f"{where}: key '{key}' must be between 0 and 1 (0.01 is 1%), found {value:g}")
    return value
