"""The harness's half of the decode check: the course's verify_kv_cache program on the device, one case a call.

The student's kernels run the forward check's steps (`grader.checks.program`) over one activation allocation laid
out for the case's longest pass; a pass over fewer tokens gives the same slices, each tensor packed at its start,
and zeroed first whenever B or T changes, as the course's program reallocates (and zeroes) its activations then.

    baseline   the cache off (g_enable_kv_cache false): for each step t a full forward over prompt + t tokens,
               the last position's logits kept, its time and its attention calls' time measured
    KV run     the cache on: the globals reset as the course's harness resets them (g_kv_cache freed and nullptr,
               g_is_prefill true, g_layer_idx 0, g_current_pos 0); a prefill over the prompt (its last position's
               logits are step 0's), then for each step t >= 1 a forward over the one token at position
               prompt + t - 1, with g_current_pos set to that position and the encoder given wpe + position * C, as the
               course's harness gives it. Repeated `runs` times in this one process: what leaks between runs shows.

Every pass feeds the case's own sequence (teacher forcing), so the KV runs' logits and the baseline's are those of
the same tokens. Nothing here is gold: the grader compares afterwards.

The globals: each of the variant's libraries holds its own copy (loaded privately, each defines them), while the
course's program has one. The harness keeps one set and writes it into a library's copy before each of its calls
and reads it back after: sequential host code sees exactly one set of globals, whichever kernel file reads them
(a store of K and V fused into the QKV matmul included).

NumPy, `grader.boundary` and `grader.checks.program` only.
"""

from __future__ import annotations

import ctypes
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from grader.boundary.device import Completion
from grader.boundary.protocol import Composition, ScalarArgument, SliceArgument, Step
from grader.checks.program import Emit, Program, seal

if TYPE_CHECKING:
    from grader.boundary.device import Device

# The five globals the course's verify_kv_cache.cu defines, with the C type of each (a variant's `defines`).
GLOBALS = {"g_enable_kv_cache": ctypes.c_bool, "g_kv_cache": ctypes.c_void_p, "g_layer_idx": ctypes.c_int,
           "g_is_prefill": ctypes.c_bool, "g_current_pos": ctypes.c_int}
TIMES, MEMORY = "times", "memory"


@dataclass(frozen=True)
class Run:
    """What a decode call's composition carries of its own (its `settings`)."""

    B: int
    prompt: int
    generate: int
    runs: int
    C: int
    V: int
    Vp: int
    logits_offset: int  # where the logits (B, T, Vp) start in the activations
    forward_steps: int  # the composition's steps: a forward over `length` tokens, then the same over 1 token
    length: int
    position: tuple[int, int]  # (step, argument) of the one-token forward's position table (the encoder's wpe)
    attention: tuple[int, ...]  # the steps that call attention


class Globals:
    """The program's one set of the five globals, kept in step with each library's copy around its calls."""

    def __init__(self, libraries: dict[str, Any]) -> None:
        self.values: dict[str, Any] = {name: 0 for name in GLOBALS}
        self.copies: dict[str, dict[str, Any]] = {}
        self.missing: dict[str, list[str]] = {}
        for kernel, library in libraries.items():
            found = {}
            for name, ctype in GLOBALS.items():
                try:
                    found[name] = ctype.in_dll(library, name)
                except ValueError:
                    self.missing.setdefault(kernel, []).append(name)
            if kernel not in self.missing:
                self.copies[kernel] = found

    def set(self, **values: Any) -> None:
        self.values.update(values)

    def before(self, kernel: str) -> None:
        for name, copy in self.copies.get(kernel, {}).items():
            copy.value = self.values[name]

    def after(self, kernel: str) -> None:
        for name, copy in self.copies.get(kernel, {}).items():
            self.values[name] = copy.value or 0  # a null pointer reads as None


