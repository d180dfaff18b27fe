"""The attacker's corpus (assignments/flash-attention-cpu/samples/attack-*) on every sandbox backend.

Each attack must be contained, get a clear status, and leave the other kernel's score and the
grader untouched (`check_attack`). Every attack is graded in a class of tests/test_batch_isolation.py, which holds
each to `check_attack` too: the whole corpus beside other submissions on the local (namespace) backend, and the
attacks on what containers share in the docker class (a container per harness, four at once). Here, alone on each
backend, the attacks whose checks go further than a class's (ALONE: the harness's own view of the network, the
paths written outside, the cached inputs' digests).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grader.cache import STAGING
from grader.results import Result
from grader.samples import Sample, variants
from grader.assignment import PROJECT_ROOT, Assignment, load_assignment

from conftest import grade_variant, with_time_limit
from sandbox_fixtures import ATTACK_PORT, loopback_listener, backend, docker_ready, orphaned_harnesses, run_folders, settled  # noqa: F401  (fixtures)

ATTACKS = {v.name: v for v in variants(load_assignment("flash-attention-cpu")) if v.name.startswith("attack-")}
SECRET = "correct-horse-battery-staple"
# Where attack-write-outside tries to write: none may exist after any attack.
ESCAPES = (Path("/tmp/kernel-grader-escape"), PROJECT_ROOT / "grader" / "pwned.py", Path("/root/pwned"),
           Path("/etc/pwned"))
# What the attacked kernel's message must say, attack by attack (beside the status its VARIANT.toml gives).
ATTACK_WORDS: dict[str, tuple[str, ...]] = {
    "attack-forge-progress": ("progress channel was tampered with",),
    "attack-flood-progress": ("progress channel was tampered with",),
    "attack-exit-mid-run": ("exited with status 0",),
    "attack-out-of-bounds-write": ("SIGSEGV", "case 'one-row'"),
    "attack-static-constructor-segfault": (
        "SIGSEGV", "case 'one-row'",
        "crashed while its library was being loaded (segmentation fault in a static constructor)"),
    "attack-mutate-inputs": ("wrote into its input(s) Q",),
    "attack-small-out-of-bounds-write": ("wrote out of bounds: 8 element(s) past the end of O",),
    "attack-memory-hog": ("exceeded the memory limit (1 GiB)",),
    "attack-host-memory-hog": ("exceeded the memory limit (1 GiB)",),
    "attack-fill-private-tmp": ("filled its private /tmp (256 MiB)",),
    "attack-flood-output-files": ("created more than 10000 files in its output folder",),
    "attack-compiler-reads-shadow": ("/etc/shadow",),
    "attack-fork-bomb": ("reached the process/thread limit (64)",),
}
@pytest.fixture
def host_listener():
    """A server on the host's 127.0.0.1:ATTACK_PORT recording every connection (none may arrive)."""
    with loopback_listener(ATTACK_PORT) as (_, accepted):
        yield accepted


@pytest.fixture
def victim() -> Iterator[Path]:
    """Another student's submission at a path the attack knows; removed again by the test that made it (a run
    beside this one may share it: the same file, the same text)."""
    root = Path("/tmp/kernel-grader-victim")
    made = not root.exists()
    folder = root / "src"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "standard_attention.cpp").write_text("// another student's work\n")
    yield folder
    if made:
        shutil.rmtree(root, ignore_errors=True)


def _cached_inputs(cache_dir: Path) -> Iterator[Path]:
    """Every file and folder of the input cache's finished entries. Other tests share the session's cache: their entries
    being staged (renamed into place as they finish) are left out. os.walk, not rglob: a staging folder renamed
    away mid-walk is skipped there, where rglob raises."""
    for folder, subfolders, files in os.walk(cache_dir / "inputs"):
        subfolders[:] = sorted(name for name in subfolders if STAGING not in name)
        yield from (Path(folder) / name for name in sorted([*subfolders, *files]))


def _inputs_digests(cache_dir: Path) -> dict[Path, str]:
    """Each cached input's digest; an entry other tests add later is not this test's to compare."""
    digests = {}
    for path in _cached_inputs(cache_dir):
        if path.suffix == ".npy" and not path.is_dir():
            try:
                digests[path] = hashlib.sha256(path.read_bytes()).hexdigest()
            except FileNotFoundError:  # an entry another test is replacing right now
                continue
    return digests


