"""`[decode]`: the check's table in assignment.toml, read and validated into `Decode`; every error names the file,
the key and what was expected."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from grader.checks.forward.spec import FORWARD_KERNELS, Forward, check_composable
from grader.errors import SpecError
from grader.assignment.document import Reader, table_reader
from grader.assignment.model import Kernel

DECODE = "decode"  # the check's name: its table, and its result's kernel ("req_6/decode" for a variant's)
DECODE_KEYS = ("weight", "C", "NH", "L", "V", "Vp", "maxT", "seed", "init_std", "logits", "course_error",
               "min_attention_speedup", "speedup_penalty", "time_limit_s", "cases")
CASE_KEYS = ("name", "B", "prompt", "generate", "runs", "gold", "timed")
MAX_RUNS = 3
@dataclass(frozen=True)
class DecodeCase:
    """One prefill-and-decode program: B rows, a prompt, then `generate` tokens, each step's logits checked."""

    name: str
    B: int
    prompt: int
    generate: int  # logits checked per row: the prefill's last position's, then generate - 1 decode steps'
    runs: int = 1  # the KV pass repeated in one process, its state reset between as a new program's
    gold: bool = True  # also against the float64 gold (cheap at small sizes; the baseline alone at long prompts)
    timed: bool = False  # its attention's speed-up is judged against `min_attention_speedup`

    @property
    def length(self) -> int:
        """Tokens of the longest forward: the last step's logits come from position prompt + generate - 2."""
        return self.prompt + self.generate - 1

    @property
    def outputs(self) -> tuple[str, ...]:
        """What its call seals, in order: the baseline's logits, each KV run's, then the times and the memory."""
        return ("baseline", *(f"kv-{run}" for run in range(1, self.runs + 1)), "times", "memory")


DEFAULT_CASES = (
    DecodeCase("prefill-decode-b1", B=1, prompt=16, generate=16),
    DecodeCase("prefill-decode-b4", B=4, prompt=13, generate=16),
    DecodeCase("second-run", B=2, prompt=16, generate=8, runs=2),
    DecodeCase("speed-up", B=8, prompt=480, generate=16, gold=False, timed=True),
)


@dataclass(frozen=True)
class Decode:
    """`[decode]`: the KV-cache program of the course's verify_kv_cache (`grader.checks.decode`).

    Shapes are GPT-2 124M's unless the spec says otherwise (the forward check's weights: the same seed shares them).
    """

    weight: float
    decode_cases: tuple[DecodeCase, ...] = DEFAULT_CASES
    C: int = 768
    NH: int = 12
    L: int = 12
    V: int = 50257
    Vp: int = 50304
    maxT: int = 1024
    seed: int = 0
    init_std: float = 0.02
    logits_max_abs: float = 0.1  # against the float64 gold: the forward check's (the course's test_gpt2) rule
    logits_rmse: float = 4e-3
    course_error: float = 0.1  # against the baseline: verify_kv_cache's min(|a-e|, |a-e| / max(1e-3, |e|)) limit
    # The attention calls' time with the cache against the full recompute's, over the decode steps of a timed case:
    # below this the cache is flagged as recomputing (right logits, nothing saved); speedup_penalty of the weight
    # makes that cost (0: reported only).
    min_attention_speedup: float = 1.5
    speedup_penalty: float = 0.0
    time_limit_s: float = 120.0

    def forward(self, B: int, T: int) -> Forward:
        """The forward pass over B rows of T tokens, with these shapes and weights (the forward check's layout)."""
        return Forward(weight=0.0, B=B, T=T, C=self.C, NH=self.NH, L=self.L, V=self.V, Vp=self.Vp, maxT=self.maxT,
                       seed=self.seed, init_std=self.init_std, generate=1)

    def case(self, name: str) -> DecodeCase:
        return next(c for c in self.decode_cases if c.name == name)

    # What every check's spec says (`grader.checks.CheckSpec`).

    @property
    def name(self) -> str:
        return DECODE

    @property
    def composes(self) -> tuple[str, ...]:
        return FORWARD_KERNELS

    @property
    def cases(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.decode_cases)

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(o for c in self.decode_cases for o in c.outputs))


