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

import git
import pytest

from grader.boundary.runtimes.torch import CPU_INDEX as TORCH_CPU_INDEX
from grader.cli.check import ASSIGNMENT_FILE, assignment_file, assignment_named_in, chosen
from grader.errors import SubmissionError
from grader.export.workflow import TEMPLATE_WORKFLOW, WORKFLOW, template_workflow
from grader.sources import gather_sources
from grader.assignment import PROJECT_ROOT, Assignment, list_assignments, load_assignment
from grader.targets import target_of

from test_cli import grader

yaml = pytest.importorskip("yaml", reason="parses the workflow (pip install '.[test]')")
GITLAB = PROJECT_ROOT / "ci" / "gitlab" / ".gitlab-ci.yml"
GPU_RUNNER = "[self-hosted, gpu]"
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
    shutil.copyfile(assignment.template_dir / TEMPLATE_WORKFLOW, workflows / "grade.yml")
    return repo


def test_workflow_runs_on_push_on_a_self_hosted_gpu_runner() -> None:
    workflow = load(WORKFLOW)
    assert "push" in workflow["on"]
    (job,) = workflow["jobs"].values()
    assert {"self-hosted", "gpu"} <= set(job["runs-on"]) and f"runs-on: {GPU_RUNNER}\n" in WORKFLOW.read_text()
    assert workflow["permissions"] == {"contents": "read", "checks": "write"}  # what checkout and the JUnit step use
    uses = [s["uses"].split("@")[0] for s in job["steps"] if "uses" in s]
    assert uses == ["actions/checkout", "mikepenz/action-junit-report", "actions/upload-artifact"]
    for step in job["steps"]:
        if step.get("uses", "").startswith(("mikepenz/", "actions/upload-artifact")):
            assert step["if"] == "always()"  # the report is published when the check fails too


@pytest.mark.parametrize("assignment", [a.name for a in list_assignments()])
def test_every_template_carries_the_workflow(assignment: str) -> None:
    pack = load_assignment(assignment)
    copy = pack.template_dir / TEMPLATE_WORKFLOW
    assert copy.read_text() == template_workflow(pack), (
        f"{copy} differs from what {WORKFLOW} gives for it: run `python3 -m grader.export.workflow`")


HOSTED, GPU = "ubuntu-latest", ["self-hosted", "gpu"]
GRADER_SPEC = "-e /course/kernel-grader"  # the repository variable KERNEL_GRADER_PIP_SPEC
TORCH_CPU = f"--index-url {TORCH_CPU_INDEX} torch==2.13.0"
# Each pack's template job: its runner, and the pip installs of its install step after the venv's, in order, on a
# runner whose nvcc says CUDA 12.6. A pack added to assignments/ is added here, with what its students' CI needs.
TEMPLATE_JOBS = {
    "array-kernels-python": (HOSTED, [GRADER_SPEC]),
    "autodiff-reverse": (HOSTED, [GRADER_SPEC]),
    "contextual-sparsity": (HOSTED, [TORCH_CPU, GRADER_SPEC]),
    "flash-attention-backward": (HOSTED, [GRADER_SPEC]),
    "flash-attention-cpu": (HOSTED, [GRADER_SPEC]),
    "gpt2-m1": (GPU, [GRADER_SPEC]),
    "gpt2-m2": (GPU, [GRADER_SPEC]),
    "gpt2-m3": (GPU, [GRADER_SPEC]),
    "nanogpt-kvcache": (HOSTED, [TORCH_CPU, GRADER_SPEC]),
    "nanogpt-kvcache-cuda": (GPU, [f"{GRADER_SPEC} torch==2.13.0"]),  # PyPI's torch: the CUDA build
    "sparse-spmv-spgemm": (HOSTED, [f"{GRADER_SPEC} scipy"]),
    "sparse-spmv-spgemm-cupy": (GPU, ["cupy-cuda12x", f"{GRADER_SPEC} scipy"]),
    "tiled-matmul": (GPU, [GRADER_SPEC]),
}


def test_every_pack_says_what_its_template_job_needs() -> None:
    assert sorted(TEMPLATE_JOBS) == sorted(a.name for a in list_assignments()), (
        "a pack added or removed: say in TEMPLATE_JOBS the runner and pip installs its template's workflow needs")


