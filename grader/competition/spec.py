"""`[competition]`: the run set, read and validated; every error names the file, the key and what was expected.

    [competition]
    folder = "kernels_competition"   # laid over kernels/ for the competition's build (absent: kernels/ alone)
    warmup = 1                       # untimed generations first, per run
    min_repeats = 3                  # timed generations: at least these, then until the RSE is below `rse` ...
    max_repeats = 10                 # ... or these many ...
    rse = 0.02
    cap_s = 30.0                     # ... or once this much time went on timed generations
    time_limit_s = 300.0             # per run, its warm-up and repeats together
    runs = [{ name = "b1-g16", B = 1, prompt = 16, generate = 16 }, ...]

The shapes (C, NH, L, V, Vp, maxT), the weights' seed and the gate's rule (logits max_abs and rmse, tie_margin) are
the assignment's [forward] check's: the competition is that check's greedy generation, timed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from grader.boundary.timing_statistics import StopRule
from grader.checks.forward.spec import FORWARD, Forward
from grader.errors import SpecError
from grader.assignment import Assignment, find_assignment
from grader.assignment.document import Reader

COMPETITION = "competition"  # its table in assignment.toml
KEYS = ("folder", "warmup", "min_repeats", "max_repeats", "rse", "cap_s", "time_limit_s", "runs")
RUN_KEYS = ("name", "B", "prompt", "generate")


@dataclass(frozen=True)
class Run:
    """One generation run: B prompts of `prompt` tokens each, `generate` greedy tokens after them."""

    name: str
    B: int
    prompt: int
    generate: int

    @property
    def T(self) -> int:
        """The window every step recomputes (full recompute at fixed shapes, as the forward check generates)."""
        return self.prompt + self.generate

    @property
    def tokens(self) -> int:
        """Tokens generated per run: what tokens per second counts."""
        return self.B * self.generate


@dataclass(frozen=True)
class Competition:
    """The assignment's competition: its runs, the folder laid over kernels/, the protocol, and the [forward] check
    whose weights, shapes and logits rule it uses."""

    where: str  # the file and table it was read from, for messages
    runs: tuple[Run, ...]
    forward: Forward
    folder: str = "kernels_competition"
    warmup: int = 1
    rule: StopRule = StopRule(min_calls=3, max_calls=10, rse=0.02, cap_s=30.0)
    time_limit_s: float = 300.0

    def forward_of(self, run: Run) -> Forward:
        """The [forward] check's shapes and weights at this run's batch and window."""
        return replace(self.forward, B=run.B, T=run.T, prompt=run.prompt, generate=run.generate)


def load_competition(assignment: Assignment) -> Competition:
    """The [competition] table of the assignment, else of the one it is based on; an assignment without one, or
    without a [forward] check, has no competition (SpecError, in words)."""
    spec_file, table = _table_of(assignment.spec_file, assignment.root)
    where = f"{spec_file} [{COMPETITION}]"
    if table is None:
        raise SpecError(f"{assignment.spec_file}: {assignment.name} has no [{COMPETITION}] table (nor does an "
                        "assignment it is based on): it holds no competition")
    forward = next((c for c in assignment.checks if c.name == FORWARD), None)
    if not isinstance(forward, Forward):
        raise SpecError(f"{where}: the competition generates through the [{FORWARD}] check's composition, and "
                        f"{assignment.name} has no [{FORWARD}] table")
    return parse_competition(table, where, forward)


def parse_competition(table: Any, where: str, forward: Forward) -> Competition:
    if not isinstance(table, dict):
        raise SpecError(f"{where}: expected a table with runs, found {table!r}")
    if unknown := sorted(set(table) - set(KEYS)):
        raise SpecError(f"{where}: unknown key(s) {unknown}; expected some of {', '.join(KEYS)}")
    read = Reader(table, where)
    defaults = Competition(where, (), forward)
    competition = Competition(
        where, _runs(read.get("runs", list), where, forward), forward,
        folder=read.get("folder", str, defaults.folder).strip("/"),
        warmup=read.get("warmup", int, defaults.warmup),
        rule=StopRule(min_calls=read.get("min_repeats", int, defaults.rule.min_calls),
                      max_calls=read.get("max_repeats", int, defaults.rule.max_calls),
                      rse=read.get("rse", float, defaults.rule.rse),
                      cap_s=read.get("cap_s", float, defaults.rule.cap_s)),
        time_limit_s=read.get("time_limit_s", float, defaults.time_limit_s))
    rule = competition.rule
    if competition.warmup < 0 or rule.min_calls < 1 or rule.max_calls < rule.min_calls:
        raise SpecError(f"{where}: warmup must be >= 0 and 1 <= min_repeats <= max_repeats (found warmup "
                        f"{competition.warmup}, min_repeats {rule.min_calls}, max_repeats {rule.max_calls})")
    if rule.rse <= 0 or rule.cap_s <= 0 or competition.time_limit_s <= 0:
        raise SpecError(f"{where}: rse, cap_s and time_limit_s must be above 0 (found {rule.rse:g}, {rule.cap_s:g}, "
                        f"{competition.time_limit_s:g})")
    if not competition.folder or competition.folder == "kernels" or Path(competition.folder).is_absolute() \
            or ".." in Path(competition.folder).parts:
        raise SpecError(f"{where}: key 'folder' must be a folder of the submission beside kernels/ (e.g. "
                        f"\"kernels_competition\"), found {competition.folder!r}")
    return competition


def _runs(value: list, where: str, forward: Forward) -> tuple[Run, ...]:
    if not value:
        raise SpecError(f"{where}: key 'runs' must list at least one run ({{ name, B, prompt, generate }})")
    runs = []
    for index, entry in enumerate(value):
        at = f"{where} runs[{index}]"
        if not isinstance(entry, dict) or set(entry) != set(RUN_KEYS):
            raise SpecError(f"{at}: expected a table with exactly {', '.join(RUN_KEYS)}, found {entry!r}")
        read = Reader(entry, at)
        run = Run(read.get("name", str), read.get("B", int), read.get("prompt", int), read.get("generate", int))
        if run.B < 1 or run.prompt < 1 or run.generate < 1:
            raise SpecError(f"{at}: B, prompt and generate must be at least 1 (found {run.B}, {run.prompt}, "
                            f"{run.generate})")
        if run.T > forward.maxT:
            raise SpecError(f"{at}: prompt + generate ({run.T}) must not exceed the [forward] check's maxT "
                            f"({forward.maxT}), the position table's rows")
        if not run.name or any(not (c.isalnum() or c in "-_.") for c in run.name):
            raise SpecError(f"{at}: key 'name' must be letters, digits, '-', '_' or '.', found {run.name!r}")
        runs.append(run)
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        raise SpecError(f"{where}: run names repeat: {names}")
    return tuple(runs)


def _table_of(spec_file: Path, folder: Path, seen: tuple[Path, ...] = ()) -> tuple[Path, Any]:
    """The nearest [competition] table up the `based_on` chain, with the file it is in."""
    try:
        document = tomllib.loads(spec_file.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise SpecError(f"{spec_file}: cannot be read as TOML: {error}") from None
    if COMPETITION in document:
        return spec_file, document[COMPETITION]
    based_on = document.get("assignment", {}).get("based_on")
    if not isinstance(based_on, str) or folder in seen:
        return spec_file, None
    parent = find_assignment(based_on, folder.parent)
    return _table_of(parent / "assignment.toml", parent, (*seen, folder))
