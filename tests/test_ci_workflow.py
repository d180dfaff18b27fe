"""The student repositories' CI workflow, run step by step as GitHub Actions would run it.

The workflow's `run` steps are executed with bash, in order, in a copy of a student repository
(the C++ assignment's template and its reference), with GITHUB_STEP_SUMMARY, GITHUB_PATH and
RUNNER_TEMP pointing into a temporary folder; its `uses` steps (checkout, JUnit publishing, artifact
upload) are stood in for by checks that what they would read is there.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from grader.spec import PROJECT_ROOT, list_assignments, load_assignment

yaml = pytest.importorskip("yaml", reason="parses the workflow (pip install '.[test]')")
WORKFLOW = PROJECT_ROOT / "ci" / "github" / "grade.yml"
GITLAB = PROJECT_ROOT / "ci" / "gitlab" / ".gitlab-ci.yml"


def load(path: Path) -> dict:
    document = yaml.safe_load(path.read_text())
    # YAML 1.1 reads the key `on` as True.
    return {("on" if key is True else key): value for key, value in document.items()}


@dataclass
class Job:
    steps_run: list[str] = field(default_factory=list)
    failed_step: str | None = None
    outputs: dict[str, str] = field(default_factory=dict)


def substitute(text: str, variables: dict[str, str]) -> str:
    def value(match: re.Match) -> str:
        name = match.group(1).strip()
        assert name in variables, f"the test does not know the expression {name!r}"
        return variables[name]
    return re.sub(r"\$\{\{\s*(.*?)\s*\}\}", value, text)


def run_job(workspace: Path, temp: Path, cache_dir: Path) -> Job:
    """Run the workflow's one job in `workspace` as a GitHub runner would."""
    workflow = load(WORKFLOW)
    (name, job_spec), = workflow["jobs"].items()
    variables = {"vars.KERNEL_GRADER_PIP_SPEC": f"-e {PROJECT_ROOT}"}
    summary, github_path = temp / "step_summary.md", temp / "github_path"
    summary.touch()
    github_path.touch()
    env = {**os.environ, "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_PATH": str(github_path),
           "RUNNER_TEMP": str(temp / "runner"), "GITHUB_WORKSPACE": str(workspace), "CI": "true",
           "GITHUB_ACTIONS": "true", "KERNEL_GRADER_CACHE": str(cache_dir)}
    (temp / "runner").mkdir()
    env.update({k: substitute(str(v), variables) for k, v in job_spec.get("env", {}).items()})
    job = Job()
    for step in job_spec["steps"]:
        label = step.get("name", step.get("uses", "step"))
        condition = step.get("if", "success()")
        if job.failed_step is not None and "always()" not in condition:
            continue
        job.steps_run.append(label)
        if "uses" in step:
            stand_in(step, workspace)
            continue
        added = [line for line in github_path.read_text().splitlines() if line]
        step_env = {**env, "PATH": os.pathsep.join([*reversed(added), env["PATH"]])}
        step_env.update({k: substitute(str(v), variables) for k, v in step.get("env", {}).items()})
        assert step.get("shell", "bash") == "bash"
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c",
                               substitute(step["run"], variables)], cwd=workspace, env=step_env,
                              capture_output=True, text=True, timeout=300)
        job.outputs[label] = done.stdout + done.stderr
        if done.returncode != 0 and job.failed_step is None:
            job.failed_step = label
    job.outputs["summary"] = summary.read_text()
    return job


def stand_in(step: dict, workspace: Path) -> None:
    """What a `uses` step would need from the steps before it."""
    action = step["uses"].split("@")[0]
    if action == "actions/checkout":
        assert (workspace / "src").is_dir()
    elif action == "mikepenz/action-junit-report":
        report = workspace / step["with"]["report_paths"]
        assert report.is_file(), f"{report} missing for {action}"
        import xml.etree.ElementTree as ET

        assert ET.parse(report).getroot().tag == "testsuites"
    elif action == "actions/upload-artifact":
        folder = workspace / step["with"]["path"]
        assert (folder / "report.html").is_file(), f"no HTML report in {folder}"
    else:
        raise AssertionError(f"the test has no stand-in for {action}")


