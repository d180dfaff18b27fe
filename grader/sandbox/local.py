"""The default backend: a subprocess in its own session, with rlimits, killed as a group."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
from pathlib import Path

from grader.sandbox import Limits, Mounts


class LocalProcess:
    def __init__(self, popen: subprocess.Popen) -> None:
        self._popen = popen

    def poll(self) -> int | None:
        return self._popen.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self._popen.wait(timeout)

    def kill(self) -> None:
        """Kill the whole process group: whatever the student's code started goes too."""
        try:
            os.killpg(self._popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._popen.wait()


class LocalSandbox:
    name = "local"

    def start(self, command: list[str], *, cwd: Path, mounts: Mounts, limits: Limits,
              stdout: Path, stderr: Path, env: dict[str, str]) -> LocalProcess:
        def apply_limits() -> None:
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
            resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_size_bytes, limits.file_size_bytes))
            if limits.cpu_seconds:
                resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds))
            # No RLIMIT_AS: CUDA reserves a huge virtual range, so an address-space cap breaks GPU runs.

        with open(stdout, "wb") as out, open(stderr, "wb") as err:
            popen = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
                                     start_new_session=True, preexec_fn=apply_limits)
        return LocalProcess(popen)

    def enforced(self) -> list[str]:
        return ["own process group (killed as a whole)", "no core dumps", "open-file limit", "output file-size limit",
                "clean environment (no secrets)"]
