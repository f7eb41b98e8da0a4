"""vllm_connector_probe.py - run by test_vllm_connector.py in a fresh
interpreter whose path holds tests/python/vllm_pinned (vLLM's connector
base) and kvwire. Replays what vLLM does with a KV connector on a
prefill (kv_producer) and a decode (kv_consumer), each with a
scheduler-side and a worker-side instance, on the live group of
$KVW_RUN_DIR (--kv-layout vllm or vllm-blocks), vLLM's KV tensors where $KVW_VLLM_KV
says (the pool's views, host memory of their own, the GPU). The order is
the base module's description (scheduler: request_finished / get_num_new_matched_tokens,
update_state_after_alloc, build_connector_meta; worker: register_kv_caches
once, then per step bind_connector_metadata, start_load_kv,
wait_for_save, get_finished, get_block_ids_with_load_errors,
clear_connector_metadata). Prints "vllm: ok" at the end."""
import ctypes
import os
import pickle
import sys
import time
import types

import numpy as np

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

from kvwire.adapters.vllm import KvwireConnector
from kvwire.conn import KVPoll
from kept import Kept

RUN = os.environ["KVW_RUN_DIR"]


def config(role):
    return types.SimpleNamespace(
        kv_transfer_config=types.SimpleNamespace(
            kv_role=role, kv_connector_extra_config={"run_dir": RUN}),
        parallel_config=types.SimpleNamespace(rank=0,
                                              tensor_parallel_size=1))


def pair(role):
    c = config(role)
    return (KvwireConnector(c, KVConnectorRole.SCHEDULER, None),
            KvwireConnector(c, KVConnectorRole.WORKER, None))


def request(rid, params=None, tokens=8, status="FINISHED_LENGTH_CAPPED"):
    """A vLLM Request as a connector reads it; status: how it ended (a
    prefill ends FINISHED_LENGTH_CAPPED, the router's max_tokens=1)."""
    return types.SimpleNamespace(request_id=rid, kv_transfer_params=params,
                                 prompt_token_ids=list(range(tokens)),
                                 status=status)


def blocks_of(ids):
    return types.SimpleNamespace(get_block_ids=lambda: (list(ids),))


def step(worker, meta, finished=()):
    """One engine step of a worker: what the model runner calls."""
    # Pickled, as vLLM's executor hands it to worker processes.
    worker.bind_connector_metadata(pickle.loads(pickle.dumps(meta)))
    worker.start_load_kv(None)
    worker.wait_for_save()
    done = worker.get_finished(set(finished))
    errors = worker.get_block_ids_with_load_errors()
    worker.clear_connector_metadata()
    return done, errors


# Where vLLM's KV cache lives ($KVW_VLLM_KV): "pool", the connector's
# pool_tensors() on both sides; "host", the prefill's tensors over memory
# from its manager's alloc(), one allocation per layer, and the decode's
# the pool's views (so a K/V mix-up of the in-place registration shows
# against the layout kvwire knows); "gpu", one cudaMalloc per layer on the
# (stand-in, $KVW_CUDART) GPU on both sides.
WHERE = os.environ.get("KVW_VLLM_KV", "pool")


def pick(t, ids):
    """Blocks ids (a list, or one index: then a view to write through) of
    a layer's tensor: [2, blocks, ...] (--kv-layout vllm) or [blocks, 2,
    ...] (vllm-blocks, the block-major layout)."""
    return t[ids] if BLOCK_MAJOR else t[:, ids]


def engine_tensors(work, where):
    """The rank's per-layer KV tensors where `where` puts them, shaped as
    pool_tensors() shapes them; in memory of their own, every byte 0xEE."""
    pool = work.pool_tensors()
    if where == "pool":
        return pool
    out = {}
    for name, w in pool.items():
        if where == "host":
            mem = work._manager().alloc(w.nbytes)
        else:
            cuda = ctypes.CDLL(os.environ["KVW_CUDART"])
            ptr = ctypes.c_void_p()
            assert cuda.cudaMalloc(ctypes.byref(ptr),
                                   ctypes.c_size_t(w.nbytes)) == 0
            # The stand-in's device memory is host memory: read and
            # written here as vLLM's kernels would.
            mem = np.ctypeslib.as_array(
                (ctypes.c_uint8 * w.nbytes).from_address(ptr.value))
        mem[:] = 0xEE
        out[name] = mem.view(w.dtype).reshape(w.shape)
    return out


