"""gpt2-m3's req_4 (FlashAttention) without a GPU: the `untouched` evidence that the T x T matrix is never built (the
spec asks the harness to count the elements of req_4's att each call changes, here on host arrays as on the
device; the variant reports, or costs, a call that wrote it), and the reference and samples built with nvcc. The
numbers of the course-style FlashAttention orders are checked by tests/test_gpt2_m3_flash_emulated.py; the GPU
runs are tests/test_gpu_gpt2_m3_flash.py."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from grader.boundary import harness
from grader.boundary.cpp_device import HostDevice
from grader.boundary.protocol import POISON_BITS, BufferArgument, Ended, EndStatus, Written
from grader.errors import SpecError
from grader.options import Options
from grader.pipeline import Built, build_stage
from grader.report.render import variant_flags
from grader.results import CaseResult, KernelResult, Result, ScratchWritten
from grader.samples import compose, variants
from grader.scoring import score_variants
from grader.sources import VariantSources
from grader.assignment import Assignment, allocation_of, load_assignment
from grader.status import BuildStatus, CaseStatus, KernelStatus

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


@pytest.fixture(scope="module")
def m3() -> Assignment:
    return load_assignment("gpt2-m3")


# The spec: req_4's att is counted; nothing else changes.

def test_req_4s_attention_counts_its_att_writes_and_nothing_else_changes(m3: Assignment) -> None:
    untouched = m3.variant("req_4").untouched
    assert untouched is not None and (untouched.buffer, untouched.penalty) == ("att", 0.0)
    assert 0 < untouched.at_most_written < 1
    counted = {(k.name, b.name) for k in m3.kernels for b in k.buffers if b.count_written}
    assert counted == {("req_4/attention", "att")}
    flash, base = m3.kernel("req_4/attention"), m3.kernel("attention")
    # att starts zeroed as the course's program leaves it (a course-style softmax over the zeroed triangle relies on
    # it: a materialising attention must be flagged, not failed); the rest of the buffer, and every case, as
    # milestone 1 has them.
    assert flash.buffer("att") == replace(base.buffer("att"), count_written=True) and base.buffer("att").init == "zeros"
    assert flash.cases == base.cases
    assert flash.buffer("qkvr") == base.buffer("qkvr") and flash.buffer("inp") == base.buffer("inp")


@pytest.mark.parametrize("untouched, expected", [
    ('{ buffer = "out", at_most_written = 0.01 }', "buffer 'out' is no kernel's scratch buffer"),
    ('{ buffer = "att", at_most_written = 0.01 }\n[assignment.x]', "buffer 'att' starts as leftover garbage in "
                                                                   "attention: its writes can be counted only where"),
    ('{ buffer = "att", at_most_written = 1.5 }', "key 'at_most_written' is a share between 0 and 1, found 1.5"),
    ('{ buffer = "att", at_most_written = 0.01, penalty = -1 }', "key 'penalty' is a share between 0 and 1"),
    ('{ buffer = "att", at_most = 0.01 }', "unknown key(s) ['at_most']"),
    ('"att"', "expected a table like"),
])
def test_a_wrong_untouched_table_names_the_variant_and_the_key(tmp_path: Path, untouched: str, expected: str) -> None:
    (tmp_path / "gpt2-m1").symlink_to(load_assignment("gpt2-m1").root)  # based_on names a sibling folder
    folder = tmp_path / "gpt2-flash"
    folder.mkdir()
    leftover = 'scratch_init = "leftover"\n' if "[assignment.x]" in untouched else ""
    untouched = untouched.replace("\n[assignment.x]", "")
    (folder / "assignment.toml").write_text(f'[assignment]\nname = "gpt2-flash"\nbased_on = "gpt2-m1"\n{leftover}\n'
                                            f'[[variants]]\nname = "req_4"\nfolder = "kernels_req_4"\nweight = 6\n'
                                            f'must_change = ["kernels/attention.cuh"]\nuntouched = {untouched}\n')
    with pytest.raises(SpecError) as error:
        load_assignment(folder)
    assert "variant 'req_4' key 'untouched'" in str(error.value) and expected in str(error.value), str(error.value)


# The harness half: the count, on host arrays (a NumPy "device": the same code reads a GPU's back in chunks).

def counted_scratch(device: HostDevice, elements: int, init: str, tmp_path: Path) -> harness.Buffer:
    argument = BufferArgument("att", "scratch", "float32", (elements,), elements, False, False, init, True)
    return harness.allocate(device, argument, tmp_path, sanitizer=False)


@pytest.mark.parametrize("chunk", [harness.COUNT_CHUNK, 7])
@pytest.mark.parametrize("init", ["zeros", "poison"])
def test_the_harness_counts_the_elements_a_call_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int,
                                                         init: str) -> None:
    monkeypatch.setattr(harness, "COUNT_CHUNK", chunk)  # 7: chunks that split the buffer unevenly
    device = HostDevice()
    buffer = counted_scratch(device, 100, init, tmp_path)
    assert buffer.written(device) == Written("att", 0, 100)
    inside = buffer.allocation[buffer.margin:buffer.margin + 100]
    written = np.random.default_rng(0).choice(100, size=37, replace=False)
    # NaNs of other payloads, negative zero and ordinary floats are all changes: only the starting bits are not.
    inside[written] = np.array([-0.0, np.nan, -1.5, 3e38] * 10, dtype=np.float32)[:37]
    # A write into the margin is out of bounds (its own finding), not a write of the buffer.
    buffer.allocation[buffer.margin + 100] = 1.0
    assert buffer.written(device) == Written("att", 37, 100)
    assert buffer.outside_writes(device) == "1 element(s) past the end of att"
    inside[:] = 0.0  # the M1 softmax writes every element, the masked triangle's zeros too
    # Over zeros, the zeros it wrote are not seen (a causal matrix shows its lower triangle); over poison, all are.
    assert buffer.written(device) == Written("att", 0 if init == "zeros" else 100, 100)


def test_the_count_travels_in_the_end_event_and_a_forged_one_reads_as_absent() -> None:
    ended = Ended(EndStatus.OK, 1.0, 0.5, written=(Written("att", 3, 4),))
    assert Ended.read(json.loads(json.dumps({"event": "end", **ended.fields()}))) == ended
    forged = {"event": "end", "status": "ok", "written": [{"buffer": "att", "written": 5, "elements": 4},
                                                          {"buffer": "att", "written": -1, "elements": 4},
                                                          {"buffer": 3, "written": 0, "elements": 4},
                                                          {"buffer": "att", "written": True, "elements": 4},
                                                          "att", {"buffer": "qkvr", "written": 0, "elements": 9}]}
    assert Ended.read(forged).written == (Written("qkvr", 0, 9),)
    assert Ended.read({"event": "end", "status": "ok", "written": "all"}).written == ()



class ShrinkingDevice:
    """A device whose free memory the test moves while a "call" runs (the sampler reads it from its own thread)."""

    def __init__(self, free: int | None) -> None:
        self.free = free

    def free_bytes(self) -> int | None:
        return self.free


def test_the_memory_sampler_sees_what_a_call_took_and_gave_back_before_returning() -> None:
    import time

    device = ShrinkingDevice(10 << 30)
    with harness.MemorySampler(device) as sampler:  # type: ignore[arg-type]
        device.free -= 192 << 20  # a T x T buffer cudaMalloc'd ...
        time.sleep(50 * harness.SAMPLE_INTERVAL_S)
        device.free += 192 << 20  # ... and freed before the call returns
        time.sleep(5 * harness.SAMPLE_INTERVAL_S)
    assert sampler.peak_extra_bytes == 192 << 20
    assert not sampler.thread.is_alive()
    with harness.MemorySampler(ShrinkingDevice(None)) as nothing:  # type: ignore[arg-type]
        pass
    assert nothing.peak_extra_bytes is None and not nothing.thread.is_alive()  # no device memory: no thread

# The variant: reported, or costing its penalty, with the case and the count in words.

def graded(m3: Assignment, shares: dict[str, float], peaks: dict[str, int] | None = None) -> list[KernelResult]:
    """req_4's kernels all passed; attention's cases wrote these shares of att (by case name; absent: nothing) and
    took this device memory beyond their arguments (absent: not measured)."""
    results = []
    for kernel in m3.kernels_of("req_4"):
        cases = []
        for case in kernel.cases:
            written = []
            if kernel.base == "attention":
                elements = allocation_of(kernel.buffer("att"), case.params)
                written = [ScratchWritten("att", round(shares.get(case.name, 0.0) * elements), elements)]
            peak = (peaks or {}).get(case.name) if kernel.base == "attention" else None
            cases.append(CaseResult(case.name, case.public, CaseStatus.PASSED, True, "", scratch_written=written,
                                    peak_extra_bytes=peak))
        results.append(KernelResult(kernel.name, kernel.weight, kernel.weight, KernelStatus.PASSED, "", cases,
                                    variant="req_4"))
    return results


def test_a_flash_attention_that_writes_no_att_has_nothing_flagged(m3: Assignment) -> None:
    _, (req_4,) = score_variants(m3, graded(m3, {}), (VariantSources("req_4", "kernels_req_4", True),), {})
    assert req_4.score == req_4.max_score and req_4.penalty == 0 and req_4.overwritten == []
    assert (req_4.untouched, req_4.at_most_written) == ("att", 0.01)
    assert "of att" not in req_4.message and req_4.message == "req_4: all 6 kernels passed"


def test_the_device_memory_a_call_took_is_said_beside_with_its_case(m3: Assignment) -> None:
    peaks = {"single-token": 2 << 20, "gpt2-full": 194 << 20, "odd-sizes": 0}
    _, (req_4,) = score_variants(m3, graded(m3, {}, peaks), (VariantSources("req_4", "kernels_req_4", True),), {})
    assert (req_4.peak_extra_bytes, req_4.peak_case) == (194 << 20, "attention/gpt2-full")
    assert req_4.message == ("req_4: all 6 kernels passed; attention's calls took at most 194 MiB of device memory "
                             "beyond their arguments (case 'gpt2-full'; sampled while it ran)")
    assert req_4.score == req_4.max_score  # reported beside, never scored


def test_an_attention_that_writes_att_is_reported_with_the_case_and_the_count(m3: Assignment) -> None:
    everything = {case.name: 1.0 for case in m3.kernel("attention").cases}
    _, (req_4,) = score_variants(m3, graded(m3, everything), (VariantSources("req_4", "kernels_req_4", True),), {})
    assert req_4.score == req_4.max_score and req_4.penalty == 0  # the spec's penalty is 0: reported only
    assert req_4.overwritten == [f"attention/{case.name}" for case in m3.kernel("attention").cases]
    # The reports flag it for the instructor, from the fields.
    assert variant_flags(req_4) == ["wrote more than 1% of att, which req_4 must leave untouched, in 5 case(s): "
                                    + ", ".join(req_4.overwritten)]
    # The largest case is named: gpt2-full's B * NH * T * T.
    assert ("attention wrote 100% of att (50,331,648 of 50,331,648 elements in case 'gpt2-full'; more than 1% in "
            "5 of 5 cases): the T x T matrix was materialised (reported, not scored)") in req_4.message, req_4.message
    # It survives the result's JSON.
    stored = Result.from_json(json.dumps({"assignment": "x", "assignment_version": "1", "title": "", "score": 0,
                                          "max_score": 0, "kernels": [], "submission": {"path": "."},
                                          "environment": {"grader_version": "", "target": "", "device": "",
                                                          "compiler": "", "sandbox": "", "sandbox_enforced": [],
                                                          "host": "", "python": ""},
                                          "stages": {}, "seed": {}, "public_only": False, "graded_at": "",
                                          "variants": [json.loads(json.dumps(req_4.__dict__, default=str))]}))
    assert stored.variants[0].overwritten == req_4.overwritten


def test_a_spec_penalty_makes_a_written_att_cost_the_variant(m3: Assignment) -> None:
    variant = replace(m3.variant("req_4"), untouched=replace(m3.variant("req_4").untouched, penalty=0.5))
    costly = replace(m3, variants=(variant,))
    # Only the long cases wrote it (as an implementation that falls back to the M1 path above some T would).
    kernels, (req_4,) = score_variants(costly, graded(m3, {"gpt2-full": 0.5, "t-not-multiple-of-32": 1.0}),
                                       (VariantSources("req_4", "kernels_req_4", True),), {})
    assert req_4.penalty == pytest.approx(3.0) and req_4.score == pytest.approx(3.0)
    assert req_4.overwritten == ["attention/t-not-multiple-of-32", "attention/gpt2-full"]
    assert "more than 1% in 2 of 5 cases" in req_4.message and "(−3)" in req_4.message
    # Within the bound: a few elements (a kernel that stores its row statistics there) cost nothing.
    _, (slight,) = score_variants(costly, graded(m3, {"gpt2-full": 0.005}),
                                  (VariantSources("req_4", "kernels_req_4", True),), {})
    assert slight.penalty == 0 and slight.overwritten == []


# The whole path on the CPU (the cpp target, g++): spec -> plan -> harness count -> end event -> case -> variant.

TINY_SPEC = """
[assignment]
name = "tiny-untouched"
version = "1"
target = "cpp"
provided = []
source_dirs = ["src"]
public_seed = 7
compile_flags = ["-O2", "-std=c++17"]
gold = "numpy"
scratch_init = "zeros"
time_limit_s = 20.0

