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
from grader.assignment import PROJECT_ROOT, load_assignment

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


def shipped_names(pack: str) -> set[str]:
    """What the zip of `pack` carries of the repository, relative to it."""
    return {path.relative_to(PROJECT_ROOT).as_posix() for path in gradescope_zip.shipped_files(load_assignment(pack))}


def test_a_numpy_gold_zip_ships_of_the_reference_only_what_the_template_gives_students() -> None:
    """flash-attention-backward's gold is NumPy's: its reference .cpp files stay out; the interface headers
    (the template's, which the reference inherits) ship, for an upload that lacks them. No sample, no other pack."""
    pack = load_assignment("flash-attention-backward")
    assert pack.gold == "numpy"
    names = shipped_names(pack.name)
    assert not [n for n in names if "/reference/" in n]
    assert sorted(interface_headers(pack)) == ["src/flash_attention_backward.h", "src/standard_attention_backward.h"]
    assert {f"assignments/{pack.name}/template/{h}" for h in interface_headers(pack)} <= names
    assert not any("/samples/" in n for n in names)
    assert {n.split("/")[1] for n in names if n.startswith("assignments/")} == {pack.name}
    # Gold from the reference: the reference ships whole (run_autograder makes it root's alone).
    flash = load_assignment("flash-attention-cpu")
    assert flash.gold == "reference"
    assert "assignments/flash-attention-cpu/reference/src/flash_attention.cpp" in shipped_names(flash.name)


def test_a_based_on_zip_ships_its_bases_spec_and_modules_and_nothing_else_of_them() -> None:
    """gpt2-m3 is based on gpt2-m2, itself on gpt2-m1: without their assignment.toml the zip's grader could not
    load it, and its template is laid from theirs (grader.assignment.trees); their references (NumPy gold) and
    samples stay out."""
    pack = load_assignment("gpt2-m3")
    names = shipped_names("gpt2-m3")
    of_others = {n for n in names if n.startswith("assignments/") and not n.startswith("assignments/gpt2-m3/")}
    assert {n for n in of_others if "/template/" not in n} == {
        "assignments/gpt2-m2/assignment.toml", "assignments/gpt2-m1/assignment.toml",
        "assignments/gpt2-m1/inputs.py", "assignments/gpt2-m1/numpy_reference.py"}
    assert "assignments/gpt2-m1/template/utils/cuda_utils.cuh" in of_others  # the provided utils, stored once
    assert not [n for n in names if "/reference/" in n or "/samples/" in n]
    shipped_template = {n.split("/template/", 1)[1] for n in names if "/template/" in n}
    assert shipped_template == {p.relative_to(pack.template_dir).as_posix()
                                for p in pack.template_dir.rglob("*") if p.is_file()}


def run_autograder(zip_path: Path, root: Path, submission: Path, cache_dir: Path,
                   path_first: Path | None = None, modes_lost: bool = False, unpacked: bool = False) -> dict:
    """Lay out `root` as Gradescope lays out /autograder, run run_autograder, read results.json.

    path_first: a folder put first in PATH (stand-ins for the container's tools). modes_lost: unzipped by a
    tool that keeps no modes but the scripts' executable bits (every file 0644, the scripts and every folder
    0755). unpacked: root/source is laid out already.
    """
    if not unpacked:
        gradescope_zip.unpack(zip_path, root / "source")
    if modes_lost:
        for folder, _, files in os.walk(root / "source"):
            os.chmod(folder, 0o755)
            for name in files:
                os.chmod(os.path.join(folder, name), 0o755 if name in ("run_autograder", "setup.sh") else 0o644)
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


def locked_cache(tmp_path: Path) -> Path:
    """A cache of the test's own for a run of the process fallback: run_autograder makes its cache root root's alone
    (as on Gradescope, one grade a container), which would lock the session's cache against the harnesses of the
    tests running beside it."""
    return tmp_path / "cache"