def student_repo(source: Path, destination: Path) -> Path:
    repo = shutil.copytree(source, destination)
    shutil.copytree(WORKFLOW.parent, repo / ".github" / "workflows", dirs_exist_ok=True)
    return repo


def test_workflow_runs_on_push_on_a_self_hosted_gpu_runner() -> None:
    workflow = load(WORKFLOW)
    assert "push" in workflow["on"]
    (job,) = workflow["jobs"].values()
    assert {"self-hosted", "gpu"} <= set(job["runs-on"])
    uses = [s["uses"].split("@")[0] for s in job["steps"] if "uses" in s]
    assert uses == ["actions/checkout", "mikepenz/action-junit-report", "actions/upload-artifact"]
    for step in job["steps"]:
        if step.get("uses", "").startswith(("mikepenz/", "actions/upload-artifact")):
            assert step["if"] == "always()"  # the report is published when the check fails too


@pytest.mark.parametrize("assignment", [a.name for a in list_assignments()])
def test_every_student_template_carries_the_workflow(assignment: str) -> None:
    copy = load_assignment(assignment).template_dir / ".github" / "workflows" / "grade.yml"
    assert copy.read_text() == WORKFLOW.read_text(), f"{copy} differs from {WORKFLOW}: copy it again"


def test_workflow_passes_the_reference_and_publishes_every_report(tmp_path: Path, cache_dir: Path) -> None:
    flash = load_assignment("flash-attention-cpu")
    repo = student_repo(flash.reference_dir, tmp_path / "repo")
    job = run_job(repo, tmp_path, cache_dir)
    assert job.failed_step is None, job.outputs
    assert len(job.steps_run) == 5
    assert job.outputs["summary"].startswith("## ✅ FlashAttention (I)")
    assert "| `flash_attention` | passed | 2 | 2/2 |" in job.outputs["summary"]
    assert 'failures="0"' in (repo / "grader-report" / "junit.xml").read_text()


def test_workflow_fails_on_a_failing_public_case_and_still_publishes(tmp_path: Path, cache_dir: Path) -> None:
    flash = load_assignment("flash-attention-cpu")
    repo = student_repo(flash.template_dir, tmp_path / "repo")
    job = run_job(repo, tmp_path, cache_dir)
    assert job.failed_step == "Check the public cases"
    assert job.steps_run[-2:] == ["Publish the test results", "Keep the HTML report"]
    assert job.outputs["summary"].startswith("## ❌")
    assert "Nothing was written to the output" in job.outputs["summary"]
    assert "Nothing was written" in (repo / "grader-report" / "report.html").read_text()


def test_gitlab_job_publishes_the_junit_file_it_writes() -> None:
    job = yaml.safe_load(GITLAB.read_text())["grade"]
    assert "gpu" in job["tags"]
    script = "\n".join(job["script"])
    junit = job["artifacts"]["reports"]["junit"]
    assert '--junit "$REPORT_DIR/junit.xml"' in script and junit == "grader-report/junit.xml"
    assert job["variables"]["REPORT_DIR"] == "grader-report" and job["artifacts"]["when"] == "always"
    assert "grader-report/" in job["artifacts"]["paths"] and "check ." in script


def test_gitlab_job_script_runs_and_fails_on_the_template(tmp_path: Path, cache_dir: Path) -> None:
    job = yaml.safe_load(GITLAB.read_text())["grade"]
    repo = shutil.copytree(load_assignment("flash-attention-cpu").template_dir, tmp_path / "repo")
    env = {**os.environ, **job["variables"], "CI_BUILDS_DIR": str(tmp_path / "builds"),
           "KERNEL_GRADER_PIP_SPEC": f"-e {PROJECT_ROOT}", "KERNEL_GRADER_CACHE": str(cache_dir), "CI": "true"}
    (tmp_path / "builds").mkdir()
    statuses = []
    for line in job["script"]:  # GitLab stops at the first failing line
        done = subprocess.run(["bash", "-eo", "pipefail", "-c", line], cwd=repo, env=env, capture_output=True,
                              text=True, timeout=300)
        statuses.append(done.returncode)
        if done.returncode:
            break
    assert statuses[:-1] == [0] * (len(job["script"]) - 1) and statuses[-1] == 1
    report = repo / job["artifacts"]["reports"]["junit"]
    assert "<failure" in report.read_text() and (repo / "grader-report" / "report.html").is_file()
