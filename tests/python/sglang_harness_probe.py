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
last line is "harness: ok".

KVW_HARNESS_MEM=sglang (a group started with test_sglang_harness.py's
STATE_FLAG for MAMBA and SWA below, --transport cuda, KVW_CUDART naming
the CPU stand-in runtime): each rank's KV cache
and its state are SGLang's, in (stand-in) GPU buffers it allocated, and
KVArgs names them as prefill.py's _init_kv_manager fills it at
000c2b942308: kv_data_ptrs per layer and K/V, state_types [MAMBA, SWA]
with a list of buffers per type as setup_state_kv_args builds them (the
Mamba type's conv buffer per Mamba layer, then its SSM buffer's; the SWA
type's K then V per SWA layer), each rank holding its TP part of every
state row; the last chunk and the decode's metadata carry a Mamba slot
and SWA pages per request, as send_kv_chunk and the prealloc queue do.
Otherwise the KV cache is kvwire's pool and there is no state type."""
import ctypes
import multiprocessing
import os
import sys
import time
import types

import numpy as np

from sglang.srt.plugins import load_plugins

load_plugins()

from sglang.srt import server_args  # noqa: E402
from sglang.srt.disaggregation.base.conn import (  # noqa: E402
    KVPoll, KVTransferMetric, StateType)
from sglang.srt.disaggregation.utils import (  # noqa: E402
    DisaggregationMode, KVClassType, TransferBackend, get_kv_class,
    poll_and_all_reduce)

from ranks import WAIT, Group, rank_body, run_ranks  # noqa: E402

RUN = os.environ["KVW_RUN_DIR"]
CUDA = ctypes.CDLL(os.environ["KVW_CUDART"]) \
    if os.environ.get("KVW_HARNESS_MEM") == "sglang" else None
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


def kv_args(meta, rank, mem=None):
    """KVArgs as SGLang's prefill and decode modules fill it for TP rank
    `rank`: the metadata buffers are SGLang's own; the KV pointers and the
    state types are `mem`'s (SGLang's own memory), or kvwire's pool and
    none."""
    ptrs, lens, items = meta.get_buf_infos()
    a = types.SimpleNamespace(engine_rank=rank, pp_rank=0, kv_data_ptrs=[],
                              aux_data_ptrs=ptrs, aux_data_lens=lens,
                              aux_item_lens=items, state_types=[],
                              state_data_ptrs=[], ib_device=None, gpu_id=0)
    if mem is not None:
        mem.fill_args(a)
    return a


MEM = os.environ.get("KVW_HARNESS_MEM", "pool")
# The state of a hybrid model in SGLang's memory (MEM sglang), whole rows
# by type: (rows, row bytes of the whole model, buffers) of each run.
MAMBA = [(8, 64, 2), (8, 128, 2)]   # conv, then SSM, of 2 Mamba layers
SWA = [(8, 32, 4)]                  # K, then V, of 2 SWA layers
# Each request's Mamba slot and SWA pages, prefill's and decode's.
SSLOT, DSLOT = {1001: 1, 1002: 3, 1003: 4}, {1001: 5, 1002: 2, 1003: 0}
SSWA = {1001: [0, 2], 1002: [5], 1003: [1]}
DSWA = {1001: [6, 7], 1002: [1], 1003: [3]}


def device(n):
    """n bytes of (stand-in) GPU memory, and a numpy view of them (the
    stand-in's device memory is host memory, mapped shared)."""
    p = ctypes.c_void_p()
    assert CUDA.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)) == 0
    return p.value, np.ctypeslib.as_array(
        (ctypes.c_uint8 * n).from_address(p.value))


