"""An assignment's template and reference, each file stored once (grader.assignment.trees): the reference laid over
its template, a `based_on` assignment's trees over its base's, and `grader export template` writing one whole."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from grader.assignment import ASSIGNMENTS_DIR, list_assignments, load_assignment
from grader.assignment.trees import layers, tree_files
from grader.options import default_cache_dir
from test_cli import grader


def write(folder: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(text)


def files_of(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def family(tmp_path: Path) -> Path:
    """flash-attention-cpu, and `flash-next` based on it: a template file changed, one added, one solution changed."""
    root = tmp_path / "assignments"
    shutil.copytree(ASSIGNMENTS_DIR / "flash-attention-cpu", root / "flash-attention-cpu",
                    ignore=shutil.ignore_patterns("__pycache__", "samples"))
    child = root / "flash-next"
    write(child, {"assignment.toml": '[assignment]\nname = "flash-next"\nbased_on = "flash-attention-cpu"\n',
                  "template/README.md": "milestone two\n", "template/src/notes.md": "new in milestone two\n",
                  "reference/src/flash_attention.cpp": "// milestone two's solution\n"})
    return root


def test_a_reference_is_its_template_with_the_solution_laid_over_and_a_child_its_bases_with_its_own(
        family: Path) -> None:
    base, child = (load_assignment(family / name) for name in ("flash-attention-cpu", "flash-next"))
    own = {kind: files_of(base.root / kind) for kind in ("template", "reference")}
    assert "src/flash_attention.h" in own["template"] and "src/flash_attention.h" not in own["reference"]
    assert files_of(base.reference_dir) == {**own["template"], **own["reference"]}
    assert base.template_dir == base.root / "template"  # one folder gives it all: that folder, nothing written
    assert files_of(child.template_dir) == {**own["template"], "README.md": "milestone two\n",
                                            "src/notes.md": "new in milestone two\n"}
    assert files_of(child.reference_dir) == {**own["template"], **own["reference"], "README.md": "milestone two\n",
                                             "src/notes.md": "new in milestone two\n",
                                             "src/flash_attention.cpp": "// milestone two's solution\n"}
    assert child.tree_file("reference", "src/flash_attention.h") == base.root / "template" / "src/flash_attention.h"


def test_a_written_tree_is_kept_by_content_and_written_again_when_a_layer_changes(family: Path) -> None:
    child = load_assignment(family / "flash-next")
    first = child.reference_dir
    assert first.is_relative_to(default_cache_dir() / "trees")
    assert child.reference_dir == first
    (family / "flash-next" / "reference" / "src" / "flash_attention.cpp").write_text("// corrected\n")
    second = child.reference_dir
    assert second != first and (second / "src" / "flash_attention.cpp").read_text() == "// corrected\n"
    assert (first / "src" / "flash_attention.cpp").read_text() == "// milestone two's solution\n"


def laid(stack: tuple[Path, ...]) -> dict[str, Path]:
    """What a stack of layers gives: each relative path with the highest layer's file."""
    found: dict[str, Path] = {}
    for layer in stack:
        for path in sorted(layer.rglob("*")) if layer.is_dir() else ():
            if path.is_file() and "__pycache__" not in path.parts:
                found[path.relative_to(layer).as_posix()] = path
    return found


def test_no_file_of_ours_is_stored_twice() -> None:
    """Every non-empty file in an assignment's template/ or reference/ differs from what the layers below give at
    that path (its own template, its bases' trees): a copy is inherited, not stored (issue 43, item 5)."""
    copies = []
    for assignment in list_assignments():
        for kind in ("template", "reference"):
            stack = layers(assignment.lineage, kind)
            for index, layer in enumerate(stack):
                if layer.parent != assignment.root:
                    continue
                below = laid(stack[:index])
                for relative, path in laid((layer,)).items():
                    if path.stat().st_size and relative in below and below[relative].read_bytes() == path.read_bytes():
                        copies.append(f"{path.relative_to(ASSIGNMENTS_DIR)} = {below[relative].relative_to(ASSIGNMENTS_DIR)}")
    assert not sorted(set(copies))
    assert tree_files(load_assignment("gpt2-m3").lineage, "reference")["utils/cuda_utils.cuh"] == \
        ASSIGNMENTS_DIR / "gpt2-m1" / "template" / "utils" / "cuda_utils.cuh"


def test_export_template_writes_the_starting_repository_whole(tmp_path: Path, cache_dir: Path) -> None:
    m3 = load_assignment("gpt2-m3")
    out = tmp_path / "starter"
    done = grader("export", "template", "-a", "gpt2-m3", "--out", str(out), cache_dir=cache_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    written = files_of(out)
    assert written == files_of(m3.template_dir)
    assert {"kernels/matmul.cuh", "utils/cuda_utils.cuh", "kernels_req_4/README.md", ".kernel-grader.toml"} <= set(written)
    assert not (m3.root / "template" / "kernels" / "matmul.cuh").exists()  # gpt2-m1's, stored there alone
    assert written["kernels/matmul.cuh"] == (ASSIGNMENTS_DIR / "gpt2-m1" / "template" / "kernels" / "matmul.cuh").read_text()
    again = grader("export", "template", "-a", "gpt2-m3", "--out", str(out), cache_dir=cache_dir)
    assert again.returncode == 2 and "not an empty folder" in again.stdout
