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
work (forward passes, allocators) is a few numpy lines. As SGLang runs
them, each TP rank's scheduler is a process of its own (forked here before
any kvwire object exists), and the poll consensus is an all-reduce MIN
across an engine's rank processes (a shared array and a barrier standing
for the gloo group). The router's order between the two engines (the
decode's abort before the prefill's chunks, say) is a barrier of every
rank. Each step prints "step NAME: ok" once every rank has done it; the
last line is "harness: ok"."""
import multiprocessing
import os
import sys
import time
import traceback
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
    `rank`; the KV pointers are left to kvwire's pool, the metadata buffers
    are SGLang's own, no state types."""
    ptrs, lens, items = meta.get_buf_infos()
    a = types.SimpleNamespace(engine_rank=rank, pp_rank=0, kv_data_ptrs=[],
                              aux_data_ptrs=ptrs, aux_data_lens=lens,
                              aux_item_lens=items, state_types=[],
                              state_data_ptrs=[], ib_device=None, gpu_id=0)
    return a


PTP, DTP = (int(x) for x in os.environ.get("KVW_HARNESS_TP", "1,1")
            .split(","))
P = DisaggregationMode.PREFILL
D = DisaggregationMode.DECODE
WAIT = 60  # seconds any barrier waits before the run is given up


def server(mode, tp):
    return server_args.parser().parse_args(
        ["--tp-size", str(tp), "--disaggregation-mode", mode,
         "--disaggregation-transfer-backend", "kvwire"])


class Gloo:
    """An engine's gloo group: all_reduce(op=MIN) of each rank's values,
    every rank getting the same answer (a shared array, two barriers)."""

    def __init__(self, ctx, tp, width):
        self.tp, self.width = tp, width
        self.vals = ctx.Array("i", tp * width, lock=False)
        self.bar = ctx.Barrier(tp)

    def all_reduce_min(self, rank, values):
        w = self.width
        self.vals[rank * w:rank * w + len(values)] = list(values)
        self.bar.wait(WAIT)
        out = [min(self.vals[k * w + i] for k in range(self.tp))
               for i in range(len(values))]
        self.bar.wait(WAIT)  # every rank read before the next round
        return out


class Rank:
    """One TP rank's scheduler process: its engine's gloo group and the
    barrier every rank of both engines shares (the router's order)."""

    def __init__(self, mode, rank, gloo, router):
        self.mode, self.rank = mode, rank
        self.gloo, self.router = gloo, router
        self.printer = mode == D and rank == 0

    def until(self, pollers, want):
        """SGLang's poll consensus: this rank polls its own senders or
        receivers once (poll_and_all_reduce, through kvwire's hook), and
        the all-reduce gives every rank of the engine the MIN over its
        ranks: one answer, so every rank leaves the loop in the same
        round."""
        while True:
            local = poll_and_all_reduce(pollers, None)
            agreed = self.gloo.all_reduce_min(self.rank, local)
            if agreed == want:
                return
            assert time.monotonic() < DEADLINE, (local, agreed, want)
            time.sleep(0.001)

    def done(self, name=None):
        """Every rank of both engines reached this point; the step is
        named once."""
        self.router.wait(WAIT)
        if name and self.printer:
            step(name)


ROOMS = [1001, 1002, 1003]
DONE = [1001, 1002]
PAGES = {1001: [1, 2, 3], 1002: [4, 5], 1003: [6]}  # decode's
AUX = {1001: 2, 1002: 5, 1003: 7}
SRC = {1001: [7, 0, 3], 1002: [2, 6], 1003: [5]}    # prefill's
PAUX = {1001: 0, 1002: 1, 1003: 6}


def full_kv(args, pool):
    """Every head of every page of each (layer, K/V): the forward pass's
    output, the same in every process (seeded)."""
    rng = np.random.default_rng(3)
    shape = pool.k(0).shape
    heads = args.total_kv_head_num
    return {(layer, kv): rng.standard_normal(
        shape[:2] + (heads,) + shape[3:]).astype(pool.k(0).dtype)
        for layer in range(args.num_layers) for kv in (0, 1)}


