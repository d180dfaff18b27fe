"""The targets' harness halves as the harness uses them: allocate, fill with a bit pattern, write,
read back a range, and digest a range where it lies (an input the kernel must not change is checked
this way, not copied back). The same assertions for the CPU's NumPy buffers and for GPU memory
through the CUDA driver (marked `gpu`)."""

from __future__ import annotations

import numpy as np
import pytest

from grader.boundary.protocol import POISON_BITS
from grader.targets import target_named


@pytest.fixture(params=["cpp", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    target = target_named(request.param)
    module = __import__(target.device_module, fromlist=["open_device"])
    opened = module.open_device(False, target.device_code())
    yield opened
    opened.release()


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_a_fill_sets_exactly_its_range_to_the_pattern(device, dtype: str) -> None:
    unsigned, bits = POISON_BITS[dtype]
    allocation = device.allocate(1000, np.dtype(dtype))
    device.fill(allocation, 0, 1000, bits)
    device.fill(allocation, 10, 980, 0)
    raw = device.read(allocation, 0, 1000).view(unsigned)
    assert (raw[:10] == bits).all() and (raw[990:] == bits).all()
    assert (raw[10:990] == 0).all()


def test_written_data_reads_back_at_its_offset(device) -> None:
    data = np.arange(300, dtype=np.float32) * 0.5
    allocation = device.allocate(512, np.dtype(np.float32))
    device.fill(allocation, 0, 512, 0)
    device.write(allocation, 100, data)
    back = device.read(allocation, 0, 512)
    assert np.array_equal(back[100:400], data)
    assert not back[:100].any() and not back[400:].any()
    assert device.read(allocation, 512, 0).size == 0


def test_a_digest_changes_with_any_one_element_and_only_with_its_range(device) -> None:
    rng = np.random.default_rng(5)
    data = rng.standard_normal(1 << 20).astype(np.float32)  # more words than the digest's threads
    allocation = device.allocate(data.size + 64, np.dtype(np.float32))
    device.fill(allocation, 0, data.size + 64, 0)
    device.write(allocation, 32, data)
    before = device.digest(allocation, 32, data.size)
    assert device.digest(allocation, 32, data.size) == before  # deterministic: threads add in any order
    device.write(allocation, data.size + 40, np.float32([7.0]))  # outside the range: the same digest
    assert device.digest(allocation, 32, data.size) == before
    for position in (0, 123_457, data.size - 1):
        changed = data.copy()
        changed[position] = np.nextafter(changed[position], np.float32(np.inf))  # one bit of one element
        device.write(allocation, 32, changed)
        assert device.digest(allocation, 32, data.size) != before, position
    swapped = data.copy()
    swapped[[10, 11]] = swapped[[11, 10]]  # the same words in another order: a sum of words would miss it
    device.write(allocation, 32, swapped)
    assert device.digest(allocation, 32, data.size) != before
    device.write(allocation, 32, data)
    assert device.digest(allocation, 32, data.size) == before


def test_an_uploaded_file_reaches_every_call_as_the_file_holds_it(device, tmp_path) -> None:
    """The weights of a composed program: each call gets the file's contents, even after a call wrote into
    them; on the GPU one upload serves the harness's calls (kept, and not counted as memory a kernel held)."""
    weights = np.random.default_rng(9).standard_normal(3 << 20).astype(np.float32)  # 12 MiB
    path = tmp_path / "weights.npy"
    np.save(path, weights)
    first = device.upload(str(path), weights.size, np.dtype(np.float32))
    assert np.array_equal(device.read(first, 0, weights.size), weights)
    device.write(first, 1000, np.float32([1e30, -1e30]))  # a stray write during the first call
    device.release()
    held = device.held_bytes()
    assert held is None or held < 2 << 20, held  # the kept upload is the harness's, not the kernel's
    second = device.upload(str(path), weights.size, np.dtype(np.float32))
    assert np.array_equal(device.read(second, 0, weights.size), weights)
    if device.held_bytes() is not None:  # the GPU keeps one allocation: the same one, its contents restored
        assert second is first
        assert device.upload(str(path), weights.size, np.dtype(np.float32)) is first
