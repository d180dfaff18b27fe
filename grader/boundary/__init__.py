"""The sandbox boundary: everything that runs inside the sandboxed harness process, the only process that
loads student code, and the contract it keeps with the grader outside. It imports the standard library,
NumPy and itself, nothing else of the grader (tests/test_boundary.py holds it to that), so that a
harness starts fast and student code shares its process with as little as possible.

    protocol.py           the runner↔harness contract: the plan, the progress events, exit codes, poison, margins
    harness.py            `python -m grader.boundary.harness`: a kernel's planned calls, checked and saved
    timing_harness.py     `python -m grader.boundary.timing_harness`: the same plan performed timed
    timers.py             a device's timer in the timing harness: CUDA (L2 flush, spin kernel, events, NVML's
                          clocks) or the CPU's wall clock
    timing_driver.py      the CUDA driver functions the timer needs besides the harness's
    timing_statistics.py  the median, the relative standard error, the stop rule (the grader recomputes with them)
    device.py             the harness half every target has (`Device`) and what a call returned (`Completion`)
    c_abi.py              the C targets' shared harness half: load the library, call its `kg_call` shim by ctypes
    host_memory.py        buffers as NumPy arrays in the harness's memory (the CPU targets' devices)
    cpp_device.py         the `cpp` target's harness half: NumPy buffers, the library called on their addresses
    python_device.py      the `python` target's harness half: the student's function called on views of NumPy
                          buffers, its exceptions trimmed to its own frames, forbidden imports refused
    cuda_device.py        the `cuda` target's harness half: buffers on the GPU, the CUDA driver by ctypes
    runtimes/             one module per Python runtime (torch, cupy), registered by name: what the grader knows of
                          its package, and its hooks around a python kernel's call

A whole-program check's harness half stays in its plug-in (`grader.checks`), beside the half that plans it
and judges it; it keeps to the same rule, with `grader.checks.program`.
"""