def grade_attack(name: str, flash: Assignment, backend: str, tmp_path: Path, cache_dir: Path) -> tuple[Result, float]:
    started = time.monotonic()
    result = grade_variant(flash, ATTACKS[name], tmp_path, cache_dir, sandbox=backend, secret=SECRET)
    return result, time.monotonic() - started


def check_contained(result: Result, variant: Sample) -> None:
    """The attacked kernel has the expected status; the other kernel passed with full marks."""
    by_name = {k.name: k for k in result.kernels}
    attacked = by_name[variant.kernel]
    assert attacked.status == variant.expect, attacked.message
    if variant.expect == "passed":  # contained so well that the kernel's own answer is right
        assert attacked.score == attacked.max_score, attacked.message
    else:
        assert attacked.score < attacked.max_score, attacked.message
    if variant.failed_cases is not None:
        assert [c.name for c in attacked.cases if not c.passed] == list(variant.failed_cases), attacked.message
    for name, kernel in by_name.items():
        if name != variant.kernel:
            assert kernel.status == "passed" and kernel.score == kernel.max_score, (name, kernel.message)
    assert "ATTACK SUCCEEDED" not in result.to_json()
    assert SECRET not in result.to_json()


def check_attack(name: str, variant: Sample, result: Result, limit_s: float = 3.0) -> None:
    """What a grading of the sample `name` must show, alone or in a class: contained (`check_contained`), under an
    enforced sandbox, the attacked kernel's message in the words the attack should get (a time limit said as
    `limit_s`), and what each attack must not have done."""
    check_contained(result, variant)
    assert result.environment.sandbox_enforced, result.environment
    attacked = next(k for k in result.kernels if k.name == variant.kernel)
    for words in ATTACK_WORDS.get(name, ()):
        words = words.replace("within 3 s", f"within {limit_s:g} s")
        assert words in attacked.message, (words, attacked.message)
    if name == "attack-fake-stdout":
        assert attacked.score == 0 and result.score == 2
    if name == "attack-fill-private-tmp":
        assert not Path("/tmp/kernel-grader-fill-attack").exists()
    if name == "attack-compiler-reads-shadow":
        assert "root:" not in attacked.message
    if name == "attack-fork-bomb":  # ended at its cap, not by its time limit
        assert "did not finish within" not in attacked.message
    if name == "attack-huge-stdout":  # 8 MiB a call, six calls: what is kept is the cap's, per stream
        assert len(attacked.log) <= 2 * 2 * (1 << 20), len(attacked.log)


# Alone on each backend: the attacks whose checks here are more than a class's (the harness's own view of the network,
# the paths written outside, the cached inputs' digests). Every other attack is held to `check_attack` in its class.
ALONE = ("attack-network", "attack-write-outside", "attack-mutate-inputs")
INPUT_ATTACKS = ("attack-write-outside", "attack-mutate-inputs")  # what they write must leave the cached inputs as they were


@pytest.mark.parametrize("backend, name", [(backend, name) for backend in ("local", "docker") for name in ALONE],
                         indirect=["backend"])
def test_attack_is_contained(name: str, backend: str, flash: Assignment, tmp_path: Path, cache_dir: Path,
                             host_listener, victim: Path, monkeypatch: pytest.MonkeyPatch,
                             run_folders: set[str]) -> None:
    # The secret sits in the grader's own environment, as an instructor's shell would have it.
    monkeypatch.setenv("KERNEL_GRADER_SECRET", SECRET)
    for leftover in ESCAPES:
        leftover.unlink(missing_ok=True)
    variant = ATTACKS[name]
    # Only an attack meant to run into the time limit meets it at 3 s: on a loaded machine any other could reach
    # 3 s before the limit under test (memory, files, output) ends it. At 30 s, one that no limit ends still
    # times out, and fails its expected status.
    limited = flash if variant.expect == "timeout" else with_time_limit(flash, 30.0)
    if name in INPUT_ATTACKS:  # the reference first, under the same secret: the attack's inputs are then in the cache
        grade_variant(limited, None, tmp_path, cache_dir, sandbox=backend, secret=SECRET)
    inputs_before = _inputs_digests(cache_dir)  # the entries earlier gradings left: an attack must change none
    result, _ = grade_attack(name, limited, backend, tmp_path, cache_dir)
    check_attack(name, variant, result)
    assert result.environment.sandbox == backend
    # Whatever the attack started is gone with its sandbox.
    assert run_folders, "the test saw none of its own run folders"
    assert settled(lambda: orphaned_harnesses(run_folders)) == []  # this test's own harnesses only
    if name == "attack-network":
        assert host_listener == []
        # Said from the harness's own namespace, before the student's code ran.
        assert "network: loopback only, seen from inside the harness: lo" in result.environment.sandbox_enforced
    if name == "attack-write-outside":
        for path in ESCAPES:
            assert not path.exists(), path
        assert not any(path.name == "pwned" for path in _cached_inputs(cache_dir)) and not (cache_dir / "pwned").exists()
    if name in INPUT_ATTACKS:  # the inputs it was given, or found, are copies
        assert inputs_before, "no cached inputs to compare"
        inputs_after = _inputs_digests(cache_dir)
        assert {path: inputs_after.get(path) for path in inputs_before} == inputs_before


