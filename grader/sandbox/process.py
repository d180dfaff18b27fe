"""The `process` backend: a process group with rlimits, the watchdog and a clean environment, nothing more.

The fallback where no namespaces can be made (`--sandbox process`): no isolation of files or
network. The watchdog also watches the session, since there is no PID namespace to hold the tree.
As root the code runs as a uid of its own (uids.py): no capabilities, no_new_privs, RLIMIT_NPROC
of that uid alone, and it reads only what any user of the machine may read. The folders above
the paths it must reach (the interpreter, the grader package, the plan, the library, the inputs,
its output folder) are made searchable (o+x, not listable); what the grader keeps root's alone
(the gold cache, 0700; a secret file of mode 0600) it cannot open.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path

from grader.sandbox import HARNESS_PACKAGE, Limits, Mounts
from grader.sandbox.host import HostProcess, LimitPlan, drop_to, give_to, make_readable, make_searchable, \
    plan_limits, spawn
from grader.sandbox.namespaces import package_roots
from grader.sandbox.uids import lease_uid, uid_range


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
                _let_reach(command, cwd, mounts)
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


def _let_reach(command: list[str], cwd: Path, mounts: Mounts) -> None:
    """Let the sandbox's uid reach what it runs and reads, where it is: the folders above made searchable."""
    for path in mounts.read_only:
        make_readable(path)
    executable = Path(shutil.which(command[0]) or sys.executable).resolve()
    for path in (executable, *package_roots(mounts.python_packages), HARNESS_PACKAGE, cwd, *mounts.read_only,
                 *([mounts.writable] if mounts.writable is not None else [])):
        make_searchable(path)