def load_decode(table: Any, where: str, kernels: tuple[Kernel, ...]) -> Decode:
    """[decode]: the six kernels composed into GPT-2's forward pass, run with the KV cache off and on."""
    read = table_reader(table, where, DECODE_KEYS, "a table with weight, cases, ...")
    check_composable(kernels, where, DECODE)
    defaults = Decode(weight=0.0)
    sizes = {key: read.get(key, int, getattr(defaults, key)) for key in ("C", "NH", "L", "V", "Vp", "maxT", "seed")}
    logits = read.get("logits", dict, {})
    if unknown_rule := set(logits) - {"max_abs", "rmse"}:
        raise SpecError(f"{where} logits: unknown key(s) {sorted(unknown_rule)}; expected max_abs and rmse (the "
                        "course's test_gpt2 rule, against the float64 gold)")
    rule = Reader(logits, f"{where} logits")
    decode = Decode(
        weight=read.get("weight", float, 0.0),
        decode_cases=tuple(_case(t, f"{where} cases[{i}]") for i, t in enumerate(read.get("cases", list)))
        if "cases" in table else DEFAULT_CASES,
        **sizes, init_std=read.get("init_std", float, defaults.init_std),
        logits_max_abs=rule.get("max_abs", float, defaults.logits_max_abs),
        logits_rmse=rule.get("rmse", float, defaults.logits_rmse),
        course_error=read.get("course_error", float, defaults.course_error),
        min_attention_speedup=read.get("min_attention_speedup", float, defaults.min_attention_speedup),
        speedup_penalty=read.get("speedup_penalty", float, defaults.speedup_penalty),
        time_limit_s=read.get("time_limit_s", float, defaults.time_limit_s),
    )
    _check_decode(decode, where)
    return decode


def _case(table: Any, where: str) -> DecodeCase:
    read = table_reader(table, where, CASE_KEYS, f"a table with name, B, prompt and generate, found {table!r}")
    name = read.get("name", str)
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name):
        raise SpecError(f"{where}: key 'name' must be a plain name (letters, digits, '_', '.', '-'), found {name!r}")
    case = DecodeCase(name, B=read.get("B", int), prompt=read.get("prompt", int), generate=read.get("generate", int),
                      runs=read.get("runs", int, 1), gold=read.get("gold", bool, True),
                      timed=read.get("timed", bool, False))
    if case.B < 1 or case.prompt < 1 or case.generate < 2:
        raise SpecError(f"{where} ('{name}'): B and prompt must be >= 1 and generate >= 2 (the prefill's token, then "
                        f"at least one decode step), found B={case.B}, prompt={case.prompt}, generate={case.generate}")
    if not 1 <= case.runs <= MAX_RUNS:
        raise SpecError(f"{where} ('{name}'): key 'runs' must be 1 to {MAX_RUNS}, found {case.runs}")
    return case


def _check_decode(d: Decode, where: str) -> None:
    for key in ("C", "NH", "L", "V", "Vp", "maxT"):
        if getattr(d, key) <= 0:
            raise SpecError(f"{where}: key '{key}' must be > 0, found {getattr(d, key)}")
    if d.C % d.NH or d.Vp < d.V:
        raise SpecError(f"{where}: C ({d.C}) must be a multiple of NH ({d.NH}) and Vp ({d.Vp}) at least V ({d.V})")
    if not d.decode_cases:
        raise SpecError(f"{where}: key 'cases' is empty; give at least one case, or leave the key out for the defaults")
    names = [c.name for c in d.decode_cases]
    if len(set(names)) < len(names):
        raise SpecError(f"{where}: key 'cases': case names repeat: {names}")
    for c in d.decode_cases:
        if c.length > d.maxT:
            raise SpecError(f"{where}: case '{c.name}' reaches position {c.length - 1} (prompt {c.prompt} + generate "
                            f"{c.generate} - 2), beyond the position table's {d.maxT} rows (maxT)")
    if d.weight < 0 or d.time_limit_s <= 0 or d.course_error <= 0 or d.logits_max_abs <= 0 or d.logits_rmse <= 0 \
            or d.min_attention_speedup < 0:
        raise SpecError(f"{where}: weight and min_attention_speedup must be >= 0; time_limit_s, course_error and the "
                        f"logits rule > 0 (found {d.weight}, {d.min_attention_speedup}, {d.time_limit_s}, "
                        f"{d.course_error}, {d.logits_max_abs}, {d.logits_rmse})")
    if not 0 <= d.speedup_penalty <= 1:
        raise SpecError(f"{where}: key 'speedup_penalty' is a share of the check's weight between 0 and 1, found "
                        f"{d.speedup_penalty}")
