#!/usr/bin/env python3
"""op_7, configuration sweep: matmul's tile width and layernorm's block size, each configuration built and timed.

For each configuration the script writes a header of -D overrides, builds the course's timing program with them,
runs it, and keeps the median of its reported times; the table it prints goes into the final report. Run it on a
GPU node: `python3 kernels_op_7/sweep.py --binary ./test_gpt2_kernels`.
"""

import argparse
import itertools
import statistics
import subprocess

TILES = (8, 16, 32)
LAYERNORM_BLOCKS = (64, 128, 256, 512, 1024)
REPEATS = 5


def time_configuration(binary: str, tile: int, block: int) -> float:
    subprocess.run(["make", "-B", binary, f"NVCCFLAGS=-DMATMUL_TILE_SWEEP={tile} -DLAYERNORM_BLOCK_SWEEP={block}"],
                   check=True, capture_output=True)
    times = []
    for _ in range(REPEATS):
        out = subprocess.run([binary], check=True, capture_output=True, text=True).stdout
        times += [float(line.split()[-2]) for line in out.splitlines() if line.startswith("time")]
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--binary", default="./test_gpt2_kernels")
    arguments = parser.parse_args()
    print("tile  layernorm_block  median_ms")
    for tile, block in itertools.product(TILES, LAYERNORM_BLOCKS):
        print(f"{tile:4d}  {block:15d}  {time_configuration(arguments.binary, tile, block):9.3f}")


if __name__ == "__main__":
    main()
