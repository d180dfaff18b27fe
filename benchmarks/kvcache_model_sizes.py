"""Which model size shows a KV cache's speed-up on this machine: our reference's generate, cached against uncached.

    python benchmarks/kvcache_model_sizes.py [--new-tokens 512] [--repeat 3] [--sizes L:H:D:B,...] [--json FILE]

Each size is n_layer:n_head:n_embd:batch (vocabulary 512, block 1024, a 16-token prompt, greedy). The model is the
pack's reference model.py, built and initialised by the pack's adapter (kvcache_grading.built), on the GPU where
torch sees one. It runs in this process, not in the sandbox: it is our own code, and the question is the hardware's.
Per size: the build's time (the adapter does it in every timed call) and generate's median, each way.

Why it exists: a GPU runs a small model's step in about the time it takes to launch its kernels, so the uncached
generation's extra work (the whole context, every step) hides behind the launches and a correct cache shows no
speed-up. The GPU pack's swept model must be large enough that it does not.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
REFERENCE = REPOSITORY_ROOT / "assignments" / "nanogpt-kvcache" / "reference"
DEFAULT_SIZES = "4:4:128:1,4:4:128:8,12:12:768:1,12:12:768:4,4:16:1024:1,4:16:1024:4,4:16:1024:8,8:16:1024:4"


def timed(function) -> tuple[float, object]:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
    started = time.perf_counter()
    value = function()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - started, value


def margins(size: tuple[int, int, int, int], new_tokens: int) -> dict[str, float | bool]:
    """The cached generation against the truth it is graded by (the adapter's original generation of the same model,
    written in the same call): whether the tokens agree, the largest logit difference, and the smallest gap between a
    step's two largest logits (a difference that large could change a greedy token there)."""
    import numpy as np
    import kvcache_grading as adapter

    n_layer, n_head, n_embd, batch = size
    prompt = np.random.default_rng(0).integers(0, 512, batch * 16).astype(np.int32)
    tokens, truth_tokens = np.zeros((batch, new_tokens), np.int32), np.zeros((batch, new_tokens), np.int32)
    logits, truth_logits = (np.zeros((batch, new_tokens, 512), np.float32) for _ in range(2))
    adapter.cached_generation(prompt, tokens, logits, truth_tokens, truth_logits, batch, 16, new_tokens, n_layer,
                              n_head, n_embd, 1024, 512)
    top2 = np.sort(truth_logits.reshape(-1, 512), axis=-1)[:, -2:]
    return {"tokens_agree": bool((tokens == truth_tokens).all()),
            "max_logit_difference": float(np.abs(logits - truth_logits).max()),
            "min_top2_gap": float((top2[:, 1] - top2[:, 0]).min())}


def measure(size: tuple[int, int, int, int], new_tokens: int, repeat: int,
            with_margins: bool) -> dict[str, float | int | str]:
    import torch
    import kvcache_grading as adapter

    n_layer, n_head, n_embd, batch = size
    prompt = torch.randint(0, 512, (batch, 16), generator=torch.Generator().manual_seed(0)).to(adapter.device())
    row: dict[str, float | int | str] = {"n_layer": n_layer, "n_head": n_head, "n_embd": n_embd, "batch": batch,
                                         "new_tokens": new_tokens, "device": str(adapter.device())}
    for cached in (False, True):
        way = "cached" if cached else "uncached"
        build_s, (model, extra) = timed(lambda: adapter.built(n_layer, n_head, n_embd, 1024, 512, cached))
        with torch.no_grad():
            model.generate(prompt, 8, top_k=1, **extra)  # warm-up: kernels chosen, allocator grown
            runs = [timed(lambda: model.generate(prompt, new_tokens, top_k=1, **extra))[0] for _ in range(repeat)]
        row[f"{way}_build_ms"] = build_s * 1e3
        row[f"{way}_ms"] = statistics.median(runs) * 1e3
        del model
    row.update(margins(size, new_tokens) if with_margins else {})
    row["speedup"] = row["uncached_ms"] / row["cached_ms"]
    row["speedup_with_build"] = ((row["uncached_ms"] + row["uncached_build_ms"])
                                 / (row["cached_ms"] + row["cached_build_ms"]))
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="n_layer:n_head:n_embd:batch, comma separated")
    parser.add_argument("--budget-s", type=float, default=150.0, help="stop starting sizes after this many seconds")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--margins", action="store_true", help="also: tokens agree?, the largest logit difference "
                        "between the two generations, the smallest top-2 logit gap")
    arguments = parser.parse_args(argv)
    sys.path.insert(0, str(REFERENCE))
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False  # as the adapter runs it
    started = time.monotonic()
    rows = []
    print("| layers | heads | width | batch | uncached (ms) | cached (ms) | speed-up | build (ms) | with build |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for text in arguments.sizes.split(","):
        if time.monotonic() - started > arguments.budget_s:
            print(f"(budget of {arguments.budget_s:g} s spent: {text} and later not measured)")
            break
        size = tuple(int(part) for part in text.split(":"))
        row = measure(size, arguments.new_tokens, arguments.repeat, arguments.margins)  # type: ignore[arg-type]
        rows.append(row)
        print(f"| {size[0]} | {size[1]} | {size[2]} | {size[3]} | {row['uncached_ms']:.1f} | {row['cached_ms']:.1f} "
              f"| {row['speedup']:.2f} | {row['cached_build_ms']:.0f} | {row['speedup_with_build']:.2f} |"
              + (f" tokens agree: {row['tokens_agree']}, largest logit difference {row['max_logit_difference']:.2e}, "
                 f"smallest top-2 gap {row['min_top2_gap']:.2e}" if arguments.margins else ""), flush=True)
    print(f"device: {rows[0]['device'] if rows else '?'}; {arguments.new_tokens} new tokens, median of "
          f"{arguments.repeat}; torch {torch.__version__}")
    if arguments.json:
        arguments.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
