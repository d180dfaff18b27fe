"""The `process` backend: a process group with rlimits, the watchdog and a clean environment, nothing more.

The fallback where no namespaces can be made (`--sandbox process`): no isolation of files or
network. The watchdog also watches the session, since there is no PID namespace to hold the tree.
As root the code runs as a uid of its own (uids.py): no capabilities, no_new_privs, RLIMIT_NPROC
of that uid alone, and it reads only what any user of the machine may read. The folders above
the paths it must reach (the interpreter, the grader package, the plan, the library, the inputs,
its output folder) are made searchable (o+x, not listable); what the grader keeps root's alone
(the gold cache, 0700; a secret file of mode 0600) it cannot open.

Where the grader's package is not readable by all (a tree made root's alone: the Gradescope zip's
run_autograder makes it 0700/0600), the harness imports its half of it (`grader/__init__.py`, `boundary/`,
`checks/`) from a copy, root's and readable by all (`HARNESS_COPIES`, one per content), and reads nothing of
the grader's tree.
"""

from __future__ import annotations

import compileall
import hashlib
import os
import shutil
import sys
import uuid
from dataclasses import replace
from pathlib import Path

from grader.sandbox import HARNESS_PACKAGE, Limits, Mounts
from grader.sandbox.host import HostProcess, LimitPlan, drop_to, give_to, make_readable, make_searchable, \
    plan_limits, spawn
from grader.sandbox.namespaces import package_roots
from grader.sandbox.uids import lease_uid, uid_range

# Root's, beside the uid leases: one copy of the harness half per content, readable by all, written by root alone.
HARNESS_COPIES = Path("/run/kernel-grader/harness")
# What a harness imports of the grader (tests/test_boundary.py): the package's __init__, the boundary, the checks'
# harness halves (with the rest of their packages: the grader's public code, nothing of an assignment's).
HARNESS_PARTS = ("__init__.py", "boundary", "checks")


class ProcessSandbox:
    """A process group with rlimits and the watchdog: no isolation of files or network (the fallback)."""

    name = "process"

    def __init__(self) -> None:
        self.as_root = os.geteuid() == 0
        self._applied: tuple[str, ...] | None = None

    def _plan(self, limits: Limits, writable: Path | None, uid: int | None) -> LimitPlan:
        plan = plan_limits(limits, None, writable, watch_tmpfs=False, own_uid=self.as_root, uid=uid)
        isolation = ["own session and process group (the session is killed as a whole)",
                     "network: not isolated", "files: not isolated"]
        if self.as_root:
            user = f"uid {uid}" if uid is not None else f"a uid of its own from {uid_range()}"
            isolation.append(f"runs as {user} (this sandbox's alone), no capabilities, no-new-privs: it reads only "
                             "what any user may (not the gold cache, not a secret file of mode 0600)")
        else:
            isolation.append("runs as the grader's own user")
        return replace(plan, applied=(*isolation, *plan.applied))

    def start(self, command: list[str], *, cwd: Path, mounts: Mounts, limits: Limits,
              stdout: Path, stderr: Path, env: dict[str, str]) -> HostProcess:
        lease = lease_uid() if self.as_root else None
        try:
            plan = self._plan(limits, mounts.writable, lease.uid if lease else None)
            if lease is not None:
                env, harness = _from_harness_copy(env)
                _let_reach(command, cwd, mounts, harness)
                if mounts.writable is not None:
                    give_to(mounts.writable, lease.uid, lease.gid)

            def before_exec() -> None:
                plan.apply_rlimits()
                if lease is not None:
                    drop_to(lease.uid, lease.gid)

            popen, threads = spawn(command, cwd=cwd, env=env, stdout=stdout, stderr=stderr, limits=limits,
                                   before_exec=before_exec)
        except BaseException:
            if lease is not None:
                lease.release()
            raise
        # start_new_session: the session's id is the root's pid.
        process = HostProcess(popen, threads, plan.applied, watch=replace(plan.watch, session=popen.pid),
                              session=popen.pid, lease=lease)
        self._applied = process.applied
        return process

    def enforced(self, limits: Limits | None = None, gpu: bool = False) -> list[str]:
        if limits is None and self._applied is not None:
            return list(self._applied)
        return list(self._plan(limits or Limits(), Path("."), None).applied)


