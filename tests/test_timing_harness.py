"""The timing harness on the CPU: its rotation and events in-process, then C++ kernels timed through the sandbox
(the wall clock is the cpp target's timer), including the ones that must get no speed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from grader.boundary.cpp_device import HostDevice
from grader.boundary.device import Completion
from grader.boundary.harness import Progress
from grader.boundary.protocol import BufferArgument
from grader.boundary.timing_harness import KernelTimer, Phase, Settings
from grader.boundary.timing_statistics import StopRule
from grader.cases import Seed
from grader.options import Options
from grader.runner.plan import Call, plan_for
from grader.assignment import PROJECT_ROOT, Assignment, load_assignment
from grader.status import TimingStatus
from grader.timing.run import pool_inputs, time_submission
from grader.timing.spec import parse_timing

from conftest import with_time_limit

QUICK = parse_timing({"case": "square-tiles", "warmup": 2, "min_calls": 10, "max_calls": 12, "cap_s": 0.5, "pool": 3},
                     "tests [timing]")


class RecordingDevice(HostDevice):
    """The CPU, with a "kernel" that copies Q into O and records each call's address of Q and its first element."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[int, float]] = []

    def load(self, path: str) -> Any:
        return path

    def call(self, library: Any, arguments: list) -> Completion:
        buffers = {a.name: (a, b) for a, b in arguments if isinstance(a, BufferArgument)}
        (q, q_buffer), (_, o_buffer) = buffers["Q"], buffers["O"]
        count = int(np.prod(q.shape))
        self.seen.append((self.pointer(q_buffer.allocation) + q_buffer.margin * 4,
                          float(q_buffer.allocation[q_buffer.margin])))
        o_buffer.allocation[o_buffer.margin: o_buffer.margin + count] = \
            q_buffer.allocation[q_buffer.margin: q_buffer.margin + count]
        return Completion(0, 1.0, None)


def test_timed_calls_rotate_through_the_pool_and_the_recheck_runs_the_case_own_inputs(flash: Assignment,
                                                                                       tmp_path: Path,
                                                                                       cache_dir: Path) -> None:
    kernel = flash.kernel("standard_attention")
    case = QUICK.timed_case(kernel)
    folders = pool_inputs(flash, kernel, case, Seed(flash.public_seed), 3, cache_dir)
    calls = [Call(kernel, case, tmp_path / "lib.so", f, tmp_path / "out" / str(i)) for i, f in enumerate(folders)]
    plan = plan_for(flash, calls, tmp_path / "out", sanitizer=False)
    device = RecordingDevice()
    progress_file = tmp_path / "progress.jsonl"
    settings = Settings(2, StopRule(10, 10, 0.5, 10.0), 0.0)
    assert KernelTimer(plan, 0, 3, settings, device, Progress(progress_file)).run()
    events = [json.loads(line) for line in progress_file.read_text().splitlines()]
    phases = [e.get("phase") for e in events if e["event"] == "end"]
    assert phases == [Phase.WARMUP] * 2 + [Phase.TIMED] * 10 + [Phase.RECHECK]
    # Every start is closed by its end before the next (the watchdog's view of the call in flight).
    flow = [(e["event"], e.get("index")) for e in events if e["event"] in ("start", "end")]
    assert all(flow[i][0] == "start" and flow[i + 1] == ("end", flow[i][1]) for i in range(0, len(flow), 2))
    pointers = [pointer for pointer, _ in device.seen]
    assert len(set(pointers)) == 3 and all(a != b for a, b in zip(pointers, pointers[1:]))  # never twice running
    firsts = {float(np.load(f / "Q.npy").flat[0]): index for index, f in enumerate(folders)}  # each set's data
    data = [firsts[value] for _, value in device.seen]
    visits: dict[int, list[int]] = {}
    for pointer, held in zip(pointers[:-1], data[:-1]):
        visits.setdefault(pointer, []).append(held)
    # Each set's buffers hold other data at each visit: an answer kept per pointer would be stale.
    assert all(a != b for held in visits.values() for a, b in zip(held, held[1:]))
    assert {len(set(held)) for held in visits.values()} == {3}
    # The re-check: pool[0]'s buffers holding pool[0]'s data, the case's own inputs (its gold is known).
    assert (pointers[-1], data[-1]) == (pointers[0], 0) and data[0] != 0
    timed = [e for e in events if e.get("phase") == Phase.TIMED]
    assert all(e["written"] is True and e["time_ms"] == 1.0 for e in timed)
    saved = np.load(tmp_path / "out" / "0" / "O.npy")
    assert np.array_equal(saved, np.load(folders[0] / "Q.npy"))
    assert events[-1]["event"] == "timing" and events[-1]["pool"] == 3 and events[-1]["stopped_by"] == "max_calls"


def submission(tmp_path: Path, name: str, files: dict[str, str]) -> Path:
    """The C++ reference with some of its files replaced."""
    folder = tmp_path / name
    shutil.copytree(load_assignment("flash-attention-cpu").reference_dir, folder)
    for path, text in files.items():
        (folder / path).write_text(text)
    return folder


def time_one(flash: Assignment, folder: Path, cache_dir: Path, kernel: str = "standard_attention"):
    timings = time_submission(folder, flash, Options(cache_dir=cache_dir, kernels=(kernel,)), QUICK)
    (timing,) = timings.kernels
    return timing


