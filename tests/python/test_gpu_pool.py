"""test_gpu_pool.py - KVManager.register_gpu_pool with the CUDA runtime
absent (KVW_CUDART names a file that does not exist, GPU or not): list
length mismatches and values that are not unsigned integers are
ValueError; every argument the C call checks (count, zero lengths, item
lengths that do not divide, overflow, overlap, more than the pool) is
KVWireError EINVAL decided before the runtime is looked for; good
arguments reach the runtime and fail ENODEV naming why; nothing is left
beside the pool."""
import os

import pytest

from conftest import Group
from kvwire import KVArgs, KVManager
from kvwire import _lib
from kvwire.conn import KVWireError

os.environ["KVW_CUDART"] = "/nonexistent/libcudart.so"

SHAPE = ["--layers", 2, "--heads", 2, "--head-dim", 8, "--page-tokens", 4,
         "--pages", 32, "--dtype-bytes", 4, "--aux-slots", 8, "--workers", 1]


@pytest.fixture(scope="module")
def mgr():
    with Group(*SHAPE) as g:
        m = KVManager(KVArgs.from_run_dir(g.dir, "decode"), "decode")
        yield m
        m.close()


def gpu_args(m):
    """Device-looking pointers with the pool's own KV lengths."""
    lens = list(m.kv_args.kv_data_lens)
    items = list(m.kv_args.kv_item_lens)
    ptrs = [0x7f0000000000 + i * 0x100000 for i in range(len(lens))]
    return ptrs, lens, items


def einval(m, *args):
    with pytest.raises(KVWireError) as e:
        m.register_gpu_pool(*args)
    assert e.value.code == _lib.EINVAL, str(e.value)
    assert "not available" not in str(e.value)
    return str(e.value)


def test_python_side_checks(mgr):
    ptrs, lens, items = gpu_args(mgr)
    with pytest.raises(ValueError, match="pointers"):
        mgr.register_gpu_pool(ptrs[:-1], lens, items)
    with pytest.raises(ValueError, match="pointers"):
        mgr.register_gpu_pool(ptrs, lens, items[:-1])
    with pytest.raises(ValueError, match="unsigned 64-bit"):
        mgr.register_gpu_pool([-1] + ptrs[1:], lens, items)
    with pytest.raises(ValueError, match="unsigned 32-bit"):
        mgr.register_gpu_pool(ptrs, lens, [2 ** 32] + items[1:])
    with pytest.raises(ValueError, match="unsigned"):
        mgr.register_gpu_pool(ptrs, [1.5] + lens[1:], items)


def test_c_side_checks_before_the_runtime(mgr):
    ptrs, lens, items = gpu_args(mgr)
    assert "0 buffers" in einval(mgr, [], [], [])
    assert "NULL pointer or zero length" in einval(
        mgr, [0] + ptrs[1:], lens, items)
    assert "NULL pointer or zero length" in einval(
        mgr, ptrs, [0] + lens[1:], items)
    assert "multiple" in einval(mgr, ptrs, lens, [items[0] + 1] + items[1:])
    assert "overflows" in einval(
        mgr, [2 ** 64 - 16] + ptrs[1:], lens, items)
    assert "overlap" in einval(mgr, [ptrs[0], ptrs[0] + 8] + ptrs[2:], lens,
                               items)
    big = [x * 4 for x in lens]
    assert "more than the pool" in einval(
        mgr, [0x10000000000 * (i + 1) for i in range(len(ptrs))], big,
        items)
    too_many = 1025
    assert "1025 buffers" in einval(
        mgr, [0x1000 * (i + 1) for i in range(too_many)],
        [16] * too_many, [16] * too_many)


def test_good_arguments_reach_the_missing_runtime(mgr):
    ptrs, lens, items = gpu_args(mgr)
    with pytest.raises(KVWireError) as e:
        mgr.register_gpu_pool(ptrs, lens, items, device=0)
    assert e.value.code == _lib.ENODEV
    assert "cuda: not available: libcudart not found" in str(e.value)
    rec = mgr.kv_args.pool_path[:-len(".pool")] + ".gpu"
    assert not os.path.exists(rec)
    # Unchanged on failure: still the host pool's buffers.
    assert mgr.kv_args.kv_data_ptrs[0] != ptrs[0]
