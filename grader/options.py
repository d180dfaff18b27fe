"""How one grade runs, whatever runs it: the options every stage, executor and command reads (`Options`),
and the cache they default to."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def default_cache_dir() -> Path:
    return Path(os.environ.get("KERNEL_GRADER_CACHE", Path.home() / ".cache" / "kernel-grader"))


@dataclass(frozen=True)
class Options:
    cache_dir: Path
    public_only: bool = False  # `grader check`: the public cases with the public seed
    secret: str | None = None
    sandbox: str = "local"
    kernels: tuple[str, ...] = ()  # empty: all
    jobs: int | None = None
    cuda_arch: str | None = None
    sanitizer: bool = False  # compute-sanitizer where the spec asks for it and the tool is installed (`grade`: on)
    upload: bool = False  # an upload (Gradescope), maybe flat: the sources stage finds its files (`grade --upload`)
    harnesses: int | None = None  # kernel harnesses run at once (None: `grader.runner.harnesses_for`'s rule)

    def to_dict(self) -> dict:
        """Every field, JSON-ready: what a Slurm task reads back to grade with exactly these options."""
        return {**vars(self), "cache_dir": str(self.cache_dir), "kernels": list(self.kernels)}

    @classmethod
    def from_dict(cls, data: dict) -> Options:
        return cls(**{**data, "cache_dir": Path(data["cache_dir"]), "kernels": tuple(data["kernels"])})
