"""The sources stage: which files each kernel's build gets from a checkout, an overlay, an upload."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from grader.cli import main
from grader.options import Options
from grader.pipeline import build_stage
from grader.samples import VARIANT_FILE, compose, variants
from grader.sources import SOURCE_DIR_FILES, Origin, Overlay, gather_sources, interface_headers, overlay_files
from grader.assignment import Assignment, load_assignment


@pytest.fixture(scope="module")
def gpt2() -> Assignment:
    return load_assignment("gpt2-m1")


@pytest.fixture(scope="module")
def flash() -> Assignment:
    return load_assignment("flash-attention-cpu")


def origins(assignment: Assignment, root: Path, kernel: str, overlay: Overlay | None = None,
            upload: bool = False) -> dict[str, Origin]:
    sources = gather_sources(assignment, root, overlay=overlay, upload=upload)
    return {f.path: f.origin for f in sources.of(kernel).files}


# ---------------------------------------------------------------- a checkout as it is


def test_a_kernel_gets_the_whole_kernels_folder_then_the_graders_provided_files(gpt2: Assignment) -> None:
    files = gather_sources(gpt2, gpt2.reference_dir).of("gelu").files
    folder = sorted(p.relative_to(gpt2.reference_dir).as_posix() for p in (gpt2.reference_dir / "kernels").iterdir())
    assert [f.path for f in files] == folder + ["utils/cuda_utils.cuh"]
    assert {f.origin for f in files[:-1]} == {Origin.SUBMISSION} and files[-1].origin is Origin.PROVIDED


def test_a_flash_kernel_gets_the_whole_src_folder_with_the_students_own_header(flash: Assignment,
                                                                              tmp_path: Path) -> None:
    root = shutil.copytree(flash.reference_dir, tmp_path / "submission")
    (root / "src" / "helper.h").write_text("#pragma once\ninline float twice(float x) { return 2 * x; }\n")
    (root / "notes.md").write_text("outside src/: not part of any build\n")
    sources = gather_sources(flash, root)
    expected = sorted(p.relative_to(root).as_posix() for p in (root / "src").iterdir())
    for kernel in flash.kernels:
        assert sorted(sources.of(kernel.name).built_from) == expected and "src/helper.h" in expected


def test_the_graders_provided_files_replace_the_students(gpt2: Assignment, tmp_path: Path) -> None:
    root = shutil.copytree(gpt2.reference_dir, tmp_path / "submission")
    (root / "utils" / "cuda_utils.cuh").write_text("#error a student's own utils\n")
    provided = gather_sources(gpt2, root).of("encoder").contents["utils/cuda_utils.cuh"]
    assert provided == (gpt2.template_dir / "utils" / "cuda_utils.cuh").read_bytes()


def test_a_missing_file_is_named_with_what_the_assignment_needs(flash: Assignment, tmp_path: Path) -> None:
    root = shutil.copytree(flash.reference_dir, tmp_path / "submission")
    (root / "src" / "flash_attention.cpp").unlink()
    sources = gather_sources(flash, root)
    assert sources.of("flash_attention").problem == "missing file(s) src/flash_attention.cpp: the assignment needs them"
    assert sources.of("standard_attention").problem == ""


def test_a_symlinked_file_is_named_and_never_read(gpt2: Assignment, tmp_path: Path) -> None:
    root = shutil.copytree(gpt2.reference_dir, tmp_path / "submission")
    secret = tmp_path / "secret.cuh"
    secret.write_text("kg-test-secret-7f3a\n")
    (root / "kernels" / "gelu.cuh").unlink()
    (root / "kernels" / "gelu.cuh").symlink_to(secret)
    (root / "kernels" / "notes.cuh").symlink_to(secret)
    sources = gather_sources(gpt2, root)
    assert sources.of("gelu").problem == "kernels/gelu.cuh is a symbolic link; submit the file itself"
    assert not any(b"kg-test-secret-7f3a" in content for k in sources.kernels for content in k.contents.values())


def test_a_symlinked_folder_above_a_kernel_file_is_named_and_never_read(flash: Assignment, tmp_path: Path) -> None:
    # src/ -> a folder of the grader's: src/flash_attention.cpp must not be read through it.
    root = shutil.copytree(flash.reference_dir, tmp_path / "submission")
    elsewhere = shutil.copytree(root / "src", tmp_path / "elsewhere")
    (elsewhere / "flash_attention.cpp").write_text("// kg-test-secret-51c2\n")
    shutil.rmtree(root / "src")
    (root / "src").symlink_to(elsewhere)
    for upload in (False, True):
        sources = gather_sources(flash, root, upload=upload)
        assert "src is a symbolic link; submit the file itself" in sources.of("flash_attention").problem
        assert not any(b"kg-test-secret-51c2" in content for k in sources.kernels for content in k.contents.values())


def test_a_kernels_folder_too_large_to_copy_into_every_build_is_refused(gpt2: Assignment, tmp_path: Path) -> None:
    root = shutil.copytree(gpt2.reference_dir, tmp_path / "submission")
    for i in range(SOURCE_DIR_FILES):
        (root / "kernels" / f"copy_{i}.cuh").write_text("// a copy\n")
    problem = gather_sources(gpt2, root).of("gelu").problem
    assert problem.startswith("kernels/ holds more than 256 files or 8 MiB")


def test_hidden_files_of_the_kernels_folder_are_left_out(gpt2: Assignment, tmp_path: Path) -> None:
    root = shutil.copytree(gpt2.reference_dir, tmp_path / "submission")
    (root / "kernels" / ".DS_Store").write_bytes(b"\0\1")
    assert "kernels/.DS_Store" not in origins(gpt2, root, "gelu")


# ---------------------------------------------------------------- overlays: the course's rule for kernels_req_x/


@pytest.fixture()
def with_variant_folder(gpt2: Assignment, tmp_path: Path) -> Path:
    """The reference with a kernels_req_0/: one file replacing the base's, one new, one symlink."""
    root = shutil.copytree(gpt2.reference_dir, tmp_path / "submission")
    variant = root / "kernels_req_0"
    variant.mkdir()
    (variant / "matmul.cuh").write_text("// the tiled matmul\n")
    (variant / "tiling.cuh").write_text("// a helper the tiled matmul includes\n")
    (variant / "gelu.cuh").symlink_to(tmp_path / "elsewhere.cuh")
    return root


