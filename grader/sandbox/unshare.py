"""`local` without bubblewrap (root only): util-linux `unshare`, and `mountns.py` inside it, build the same layout.

    unshare --mount --net --pid --ipc --uts --fork --kill-child python -I .../mountns.py SPEC_JSON -- COMMAND...

The spec is the layout (namespaces.py) as JSON, with what bubblewrap makes by itself and this
launcher must mount: the layout's tmpfs root and a minimal /dev, each bounded in bytes and inodes
like the private tmpfs (they are RAM).
"""

from __future__ import annotations

import json
import shutil
import sys

from grader.sandbox import mountns
from grader.sandbox.namespaces import Bind, Layout, NamespaceSandbox

DEV_TMPFS_BYTES = 1 << 20  # the private /dev: device nodes only


class UnshareSandbox(NamespaceSandbox):
    """The namespace sandbox, built by util-linux unshare and mountns.py (as root, dropping to the sandbox's uid with setpriv)."""

    def available(self) -> bool:
        return self.as_root and self.setpriv is not None and shutil.which("unshare") is not None

    def _command(self, layout: Layout, inner: list[str]) -> list[str]:
        unshare = shutil.which("unshare") or "unshare"
        return [unshare, "--mount", "--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child", sys.executable, "-I",
                mountns.__file__, json.dumps(mount_spec(layout)), "--", *inner]

    def _tmpfs_bounds(self) -> str:
        return "tmpfs size=, nr_inodes="


def mount_spec(layout: Layout) -> dict:
    """What mountns.py builds, as its JSON spec: the binds by kind, each in the layout's order."""
    binds: list[Bind] = [entry for entry in (*layout.system, *layout.binds) if isinstance(entry, Bind)]

    def paths(access: str) -> list[str]:
        return [bind.path for bind in binds if bind.access == access]

    return {"links": [(entry.path, entry.target) for entry in layout.system if not isinstance(entry, Bind)],
            "read_only": paths("ro"), "writable": paths("rw"), "devices": paths("dev"),
            "root": (layout.root.size, layout.root.mode), "dev": (DEV_TMPFS_BYTES, "0755"),
            "tmpfs": [(tmpfs.path, tmpfs.size, tmpfs.mode) for tmpfs in layout.tmpfs],
            "inodes": layout.inodes, "sysctls": dict(layout.sysctls), "hidden": list(layout.hidden),
            "cwd": layout.cwd}