class SGLangMemory:
    """A rank's KV cache and state in GPU buffers SGLang allocated: k[l],
    v[l] shaped like kvwire's pool views, state[t][i] (rows, this rank's
    part of a row) of type t's buffer i."""

    def __init__(self, mode, rank, tp):
        from kvwire import KVArgs, KVManager
        from kvwire.layout import ROLE_AUX, ROLE_STATE
        probe = KVManager(KVArgs.from_run_dir(RUN, mode, rank), mode)
        shape, dtype = probe.pool.k(0).shape, probe.pool.k(0).dtype
        kv = [(b.item_len * b.pages, b.item_len) for b in probe.pool.buffers
              if b.role not in (ROLE_AUX, ROLE_STATE)]
        layers = probe.kv_args.num_layers
        probe.close()
        self.ptrs, self.lens, self.items, views = [], [], [], []
        for n, it in kv:
            p, v = device(n)
            self.ptrs.append(p)
            self.lens.append(n)
            self.items.append(it)
            views.append(v.view(dtype).reshape(shape))
        self.k, self.v = views[:layers], views[layers:2 * layers]
        self.state, self.sptrs, self.slens, self.sitems = [], [], [], []
        for runs in (MAMBA, SWA):
            bufs, ps, ls, its = [], [], [], []
            for rows, whole, count in runs:
                it = whole // tp
                for _ in range(count):
                    p, v = device(rows * it)
                    v[:] = 0xEE
                    bufs.append(v.reshape(rows, it))
                    ps.append(p)
                    ls.append(rows * it)
                    its.append(it)
            self.state.append(bufs)
            self.sptrs.append(ps)
            self.slens.append(ls)
            self.sitems.append(its)

    def fill_args(self, a):
        a.kv_data_ptrs, a.kv_data_lens = self.ptrs, self.lens
        a.kv_item_lens = self.items
        a.state_types = [StateType.MAMBA, StateType.SWA]
        a.state_data_ptrs, a.state_data_lens = self.sptrs, self.slens
        a.state_item_lens = self.sitems
        a.state_dim_per_tensor = [[0] * len(x) for x in self.sptrs]


def full_state():
    """Every whole row of every state buffer (the forward pass's state,
    the same in every process: seeded), by (type, buffer)."""
    rng = np.random.default_rng(5)
    return {(t, i): rng.integers(0, 256, (rows, whole), dtype=np.uint8)
            for t, runs in enumerate((MAMBA, SWA))
            for i, (rows, whole) in enumerate(
                (r, w) for r, w, c in runs for _ in range(c))}


def state_indices(slot, swa, room):
    """A request's state_indices as SGLang builds them, a list per state
    type (send_kv_chunk's _mamba_payload: the slot as a one-element list of
    an array; _swa_payload: page indices); [] without state types."""
    if MEM != "sglang":
        return []
    return [[np.array(slot[room])], np.array(swa[room], np.int64)]


PTP, DTP = (int(x) for x in os.environ.get("KVW_HARNESS_TP", "1,1")
            .split(","))
P = DisaggregationMode.PREFILL
D = DisaggregationMode.DECODE


def server(mode, tp):
    return server_args.parser().parse_args(
        ["--tp-size", str(tp), "--disaggregation-mode", mode,
         "--disaggregation-transfer-backend", "kvwire"])


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


def full_kv(args, k0):
    """Every head of every page of each (layer, K/V): the forward pass's
    output, the same in every process (seeded); k0 a rank's layer 0."""
    rng = np.random.default_rng(3)
    shape = k0.shape
    heads = args.total_kv_head_num
    return {(layer, kv): rng.standard_normal(
        shape[:2] + (heads,) + shape[3:]).astype(k0.dtype)
        for layer in range(args.num_layers) for kv in (0, 1)}


def kv_views(m, mem):
    """A rank's K and V of each layer: SGLang's buffers, or the pool's."""
    if mem is not None:
        return mem.k, mem.v
    n = m.kw.kv_args.num_layers
    return [m.kw.pool.k(x) for x in range(n)], \
        [m.kw.pool.v(x) for x in range(n)]


def state_part(rows, rank, b):
    """This rank's part of whole state rows (the columns its buffer b
    holds: part `rank` of a row split over TP)."""
    n = b.shape[1]
    return rows[:, rank * n:(rank + 1) * n]


