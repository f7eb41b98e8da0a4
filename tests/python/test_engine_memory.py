"""test_engine_memory.py - engine memory registered in place (issue 32
item 1): an engine allocates its KV cache with KVManager.alloc (memory the
group's processes can map), places its buffers there as it likes and
registers them (register_host_pool, SGLang's kv_data_* lists); kvwire's
workers then read the prefill engine's bytes and write the decode engine's
bytes where they are. Shown by reading the engines' own arrays *and* the
pool files behind kvwire's back: the pages are in the engines' memory and
the pool files' KV bytes stay zero. Over shm and tcp; registering again
and taking it back are followed by the next room; what an engine that was
killed left behind is removed by the next engine of the pool; and every
refusal the issue lists says why."""
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, SHAPE, managers
from kvwire import KVPoll, KVReceiver, KVSender, KVWireError
from kvwire._lib import EINVAL, ENODEV
from kvwire.layout import ROLE_AUX
from test_binding import room_id, wait_for


def kv_bufs(m):
    return [b for b in m.pool.buffers if b.role != ROLE_AUX]


def pool_file(m):
    """The rank's pool file, mapped by this test on its own."""
    return np.memmap(m.kv_args.pool_path, dtype=np.uint8, mode="r")


def own_prefill(pm, seed):
    """The prefill engine's KV: one allocation per buffer, filled with a
    pattern of the seed; returns the arrays, registered."""
    arrs = []
    for i, b in enumerate(kv_bufs(pm)):
        a = pm.alloc(b.item_len * b.pages)
        a[:] = (np.arange(a.size, dtype=np.uint64) * (2 * i + 3) + seed) % 251
        arrs.append(a)
    pm.register_host_pool([a.ctypes.data for a in arrs],
                          [a.size for a in arrs],
                          [b.item_len for b in kv_bufs(pm)])
    return arrs


def own_decode(dm):
    """The decode engine's KV: one allocation for every buffer, placed in
    the reverse of the layout's order; returns (block, per-buffer views),
    registered."""
    kv = kv_bufs(dm)
    ln = kv[0].item_len * kv[0].pages
    block = dm.alloc(ln * len(kv))
    block[:] = 0xEE  # the decode's own bytes: only the room's pages change
    views = [block[(len(kv) - 1 - i) * ln:(len(kv) - i) * ln]
             for i in range(len(kv))]
    dm.register_host_pool([v.ctypes.data for v in views], [ln] * len(kv),
                          [b.item_len for b in kv])
    return block, views


def transfer(pm, dm, src, dst):
    room = room_id()
    s = KVSender(pm, pm.kv_args.bootstrap_addr, room, [0], 0)
    r = KVReceiver(dm, dm.kv_args.bootstrap_addr, room)
    r.init(0)
    r.send_metadata(np.array(dst, np.int32), 1, [])
    wait_for("prefill WaitingForInput",
             lambda: s.poll() == KVPoll.WaitingForInput)
    s.init(len(src), 0)
    s.send(np.array(src, np.int32))
    wait_for("the room over", lambda: r.poll() in (KVPoll.Success,
                                                  KVPoll.Failed))
    ok = r.poll() == KVPoll.Success
    s.clear()
    r.clear()
    return ok


def pages(arr, item_len, idx):
    return arr.reshape(-1, item_len)[idx]


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_the_engines_own_memory_moves_in_place(group_factory, transport):
    g = group_factory(*(SHAPE + ["--transport", transport]))
    pm, dm = managers(g)
    try:
        src_arrs = own_prefill(pm, 7)
        _, dst_views = own_decode(dm)
        src, dst = [1, 2, 30], [5, 6, 0]
        assert transfer(pm, dm, src, dst)
        for b, s_arr, d_arr in zip(kv_bufs(pm), src_arrs, dst_views):
            it = b.item_len
            assert np.array_equal(pages(d_arr, it, dst), pages(s_arr, it, src))
            others = [p for p in range(b.pages) if p not in dst]
            assert (pages(d_arr, it, others) == 0xEE).all()
            # kvw_pool_base shows the engine's memory too.
            assert np.array_equal(
                dm.pool.raw[b.offset:b.offset + it * b.pages], d_arr)
        # Behind kvwire's back: no KV byte went through the pool files.
        end = max(b.offset + b.item_len * b.pages for b in kv_bufs(dm))
        assert not pool_file(dm)[:end].any()
        assert not pool_file(pm)[:end].any()
    finally:
        pm.close()
        dm.close()