def test_run_autograder_falls_back_to_the_process_sandbox_where_namespaces_are_refused(
        autograder_zip: Path, tmp_path: Path, cache_dir: Path) -> None:
    """As in a Docker container with default capabilities: bubblewrap and unshare fail, nobody gets 0."""
    flash = load_assignment("flash-attention-cpu")
    upload = tmp_path / "upload"
    shutil.copytree(flash.reference_dir / "src", upload / "src")
    document = run_autograder(autograder_zip, tmp_path / "autograder", upload, locked_cache(tmp_path),
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
# A static constructor in the student's standard_attention.cpp that, before any case runs, tries to read every
# file the zip ships (where it was unzipped), the copy of run_autograder Gradescope runs, and every file it can
# find by listing the grader's folders (the zip's, the cache: gold, builds, inputs). It counts the ones it read
# (their paths to stderr), the grader package's (kernel-grader/grader/: the local sandbox mounts it, since its
# harness imports it there) apart from all others, and its kernel then writes both where a case shows them:
# O[0] = 1000 + 10000 x others + package (each capped: six digits show), "expected 0.97, got 11012" (the first byte of a reference file leaked
# that way, as "got 47"). Read nothing and the reference's code passes every case. What the harness is given is not counted: its own library and the
# cache's inputs/ (where a mount namespace shows them, they are the only entries). /etc/passwd, which every
# backend shows, is read first: a probe that cannot read it is broken, and its kernel says so by O[0] = -1000.
PROBE = r"""
#include <algorithm>
#include <cstdio>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
namespace {
const char* const shipped[] = {%(shipped)s};
const char* const listed[] = {%(listed)s};
const std::string package = %(package)s;
int others_read = 0, package_read = 0;
bool control_read = false;
std::string own_library;

bool reads(const char* path) {
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    char byte;
    const bool read_it = read(fd, &byte, 1) >= 0;  // a folder opens but reads nothing (EISDIR)
    close(fd);
    return read_it;
}

void tried(const char* path) {
    // The grader's counting allocator, preloaded into the harness to measure its heap: public code, read by design.
    if (std::string(path).find("/alloc-counter/") != std::string::npos) return;
    if (!reads(path)) return;
    ++(std::string(path).rfind(package, 0) == 0 ? package_read : others_read);
    std::fprintf(stderr, "PROBE-READ %%s\n", path);
}

void walk(const std::string& folder, int depth) {
    DIR* listing = opendir(folder.c_str());
    if (listing == nullptr) return;
    while (dirent* entry = readdir(listing)) {
        const std::string name = entry->d_name;
        if (name == "." || name == ".." || (depth == 0 && name == "inputs")) continue;
        const std::string path = folder + "/" + name;
        struct stat status;
        if (lstat(path.c_str(), &status) != 0) continue;
        if (S_ISDIR(status.st_mode) && depth < 16) walk(path, depth + 1);
        if (S_ISREG(status.st_mode) && path != own_library) tried(path.c_str());
    }
    closedir(listing);
}

const bool probed = [] {
    Dl_info self;
    if (dladdr(reinterpret_cast<void*>(&reads), &self) != 0 && self.dli_fname != nullptr) own_library = self.dli_fname;
    control_read = reads("/etc/passwd");
    for (const char* path : shipped) tried(path);
    for (const char* folder : listed) walk(folder, 0);
    std::fprintf(stderr, "PROBE: read %%d of the grader's files and %%d of its package; control %%s\n",
                 others_read, package_read, control_read ? "read" : "NOT read");
    return true;
}();
}  // namespace

void standard_attention(const float* Q, const float* K, const float* V, float* O, int N, int d) {
    probed_standard_attention(Q, K, V, O, N, d);
    if (!probed || !control_read) O[0] = -1000.0f;
    else if (others_read + package_read > 0)
        O[0] = 1000.0f + 10000.0f * std::min(others_read, 99) + std::min(package_read, 9999);
}
"""


def zip_paths(zip_path: Path, root: str) -> list[str]:
    """Where the zip's files lie once unzipped under `root` (Gradescope's /autograder), with the run_autograder
    copied up beside source/."""
    with zipfile.ZipFile(zip_path) as archive:
        names = [name for name in archive.namelist() if not name.endswith("/")]
    return [f"{root}/source/{name}" for name in names] + [f"{root}/run_autograder"]


def leaking_upload(zip_path: Path, root: str, how: str, cache: str | None = None) -> dict[str, bytes]:
    """The reference's two files, flat, as a student uploads them, with one way to read the grader's files.

    how: "static-constructor" (the probe above: every file the zip ships and every one found under the zip's
    folder and `cache`, default root/cache, read when the library loads, before any case) or "include" (the
    compiler reads the secret, and its error message would quote the text).
    """
    source = load_assignment("flash-attention-cpu").reference_dir / "src"
    standard = (source / "standard_attention.cpp").read_text()
    if how == "static-constructor":
        signature = "void standard_attention(const float* Q"
        assert standard.count(signature) == 1
        quoted = lambda paths: ", ".join(json.dumps(p) for p in paths)  # noqa: E731
        standard = standard.replace(signature, "static void probed_standard_attention(const float* Q") + PROBE % {
            "shipped": quoted(zip_paths(zip_path, root)),
            "listed": quoted([f"{root}/source", cache or f"{root}/cache", f"{root}/results"]),
            "package": json.dumps(f"{root}/source/kernel-grader/grader/")}
    else:
        standard = f'#include "{root}/source/secret"\n' + standard
    return {"standard_attention.cpp": standard.encode(),
            "flash_attention.cpp": (source / "flash_attention.cpp").read_bytes()}


def assert_the_secret_stayed_secret(document: dict, how: str, package_visible: bool = False) -> None:
    """Nothing of the grader's files anywhere in results.json; the reference's code, every read refused, still
    graded as it is. package_visible: the local sandbox, which mounts the grader package (its harness imports
    it there): the probe may read that package's files (the grader's public code), and nothing else."""
    assert SECRET_TEXT not in json.dumps(document), document["output"][-3000:]
    by_name = {t["name"]: t for t in document["tests"]}
    if how == "static-constructor":  # it read none of the files, read /etc/passwd, and passed every case
        failed = [f"{t['name']}: {t['output']}" for t in document["tests"] if t["status"] != "passed"]
        if failed and package_visible:
            others, package = probe_counts(document)
            assert others == 0 and package > 0, "\n".join(failed)[-3000:]
            assert all(t["status"] == "passed" for t in document["tests"] if t["name"].startswith("flash_attention"))
            return
        assert not failed and document["score"] == pytest.approx(3.0), "\n".join(failed)[-3000:]
    else:  # the compiler could not open it: a compile error of standard_attention that names the file only
        failed = by_name["standard_attention / one-row"]
        assert failed["status"] == "failed" and "compile error" in failed["output"], failed["output"]
        assert re.search(r"source/secret: (Permission denied|No such file or directory)", failed["output"]), \
            failed["output"]


def probe_counts(document: dict) -> tuple[int, int]:
    """What the probe read, as its kernel wrote it where the first visible case shows it: (others, package)."""
    output = next(t for t in document["tests"] if t["name"] == "standard_attention / one-row")["output"]
    found = re.search(r"first mismatch at \S*\[[^\]]*\]: expected \S+, got ([0-9]+)\b", output)
    assert found, output
    value = int(found.group(1)) - 1000
    return value // 10000, value % 10000


@pytest.mark.parametrize("how", ["static-constructor", "include"])
@pytest.mark.parametrize("namespaces, modes_lost", [(True, False), (False, False), (False, True)],
                         ids=["local", "process", "process-modes-lost"])
def test_student_code_reads_none_of_the_autograders_files(how: str, namespaces: bool, modes_lost: bool,
                                                          autograder_zip: Path, tmp_path: Path,
                                                          cache_dir: Path) -> None:
    """Where namespaces work (local: of the grader only its package is mounted, for the harness's imports) and
    where they are refused (the process fallback, as root: a uid of its own, the harness importing a copy of
    the grader's harness half, and run_autograder has made the zip's tree, itself and the cache root's alone):
    neither the kernel nor its compiler reads the secret, the reference or any other file the zip ships.
    modes-lost: unzipped by a tool that kept no modes (every file 0644, the secret too): run_autograder locks
    it all the same. The probe's control: test_the_probe_counts_what_it_reads."""
    if not namespaces and os.geteuid() != 0:
        pytest.skip("the process fallback leaves the grader's user only as root (as run_autograder is run)")
    root = tmp_path / "autograder"
    upload = tmp_path / "upload"
    upload.mkdir()
    cache = cache_dir if namespaces else locked_cache(tmp_path)
    for name, data in leaking_upload(autograder_zip, str(root), how, str(cache)).items():
        (upload / name).write_bytes(data)
    document = run_autograder(autograder_zip, root, upload, cache, modes_lost=modes_lost,
                              path_first=None if namespaces else refusing_namespaces(tmp_path))
    assert ("sandbox: process" in document["output"]) is not namespaces, document["output"][-3000:]
    if not namespaces:  # what run_autograder left behind it: root's alone
        for path in (root / "source" / "secret", root / "source" / "kernel-grader" / "assignments"):
            assert path.stat().st_mode & 0o077 == 0, oct(path.stat().st_mode)
    assert_the_secret_stayed_secret(document, how, package_visible=namespaces)


def test_the_probe_counts_what_it_reads(autograder_zip: Path, tmp_path: Path, cache_dir: Path) -> None:
    """The probe's control: the process fallback as root, with run_autograder's lock undone (the grader's files
    readable by all, as the zip was before): the probe reads them, and its count shows in the first visible case."""
    if os.geteuid() != 0:
        pytest.skip("the process fallback leaves the grader's user only as root (as run_autograder is run)")
    root = tmp_path / "autograder"
    upload = tmp_path / "upload"
    upload.mkdir()
    cache = locked_cache(tmp_path)
    for name, data in leaking_upload(autograder_zip, str(root), "static-constructor", str(cache)).items():
        (upload / name).write_bytes(data)
    gradescope_zip.unpack(autograder_zip, root / "source")
    # run_autograder without its lock: the lines that make the grader's files root's alone, taken out.
    script = (root / "source" / "run_autograder").read_text()
    unlocked = re.sub(r'\n  chown -R 0:0 "\$SOURCE"\n  chmod -R go-rwx "\$SOURCE"\n', "\n", script)
    assert unlocked != script
    (root / "source" / "run_autograder").write_text(unlocked)
    document = run_autograder(autograder_zip, root, upload, cache, unpacked=True,
                              path_first=refusing_namespaces(tmp_path))
    assert "sandbox: process" in document["output"]
    with zipfile.ZipFile(autograder_zip) as archive:
        names = [n for n in archive.namelist() if not n.endswith("/")]
    package = sum(n.startswith("kernel-grader/grader/") for n in names)
    others, read = probe_counts(document)
    # Every shipped file twice (by name, and found by listing), less the secret (the zip's mode 0600 already) and
    # run_autograder's copy (still locked); the package's bytecode, written beside it by the grader, on top.
    assert others == 2 * (len(names) - package - 1) and read >= 2 * package, document["output"][-3000:]
    assert document["score"] < 3


@pytest.mark.parametrize("how", ["static-constructor", "include"])
def test_student_code_reads_none_of_the_autograders_files_in_a_docker_container(
        how: str, autograder_zip: Path, tmp_path: Path, docker_ready: None) -> None:
    """As on Gradescope: root in a container that refuses namespaces, the zip at /autograder/source."""
    document, log = run_autograder_in_docker(autograder_zip, tmp_path, leaking_upload(autograder_zip, "/autograder", how))
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
