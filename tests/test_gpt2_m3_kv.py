"""gpt2-m3's req_6 (the KV cache) without a GPU: the [decode] table, the variant's `defines` (the five globals the
course's harness defines) built into its libraries with nvcc, the check's plan, and the decode harness run end to end
on a NumPy device whose attention keeps a KV cache in the globals of real shared libraries, the cache right and
wrong in each way the course's contract can be broken: the verdicts, the hints, the flag and its cost."""

from __future__ import annotations

import ctypes
import dataclasses
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from grader.boundary.cpp_device import HostDevice
from grader.boundary.device import Completion
from grader.boundary.protocol import Event, Plan, PlannedCall, ScalarArgument, Sealed, SliceArgument
from grader.build import build_submission
from grader.checks import check_named
from grader.checks.decode import harness_half as harness
from grader.checks.decode.check import case_steps
from grader.checks.decode.spec import DEFAULT_CASES, Decode
from grader.checks.forward.gold import gold_pass
from grader.checks.forward.inputs import PARAMETERS_FILE
from grader.checks.forward.layout import steps_of
from grader.errors import SpecError
from grader.results import KernelResult
from grader.runner import CallOutcome
from grader.samples import compose, variants
from grader.assignment import Assignment, load_assignment
from grader.assignment.shapes import shape_of
from grader.status import BuildStatus, CallStatus, CaseStatus, KernelStatus
from grader.targets import target_named

from conftest import copy_assignment

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
COURSE_GLOBALS = ("g_enable_kv_cache", "g_kv_cache", "g_layer_idx", "g_is_prefill", "g_current_pos")


@pytest.fixture(scope="module")
def m3() -> Assignment:
    return load_assignment("gpt2-m3")


# The table.

def test_req_6_is_graded_on_the_decode_check_alone_with_the_courses_globals(m3: Assignment) -> None:
    variant = m3.variant("req_6")
    assert variant.kernels == ("decode",) and variant.weight == 12
    assert [(k.name, k.weight) for k in m3.check_kernels if k.variant == "req_6"] == [("req_6/decode", 12.0)]
    assert "decode" not in {k.name for k in m3.check_kernels}  # variant-only: nothing on the base folder
    composed = [k for k in m3.kernels if k.variant == "req_6"]
    assert [k.base for k in composed] == ["encoder", "layernorm", "matmul", "attention", "residual", "gelu"]
    assert all(k.weight == 0 for k in composed)
    assert all([d.split("=")[0].split()[-1].lstrip("*") for d in k.defines] == list(COURSE_GLOBALS) for k in composed)
    assert list(harness.GLOBALS) == list(COURSE_GLOBALS)
    assert not any(k.defines for k in m3.kernels if k.variant != "req_6")


def test_the_packs_decode_table_is_the_default_cases_with_the_forward_checks_weights(m3: Assignment) -> None:
    decode = m3.check("decode")
    assert isinstance(decode, Decode)
    assert decode.decode_cases == DEFAULT_CASES
    assert decode.cases == ("prefill-decode-b1", "prefill-decode-b4", "second-run", "speed-up")
    assert decode.seed == m3.check("forward").seed  # one weights file for both checks
    assert [c.name for c in decode.decode_cases if c.timed] == ["speed-up"]
    assert decode.case("second-run").runs == 2 and decode.case("second-run").outputs == (
        "baseline", "kv-1", "kv-2", "times", "memory")
    assert decode.speedup_penalty == 0 and decode.min_attention_speedup == 1.5


def load_table(tmp_path: Path, table: str) -> Assignment:
    pack = copy_assignment("gpt2-m3", tmp_path)
    copy_assignment("gpt2-m2", tmp_path)
    copy_assignment("gpt2-m1", tmp_path)
    spec = pack / "assignment.toml"
    text = spec.read_text()
    spec.write_text(text[:text.index("\n[decode]\n") + 1] + table)
    return load_assignment(pack)


