"""vllm_model_probe.py - the numpy transformer of examples/pd_model.py
served through vLLM's engine loop with kvwire's KvwireConnector (issue 33
item 3): run by test_vllm_connector.py in a fresh interpreter whose path
holds tests/python/vllm_pinned and kvwire, $KVW_RUN_DIR a live group of
prefill and decode TP $KVW_HARNESS_TP ("P,D"), --kv-layout vllm, of the
model's shape.

The loop is vLLM's as vllm_connector_probe.py replays it (a scheduler-side
connector per engine, a worker-side connector per TP rank; per step:
build_connector_meta, then on every worker bind_connector_metadata,
start_load_kv, the forward, wait_for_save, get_finished,
get_block_ids_with_load_errors, clear_connector_metadata; a request is
sent or loaded once every worker says so). The engines' work is the
model, its KV in vLLM's per-layer [2, blocks, block_size, heads, dim]
tensors: the prefill computes the prompt in chunks of two blocks, then
request_finished hands the router kv_transfer_params and keeps the
blocks until the send is over; the decode loads the prompt's blocks,
recomputes the last prompt token for its logits (as vLLM's scheduler does
for a prompt it holds whole) and generates greedily. Requests:
  ok       a plain request;
  preempt  preempted by the decode after two generated tokens (blocks
           freed, handed to the next request), resumed by recomputing;
  abort    aborted by the decode while its blocks load (the next request
           gets its blocks once every worker reported it settled);
  killed   the last prefill rank's kv-sender is SIGKILLed once the
           prefill workers began the send and before the decode asked for
           it: the prefill's send fails (its owner restarted), the decode's
           load fails, get_block_ids_with_load_errors names its blocks and
           the decode recomputes them (vLLM's recompute policy), so the
           request still gives the one-process run's output;
  after    a request after kv-up restarted that member.
Every request must give the one-process run's tokens, logits within 1e-4.
Each outcome is a "step" line; the last line is "vllm model: ok".

As vLLM runs them, each engine's workers are processes of their own, one
per TP rank (forked before any kvwire object exists), each with its
worker-side connector, its KV tensors and its heads; here the engines'
schedulers (and their scheduler-side connectors) share the main process,
which hands every worker its step (the connector metadata, pickled, as
vLLM's executor does) and its forward passes over a pipe. An engine's
workers meet in a group of their own for the model's all-reduce
(pd_model.RankCaches), so every worker computes the same logits."""
import multiprocessing
import pickle
import sys
import time
import types

import numpy as np

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

from kvwire.adapters.vllm import KvwireConnector
from kvwire.conn import KVPoll
from kept import Kept
from model_harness import (CFG, DEADLINE, DTP, MODEL, PT, PTP, RUN,
                           Blocks, Reference, kill_prefill_member, pd_model,
                           peer_rows, step, wait_restart_seen)
from ranks import WAIT, Group, rank_body

FLOATS = 64 * CFG.hidden  # a forward's rows


def config(role, rank, tp):
    return types.SimpleNamespace(
        kv_transfer_config=types.SimpleNamespace(
            kv_role=role, kv_connector_extra_config={"run_dir": RUN}),
        parallel_config=types.SimpleNamespace(rank=rank,
                                              tensor_parallel_size=tp))


class LayerKV:
    """A worker's KV as pd_model's caches read it: vLLM's per-layer
    tensor, K in [0] and V in [1] ([2, blocks, ...]), or in [:, 0] and
    [:, 1] with the block-major layout ([blocks, 2, ...])."""

    def __init__(self, tensors, block_major):
        self.t = list(tensors.values())
        self.half = (lambda t, i: t[:, i]) if block_major else \
            (lambda t, i: t[i])

    def k(self, li):
        return self.half(self.t[li], 0)

    def v(self, li):
        return self.half(self.t[li], 1)


