"""CUTLASS's headers in gpt2-m3's builds, as the course's Makefile adds CUTLASS_INCLUDES for op_14 ... op_16: found
where the machine has them ($KERNEL_GRADER_CUTLASS, or pip's nvidia-cutlass), shown to the sandboxed compiler, and,
where it has none, a build that includes one is the machine's failure in words, not the team's compile error.

Real nvcc builds in the local sandbox; a stand-in CUTLASS (two headers) keeps them to seconds. The real CUTLASS GEMM
(samples/course-op14-cutlass-gemm) is built and run in tests/test_gpu_gpt2_m3_ops.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import grader.build as build
from grader.build import build_submission
from grader.errors import MachineError
from grader.sandbox import sandbox_named
from grader.sources import gather_sources
from grader.assignment import Assignment, load_assignment
from grader.targets.cuda import CUTLASS_VARIABLE, cutlass_include

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit)")

# op_14's matmul as a team writes it, cut to what a stand-in CUTLASS can compile: the reference's kernel, plus a
# CUTLASS include the build must find.
CUTLASS_MATMUL = '#include "cutlass/gemm/device/gemm.h"\nstatic_assert(cutlass::gemm::kStandIn == 14, "");\n'


@pytest.fixture()
def stand_in_cutlass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A CUTLASS checkout of two headers, named by $KERNEL_GRADER_CUTLASS."""
    root = tmp_path / "cutlass-checkout"
    (root / "include" / "cutlass" / "gemm" / "device").mkdir(parents=True)
    (root / "include" / "cutlass" / "cutlass.h").write_text("#pragma once\nnamespace cutlass {}\n")
    (root / "include" / "cutlass" / "gemm" / "device" / "gemm.h").write_text(
        '#pragma once\n#include "cutlass/cutlass.h"\nnamespace cutlass { namespace gemm { constexpr int kStandIn = 14; } }\n')
    monkeypatch.setenv(CUTLASS_VARIABLE, str(root))
    build.library_flags.cache_clear()  # the flags are kept per process: this test's CUTLASS, not an earlier one's
    yield root
    build.library_flags.cache_clear()


@pytest.fixture()
def no_cutlass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv(CUTLASS_VARIABLE, str(tmp_path / "empty"))
    build.library_flags.cache_clear()
    yield
    build.library_flags.cache_clear()


def submission(assignment: Assignment, tmp_path: Path, folder: str) -> Path:
    """The reference, with `folder`/matmul.cuh including a CUTLASS header."""
    root = shutil.copytree(assignment.reference_dir, tmp_path / "submission")
    (root / folder).mkdir(exist_ok=True)
    matmul = (assignment.reference_dir / "kernels" / "matmul.cuh").read_text()
    (root / folder / "matmul.cuh").write_text(CUTLASS_MATMUL + matmul)
    return root


def test_the_include_folder_is_found_where_it_is_named(stand_in_cutlass: Path, tmp_path: Path) -> None:
    assert cutlass_include() == (stand_in_cutlass / "include").resolve()
    assert build.library_flags(("cublas", "cutlass"), build.toolchain_for("cuda"))[:2] == (
        "-I", str((stand_in_cutlass / "include").resolve()))
    # gpt2-m1 and m2 provide no CUTLASS: their builds get no CUTLASS folder.
    assert str((stand_in_cutlass / "include").resolve()) not in build.library_flags(("cublas",), build.toolchain_for("cuda"))


def test_a_cutlass_include_builds_in_the_sandbox_with_the_machines_cutlass(stand_in_cutlass: Path,
                                                                            tmp_path: Path) -> None:
    m3 = load_assignment("gpt2-m3")
    root = submission(m3, tmp_path, "kernels_op_14")
    artifact = build_submission(m3, root, tmp_path / "cache", (m3.kernel("op_14/matmul"),),
                                sandbox=sandbox_named("local"))["op_14/matmul"]
    assert artifact.status == "built", artifact.message


def test_without_cutlass_on_the_machine_the_build_is_the_machines_failure(no_cutlass: None, tmp_path: Path) -> None:
    m3 = load_assignment("gpt2-m3")
    root = submission(m3, tmp_path, "kernels_op_14")
    with pytest.raises(MachineError) as raised:
        build_submission(m3, root, tmp_path / "cache", (m3.kernel("op_14/matmul"),), sandbox=sandbox_named("local"))
    assert raised.value.fault == "library"
    assert str(raised.value).startswith("the code includes cutlass/gemm/device/gemm.h, a CUTLASS header, and this "
                                        "grading machine has no CUTLASS"), raised.value
    assert CUTLASS_VARIABLE in str(raised.value)
    # Nothing kept: a machine with CUTLASS (or this one, once set up) builds it, rather than finding a compile error.
    assert not list((tmp_path / "cache").glob("builds/*/build.json"))


def test_where_the_assignment_provides_no_cutlass_including_it_is_the_teams_compile_error(no_cutlass: None,
                                                                                         tmp_path: Path) -> None:
    m2 = load_assignment("gpt2-m2")
    root = submission(m2, tmp_path, "kernels_req_0")
    artifact = build_submission(m2, root, tmp_path / "cache", (m2.kernel("req_0/matmul"),))["req_0/matmul"]
    assert artifact.status == "compile_error" and "cutlass/gemm/device/gemm.h" in artifact.message, artifact.message


def test_a_new_cutlass_at_the_same_path_builds_again(stand_in_cutlass: Path, tmp_path: Path) -> None:
    """The cache key holds CUTLASS's version.h: an upgraded checkout at the same path does not reuse old builds."""
    m3 = load_assignment("gpt2-m3")
    kernel = m3.kernel("op_14/matmul")
    sources = gather_sources(m3, submission(m3, tmp_path, "kernels_op_14"), (kernel,)).of(kernel.name)
    toolchain = build.toolchain_for("cuda")
    version = stand_in_cutlass / "include" / "cutlass" / "version.h"
    keys = [build.build_key(m3, kernel, sources, toolchain)]
    for patch in (0, 0, 1):
        version.write_text(f"#define CUTLASS_MAJOR 4\n#define CUTLASS_MINOR 2\n#define CUTLASS_PATCH {patch}\n")
        keys.append(build.build_key(m3, kernel, sources, toolchain))
    assert len({keys[0], keys[1], keys[3]}) == 3 and keys[1] == keys[2], keys
    # An assignment that provides no CUTLASS keeps its keys whatever the machine's CUTLASS.
    m2 = load_assignment("gpt2-m2")
    plain = m2.kernel("req_0/matmul")
    plain_sources = gather_sources(m2, m2.reference_dir, (plain,)).of(plain.name)
    before = build.build_key(m2, plain, plain_sources, toolchain)
    version.write_text("#define CUTLASS_PATCH 2\n")
    assert build.build_key(m2, plain, plain_sources, toolchain) == before
