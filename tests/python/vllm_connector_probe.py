"""vllm_connector_probe.py - run by test_vllm_connector.py in a fresh
interpreter whose path holds tests/python/vllm_pinned (vLLM's connector
base) and kvwire. Replays what vLLM does with a KV connector on a
prefill (kv_producer) and a decode (kv_consumer), each with a
scheduler-side and a worker-side instance, on the live group of
$KVW_RUN_DIR (--kv-layout vllm), vLLM's KV tensors where $KVW_VLLM_KV
says (the pool's views, host memory of their own, the GPU). The order is
the base module's description (scheduler: request_finished / get_num_new_matched_tokens,
update_state_after_alloc, build_connector_meta; worker: register_kv_caches
once, then per step bind_connector_metadata, start_load_kv,
wait_for_save, get_finished, get_block_ids_with_load_errors,
clear_connector_metadata). Prints "vllm: ok" at the end."""
import ctypes
import os
import sys
import time
import types

import numpy as np

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

from kvwire.adapters.vllm import KvwireConnector

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


def request(rid, params=None, tokens=8):
    return types.SimpleNamespace(request_id=rid, kv_transfer_params=params,
                                 prompt_token_ids=list(range(tokens)))


def step(worker, meta, finished=()):
    """One engine step of a worker: what the model runner calls."""
    worker.bind_connector_metadata(meta)
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
p_kv = engine_tensors(p_work, WHERE)
d_kv = engine_tensors(d_work, "gpu" if WHERE == "gpu" else "pool")
p_work.register_kv_caches(p_kv)
d_work.register_kv_caches(d_kv)
assert len(p_kv) == 2 and all(t.shape[0] == 2 for t in p_kv.values())
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
    assert (d_kv[name][:, [6, 1]] == t[:, [3, 4]]).all(), name
    # Nothing else of the decode's cache was written (r2 failed).
    rest = [b for b in range(t.shape[1]) if b not in (6, 1)]
    if WHERE == "gpu":
        assert (d_kv[name][:, rest].view(np.uint8) == 0xEE).all(), name
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