def worker(role, tp, rank, group, pipe):
    """A worker process: its worker-side connector and KV tensors; runs
    what the main process hands it, one command at a time, and answers
    each: ("step", metadata, finished) -> (sent, loaded, load errors);
    ("forward", tokens, pos, blocks) -> the logits of the last token, the
    attention all-reduced with the engine's other workers; ("room", id)
    -> (conclude_state, failure_reason) of a room it held; ("table",) ->
    its room table's path; ("shutdown",) -> None, and it exits."""
    w = KvwireConnector(config(role, rank, tp), KVConnectorRole.WORKER,
                        None)
    w.rooms = Kept()
    t = w.pool_tensors()
    w.register_kv_caches(t)  # once, before the first step
    kv = LayerKV(t, w.args.shape.kv_layout == "vllm-blocks")
    while True:
        cmd = pipe.recv()
        if cmd[0] == "step":
            w.bind_connector_metadata(pickle.loads(cmd[1]))
            w.start_load_kv(None)
            w.wait_for_save()
            s, r = w.get_finished(set(cmd[2]))
            errors = w.get_block_ids_with_load_errors()
            w.clear_connector_metadata()
            pipe.send((s, r, errors))
        elif cmd[0] == "forward":
            tokens, pos, blocks = cmd[1:]
            caches = pd_model.RankCaches(tp, rank, pd_model.PagedCache(
                kv, blocks, PT), group)
            pipe.send(MODEL.logits(MODEL.layers(
                MODEL.embed[tokens], pos, 0, CFG.layers, caches, tp)))
        elif cmd[0] == "room":
            x = w.rooms.ever[cmd[1]]
            pipe.send((x.conclude_state, x.failure_reason))
        elif cmd[0] == "table":
            pipe.send(w._manager().kv_args.table_path)
        else:
            w.shutdown()
            pipe.send(None)
            return


class Workers:
    """One engine's worker processes, driven from the main process."""

    def __init__(self, ctx, role, tp):
        self.tp, self.pipes, self.procs = tp, [], []
        group = Group(ctx, tp, FLOATS)
        for r in range(tp):
            mine, theirs = ctx.Pipe()
            self.pipes.append(mine)
            # daemon: a failure in the main process ends them with it
            self.procs.append(ctx.Process(target=rank_body, daemon=True,
                                          args=(lambda r=r, theirs=theirs:
                                                worker(role, tp, r, group,
                                                       theirs),
                                                [group.bar])))
        for p in self.procs:
            p.start()

    def call(self, *cmd):
        """cmd to every worker (all at once: a forward meets in the
        all-reduce), then each worker's answer, rank 0 first."""
        for p in self.pipes:
            p.send(cmd)
        out = []
        for p, proc in zip(self.pipes, self.procs):
            while not p.poll(0.1):
                assert proc.is_alive(), "worker exited %s" % proc.exitcode
                assert time.monotonic() < DEADLINE, cmd[0]
            out.append(p.recv())
        return out

    def stop(self):
        self.call("shutdown")
        for p in self.procs:
            p.join(WAIT)
        assert [p.exitcode for p in self.procs] == [0] * self.tp


class Engine:
    """One vLLM instance: its scheduler-side connector, its workers (a
    process per TP rank), a block pool."""

    def __init__(self, role, workers, order):
        self.tp = workers.tp
        self.sched = KvwireConnector(config(role, 0, self.tp),
                                     KVConnectorRole.SCHEDULER, None)
        self.workers = workers
        self.blocks = Blocks(64, order)
        self.reported = {}  # req id -> workers that reported it, per kind

    def caches(self, blocks):
        """The forward of tokens at pos over blocks in the workers: the
        logits of the last token, the same on every worker."""
        def forward(tokens, pos):
            logits = self.workers.call("forward", np.asarray(tokens),
                                       np.asarray(pos), list(blocks))
            assert all(np.array_equal(x, logits[0]) for x in logits)
            return logits[0]
        return forward

    def step(self, finished=()):
        """One engine step of every worker; (sent, loaded, load errors):
        the request ids every worker reported, as vLLM's scheduler
        aggregates them across TP ranks."""
        meta = pickle.dumps(self.sched.build_connector_meta(None))
        out = {"sent": set(), "loaded": set()}
        errors = set()
        for i, (s, r, e) in enumerate(self.workers.call("step", meta,
                                                        list(finished))):
            errors |= e
            for kind, ids in (("sent", s), ("loaded", r)):
                for rid in ids or ():
                    seen = self.reported.setdefault((kind, rid), set())
                    seen.add(i)
                    if len(seen) == self.tp:
                        out[kind].add(rid)
                        del self.reported[(kind, rid)]
        return out["sent"], out["loaded"], errors


