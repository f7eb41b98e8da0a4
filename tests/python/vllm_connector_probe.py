"""vllm_connector_probe.py - run by test_vllm_connector.py in a fresh
interpreter whose path holds tests/python/vllm_pinned (vLLM's connector
base) and kvwire. Replays what vLLM does with a KV connector on a
prefill (kv_producer) and a decode (kv_consumer), each with a
scheduler-side and a worker-side instance, on the live group of
$KVW_RUN_DIR (--kv-layout vllm): the order is the base module's
description (scheduler: request_finished / get_num_new_matched_tokens,
update_state_after_alloc, build_connector_meta; worker: register_kv_caches
once, then per step bind_connector_metadata, start_load_kv,
wait_for_save, get_finished, get_block_ids_with_load_errors,
clear_connector_metadata). Prints "vllm: ok" at the end."""
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


p_sched, p_work = pair("kv_producer")
d_sched, d_work = pair("kv_consumer")
p_kv, d_kv = p_work.pool_tensors(), d_work.pool_tensors()
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

# Tensors that are not the pool's views are refused.
try:
    d_work.register_kv_caches({k: v.copy() for k, v in d_kv.items()})
    raise AssertionError("a copy of the pool was taken for the pool")
except RuntimeError as e:
    assert "pool_tensors()" in str(e), e
for c in (p_sched, p_work, d_sched, d_work):
    c.shutdown()
print("vllm: ok")
sys.exit(0)
