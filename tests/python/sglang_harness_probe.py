"""sglang_harness_probe.py - SGLang's prefill and decode schedulers' calls
into a transfer backend, call for call, replayed on kvwire (run by
test_sglang_harness.py in a fresh interpreter whose path holds
tests/python/sglang_pinned and kvwire, $KVW_RUN_DIR a live group of
prefill and decode TP $KVW_HARNESS_TP ("P,D") started with SGLang's
metadata row lengths). Written from SGLang's
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


def kv_args(meta, rank):
    """KVArgs as SGLang's prefill and decode modules fill it for TP rank
    `rank`; the KV pointers are left to kvwire's pool (the adapter's
    requirement), the metadata buffers are SGLang's own, no state types."""
    ptrs, lens, items = meta.get_buf_infos()
    a = types.SimpleNamespace(engine_rank=rank, pp_rank=0, kv_data_ptrs=[],
                              aux_data_ptrs=ptrs, aux_data_lens=lens,
                              aux_item_lens=items, state_types=[],
                              state_data_ptrs=[], ib_device=None, gpu_id=0)
    return a


def until(ranks, want):
    """SGLang's poll consensus: every TP rank polls its own senders or
    receivers once (poll_and_all_reduce, through kvwire's hook), and the
    gloo all-reduce gives every rank the MIN over all ranks' values: one
    answer, by construction (here: the MIN of the values each rank
    contributed in this round)."""
    while True:
        local = [poll_and_all_reduce(p, None) for p in ranks]
        agreed = [min(col) for col in zip(*local)]
        if agreed == want:
            return
        assert time.monotonic() < DEADLINE, (local, want)
        time.sleep(0.001)


PTP, DTP = (int(x) for x in os.environ.get("KVW_HARNESS_TP", "1,1")
            .split(","))
P = DisaggregationMode.PREFILL
D = DisaggregationMode.DECODE


def server(mode, tp):
    return server_args.parser().parse_args(
        ["--tp-size", str(tp), "--disaggregation-mode", mode,
         "--disaggregation-transfer-backend", "kvwire"])


backend = TransferBackend(server("prefill", PTP)
                          .disaggregation_transfer_backend)
step("load_plugins")

# One manager and one MetadataBuffers per TP rank, as each rank's
# scheduler process makes them.
p_meta = [MetadataBuffers(8) for _ in range(PTP)]
d_meta = [MetadataBuffers(8) for _ in range(DTP)]
Manager = get_kv_class(backend, KVClassType.MANAGER)
pm = [Manager(kv_args(p_meta[r], r), P, server("prefill", PTP), False)
      for r in range(PTP)]
dm = [Manager(kv_args(d_meta[r], r), D, server("decode", DTP), False)
      for r in range(DTP)]
assert [m.kw.kv_args.engine_rank for m in pm + dm] == \
    list(range(PTP)) + list(range(DTP))
addr = pm[0].kw.kv_args.bootstrap_addr
Sender = get_kv_class(backend, KVClassType.SENDER)
Receiver = get_kv_class(backend, KVClassType.RECEIVER)
step("kv_managers")

# Decode: DecodePreallocQueue.add -> _resolve_prefill_dp_rank (prefill
# info by address, else _ensure_prefill_info) -> the receiver's init.
rooms = [1001, 1002, 1003]
recv = [{} for _ in range(DTP)]
for r in range(DTP):
    assert dm[r].prefill_info_table.get(addr) is None
    assert dm[r].try_ensure_parallel_info(addr)
    info = dm[r].prefill_info_table[addr]
    assert info.attn_tp_size == PTP
    for room in rooms:
        dp = 0 if info.dp_size == 1 else room % info.dp_size
        x = Receiver(mgr=dm[r], bootstrap_addr=addr, bootstrap_room=room,
                     prefill_dp_rank=dp)
        x.init(dp)
        recv[r][room] = x
step("decode_prealloc_queue_add")

# Prefill: PrefillBootstrapQueue.add on every rank, then pop_bootstrapped.
send = [{room: Sender(pm[r], addr, room, list(range(DTP)), 0)
         for room in rooms} for r in range(PTP)]
until([[send[r][x] for x in rooms] for r in range(PTP)],
      [KVPoll.Bootstrapping] * 3)
step("prefill_bootstrap_queue_add")

# Decode: pop_preallocated: pages and a metadata slot (the same on every
# rank: the scheduler decides once), then send_metadata(kv_indices,
# aux_index, state_indices=[], decode_prefix_len).
pages = {1001: [1, 2, 3], 1002: [4, 5], 1003: [6]}
aux = {1001: 2, 1002: 5, 1003: 7}
until([[recv[r][x] for x in rooms] for r in range(DTP)],
      [KVPoll.WaitingForInput] * 3)
