"""`[forward]`: the check's table in assignment.toml, read and validated into `Forward`; every error names
the file, the key and what was expected."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grader.errors import SpecError
from grader.assignment.document import Reader
from grader.assignment.kernels import load_tolerance
from grader.assignment.model import Kernel, Tolerance

# The forward-pass check composes kernels of these names (the course's six), with these signatures' parameters.
FORWARD_KERNELS = ("encoder", "layernorm", "matmul", "attention", "residual", "gelu")
FORWARD = "forward"  # the check's name: its table, and its result's kernel ("req_0/forward" for a variant's)
FORWARD_CASES = ("layer-by-layer", "logits", "generation")
FORWARD_KEYS = ("weight", "B", "T", "C", "NH", "L", "V", "Vp", "maxT", "seed", "init_std", "generate", "prompt",
                "tie_margin", "logits", "tolerances", "time_limit_s")


@dataclass(frozen=True)
class Forward:
    """`[forward]`: the assignment's six kernels composed into GPT-2's forward pass (`grader.checks.forward`).

    Shapes are GPT-2 124M's unless the spec says otherwise; B and T are small, so that the check
    costs little beside the kernels' own cases.
    """

    weight: float
    B: int
    T: int
    C: int = 768
    NH: int = 12
    L: int = 12
    V: int = 50257
    Vp: int = 50304  # V padded, as the course's program pads it
    maxT: int = 1024
    seed: int = 0  # the weights' and tokens' (fixed: every submission and every variant shares one gold)
    init_std: float = 0.02  # GPT-2's N(0, 0.02); residual projections scaled by 1/sqrt(2L)
    generate: int = 4  # greedy tokens
    prompt: int = 0  # tokens given before generating (0: T - generate)
    tie_margin: float = 1e-2  # at the first differing token, a reference top-two gap below this is a tie
    logits_max_abs: float = 0.1  # the course's test_gpt2 rule: a larger error fails
    logits_rmse: float = 4e-3  # ... and so does a larger RMSE
    tolerances: dict[str, Tolerance] = field(default_factory=dict)  # by kernel, for its steps (default: its own)
    time_limit_s: float = 60.0  # for its three passes together (and so for each)

    @property
    def prompt_length(self) -> int:
        return self.prompt or self.T - self.generate

    @property
    def steps(self) -> int:
        """The encoder, ten calls per layer, the final layernorm and the vocabulary head (`layout.py`)."""
        return 1 + 10 * self.L + 2

    # What every check's spec says (`grader.checks.CheckSpec`).

    @property
    def name(self) -> str:
        return FORWARD

    @property
    def composes(self) -> tuple[str, ...]:
        return FORWARD_KERNELS

    @property
    def cases(self) -> tuple[str, ...]:
        return FORWARD_CASES

    @property
    def outputs(self) -> tuple[str, ...]:
        """Each step's output, the logits, the generated tokens."""
        return tuple(output_file(n) for n in range(1, self.steps + 1)) + ("logits", "tokens")


def output_file(number: int) -> str:
    """The file (stem) step `number` saves its output as."""
    return f"step-{number:03d}"


def load_forward(table: Any, where: str, kernels: tuple[Kernel, ...]) -> Forward:
    """[forward]: the six kernels composed into GPT-2's forward pass; shapes default to GPT-2 124M's."""
    if not isinstance(table, dict):
        raise SpecError(f"{where}: expected a table with weight, B, T, ...")
    unknown = set(table) - set(FORWARD_KEYS)
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {sorted(unknown)}; expected some of {', '.join(FORWARD_KEYS)}")
    read = Reader(table, where)
    check_composable(kernels, where, FORWARD)
    defaults = Forward(weight=0.0, B=1, T=1)
    sizes = {key: read.get(key, int, getattr(defaults, key)) for key in ("C", "NH", "L", "V", "Vp", "maxT")}
    forward = Forward(
        weight=read.get("weight", float, 0.0), B=read.get("B", int), T=read.get("T", int), **sizes,
        seed=read.get("seed", int, defaults.seed), init_std=read.get("init_std", float, defaults.init_std),
        generate=read.get("generate", int, defaults.generate), prompt=read.get("prompt", int, 0),
        tie_margin=read.get("tie_margin", float, defaults.tie_margin),
        time_limit_s=read.get("time_limit_s", float, defaults.time_limit_s),
        tolerances=_forward_tolerances(read.get("tolerances", dict, {}), where),
        **_logits_rule(read.get("logits", dict, {}), f"{where} logits", defaults),
    )
    _check_forward(forward, where)
    return forward


