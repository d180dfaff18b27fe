"""Gold outputs: the assignment's float64 NumPy truth, or the trusted reference run through the very
same build and run path, as the spec's `gold` says.

Cached by content (the NumPy reference's source, or the reference's build: sources, flags,
toolchain; and the case's inputs), so a class of 300 computes each case's gold once. A cached
entry is memory-mapped, not read: compare touches each element once, and every grade on the
machine shares the page cache. What the sanity check judges (poison left, the largest |gold|) is
measured once, when the gold is computed, and kept in the entry.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from grader.boundary.protocol import never_written
from grader.build import Artifact, build_submission
from grader.cache import content_key, gold_root, is_complete, new_entry, publish_file, publish_folder, staging_path
from grader.cases import Seed, load_inputs, prepare_inputs
from grader.errors import GoldError, SpecError
from grader.runner import Call, run_calls
from grader.sandbox import Sandbox
from grader.assignment import Assignment, Case, Kernel, shape_of
from grader.status import BuildStatus, CallStatus
from grader.threadsafe import load_npy

GoldKey = tuple[str, str]  # (kernel, case)

# Below this, an all-zeros answer would pass: max |gold| must be at least this many atol.
MIN_GOLD_OVER_ATOL = 100
# A secret-seeded case whose gold is below that floor is drawn again this many times at most, then takes the public
# seed's inputs (which the assignment's own checks hold to): a property of one random draw never stops a batch.
REDRAWS = 8
FACTS_FILE = "facts.json"  # in a gold entry: each buffer's GoldFacts, measured when the gold was computed


@dataclass(frozen=True)
class GoldFacts:
    """What the sanity check of one gold buffer judges. Facts, not the verdict: the atol they are
    judged against is the spec's, which may change while the gold (keyed by content) stays."""

    unwritten: bool  # part of it still holds the harness's poison
    largest: float  # max |gold| over its finite elements


def gold_outputs(
    assignment: Assignment, selection: list[tuple[Kernel, Case, Path]], cache_dir: Path, sandbox: Sandbox,
    cuda_arch: str | None = None, strict: bool = True,
) -> dict[GoldKey, dict[str, np.ndarray]]:
    """Gold for each (kernel, case, inputs folder): from the cache, or computed as the spec says.

    Keyed by (kernel name, case name); a variant's kernel shares its base kernel's gold. `strict`: a gold too small
    for its tolerance is an error of the assignment (the public seed's inputs), not a warning (a secret draw's).
    """
    if assignment.gold == "numpy":
        return _numpy_gold(assignment, selection, cache_dir, strict)
    # A variant's copy of a kernel ("req_0/matmul") has its base's gold: the reference's base kernel on the same inputs.
    bases = {k.base: assignment.kernel(k.base) for k, _, _ in selection}
    artifacts = build_submission(assignment, assignment.reference_dir, cache_dir, tuple(bases.values()),
                                 cuda_arch=cuda_arch)
    for artifact in artifacts.values():
        if artifact.status != BuildStatus.BUILT:
            raise GoldError(f"{assignment.reference_dir}: the reference kernel '{artifact.kernel}' does not build:\n"
                            f"{artifact.message}")
    unique = {(k.base, c.name): (bases[k.base], c, inputs) for k, c, inputs in selection}
    folders = {key: _gold_folder(cache_dir, artifacts[key[0]], inputs) for key, (_, _, inputs) in unique.items()}
    missing = [entry for key, entry in unique.items() if not is_complete(folders[key])]
    if missing:
        _compute(assignment, missing, artifacts, folders, sandbox)
    return {(k.name, c.name): _checked_gold(assignment, k, c, folders[(k.base, c.name)], strict)
            for k, c, _ in selection}


