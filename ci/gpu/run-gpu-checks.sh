#!/usr/bin/env bash
# On a GPU runner, from the repository root: the GPU tests, the tolerance margins, the grading
# latency and the demo, each logged under $OUT (default /tmp/kernel-grader-gpu).
# Wheels for packages the runner lacks may be put in .whl/ (installed into /tmp/site).
set -uo pipefail
out=${OUT:-/tmp/kernel-grader-gpu}
mkdir -p "$out"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 KERNEL_GRADER_CACHE=${KERNEL_GRADER_CACHE:-/tmp/kernel-grader-cache}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu.txt" 2>&1
nvcc --version | tail -1 >> "$out/gpu.txt"
python3 -m pytest -m gpu -q -ra -p no:cacheprovider 2>&1 | tee "$out/gpu-tests.log" | tail -n 40
python3 benchmarks/tolerance_margins.py gpt2-m1 --out "$out/tolerance-margins.md" > "$out/tolerance-margins.log" 2>&1
python3 benchmarks/grade_latency.py gpt2-m1 --repeat 2 2>&1 | tee "$out/latency.log"
python3 -m grader demo > "$out/demo.log" 2>&1; echo "demo exit $?" | tee -a "$out/demo.log"
tail -n 30 "$out/tolerance-margins.log"