p_sched, p_work = pair("kv_producer")
d_sched, d_work = pair("kv_consumer")
BLOCK_MAJOR = p_work.args.shape.kv_layout == "vllm-blocks"
p_work.rooms = Kept()
p_kv = engine_tensors(p_work, WHERE)
d_kv = engine_tensors(d_work, "gpu" if WHERE == "gpu" else "pool")
p_work.register_kv_caches(p_kv)
d_work.register_kv_caches(d_kv)
assert len(p_kv) == 2 and \
    all(t.shape[1 if BLOCK_MAJOR else 0] == 2 for t in p_kv.values())
rng = np.random.default_rng(7)
for t in p_kv.values():
    t[...] = rng.standard_normal(t.shape).astype(t.dtype)

# r1 moves prefill blocks [3, 4] into decode blocks [6, 1]; r2's decode
# allocated three blocks for a prefill that sends two: kvwire fails it.
sent_ok, p2 = {}, {}
for rid, blocks in (("r1", [3, 4]), ("r2", [5, 2])):
    freed, params = p_sched.request_finished(request(rid), blocks)
    assert freed is True and params["kvwire_room"] > 0
    sent_ok[rid] = params
d_want = {"r1": [6, 1], "r2": [7, 0, 2]}
for rid, ids in d_want.items():
    r = request(rid, sent_ok[rid])
    n, load_async = d_sched.get_num_new_matched_tokens(r, 0)
    assert (n, load_async) == (8, True)
    d_sched.update_state_after_alloc(
        r, types.SimpleNamespace(get_block_ids=lambda ids=ids: (ids,)), n)
assert d_sched.get_num_new_matched_tokens(request("x"), 0) == (0, False)
p_meta = p_sched.build_connector_meta(None)
d_meta = d_sched.build_connector_meta(None)
sent, recvd, errors = set(), set(), set()
deadline = time.monotonic() + 60
while sent != {"r1", "r2"} or recvd != {"r1", "r2"}:
    assert time.monotonic() < deadline, (sent, recvd)
    (s, _), _ = step(p_work, p_meta, {"r1", "r2"})
    (_, r), e = step(d_work, d_meta)
    p_meta = p_sched.build_connector_meta(None)
    d_meta = d_sched.build_connector_meta(None)
    sent |= s or set()
    recvd |= r or set()
    errors |= e
    time.sleep(0.001)
for name, t in p_kv.items():
    assert (pick(d_kv[name], [6, 1]) == pick(t, [3, 4])).all(), name
    # Nothing else of the decode's cache was written (r2 failed).
    rest = [b for b in range(t.shape[0 if BLOCK_MAJOR else 1])
            if b not in (6, 1)]
    if WHERE == "gpu":
        assert (pick(d_kv[name], rest).view(np.uint8) == 0xEE).all(), \
            name
if WHERE == "gpu":
    # The blocks went into vLLM's tensors, none into kvwire's pool file.
    a = d_work._manager().kv_args
    raw = np.fromfile(a.pool_path, np.uint8)
    assert not raw[:sum(a.kv_data_lens)].any()
assert errors == {7, 0, 2}, errors  # r2's blocks: vLLM recomputes them
assert not p_work.rooms and not d_work.rooms
assert sorted(p_work.free_aux) == list(range(p_work.args.aux_slots))

# A send is reported only once vLLM named the request finished.
_, params = p_sched.request_finished(request("r3"), [1])
r = request("r3", params, tokens=4)
d_sched.update_state_after_alloc(
    r, types.SimpleNamespace(get_block_ids=lambda: ([5],)), 4)
p_meta = p_sched.build_connector_meta(None)
d_meta = d_sched.build_connector_meta(None)
recvd = set()
while recvd != {"r3"}:
    assert time.monotonic() < deadline
    (s, _), _ = step(p_work, p_meta)
    assert s is None, s
    (_, r), _ = step(d_work, d_meta)
    recvd |= r or set()
    p_meta = p_sched.build_connector_meta(None)
    d_meta = d_sched.build_connector_meta(None)
while p_work.rooms:  # over on the prefill too, but not named finished
    assert time.monotonic() < deadline
    (s, _), _ = step(p_work, p_meta)
    assert s is None, s
    p_meta = p_sched.build_connector_meta(None)
(s, _), _ = step(p_work, p_meta, {"r3"})
assert s == {"r3"}, s

# Aborts as vLLM's scheduler makes them (vLLM at 003df2961dd8, the v1
# Scheduler's finish_requests, _free_request and
# _update_from_kv_xfer_finished).
# A prefill request that ends aborted hands nothing over: its blocks go.
aborted = request("a1", status="FINISHED_ABORTED")
assert p_sched.request_finished(aborted, [2]) == (False, None)
assert not p_sched.build_connector_meta(None).sends


