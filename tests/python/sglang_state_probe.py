"""sglang_state_probe.py - run by test_adapters.py in a process of its own
(KVW_CUDART names the CPU stand-in runtime, tests/fakecuda, for this
process and the group's, a group started with --state
slot:4:96:layers=3,slot:4:256:layers=3,paged:6:64:layers=4): a hybrid
model's state as SGLang hands it to a backend, in GPU buffers SGLang
allocated beside its KV cache. KVArgs as setup_state_kv_args fills it
(disaggregation/utils.py at 000c2b942308): state_types [MAMBA, SWA], a
list of buffers per type - the Mamba type's conv tensor of each of its 3
layers, then its SSM tensor's (rows of two sizes in one type), the SWA
type's K then V of each of its 2 layers; the rows a room names as
send_kv_chunk (prefill.py) and the decode's prealloc queue build them (a
Mamba slot as a one-element array, SWA pages, None on a chunk that is
not the last). The adapter maps each run of one row size to a kvwire
component and registers KV and state in place; one room moves the KV
pages and the state rows, and nothing else of any buffer changes, none of
it through kvwire's pool. A group whose --state does not fit is refused
naming the flag that would. Prints "sglang state: ok" last."""
import ctypes
import os
import sys
import time
import types

import numpy as np

from kvwire import KVArgs, KVManager, KVPoll
from kvwire.adapters import sglang
from kvwire.layout import ROLE_AUX, ROLE_STATE
from sglang.srt.disaggregation.base.conn import StateType

cuda = ctypes.CDLL(os.environ["KVW_CUDART"])
run_dir = os.environ["KVW_RUN_DIR"]
# (rows, item bytes, buffers) of each run, in SGLang's order.
MAMBA = [(4, 96, 3), (4, 256, 3)]   # conv, then SSM, per Mamba layer
SWA = [(6, 64, 4)]                  # K of each SWA layer, then V


def device(n):
    """n bytes of (stand-in) GPU memory SGLang allocated, and a numpy view
    of it (the stand-in's device memory is host memory mapped shared: the
    test reads and writes it as SGLang's kernels would)."""
    p = ctypes.c_void_p()
    assert cuda.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)) == 0
    return p.value, np.ctypeslib.as_array(
        (ctypes.c_uint8 * n).from_address(p.value))


def sglang_side(mode, fill):
    """This rank's KV buffers (one per layer and K/V, as the layout has
    them) and its state buffers, all SGLang's: (KVArgs, KV views, state
    views per type)."""
    probe = KVManager(KVArgs.from_run_dir(run_dir, mode), mode)
    kv = [(b.item_len * b.pages, b.item_len) for b in probe.pool.buffers
          if b.role not in (ROLE_AUX, ROLE_STATE)]
    probe.close()
    a = types.SimpleNamespace(engine_rank=0, pp_rank=0, gpu_id=0,
                              kv_data_ptrs=[], kv_data_lens=[],
                              kv_item_lens=[], state_types=[],
                              state_data_ptrs=[], state_data_lens=[],
                              state_item_lens=[], state_dim_per_tensor=[])
    kv_views, state_views = [], []
    for n, it in kv:
        p, v = device(n)
        a.kv_data_ptrs.append(p)
        a.kv_data_lens.append(n)
        a.kv_item_lens.append(it)
        kv_views.append((v, it))
    for ty, runs in ((StateType.MAMBA, MAMBA), (StateType.SWA, SWA)):
        ptrs, lens, items, views = [], [], [], []
        for rows, it, count in runs:
            for _ in range(count):
                p, v = device(rows * it)
                ptrs.append(p)
                lens.append(rows * it)
                items.append(it)
                views.append(v.reshape(rows, it))
        a.state_types.append(ty)
        a.state_data_ptrs.append(ptrs)
        a.state_data_lens.append(lens)
        a.state_item_lens.append(items)
        a.state_dim_per_tensor.append([0] * len(ptrs))
        state_views.append(views)
    for v, _ in kv_views:
        v[:] = fill
    for views in state_views:
        for v in views:
            v[:] = fill
    return a, kv_views, state_views


def step(name):
    print("step %s: ok" % name, flush=True)


def until(what, cond, within=30):
    end = time.monotonic() + within
    while not cond():
        assert time.monotonic() < end, what
        time.sleep(0.001)


def ended(*rooms):
    return all(x.poll() in (KVPoll.Success, KVPoll.Failed) for x in rooms)


rng = np.random.default_rng(7)
p_args, p_kv, p_state = sglang_side("prefill", 0)
for views in p_state:  # every row different
    for v in views:
        v[:] = rng.integers(0, 256, v.shape, dtype=np.uint8)
for v, _ in p_kv:
    v[:] = rng.integers(0, 256, v.shape, dtype=np.uint8)
d_args, d_kv, d_state = sglang_side("decode", 0xEE)
Manager = sglang.get_kv_class("manager")
pm = Manager(p_args, "prefill")
dm = Manager(d_args, "decode")
assert pm.state_of == [0, 0, 1] and dm.state_of == [0, 0, 1]
step("state types mapped and registered in place")

addr = pm.kw.kv_args.bootstrap_addr
s = sglang.get_kv_class("sender")(pm, addr, 91, [0], 0)
r = sglang.get_kv_class("receiver")(dm, addr, 91)
r.init(0)
src, dst = [1, 3], [6, 2]
# The decode's prealloc queue: its Mamba slot, its SWA pages.
r.send_metadata(np.array(dst, np.int32), 1,
                [[np.array(2)], np.array([4, 5], np.int64)])