class Request(Reference):
    def __init__(self, rid, fate, prompt_len):
        Reference.__init__(self, len(rid) * 1000 + prompt_len, prompt_len)
        self.rid, self.fate = rid, fate
        self.n_blocks = self.n_pages
        self.outcome = None
        self.recomputed = False

    def r(self, status="FINISHED_LENGTH_CAPPED"):
        """The request as a connector reads it; status: how it ended (a
        prefill's ends FINISHED_LENGTH_CAPPED: the router's max_tokens=1)."""
        return types.SimpleNamespace(request_id=self.rid,
                                     prompt_token_ids=list(self.prompt),
                                     kv_transfer_params=getattr(
                                         self, "params", None),
                                     status=status)

    # ---- prefill (max_tokens=1: the prompt, then request_finished) ----
    def prefill(self):
        self.p_blocks = P.blocks.alloc(self.n_blocks)
        forward = P.caches(self.p_blocks)
        for lo in range(0, len(self.prompt), 2 * PT):  # chunked prefill
            hi = min(lo + 2 * PT, len(self.prompt))
            forward(self.prompt[lo:hi], np.arange(lo, hi))
            P.step()
        free, self.params = P.sched.request_finished(self.r(), self.p_blocks)
        assert free is True and "kvwire_room" in self.params

    # ---- decode ----
    def load(self):
        n, load_async = D.sched.get_num_new_matched_tokens(self.r(), 0)
        assert (n, load_async) == (len(self.prompt), True)
        self.d_blocks = D.blocks.alloc(self.n_blocks)
        D.sched.update_state_after_alloc(
            self.r(), types.SimpleNamespace(
                get_block_ids=lambda: (list(self.d_blocks),)), n)

    def loaded(self, failed_blocks):
        """vLLM's scheduler: the prompt is held whole but its last token,
        which is computed again for the logits; blocks that failed to load
        are computed again from the first of them (recompute policy)."""
        bad = [i for i, b in enumerate(self.d_blocks) if b in failed_blocks]
        start = bad[0] * PT if bad else len(self.prompt) - 1
        self.recomputed = bool(bad)
        self.d_caches = D.caches(self.d_blocks)
        self.logits = [self.forward(self.d_caches, self.prompt[start:],
                                    np.arange(start, len(self.prompt)))]
        self.toks = [int(np.argmax(self.logits[0]))]

    def decode(self):
        return self.decode_step(self.d_blocks, D.blocks, self.d_caches)

    def abort(self):
        """The client went away while the blocks load: vLLM's
        finish_requests keeps them until the id comes back finished
        receiving."""
        gone = self.r("FINISHED_ABORTED")
        assert D.sched.request_finished(gone, self.d_blocks) == (False, None)

    def preempt(self):
        D.blocks.release(self.d_blocks)
        self.freed, self.d_blocks = self.d_blocks, None

    def resume(self):
        self.d_blocks, self.d_caches = self.recompute(D.blocks, D.caches)

    def finish(self):
        D.blocks.release(self.d_blocks)
        self.outcome = self.equal(self.toks, self.logits) + (
            " (load failed: recomputed)" if self.recomputed else "")


def serve(wave, resumed=()):
    """Prefill every request of the wave, then the decode loop until every
    request (and every resumed one) is done; the prefill keeps stepping
    until its sends are over and it freed their blocks."""
    for q in wave:
        q.prefill()
    for q in wave:
        q.load()
    sending = {q.rid: q for q in wave}
    loading = {q.rid: q for q in wave}
    running, preempted = [], list(resumed)
    while sending or loading or running or preempted:
        assert time.monotonic() < DEADLINE, (list(sending), list(loading))
        sent, _, _ = P.step(finished=list(sending))
        for rid in sent:
            P.blocks.release(sending.pop(rid).p_blocks)
        _, loaded, errors = D.step()
        for rid in loaded:
            q = loading.pop(rid)
            q.loaded(errors)
            running.append(q)
        for q in list(running):
            if q.decode():
                q.finish()
                running.remove(q)
            elif q.fate == "preempt" and q.d_blocks and len(q.toks) == 3 \
                    and not hasattr(q, "freed"):
                q.preempt()
                running.remove(q)
                q.outcome = "preempted"  # resumed with the next wave
        if preempted and not loading:
            for q in preempted:
                q.resume()
                running.append(q)
            preempted = []
        time.sleep(0.0005)


