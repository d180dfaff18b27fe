"""A build's cache key hashes the files that can reach its compiler (grader/includes.py): a variant's copy of a
kernel it leaves alone shares the base's build, and a file that any way could reach the compiler still counts."""

from __future__ import annotations

import pytest

from grader.build import build_key, toolchain_for
from grader.includes import compiler_inputs
from grader.sources import gather_sources
from grader.assignment import load_assignment

SHIM = '#include <cstdio>\n#include "kernels/encoder.cuh"\n'
OTHERS = ("kernels/matmul.cuh", "kernels/softmax.cuh")


def folder(changed: dict[str, str] | None = None) -> dict[str, bytes]:
    """A course-style kernels/ folder: the encoder includes the utilities, which the matmul includes too."""
    files = {
        "kernels/encoder.cuh": '#include "../utils/cuda_utils.cuh"\nvoid encoder_forward() {}\n',
        "kernels/matmul.cuh": '#include "../utils/cuda_utils.cuh"\nvoid matmul_forward() {}\n',
        "kernels/softmax.cuh": "void softmax_forward() {}\n",
        "utils/cuda_utils.cuh": "#include <cstdlib>\n#if __has_include(<cublas_v2.h>)\n#endif\n",
        "notes.txt": "not a source of any kernel\n",
    }
    files.update(changed or {})
    return {path: text.encode() for path, text in files.items()}


def inputs(files: dict[str, bytes]) -> set[str]:
    return set(compiler_inputs(files, [], SHIM, OTHERS))


def test_another_kernels_file_that_nothing_includes_is_left_out() -> None:
    assert inputs(folder()) == {"kernels/encoder.cuh", "utils/cuda_utils.cuh", "notes.txt"}


def test_a_file_reached_through_another_counts() -> None:
    files = folder({"kernels/encoder.cuh": '#include "matmul.cuh"\n'})  # beside it, then through it the utilities
    assert inputs(files) == {"kernels/encoder.cuh", "kernels/matmul.cuh", "utils/cuda_utils.cuh", "notes.txt"}
    files = folder({"kernels/encoder.cuh": "#include <kernels/softmax.cuh>\n"})  # through -I.
    assert "kernels/softmax.cuh" in inputs(files)
    files = folder({"kernels/encoder.cuh": '#inc\\\nlude "softmax.cuh"\n'})  # a backslash-newline: joined first
    assert "kernels/softmax.cuh" in inputs(files) and "kernels/matmul.cuh" not in inputs(files)


@pytest.mark.parametrize("text", [
    "#define WHICH \"softmax.cuh\"\n#include WHICH\n",  # through a macro
    '#include_next "softmax.cuh"\n',
    '#/**/include "softmax.cuh"\n',  # a comment inside the directive
    "#if __has_include_next(<x.h>)\n#endif\n",
    'asm(".incbin \\"kernels/softmax.cuh\\"");\n',
], ids=["macro", "include-next", "comment", "has-include-next", "incbin"])
def test_any_other_way_to_read_a_file_makes_every_file_count(text: str) -> None:
    assert inputs(folder({"kernels/encoder.cuh": text})) == set(folder())


def test_a_students_file_that_is_no_kernels_source_counts_even_if_nothing_names_it() -> None:
    # A stdlib.h at the top stands in for the system's through -I. wherever a system header includes it.
    assert "stdlib.h" in inputs({**folder(), "stdlib.h": b"#error shadowed\n"})


def test_gpt2_m2s_variants_share_the_builds_of_the_kernels_their_folders_leave_alone() -> None:
    m2 = load_assignment("gpt2-m2")
    sources = gather_sources(m2, m2.reference_dir, m2.kernels)
    toolchain = toolchain_for(m2.target, "sm_90")
    key = {k.name: build_key(m2, k, sources.of(k.name), toolchain) for k in m2.kernels}
    # req_0 replaces matmul.cuh and attention.cuh: its encoder is the base's; its attention, which includes its
    # matmul, is not; req_3 replaces layernorm.cuh and softmax.cuh, so its attention (which includes softmax) is new.
    assert key["req_0/encoder"] == key["encoder"] and key["req_3/matmul"] == key["matmul"]
    assert key["req_0/matmul"] != key["matmul"] and key["req_0/attention"] != key["attention"]
    assert key["req_3/attention"] != key["attention"] and key["req_3/layernorm"] != key["layernorm"]
    assert len(set(key.values())) == 14  # of 30 kernels
