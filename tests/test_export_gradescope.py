"""Gradescope: results.json to the specification (checked against a schema written from it), and
the autograder zip, whose run_autograder is run for real in a stand-in for /autograder."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader.cli import main
from grader.report import gradescope
from grader.results import Result
from grader.samples import variants
from grader.spec import load_assignment

from report_fixtures import class_results  # noqa: F401  (a fixture)

jsonschema = pytest.importorskip("jsonschema", reason="validates results.json (pip install '.[test]')")
SCHEMA = json.loads((Path(__file__).parent / "schemas" / "gradescope-results.schema.json").read_text())


def validate(document: dict) -> None:
    jsonschema.Draft202012Validator(SCHEMA).validate(document)


def test_every_results_json_follows_the_specification(class_results: dict[str, Result]) -> None:
    for result in class_results.values():
        if result.status == "graded":
            validate(gradescope.results_json(result))
    validate(gradescope.failure_json("could not grade"))


@pytest.mark.parametrize("bad", [{"tests": [{"name": "x"}]}, {"score": 1, "visibility": "public"},
                                 {"score": 1, "tests": [{"score": 1, "status": "ok"}]},
                                 {"score": 1, "leaderboard": [{"name": "t", "value": 1, "order": "up"}]},
                                 {"score": 1, "scores": 2}])
def test_the_schema_rejects_what_gradescope_rejects(bad: dict) -> None:
    with pytest.raises(jsonschema.ValidationError):
        validate(bad)


def test_hidden_cases_stay_hidden_until_the_due_date(class_results: dict[str, Result]) -> None:
    result = class_results["brian"]
    document = gradescope.results_json(result)
    public = {f"{k.name} / {c.name}" for k in result.kernels for c in k.cases if c.public}
    for test in document["tests"]:
        assert test["visibility"] == ("visible" if test["name"] in public else "after_due_date"), test["name"]
    hidden_names = [c.name for k in result.kernels for c in k.cases if not c.public]
    assert not any(name in document["output"] for name in hidden_names)


def test_test_scores_add_up_to_the_score(class_results: dict[str, Result]) -> None:
    for result in class_results.values():
        document = gradescope.results_json(result)
        assert sum(t["score"] for t in document["tests"]) == pytest.approx(result.score, abs=1e-5)
        assert document["score"] == pytest.approx(result.score)
        assert sum(t["max_score"] for t in document["tests"]) == pytest.approx(result.max_score if result.kernels else 0)
    dana = gradescope.results_json(class_results["dana"])  # flash crashed on its first case: 0 for all of them
    assert all(t["score"] == 0 for t in dana["tests"] if t["name"].startswith("flash_attention"))


def test_late_penalty_is_a_test_of_its_own(class_results: dict[str, Result]) -> None:
    tests = gradescope.results_json(class_results["hana"])["tests"]
    assert tests[-1]["name"] == "late penalty" and tests[-1]["score"] == pytest.approx(-0.6)


def test_leaderboard_lists_the_timings_of_passing_kernels(class_results: dict[str, Result]) -> None:
    board = gradescope.results_json(class_results["ada"])["leaderboard"]
    assert [e["name"].split()[0] for e in board] == ["standard_attention", "flash_attention"]
    assert all(e["order"] == "asc" and e["value"] > 0 for e in board)
    assert [e["name"].split()[0] for e in gradescope.results_json(class_results["chen"])["leaderboard"]] == \
        ["flash_attention"]


# ---------------------------------------------------------------- the autograder zip, run for real


@pytest.fixture(scope="module")
def autograder_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gradescope")
    secret = out / "secret.txt"
    secret.write_text("course-secret\n")
    assert main(["export", "gradescope", "--assignment", "flash-attention-cpu", "--out", str(out),
                 "--secret-file", str(secret)]) == 0
    return out / "autograder-flash-attention-cpu.zip"


def test_the_zip_holds_setup_and_an_executable_run_autograder_at_its_root(autograder_zip: Path) -> None:
    with zipfile.ZipFile(autograder_zip) as archive:
        names = set(archive.namelist())
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in archive.infolist()}
        assert archive.read("secret").decode().strip() == "course-secret"
    assert {"setup.sh", "run_autograder", "kernel-grader/pyproject.toml", "kernel-grader/grader/cli/__init__.py",
            "kernel-grader/grader/report/templates/report.html.j2",
            "kernel-grader/assignments/flash-attention-cpu/assignment.toml",
            "kernel-grader/reference/flash-attention-cpu/src/flash_attention.cpp"} <= names
    assert modes["run_autograder"] & stat.S_IXUSR and modes["setup.sh"] & stat.S_IXUSR
    assert not any("gpt2-m1" in n or "__pycache__" in n for n in names)


def run_autograder(zip_path: Path, root: Path, submission: Path, cache_dir: Path) -> dict:
    """Lay out `root` as Gradescope lays out /autograder, run run_autograder, read results.json."""
    gradescope.unpack(zip_path, root / "source")
    shutil.copy2(root / "source" / "run_autograder", root / "run_autograder")
    shutil.copytree(submission, root / "submission")
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "KERNEL_GRADER_PYTHON": sys.executable,
           "KERNEL_GRADER_CACHE": str(cache_dir)}
    env.pop("PYTHONPATH", None)
    done = subprocess.run([str(root / "run_autograder")], cwd=root, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    document = json.loads((root / "results" / "results.json").read_text())
    validate(document)
    return document


def test_run_autograder_grades_a_flat_upload_of_a_mutant(autograder_zip: Path, tmp_path: Path,
                                                         cache_dir: Path) -> None:
    flash = load_assignment("flash-attention-cpu")
    mutant = next(v for v in variants(flash) if v.name == "mutant-flash-no-rescale")
    upload = tmp_path / "upload"
    upload.mkdir()
    # A student drags their four files into Gradescope: no src/ folder.
    for path in (flash.reference_dir / "src").iterdir():
        shutil.copy(path, upload / path.name)
    shutil.copy(mutant.folder / "src" / "flash_attention.cpp", upload / "flash_attention.cpp")
    document = run_autograder(autograder_zip, tmp_path / "autograder", upload, cache_dir)
    by_name = {t["name"]: t for t in document["tests"]}
    assert by_name["standard_attention / odd-sizes"]["status"] == "passed"
    assert by_name["flash_attention / one-row"]["status"] == "passed"
    assert by_name["flash_attention / square-tiles"]["status"] == "failed"
    assert by_name["flash_attention / square-tiles"]["visibility"] == "after_due_date"
    assert 1 < document["score"] < 3


def test_run_autograder_scores_an_upload_without_the_files_zero_saying_what_is_missing(
        autograder_zip: Path, tmp_path: Path, cache_dir: Path) -> None:
    upload = tmp_path / "upload"
    upload.mkdir()
    (upload / "notes.txt").write_text("oops, wrong files")
    document = run_autograder(autograder_zip, tmp_path / "autograder", upload, cache_dir)
    assert document["score"] == 0 and all(t["status"] == "failed" for t in document["tests"])
    first = next(t for t in document["tests"] if t["name"] == "flash_attention / one-row")
    assert "flash_attention.cpp" in first["output"]


def test_a_grader_failure_still_gives_gradescope_a_results_json(tmp_path: Path) -> None:
    log = tmp_path / "grade.log"
    log.write_text("error: submission /autograder/submission: no such folder\n")
    out = tmp_path / "results.json"
    assert main(["export", "gradescope-results", "--result", str(tmp_path / "absent.json"), "--log", str(log),
                 "--out", str(out)]) == 0
    document = json.loads(out.read_text())
    validate(document)
    assert document["score"] == 0 and "no such folder" in document["output"]


def test_export_gradescope_results_command(class_results: dict[str, Result], tmp_path: Path) -> None:
    saved = tmp_path / "emil.json"
    class_results["emil"].write(saved)
    assert main(["export", "gradescope-results", "--result", str(saved), "--out", str(tmp_path / "r.json")]) == 0
    document = json.loads((tmp_path / "r.json").read_text())
    validate(document)
    first = next(t for t in document["tests"] if t["name"] == "standard_attention / one-row")
    assert "compile error" in first["output"] and "src/standard_attention.cpp:12:" in first["output"]
