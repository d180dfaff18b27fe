"""A device's timer, the harness side: what happens before each timed call, and what a call's time is.

One timer per target's harness half (chosen by the plan's `device_module`, like the device itself):

- CUDA (`CudaTimer`): before each call, a read of twice the L2 cache (`cuDeviceGetAttribute`
  L2_CACHE_SIZE) on the GPU flushes it and leaves its lines clean, `cuCtxResetPersistingL2Cache`
  drops lines a kernel asked to persist, the device is synchronised, and a spin kernel holds the
  default stream for `spin_us` so that the shim's start event runs only once the student's launches
  are queued behind it (a launch's own latency, a few µs, is not the kernel's time: ncu does not
  count it either). The call's time is the shim's: CUDA events on the legacy default stream around
  the host function, the stop recorded before a device-wide synchronisation (work on blocking
  streams counts; work on a non-blocking stream is caught by the wall clock: `gap_ms`).
- C++ on the CPU (`WallTimer`): the shim's wall clock around the call; nothing to flush.
- Python (`PythonTimer`): the wall clock, or, where the kernel's module uses a runtime with a device here (a GPU
  assignment's: `grader.boundary.runtimes`), that runtime's events on its current stream around the whole call, the end
  one waited for (`python_device`): the project's rule times
  "all necessary setup costs", so conversions and copies are inside; nothing is flushed.

Only the standard library, NumPy and `grader.boundary` are imported here (the harness's rule).
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from grader.boundary.device import Completion

# %globaltimer (ns) read in a loop until `ns` have passed: hand-written PTX, JIT-compiled by the
# driver for any GPU since Volta, so the harness needs no nvcc.
SPIN_PTX = """\
.version 7.0
.target sm_70
.address_size 64
.visible .entry kg_spin(.param .u64 ns)
{
    .reg .u64 %start, %now, %spent, %limit;
    .reg .pred %waiting;
    ld.param.u64 %limit, [ns];
    mov.u64 %start, %globaltimer;
SPIN:
    mov.u64 %now, %globaltimer;
    sub.u64 %spent, %now, %start;
    setp.lt.u64 %waiting, %spent, %limit;
    @%waiting bra SPIN;
    ret;
}
"""
L2_CACHE_SIZE = 38  # CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE
FLUSH_FLOOR = 64 << 20  # bytes written to flush L2 at least (a driver that reports no L2 size)
NVML = "libnvidia-ml.so.1"
NVML_CLOCK_SM = 1


@dataclass(frozen=True)
class Sample:
    """One timed call: its time, the host's wall clock around it, and what the wall clock saw beyond the events."""

    time_ms: float
    wall_ms: float
    gap_ms: float  # wall clock not explained by the events (and the spin's rest): work on a non-blocking stream


class WallTimer:
    """The CPU target's timer: the shim's wall clock, no cache to flush."""

    def __init__(self, device: Any, spin_us: float) -> None:
        self.device = device

    def facts(self) -> dict[str, Any]:
        return {"clock": "wall"}

    def prepare(self) -> float:
        """Ready the device for a timed call; returns when (time.perf_counter) it was ready."""
        return time.perf_counter()

    def sample(self, completion: Completion, ready_at: float, called_at: float) -> Sample:
        return Sample(completion.wall_ms, completion.wall_ms, 0.0)

    def copy(self, target: Any, start: int, source: Any, count: int) -> None:
        """Copy `count` elements of `source` into `target` from element `start`."""
        self.device.write(target, start, self.device.read(source, 0, count))

    def clocks(self) -> dict[str, Any]:
        return {}


class PythonTimer(WallTimer):
    """The python target's timer: CUDA events where the harness recorded them around the call (a kernel module
    using a GPU runtime, `python_device`), the wall clock otherwise; the facts say which it was."""

    def __init__(self, device: Any, spin_us: float) -> None:
        super().__init__(device, spin_us)
        self.clock = "wall"

    def facts(self) -> dict[str, Any]:
        return {"clock": self.clock}

    def sample(self, completion: Completion, ready_at: float, called_at: float) -> Sample:
        if completion.device_ms is None:
            return Sample(completion.wall_ms, completion.wall_ms, 0.0)
        self.clock = "cuda_events"
        return Sample(completion.device_ms, completion.wall_ms, max(0.0, completion.wall_ms - completion.device_ms))