[[kernels]]
name = "rowsum"
weight = 1
header = "src/rowsum.h"
sources = ["src/rowsum.h", "src/rowsum.cpp"]
signature = "void rowsum(float* out, float* scores, const float* x, int N)"
tolerance = { atol = 1e-4, rtol = 1e-4 }
buffers.out = { role = "output", shape = "N" }
buffers.scores = { role = "scratch", shape = "N, N" }
buffers.x = { role = "input", shape = "N, N" }
cases = [{ name = "small", public = true, N = 3 }, { name = "larger", public = true, N = 40 }]

[[variants]]
name = "fused"
folder = "src_fused"
weight = 2
must_change = ["src/rowsum.cpp"]
untouched = { buffer = "scores", at_most_written = 0.01, PENALTY meaning = "the N x N matrix was built" }
"""
TINY_INPUTS = ("import numpy as np\n\n\ndef make_inputs(kernel, case, rng):\n"
               "    return {'x': rng.uniform(-1, 1, (case['N'], case['N'])).astype(np.float32)}\n")
TINY_GOLD = "def rowsum(x, **_):\n    return {'out': x.astype('float64').sum(axis=1)}\n"
HEADER = "#pragma once\nvoid rowsum(float* out, float* scores, const float* x, int N);\n"
# Through the N x N scratch (every element), or straight from x (none of it).
MATERIALISED = ('#include "rowsum.h"\nvoid rowsum(float* out, float* scores, const float* x, int N) {\n'
                "    for (int i = 0; i < N * N; i++) scores[i] = x[i];\n"
                "    for (int i = 0; i < N; i++) { float s = 0; for (int j = 0; j < N; j++) s += scores[i * N + j]; "
                "out[i] = s; }\n}\n")
FUSED = ('#include "rowsum.h"\nvoid rowsum(float* out, float* scores, const float* x, int N) {\n'
         "    for (int i = 0; i < N; i++) { float s = 0; for (int j = 0; j < N; j++) s += x[i * N + j]; out[i] = s; }\n}\n")


def tiny_pack(root: Path, penalty: float | None = None) -> Assignment:
    pack = root / "tiny-untouched"
    pack.mkdir(parents=True)
    (pack / "assignment.toml").write_text(TINY_SPEC.replace("PENALTY ", f"penalty = {penalty}, " if penalty else ""))
    (pack / "inputs.py").write_text(TINY_INPUTS)
    (pack / "numpy_reference.py").write_text(TINY_GOLD)
    return load_assignment(pack)


def tiny_submission(folder: Path, fused: str) -> Path:
    for relative, text in {"src/rowsum.h": HEADER, "src/rowsum.cpp": MATERIALISED, "src_fused/rowsum.cpp": fused}.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(text)
    return folder


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
def test_a_graded_variant_counts_its_untouched_scratch_from_the_harness_to_the_report(tmp_path: Path,
                                                                                      cache_dir: Path) -> None:
    from grader.pipeline import grade

    pack = tiny_pack(tmp_path / "packs")
    fused = grade(tiny_submission(tmp_path / "fused", FUSED), pack, Options(cache_dir=cache_dir))
    cases = {k.name: {c.name: c for c in k.cases} for k in fused.kernels}
    # Both start zeroed (the pack's scratch_init); only the variant's copy is counted.
    assert all(c.passed and c.scratch_written == [] for c in cases["rowsum"].values())
    assert {name: c.scratch_written for name, c in cases["fused/rowsum"].items()} == \
        {"small": [ScratchWritten("scores", 0, 9)], "larger": [ScratchWritten("scores", 0, 1600)]}
    assert fused.variants[0].overwritten == [] and fused.variants[0].score == 2

    # The variant's file materialises too (a comment apart, so that it still changes the file it must change).
    built = grade(tiny_submission(tmp_path / "built", MATERIALISED.replace("x[i];", "x[i];  // copied first")),
                  pack, Options(cache_dir=cache_dir))
    variant = built.variants[0]
    assert [c.scratch_written for c in built.kernels[1].cases] == \
        [[ScratchWritten("scores", 9, 9)], [ScratchWritten("scores", 1600, 1600)]]
    assert variant.overwritten == ["rowsum/small", "rowsum/larger"] and variant.score == 2
    assert variant.message == ("fused: rowsum wrote 100% of scores (1,600 of 1,600 elements in case 'larger'; more "
                               "than 1% in 2 of 2 cases): the N x N matrix was built (reported, not scored)")
    # The stored result keeps the counts.
    assert Result.from_json(built.to_json()).kernels[1].cases[1].scratch_written == [ScratchWritten("scores", 1600, 1600)]

    costly = grade(tmp_path / "built", tiny_pack(tmp_path / "costly", penalty=0.5), Options(cache_dir=cache_dir))
    assert costly.variants[0].score == 1 and costly.variants[0].penalty == 1


# The reference and the samples, built with nvcc (run on the H200: tests/test_gpu_gpt2_m3_flash.py).

SAMPLES = ("course-flash1-row-per-thread", "course-flash2-warp-per-row", "mutant-flash-no-rescale",
           "mutant-flash-causal-off-by-one", "mutant-flash-materialises-att", "mutant-flash-scores-in-own-buffer")


@pytest.fixture(scope="module")
def flash_builds(m3: Assignment, cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Built]:
    """req_4's attention built from the reference and from each sample laid over it (one nvcc build each)."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    options = Options(cache_dir=cache_dir, kernels=("req_4/attention",))
    builds = {"reference": build_stage(m3.reference_dir, m3, options)}
    by_name = {s.name: s for s in variants(m3)}
    for name in SAMPLES:
        folder = compose(m3, by_name[name], tmp_path_factory.mktemp(name) / name)
        builds[name] = build_stage(folder, m3, options)
    return builds


