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

from grader.spec import PROJECT_ROOT, Assignment, list_assignments, load_assignment
from grader.targets import packages_to_install, target_of

yaml = pytest.importorskip("yaml", reason="parses the workflow (pip install '.[test]')")
WORKFLOW = PROJECT_ROOT / "ci" / "github" / "grade.yml"
GITLAB = PROJECT_ROOT / "ci" / "gitlab" / ".gitlab-ci.yml"
GPU_RUNNER = "[self-hosted, gpu]"
INSTALL = "-m pip install --quiet --disable-pip-version-check $KERNEL_GRADER_PIP_SPEC"
# Packs whose students' repositories run the workflow here: C++, and a python pack that installs scipy beside the
# grader (autodiff-reverse's job differs only in `grader check`, which tests/test_cli.py runs on it).
CPU_PACKS = ("flash-attention-cpu", "sparse-spmv-spgemm")


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


def template_workflow(assignment: Assignment) -> str:
    """The workflow a pack's student template carries: ci/github/grade.yml, on GitHub's hosted runner
    where the pack's kernels need no GPU, installing the Python packages they import besides the grader's."""
    text = WORKFLOW.read_text().replace(INSTALL, " ".join([INSTALL, *packages_to_install(assignment)]))
    return text if target_of(assignment).needs_gpu else text.replace(f"runs-on: {GPU_RUNNER}", "runs-on: ubuntu-latest")


def runs_step(condition: str, failed: bool) -> bool:
    """Whether a step with this `if:` runs, on a self-hosted runner (never an apt-get here)."""
    known = {"success()": not failed, "always()": True, "runner.environment == 'github-hosted'": False}
    assert condition in known, f"the test does not know the condition {condition!r}"
    return known[condition]


def run_job(workspace: Path, temp: Path, cache_dir: Path) -> Job:
    """Run the workflow the repository carries (its one job) in `workspace` as a self-hosted GitHub runner would."""
    workflow = load(workspace / ".github" / "workflows" / "grade.yml")
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
        if not runs_step(step.get("if", "success()"), job.failed_step is not None):
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
        assert (workspace / ".github" / "workflows" / "grade.yml").is_file()
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


def student_repo(source: Path, destination: Path, assignment: Assignment) -> Path:
    repo = shutil.copytree(source, destination, dirs_exist_ok=True)
    workflows = repo / ".github" / "workflows"
    workflows.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(assignment.template_dir / ".github" / "workflows" / "grade.yml", workflows / "grade.yml")
    return repo


def test_workflow_runs_on_push_on_a_self_hosted_gpu_runner() -> None:
    workflow = load(WORKFLOW)
    assert "push" in workflow["on"]
    (job,) = workflow["jobs"].values()
    assert {"self-hosted", "gpu"} <= set(job["runs-on"]) and f"runs-on: {GPU_RUNNER}\n" in WORKFLOW.read_text()
    uses = [s["uses"].split("@")[0] for s in job["steps"] if "uses" in s]
    assert uses == ["actions/checkout", "mikepenz/action-junit-report", "actions/upload-artifact"]
    for step in job["steps"]:
        if step.get("uses", "").startswith(("mikepenz/", "actions/upload-artifact")):
            assert step["if"] == "always()"  # the report is published when the check fails too


@pytest.mark.parametrize("assignment", [a.name for a in list_assignments()])
def test_every_template_carries_the_workflow(assignment: str) -> None:
    pack = load_assignment(assignment)
    copy = pack.template_dir / ".github" / "workflows" / "grade.yml"
    assert copy.read_text() == template_workflow(pack), (
        f"{copy} differs from {WORKFLOW}: copy it again (a CPU pack's with `runs-on: ubuntu-latest`)")


def test_a_cpu_assignments_workflow_runs_on_a_hosted_runner_and_a_gpu_ones_on_its_own() -> None:
    runners = {a.name: load(a.template_dir / ".github" / "workflows" / "grade.yml")["jobs"]["check"]["runs-on"]
               for a in list_assignments()}
    assert runners["flash-attention-cpu"] == "ubuntu-latest"
    assert runners["gpt2-m1"] == runners["gpt2-m2"] == ["self-hosted", "gpu"]


def test_only_a_hosted_runner_gets_the_sandbox_installed() -> None:
    (job,) = load(WORKFLOW)["jobs"].values()
    hosted = [s for s in job["steps"] if s.get("if") == "runner.environment == 'github-hosted'"]
    assert len(hosted) == 1 and "apt-get install -y --no-install-recommends bubblewrap" in hosted[0]["run"]
    # Ubuntu 24.04 (ubuntu-latest) lets bubblewrap make no user namespace without this.
    assert "kernel.apparmor_restrict_unprivileged_userns=0" in hosted[0]["run"]


@pytest.mark.parametrize("name", CPU_PACKS)
def test_workflow_passes_the_reference_and_publishes_every_report(name: str, tmp_path: Path, cache_dir: Path) -> None:
    pack = load_assignment(name)
    repo = student_repo(pack.reference_dir, tmp_path / "repo", pack)
    job = run_job(repo, tmp_path, cache_dir)
    assert job.failed_step is None, job.outputs
    assert len(job.steps_run) == 5
    assert job.outputs["summary"].startswith(f"## ✅ {pack.title}")
    for kernel in pack.kernels:
        public = sum(c.public for c in kernel.cases)
        assert f"| `{kernel.name}` | passed | {kernel.weight:g} | {public}/{public} |" in job.outputs["summary"]
    assert 'failures="0"' in (repo / "grader-report" / "junit.xml").read_text()


def test_workflow_fails_on_a_failing_public_case_and_still_publishes(tmp_path: Path, cache_dir: Path) -> None:
    flash = load_assignment("flash-attention-cpu")
    repo = student_repo(flash.template_dir, tmp_path / "repo", flash)
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


def readme_commands(readme: Path) -> list[str]:
    """The shell commands of a README's "Checking your work" block, one a line."""
    section = readme.read_text().split("## Checking your work", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, f"{readme}: no ```bash block under 'Checking your work'"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_the_template_readme_installs_the_grader_and_checks_in_two_commands(tmp_path: Path, cache_dir: Path) -> None:
    """The student's two commands as written, with the course's copy of the grader being this checkout."""
    flash = load_assignment("flash-attention-cpu")
    install, check = readme_commands(flash.template_dir / "README.md")
    (spec,) = re.findall(r'"(git\+\S+#egg=kernel-grader)"', install)  # what the instructor fills in
    repo = shutil.copytree(flash.template_dir, tmp_path / "repo")
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(HOME=str(home), KERNEL_GRADER_CACHE=str(cache_dir), COLUMNS="200")
    installed = subprocess.run(["bash", "-eo", "pipefail", "-c", install.replace(f'"{spec}"', f'"{PROJECT_ROOT}"')],
                               cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert (home / ".kernel-grader" / "bin" / "grader").is_file()
    # Run where a student often is: in src/. The template compiles and fails its public cases.
    checked = subprocess.run(["bash", "-c", check], cwd=repo / "src", env=env, capture_output=True, text=True,
                             timeout=300)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert f"checking {repo} (the repository's root)" in checked.stdout
    assert "never written" in checked.stdout and "flash_attention" in checked.stdout