class CudaTimer(WallTimer):
    """The CUDA target's timer (see the module's docstring)."""

    def __init__(self, device: Any, spin_us: float) -> None:
        from grader.boundary.timing_driver import TimingDriver

        super().__init__(device, spin_us)
        self.driver = TimingDriver()
        ordinal = ctypes.c_int()
        self.driver("cuCtxGetDevice", ctypes.byref(ordinal))
        self.ordinal = ordinal.value
        l2 = ctypes.c_int()
        self.driver("cuDeviceGetAttribute", ctypes.byref(l2), L2_CACHE_SIZE, self.ordinal)
        self.l2_bytes = l2.value
        self.flush_bytes = max(2 * self.l2_bytes, FLUSH_FLOOR)
        self.flush = device.allocate(self.flush_bytes // 4, np.dtype(np.uint32))
        self.flushes = 0
        # The harness's checksum kernel reads the flush buffer on the GPU; without it, the memset flush.
        self.reads_to_flush = getattr(device, "digest_kernel", None) is not None
        if self.reads_to_flush:
            self.driver("cuMemsetD32_v2", self.flush.address, 0, self.flush_bytes // 4)  # read, so defined
        self.spin_ns = int(spin_us * 1000)
        module, self.spin = ctypes.c_void_p(), ctypes.c_void_p()
        self.driver("cuModuleLoadData", ctypes.byref(module), SPIN_PTX.encode() + b"\0")
        self.driver("cuModuleGetFunction", ctypes.byref(self.spin), module, b"kg_spin")
        self.nvml = _Nvml.open(self.driver, self.ordinal)
        try:  # a GPU without persisting L2 (before Ampere) has none to reset: said in the facts, not fatal
            self.driver("cuCtxResetPersistingL2Cache")
            self.persisting_reset = "ok"
        except RuntimeError as error:
            self.persisting_reset = str(error)

    def facts(self) -> dict[str, Any]:
        return {"clock": "cuda_events", "l2_bytes": self.l2_bytes, "flush_bytes": self.flush_bytes,
                "flush_by": "reads" if self.reads_to_flush else "writes",
                "spin_us": self.spin_ns / 1000, "nvml": self.nvml.error or "ok",
                "persisting_l2_reset": self.persisting_reset}

    def prepare(self) -> float:
        self.flushes += 1
        if self.reads_to_flush:
            # Read, not written: a flush by writes leaves the L2 full of dirty lines that the timed
            # kernel's own traffic must write back first (ncu's cache control leaves none). Flushed by
            # writes on an H200: +5 µs on an 80 µs memory-bound gelu against ncu, +0.3% on a matmul.
            self.device.digest(self.flush, 0, self.flush_bytes // 4)
        else:  # a different value each time: no write can be skipped as already done
            self.driver("cuMemsetD32_v2", self.flush.address, self.flushes & 0xFFFFFFFF, self.flush_bytes // 4)
        if self.persisting_reset == "ok":
            self.driver("cuCtxResetPersistingL2Cache")
        self.driver("cuCtxSynchronize")
        ready_at = time.perf_counter()
        if self.spin_ns:
            argument = ctypes.c_uint64(self.spin_ns)
            pointers = (ctypes.c_void_p * 1)(ctypes.addressof(argument))
            self.driver("cuLaunchKernel", self.spin, 1, 1, 1, 1, 1, 1, 0, None, pointers, None)
        return ready_at

    def sample(self, completion: Completion, ready_at: float, called_at: float) -> Sample:
        spin_left_ms = max(0.0, self.spin_ns / 1e6 - (called_at - ready_at) * 1e3)
        if completion.device_ms is None:  # the shim's events failed: the wall clock is all there is
            return Sample(completion.wall_ms, completion.wall_ms, 0.0)
        gap = completion.wall_ms - spin_left_ms - completion.device_ms
        return Sample(completion.device_ms, completion.wall_ms, max(0.0, gap))

    def copy(self, target: Any, start: int, source: Any, count: int) -> None:
        itemsize = target.dtype.itemsize
        self.driver("cuMemcpyDtoD_v2", target.address + start * itemsize, source.address, count * itemsize)

    def clocks(self) -> dict[str, Any]:
        return self.nvml.clocks()


class _Nvml:
    """NVML by ctypes, for the SM clocks: now, the most it may run at, and the application clock set."""

    def __init__(self, library: Any, handle: Any, error: str) -> None:
        self.library, self.handle, self.error = library, handle, error

    @classmethod
    def open(cls, driver: Any, ordinal: int) -> _Nvml:
        try:
            library = ctypes.CDLL(NVML)
            if library.nvmlInit_v2() != 0:
                return cls(None, None, "nvmlInit failed")
            bus = ctypes.create_string_buffer(64)
            driver("cuDeviceGetPCIBusId", bus, len(bus), ordinal)  # NVML numbers GPUs its own way: by bus id
            handle = ctypes.c_void_p()
            if library.nvmlDeviceGetHandleByPciBusId_v2(bus, ctypes.byref(handle)) != 0:
                return cls(None, None, f"NVML does not know the GPU at {bus.value.decode()}")
            return cls(library, handle, "")
        except (OSError, AttributeError, RuntimeError) as error:
            return cls(None, None, f"NVML unavailable here ({type(error).__name__}: {error})")

    def clocks(self) -> dict[str, Any]:
        if self.library is None:
            return {}
        readings = {}
        for name, function in (("sm_mhz", "nvmlDeviceGetClockInfo"), ("sm_max_mhz", "nvmlDeviceGetMaxClockInfo"),
                               ("sm_app_mhz", "nvmlDeviceGetApplicationsClock")):
            value = ctypes.c_uint()
            reader = getattr(self.library, function, None)  # an old NVML may lack one
            status = reader(self.handle, NVML_CLOCK_SM, ctypes.byref(value)) if reader is not None else -1
            readings[name] = value.value if status == 0 else None
        return readings


TIMERS = {"grader.boundary.cuda_device": CudaTimer, "grader.boundary.cpp_device": WallTimer,
          "grader.boundary.python_device": PythonTimer}


def timer_for(device_module: str, device: Any, spin_us: float) -> WallTimer:
    """The timer of the target whose harness half is `device_module`."""
    return TIMERS.get(device_module, WallTimer)(device, spin_us)
