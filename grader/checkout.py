"""Checkout: the submission's work tree on disk, and the commit that was graded.

A local folder (a student's own checkout, or a plain folder) is graded as it is; a folder that is
a git work tree records its commit, the commit's time and whether it had local changes. A batch's
fetch (`grader.batch.fetch`) pins each repository itself and hands on its Checkout, commit known.
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


def checkout_folder(path: Path | Checkout) -> Checkout:
    """A local folder as a submission; its git commit is recorded when it is a git work tree.

    A Checkout that a batch's fetch made is taken as it is: the fetch pinned its commit, and git is
    not asked again.
    """
    named = path.root if isinstance(path, Checkout) else path
    root = named.expanduser().resolve()
    if not root.exists():
        raise SubmissionError(f"submission {named}: no such folder")
    if not root.is_dir():
        raise SubmissionError(f"submission {named}: is a file; expected the repository's folder")
    if isinstance(path, Checkout):
        return path
    if not (root / ".git").exists():  # a plain folder (an upload, a composed sample): no git to ask
        return Checkout(root)
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
