"""The CUDA driver functions the timer needs besides the harness's (`grader.boundary.cuda_device.Driver`)."""

from __future__ import annotations

import ctypes
from typing import Any

from grader.boundary.cuda_device import Driver

_pointer = ctypes.c_uint64  # CUdeviceptr


class TimingDriver(Driver):
    """The harness's driver functions, and the L2 size, the persisting-L2 reset, device copies, the GPU's bus id."""

    SIGNATURES: dict[str, list[Any]] = {
        **Driver.SIGNATURES,
        "cuCtxGetDevice": [ctypes.POINTER(ctypes.c_int)],
        "cuDeviceGetAttribute": [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int],
        "cuCtxResetPersistingL2Cache": [],
        "cuMemcpyDtoD_v2": [_pointer, _pointer, ctypes.c_size_t],
        "cuDeviceGetPCIBusId": [ctypes.c_char_p, ctypes.c_int, ctypes.c_int],
    }