# Not the memory hog without cgroups: there RLIMIT_DATA may fail its malloc before the watchdog samples,
# and the code, which checks, returns a wrong answer that no limit ended.
@pytest.mark.parametrize("name, cgroups, limit, hint", [
    pytest.param("attack-fork-bomb", True, "processes", "more processes or threads than allowed", id="fork-cgroup"),
    pytest.param("attack-fork-bomb", False, "processes", "more processes or threads than allowed", id="fork-watchdog"),
    pytest.param("attack-memory-hog", True, "memory", "more host memory than the limit", id="memory-cgroup"),
])
def test_the_limit_that_ended_a_run_is_named_and_hinted(name: str, cgroups: bool, limit: str, hint: str,
                                                        flash: Assignment, tmp_path: Path, cache_dir: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A fork bomb at its cap (a cgroup's pids.max, or its uid's RLIMIT_NPROC) is ended there: the same fact, hint."""
    from grader.report.hints import case_hints

    if not cgroups:
        monkeypatch.setenv("KERNEL_GRADER_NO_CGROUPS", "1")
    # The time limit is not the fact under test: on a loaded machine the watchdog's walk (alone against the
    # bomb), or the hog's allocations, can take longer than 3 s. 30 s: a bound that never held is still
    # stopped by time, and fails the assertion below.
    flash = with_time_limit(flash, 30.0)
    result, _ = grade_attack(name, flash, "local", tmp_path, cache_dir)
    attacked = next(k for k in result.kernels if k.name == ATTACKS[name].kernel)
    failed = next(c for c in attacked.cases if not c.passed)
    assert failed.limit == limit, failed.message
    hints = case_hints(failed)
    assert hint in hints[0] and not any("loop whose bound" in h for h in hints)
    assert next(c for k in Result.from_json(result.to_json()).kernels for c in k.cases if c.name == failed.name
                and k.name == attacked.name).limit == limit  # stored and loaded back


def test_a_plain_timeout_keeps_the_timeout_hint(flash: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    from grader.report.hints import case_hints

    loop = next(v for v in variants(flash) if v.name == "hostile-flash-infinite-loop")
    result = grade_variant(flash, loop, tmp_path, cache_dir)
    stuck = next(c for k in result.kernels for c in k.cases if c.status == "timeout")
    assert stuck.limit == "time"
    assert "loop whose bound" in case_hints(stuck)[0]


def test_submission_time_limit_stops_the_whole_run(flash: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    """Per-call limits of 3 s, a whole-submission limit of 2 s: the loop is cut at 2 s and the rest not run."""
    import dataclasses

    loop = next(v for v in variants(flash) if v.name == "hostile-flash-infinite-loop")
    baseline = grade_variant(flash, None, tmp_path, cache_dir)  # the reference's run at the machine's pace now
    result = grade_variant(dataclasses.replace(flash, submission_time_limit_s=2.0), loop, tmp_path, cache_dir)
    kernel = next(k for k in result.kernels if k.name == "flash_attention")
    assert kernel.status == "timeout" and "the submission's time limit (2 s)" in kernel.message
    # Cut at 2 s, beside what a run costs here; the loop's own budget (6 s) would have taken longer.
    assert result.stages["run"] < 2.0 + 2 * baseline.stages["run"], (result.stages, baseline.stages)
