"""Which host-memory bounds hold for a CUDA process here: RLIMIT_DATA, and whether pinned memory is RSS.

    python benchmarks/memory_bound_probe.py [--limit-gib 4]

Each probe runs in a child process (so the limit never touches this one) and prints one line:
whether CuPy and a CUDA context start under RLIMIT_DATA, whether a malloc past the limit fails,
whether pinned memory (cudaMallocHost) is counted, and how much of it shows in VmRSS. Bounded:
no probe touches more than 2x the limit.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource


def _rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) << 10
    return 0


def _probe(kind: str, limit: int, queue: multiprocessing.Queue) -> None:
    if kind != "pinned-without-limit":
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    found: dict = {"probe": kind}
    try:
        import cupy
        import numpy as np

        cupy.cuda.runtime.getDeviceCount()
        cupy.arange(1 << 20, dtype=cupy.float32).sum().item()  # a context, a kernel, a copy back
        found["cuda_starts"] = True
        if kind == "malloc-past-limit":
            try:
                block = np.ones(2 * limit // 8)  # touched: 2x the limit
                found["malloc_past_limit"] = f"succeeded ({block.nbytes >> 20} MiB)"
            except MemoryError:
                found["malloc_past_limit"] = "MemoryError"
        if kind.startswith("pinned"):
            before = _rss_bytes()
            size = min(limit // 2, 2 << 30)
            try:
                pinned = cupy.cuda.alloc_pinned_memory(size)
                view = np.frombuffer(pinned, dtype=np.uint8, count=size)
                view[:] = 1
                found["pinned"] = f"{size >> 20} MiB allocated"
                found["pinned_rss_mib"] = (_rss_bytes() - before) >> 20
            except Exception as error:
                found["pinned"] = f"{type(error).__name__}: {str(error)[:120]}"
    except Exception as error:
        found["error"] = f"{type(error).__name__}: {str(error)[:200]}"
    queue.put(found)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit-gib", type=float, default=4.0)
    limit = int(parser.parse_args().limit_gib * (1 << 30))
    context = multiprocessing.get_context("spawn")
    for kind in ("start-under-limit", "malloc-past-limit", "pinned-under-limit", "pinned-without-limit"):
        queue = context.Queue()
        child = context.Process(target=_probe, args=(kind, limit, queue))
        child.start()
        child.join(120)
        print(json.dumps(queue.get(timeout=5) if not queue.empty() else {"probe": kind, "exitcode": child.exitcode}),
              flush=True)


if __name__ == "__main__":
    main()
