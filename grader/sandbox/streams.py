"""Stdout and stderr of sandboxed code: kept up to a cap, the rest drained and counted."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import BinaryIO, Callable, Iterable


class CappedLog:
    """Writes the first `limit` bytes it is given to `path`, then only counts; never holds more than a chunk."""

    def __init__(self, path: Path, limit: int) -> None:
        self._file = open(path, "wb")
        self._limit = limit
        self.total = 0

    def write(self, chunk: bytes) -> None:
        room = self._limit - self.total
        if room > 0:
            self._file.write(chunk[:room])
            self._file.flush()
        self.total += len(chunk)

    def close(self) -> None:
        if self.total > self._limit:
            self._file.write(f"\n[... {self.total - self._limit} more bytes of output dropped]\n".encode())
        self._file.close()


def drain(stream: BinaryIO, log: CappedLog) -> threading.Thread:
    """A daemon thread that reads `stream` to its end into `log` (the writer never blocks on a full pipe)."""

    def pump() -> None:
        try:
            while chunk := stream.read1(1 << 16):  # type: ignore[attr-defined]
                log.write(chunk)
        except (OSError, ValueError):
            pass
        finally:
            log.close()

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return thread


def drain_chunks(chunks: Iterable[tuple[bytes | None, bytes | None]], out: CappedLog, err: CappedLog,
                 on_error: Callable[[Exception], None] | None = None) -> threading.Thread:
    """The same for a demultiplexed (stdout, stderr) stream, as docker's attach yields it."""

    def pump() -> None:
        try:
            for stdout, stderr in chunks:
                if stdout:
                    out.write(stdout)
                if stderr:
                    err.write(stderr)
        except Exception as error:  # the daemon closed the stream: the container is gone
            if on_error:
                on_error(error)
        finally:
            out.close()
            err.close()

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return thread