def test_an_overlay_file_replaces_the_base_file_of_the_same_name(gpt2: Assignment, with_variant_folder: Path) -> None:
    sources = gather_sources(gpt2, with_variant_folder, overlay=Overlay("kernels_req_0", "kernels"))
    matmul = next(f for f in sources.of("matmul").files if f.path == "kernels/matmul.cuh")
    assert matmul.content == b"// the tiled matmul\n" and matmul.origin is Origin.OVERLAY
    assert "kernels/matmul.cuh (from kernels_req_0/matmul.cuh)" in sources.of("matmul").built_from
    # Every kernel's build sees the whole folder, overlay included: the rest stay the submission's.
    assert sources.of("gelu").contents["kernels/matmul.cuh"] == b"// the tiled matmul\n"
    assert origins(gpt2, with_variant_folder, "gelu", overlay=Overlay("kernels_req_0", "kernels"))[
        "kernels/gelu.cuh"] is Origin.SUBMISSION  # a symlink in the overlay is not a file of it


def test_a_new_file_of_an_overlay_joins_the_base_folder(gpt2: Assignment, with_variant_folder: Path) -> None:
    found = origins(gpt2, with_variant_folder, "matmul", overlay=Overlay("kernels_req_0", "kernels"))
    assert found["kernels/tiling.cuh"] is Origin.OVERLAY
    assert "kernels_req_0/matmul.cuh" not in found  # the variant folder itself is not built as it is
    assert "kernels/tiling.cuh" not in origins(gpt2, with_variant_folder, "matmul")  # only with the overlay


def test_a_missing_overlay_folder_is_named(gpt2: Assignment) -> None:
    sources = gather_sources(gpt2, gpt2.reference_dir, overlay=Overlay("kernels_req_1", "kernels"))
    assert {k.problem for k in sources.kernels} == {"kernels_req_1/ is not in the submission"}


def test_samples_are_composed_by_the_overlay_rule_without_their_variant_file(flash: Assignment,
                                                                             tmp_path: Path) -> None:
    mutant = next(v for v in variants(flash) if v.name == "mutant-flash-no-rescale")
    assert set(overlay_files(mutant.folder, leave_out=(VARIANT_FILE,))) == {"src/flash_attention.cpp"}
    folder = compose(flash, mutant, tmp_path / "submission")
    assert (folder / "src" / "flash_attention.cpp").read_bytes() == \
        (mutant.folder / "src" / "flash_attention.cpp").read_bytes()
    assert not list(folder.rglob(VARIANT_FILE))
    assert (folder / "src" / "standard_attention.cpp").read_bytes() == \
        (flash.reference_dir / "src" / "standard_attention.cpp").read_bytes()


# ---------------------------------------------------------------- uploads (Gradescope): flat, without the headers


def flat_upload(flash: Assignment, folder: Path, names: tuple[str, ...]) -> Path:
    folder.mkdir()
    for name in names:
        shutil.copy(flash.reference_dir / "src" / name, folder / name)
    return folder


def test_a_flat_upload_has_its_files_found_by_name(flash: Assignment, tmp_path: Path) -> None:
    upload = flat_upload(flash, tmp_path / "upload", ("flash_attention.h", "flash_attention.cpp",
                                                      "standard_attention.h", "standard_attention.cpp"))
    sources = gather_sources(flash, upload, upload=True)
    flash_files = sources.of("flash_attention")
    assert flash_files.problem == ""
    assert flash_files.contents["src/flash_attention.cpp"] == (upload / "flash_attention.cpp").read_bytes()
    assert {f.origin for f in flash_files.files} == {Origin.FOUND_IN_UPLOAD}
    assert "src/flash_attention.cpp (not at its path in the upload: flash_attention.cpp is used)" in \
        flash_files.built_from
    # Without --upload a folder is taken as it is: nothing is looked for elsewhere.
    as_it_is = gather_sources(flash, upload).of("flash_attention")
    assert as_it_is.problem.startswith("missing file(s) src/flash_attention.h")


