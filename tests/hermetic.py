"""The test session's own home, cache (with its clone-cache lock) and working folder, so that no test reaches the user's.

Set before any test runs, in the pytest process (and inherited by the xdist workers and by every
subprocess the tests start): HOME, the XDG folders and $KERNEL_GRADER_CACHE (the default cache, with its
clone cache and that clone cache's lock) all point into one folder of the session's; the tests run with
that folder's `cwd` as their working folder, so that a command's default output (`grader batch`'s
./grades.sqlite) lands there too. A test that forgets `--cache-dir` or `--store` still cannot touch
~/.cache/kernel-grader, the real clone-cache lock or a store in the repository.

The GPU locks ($KERNEL_GRADER_LOCKS, /tmp/kernel-grader-locks) stay the machine's: they hold no state,
only take turns on a GPU, and a test timing a kernel must wait for a grader timing beside it (and the
other way round), as two test runs at once must.
"""

from __future__ import annotations

import os
import site
import tempfile
from dataclasses import dataclass
from pathlib import Path

import grader

SESSION_ENV = "KERNEL_GRADER_TEST_SESSION"  # the session folder, as the xdist workers find it
GRADER_SOURCE = Path(grader.__file__).resolve().parent.parent  # the grader under test, for subprocesses too
GIT_CONFIG = """[user]
\tname = kernel-grader tests
\temail = tests@kernel-grader.invalid
[init]
\tdefaultBranch = main
[commit]
\tgpgsign = false
"""


@dataclass(frozen=True)
class Session:
    root: Path

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def cwd(self) -> Path:
        return self.root / "cwd"

    def environment(self) -> dict[str, str]:
        """What the session sets: every default location of state the grader, git, pip and CUDA use, inside `root`."""
        return {
            SESSION_ENV: str(self.root),
            "HOME": str(self.home),
            "XDG_CACHE_HOME": str(self.home / ".cache"),
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "XDG_DATA_HOME": str(self.home / ".local" / "share"),
            "XDG_STATE_HOME": str(self.home / ".local" / "state"),
            "KERNEL_GRADER_CACHE": str(self.cache),
        }


def isolate(basetemp: Path | None) -> tuple[Session, dict[str, str | None]]:
    """Make the session's folder (under `basetemp`, pytest's for this run) and point os.environ into it.

    An xdist worker finds its controller's folder in $KERNEL_GRADER_TEST_SESSION and keeps it. Returns
    the session and the variables' values before, for `restore`.
    """
    inherited = os.environ.get(SESSION_ENV)
    if inherited and "PYTEST_XDIST_WORKER" in os.environ:
        session = Session(Path(inherited))
    elif basetemp is not None:
        session = Session(basetemp / "session")
    else:
        session = Session(Path(tempfile.mkdtemp(prefix="kernel-grader-tests-")))
    for folder in (session.home, session.cache, session.cwd):
        folder.mkdir(parents=True, exist_ok=True)
    gitconfig = session.home / ".gitconfig"
    if not gitconfig.exists():
        gitconfig.write_text(GIT_CONFIG)
    wanted = session.environment()
    # Packages installed with `pip install --user` live under the real home: still importable, never written.
    if site.ENABLE_USER_SITE and "PYTHONUSERBASE" not in os.environ:
        wanted["PYTHONUSERBASE"] = site.getuserbase()
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(GRADER_SOURCE) not in paths:  # a subprocess started in the session's cwd imports the same grader
        wanted["PYTHONPATH"] = os.pathsep.join([str(GRADER_SOURCE), *filter(None, paths)])
    before = {name: os.environ.get(name) for name in wanted}
    os.environ.update(wanted)
    return session, before


def restore(before: dict[str, str | None]) -> None:
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
