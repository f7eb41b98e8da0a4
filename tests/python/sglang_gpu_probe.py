"""sglang_gpu_probe.py - run by test_adapters.py in a process of its own
(KVW_CUDART names the CPU stand-in runtime, tests/fakecuda, for this
process and the group's): SGLang's KV cache where SGLang keeps it, in GPU
buffers it allocated (one per layer and K/V, as its memory pool does), is
handed to the SGLang adapter as kv_data_ptrs on both sides; the adapter
registers it in place (CUDA IPC), one room moves, and the decode's buffers
hold the prefill's pages at the decode's indices while kvwire's pool keeps
none of them. Prints "sglang gpu: ok" last."""
import ctypes
import os
import sys
import time
import types

import numpy as np

from kvwire import KVArgs, KVManager, KVPoll
from kvwire.adapters import sglang

cuda = ctypes.CDLL(os.environ["KVW_CUDART"])
run_dir = os.environ["KVW_RUN_DIR"]


def device_buffers(mode):
    """SGLang's buffers for this rank's layout, allocated on the (stand-in)
    GPU: (ptrs, lens, item lens, numpy views of each)."""
    probe = KVManager(KVArgs.from_run_dir(run_dir, mode), mode)
    lens = list(probe.kv_args.kv_data_lens)
    items = list(probe.kv_args.kv_item_lens)
    probe.close()
    ptrs, views = [], []
    for n in lens:
        p = ctypes.c_void_p()
        assert cuda.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)) == 0
        ptrs.append(p.value)
        # The stand-in's device memory is host memory mapped shared: the
        # test reads and writes it as SGLang's kernels would.
        views.append(np.ctypeslib.as_array(
            (ctypes.c_uint8 * n).from_address(p.value)))
    return ptrs, lens, items, views


def step(name):
    print("step %s: ok" % name, flush=True)


p_ptrs, p_lens, items, p_views = device_buffers("prefill")
d_ptrs, d_lens, _, d_views = device_buffers("decode")
for i, v in enumerate(p_views):
    v[:] = (np.arange(v.size) * (2 * i + 1) + 7) % 251
for v in d_views:
    v[:] = 0xEE


def args(ptrs, lens):
    return types.SimpleNamespace(engine_rank=0, pp_rank=0, gpu_id=0,
                                 kv_data_ptrs=ptrs, kv_data_lens=lens,
                                 kv_item_lens=items)


pm = sglang.get_kv_class("manager")(args(p_ptrs, p_lens), "prefill")
dm = sglang.get_kv_class("manager")(args(d_ptrs, d_lens), "decode")
step("registered in place")
addr = pm.kw.kv_args.bootstrap_addr
s = sglang.get_kv_class("sender")(pm, addr, 77, [0], 0)
r = sglang.get_kv_class("receiver")(dm, addr, 77)
r.init(0)
src, dst = [1, 3], [6, 2]
r.send_metadata(np.array(dst, np.int32), 1)
deadline = time.monotonic() + 30
while s.poll() != KVPoll.WaitingForInput:
    assert time.monotonic() < deadline, "prefill never WaitingForInput"
    time.sleep(0.001)
s.init(len(src), 2)
s.send(np.array(src, np.int32))
while r.poll() not in (KVPoll.Success, KVPoll.Failed) or \
        s.poll() not in (KVPoll.Success, KVPoll.Failed):
    assert time.monotonic() < deadline, "the room never ended"
    time.sleep(0.001)
assert r.poll() == KVPoll.Success and s.poll() == KVPoll.Success, \
    (r.poll(), s.poll())
step("one room")
for it, pv, dv in zip(items, p_views, d_views):
    got, want = dv.reshape(-1, it), pv.reshape(-1, it)
    assert np.array_equal(got[dst], want[src])
    others = [i for i in range(got.shape[0]) if i not in dst]
    assert (got[others] == 0xEE).all()
# kvwire's pool kept none of the KV: the pages went GPU to GPU.
raw = np.fromfile(dm.kw.kv_args.pool_path, np.uint8)
assert not raw[:sum(d_lens)].any()
step("pages in SGLang's buffers, none in the pool")
s.clear()
r.clear()
pm.kw.close()
dm.kw.close()
print("sglang gpu: ok")
sys.exit(0)