def test_a_file_at_its_path_wins_and_the_shallowest_elsewhere_comes_next(flash: Assignment, tmp_path: Path) -> None:
    upload = flat_upload(flash, tmp_path / "upload", ("standard_attention.h", "flash_attention.h"))
    (upload / "src").mkdir()
    (upload / "src" / "standard_attention.cpp").write_text("// at its path\n")
    (upload / "standard_attention.cpp").write_text("// flat\n")
    (upload / "old" / "deeper").mkdir(parents=True)
    (upload / "old" / "deeper" / "flash_attention.cpp").write_text("// an old copy\n")
    (upload / "old" / "flash_attention.cpp").write_text("// shallower\n")
    sources = gather_sources(flash, upload, upload=True)
    assert sources.of("standard_attention").contents["src/standard_attention.cpp"] == b"// at its path\n"
    assert sources.of("flash_attention").contents["src/flash_attention.cpp"] == b"// shallower\n"


def test_an_upload_without_the_interface_headers_gets_the_templates(flash: Assignment, tmp_path: Path) -> None:
    upload = flat_upload(flash, tmp_path / "upload", ("standard_attention.cpp", "flash_attention.cpp"))
    sources = gather_sources(flash, upload, upload=True)
    standard = sources.of("standard_attention")
    assert standard.problem == ""
    assert standard.contents["src/standard_attention.h"] == \
        (flash.template_dir / "src" / "standard_attention.h").read_bytes()
    assert "src/standard_attention.h (not in the upload: the student template's is used)" in standard.built_from


def test_a_header_the_student_writes_is_never_taken_from_the_template(gpt2: Assignment, tmp_path: Path) -> None:
    assert interface_headers(gpt2) == []  # its .cuh files hold the TODOs
    root = shutil.copytree(gpt2.reference_dir, tmp_path / "upload")
    (root / "kernels" / "gelu.cuh").unlink()
    assert gather_sources(gpt2, root, upload=True).of("gelu").problem == \
        "missing file(s) kernels/gelu.cuh: the assignment needs them"


def test_a_flat_kernel_file_joins_every_kernels_build(gpt2: Assignment, tmp_path: Path) -> None:
    """The course compiles kernels/ as one program: a file found flat is in the folder every build sees."""
    root = shutil.copytree(gpt2.reference_dir, tmp_path / "upload")
    shutil.move(root / "kernels" / "matmul.cuh", root / "matmul.cuh")
    sources = gather_sources(gpt2, root, upload=True)
    assert sources.of("matmul").problem == ""
    assert origins(gpt2, root, "attention", upload=True)["kernels/matmul.cuh"] is Origin.FOUND_IN_UPLOAD


def test_an_upload_never_takes_a_symlink_for_a_file(flash: Assignment, tmp_path: Path) -> None:
    upload = flat_upload(flash, tmp_path / "upload", ("standard_attention.h", "standard_attention.cpp"))
    (upload / "flash_attention.cpp").symlink_to(flash.reference_dir / "src" / "flash_attention.cpp")
    problem = gather_sources(flash, upload, upload=True).of("flash_attention").problem
    assert problem == "missing file(s) src/flash_attention.cpp: the assignment needs them"


# ---------------------------------------------------------------- the stage in the pipeline and the command


def test_the_sources_stage_is_timed_between_fetch_and_build(flash: Assignment, tmp_path: Path,
                                                            cache_dir: Path) -> None:
    built = build_stage(flash.reference_dir, flash, Options(cache_dir=cache_dir))
    assert [name for name, _ in built.stages.stages][:3] == ["fetch", "sources", "build"]


def test_grade_upload_grades_a_flat_upload_and_says_which_files_it_placed(flash: Assignment, tmp_path: Path,
                                                                          cache_dir: Path) -> None:
    upload = flat_upload(flash, tmp_path / "upload", ("standard_attention.cpp", "flash_attention.cpp"))
    saved = tmp_path / "result.json"
    assert main(["grade", str(upload), "-a", "flash-attention-cpu", "--upload", "--sandbox", "process",
                 "--no-sanitizer", "--cache-dir", str(cache_dir), "--json", str(saved)]) == 0
    kernels = {k["name"]: k for k in json.loads(saved.read_text())["kernels"]}
    assert kernels["standard_attention"]["status"] == "passed", kernels["standard_attention"]["message"]
    assert "src/standard_attention.h (not in the upload: the student template's is used)" in \
        kernels["standard_attention"]["built_from"]