def pip_installs_of(step: dict, tmp_path: Path) -> list[str]:
    """What the install step asks pip for, each call's arguments after `pip install --quiet
    --disable-pip-version-check`: the step run by bash with stand-ins for python3 (its venv's python logs each
    call; nothing is installed) and for a CUDA 12.6 runner's nvcc."""
    stand_ins, log = tmp_path / "bin", tmp_path / "pip.log"
    stand_ins.mkdir()
    (stand_ins / "python3").write_text(f"""#!/bin/bash
[ "$1 $2" = "-m venv" ] || exit 3
mkdir -p "${{@: -1}}/bin"
printf '#!/bin/bash\\necho "$*" >> {log}\\n' > "${{@: -1}}/bin/python"
chmod +x "${{@: -1}}/bin/python"
""")
    (stand_ins / "nvcc").write_text("#!/bin/bash\necho 'Cuda compilation tools, release 12.6, V12.6.85'\n")
    for tool in stand_ins.iterdir():
        tool.chmod(0o755)
    env = {"PATH": f"{stand_ins}{os.pathsep}{os.environ['PATH']}", "RUNNER_TEMP": str(tmp_path / "runner"),
           "GITHUB_PATH": str(tmp_path / "github_path"), "KERNEL_GRADER_PIP_SPEC": GRADER_SPEC}
    done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], env=env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    prefix = "-m pip install --quiet --disable-pip-version-check "
    calls = log.read_text().splitlines()
    assert all(call.startswith(prefix) for call in calls), calls
    return [call.removeprefix(prefix) for call in calls]


@pytest.mark.parametrize("name", sorted(TEMPLATE_JOBS))
def test_a_templates_job_runs_where_its_pack_can_installs_what_it_imports_and_checks_its_pack(
        name: str, tmp_path: Path) -> None:
    pack = load_assignment(name)
    runner, expected_installs = TEMPLATE_JOBS[name]
    workflow = load(pack.template_dir / TEMPLATE_WORKFLOW)
    # action-junit-report writes a check run: a read-only default token would fail the step, and with it the job.
    assert workflow["permissions"] == {"contents": "read", "checks": "write"}
    (job,) = workflow["jobs"].values()
    assert job["runs-on"] == runner
    steps = {s.get("name"): s for s in job["steps"]}
    assert pip_installs_of(steps["Install the grader"], tmp_path) == expected_installs
    # Named, not recognised: a GPU pack's template holds its CPU base's files.
    assert re.search(rf"^grader check \. -a {re.escape(name)} ", steps["Check the public cases"]["run"], re.M)
    assert (runner == GPU) == target_of(pack).needs_gpu


