"""The `local` backend: the namespace sandbox (namespaces.py) through bubblewrap, else through the unshare fallback.

Bubblewrap where it is installed (`bwrap.py`); without it, root gets the same layout from
util-linux `unshare` and `mountns.py` (`unshare.py`). Which one a start used is in its record:
the private tmpfs's line says what bounds them ("bytes by bwrap --size", "tmpfs size=").
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from grader.errors import GraderError
from grader.sandbox import Limits, Mounts
from grader.sandbox.bwrap import BwrapSandbox
from grader.sandbox.host import HostProcess
from grader.sandbox.namespaces import NamespaceSandbox, layout_for
from grader.sandbox.unshare import UnshareSandbox


class LocalSandbox:
    """Bubblewrap (`bwrap`, found on PATH) where it is installed, else the unshare fallback as root."""

    name = "local"

    def __init__(self) -> None:
        self.bwrap = shutil.which("bwrap")  # None: the unshare fallback
        self.as_root = os.geteuid() == 0
        self._applied: tuple[str, ...] | None = None

    def _launcher(self) -> NamespaceSandbox | None:
        """The launcher a start uses now: bubblewrap, else the unshare fallback, else none."""
        if self.bwrap is not None:
            return BwrapSandbox(self.bwrap)
        fallback = UnshareSandbox()
        return fallback if fallback.available() else None

    def _can_unshare(self) -> bool:
        return UnshareSandbox().available()

    def _bwrap_arguments(self, cwd: Path, mounts: Mounts, limits: Limits = Limits()) -> list[str]:
        """Bubblewrap's options for a start (what a machine without a GPU can check of the GPU's mounts)."""
        return BwrapSandbox(self.bwrap or "bwrap").arguments(layout_for(cwd, mounts, limits))

    def start(self, command: list[str], *, cwd: Path, mounts: Mounts, limits: Limits,
              stdout: Path, stderr: Path, env: dict[str, str]) -> HostProcess:
        launcher = self._launcher()
        if launcher is None:
            raise GraderError("the local sandbox needs bubblewrap (`apt-get install bubblewrap`), or root with "
                              "util-linux's unshare; or choose --sandbox docker, or --sandbox process (no isolation)")
        process = launcher.start(command, cwd=cwd, mounts=mounts, limits=limits, stdout=stdout, stderr=stderr, env=env)
        self._applied = process.applied
        return process

    def enforced(self, limits: Limits | None = None, gpu: bool = False) -> list[str]:
        """What the last start applied; else (or with `limits`) what a start would apply here."""
        launcher = self._launcher()
        if launcher is None:
            return ["nothing: bubblewrap is not installed"]
        if limits is None and self._applied is not None:
            return list(self._applied)
        return launcher.enforced(limits, gpu)
