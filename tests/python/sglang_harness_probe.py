"""sglang_harness_probe.py - SGLang's prefill and decode schedulers' calls
into a transfer backend, call for call, replayed on kvwire (run by
test_sglang_harness.py in a fresh interpreter whose path holds
tests/python/sglang_pinned and kvwire, $KVW_RUN_DIR a live TP 1 group
started with SGLang's metadata row lengths). Written from SGLang's
disaggregation/prefill.py (PrefillBootstrapQueue, the inflight queue),
its decode module (DecodePreallocQueue: _resolve_prefill_dp_rank,
try_ensure_parallel_info, pop_preallocated; DecodeTransferQueue), utils.py
(MetadataBuffers, poll_and_all_reduce) and base/conn.py; the engine's own
work (forward passes, allocators) is a few numpy lines. Each step prints
"step NAME: ok"; the last line is "harness: ok"."""
import os
import sys
import time
import types

import numpy as np

from sglang.srt.plugins import load_plugins

load_plugins()

from sglang.srt import server_args  # noqa: E402
from sglang.srt.disaggregation.base.conn import (  # noqa: E402
    KVPoll, KVTransferMetric)
from sglang.srt.disaggregation.utils import (  # noqa: E402
    DisaggregationMode, KVClassType, TransferBackend, get_kv_class,
    poll_and_all_reduce)

RUN = os.environ["KVW_RUN_DIR"]
DEADLINE = time.monotonic() + 60


def step(name):
    print("step %s: ok" % name, flush=True)


class MetadataBuffers:
    """SGLang's MetadataBuffers (utils.py): eight buffers of its own, one
    row per request, with hidden_size 32 (float32)."""
    SPEC = [("output_ids", np.int32, 16),
            ("output_token_logprobs_val", np.float32, 16),
            ("output_token_logprobs_idx", np.int32, 16),
            ("output_top_logprobs_val", np.float32, 128),
            ("output_top_logprobs_idx", np.int32, 128),
            ("output_topk_p", np.float32, 16),
            ("output_topk_index", np.int64, 16),
            ("output_hidden_states", np.float32, 32)]

    def __init__(self, size):
        self.bufs = [np.zeros((size, n), t) for _, t, n in self.SPEC]

    def get_buf_infos(self):
        return ([b.ctypes.data for b in self.bufs], [b.nbytes for b in self.bufs],
                [b[0].nbytes for b in self.bufs])

    def set_buf(self, idx, token, seed):
        rng = np.random.default_rng(seed)
        for b in self.bufs:
            b[idx] = rng.integers(1, 1000, b.shape[1]).astype(b.dtype)
        self.bufs[0][idx, 0] = token

    def get_buf(self, idx):
        return [b[idx].copy() for b in self.bufs]


def kv_args(meta):
    """KVArgs as SGLang's prefill and decode modules fill it; the KV pointers are left
    to kvwire's pool (the adapter's requirement), the metadata buffers are
    SGLang's own, no state types."""
    ptrs, lens, items = meta.get_buf_infos()
    a = types.SimpleNamespace(engine_rank=0, pp_rank=0, kv_data_ptrs=[],
                              aux_data_ptrs=ptrs, aux_data_lens=lens,
                              aux_item_lens=items, state_types=[],
                              state_data_ptrs=[], ib_device=None, gpu_id=0)
    return a


def until(pollers, want):
    while True:
        polls = poll_and_all_reduce(pollers, None)
        if polls == want:
            return
        assert time.monotonic() < DEADLINE, (polls, want)
        time.sleep(0.001)


sa = server_args.parser().parse_args(
    ["--disaggregation-mode", "prefill",
     "--disaggregation-transfer-backend", "kvwire"])
backend = TransferBackend(sa.disaggregation_transfer_backend)
step("load_plugins")

p_meta, d_meta = MetadataBuffers(8), MetadataBuffers(8)
P = DisaggregationMode.PREFILL
D = DisaggregationMode.DECODE
pm = get_kv_class(backend, KVClassType.MANAGER)(kv_args(p_meta), P, sa,
                                                False)
dm = get_kv_class(backend, KVClassType.MANAGER)(kv_args(d_meta), D, sa,
                                                False)
addr = pm.kw.kv_args.bootstrap_addr
Sender = get_kv_class(backend, KVClassType.SENDER)
Receiver = get_kv_class(backend, KVClassType.RECEIVER)
step("kv_managers")

