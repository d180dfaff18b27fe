"""Fetch: turn what the user named into a checkout on disk, and record what was graded.

This stage handles local folders (a student's own checkout, or a plain folder); a folder that is
a git work tree records its commit, the commit's time and whether it had local changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grader.errors import SubmissionError


@dataclass(frozen=True)
class Checkout:
    root: Path
    commit: str | None = None
    commit_time: str | None = None  # ISO 8601 with the author's UTC offset
    dirty: bool | None = None


def checkout_folder(path: Path) -> Checkout:
    """A local folder as a submission; its git commit is recorded when it is a git work tree."""
    root = path.expanduser().resolve()
    if not root.exists():
        raise SubmissionError(f"submission {path}: no such folder")
    if not root.is_dir():
        raise SubmissionError(f"submission {path}: is a file; expected the repository's folder")
    import git  # GitPython; imported here so that plain folders never need git at all

    try:
        repo = git.Repo(root)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return Checkout(root)
    try:
        head = repo.head.commit
    except ValueError:  # a repository with no commits yet
        return Checkout(root, dirty=True)
    return Checkout(root, head.hexsha, head.committed_datetime.isoformat(), repo.is_dirty(untracked_files=True))