def prefill(me, backend):
    meta = MetadataBuffers(8)
    m = get_kv_class(backend, KVClassType.MANAGER)(
        kv_args(meta, me.rank), P, server("prefill", PTP), False)
    assert m.kw.kv_args.engine_rank == me.rank
    addr = m.kw.kv_args.bootstrap_addr
    Sender = get_kv_class(backend, KVClassType.SENDER)
    me.done("kv_managers")
    me.done("decode_prealloc_queue_add")

    # PrefillBootstrapQueue.add, then pop_bootstrapped.
    send = {room: Sender(m, addr, room, list(range(DTP)), 0)
            for room in ROOMS}
    me.until([send[x] for x in ROOMS], [KVPoll.Bootstrapping] * 3)
    me.done("prefill_bootstrap_queue_add")
    me.done("decode_pop_preallocated")

    # Bootstrapped -> pop_decode_prefix_len, init(num pages, aux).
    me.until([send[x] for x in ROOMS], [KVPoll.WaitingForInput] * 3)
    for room in ROOMS:
        assert send[room].pop_decode_prefix_len() == 0
        send[room].init(len(SRC[room]), PAUX[room])
    me.done("prefill_pop_bootstrapped")

    # The forward pass writes this rank's heads of the KV;
    # process_batch_result sets the metadata row (the same on every rank)
    # before the last chunk. send_kv_chunk (prefill.py at 000c2b942308)
    # asks should_send_kv_chunk first; a chunk that is not the last has
    # state_indices None, the last one a list per state type ([] here).
    # 1003 is aborted by its decode first.
    a, pool = m.kw.kv_args, m.kw.pool
    full = full_kv(a, pool)
    h = a.total_kv_head_num // PTP
    mine = slice(me.rank * h, (me.rank + 1) * h)
    for layer in range(a.num_layers):
        pool.k(layer)[...] = full[layer, 0][:, :, mine]
        pool.v(layer)[...] = full[layer, 1][:, :, mine]
    me.done()  # the decode aborted 1003
    for room in DONE:
        meta.set_buf(PAUX[room], token=room % 97, seed=room)
        ids = np.array(SRC[room], np.int32)
        assert send[room].should_send_kv_chunk(1, False)
        send[room].send(ids[:1], None)  # a chunk
        # the last one, as newer SGLang calls it (its tokens: a partial
        # last page)
        assert send[room].should_send_kv_chunk(len(ids) - 1, True)
        send[room].send(ids[1:], [], num_kv_tokens=2 * len(ids) - 1)
    me.done("prefill_send_kv_chunks")

    # The inflight queue: poll_and_all_reduce until every rank agrees.
    me.until([send[x] for x in DONE], [KVPoll.Success] * 2)
    me.done("transfer_queues_and_metadata_gate")
    metric_and_clear([send[x] for x in DONE])
    me.done("get_transfer_metric_and_clear")
    me.until([send[1003]], [KVPoll.Failed])
    failure_then_clear(send[1003])
    me.done("abort_failure_exception_then_clear")
    m.kw.close()