# Decode: DecodePreallocQueue.add -> _resolve_prefill_dp_rank (prefill
# info by address, else _ensure_prefill_info) -> the receiver's init.
assert dm.prefill_info_table.get(addr) is None
assert dm.try_ensure_parallel_info(addr)
info = dm.prefill_info_table[addr]
rooms = [1001, 1002, 1003]
recv = {}
for room in rooms:
    dp = 0 if info.dp_size == 1 else room % info.dp_size
    r = Receiver(mgr=dm, bootstrap_addr=addr, bootstrap_room=room,
                 prefill_dp_rank=dp)
    r.init(dp)
    recv[room] = r
step("decode_prealloc_queue_add")

# Prefill: PrefillBootstrapQueue.add, then pop_bootstrapped polls.
send = {room: Sender(pm, addr, room, [0], 0) for room in rooms}
assert poll_and_all_reduce([send[r] for r in rooms], None) == \
    [KVPoll.Bootstrapping] * 3
step("prefill_bootstrap_queue_add")

# Decode: pop_preallocated: pages and a metadata slot, then
# send_metadata(kv_indices, aux_index, state_indices=[], decode_prefix_len).
pages = {1001: [1, 2, 3], 1002: [4, 5], 1003: [6]}
aux = {1001: 2, 1002: 5, 1003: 7}
until([recv[r] for r in rooms], [KVPoll.WaitingForInput] * 3)
for room in rooms:
    recv[room].send_metadata(np.array(pages[room], np.int32), aux[room], [],
                             decode_prefix_len=0)
step("decode_pop_preallocated")

# Prefill: bootstrapped -> pop_decode_prefix_len, init(num pages, aux).
until([send[r] for r in rooms], [KVPoll.WaitingForInput] * 3)
src = {1001: [7, 0, 3], 1002: [2, 6], 1003: [5]}
paux = {1001: 0, 1002: 1, 1003: 6}
for room in rooms:
    assert send[room].pop_decode_prefix_len() == 0
    send[room].init(len(src[room]), paux[room])
step("prefill_pop_bootstrapped")

# Prefill: the forward pass writes the KV; process_batch_result sets the
# metadata row (set_buf) before the last chunk; chunks carry
# state_indices=[] (no state types). 1003 is aborted by its decode first.
pool = pm.kw.pool
rng = np.random.default_rng(3)
for layer in range(pm.kw.kv_args.num_layers):
    for t in (pool.k(layer), pool.v(layer)):
        t[...] = rng.standard_normal(t.shape).astype(t.dtype)
recv[1003].abort()
for room in (1001, 1002):
    p_meta.set_buf(paux[room], token=room % 97, seed=room)
    ids = np.array(src[room], np.int32)
    send[room].send(ids[:1], [])           # a chunk
    send[room].send(ids[1:], [])           # the last one
step("prefill_send_kv_chunks")

# Inflight queue and decode transfer queue: poll_and_all_reduce.
until([send[1001], send[1002], recv[1001], recv[1002]], [KVPoll.Success] * 4)
dpool = dm.kw.pool
for room in (1001, 1002):
    for layer in range(pm.kw.kv_args.num_layers):
        assert (dpool.k(layer)[pages[room]] == pool.k(layer)[src[room]]).all()
        assert (dpool.v(layer)[pages[room]] == pool.v(layer)[src[room]]).all()
    # The metadata gate: the decode reads its own buffers' row.
    got, want = d_meta.get_buf(aux[room]), p_meta.get_buf(paux[room])
    assert all((g == w).all() for g, w in zip(got, want)), room
    assert got[0][0] == room % 97
step("transfer_queues_and_metadata_gate")

for x in (send[1001], send[1002], recv[1001], recv[1002]):
    m = x.get_transfer_metric()
    assert type(m) is KVTransferMetric and m.transfer_latency_s > 0
    assert m.transfer_total_bytes > 0
    x.clear()
step("get_transfer_metric_and_clear")

# The aborted request: its prefill hears Failed; both sides raise the
# reason from failure_exception() and SGLang's clear() after it is fine.
until([recv[1003], send[1003]], [KVPoll.Failed] * 2)
for x in (recv[1003], send[1003]):
    try:
        x.failure_exception()
        raise AssertionError("no exception")
    except Exception as e:  # SGLang catches its KVTransferError
        assert "abort" in str(e) or "Failed" in str(e), e
    x.clear()
assert not any(b[aux[1003]].any() for b in d_meta.bufs)
step("abort_failure_exception_then_clear")
pm.kw.close()
dm.kw.close()
print("harness: ok")
sys.exit(0)