def until(want, p_meta=None, d_meta=None, finished=()):
    """Steps the prefill and the decode worker (the prefill only with
    p_meta) until `want` returns true; (prefill sent, decode loaded)."""
    sent, recvd = set(), set()
    while not want(sent, recvd):
        assert time.monotonic() < deadline, (sent, recvd)
        if p_meta is not None:
            (s, _), _ = step(p_work, p_meta, finished)
            sent |= s or set()
            p_meta = p_sched.build_connector_meta(None)
        (_, r), e = step(d_work, d_meta or d_sched.build_connector_meta(None),
                         finished)
        assert not e, e  # an aborted load is no load error
        recvd |= r or set()
        d_meta = None
        time.sleep(0.001)
    return sent, recvd


# A decode request aborted while its block loads: vLLM keeps the block
# until the id comes back finished receiving. The worker aborts the room
# and reports it once no byte can land; the prefill, which had not begun
# its send, fails its room (aborted by the decode) and frees its blocks;
# the decode's block, reused at once, stays as vLLM wrote it.
deadline = time.monotonic() + 60
_, params = p_sched.request_finished(request("a2"), [3])
r = request("a2", params, tokens=4)
assert d_sched.get_num_new_matched_tokens(r, 0) == (4, True)
d_sched.update_state_after_alloc(r, blocks_of([4]), 4)
assert d_sched.get_num_new_matched_tokens(r, 0) == (0, False)  # spent
step(d_work, d_sched.build_connector_meta(None))  # the load begins
r.status = "FINISHED_ABORTED"
assert d_sched.request_finished(r, [4]) == (False, None)
until(lambda s, r: "a2" in r, finished={"a2"})
for t in d_kv.values():
    pick(t, 4)[...] = rng.standard_normal(
        pick(t, 4).shape).astype(t.dtype)
keep = {n: pick(t, 4).copy() for n, t in d_kv.items()}
p_meta = p_sched.build_connector_meta(None)
step(p_work, p_meta)  # the prefill begins its send: the decode aborted
x = p_work.rooms.ever["a2"]
until(lambda s, r: "a2" in s, p_meta=p_sched.build_connector_meta(None),
      finished={"a2"})
assert x.conclude_state == KVPoll.Failed, x.conclude_state
assert "abort" in (x.failure_reason or ""), x.failure_reason
for n, t in d_kv.items():
    assert (pick(t, 4) == keep[n]).all(), n

# A decode request aborted before vLLM gave it blocks: its prefill,
# waiting for the decode with its blocks held, hears of it (a room of no
# pages, aborted at once) and frees them, instead of waiting for its
# bootstrap timeout; vLLM never hears of the room on the decode.
_, params = p_sched.request_finished(request("a3"), [3])
p_meta = p_sched.build_connector_meta(None)
step(p_work, p_meta, {"a3"})
x = p_work.rooms.ever["a3"]
gone = request("a3", params, status="FINISHED_ABORTED")
assert d_sched.request_finished(gone, []) == (False, None)
sent, recvd = until(lambda s, r: "a3" in s,
                    p_meta=p_sched.build_connector_meta(None),
                    d_meta=d_sched.build_connector_meta(None),
                    finished={"a3"})
assert x.conclude_state == KVPoll.Failed, x.conclude_state
until(lambda s, r: not d_work.rooms)
assert not recvd, recvd
assert sorted(d_work.free_aux) == list(range(d_work.args.aux_slots))

# Telling the prefill takes no aux row: with none free the worker still
# tells it, never raising into vLLM for a request vLLM has dropped, and
# once settled the room is gone, no row lent or given back.
kept, d_work.free_aux = d_work.free_aux, []
gone = request("a4", dict(params, kvwire_room=params["kvwire_room"] + 1),
               status="FINISHED_ABORTED")
assert d_sched.request_finished(gone, []) == (False, None)
until(lambda s, r: not d_work.rooms,
      d_meta=d_sched.build_connector_meta(None), finished={"a4"})
assert not d_work.rooms and not d_work.notify
assert d_work.free_aux == [], d_work.free_aux
d_work.free_aux = kept

# Host tensors kvwire cannot reach (numpy's own memory, not the manager's
# alloc()) are refused, saying how to allocate; in place here on the host
# they would be none of the group's processes' memory.
if WHERE != "gpu":
    try:
        d_work.register_kv_caches({k: v.copy() for k, v in d_kv.items()})
        raise AssertionError("numpy's memory was registered")
    except RuntimeError as e:
        for want in ("did not allocate", "alloc()", "pool_tensors()"):
            assert want in str(e), e
for c in (p_sched, p_work, d_sched, d_work):
    c.shutdown()
print("vllm: ok")
sys.exit(0)