def _let_reach(command: list[str], cwd: Path, mounts: Mounts, harness: Path) -> None:
    """Let the sandbox's uid reach what it runs and reads, where it is: the folders above made searchable."""
    for path in mounts.read_only:
        make_readable(path)
    executable = Path(shutil.which(command[0]) or sys.executable).resolve()
    for path in (executable, *package_roots(mounts.python_packages), harness, cwd, *mounts.read_only,
                 *([mounts.writable] if mounts.writable is not None else [])):
        make_searchable(path)


def _from_harness_copy(env: dict[str, str]) -> tuple[dict[str, str], Path]:
    """`env` with the grader's folder in PYTHONPATH replaced by the harness copy's where the grader's package is
    not readable by all (a tree made root's alone), and the grader package the started process then imports.

    A package readable by all is imported where it is, as before (its bytecode where the grader keeps it:
    `grader.runner.bytecode`); a compiler, given no PYTHONPATH, keeps `env` as it is.
    """
    grader_root = str(HARNESS_PACKAGE.parent)
    entries = env.get("PYTHONPATH", "").split(os.pathsep)
    if grader_root not in entries or _readable_by_all(HARNESS_PACKAGE):
        return env, HARNESS_PACKAGE
    copy = harness_copy()
    paths = os.pathsep.join(str(copy) if entry == grader_root else entry for entry in entries)
    return {**env, "PYTHONPATH": paths}, copy / "grader"


def _readable_by_all(package: Path) -> bool:
    """Whether any user may list the package and read its harness (the folders above are made searchable)."""
    try:
        return (os.stat(package).st_mode & 0o005 == 0o005
                and os.stat(package / "boundary").st_mode & 0o005 == 0o005
                and os.stat(package / "boundary" / "harness.py").st_mode & 0o004 != 0)
    except OSError:
        return False


def harness_copy(folder: Path = HARNESS_COPIES) -> Path:
    """The folder holding a copy of the grader's harness half as `grader/`, made if missing (root only).

    Named by its content: a changed grader gets a copy of its own. Written beside its final name and
    renamed, so that graders starting at once see a whole copy or none; its bytecode is compiled in,
    since the harness (PYTHONDONTWRITEBYTECODE) writes none.
    """
    files = sorted(path for part in HARNESS_PARTS
                   for path in ((HARNESS_PACKAGE / part).rglob("*") if (HARNESS_PACKAGE / part).is_dir()
                                else [HARNESS_PACKAGE / part])
                   if path.is_file() and "__pycache__" not in path.parts)
    digest = hashlib.sha256(sys.implementation.cache_tag.encode())
    for path in files:
        digest.update(f"{path.relative_to(HARNESS_PACKAGE)}\0".encode() + hashlib.sha256(path.read_bytes()).digest())
    final = folder / digest.hexdigest()[:32]
    if (final / "grader").is_dir():
        return final
    folder.mkdir(mode=0o755, parents=True, exist_ok=True)
    os.chmod(folder, 0o755)
    staging = folder / f".staging-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        for path in files:
            target = staging / "grader" / path.relative_to(HARNESS_PACKAGE)
            target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            shutil.copy2(path, target)
        compileall.compile_dir(staging / "grader", quiet=1, ddir=str(final / "grader"), workers=1)
        for root, dirs, names in os.walk(staging):
            os.chmod(root, 0o755)
            for name in names:
                os.chmod(os.path.join(root, name), 0o644)
        os.rename(staging, final)
    except OSError:
        if not (final / "grader").is_dir():  # another grader's rename won the race: its copy is the same
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final
