#!/usr/bin/env bash
# On a GPU runner, from the repository root: everything that needs the GPU, each part time-boxed so
# the whole fits in one ~10-minute call, logged under $OUT (default /tmp/kernel-grader-gpu).
#   bash ci/gpu/run-gpu-checks.sh [PART ...]   PART: probe tests m2 timing sandbox speed floor python tiled traffic class overhead batch
#                                               batch-no-timeouts margins latency demo isolation check-profile
#                                               traffic m3-local m3-kv m3-ops m3-competition m3-flash m3 torch torch-cpu kv-sizes
#                                               m3-speedups m3-cutlass m3-ncu tiled-tests seeds sparse-tests secrets
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
parts=${*:-tests sandbox overhead batch}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu.txt" 2>&1
nvidia-smi --query-gpu=persistence_mode --format=csv,noheader >> "$out/gpu.txt" 2>&1
nvcc --version | tail -1 >> "$out/gpu.txt"
(command -v bwrap unshare compute-sanitizer; id) >> "$out/gpu.txt" 2>&1

run() {  # run NAME SECONDS COMMAND...: one part, its log in $out/NAME.log, its last lines printed
  local name=$1 seconds=$2; shift 2
  echo "== $name"
  timeout "$seconds" "$@" > "$out/$name.log" 2>&1; echo "exit $?" >> "$out/$name.log"
  tail -n 6 "$out/$name.log"
}
for part in $parts; do
  case $part in
    tests) run gpu-tests 300 python3 -m pytest -m gpu -q -ra -p no:cacheprovider tests/test_gpu_gpt2.py ;;
    # Issue 14: the forward-pass check (and the device memory it composes: weights kept between its passes),
    # gpt2-m2's variants, `grader time`'s protocol and the timer against ncu.
    m2) run gpu-m2-tests 300 python3 -m pytest -m gpu -q -ra -p no:cacheprovider tests/test_gpu_forward.py \
      tests/test_device_memory.py tests/test_gpu_gpt2_m2.py ;;
    timing) run gpu-timing-tests 90 python3 -m pytest -m gpu -q -ra -p no:cacheprovider tests/test_gpu_timing.py
            run timer-vs-ncu 200 python3 benchmarks/timer_vs_ncu.py --out "$out/ncu" --budget-s 180 --repeats 2 ;;
    # Issue 20: the GPU attacker's corpus as one class of 4 run slots; CUDA harnesses under a uid of their own;
    # the words for a crash while a library loads.
    isolation) run gpu-batch-isolation 480 python3 -m pytest -m gpu -q -ra -s -p no:cacheprovider \
                 tests/test_gpu_batch_isolation.py
               run gpu-sandbox-uids 60 python3 -m pytest -m gpu -q -ra -p no:cacheprovider tests/test_gpu_sandbox.py \
                 -k "segfault and local or uid_of_their_own" ;;
    sandbox) run gpu-sandbox-tests 300 python3 -m pytest -m gpu -q -ra -p no:cacheprovider tests/test_gpu_sandbox.py ;;
    # Issue 13: kernels' harnesses at once, the sanitizer cache, the arch probe kept across processes.
    speed) run gpu-speed-tests 200 python3 -m pytest -m gpu -q -ra -p no:cacheprovider tests/test_gpu_speed.py \
      tests/test_cuda_arch_probe.py ;;
    # Issue 25: where `grader check`'s time goes, each harness alone under cProfile.
    check-profile) run check-profile 200 python3 benchmarks/check_profile.py --repeat 3 ;;
    # Issue 22: the CuPy half of the sparse pack; its runtime against density beside the SciPy half's (density.html);
    # the python packs' floors.
    python) run gpu-sparse-tests 200 python3 -m pytest -m gpu -q -ra -p no:cacheprovider tests/test_sparse_pack.py
            run sparse-sweep-gpu 120 python3 -m grader time assignments/sparse-spmv-spgemm-cupy/reference \
              -a sparse-spmv-spgemm-cupy --sweep --json "$out/sweep-gpu.json"
            run sparse-sweep-cpu 120 python3 -m grader time assignments/sparse-spmv-spgemm/reference \
              -a sparse-spmv-spgemm --sweep --json "$out/sweep-cpu.json" --with "$out/sweep-gpu.json" \
              --density-html "$out/density.html"
            # The CPU packs' floors are measured on a CPU machine (RESULTS.md); here the GPU pack's.
            run floor-sparse-spmv-spgemm-cupy 120 python3 benchmarks/floor.py --assignment sparse-spmv-spgemm-cupy \
              --repeat 3 --json "$out/floor-sparse-spmv-spgemm-cupy.json" ;;
    # Issue 26: tiled-matmul's samples, its timing (tiled against naive and cuBLAS at 4096).
    tiled) run gpu-tiled-tests 300 python3 -m pytest -m gpu -q -ra -p no:cacheprovider tests/test_gpu_tiled_matmul.py
           run tiled-sweep 150 python3 -m grader time assignments/tiled-matmul/reference -a tiled-matmul --sweep \
             --json "$out/tiled-sweep.json" --sweep-html "$out/tiled-sweep.html" ;;
    # Issue 41: tiled-matmul's GPU tests alone (each tile's shared memory, the samples), without the sweep.
    tiled-tests) run gpu-tiled-tests 300 python3 -m pytest -m gpu -q -ra -p no:cacheprovider tests/test_gpu_tiled_matmul.py ;;
    # Issue 42: a secret whose first draw is too small keeps the reference's full marks; issue 41: device buffers'
    # margins and output poison (told apart on the GPU), device memory.
    seeds) run gpu-seeds 150 python3 -m pytest -m gpu -q -ra -p no:cacheprovider tests/test_secret_seeds.py \
             tests/test_device_memory.py ;;
    # Issue 41: the CuPy pack's GPU tests alone (SpGEMM's memory bound is public now), without its sweeps and floor.
    sparse-tests) run gpu-sparse-tests 200 python3 -m pytest -m gpu -q -ra -p no:cacheprovider tests/test_sparse_pack.py ;;
    # Issue 26: tiled-matmul's global loads per output under ncu (L2 read sectors), naive against tile 8, 16, 32.
    traffic) run tiled-traffic 150 python3 benchmarks/tiled_matmul_traffic.py --budget-s 130 \
               --out "$out/tiled-traffic.md" --json "$out/tiled-traffic.json" ;;
    # Issue 23: gpt2-m3, each required optimization's and the additional ones' GPU tests, the competition, the whole
    # reference graded at once (m3).
    m3-local) run gpu-m3-local 90 python3 -m pytest -m gpu -q -ra -p no:cacheprovider tests/test_gpu_gpt2_m3_local.py ;;
    m3-kv) run gpu-m3-kv 180 python3 -m pytest -m gpu -q -ra -s -p no:cacheprovider tests/test_gpu_gpt2_m3_kv.py ;;
    m3-ops) run gpu-m3-ops 130 python3 -m pytest -m gpu -q -ra -s -p no:cacheprovider tests/test_gpu_gpt2_m3_ops.py ;;
    m3-competition) run gpu-m3-competition 150 python3 -m pytest -m gpu -q -ra -s -p no:cacheprovider \
      tests/test_gpu_gpt2_m3_competition.py ;;
    m3-flash) run gpu-m3-flash 170 python3 -m pytest -m gpu -q -ra -p no:cacheprovider tests/test_gpu_gpt2_m3_flash.py ;;
    m3) run gpu-m3 300 python3 -m pytest -m gpu -q -ra -p no:cacheprovider tests/test_gpu_gpt2_m3.py ;;
    # Issue 24: the PyTorch packs' GPU tests (torch), and their CPU tests (torch-cpu: skipped in CI, which installs no
    # torch; on four workers where pytest-xdist is there). -v: each test's verdict as it ends, so that a part cut by
    # its time box still says which failed. The speed-up sweep starts a harness (and torch) per length and kernel, so it
    # runs last.
    torch) run gpu-torch 540 python3 -m pytest -m gpu -v --tb=short -ra -s -p no:cacheprovider \
             tests/test_gpu_contextual_sparsity.py tests/test_gpu_nanogpt_kvcache.py ;;
    # Issue 24: which model size shows our KV cache's speed-up on this GPU (the reference's generate, in-process).
    kv-sizes) run kvcache-model-sizes 200 python3 benchmarks/kvcache_model_sizes.py --budget-s 170 --margins \
      ${KV_SIZES:+--sizes "$KV_SIZES"} --json "$out/kvcache-model-sizes.json" ;;
    torch-cpu) run gpu-torch-cpu-tests 200 python3 -m pytest -v --tb=short -ra -p no:cacheprovider $(python3 -c \
                 'import xdist' 2>/dev/null && printf '%s' '-n 4 --dist loadgroup') tests/test_nanogpt_kvcache_pack.py \
                 tests/test_contextual_sparsity_pack.py ;;
    # Issue 23: op_14 as a team writes it, CUTLASS's device GEMM, built with CUTLASS's headers (pip's nvidia-cutlass in
    # .whl/, or $KERNEL_GRADER_CUTLASS) and run.
    m3-cutlass) run gpu-m3-cutlass 90 python3 -m pytest -m gpu -q -ra -p no:cacheprovider tests/test_gpu_gpt2_m3_ops.py \
      -k cutlass ;;
    # Issue 23: `grader time --ncu`, ncu's figures of a variant beside kernels/'s, each harness under ncu in the sandbox.
    m3-ncu) run gpu-m3-ncu 200 python3 -m pytest -m gpu -q -ra -s -p no:cacheprovider tests/test_gpu_gpt2_m3_ops.py \
      -k ncu ;;
    # Issue 23: the speed-up table of gpt2-m3's reference variants (req_4..6, op_N) against its kernels/.
    m3-speedups) run m3-speedups 170 python3 benchmarks/speedups.py --assignment gpt2-m3 --cap-s 0.5 \
      --out "$out/m3-speedups" ;;
    floor) run floor 240 python3 benchmarks/floor.py --repeat 3 --json "$out/floor.json" ;;
    class) run class 480 python3 benchmarks/class_on_gpu.py --sizes "${CLASS_SIZES:-24,96}" --json "$out/class.json" ;;
    # Where a harness's time goes, per backend: the per-kernel interpreter start and GPU initialisation.
    overhead) run sandbox-overhead 200 python3 benchmarks/sandbox_overhead.py --assignment gpt2-m1 --backends process,local --repeat 2 ;;
    batch) run batch 480 python3 benchmarks/batch.py gpt2-m1 -n 12 --json "$out/batch.json" ;;
    # The same class without the submission that loops until its 60 s limit: the throughput of the pipeline itself.
    batch-no-timeouts) run batch-no-timeouts 300 python3 benchmarks/batch.py gpt2-m1 -n 8 \
      --mix correct=5,broken=2,crashing=1,timeout=0 --json "$out/batch-no-timeouts.json" ;;
    margins) run tolerance-margins 300 python3 benchmarks/tolerance_margins.py gpt2-m1 --out "$out/tolerance-margins.md" \
      --json "$out/tolerance-margins.json" ;;
    # Which host-memory bounds hold for a CUDA process here (RLIMIT_DATA, pinned memory in RSS).
    probe) run memory-probe 120 python3 benchmarks/memory_bound_probe.py --limit-gib 4 ;;
    latency) run latency 100 python3 benchmarks/grade_latency.py gpt2-m1 --repeat 2 ;;
    demo) run demo 200 python3 -m grader demo ;;
    # Issue 42: every pack's reference graded whole under fresh secrets, each pack SECRETS_S seconds (default 30),
    # SECRETS_JOBS grades at once (default 8: the runner's 16 cores). The CPU packs are swept on a CPU machine
    # (RESULTS.md); here the ones that need the GPU or torch (SECRETS_PACKS: a few of them, to split the sweep over
    # calls), the quicker first (a cut sweep keeps what it finished).
    secrets) run secret-sweep "${SECRETS_BOX:-480}" python3 benchmarks/secret_sweep.py --secrets 50 \
               --budget-s "${SECRETS_S:-30}" --jobs "${SECRETS_JOBS:-8}" --json "$out/secret-sweep.json" \
               $(printf -- '-a %s ' ${SECRETS_PACKS:-gpt2-m1 tiled-matmul sparse-spmv-spgemm-cupy contextual-sparsity \
                 nanogpt-kvcache nanogpt-kvcache-cuda gpt2-m2 gpt2-m3}) ;;
    *) echo "unknown part $part" ;;
  esac
done