for r in range(DTP):
    for room in rooms:
        recv[r][room].send_metadata(np.array(pages[room], np.int32),
                                    aux[room], [], decode_prefix_len=0)
step("decode_pop_preallocated")

# Prefill: bootstrapped -> pop_decode_prefix_len, init(num pages, aux).
until([[send[r][x] for x in rooms] for r in range(PTP)],
      [KVPoll.WaitingForInput] * 3)
src = {1001: [7, 0, 3], 1002: [2, 6], 1003: [5]}
paux = {1001: 0, 1002: 1, 1003: 6}
for r in range(PTP):
    for room in rooms:
        assert send[r][room].pop_decode_prefix_len() == 0
        send[r][room].init(len(src[room]), paux[room])
step("prefill_pop_bootstrapped")

# Prefill: the forward pass writes each rank's heads of the KV;
# process_batch_result sets the metadata row (the same on every rank)
# before the last chunk; chunks carry state_indices=[]. 1003 is aborted by
# its decode first.
layers = pm[0].kw.kv_args.num_layers
heads = pm[0].kw.kv_args.total_kv_head_num
rng = np.random.default_rng(3)
full = {}  # (layer, K/V) -> every head of every page
shape = pm[0].kw.pool.k(0).shape
for layer in range(layers):
    for kv in (0, 1):
        full[layer, kv] = rng.standard_normal(
            shape[:2] + (heads,) + shape[3:]).astype(
                pm[0].kw.pool.k(0).dtype)
for r in range(PTP):
    h = heads // PTP
    for layer in range(layers):
        pool = pm[r].kw.pool
        pool.k(layer)[...] = full[layer, 0][:, :, r * h:(r + 1) * h]
        pool.v(layer)[...] = full[layer, 1][:, :, r * h:(r + 1) * h]
for r in range(DTP):
    recv[r][1003].abort()
for r in range(PTP):
    for room in (1001, 1002):
        p_meta[r].set_buf(paux[room], token=room % 97, seed=room)
        ids = np.array(src[room], np.int32)
        send[r][room].send(ids[:1], [])  # a chunk
        # the last one, as newer SGLang calls it (its tokens: a partial
        # last page)
        send[r][room].send(ids[1:], [], num_kv_tokens=2 * len(ids) - 1)
step("prefill_send_kv_chunks")

# Inflight queue and decode transfer queue: poll_and_all_reduce.
done = [1001, 1002]
until([[send[r][x] for x in done] for r in range(PTP)] +
      [[recv[r][x] for x in done] for r in range(DTP)],
      [KVPoll.Success] * 2)
for r in range(DTP):
    h = heads // DTP
    for room in done:
        for layer in range(layers):
            for kv, t in ((0, dm[r].kw.pool.k(layer)),
                          (1, dm[r].kw.pool.v(layer))):
                want = full[layer, kv][src[room]][:, :, r * h:(r + 1) * h]
                assert (t[pages[room]] == want).all(), (r, room, layer)
        # The metadata gate: each decode rank reads its own buffers' row.
        got = d_meta[r].get_buf(aux[room])
        want = p_meta[0].get_buf(paux[room])
        assert all((g == w).all() for g, w in zip(got, want)), room
        assert got[0][0] == room % 97
step("transfer_queues_and_metadata_gate")

for x in [send[r][y] for r in range(PTP) for y in done] + \
        [recv[r][y] for r in range(DTP) for y in done]:
    m = x.get_transfer_metric()
    assert type(m) is KVTransferMetric and m.transfer_latency_s > 0
    assert m.transfer_total_bytes > 0
    x.clear()
step("get_transfer_metric_and_clear")

# The aborted request: every prefill rank hears Failed; each side raises
# the reason from failure_exception(), and SGLang's clear() after it is
# fine; no metadata row was written for it.
until([[recv[r][1003]] for r in range(DTP)] +
      [[send[r][1003]] for r in range(PTP)], [KVPoll.Failed])
for x in [recv[r][1003] for r in range(DTP)] + \
        [send[r][1003] for r in range(PTP)]:
    try:
        x.failure_exception()
        raise AssertionError("no exception")
    except Exception as e:  # SGLang catches its KVTransferError
        assert "abort" in str(e) or "Failed" in str(e), e
    x.clear()
assert not any(b[aux[1003]].any() for m in d_meta for b in m.bufs)
step("abort_failure_exception_then_clear")
for m in pm + dm:
    m.kw.close()
print("harness: ok")
sys.exit(0)
