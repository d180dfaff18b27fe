"""The `grader` command as users run it: a real subprocess, real exit codes, real output."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import git
import pytest

from grader.samples import compose, variants
from grader.assignment import PROJECT_ROOT, load_assignment


def grader(*arguments: str, cache_dir: Path, cwd: Path | None = None, env: dict[str, str] | None = None
           ) -> subprocess.CompletedProcess:
    # This checkout's grader, wherever the command runs (`-m` from another folder would import the installed one).
    path = os.pathsep.join(p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    environment = {**os.environ, "KERNEL_GRADER_CACHE": str(cache_dir), "COLUMNS": "200", "PYTHONPATH": path,
                   **(env or {})}
    return subprocess.run([sys.executable, "-m", "grader", *arguments], capture_output=True, text=True,
                          cwd=cwd or PROJECT_ROOT, env=environment, timeout=600)


def test_list_shows_assignments_kernels_and_weights(cache_dir: Path) -> None:
    completed = grader("list", cache_dir=cache_dir)
    assert completed.returncode == 0
    for expected in ("gpt2-m1", "attention", "flash-attention-cpu", "flash_attention", "10"):
        assert expected in completed.stdout


def test_grade_a_git_checkout_writes_json_with_its_commit(tmp_path: Path, cache_dir: Path) -> None:
    flash = load_assignment("flash-attention-cpu")
    folder = shutil.copytree(flash.reference_dir, tmp_path / "student")
    repo = git.Repo.init(folder)
    repo.git.add(A=True)  # the whole fork: the template's files and the student's solution
    commit = repo.index.commit("my attention")
    completed = grader("grade", str(folder), "--assignment", "flash-attention-cpu", "--json", str(tmp_path / "r.json"),
                       cache_dir=cache_dir, env={"KERNEL_GRADER_SECRET": "hidden"})
    assert completed.returncode == 0, completed.stderr
    assert "score 3 / 3" in completed.stdout
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["submission"]["commit"] == commit.hexsha and result["submission"]["dirty"] is False
    assert result["seed"]["mode"] == "secret" and "hidden" not in (tmp_path / "r.json").read_text()


def test_check_recognises_the_assignment_and_fails_ci_on_a_failing_public_case(tmp_path: Path, cache_dir: Path) -> None:
    flash = load_assignment("flash-attention-cpu")
    template = shutil.copytree(flash.template_dir, tmp_path / "template")
    failing = grader("check", cwd=template, cache_dir=cache_dir)
    assert failing.returncode == 1
    assert "public cases" in failing.stdout and "never written" in failing.stdout
    passing = grader("check", str(flash.reference_dir), cache_dir=cache_dir)
    assert passing.returncode == 0, passing.stdout + passing.stderr


# The newer packs (flash-attention-cpu's check: the tests above); a mutant that fails public cases, listed.
@pytest.mark.parametrize("name, mutant", [("autodiff-reverse", "mutant-sub-gradient-sign"),
                                          ("sparse-spmv-spgemm", "mutant-spmv-transposed"),
                                          ("flash-attention-backward", "mutant-flash-backward-dv-wrong-axis")])
def test_check_in_a_students_repository_gives_full_marks_and_a_mutant_loses_its_public_cases(
        name: str, mutant: str, tmp_path: Path, cache_dir: Path) -> None:
    """The student's repository as they get it (the template), their files over it: the reference's, then a sample's."""
    pack = load_assignment(name)
    repo = shutil.copytree(pack.template_dir, tmp_path / "repo")
    compose(pack, None, repo)
    git.Repo.init(repo)
    passing = grader("check", cwd=repo, cache_dir=cache_dir)
    assert passing.returncode == 0, passing.stdout + passing.stderr
    assert f"{pack.title} (public cases)" in passing.stdout
    assert f"score {pack.max_score:g} / {pack.max_score:g}" in passing.stdout
    sample = next(v for v in variants(pack) if v.name == mutant)
    compose(pack, sample, repo)
    failing = grader("check", "--json", str(tmp_path / "r.json"), cwd=repo, cache_dir=cache_dir)
    assert failing.returncode == 1, failing.stdout + failing.stderr
    (kernel,) = [k for k in json.loads((tmp_path / "r.json").read_text())["kernels"] if k["name"] == sample.kernel]
    public = {c.name for c in pack.kernel(sample.kernel).cases if c.public}
    expected = [c for c in sample.failed_cases or () if c in public]
    assert expected and [c["name"] for c in kernel["cases"] if not c["passed"]] == expected