class Decoder:
    """One case's program: its passes over the composition's steps, the globals and the times."""

    def __init__(self, program: Program, run: Run, globals_: Globals, tokens: np.ndarray) -> None:
        self.program, self.run, self.globals, self.tokens = program, run, globals_, tokens
        steps = program.composition.steps
        self.longest, self.single = steps[:run.forward_steps], steps[run.forward_steps:]
        self.shape: tuple[int, int] | None = None  # the (B, T) the activations hold now
        self.cache: dict[int, tuple[Step, ...]] = {}

    def steps_at(self, T: int) -> tuple[Step, ...]:
        """The forward over T tokens: the longest's slices; each scalar that grows with the tokens (T, N) at T's value,
        which the one-token forward's gives per token."""
        if T not in self.cache:
            self.cache[T] = tuple(
                dataclasses.replace(long, arguments=tuple(
                    dataclasses.replace(a, value=one_a.value * T)  # type: ignore[union-attr]
                    if isinstance(a, ScalarArgument) and a.value != one_a.value else a
                    for a, one_a in zip(long.arguments, one.arguments)))
                for long, one in zip(self.longest, self.single))
        return self.cache[T]

    def at_position(self, position: int) -> tuple[Step, ...]:
        """The one-token forward of the token at `position`: the position table from its row on."""
        steps = list(self.steps_at(1))
        index, argument = self.run.position
        arguments = list(steps[index].arguments)
        table = arguments[argument]
        assert isinstance(table, SliceArgument)
        arguments[argument] = dataclasses.replace(table, offset=table.offset + position * self.run.C)
        steps[index] = dataclasses.replace(steps[index], arguments=tuple(arguments))
        return tuple(steps)

    def forward(self, tokens: np.ndarray, steps: tuple[Step, ...], where: str) -> tuple[np.ndarray, float, float] | \
            Completion:
        """One forward over `tokens` (B, T): the last position's logits (B, Vp), its kernels' time and its attention
        calls' (ms), or how a call failed, said with `where`."""
        B, T = tokens.shape
        program, device = self.program, self.program.device
        if self.shape != (B, T):  # the course's program reallocates its activations then, zeroed
            device.fill(program.spaces["activations"], 0, program.composition.spaces["activations"].count, 0)
            self.shape = (B, T)
        device.write(program.spaces["tokens"], 0, np.ascontiguousarray(tokens, dtype=np.int32).reshape(-1))
        total = attention = 0.0
        for number, step in enumerate(steps):
            self.globals.before(step.kernel)
            before = (program.device_ms, program.wall_ms)
            failed = program.call(step)
            self.globals.after(step.kernel)
            if failed is not None:
                return dataclasses.replace(failed, error=f"{where}, step {number + 1} of {len(steps)} "
                                                         f"({step.kernel}): {failed.error}")
            # The call's kernel time (its events), or its wall time where the device has no clock.
            spent = (program.device_ms - (before[0] or 0.0) if program.device_ms is not None
                     else program.wall_ms - before[1])
            total += spent
            if number in self.run.attention:
                attention += spent
        rows = [device.read(program.spaces["activations"], self.run.logits_offset + (b * T + T - 1) * self.run.Vp,
                            self.run.Vp) for b in range(B)]
        return np.stack(rows)[:, :self.run.V], total, attention

    def baseline(self, logits: np.ndarray, times: np.ndarray) -> Completion | None:
        self.globals.set(g_enable_kv_cache=False)
        for t in range(self.run.generate):
            T = self.run.prompt + t
            done = self.forward(self.tokens[:, :T], self.steps_at(T), f"the baseline (the cache off), token {t + 1}")
            if isinstance(done, Completion):
                return done
            logits[t], times[t, 0], times[t, 1] = done
        return None

    def kv_run(self, number: int, logits: np.ndarray, times: np.ndarray) -> Completion | None:
        """One KV run from a fresh state; its cache left allocated (the caller measures, then frees it)."""
        self.globals.set(g_enable_kv_cache=True, g_kv_cache=0, g_is_prefill=True, g_layer_idx=0, g_current_pos=0)
        run = f"KV run {number}" if self.run.runs > 1 else "the KV pass"
        prompt = self.run.prompt
        done = self.forward(self.tokens[:, :prompt], self.steps_at(prompt), f"{run}'s prefill")
        if isinstance(done, Completion):
            return done
        logits[0], times[0, 0], times[0, 1] = done
        for t in range(1, self.run.generate):
            position = prompt + t - 1
            self.globals.set(g_current_pos=position)
            done = self.forward(self.tokens[:, position: position + 1], self.at_position(position),
                                f"{run}'s decode step {t} (position {position})")
            if isinstance(done, Completion):
                return done
            logits[t], times[t, 0], times[t, 1] = done
        return None

    def free_cache(self) -> None:
        """The course's harness's reset: cudaFree(g_kv_cache), then nullptr (what it points at is the code's)."""
        address = int(self.globals.values["g_kv_cache"] or 0)
        free = getattr(self.program.device, "free_pointer", None)
        if address and free is not None:
            free(address)
        self.globals.set(g_kv_cache=0)


def run(composition: Composition, output_dir: Path, device: Device, libraries: dict[str, Any], emit: Emit,
        index: int) -> Completion:
    """Run the case's baseline and its KV runs; every output is saved under `output_dir` and sealed."""
    settings = dict(composition.settings)
    settings["position"] = tuple(settings["position"])
    settings["attention"] = tuple(settings["attention"])
    case = Run(**settings)
    output_dir.mkdir(parents=True, exist_ok=True)
    globals_ = Globals(libraries)
    if "attention" not in globals_.copies:
        missing = ", ".join(globals_.missing.get("attention", []))
        return Completion(1, 0.0, None, f"the attention library does not define {missing}: the KV-cache program "
                                        "needs the five globals the course's harness defines (the variant's "
                                        "`defines`)")
    program = Program(composition, device, libraries)
    tokens = np.load(composition.spaces["tokens"].file).astype(np.int32)
    decoder = Decoder(program, case, globals_, tokens)
    shape = (case.generate, case.B, case.V)
    times = np.zeros((1 + case.runs, case.generate, 2))
    baseline = np.zeros(shape, np.float32)
    if failed := decoder.baseline(baseline, times[0]):
        return program.finished(failed)
    seal(output_dir, "baseline", baseline, emit, index)
    # Per run: free device bytes before its prefill and after its last step, and whether g_kv_cache was set.
    memory = np.zeros((case.runs, 3), np.int64)
    for number in range(1, case.runs + 1):
        logits = np.zeros(shape, np.float32)
        memory[number - 1, 0] = device.free_bytes() or 0
        failed = decoder.kv_run(number, logits, times[number])
        memory[number - 1, 1] = device.free_bytes() or 0
        memory[number - 1, 2] = int(bool(globals_.values["g_kv_cache"]))
        decoder.free_cache()
        if failed:
            return program.finished(failed)
        seal(output_dir, f"kv-{number}", logits, emit, index)  # before the next run's student code
    seal(output_dir, TIMES, times, emit, index)
    seal(output_dir, MEMORY, memory, emit, index)
    return program.finished()