def test_registering_again_and_taking_it_back_are_followed(mgrs):
    """The worker (prefill) and the decode's mapping follow each change
    of registration before their next room."""
    pm, dm = mgrs
    it = kv_bufs(pm)[0].item_len
    src_arrs = own_prefill(pm, 1)
    _, first = own_decode(dm)
    assert transfer(pm, dm, [3], [4])
    assert np.array_equal(pages(first[0], it, [4]), pages(src_arrs[0], it, [3]))
    # A new registration: the next room lands in the new memory only.
    _, second = own_decode(dm)
    src_arrs = own_prefill(pm, 2)
    assert transfer(pm, dm, [3], [4])
    assert np.array_equal(pages(second[0], it, [4]),
                          pages(src_arrs[0], it, [3]))
    assert not np.array_equal(pages(first[0], it, [4]),
                              pages(src_arrs[0], it, [3]))
    # Taken back on both sides: the pools' own pages serve (as zeros).
    dm.unregister_host_pool()
    pm.unregister_host_pool()
    assert not dm.pool.k(0).any() and not pm.pool.k(0).any()
    pm.pool.k(0)[3] = 5.0
    assert transfer(pm, dm, [3], [4])
    assert (dm.pool.k(0)[4] == 5.0).all()
    assert (pool_file(dm)[kv_bufs(dm)[0].offset + 4 * it:][:it] != 0).any()
    assert not np.array_equal(pages(second[0], it, [4]),
                              pages(pm.pool.raw, it, [3]))


def refused(m, ptrs, lens, items, *want):
    with pytest.raises(KVWireError) as e:
        m.register_host_pool(ptrs, lens, items)
    assert e.value.code == EINVAL, str(e.value)
    for w in want:
        assert w in str(e.value), str(e.value)


def test_refusals_say_why(mgrs):
    pm, _ = mgrs
    kv = kv_bufs(pm)
    n, it = len(kv), kv[0].item_len
    ln = it * kv[0].pages
    arrs = [pm.alloc(ln) for _ in kv]
    ptrs = [a.ctypes.data for a in arrs]
    # Lists of different lengths, a count other than the layout's.
    with pytest.raises(ValueError, match="pointers"):
        pm.register_host_pool(ptrs, [ln] * (n - 1), [it] * n)
    with pytest.raises(ValueError, match="KV buffers"):
        pm.register_host_pool(ptrs[:-1], [ln] * (n - 1), [it] * (n - 1))
    # Host memory that kvwire did not allocate.
    mine = [np.zeros(ln, np.uint8) for _ in kv]
    refused(pm, [a.ctypes.data for a in mine], [ln] * n, [it] * n,
            "did not allocate", "KVManager.alloc")
    # An item length that does not divide the length; another item length.
    refused(pm, ptrs, [ln - 1] + [ln] * (n - 1), [it] * n,
            "not a multiple of its item length")
    refused(pm, ptrs, [ln] * n, [it // 2] * n, "item length", "layout has")
    # Fewer pages than the layout's.
    refused(pm, ptrs, [ln - it] * n, [it] * n, "pages", "layout has")
    # A buffer whose pool bytes are not whole pages of memory.
    big = pm.alloc(ln + 4096)
    refused(pm, [big.ctypes.data + it] + ptrs[1:], [ln] * n, [it] * n,
            "whole", "pages")
    # A GPU pointer without a GPU (the GPU registration's refusal).
    with pytest.raises(KVWireError) as e:
        pm.register_gpu_pool(ptrs, [ln] * n, [it] * n)
    assert e.value.code == ENODEV, str(e.value)
    # Nothing was registered: kv_args still name the pool's buffers.
    assert pm.kv_args.kv_data_ptrs[0] == pm.pool.base + kv[0].offset


KILLED = r"""
import sys, numpy as np
sys.path.insert(0, %(py)r)
from kvwire import KVArgs, KVManager
from kvwire.layout import ROLE_AUX
m = KVManager(KVArgs.from_run_dir(%(dir)r, "decode"), "decode")
kv = [b for b in m.pool.buffers if b.role != ROLE_AUX]
arrs = [m.alloc(b.item_len * b.pages) for b in kv]
m.register_host_pool([a.ctypes.data for a in arrs], [a.size for a in arrs],
                     [b.item_len for b in kv])
print("registered", flush=True)
sys.stdin.read()
"""


def test_a_killed_engines_memory_is_removed_by_the_next(group):
    p = subprocess.Popen([sys.executable, "-c", KILLED % {
        "py": os.path.join(ROOT, "python"), "dir": group.dir}],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"registered"
    p.send_signal(signal.SIGKILL)
    p.wait()
    pm, dm = managers(group)
    try:
        pool = dm.kv_args.pool_path
        left = [f for f in os.listdir(os.path.dirname(pool))
                if f.startswith(os.path.basename(pool) + ".m")]
        assert left == [], left  # swept when dm opened the pool
        pm.pool.k(0)[2] = 3.0
        assert transfer(pm, dm, [2], [7])
        assert (dm.pool.k(0)[7] == 3.0).all()
    finally:
        pm.close()
        dm.close()


def test_alloc_views_outlive_close_and_the_memory_goes_with_the_last(group):
    """An array from alloc() stays valid after close(); the engine (and
    with it the allocation's file) goes when the last view does."""
    import gc
    pm, dm = managers(group)
    dm.close()
    pool = pm.kv_args.pool_path

    def files():
        return {f for f in os.listdir(os.path.dirname(pool))
                if f.startswith(os.path.basename(pool) + ".m")}

    before = files()  # other tests' engines may still await their views
    a = pm.alloc(8192)
    a[:] = 7
    mine = files() - before
    assert len(mine) == 1
    pm.close()
    assert (a == 7).all() and mine <= files()  # still mapped
    del a
    gc.collect()
    assert not mine & files()