def decode(me, backend):
    meta = MetadataBuffers(8)
    m = get_kv_class(backend, KVClassType.MANAGER)(
        kv_args(meta, me.rank), D, server("decode", DTP), False)
    assert m.kw.kv_args.engine_rank == me.rank
    Receiver = get_kv_class(backend, KVClassType.RECEIVER)
    addr = m.kw.kv_args.bootstrap_addr  # the router's: the prefill's
    me.done("kv_managers")

    # DecodePreallocQueue.add -> _resolve_prefill_dp_rank (prefill info by
    # address, else _ensure_prefill_info) -> the receiver's init.
    assert m.prefill_info_table.get(addr) is None
    assert m.try_ensure_parallel_info(addr)
    info = m.prefill_info_table[addr]
    assert info.attn_tp_size == PTP
    recv = {}
    for room in ROOMS:
        dp = 0 if info.dp_size == 1 else room % info.dp_size
        x = Receiver(mgr=m, bootstrap_addr=addr, bootstrap_room=room,
                     prefill_dp_rank=dp)
        x.init(dp)
        recv[room] = x
    me.done("decode_prealloc_queue_add")
    me.done("prefill_bootstrap_queue_add")

    # pop_preallocated: pages and a metadata slot (the same on every rank:
    # the scheduler decides once), then send_metadata(kv_indices,
    # aux_index, state_indices=[], decode_prefix_len).
    me.until([recv[x] for x in ROOMS], [KVPoll.WaitingForInput] * 3)
    for room in ROOMS:
        recv[room].send_metadata(np.array(PAGES[room], np.int32),
                                 AUX[room], [], decode_prefix_len=0)
    me.done("decode_pop_preallocated")
    me.done("prefill_pop_bootstrapped")
    recv[1003].abort()
    me.done()  # before the prefill's chunks
    me.done("prefill_send_kv_chunks")

    # The transfer queue: poll_and_all_reduce, then each rank's heads and
    # the metadata gate (each decode rank reads its own buffers' row).
    me.until([recv[x] for x in DONE], [KVPoll.Success] * 2)
    a, pool = m.kw.kv_args, m.kw.pool
    full = full_kv(a, pool)
    h = a.total_kv_head_num // DTP
    sent = MetadataBuffers(8)  # the prefill's rows, as it set them
    for room in DONE:
        for layer in range(a.num_layers):
            for kv, t in ((0, pool.k(layer)), (1, pool.v(layer))):
                want = full[layer, kv][SRC[room]][
                    :, :, me.rank * h:(me.rank + 1) * h]
                assert (t[PAGES[room]] == want).all(), (me.rank, room, layer)
        sent.set_buf(PAUX[room], token=room % 97, seed=room)
        got = meta.get_buf(AUX[room])
        want = sent.get_buf(PAUX[room])
        assert all((g == w).all() for g, w in zip(got, want)), room
        assert got[0][0] == room % 97
    me.done("transfer_queues_and_metadata_gate")
    metric_and_clear([recv[x] for x in DONE])
    me.done("get_transfer_metric_and_clear")

    # The aborted request: Failed on every rank of both engines; each side
    # raises the reason from failure_exception(), and SGLang's clear()
    # after it is fine; no metadata row was written for it.
    me.until([recv[1003]], [KVPoll.Failed])
    failure_then_clear(recv[1003])
    assert not any(b[AUX[1003]].any() for b in meta.bufs)
    me.done("abort_failure_exception_then_clear")
    m.kw.close()


def metric_and_clear(rooms):
    for x in rooms:
        m = x.get_transfer_metric()
        assert type(m) is KVTransferMetric and m.transfer_latency_s > 0
        assert m.transfer_total_bytes > 0
        x.clear()


def failure_then_clear(x):
    try:
        x.failure_exception()
        raise AssertionError("no exception")
    except Exception as e:  # SGLang catches its KVTransferError
        assert "abort" in str(e) or "Failed" in str(e), e
    x.clear()


def rank_main(role, me, backend):
    """A rank process: its scheduler's calls; exit 1 on any failure (the
    barriers then break in the others, which exit too)."""
    try:
        role(me, backend)
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        me.router.abort()
        me.gloo.bar.abort()
        os._exit(1)
    sys.stdout.flush()
    os._exit(0)


backend = TransferBackend(server("prefill", PTP)
                          .disaggregation_transfer_backend)
step("load_plugins")
ctx = multiprocessing.get_context("fork")  # before any kvwire object
router = ctx.Barrier(PTP + DTP)
gloo = {P: Gloo(ctx, PTP, 3), D: Gloo(ctx, DTP, 3)}
procs = [ctx.Process(target=rank_main,
                     args=(role, Rank(mode, r, gloo[mode], router), backend))
         for mode, tp, role in ((P, PTP, prefill), (D, DTP, decode))
         for r in range(tp)]
for p in procs:
    p.start()
for p in procs:
    p.join(2 * WAIT)
codes = [p.exitcode for p in procs]
for p in procs:
    if p.exitcode is None:
        p.kill()
assert codes == [0] * len(procs), "rank processes exited %s" % codes
print("harness: ok")
sys.exit(0)
