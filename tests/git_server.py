"""A git server on loopback for fetch tests: git's "dumb" HTTP protocol served from a folder of bare
repositories, on a port chosen before it listens, so that a test sees the same URL refuse and then answer."""

from __future__ import annotations

import functools
import http.server
import shutil
import socket
import subprocess
import threading
from pathlib import Path


class GitServer:
    """`url(name)` is http://127.0.0.1:<port>/<name>.git from the start; nothing answers until `start()`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()  # free now: a clone meets a refused connection until start()
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}.git"

    def publish(self, name: str, repo: Path) -> None:
        """Serve `repo` (a work tree) as <name>.git, as it is now."""
        bare = self.root / f"{name}.git"
        shutil.rmtree(bare, ignore_errors=True)
        subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(bare)], check=True)
        subprocess.run(["git", "--git-dir", str(bare), "update-server-info"], check=True)

    def start(self) -> None:
        handler = functools.partial(_Quiet, directory=str(self.root))
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="git-server")
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
            self._server = None


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *arguments) -> None:  # the test's output is git's and the grader's
        pass