until("prefill WaitingForInput", lambda: s.poll() == KVPoll.WaitingForInput)
s.init(len(src), 2)
assert s.should_send_kv_chunk(1, False)
s.send(np.array(src[:1], np.int32), None)
assert s.should_send_kv_chunk(1, True)
s.send(np.array(src[1:], np.int32),
       [[np.array(1)], np.array([0, 3], np.int64)])
until("the room ends", lambda: ended(r, s))
assert r.poll() == KVPoll.Success and s.poll() == KVPoll.Success, \
    (r.poll(), s.poll())
step("one room with Mamba and SWA state")

for (pv, it), (dv, _) in zip(p_kv, d_kv):
    got, want = dv.reshape(-1, it), pv.reshape(-1, it)
    assert np.array_equal(got[dst], want[src])
    assert (np.delete(got, dst, axis=0) == 0xEE).all()
for t, moves in ((0, {1: 2}), (1, {0: 4, 3: 5})):
    for pv, dv in zip(p_state[t], d_state[t]):
        for a, b in moves.items():
            assert np.array_equal(dv[b], pv[a]), (t, a, b)
        assert (np.delete(dv, list(moves.values()), axis=0) == 0xEE).all()
# kvwire's pool kept none of it: KV and state went GPU to GPU.
aux_at = min(b.offset for b in dm.kw.pool.buffers if b.role == ROLE_AUX)
raw = np.fromfile(dm.kw.kv_args.pool_path, np.uint8)
assert not raw[:aux_at].any()
step("KV pages and state rows in SGLang's buffers, none in the pool")
s.clear()
r.clear()

# A full prefix hit: the decode holds the request's 2 pages already
# (decode_prefix_len), so the prefill's last chunk has no page, and SGLang
# sends it only if should_send_kv_chunk says so; its Mamba row must still
# come (the state the decode continues from).
s = sglang.get_kv_class("sender")(pm, addr, 92, [0], 0)
r = sglang.get_kv_class("receiver")(dm, addr, 92)
r.init(0)
tokens = 2 * pm.kw.kv_args.page_size
r.send_metadata(np.array([], np.int32), 3, [[np.array(0)], None],
                decode_prefix_len=tokens)
until("prefill WaitingForInput", lambda: s.poll() == KVPoll.WaitingForInput)
assert s.pop_decode_prefix_len() == tokens
s.init(0, 0)
if s.should_send_kv_chunk(0, True):
    s.send(np.array([], np.int32), [[np.array(3)], None])
until("the full hit ends", lambda: ended(r, s))
assert r.poll() == KVPoll.Success and s.poll() == KVPoll.Success
for pv, dv in zip(p_state[0], d_state[0]):
    assert np.array_equal(dv[0], pv[3])
s.clear()
r.clear()
step("a full prefix hit: no page, its Mamba row")

# A prefill of another TP size (as its kv-bootstrap told the decode's
# try_ensure_parallel_info), and SGLang's SWA tensors split over TP along
# another dimension than their rows' first: kvwire cannot slice them, so
# the request fails at send_metadata with why, and its prefill is told.
assert dm.state_split is None  # every dim 0 here
dm.state_split = sglang._state_split_whole(types.SimpleNamespace(
    state_dim_per_tensor=[[0] * 6, [1] * 4]))
dm.prefill_info_table[addr] = types.SimpleNamespace(attn_tp_size=2)
s = sglang.get_kv_class("sender")(pm, addr, 93, [0], 0)
r = sglang.get_kv_class("receiver")(dm, addr, 93)
r.init(0)
r.send_metadata(np.array([4], np.int32), 2,
                [[np.array(1)], np.array([2], np.int64)])
until("the decode's room settles", lambda: r.poll() == KVPoll.Failed)
until("its prefill is told", lambda: s.poll() == KVPoll.Failed)
try:
    r.failure_exception()
    raise AssertionError("no exception")
except Exception as e:
    assert "split over TP along dimension 1" in str(e), e
s.clear()
r.clear()
del dm.prefill_info_table[addr]
dm.state_split = None
step("state kvwire cannot slice between TP sizes: the request fails, why")
pm.kw.close()
dm.kw.close()

# A group whose --state does not fit SGLang's buffers: refused with the
# flag that would (here SGLang's SSM rows of 128 bytes, not 256).
MAMBA[1] = (4, 128, 3)
bad, _, _ = sglang_side("prefill", 0)
try:
    Manager(bad, "prefill")
    raise AssertionError("a group of other state components was taken")
except RuntimeError as e:
    assert "--state slot:4:96:layers=3,slot:4:128:layers=3," \
           "paged:6:64:layers=4" in str(e), e
MAMBA[1] = (4, 256, 3)
# SGLang's state in its own memory and its KV cache in kvwire's pool:
# refused (both are registered in place, or neither).
mixed, _, _ = sglang_side("prefill", 0)
mixed.kv_data_ptrs = []
try:
    Manager(mixed, "prefill")
    raise AssertionError("state in place without its KV cache")
except RuntimeError as e:
    assert "or neither" in str(e), e
step("a group that does not fit is refused, saying which --state would")
print("sglang state: ok")
sys.exit(0)
