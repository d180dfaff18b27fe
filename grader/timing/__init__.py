"""Performance, measured properly: each kernel of each variant timed in a sandboxed timing harness, alone on its GPU.

    spec.py        an assignment's [timing] table: the timed case per kernel, the protocol's knobs, tiers, the leaderboard
    statistics.py  the median, the relative standard error, the stop rule (shared by the harness and the grader)
    timers.py      a device's timer in the harness: CUDA (L2 flush, persisting-L2 reset, spin kernel, the shim's
                   events, NVML's SM clocks) or the CPU's wall clock
    driver.py      the CUDA driver functions the timer needs besides the harness's
    harness.py     `python -m grader.timing.harness`: the correctness harness's plan performed timed
    run.py         one kernel's timing through the watchdog and the sandbox, re-checked against gold; a submission's
    lock.py        one timing job per GPU: exclusive for timing, shared for correctness harnesses
    results.py     what timing found (TimingStatus, KernelTiming, SubmissionTiming), JSON-ready
    table.py       the speed-up table (vs the student's kernels/, vs the reference), tiers, the leaderboard value

The protocol, and what it does not catch: docs/timing.md.
"""
