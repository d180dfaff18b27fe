"""The test session is hermetic by construction (tests/hermetic.py): a test, or a subprocess it starts, that
names no cache, store or lock reaches the session's own, never the user's home, cache or repository."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import uuid
from pathlib import Path

from grader.batch.lock import CACHE_LOCK, BatchLock
from grader.cli import main
from grader.options import default_cache_dir
from grader.assignment import PROJECT_ROOT
from grader.timing.lock import locks_folder

import hermetic

REAL_HOME = Path(pwd.getpwuid(os.getuid()).pw_dir)


def inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def test_every_default_location_is_the_session_s(hermetic_session: hermetic.Session) -> None:
    assert not inside(hermetic_session.root, REAL_HOME) and not inside(hermetic_session.root, PROJECT_ROOT)
    assert Path.home() == hermetic_session.home and Path(os.path.expanduser("~")) == hermetic_session.home
    assert default_cache_dir() == hermetic_session.cache
    assert not inside(locks_folder(), REAL_HOME)  # the machine's GPU locks: turns on a GPU, no state
    assert Path(os.environ["XDG_CACHE_HOME"]).is_relative_to(hermetic_session.home)
    assert Path.cwd() == hermetic_session.cwd


def test_a_subprocess_inherits_the_session(hermetic_session: hermetic.Session) -> None:
    probe = ("import json, os, subprocess, grader\nfrom pathlib import Path\n"
             "from grader.options import default_cache_dir\n"
             "git = subprocess.run(['git', 'config', '--global', 'user.email'], capture_output=True, text=True)\n"
             "print(json.dumps({'home': str(Path.home()), 'cache': str(default_cache_dir()), "
             "'cwd': os.getcwd(), 'grader': grader.__file__, "
             "'git': git.stdout.strip()}))")
    seen = json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                                     timeout=120).stdout)
    assert Path(seen["home"]) == hermetic_session.home and Path(seen["cache"]) == hermetic_session.cache
    assert Path(seen["cwd"]) == hermetic_session.cwd
    # The grader under test, not whichever one is installed, and the session's git identity, not the user's.
    assert Path(seen["grader"]).resolve().is_relative_to(hermetic.GRADER_SOURCE)
    assert seen["git"] == "tests@kernel-grader.invalid"


def test_a_batch_given_no_store_and_no_cache_writes_only_into_the_session(hermetic_session: hermetic.Session,
                                                                         tmp_path: Path, monkeypatch) -> None:
    locked: list[Path] = []  # the lock files the real batch takes, recorded on the way
    acquire = BatchLock.acquire
    monkeypatch.setattr(BatchLock, "acquire", lambda self: (locked.append(self.path), acquire(self))[1])
    student = f"hermetic-{uuid.uuid4().hex[:8]}"
    roster = tmp_path / "roster.csv"
    roster.write_text(f"student,repository\n{student},{tmp_path / 'never-created'}\n")
    repository_before = sorted(p.name for p in PROJECT_ROOT.iterdir())
    assert main(["batch", str(roster), "-a", "flash-attention-cpu"]) == 0
    # The default store is ./grades.sqlite of the session's working folder; the clone cache and its lock
    # are the session cache's.
    assert (hermetic_session.cwd / "grades.sqlite").is_file()
    assert [p.resolve() for p in locked] == [hermetic_session.cwd / "grades.sqlite.lock",
                                             hermetic_session.cache / "repos" / CACHE_LOCK]
    assert sorted(p.name for p in PROJECT_ROOT.iterdir()) == repository_before
    real = REAL_HOME / ".cache" / "kernel-grader"
    assert not any(student in str(path) for path in real.rglob(f"*{student}*")) if real.is_dir() else True