def test_the_reference_is_timed_on_its_case_by_the_wall_clock(flash: Assignment, tmp_path: Path,
                                                              cache_dir: Path) -> None:
    timing = time_one(flash, flash.reference_dir, cache_dir)
    assert timing.status is TimingStatus.TIMED, timing.message
    assert timing.case == "square-tiles" and timing.pool == 3 and timing.timer == {"clock": "wall"}
    assert timing.summary is not None and 10 <= timing.summary.calls <= 12 and timing.median_us > 0
    assert timing.unwritten_calls == 0 and not timing.side_streams


# Algorithm 0, with a front that may skip the work (FRONT) and a line after it (BACK).
ATTENTION = """\
#include "standard_attention.h"
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

void standard_attention(const float* Q, const float* K, const float* V, float* O, int N, int d) {
    FRONT
    std::vector<float> row(N);
    for (int i = 0; i < N; ++i) {
        float top = -INFINITY, sum = 0.0f;
        for (int j = 0; j < N; ++j) {
            float s = 0.0f;
            for (int k = 0; k < d; ++k) s += Q[i * d + k] * K[j * d + k];
            row[j] = s;
            top = std::fmax(top, s);
        }
        for (int j = 0; j < N; ++j) sum += (row[j] = std::exp(row[j] - top));
        for (int k = 0; k < d; ++k) {
            float o = 0.0f;
            for (int j = 0; j < N; ++j) o += row[j] / sum * V[j * d + k];
            O[i * d + k] = o;
        }
    }
    BACK
}
"""
# Skips its work when it is handed inputs it has seen: on a real leaderboard, a cached answer replayed.
POINTER_CACHE = ATTENTION.replace("FRONT", "static std::set<const float*> seen;\n"
                                           "    if (!seen.insert(Q).second) return;").replace("BACK", "")
# Keeps each answer by the address of its inputs and copies it out when handed that address again: fast,
# and right only while the data under that address stays the same.
ANSWER_BY_POINTER = ATTENTION.replace("FRONT", "static std::map<const float*, std::vector<float>> kept;\n"
                                               "    auto found = kept.find(Q);\n"
                                               "    if (found != kept.end()) {\n"
                                               "        std::copy(found->second.begin(), found->second.end(), O);\n"
                                               "        return;\n"
                                               "    }").replace("BACK", "kept[Q] = std::vector<float>(O, O + N * d);")


def test_a_kernel_that_skips_inputs_it_has_seen_gets_no_speed(flash: Assignment, tmp_path: Path,
                                                              cache_dir: Path) -> None:
    folder = submission(tmp_path, "pointer-cache", {"src/standard_attention.cpp": POINTER_CACHE})
    timing = time_one(flash, folder, cache_dir)
    assert timing.status is TimingStatus.NO_WORK and timing.median_us is None
    # The first call on each of the 3 sets (two warm-up calls and the first timed one) did the work.
    assert timing.unwritten_calls == timing.summary.calls - 1
    assert "left an output unwritten" in timing.message


def test_a_kernel_that_replays_answers_kept_by_input_address_gets_no_speed(flash: Assignment, tmp_path: Path,
                                                                           cache_dir: Path) -> None:
    folder = submission(tmp_path, "answer-by-pointer", {"src/standard_attention.cpp": ANSWER_BY_POINTER})
    timing = time_one(flash, folder, cache_dir)
    assert timing.status is TimingStatus.WRONG and timing.median_us is None, timing.message
    assert timing.unwritten_calls == 0  # it did write every time: only the re-check's gold tells


def test_a_fast_wrong_kernel_gets_no_speed(flash: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    mutant = PROJECT_ROOT / "assignments" / "flash-attention-cpu" / "samples" / "mutant-standard-transposed-k" / "src"
    folder = submission(tmp_path, "transposed-k", {"src/standard_attention.cpp":
                                                   (mutant / "standard_attention.cpp").read_text()})
    timing = time_one(flash, folder, cache_dir)
    assert timing.status is TimingStatus.WRONG and timing.median_us is None
    assert "do not match gold on case 'square-tiles'" in timing.message


def test_a_crash_costs_only_that_kernels_timing(flash: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    hostile = PROJECT_ROOT / "assignments" / "flash-attention-cpu" / "samples" / "hostile-flash-segfault" / "src"
    folder = submission(tmp_path, "segfault", {"src/flash_attention.cpp": (hostile / "flash_attention.cpp").read_text()})
    timings = time_submission(folder, flash, Options(cache_dir=cache_dir), QUICK)
    status = {t.kernel: t for t in timings.kernels}
    assert status["standard_attention"].status is TimingStatus.TIMED
    assert status["flash_attention"].status is TimingStatus.CRASHED
    assert "SIGSEGV" in status["flash_attention"].message


def test_a_looping_kernel_is_stopped_at_its_time_limit(flash: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    hostile = PROJECT_ROOT / "assignments" / "flash-attention-cpu" / "samples" / "hostile-flash-infinite-loop" / "src"
    folder = submission(tmp_path, "loop", {"src/flash_attention.cpp": (hostile / "flash_attention.cpp").read_text()})
    quick = with_time_limit(flash, 1.0)
    timing = time_one(quick, folder, cache_dir, "flash_attention")
    assert timing.status is TimingStatus.TIMEOUT and "timeout" in timing.message
