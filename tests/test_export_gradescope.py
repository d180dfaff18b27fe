"""Gradescope: results.json to the specification (checked against a schema written from it), and
the autograder zip, whose run_autograder is run for real in a stand-in for /autograder."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader.cli import main
from grader.export import gradescope_zip
from grader.report import gradescope
from grader.results import Result
from grader.samples import compose, variants
from grader.sources import interface_headers
from grader.spec import load_assignment

from report_fixtures import class_results  # noqa: F401  (a fixture)
from sandbox_fixtures import docker_ready  # noqa: F401  (a fixture)

jsonschema = pytest.importorskip("jsonschema", reason="validates results.json (pip install '.[test]')")
SCHEMA = json.loads((Path(__file__).parent / "schemas" / "gradescope-results.schema.json").read_text())


# The container's grader leases sandbox uids from a range of its own: a grader on the host (the other tests, run
# beside these) sees the container's processes, and a uid it leases has every process of it killed, its
# g++ in the container included (twice seen as "g++ exited with -9" under two suites). docs/sandbox.md says so.
CONTAINER_UIDS = {"KERNEL_GRADER_SANDBOX_UIDS": "61000-61099"}

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


@pytest.mark.parametrize("count, passed, deducted", [
    (3, {0, 1, 2}, 0.0), (3, {0, 1}, 0.0), (3, {0, 2}, 0.0), (3, {2}, 0.0), (3, {0, 1, 2}, 0.25),
    (6, set(range(6)), 0.0), (6, {1, 3, 4}, 0.0), (6, {0, 1, 2, 3, 4}, 0.1), (6, set(), 0.0),
])
def test_case_scores_add_up_exactly_and_never_exceed_their_maximum(
        class_results: dict[str, Result], count: int, passed: set[int], deducted: float) -> None:
    """A kernel of weight 1 over 3 or 6 cases: thirds and sixths do not round to millionths that add up."""
    base = class_results["ada"]
    kernel = base.kernels[0]
    cases = [dataclasses.replace(kernel.cases[0], name=f"case-{i}", passed=i in passed,
                                 status="passed" if i in passed else "failed") for i in range(count)]
    score = round(max(0.0, len(passed) / count - deducted), 6)
    one = dataclasses.replace(kernel, score=score, max_score=1.0, cases=cases)
    document = gradescope.results_json(dataclasses.replace(base, kernels=[one], score=score, max_score=1.0,
                                                           late=None))
    validate(document)
    tests = document["tests"]
    in_millionths = [(round(t["score"] * 1_000_000), round(t["max_score"] * 1_000_000)) for t in tests]
    assert sum(m for _, m in in_millionths) == 1_000_000
    assert sum(s for s, _ in in_millionths) == round(score * 1_000_000)
    assert all(0 <= t["score"] <= t["max_score"] for t in tests)
    assert all(t["score"] == 0 for t in tests if t["status"] == "failed")
    assert max(m for _, m in in_millionths) - min(m for _, m in in_millionths) <= count  # shares stay equal


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
            "kernel-grader/assignments/flash-attention-cpu/reference/src/flash_attention.cpp",
            "kernel-grader/assignments/flash-attention-cpu/template/README.md"} <= names
    assert modes["run_autograder"] & stat.S_IXUSR and modes["setup.sh"] & stat.S_IXUSR
    assert not any("gpt2-m1" in n or "__pycache__" in n or "/samples/" in n for n in names)


def run_autograder(zip_path: Path, root: Path, submission: Path, cache_dir: Path,
                   path_first: Path | None = None, secret_mode: int | None = None) -> dict:
    """Lay out `root` as Gradescope lays out /autograder, run run_autograder, read results.json.

    path_first: a folder put first in PATH (stand-ins for the container's tools). secret_mode: the
    secret file's mode after unzipping, where a test needs another than the zip's.
    """
    gradescope_zip.unpack(zip_path, root / "source")
    if secret_mode is not None:
        (root / "source" / "secret").chmod(secret_mode)
    shutil.copy2(root / "source" / "run_autograder", root / "run_autograder")
    shutil.copytree(submission, root / "submission")
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "KERNEL_GRADER_PYTHON": sys.executable,
           "KERNEL_GRADER_CACHE": str(cache_dir)}
    env.pop("PYTHONPATH", None)
    if path_first is not None:
        env["PATH"] = f"{path_first}:{env['PATH']}"
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


@pytest.mark.parametrize("name, mutant", [("autodiff-reverse", "mutant-shared-node-overwritten"),
                                          ("sparse-spmv-spgemm", "mutant-spmv-transposed")])
def test_a_python_packs_autograder_installs_its_packages_and_grades_a_flat_upload_of_a_mutant(
        name: str, mutant: str, tmp_path: Path, cache_dir: Path) -> None:
    """The student drags their modules in flat (kernels/scipy_sparse.py without kernels/__init__.py): each is found
    by name, and the sample's kernel loses exactly its cases."""
    pack = load_assignment(name)
    # No secret: the hidden cases' gold is then the one the pack's other tests computed (the same cache).
    assert main(["export", "gradescope", "--assignment", name, "--out", str(tmp_path)]) == 0
    zip_path = tmp_path / f"autograder-{name}.zip"
    with zipfile.ZipFile(zip_path) as archive:
        setup = archive.read("setup.sh").decode()
    for package in pack.python_packages:  # the venv is the grader's alone: the pack's packages come after it
        assert f"/autograder/venv/bin/python -m pip install {package}" in setup
    sample = next(v for v in variants(pack) if v.name == mutant)
    submitted = compose(pack, sample, tmp_path / "repo")
    upload = tmp_path / "upload"
    upload.mkdir()
    for source in pack.kernel(sample.kernel).sources:
        shutil.copy(submitted / source, upload / Path(source).name)
    document = run_autograder(zip_path, tmp_path / "autograder", upload, cache_dir)
    failed = [t["name"] for t in document["tests"] if t["status"] == "failed" and
              t["name"].startswith(f"{sample.kernel} / ")]
    assert sample.failed_cases and failed == [f"{sample.kernel} / {case}" for case in sample.failed_cases]
    assert 0 < document["score"] < pack.max_score


def test_run_autograder_scores_an_upload_without_the_files_zero_saying_what_is_missing(
        autograder_zip: Path, tmp_path: Path, cache_dir: Path) -> None:
    upload = tmp_path / "upload"
    upload.mkdir()
    (upload / "notes.txt").write_text("oops, wrong files")
    document = run_autograder(autograder_zip, tmp_path / "autograder", upload, cache_dir)
    assert document["score"] == 0 and all(t["status"] == "failed" for t in document["tests"])
    first = next(t for t in document["tests"] if t["name"] == "flash_attention / one-row")
    assert "flash_attention.cpp" in first["output"]


def test_an_upload_of_only_the_cpp_files_is_given_the_interface_headers(autograder_zip: Path, tmp_path: Path,
                                                                        cache_dir: Path) -> None:
    flash = load_assignment("flash-attention-cpu")
    assert interface_headers(flash) == ["src/flash_attention.h", "src/standard_attention.h"]
    assert interface_headers(load_assignment("gpt2-m1")) == []  # its .cuh files hold the TODOs
    upload = tmp_path / "upload"
    upload.mkdir()
    for name in ("standard_attention.cpp", "flash_attention.cpp"):  # dragged in flat, without the headers
        shutil.copy(flash.reference_dir / "src" / name, upload / name)
    document = run_autograder(autograder_zip, tmp_path / "autograder", upload, cache_dir)
    assert document["score"] == pytest.approx(3.0), document["output"]
    assert all(t["status"] == "passed" for t in document["tests"])
    assert "sandbox: process" not in document["output"]  # namespaces work here: the local sandbox graded it


def refusing_namespaces(tmp_path: Path) -> Path:
    """A folder of bwrap and unshare stand-ins that fail as in a Docker container with default capabilities."""
    refusing = tmp_path / "no-namespaces"
    refusing.mkdir()
    for tool in ("bwrap", "unshare"):
        (refusing / tool).write_text("#!/bin/sh\necho \"$0: Creating new namespace failed: Operation not "
                                     "permitted\" >&2\nexit 1\n")
        (refusing / tool).chmod(0o755)
    return refusing


def test_run_autograder_falls_back_to_the_process_sandbox_where_namespaces_are_refused(
        autograder_zip: Path, tmp_path: Path, cache_dir: Path) -> None:
    """As in a Docker container with default capabilities: bubblewrap and unshare fail, nobody gets 0."""
    flash = load_assignment("flash-attention-cpu")
    upload = tmp_path / "upload"
    shutil.copytree(flash.reference_dir / "src", upload / "src")
    document = run_autograder(autograder_zip, tmp_path / "autograder", upload, cache_dir,
                              path_first=refusing_namespaces(tmp_path))
    assert document["score"] == pytest.approx(3.0), document["output"]
    assert document["output"].startswith("sandbox: process (this container allows no namespaces)")
    assert document["visibility"] == "visible"


def run_autograder_in_docker(zip_path: Path, tmp_path: Path, files: dict[str, bytes]) -> tuple[dict, str]:
    """run_autograder as root in a container of the grading image, with Docker's default capabilities (which
    refuse namespaces: unshare and bubblewrap alike) and no network; `files` uploaded flat: (results.json, log)."""
    import importlib.util

    from grader.sandbox.docker import DEFAULT_IMAGE, docker_client

    root = tmp_path / "autograder"
    gradescope_zip.unpack(zip_path, root / "source")
    shutil.copy2(root / "source" / "run_autograder", root / "run_autograder")
    (root / "submission").mkdir()
    for name, data in files.items():
        (root / "submission" / name).write_bytes(data)
    # The grading image has Python, NumPy and g++; the grader's pure-Python dependencies come from here.
    deps = tmp_path / "deps"
    for package in ("rich", "jinja2", "markupsafe", "pygments", "markdown_it", "mdurl", "git", "gitdb", "smmap"):
        shutil.copytree(Path(importlib.util.find_spec(package).origin).parent, deps / package)
    volumes = {str(root): {"bind": "/autograder", "mode": "rw"}, str(deps): {"bind": "/deps", "mode": "ro"}}
    bwrap = shutil.which("bwrap")
    if bwrap:  # as setup.sh installs it on Gradescope's image
        volumes[bwrap] = {"bind": "/usr/local/bin/bwrap", "mode": "ro"}
    log = docker_client().containers.run(
        os.environ.get("KERNEL_GRADER_IMAGE", DEFAULT_IMAGE), ["/autograder/run_autograder"], user="0",
        network_mode="none", volumes=volumes, remove=True, stderr=True,
        environment={"PYTHONPATH": "/deps", "GIT_PYTHON_REFRESH": "quiet", "KERNEL_GRADER_PYTHON": "/usr/bin/python3",
                     **CONTAINER_UIDS})
    document = json.loads((root / "results" / "results.json").read_text())
    validate(document)
    return document, log.decode(errors="replace")


def test_run_autograder_in_a_docker_container_with_default_capabilities(autograder_zip: Path, tmp_path: Path,
                                                                        docker_ready: None) -> None:
    """The real thing: Docker's default capabilities refuse namespaces (unshare and bubblewrap alike)."""
    flash = load_assignment("flash-attention-cpu")
    files = {name: (flash.reference_dir / "src" / name).read_bytes()
             for name in ("standard_attention.cpp", "flash_attention.cpp")}
    document, log = run_autograder_in_docker(autograder_zip, tmp_path, files)
    assert document["score"] == pytest.approx(3.0), log[-3000:]
    assert document["output"].startswith("sandbox: process (this container allows no namespaces)")


SECRET_TEXT = "course-secret"  # what autograder_zip's secret file holds
# A static constructor in the student's standard_attention.cpp that reads the autograder's secret before any
# case runs. A read that succeeds prints the secret and aborts the library's load: the leak then shows in the
# score as well as in the log. A refused one says so and lets the reference's code pass every case.
STATIC_CONSTRUCTOR_LEAK = """
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
namespace {
const bool secret_read = [] {
    std::ifstream in("%s");
    if (!in.is_open()) { std::fprintf(stderr, "LEAK:SECRET-NOT-READABLE\\n"); return false; }
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "LEAK:%%s\\n", text.c_str());
    std::abort();
}();
}  // namespace
"""


def leaking_upload(secret_path: str, how: str) -> dict[str, bytes]:
    """The reference's two files, flat, as a student uploads them, with one way to read the secret.

    how: "static-constructor" (read when the library loads, before any case) or "include" (the compiler
    reads it, and its error message would quote the text).
    """
    source = load_assignment("flash-attention-cpu").reference_dir / "src"
    standard = (source / "standard_attention.cpp").read_bytes()
    if how == "static-constructor":
        standard += (STATIC_CONSTRUCTOR_LEAK % secret_path).encode()
    else:
        standard = f'#include "{secret_path}"\n'.encode() + standard
    return {"standard_attention.cpp": standard, "flash_attention.cpp": (source / "flash_attention.cpp").read_bytes()}


def assert_the_secret_stayed_secret(document: dict, how: str) -> None:
    """Nothing of the secret anywhere in results.json; the reference's code, read refused, still graded as it is."""
    assert SECRET_TEXT not in json.dumps(document), document["output"][-3000:]
    by_name = {t["name"]: t for t in document["tests"]}
    if how == "static-constructor":  # the read was refused, and the library loaded and passed every case
        assert document["score"] == pytest.approx(3.0), document["output"][-3000:]
    else:  # the compiler could not open it: a compile error of standard_attention that names the file only
        failed = by_name["standard_attention / one-row"]
        assert failed["status"] == "failed" and "compile error" in failed["output"], failed["output"]
        assert re.search(r"source/secret: (Permission denied|No such file or directory)", failed["output"]), \
            failed["output"]


@pytest.mark.parametrize("how", ["static-constructor", "include"])
@pytest.mark.parametrize("namespaces, secret_mode", [(True, None), (False, None), (False, 0o644)],
                         ids=["local", "process", "process-secret-0644"])
def test_student_code_cannot_read_the_autograders_secret(how: str, namespaces: bool, secret_mode: int | None,
                                                         autograder_zip: Path, tmp_path: Path,
                                                         cache_dir: Path) -> None:
    """Where namespaces work (local) and where they are refused (the process fallback, as root: a uid of its
    own, and the zip's secret is root's alone, mode 0600): neither the kernel nor its compiler reads it.

    The control: the fallback with the secret made readable to all (0644) leaks it, so a leak would be seen.
    """
    if not namespaces and os.geteuid() != 0:
        pytest.skip("the process fallback leaves the grader's user only as root (as run_autograder is run)")
    root = tmp_path / "autograder"
    upload = tmp_path / "upload"
    upload.mkdir()
    for name, data in leaking_upload(str(root / "source" / "secret"), how).items():
        (upload / name).write_bytes(data)
    document = run_autograder(autograder_zip, root, upload, cache_dir, secret_mode=secret_mode,
                              path_first=None if namespaces else refusing_namespaces(tmp_path))
    assert ("sandbox: process" in document["output"]) is not namespaces, document["output"][-3000:]
    if secret_mode is None:
        assert oct((root / "source" / "secret").stat().st_mode & 0o777) == oct(0o600)
        assert_the_secret_stayed_secret(document, how)
        return
    assert document["score"] < 3  # the static constructor read it and aborted; the include did not compile
    if how == "include":  # the compiler's message quotes what it read
        assert SECRET_TEXT in json.dumps(document), document["output"][-3000:]


@pytest.mark.parametrize("how", ["static-constructor", "include"])
def test_student_code_cannot_read_the_secret_in_a_docker_container(how: str, autograder_zip: Path, tmp_path: Path,
                                                                  docker_ready: None) -> None:
    """As on Gradescope: root in a container that refuses namespaces, the secret at /autograder/source/secret."""
    document, log = run_autograder_in_docker(autograder_zip, tmp_path, leaking_upload("/autograder/source/secret", how))
    assert document["output"].startswith("sandbox: process (this container allows no namespaces)"), log[-3000:]
    assert_the_secret_stayed_secret(document, how)


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
