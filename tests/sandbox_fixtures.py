"""Real sandboxes for the tests: the namespace backend, and a Docker daemon (started by ci/setup/docker.sh, which
.ci/run runs before the tests; where it is not running, the docker tests skip and say so)."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from grader.errors import GraderError

SETUP_SCRIPT = "ci/setup/docker.sh"  # what starts the daemon and builds the image
ATTACK_PORT = 47321  # where attack-network knocks on the host's loopback


@contextlib.contextmanager
def loopback_listener(port: int = 0) -> Iterator[tuple[int, list]]:
    """A TCP server on the host's 127.0.0.1 recording every connection it accepts (none may arrive)."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Another test run on this machine may hold a fixed port too: each listener still sees its own knocks.
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    server.bind(("127.0.0.1", port))
    server.listen()
    server.settimeout(0.1)
    accepted: list = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept())
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], accepted
    finally:
        stop.set()
        thread.join()
        server.close()


def docker_unavailable_reason() -> str | None:
    """None if the docker sandbox can run here; else why not. Never starts a daemon nor installs anything:
    `.ci/run` (ci/setup/docker.sh) does that before the tests."""
    from grader.sandbox.docker import DEFAULT_IMAGE, docker_client

    try:
        client = docker_client()
        client.images.get(os.environ.get("KERNEL_GRADER_IMAGE", DEFAULT_IMAGE))
        return None
    except GraderError as error:
        return f"{error}; start it with `bash {SETUP_SCRIPT}` (as root; .ci/run does)"
    except Exception as error:  # the image is missing
        return f"the grading image is missing ({error}); build it with `bash {SETUP_SCRIPT}` (as root; .ci/run does)"


@pytest.fixture(scope="session")
def docker_ready() -> None:
    reason = docker_unavailable_reason()
    if reason:
        pytest.skip(f"the docker sandbox can't run here: {reason}")


def is_sandbox_uid(uid: int) -> bool:
    """A uid student code runs as: one of the sandbox range (as root), or nobody (docker)."""
    from grader.sandbox import NOBODY
    from grader.sandbox.uids import uid_range

    uids = uid_range()
    return uid == NOBODY or uids.first <= uid <= uids.last


def sandbox_processes(marker: str) -> list[str]:
    """Processes of a sandbox's user (a uid of the range, or nobody) still alive whose command line holds `marker`."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if is_sandbox_uid(entry.stat().st_uid):
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if marker in command:
                    alive.append(f"{entry.name}: {command}")
        except OSError:
            continue
    return alive


def settled(probe: Callable[[], list[str]], seconds: float = 10.0) -> list[str]:
    """What `probe` (e.g. `sandbox_processes`) still finds once it finds nothing, or after `seconds`: a killed tree
    takes a moment to leave /proc, longer on a loaded machine; a tree that was never killed is still there."""
    deadline = time.monotonic() + seconds
    while (found := probe()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


@pytest.fixture(params=["local", "docker"])
def backend(request: pytest.FixtureRequest) -> str:
    """Each sandbox backend by name; docker skips, with the reason, where no daemon can run."""
    if request.param == "docker":
        request.getfixturevalue("docker_ready")
    return request.param


def orphaned_harnesses(own: set[str] | None = None) -> list[str]:
    """Harness processes (and whatever they forked) still alive although their run's folder is gone.

    `own`: the run folders of this test (see `run_folders`), so that another grader running beside
    the tests, whose harnesses come and go, is never counted.
    """
    orphans = []
    for line in sandbox_processes("grader.boundary.harness"):
        words = line.split()
        plan = next((w for w in words if w.endswith("plan.json")), None)
        if plan is None or Path(plan).exists():
            continue
        if own is None or str(Path(plan).parent) in own:
            orphans.append(line)
    return orphans


@pytest.fixture
def run_folders(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The run folders (kg-run-*) that this test's gradings create: what its harnesses' plans live in."""
    import tempfile

    created: set[str] = set()
    original = tempfile.TemporaryDirectory

    class Recording(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            created.add(self.name)

    monkeypatch.setattr(tempfile, "TemporaryDirectory", Recording)
    return created