def test_check_from_a_subfolder_checks_the_repository_root_and_never_above_it(tmp_path: Path,
                                                                               cache_dir: Path) -> None:
    flash = load_assignment("flash-attention-cpu")
    repo = shutil.copytree(flash.reference_dir, tmp_path / "repo")
    git.Repo.init(repo)
    (repo / "src" / "notes").mkdir()
    deep = grader("check", cwd=repo / "src" / "notes", cache_dir=cache_dir)
    assert deep.returncode == 0, deep.stdout + deep.stderr
    assert f"checking {repo} (the repository's root)" in deep.stdout and "score 3 / 3" in deep.stdout
    # A repository of its own inside that one: the walk stops at its root.
    inner = repo / "src" / "notes" / "other"
    inner.mkdir()
    git.Repo.init(inner)
    alone = grader("check", cwd=inner, cache_dir=cache_dir)
    assert alone.returncode == 2 and "holds none of the files of any known assignment" in alone.stderr


def test_bad_inputs_get_one_clear_message_and_exit_2(tmp_path: Path, cache_dir: Path) -> None:
    missing = grader("grade", str(tmp_path / "nowhere"), "-a", "flash-attention-cpu", cache_dir=cache_dir)
    assert missing.returncode == 2 and "submission" in missing.stderr and "no such folder" in missing.stderr
    unknown = grader("grade", str(tmp_path), "-a", "gpt5", cache_dir=cache_dir)
    assert unknown.returncode == 2 and "no assignment named 'gpt5'" in unknown.stderr
    assert "Traceback" not in missing.stderr + unknown.stderr
    empty = grader("check", str(tmp_path), cache_dir=cache_dir)
    assert empty.returncode == 2 and "holds none of the files of any known assignment" in empty.stderr


def test_demo_grades_the_bundled_samples(cache_dir: Path) -> None:
    completed = grader("demo", cache_dir=cache_dir)
    assert completed.returncode == 0, completed.stderr
    out = completed.stdout
    assert "grader demo: bundled samples" in out
    assert "reference" in out and "3/3" in out and "template" in out and "0/3" in out
    # Piped (as here), the summary shows every name whole: the one to type after -a, the sample's folder.
    summary = out[out.index("grader demo: bundled samples"):]
    assert "…" not in summary and "flash-attention-cpu" in summary and "standard_attention: passed" in summary
    for name in ("autodiff-reverse", "sparse-spmv-spgemm"):  # the python packs, scipy's among them, run here too
        full = f"{load_assignment(name).max_score:g}"
        assert re.search(rf"{name}\s+│\s+reference\s+│\s+full marks\s+│\s+{full}/{full}\s", summary), summary


def test_cuda_assignment_on_a_machine_without_gpu_says_so_plainly(cache_dir: Path) -> None:
    from conftest import gpu_skip_reason

    if gpu_skip_reason() is None:
        import pytest

        pytest.skip("this machine has a GPU: the message for machines without one can't be provoked")
    completed = grader("check", str(load_assignment("gpt2-m1").reference_dir), cache_dir=cache_dir)
    # Every kernel compiled and none could run: the compile feedback is what a laptop can give.
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "compiled only: this machine has no NVIDIA GPU" in " ".join(completed.stdout.split())
    assert "not_run" in completed.stdout
    assert "Traceback" not in completed.stderr and "ModuleNotFoundError" not in completed.stdout
