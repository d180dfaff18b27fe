"""The `process` backend: a process group with rlimits, the watchdog and a clean environment, nothing more.

The fallback where no namespaces can be made (`--sandbox process`): no isolation of files or
network. The watchdog also watches the session, since there is no PID namespace to hold the tree.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from grader.sandbox import Limits, Mounts
from grader.sandbox.host import HostProcess, LimitPlan, plan_limits, spawn


class ProcessSandbox:
    """A process group with rlimits and the watchdog: no isolation of files or network (the fallback)."""

    name = "process"

    def __init__(self) -> None:
        self._applied: tuple[str, ...] | None = None

    def _plan(self, limits: Limits, writable: Path | None) -> LimitPlan:
        plan = plan_limits(limits, None, writable, watch_tmpfs=False)
        return replace(plan, applied=("own session and process group (the session is killed as a whole)",
                                      *plan.applied))

    def start(self, command: list[str], *, cwd: Path, mounts: Mounts, limits: Limits,
              stdout: Path, stderr: Path, env: dict[str, str]) -> HostProcess:
        plan = self._plan(limits, mounts.writable)
        popen, threads = spawn(command, cwd=cwd, env=env, stdout=stdout, stderr=stderr, limits=limits,
                               before_exec=plan.apply_rlimits)
        # start_new_session: the session's id is the root's pid.
        process = HostProcess(popen, threads, plan.applied, watch=replace(plan.watch, session=popen.pid),
                              session=popen.pid)
        self._applied = process.applied
        return process

    def enforced(self, limits: Limits | None = None, gpu: bool = False) -> list[str]:
        if limits is None and self._applied is not None:
            return list(self._applied)
        return list(self._plan(limits or Limits(), Path(".")).applied)