def test_the_samples_are_req_4s_course_ports_and_mutants_with_their_outcomes(m3: Assignment) -> None:
    found = {s.name: s for s in variants(m3) if s.name in SAMPLES}
    assert set(found) == set(SAMPLES) and all(s.kernel == "req_4/attention" for s in found.values())
    assert {n for n, s in found.items() if s.expect is KernelStatus.PASSED} == \
        {"course-flash1-row-per-thread", "course-flash2-warp-per-row", "mutant-flash-materialises-att",
         "mutant-flash-scores-in-own-buffer"}
    for name in ("mutant-flash-no-rescale", "mutant-flash-causal-off-by-one"):
        assert found[name].expect is KernelStatus.FAILED and "single-token" not in found[name].failed_cases


@needs_nvcc
def test_the_reference_and_every_sample_build_and_change_attention(flash_builds: dict[str, Built]) -> None:
    for name, built in flash_builds.items():
        artifact = built.artifacts["req_4/attention"]
        assert artifact.status is BuildStatus.BUILT, (name, artifact.message)
        assert not (artifact.forbidden_symbols or artifact.watched), name
        # Each replaces milestone 1's attention.cuh: none leaves the file the variant must change as it was.
        assert [v.unchanged for v in built.variants] == [()], name
    # Shared memory holds the tiles in every FlashAttention (the materialising one needs none).
    for name in ("reference", "course-flash1-row-per-thread", "course-flash2-warp-per-row"):
        library = flash_builds[name].artifacts["req_4/attention"].evidence
        if library is not None and library.functions:
            assert library.uses_shared_memory, name