@pytest.mark.parametrize("table, message", [
    ("[decode]\nweight = 1\nsteps = 3\n", "unknown key(s) ['steps']"),
    ("[decode]\nweight = 1\ncases = []\n", "key 'cases' is empty"),
    ("[decode]\ncases = [{ name = 'a', B = 1, prompt = 4, generate = 1 }]\n", "generate >= 2"),
    ("[decode]\ncases = [{ name = 'a', B = 1, prompt = 4, generate = 2, runs = 4 }]\n", "key 'runs' must be 1 to 3"),
    ("[decode]\ncases = [{ name = 'a', B = 1, prompt = 4, generate = 2, wait = 1 }]\n", "unknown key(s) ['wait']"),
    ("[decode]\ncases = [{ name = 'a', B = 1, prompt = 4, generate = 2 }, { name = 'a', B = 2, prompt = 4, "
     "generate = 2 }]\n", "case names repeat"),
    ("[decode]\ncases = [{ name = 'a', B = 1, prompt = 1000, generate = 40 }]\n", "beyond the position table's 1024"),
    ("[decode]\nspeedup_penalty = 2\n", "key 'speedup_penalty' is a share"),
    ("[decode]\nlogits = { max_abs = 0.1, mean = 1 }\n", "unknown key(s) ['mean']"),
])
def test_a_bad_decode_table_is_named_with_its_key(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(SpecError, match=r"assignment\.toml \[decode\]") as error:
        load_table(tmp_path, table)
    assert message in str(error.value)


@pytest.mark.parametrize("definition", ["int x; int y", "#define X 1", "bool", "int x = "])
def test_a_define_that_is_not_one_definition_is_refused(tmp_path: Path, definition: str) -> None:
    pack = copy_assignment("gpt2-m3", tmp_path)
    copy_assignment("gpt2-m2", tmp_path)
    copy_assignment("gpt2-m1", tmp_path)
    spec = pack / "assignment.toml"
    spec.write_text(spec.read_text().replace('"int g_current_pos = 0"]', f'"int g_current_pos = 0", "{definition}"]'))
    with pytest.raises(SpecError, match=r"variant 'req_6': key 'defines': .* is not one C\+\+ variable definition"):
        load_assignment(pack)


def test_the_shim_defines_the_variants_globals_after_the_header(m3: Assignment) -> None:
    shim = target_named("cuda").shim_source(m3.kernel("req_6/matmul"))
    header = shim.index('#include "kernels/matmul.cuh"')
    assert all(shim.index(f"{d};\n") > header for d in m3.kernel("req_6/matmul").defines)
    assert "g_enable_kv_cache" not in target_named("cuda").shim_source(m3.kernel("req_4/attention"))


# The globals built and linked (nvcc; nothing runs).

def undefined_and_defined(library: Path) -> tuple[set[str], set[str]]:
    listing = subprocess.run(["nm", "-D", str(library)], capture_output=True, text=True, check=True).stdout
    rows = [line.split() for line in listing.splitlines()]
    undefined = {r[-1] for r in rows if r[-2] == "U"}
    return undefined & set(COURSE_GLOBALS), {r[-1] for r in rows if r[-2] in "BD"} & set(COURSE_GLOBALS)


@needs_nvcc
def test_req_6_attention_links_with_the_globals_defined_and_its_symbols_are_found(m3: Assignment, tmp_path: Path,
                                                                                  cache_dir: Path) -> None:
    folder = compose(m3, None, tmp_path / "reference")
    kernels = (m3.kernel("req_6/attention"), m3.kernel("req_6/matmul"))
    built = build_submission(m3, folder, cache_dir, kernels=kernels)
    for kernel in kernels:
        artifact = built[kernel.name]
        assert artifact.status is BuildStatus.BUILT, artifact.message
        assert undefined_and_defined(artifact.library) == (set(), set(COURSE_GLOBALS))  # type: ignore[arg-type]
    # Found by name, as the decode harness finds them: each library its own copy, the cache off until it is set.
    libraries = {k.base: ctypes.CDLL(str(built[k.name].library)) for k in kernels}
    found = harness.Globals(libraries)
    assert not found.missing and set(found.copies) == {"attention", "matmul"}
    found.set(g_enable_kv_cache=True, g_current_pos=17)
    found.before("attention")
    assert ctypes.c_bool.in_dll(libraries["attention"], "g_enable_kv_cache").value is True
    assert ctypes.c_int.in_dll(libraries["attention"], "g_current_pos").value == 17
    assert ctypes.c_bool.in_dll(libraries["matmul"], "g_enable_kv_cache").value is False


@needs_nvcc
def test_without_the_variants_defines_the_kv_attention_needs_the_globals_from_elsewhere(m3: Assignment,
                                                                                        tmp_path: Path,
                                                                                        cache_dir: Path) -> None:
    """Why `defines`: laid over kernels/ but built as a kernel of no variant, the extern globals stay undefined, and
    the library cannot be loaded (the course's test_gpt2 cannot link it either)."""
    folder = compose(m3, None, tmp_path / "reference")
    shutil.copyfile(folder / "kernels_req_6" / "attention.cuh", folder / "kernels" / "attention.cuh")
    shutil.copyfile(folder / "kernels_req_6" / "attention_baseline.cuh", folder / "kernels" / "attention_baseline.cuh")
    artifact = build_submission(m3, folder, cache_dir, kernels=(m3.kernel("attention"),))["attention"]
    assert artifact.status is BuildStatus.BUILT, artifact.message
    assert undefined_and_defined(artifact.library) == (set(COURSE_GLOBALS), set())  # type: ignore[arg-type]
    with pytest.raises(OSError, match="undefined symbol: g_"):
        ctypes.CDLL(str(artifact.library))


@needs_nvcc
def test_every_req_6_sample_builds_with_the_globals(m3: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    samples = [s for s in variants(m3) if s.kernel == "req_6/decode"]
    assert {s.name for s in samples} == {"course-kv-cache", "mutant-kv-ignores-current-pos",
                                         "mutant-kv-leaks-between-runs", "mutant-kv-recomputes"}
    for sample in samples:
        folder = compose(m3, sample, tmp_path / sample.name)
        artifact = build_submission(m3, folder, cache_dir, kernels=(m3.kernel("req_6/attention"),))["req_6/attention"]
        assert artifact.status is BuildStatus.BUILT, (sample.name, artifact.message)
        assert undefined_and_defined(artifact.library) == (set(), set(COURSE_GLOBALS))  # type: ignore[arg-type]


# The plan.

def test_each_case_is_one_composed_call_of_two_forwards_in_one_layout(m3: Assignment, tmp_path: Path) -> None:
    decode = m3.check("decode")
    libraries = {name: f"/libraries/{name}.so" for name in decode.composes}
    plan = check_named("decode").plan(m3, decode, libraries, tmp_path)
    assert [case for case, _ in plan] == list(decode.cases)
    for (name, composition), case in zip(plan, decode.decode_cases):
        settings = harness.Run(**{**composition.settings, "position": tuple(composition.settings["position"]),
                                  "attention": tuple(composition.settings["attention"])})
        assert settings.forward_steps == 1 + 10 * 12 + 2 and len(composition.steps) == 2 * settings.forward_steps
        assert settings.attention == tuple(3 + 10 * layer for layer in range(12))
        single = composition.steps[settings.forward_steps:]
        step, argument = settings.position
        assert single[step].kernel == "encoder" and single[step].arguments[argument].name == "wpe"
        assert composition.sealed == case.outputs
        assert composition.spaces["tokens"].count == case.B * case.length
        # The plan crosses to the harness as JSON, and back unchanged.
        call = PlannedCall("req_6/decode", name, "", str(tmp_path), str(tmp_path), (), composition)
        assert Plan("cuda", "m", False, None, (call,)).to_json() == Plan.from_json(
            Plan("cuda", "m", False, None, (call,)).to_json()).to_json()


def called(step: Any) -> tuple[str, list[tuple[Any, ...]]]:
    """What a step's call passes: each pointer's allocation and offset (its count and shape are the spec's, for gold
    and guards alone), each scalar's value."""
    return step.kernel, [(a.name, a.value) if isinstance(a, ScalarArgument) else (a.name, a.space, a.offset, a.null)
                         for a in step.arguments]


def test_the_harness_derives_each_length_from_the_two_forwards_as_the_layout_would(m3: Assignment) -> None:
    """Every forward the harness runs (the prefill, each baseline step, each decode step) is the layout's own: the
    same slices as the longest pass's tensors, packed at their starts; T and N at that length; the decode step's
    position table from its row."""
    decode = m3.check("decode")
    case = decode.case("prefill-decode-b4")
    full, one = case_steps(m3, decode, case)
    program = type("P", (), {"composition": type("C", (), {"steps": tuple(s.plan for s in (*full, *one))})(),
                             "device": None})()
    settings = harness.Run(B=case.B, prompt=case.prompt, generate=case.generate, runs=1, C=decode.C, V=decode.V,
                           Vp=decode.Vp, logits_offset=0, forward_steps=len(full), length=case.length, position=(0, 3),
                           attention=())
    decoder = harness.Decoder(program, settings, None, np.zeros((case.B, case.length)))  # type: ignore[arg-type]
    kernels = {k.name: k for k in m3.base_kernels}
    longest = decode.forward(case.B, case.length)
    for T in (1, case.prompt, case.length - 1, case.length):
        expected = steps_of(decode.forward(case.B, T), kernels, slots=longest)
        assert [called(s) for s in decoder.steps_at(T)] == [called(s.plan) for s in expected]
    moved = decoder.at_position(20)[0].arguments[3]
    assert isinstance(moved, SliceArgument) and moved.name == "wpe"
    assert moved.offset == one[0].plan.arguments[3].offset + 20 * decode.C  # type: ignore[union-attr]
    assert decoder.at_position(20)[1:] == decoder.steps_at(1)[1:]


# The harness end to end on a NumPy device (small shapes), the kernels the assignment's float64 truth, attention's
# cache semantics as the course's template has them, in the globals of real shared libraries (one per kernel).

SMALL = """[decode]
variant_only = true
weight = 1
C = 32
NH = 2
L = 2
V = 100
Vp = 128
maxT = 64
seed = 3
cases = [
  { name = "b1", B = 1, prompt = 5, generate = 4 },
  { name = "b3", B = 3, prompt = 4, generate = 5 },
  { name = "second-run", B = 2, prompt = 3, generate = 3, runs = 2 },
  { name = "speed", B = 2, prompt = 20, generate = 4, gold = false, timed = true },
]
"""


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Assignment:
    return load_table(tmp_path_factory.mktemp("small"), SMALL)


@pytest.fixture(scope="module")
def globals_libraries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A library per kernel, each with its own copy of the five globals (as each of the variant's has)."""
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed")
    folder = tmp_path_factory.mktemp("globals")
    source = folder / "globals.cpp"
    source.write_text("".join(f"{d};\n" for d in load_assignment("gpt2-m3").variant("req_6").defines))
    subprocess.run(["g++", "-shared", "-fPIC", str(source), "-o", str(folder / "globals.so")], check=True)
    libraries = {}
    for name in ("encoder", "layernorm", "matmul", "attention", "residual", "gelu"):
        shutil.copyfile(folder / "globals.so", folder / f"{name}.so")  # another file: another copy of the globals
        libraries[name] = ctypes.CDLL(str(folder / f"{name}.so"))
    return libraries


class CacheDevice(HostDevice):
    """The CPU as a GPU: each step is its kernel's float64 truth (rounded to float32, as the kernels' outputs are);
    attention keeps a KV cache as the course's template does, in `mode`'s way, its state in the library's globals."""

    def __init__(self, assignment: Assignment, libraries: dict[str, Any], mode: str = "cache") -> None:
        super().__init__()
        decode = assignment.check("decode")
        self.truth, self.L, self.mode = assignment.numpy_reference(), decode.L, mode
        self.kernels = {k.name: k for k in assignment.base_kernels}
        self.tables = {"V": decode.Vp, "maxT": decode.maxT}
        self.kernel_of = {id(library): name for name, library in libraries.items()}
        self.caches: dict[int, np.ndarray] = {}
        self.freed: list[int] = []
        self.next_position = 0  # "leak": a position kept beside the globals, never reset
        self.free = 1 << 40

    def free_bytes(self) -> int:
        return self.free

    def free_pointer(self, address: int) -> str:
        self.free += self.caches.pop(address).nbytes
        self.freed.append(address)
        return ""

    def call(self, library: Any, arguments: list[tuple[Any, Any]]) -> Completion:
        kernel = self.kernel_of[id(library)]
        scalars = {a.name: a.value for a, _ in arguments if isinstance(a, ScalarArgument)}
        # As the kernel sees its buffers: shaped by this call's scalars (the plan's shapes are the longest pass's).
        shapes = {a.name: shape_of(self.kernels[kernel].buffer(a.name), {**scalars, **self.tables})
                  for a, _ in arguments if isinstance(a, SliceArgument)}
        views = {a.name: (s.allocation[s.margin: s.margin + int(np.prod(shapes[a.name]))].reshape(shapes[a.name])
                          if s else None) for a, s in arguments if isinstance(a, SliceArgument)}
        inputs = {a.name: views[a.name] for a, _ in arguments if isinstance(a, SliceArgument) and a.role == "input"}
        milliseconds = 0.01
        if kernel == "attention":
            out, milliseconds = self.attention(library, views["inp"], **scalars)
        else:
            out = getattr(self.truth, kernel)(**inputs, **scalars)["out"]
        if kernel == "matmul" and self.mode == "fused" and scalars["OC"] == 3 * scalars["C"]:
            # K and V stored by the QKV matmul (the template's "CAN BE FUSED"), by the globals as matmul's copy has them.
            state = self.state(library)
            if state["g_enable_kv_cache"].value:
                B, T, C = scalars["B"], scalars["T"], scalars["C"]
                self.store(state, np.asarray(out).reshape(B, T, 3, C), B, T, C)
        views["out"][...] = np.asarray(out).reshape(views["out"].shape)
        return Completion(0, milliseconds, None)

    @staticmethod
    def state(library: Any) -> dict[str, Any]:
        return {name: ctype.in_dll(library, name) for name, ctype in harness.GLOBALS.items()}

    def store(self, state: dict[str, Any], qkv: np.ndarray, B: int, T: int, C: int) -> int:
        """K and V of the call's tokens into the layer's cache (allocated first where g_kv_cache is nullptr); where."""
        if not state["g_kv_cache"].value:
            address = 4096 * (len(self.caches) + len(self.freed) + 1)
            self.caches[address] = np.zeros((self.L, 2, B, 64, C))
            self.free -= self.caches[address].nbytes
            state["g_kv_cache"].value = address
        cache = self.caches[state["g_kv_cache"].value][state["g_layer_idx"].value]
        if state["g_is_prefill"].value:
            start = self.next_position if self.mode == "leak" else 0
        else:
            start = {"ignores-position": T - 1, "leak": self.next_position}.get(self.mode, state["g_current_pos"].value)
        cache[:, :, start: start + T] = qkv[:, :, 1:].transpose(2, 0, 1, 3)
        return start

    def attention(self, library: Any, inp: np.ndarray, B: int, T: int, C: int, NH: int) -> tuple[np.ndarray, float]:
        state = self.state(library)
        full = self.truth.attention(inp=inp, B=B, T=T, C=C, NH=NH)["out"]
        if not state["g_enable_kv_cache"].value:
            return full, 1e-3 * T * T
        qkv = inp.reshape(-1)[: B * T * 3 * C].reshape(B, T, 3, C).astype(np.float64)
        if self.mode == "fused":  # stored by the QKV matmul just before
            position = T - 1 if state["g_is_prefill"].value else state["g_current_pos"].value
        else:
            position = self.store(state, qkv, B, T, C) + T - 1
        cache = self.caches[state["g_kv_cache"].value][state["g_layer_idx"].value]
        layer_done = state["g_layer_idx"].value + 1 == self.L
        state["g_layer_idx"].value = 0 if layer_done else state["g_layer_idx"].value + 1
        if state["g_is_prefill"].value:
            if layer_done:
                state["g_is_prefill"].value = False
                self.next_position += T
            return full, 1e-3 * T * T
        HS = C // NH
        q = qkv[:, 0, 0].reshape(B, NH, HS)
        keys, values = (cache[i, :, : position + 1].reshape(B, position + 1, NH, HS) for i in (0, 1))
        scores = np.einsum("bhd,bthd->bht", q, keys) / np.sqrt(HS)
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        if layer_done:
            state["g_current_pos"].value += 1
            self.next_position += 1
        cost = (position + 1) ** 2 if self.mode == "recompute" else position + 1
        return np.einsum("bht,bthd->bhd", weights, values).reshape(B, C), 1e-3 * cost


def run_decode(small: Assignment, libraries: dict[str, Any], tmp_path: Path, cache_dir: Path, mode: str,
               penalty: float = 0.0) -> KernelResult:
    """Every case of the small table through the decode harness (one process, in order), then judged."""
    check = check_named("decode")
    spec = dataclasses.replace(small.check("decode"), speedup_penalty=penalty)
    inputs = check.prepare_inputs(small, spec, cache_dir)
    device = CacheDevice(small, libraries, mode)
    outcomes = {}
    for index, (case, composition) in enumerate(check.plan(small, spec, {k: "" for k in spec.composes}, inputs)):
        seals: list[Sealed] = []

        def emit(kind: Event, at: int, **fields: Any) -> None:
            seals.append(Sealed(**fields))

        output = tmp_path / mode / case
        # As the harness gets it: through the plan's JSON.
        planned = PlannedCall("req_6/decode", case, "", str(inputs), str(output), (), composition)
        composition = Plan.from_json(Plan("cuda", "m", False, None, (planned,)).to_json()).calls[0].composition
        completion = harness.run(composition, output, device, libraries, emit, index)
        assert completion.status == 0, completion.error
        outcomes[case] = CallOutcome("req_6/decode", case, CallStatus.OK, wall_ms=completion.wall_ms,
                                     output_dir=output, seals=tuple(seals))
    assert device.caches == {} or mode == "leak"  # the harness freed each run's cache
    gold = check.gold(small, spec, inputs, cache_dir)
    return check.result(small, spec, small.kernel("req_6/decode"), {}, outcomes, gold, "")


def cases_of(result: KernelResult) -> dict[str, Any]:
    return {c.name: c for c in result.cases}


def test_a_kv_cache_that_keeps_the_contract_passes_every_case_with_its_speed_up(
        small: Assignment, globals_libraries: dict[str, Any], tmp_path: Path, cache_dir: Path) -> None:
    result = run_decode(small, globals_libraries, tmp_path, cache_dir, "cache")
    assert result.status is KernelStatus.PASSED and result.score == result.max_score == 12, result.message
    assert result.check == "decode" and not result.check_hints
    found = cases_of(result)
    assert found["b1"].message.startswith("4 tokens after a prompt of 5 (B=1): every step's logits match the full "
                                          "recompute (the course's rule")
    assert "and the float64 gold: largest logit error" in found["b1"].message
    assert found["b1"].message.endswith(f"the cache took {2 * 2 * 1 * 64 * 32 * 8 / 2 ** 20:.1f} MiB of device "
                                        "memory")  # the fake's cache: L x 2 x B x 64 positions x C doubles
    print(found["b1"].message, found["speed"].message, sep="\n")
    assert found["second-run"].message.startswith("3 tokens after a prompt of 3 (B=2), 2 KV runs: every step's")
    assert "float64 gold" not in found["speed"].message and "FLAGGED" not in found["speed"].message
    # The fake's attention costs T^2 with the cache off and pos + 1 with it on: 20 + t tokens, so ~21x.
    assert "(attention calls alone: 2" in found["speed"].message


def test_globals_read_by_another_kernel_follow_the_attentions_changes(
        small: Assignment, globals_libraries: dict[str, Any], tmp_path: Path, cache_dir: Path) -> None:
    """K and V stored by the QKV matmul (its own library's copy of the globals) while attention advances g_layer_idx
    and g_current_pos in its own: the harness keeps one set, as the course's one program has."""
    result = run_decode(small, globals_libraries, tmp_path, cache_dir, "fused")
    assert result.status is KernelStatus.PASSED, result.message


def test_the_gold_of_each_step_is_the_full_sequences_position(small: Assignment, cache_dir: Path) -> None:
    """One gold pass over the whole sequence gives every step's logits: position prompt + t - 1's, as a pass over
    just the first prompt + t tokens gives its last position's (causal attention)."""
    check = check_named("decode")
    spec = small.check("decode")
    inputs = check.prepare_inputs(small, spec, cache_dir)
    gold = check.gold(small, spec, inputs, cache_dir)
    case = spec.case("b3")
    tokens = np.load(inputs / f"tokens-{case.name}.npy")
    parameters = np.load(inputs / PARAMETERS_FILE)
    kernels = {k.name: k for k in small.base_kernels}
    assert gold.logits[case.name].shape == (case.generate, case.B, spec.V)
    for t in (0, case.generate - 1):
        f = spec.forward(case.B, case.prompt + t)
        alone = gold_pass(small.numpy_reference(), f, steps_of(f, kernels), parameters, tokens[:, :case.prompt + t])
        np.testing.assert_allclose(gold.logits[case.name][t], alone[-1][:, -1, :spec.V], rtol=1e-12, atol=1e-12)
    assert set(gold.logits) == {"b1", "b3", "second-run"}  # the speed case has none


def test_a_cache_that_ignores_g_current_pos_fails_each_case_at_the_first_decode_step(
        small: Assignment, globals_libraries: dict[str, Any], tmp_path: Path, cache_dir: Path) -> None:
    result = run_decode(small, globals_libraries, tmp_path, cache_dir, "ignores-position")
    assert result.status is KernelStatus.FAILED and result.score == 0
    found = cases_of(result)
    assert all(c.status is CaseStatus.FAILED for c in found.values())
    assert found["b1"].message.startswith("4 tokens after a prompt of 5 (B=1), with the cache: decode step 1 of 3 "
                                          "(the token at position 5), row 0: logit ")
    assert "3 of 3 decode steps differ; the prefill's logits match" in found["b1"].message
    assert found["b1"].first_mismatch is not None and found["b1"].first_mismatch.index[0] == 1
    assert any("store the new token's K and V at g_current_pos" in hint for hint in result.check_hints)


def test_a_cache_that_leaks_into_the_next_run_fails_every_program_after_the_first(
        small: Assignment, globals_libraries: dict[str, Any], tmp_path: Path, cache_dir: Path) -> None:
    result = run_decode(small, globals_libraries, tmp_path, cache_dir, "leak")
    found = cases_of(result)
    assert found["b1"].passed, found["b1"].message  # the first program in the process is right
    assert [name for name, c in found.items() if not c.passed] == ["b3", "second-run", "speed"]
    assert "g_kv_cache" not in found["b1"].message  # the fake sets it; the position is what leaks
    assert any(hint.startswith("The first program in the harness's process is right and a later one is not")
               for hint in result.check_hints)


def test_within_one_case_a_leak_shows_in_the_second_run_with_its_hint(
        small: Assignment, globals_libraries: dict[str, Any], tmp_path: Path, cache_dir: Path) -> None:
    spec = small.check("decode")
    one = dataclasses.replace(spec, decode_cases=(spec.case("second-run"),))
    alone = dataclasses.replace(small, checks=tuple(one if c.name == "decode" else c for c in small.checks))
    check = dataclasses.replace(small.kernel("req_6/decode"), cases=small.kernel("req_6/decode").cases[2:3])
    alone = dataclasses.replace(alone, check_kernels=(check,))
    result = run_decode(alone, globals_libraries, tmp_path, cache_dir, "leak")
    (case,) = result.cases
    assert not case.passed and case.message.startswith("3 tokens after a prompt of 3 (B=2), KV run 2: ")
    assert any(hint.startswith("The first run is right and a later one is not") for hint in result.check_hints)


def test_a_cache_that_recomputes_attention_is_flagged_and_costs_only_where_the_spec_says(
        small: Assignment, globals_libraries: dict[str, Any], tmp_path: Path, cache_dir: Path) -> None:
    result = run_decode(small, globals_libraries, tmp_path / "free", cache_dir, "recompute")
    assert result.status is KernelStatus.PASSED and result.score == 12 and not result.deductions
    assert result.message.startswith("the KV cache is not faster: in 'speed' (20 + 4 tokens) the attention calls "
                                     "with the cache take ")
    assert "(reported, not scored)" in result.message
    assert "FLAGGED: " in cases_of(result)["speed"].message and cases_of(result)["speed"].passed
    assert result.check_hints and result.check_hints[-1].startswith("Right logits, no saving: ")
    costly = run_decode(small, globals_libraries, tmp_path / "costly", cache_dir, "recompute", penalty=0.5)
    assert costly.status is KernelStatus.FAILED and costly.score == 6
    assert costly.deductions[-1].points == 6 and costly.deductions[-1].reason.startswith("the KV cache is not faster")


def test_a_program_whose_attention_lacks_the_globals_is_told_what_the_variant_needs(
        small: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    check = check_named("decode")
    spec = small.check("decode")
    inputs = check.prepare_inputs(small, spec, cache_dir)
    (_, composition), *_ = check.plan(small, spec, {k: "" for k in spec.composes}, inputs)
    libc = ctypes.CDLL(None)
    completion = harness.run(composition, tmp_path, HostDevice(), {k: libc for k in spec.composes},
                             lambda *a, **k: None, 0)
    assert completion.status != 0
    assert completion.error.startswith("the attention library does not define g_enable_kv_cache, g_kv_cache, "
                                       "g_layer_idx, g_is_prefill, g_current_pos")
