"""Performance, measured properly: each kernel of each variant timed in a sandboxed timing harness, alone on its GPU.

    spec.py        an assignment's [timing] table: the timed case per kernel, the protocol's knobs, tiers, the leaderboard
    run.py         one kernel's timing through the watchdog and the sandbox, re-checked against gold; a submission's
    lock.py        one timing job per GPU: exclusive for timing, shared for correctness harnesses
    results.py     what timing found (TimingStatus, KernelTiming, SubmissionTiming), JSON-ready
    table.py       the speed-up table (vs the student's kernels/, vs the reference), tiers, the leaderboard value
    sweep.py       a sweep's timings (every case, `grader time --sweep`) read against the swept case parameter
                   (density, or N): the sweep pages (`grader.sweeps`) make their points from them
    points.py      [timing] speedup_points judged on a submission's timings: "tiled >= X times naive at N" as points

What runs in the sandbox lives in `grader.boundary`: the timing harness (`python -m grader.boundary.timing_harness`),
its timers and CUDA driver functions, and the statistics it stops by (which the grader recomputes with).

Nothing here imports `grader.report`: the sweep pages' plug-ins (`grader.sweeps`) join a sweep to its drawing.

The protocol, and what it does not catch: docs/timing.md.
"""