def check_composable(kernels: tuple[Kernel, ...], where: str, check: str) -> None:
    """The assignment's kernels can be composed into the forward pass (the six, with the course's signatures), and
    none is named as the check (`check`) whose table `where` is; else a SpecError naming what is wrong."""
    by_name = {k.name: k for k in kernels}
    missing = [name for name in FORWARD_KERNELS if name not in by_name]
    if missing:
        raise SpecError(f"{where}: the forward pass composes the kernels {', '.join(FORWARD_KERNELS)}; the assignment "
                        f"has no {', '.join(missing)}")
    from grader.checks.forward.layout import composition_problem  # the composition's own module says what it passes

    for name in FORWARD_KERNELS:
        if problem := composition_problem(by_name[name]):
            raise SpecError(f"{where}: kernel '{name}' cannot be composed: {problem}")
    if check in by_name:
        raise SpecError(f"{where}: a kernel is named '{check}', which is the {check} check's name in results")


def _forward_tolerances(table: dict[str, Any], where: str) -> dict[str, Tolerance]:
    for name, tolerance in table.items():
        if name not in FORWARD_KERNELS:
            raise SpecError(f"{where}: key 'tolerances' names {name!r}, which the forward pass does not call "
                            f"(it calls {', '.join(FORWARD_KERNELS)})")
        if not isinstance(tolerance, dict):
            raise SpecError(f"{where} tolerances.{name}: expected a table with atol and rtol, found {tolerance!r}")
    return {name: load_tolerance(t, f"{where} tolerances.{name}") for name, t in table.items()}


def _logits_rule(table: dict[str, Any], where: str, defaults: Forward) -> dict[str, float]:
    unknown = set(table) - {"max_abs", "rmse"}
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {sorted(unknown)}; expected max_abs and rmse (the course's "
                        "test_gpt2 rule)")
    read = Reader(table, where)
    return {"logits_max_abs": read.get("max_abs", float, defaults.logits_max_abs),
            "logits_rmse": read.get("rmse", float, defaults.logits_rmse)}


def _check_forward(f: Forward, where: str) -> None:
    for key in ("B", "T", "C", "NH", "L", "V", "Vp", "maxT", "generate"):
        if getattr(f, key) <= 0:
            raise SpecError(f"{where}: key '{key}' must be > 0, found {getattr(f, key)}")
    if f.C % f.NH:
        raise SpecError(f"{where}: C ({f.C}) must be a multiple of NH ({f.NH}): each head gets C / NH channels")
    if f.Vp < f.V:
        raise SpecError(f"{where}: Vp ({f.Vp}) is the padded vocabulary, so it must be at least V ({f.V})")
    if f.T > f.maxT:
        raise SpecError(f"{where}: T ({f.T}) must not exceed maxT ({f.maxT}), the position table's rows")
    if f.prompt < 0 or f.prompt_length < 1 or f.prompt_length + f.generate > f.T:
        raise SpecError(f"{where}: generating {f.generate} token(s) after a prompt of {f.prompt_length} needs "
                        f"prompt + generate <= T ({f.T}) and a prompt of at least 1 (key 'prompt', 0: T - generate)")
    if f.weight < 0 or f.tie_margin < 0 or f.init_std <= 0 or f.time_limit_s <= 0:
        raise SpecError(f"{where}: weight and tie_margin must be >= 0, init_std and time_limit_s > 0 (found "
                        f"{f.weight}, {f.tie_margin}, {f.init_std}, {f.time_limit_s})")
