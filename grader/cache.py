"""Content keys and atomic publishing for everything the grader caches: builds, inputs, gold, clones.

Many writers share one cache (batch threads, Slurm tasks on other nodes, a student's second
terminal): each writes into a staging path of its own and renames it into place, so a reader sees
a whole entry or none, and two writers of the same key (whose content is identical by
construction) never corrupt each other.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import uuid
from pathlib import Path

KEY_LENGTH = 32  # hex digits of SHA-256: collisions are out of reach, paths stay short
COMPLETE = "COMPLETE"  # a folder entry's last file: its presence vouches for the rest
STAGING = ".staging-"  # in a staging path's name, before the writer's pid: dead writers' leftovers are recognisable


def content_key(*parts: str | bytes) -> str:
    """A stable key for the parts, in order (a part boundary is part of the key)."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()[:KEY_LENGTH]


def staging_path(final: Path) -> Path:
    """A path beside `final` that only this writer uses; its name carries the writer's pid."""
    return final.with_name(f"{final.name}{STAGING}{os.getpid()}-{threading.get_ident()}-{uuid.uuid4().hex[:8]}")


def is_complete(folder: Path) -> bool:
    return (folder / COMPLETE).is_file()


def gold_root(cache_dir: Path) -> Path:
    """The cache's gold folder, the grader's user's alone (0700): code that runs as another user (the
    `process` sandbox as root) can read what any user may, and must not read the gold."""
    folder = cache_dir / "gold"
    folder.mkdir(parents=True, exist_ok=True)
    if folder.stat().st_mode & 0o077:
        os.chmod(folder, 0o700)
    return folder


def new_entry(final: Path, mode: int = 0o755) -> Path:
    """An empty staging folder for the entry `final` (readable by the sandbox's unprivileged user)."""
    staging = staging_path(final)
    staging.mkdir(parents=True)
    staging.chmod(mode)
    return staging


def publish_folder(staging: Path, final: Path, mark_complete: bool = True) -> bool:
    """Move a finished staging folder to `final`; False where another writer published it first (ours is dropped)."""
    if mark_complete:
        (staging / COMPLETE).write_text("")
    try:
        staging.rename(final)
        return True
    except OSError:  # `final` exists: the other writer's content is identical by construction
        shutil.rmtree(staging, ignore_errors=True)
        return False


def publish_file(final: Path, content: bytes | Path) -> None:
    """Write `final` whole or not at all: `content` (bytes, or a file to copy) goes to a staging file first."""
    staging = staging_path(final)
    try:
        if isinstance(content, Path):
            shutil.copyfile(content, staging)
        else:
            staging.write_bytes(content)
        os.replace(staging, final)
    finally:
        staging.unlink(missing_ok=True)