def judged_with(kernel: Kernel, produced: dict[str, np.ndarray],
                gold: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What each judged output of one call is compared with: its gold, or for an output `judged_against` another,
    that output as the same call saved it (the submission's own truth, poison and all). The truths themselves are
    left out: they are judged against nothing."""
    truths = {b.judged_against for b in kernel.buffers_with("output")}
    expected = {}
    for buffer in kernel.buffers_with("output"):
        if buffer.name in truths:
            continue
        if buffer.judged_against is None:
            expected[buffer.name] = gold[buffer.name]
        else:  # a truth that was not saved: nothing to match, said as NaN expected everywhere
            truth = produced.get(buffer.judged_against)
            expected[buffer.name] = truth if truth is not None else np.full(gold[buffer.name].shape, np.nan)
    return expected


def _numpy_gold(assignment: Assignment, selection: list[tuple[Kernel, Case, Path]],
                cache_dir: Path, strict: bool = True) -> dict[GoldKey, dict[str, np.ndarray]]:
    """Gold from numpy_reference.py, in float64, computed in this process (the assignment's code, not student code)."""
    truth = _Truth(assignment)
    return {(kernel.name, case.name): _checked_gold(assignment, kernel, case,
                                                    _numpy_folder(truth, kernel, case, inputs, cache_dir), strict)
            for kernel, case, inputs in selection}


class _Truth:
    """numpy_reference.py, loaded at its first use (a cached gold needs none), and its source's version."""

    def __init__(self, assignment: Assignment) -> None:
        self.assignment = assignment
        self.version = hashlib.sha256(assignment.numpy_reference_file.read_bytes()).hexdigest()[:16]
        self._module = None

    @property
    def module(self):
        self._module = self._module or self.assignment.numpy_reference()
        return self._module


def _numpy_folder(truth: _Truth, kernel: Kernel, case: Case, inputs: Path, cache_dir: Path) -> Path:
    """The cache entry of one case's NumPy gold, computed and published first where it is missing."""
    folder = gold_root(cache_dir) / content_key("numpy", truth.version, kernel.base, inputs.name)
    if not is_complete(folder):
        outputs = _call_numpy_reference(truth.assignment, truth.module, kernel, case, inputs)
        staging = new_entry(folder)
        for name, array in outputs.items():
            np.save(staging / f"{name}.npy", array)
        _write_facts(staging / FACTS_FILE, _facts_of(outputs))
        publish_folder(staging, folder)
    return folder


def meaningful_inputs(assignment: Assignment, kernel: Kernel, case: Case, seed: Seed, cache_dir: Path) -> Path:
    """A secret-seeded case's inputs, drawn again (the secret extended by "/redraw-N") while the NumPy gold they give
    is too small for the tolerance to catch an all-zeros answer; after REDRAWS, the public seed's. The gold of the
    draw taken is left in the cache, where the score stage finds it."""
    truth = _Truth(assignment)
    for draw in range(REDRAWS):
        drawn = seed if draw == 0 else Seed(seed.public, f"{seed.secret}/redraw-{draw}")
        inputs = prepare_inputs(assignment, kernel, case, drawn, cache_dir)
        folder = _numpy_folder(truth, kernel, case, inputs, cache_dir)
        facts = _recorded_facts(folder, _gold_arrays(kernel, folder))
        if not any(_too_small(kernel, case, fact) for fact in facts.values()):
            return inputs
    return prepare_inputs(assignment, kernel, case, Seed(seed.public), cache_dir)


def _call_numpy_reference(assignment: Assignment, truth, kernel: Kernel, case: Case,
                          inputs: Path) -> dict[str, np.ndarray]:
    where = f"{assignment.numpy_reference_file}: {kernel.base}(case {case.name!r})"
    function = getattr(truth, kernel.base, None)
    if not callable(function):
        raise SpecError(f"{assignment.numpy_reference_file}: expected a function named '{kernel.base}'")
    arrays = {name: (None if name in case.null else array) for name, array in load_inputs(inputs).items()}
    try:
        outputs = function(**arrays, **case.params)
    except Exception as error:
        raise SpecError(f"{where} raised {type(error).__name__}: {error}") from error
    expected = {b.name: shape_of(b, case.params) for b in kernel.buffers_with("output")}
    if not isinstance(outputs, dict) or set(outputs) != set(expected):
        raise SpecError(f"{where} returned {sorted(outputs) if isinstance(outputs, dict) else type(outputs).__name__}; "
                        f"expected arrays named {sorted(expected)}")
    for name, shape in expected.items():
        if np.shape(outputs[name]) != shape:
            raise SpecError(f"{where}: '{name}' has shape {list(np.shape(outputs[name]))}; the spec says {list(shape)}")
    return {name: np.asarray(array, dtype=np.float64) for name, array in outputs.items()}


def _gold_folder(cache_dir: Path, artifact: Artifact, inputs: Path) -> Path:
    assert artifact.library is not None
    return gold_root(cache_dir) / content_key("reference", artifact.library.parent.name, inputs.name)


def _compute(assignment: Assignment, missing: list[tuple[Kernel, Case, Path]], artifacts: dict[str, Artifact],
             folders: dict[GoldKey, Path], sandbox: Sandbox) -> None:
    # Staging folders of this computation alone: another grader may be writing the same gold.
    staging = {(k.name, c.name): staging_path(folders[(k.name, c.name)]) for k, c, _ in missing}
    calls = [Call(k, c, artifacts[k.name].library, inputs, staging[(k.name, c.name)])  # type: ignore[arg-type]
             for k, c, inputs in missing]
    report = run_calls(assignment, calls, sandbox)
    for call, outcome in zip(calls, report.outcomes):
        if outcome.status != CallStatus.OK:
            raise GoldError(f"{assignment.reference_dir}: the reference kernel '{call.kernel.name}' {outcome.status} "
                            f"on case '{call.case.name}': {outcome.message}")
        produced = {b.name: call.output_dir / f"{b.name}.npy" for b in call.kernel.buffers_with("output")}
        arrays = {name: load_npy(path, mmap=True) for name, path in produced.items() if path.is_file()}
        _write_facts(call.output_dir / FACTS_FILE, _facts_of(arrays))
        publish_folder(call.output_dir, folders[(call.kernel.name, call.case.name)])


def _checked_gold(assignment: Assignment, kernel: Kernel, case: Case, folder: Path,
                  strict: bool = True) -> dict[str, np.ndarray]:
    """A cached entry's arrays, mapped read-only, once its facts pass the check."""
    gold = _gold_arrays(kernel, folder)
    _check_gold(assignment, kernel, case, _recorded_facts(folder, gold), strict)
    return gold


def _gold_arrays(kernel: Kernel, folder: Path) -> dict[str, np.ndarray]:
    return {b.name: np.asarray(load_npy(folder / f"{b.name}.npy", mmap=True)) for b in kernel.buffers_with("output")}


def _facts_of(outputs: dict[str, np.ndarray]) -> dict[str, GoldFacts]:
    return {name: GoldFacts(bool(never_written(gold).any()), float(np.abs(gold[np.isfinite(gold)]).max(initial=0.0)))
            for name, gold in outputs.items()}


def _write_facts(path: Path, facts: dict[str, GoldFacts]) -> None:
    publish_file(path, json.dumps({name: asdict(f) for name, f in facts.items()}).encode())


def _recorded_facts(folder: Path, gold: dict[str, np.ndarray]) -> dict[str, GoldFacts]:
    """The entry's facts; for an entry without them (cached before they were kept), measured now and kept."""
    try:
        saved = json.loads((folder / FACTS_FILE).read_text())
        return {name: GoldFacts(bool(saved[name]["unwritten"]), float(saved[name]["largest"])) for name in gold}
    except (OSError, ValueError, KeyError, TypeError):
        pass
    facts = _facts_of(gold)
    try:
        _write_facts(folder / FACTS_FILE, facts)  # whole or not at all: a reader never sees half a file
    except OSError:
        pass  # a read-only cache still grades; it measures again next time
    return facts


def _too_small(kernel: Kernel, case: Case, fact: GoldFacts) -> float | None:
    """The floor max |gold| is below (an all-zeros answer could pass the case), or None."""
    floor = MIN_GOLD_OVER_ATOL * kernel.tolerance_for(case).atol
    return floor if fact.largest < floor else None


def _check_gold(assignment: Assignment, kernel: Kernel, case: Case, facts: dict[str, GoldFacts],
                strict: bool = True) -> None:
    """Raise where the gold is unusable: unwritten (a broken reference), or, where `strict` (the public seed: a
    property of the assignment), too small for its tolerance. Under a secret seed a small gold is one draw's, not the assignment's
    fault: it is said on stderr and the case graded as drawn (NumPy gold never gets here: its inputs are drawn again)."""
    where = f"{assignment.spec_file} kernel '{kernel.name}' case '{case.name}'"
    for name, fact in facts.items():
        if fact.unwritten:
            raise GoldError(f"{where}: the reference left part of '{name}' unwritten")
        floor = _too_small(kernel, case, fact)
        if floor is None:
            continue
        words = (f"{where}: max |gold| of '{name}' is {fact.largest:.3g}, below {MIN_GOLD_OVER_ATOL} x "
                 f"atol = {floor:.3g}, so an all-zeros answer could pass")
        if strict:
            raise SpecError(f"{words}; use larger inputs or a smaller atol")
        print(f"warning: {words} under this secret seed; the case is graded as drawn", file=sys.stderr)