def test_a_cpu_assignments_workflow_runs_on_a_hosted_runner_and_a_gpu_ones_on_its_own() -> None:
    runners = {a.name: load(a.template_dir / TEMPLATE_WORKFLOW)["jobs"]["check"]["runs-on"]
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


@pytest.mark.parametrize("name", sorted(TEMPLATE_JOBS))
def test_every_template_readme_installs_what_its_pack_needs_and_checks_in_two_commands(name: str) -> None:
    pack = load_assignment(name)
    # The handout keeps the starting repository's own name for its readme (simpleautodiff's is readme.md).
    readme = next(p for p in sorted(pack.template_dir.iterdir()) if p.name.lower() == "readme.md")
    install, check = readme_commands(readme)
    assert check == "~/.kernel-grader/bin/grader check"
    venv, *calls = install.split(" && ")
    assert venv == "python3 -m venv --system-site-packages ~/.kernel-grader"
    prefix = "~/.kernel-grader/bin/python -m pip install "
    assert calls and all(c.startswith(prefix) for c in calls), calls
    (spec,) = re.findall(r'-e "git\+\S+#egg=kernel-grader"', install)
    asked = [c.removeprefix(prefix).replace(spec, GRADER_SPEC) for c in calls]
    # What the template's workflow installs, the grader's call maybe holding a GPU package the workflow names for
    # the runner's CUDA: the same packages, torch's CPU build from the same index.
    expected = TEMPLATE_JOBS[name][1]
    assert sorted(" ".join(asked).split()) == sorted(" ".join(expected).split())
    assert all((TORCH_CPU_INDEX in call) == (TORCH_CPU in expected) for call in asked if "torch==" in call)


def test_every_template_names_its_pack_in_a_file_no_build_takes_for_a_source() -> None:
    for pack in list_assignments():
        file = pack.template_dir / ASSIGNMENT_FILE
        assert assignment_named_in(file).name == pack.name, file
        built = {f.path for k in gather_sources(pack, pack.template_dir).kernels for f in k.files}
        assert built and not any(Path(f).name == ASSIGNMENT_FILE for f in built), (pack.name, built)


def test_a_gpu_template_is_checked_as_its_own_pack_never_its_cpu_base(tmp_path: Path, cache_dir: Path) -> None:
    gpu, cpu = load_assignment("sparse-spmv-spgemm-cupy"), load_assignment("sparse-spmv-spgemm")
    repo = shutil.copytree(gpu.template_dir, tmp_path / "repo")
    git.Repo.init(repo)
    # From a subfolder, the file at the repository's root names the pack (compiled only where there is no GPU).
    checked = grader("check", "--kernels", "spmv", cwd=repo / "kernels", cache_dir=cache_dir)
    assert checked.returncode in (0, 1) and "Traceback" not in checked.stderr, checked.stdout + checked.stderr
    assert f"{gpu.title} (public cases)" in checked.stdout and cpu.title not in checked.stdout
    assert f"assignment {gpu.name}, as {ASSIGNMENT_FILE} names it" in checked.stdout
    assert chosen(repo / "kernels", None) == (repo, gpu, repo / ASSIGNMENT_FILE)
    # --assignment still wins: the CPU half, on the same files.
    assert chosen(repo / "kernels", cpu.name) == (repo, cpu, None)
    # Without the file the files are recognised, as before: they are the CPU base's.
    (repo / ASSIGNMENT_FILE).unlink()
    assert chosen(repo / "kernels", None) == (repo, cpu, None)


def test_a_file_naming_an_unknown_assignment_is_one_error_naming_the_file(tmp_path: Path, cache_dir: Path) -> None:
    repo = shutil.copytree(load_assignment("flash-attention-cpu").reference_dir, tmp_path / "repo")
    git.Repo.init(repo)
    (repo / ASSIGNMENT_FILE).write_text('assignment = "gpt5"\n')
    unknown = grader("check", cwd=repo / "src", cache_dir=cache_dir)
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr
    message = " ".join(unknown.stderr.split())
    assert f"{repo / ASSIGNMENT_FILE}: no assignment named 'gpt5'" in message and "--assignment" in message
    (repo / ASSIGNMENT_FILE).write_text("assignment = flash\n")
    with pytest.raises(SubmissionError, match=f"{re.escape(str(repo / ASSIGNMENT_FILE))}: not readable as TOML"):
        assignment_named_in(repo / ASSIGNMENT_FILE)
    # A file above the repository's root is not the repository's.
    (repo / ASSIGNMENT_FILE).rename(tmp_path / ASSIGNMENT_FILE)
    assert assignment_file(repo / "src") is None and assignment_file(tmp_path) == tmp_path / ASSIGNMENT_FILE


def test_the_readme_sets_up_in_a_venv_first() -> None:
    """A stock Debian or Ubuntu python refuses a system-wide `pip install` (externally-managed-environment)."""
    section = (PROJECT_ROOT / "README.md").read_text().split("## Two commands", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    commands = [line for line in block.splitlines() if line.strip() and not line.startswith("#")]
    assert commands[0] == "python3 -m venv .venv && . .venv/bin/activate"
    assert commands[1:] == ["python3 -m pip install -e . && grader demo",
                            "python3 -m pip install -e '.[test]' && python3 -m pytest -n auto --dist loadgroup"]
    # .ci/run runs that test command (its own install line aside).
    assert "python3 -m pytest -q -ra -n auto --dist loadgroup" in (PROJECT_ROOT / ".ci" / "run").read_text()