ctx = multiprocessing.get_context("fork")  # before any kvwire object
p_workers = Workers(ctx, "kv_producer", PTP)
d_workers = Workers(ctx, "kv_consumer", DTP)
P = Engine("kv_producer", p_workers, None)
D = Engine("kv_consumer", d_workers, range(63, -1, -1))
step("engines")
ok, pre = Request("a", "ok", 23), Request("bb", "preempt", 17)
serve([ok, pre])
assert pre.outcome == "preempted"
step("request %s (ok): %s" % (ok.rid, ok.outcome))
second = Request("ccc", "ok", 19)
serve([second], resumed=[pre])
assert set(pre.freed) & set(second.d_blocks), "the freed blocks went elsewhere"
step("request %s (ok): %s" % (second.rid, second.outcome))
step("request %s (preempt): %s" % (pre.rid, pre.outcome))
# An aborted request: the decode aborts it while its blocks load. Every
# decode worker aborts its room and reports the id only once no byte of
# it can land; vLLM frees the blocks then, and the next request gets them.
# The prefill had not begun its send: its room fails (aborted by the
# decode) and its blocks go. The next request's output is the one-process
# run's (a late byte of the aborted room in its blocks would show).
ab = Request("ffffff", "abort", 20)
ab.prefill()
ab.load()
D.step()  # every decode worker begins the load
ab.abort()
done = set()
while ab.rid not in done:
    assert time.monotonic() < DEADLINE, "the aborted load never settled"
    _, loaded, errors = D.step(finished=[ab.rid])
    assert not errors, errors  # an abort is no load error
    done |= loaded
    time.sleep(0.0005)
D.blocks.release(ab.d_blocks)
P.step()  # every prefill worker begins the send the decode aborted
nxt = Request("ggggggg", "ok", 22)
serve([nxt])
assert set(ab.d_blocks) & set(nxt.d_blocks), "the freed blocks went elsewhere"
done = set()
while ab.rid not in done:
    assert time.monotonic() < DEADLINE, "the aborted send never ended"
    sent, _, _ = P.step(finished=[ab.rid])
    done |= sent
    time.sleep(0.0005)
P.blocks.release(ab.p_blocks)
p_rooms = P.workers.call("room", ab.rid)  # every prefill worker's room
for state, why in p_rooms:
    assert state == KVPoll.Failed and "abort" in (why or ""), (state, why)
step("request %s (aborted while loading): prefill failed (%s), blocks "
     "freed once settled" % (ab.rid, p_rooms[0][1]))
step("request %s (ok, in the aborted one's blocks): %s"
     % (nxt.rid, nxt.outcome))
tables = D.workers.call("table")
before = peer_rows(tables)
killed = Request("dddd", "killed", 21)
killed.prefill()
# One engine step: every prefill worker begins the send (SEND_BEGIN under
# the member's present epoch) and has nothing to send yet, the decode not
# having asked. Then the member dies: the prefill's room fails as its
# owner restarted, whenever the new member comes up, and the decode's
# load fails, the prefill having sent nothing.
P.step()
kill_prefill_member()
killed.prefill = lambda: None  # computed already
serve([killed])
assert killed.recomputed, killed.outcome
step("request %s (killed): %s" % (killed.rid, killed.outcome))
wait_restart_seen(tables, before)
after = Request("eeeee", "after", 23)
serve([after])
assert not after.recomputed, after.outcome
step("request %s (after): %s" % (after.rid, after.outcome))
for c in [P.sched, D.sched]:
    c.shutdown()
p_workers.stop()
d_workers.stop()
print("vllm model: ok")
sys.exit(0)