def prefill(me, backend):
    meta = MetadataBuffers(8)
    mem = SGLangMemory("prefill", me.rank, PTP) if MEM == "sglang" else None
    m = get_kv_class(backend, KVClassType.MANAGER)(
        kv_args(meta, me.rank, mem), P, server("prefill", PTP), False)
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
    # state_indices None, the last one a list per state type (its Mamba
    # slot and SWA pages; [] with no state type). 1003 is aborted by its
    # decode first.
    a = m.kw.kv_args
    k, v = kv_views(m, mem)
    full = full_kv(a, k[0])
    h = a.total_kv_head_num // PTP
    mine = slice(me.rank * h, (me.rank + 1) * h)
    for layer in range(a.num_layers):
        k[layer][...] = full[layer, 0][:, :, mine]
        v[layer][...] = full[layer, 1][:, :, mine]
    if mem is not None:
        for (t, i), rows in full_state().items():
            b = mem.state[t][i]
            b[...] = state_part(rows, me.rank, b)
    me.done()  # the decode aborted 1003
    for room in DONE:
        meta.set_buf(PAUX[room], token=room % 97, seed=room)
        ids = np.array(SRC[room], np.int32)
        assert send[room].should_send_kv_chunk(1, False)
        send[room].send(ids[:1], None)  # a chunk
        # the last one, as newer SGLang calls it (its tokens: a partial
        # last page)
        assert send[room].should_send_kv_chunk(len(ids) - 1, True)
        send[room].send(ids[1:], state_indices(SSLOT, SSWA, room),
                        num_kv_tokens=2 * len(ids) - 1)
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
    mem = SGLangMemory("decode", me.rank, DTP) if MEM == "sglang" else None
    m = get_kv_class(backend, KVClassType.MANAGER)(
        kv_args(meta, me.rank, mem), D, server("decode", DTP), False)
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
                                 AUX[room],
                                 state_indices(DSLOT, DSWA, room),
                                 decode_prefix_len=0)
    me.done("decode_pop_preallocated")
    me.done("prefill_pop_bootstrapped")
    recv[1003].abort()
    me.done()  # before the prefill's chunks
    me.done("prefill_send_kv_chunks")

    # The transfer queue: poll_and_all_reduce, then each rank's heads and
    # the metadata gate (each decode rank reads its own buffers' row).
    me.until([recv[x] for x in DONE], [KVPoll.Success] * 2)
    a = m.kw.kv_args
    k, v = kv_views(m, mem)
    full = full_kv(a, k[0])
    h = a.total_kv_head_num // DTP
    sent = MetadataBuffers(8)  # the prefill's rows, as it set them
    if mem is not None:
        check_state(mem, me.rank)
    for room in DONE:
        for layer in range(a.num_layers):
            for kv, t in ((0, k[layer]), (1, v[layer])):
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


def check_state(mem, rank):
    """The decode rank's part of each state row its requests named holds
    the prefill's row of that request (every prefill rank's part of it);
    no other row changed (the aborted 1003's neither)."""
    for (t, i), rows in full_state().items():
        b = mem.state[t][i]
        part = state_part(rows, rank, b)
        moved = {}
        for room in DONE:
            moved.update({DSLOT[room]: SSLOT[room]} if t == 0 else
                         dict(zip(DSWA[room], SSWA[room])))
        for dst, src in moved.items():
            assert (b[dst] == part[src]).all(), (rank, t, i, dst)
        assert (np.delete(b, list(moved), axis=0) == 0xEE).all(), (t, i)


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
    """A rank process: its scheduler's calls (ranks.rank_body)."""
    rank_body(lambda: role(me, backend), [me.router, me.gloo.bar])


backend = TransferBackend(server("prefill", PTP)
                          .disaggregation_transfer_backend)
step("load_plugins")
ctx = multiprocessing.get_context("fork")  # before any kvwire object
router = ctx.Barrier(PTP + DTP)
gloo = {P: Group(ctx, PTP), D: Group(ctx, DTP)}
run_ranks([ctx.Process(target=rank_main,
                       args=(role, Rank(mode, r, gloo[mode], router),
                             backend))
           for mode, tp, role in ((P, PTP, prefill), (D, DTP, decode))
           for r in range(tp)])
print("harness: ok")
sys.exit(0)
