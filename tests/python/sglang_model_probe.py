"""sglang_model_probe.py - the numpy transformer of examples/pd_model.py
served through SGLang's scheduler loop on kvwire (issue 33 item 3): run
by test_sglang_harness.py in a fresh interpreter whose path holds
tests/python/sglang_pinned, kvwire and the plugin's entry point
(model_harness.py adds examples/ for pd_model), $KVW_RUN_DIR a live group of prefill and decode TP
$KVW_HARNESS_TP ("P,D") of the model's shape.

The loop is the one sglang_harness_probe.py replays call for call
(SGLang's disaggregation/prefill.py and its decode module: bootstrap queue,
chunked prefill with send per chunk, inflight queue; prealloc queue,
transfer queue, metadata gate, running batch, retracted queue), each
queue's poll the MIN over the TP ranks' polls (poll_and_all_reduce), and
the engines' work is the model: the prefill computes the prompt chunk by
chunk into its pool pages and writes the metadata rows (first token, its
logprob, the last hidden state) into SGLang-owned buffers; the decode
reads them, generates greedily from the transferred cache. Requests, in
waves whose outcome does not depend on timing:
  ok       a plain request;
  retract  retracted by the decode after two generated tokens (its pages
           freed and handed to the next wave's request), resumed later by
           recomputing its KV locally, as SGLang does without offload;
  abort    aborted by the decode while its transfer is under way (after
           the prefill's first chunk; the prefill's forward of the last
           lasts until the ABORT reached it): failure on both sides,
           failure_exception() then clear();
  killed   the last prefill rank's member (kv-sender) is killed with
           SIGKILL once the prefill ranks began the room (init) and before
           its first chunk: the prefill's room fails as its owner
           restarted, the decode's as its peer restarted;
  after    a request after kv-up restarted that member: it succeeds.
Every request that succeeds must give the one-process run's tokens, and
logits within 1e-4 (test_model.py says why); the others fail with a
reason. Each outcome is a "step" line; the last line is
"model harness: ok"."""
import sys
import time
import types

import numpy as np

from sglang.srt.plugins import load_plugins

load_plugins()

from sglang.srt import server_args  # noqa: E402
from sglang.srt.disaggregation.base.conn import KVPoll  # noqa: E402
from sglang.srt.disaggregation.utils import (  # noqa: E402
    DisaggregationMode, KVClassType, TransferBackend, get_kv_class,
    poll_and_all_reduce)

from model_harness import (CFG, DEADLINE, DTP, MODEL, PT, PTP,  # noqa: E402
                           Blocks, Reference, kill_prefill_member,
                           member_pid, pd_model, peer_rows, step,
                           wait_restart_seen)

END = (KVPoll.Success, KVPoll.Failed)


class Metadata:
    """SGLang's MetadataBuffers: buffers of the engine's own, one row per
    request (pd_model's three: output ids, logprob, hidden state)."""

    def __init__(self, rows):
        self.aux_buffers = [np.zeros((rows, n), np.uint8)
                            for n in CFG.metadata_bytes()]

    def get_buf_infos(self):
        b = self.aux_buffers
        return ([x.ctypes.data for x in b], [x.nbytes for x in b],
                [x[0].nbytes for x in b])


def server(mode, tp):
    return server_args.parser().parse_args(
        ["--tp-size", str(tp), "--disaggregation-mode", mode,
         "--disaggregation-transfer-backend", "kvwire"])


def manager(mode, tp, rank, meta):
    ptrs, lens, items = meta.get_buf_infos()
    args = types.SimpleNamespace(engine_rank=rank, pp_rank=0, kv_data_ptrs=[],
                                 aux_data_ptrs=ptrs, aux_data_lens=lens,
                                 aux_item_lens=items, state_types=[],
                                 state_data_ptrs=[], ib_device=None, gpu_id=0)
    return Manager(args, mode, server(mode.value, tp), False)


def consensus(rooms_by_rank):
    """poll_and_all_reduce on every rank, then the all-reduce MIN."""
    local = [poll_and_all_reduce(rooms, None) for rooms in rooms_by_rank]
    return [min(col) for col in zip(*local)]


def polled(queue, side):
    """(request, the TP ranks' consensus) for each request of a queue, side
    "snd" (its prefill senders) or "rcv" (its decode receivers); a list of
    its own, so the caller may move requests out of the queue."""
    if not queue:
        return []
    ranks = PTP if side == "snd" else DTP
    return list(zip(queue, consensus(
        [[getattr(q, side)[r] for q in queue] for r in range(ranks)])))


def end_prefills(queue):
    """The prefill's requests of queue whose rooms ended leave it."""
    for q, st in polled(queue, "snd"):
        if st in END:
            q.p_end(st)
            queue.remove(q)


def failed(rooms):
    """SGLang on a failed request: failure_exception() (the reason), then
    clear(); the reasons of all ranks."""
    why = []
    for x in rooms:
        try:
            x.failure_exception()
            raise AssertionError("a failed room raised nothing")
        except AssertionError:
            raise
        except Exception as e:  # SGLang catches its KVTransferError
            why.append(str(e))
        x.clear()
    return why


backend = TransferBackend(server("prefill", PTP)
                          .disaggregation_transfer_backend)
Manager = get_kv_class(backend, KVClassType.MANAGER)
Sender = get_kv_class(backend, KVClassType.SENDER)
Receiver = get_kv_class(backend, KVClassType.RECEIVER)
P, D = DisaggregationMode.PREFILL, DisaggregationMode.DECODE
p_meta = [Metadata(16) for _ in range(PTP)]
d_meta = [Metadata(16) for _ in range(DTP)]
pm = [manager(P, PTP, r, p_meta[r]) for r in range(PTP)]
dm = [manager(D, DTP, r, d_meta[r]) for r in range(DTP)]
ADDR = pm[0].kw.kv_args.bootstrap_addr
p_pages, d_pages = Blocks(64), Blocks(64, range(63, -1, -1))
p_aux, d_aux = list(range(16)), list(range(15, -1, -1))
for m in dm:
    assert m.try_ensure_parallel_info(ADDR)


class Request(Reference):
    def __init__(self, room, fate, prompt_len):
        Reference.__init__(self, room, prompt_len)
        self.room, self.fate = room, fate
        self.outcome = None
        self.retracted = False

    # ---- prefill ----
    def p_add(self):
        self.snd = [Sender(pm[r], ADDR, self.room, list(range(DTP)), 0)
                    for r in range(PTP)]

    def p_init(self):
        self.p_pg = p_pages.alloc(self.n_pages)
        self.p_slot = p_aux.pop()
        for s in self.snd:
            assert s.pop_decode_prefix_len() == 0
            s.init(self.n_pages, self.p_slot)
        self.p_caches = [pd_model.PagedCache(m.kw.pool, self.p_pg, PT)
                         for m in pm]
        self.done_tokens = 0

    def p_chunk(self, chunk_pages=2):
        """One chunk of chunked prefill; True after the last."""
        lo = self.done_tokens
        hi = min(lo + chunk_pages * PT, len(self.prompt))
        pos = np.arange(lo, hi)
        x = MODEL.layers(MODEL.embed[self.prompt[lo:hi]], pos, 0, CFG.layers,
                         self.p_caches, PTP)
        last = hi == len(self.prompt)
        if last:
            logits = MODEL.logits(x)
            for meta in p_meta:  # process_batch_result, every rank
                pd_model.write_metadata(meta, self.p_slot, self.room, x[-1],
                                        logits)
        ids = np.array(self.p_pg[lo // PT:-(-hi // PT)], np.int32)
        for s in self.snd:
            s.send(ids, [])  # state_indices: one list per state type
        self.done_tokens = hi
        return last

    def p_end(self, st):
        """Out of the bootstrap (failed there) or the inflight queue."""
        if st == KVPoll.Failed:
            self.p_why = failed(self.snd)
        else:
            for s in self.snd:
                s.clear()
        if hasattr(self, "p_pg"):
            p_pages.release(self.p_pg)
            p_aux.append(self.p_slot)
            del self.p_caches

    # ---- decode ----
    def d_add(self):
        self.rcv = []
        for r in range(DTP):
            x = Receiver(mgr=dm[r], bootstrap_addr=ADDR,
                         bootstrap_room=self.room, prefill_dp_rank=0)
            x.init(0)
            self.rcv.append(x)

    def d_prealloc(self):
        self.d_pg = d_pages.alloc(self.n_pages)
        self.d_slot = d_aux.pop()
        for x in self.rcv:
            x.send_metadata(np.array(self.d_pg, np.int32), self.d_slot, [],
                            decode_prefix_len=0)

    def d_transferred(self):
        """The metadata gate: every decode rank's row gives the same first
        token and logits."""
        firsts = [pd_model.read_metadata(MODEL, meta, self.d_slot, self.room)
                  for meta in d_meta]
        assert all(t == firsts[0][0] and np.array_equal(lg, firsts[0][1])
                   for t, lg in firsts), self.room
        for x in self.rcv:
            x.clear()
        d_aux.append(self.d_slot)
        self.toks, self.logits = [firsts[0][0]], [firsts[0][1]]
        self._caches()

    def _caches(self):
        self.caches = self._caches_of(self.d_pg)

    @staticmethod
    def _caches_of(pages):
        return [pd_model.PagedCache(m.kw.pool, pages, PT) for m in dm]

    def d_failed(self):
        self.d_why = failed(self.rcv)
        d_pages.release(self.d_pg)
        d_aux.append(self.d_slot)

    def d_decode(self):
        """One decode step (a running-batch forward)."""
        return self.decode_step(self.d_pg, d_pages, self.caches)

    def d_retract(self):
        del self.caches
        d_pages.release(self.d_pg)
        self.freed, self.d_pg = self.d_pg, None
        self.retracted = True

    def d_resume(self):
        """SGLang resumes a retracted request by prefilling again what it
        had."""
        self.d_pg, self.caches = self.recompute(d_pages, self._caches_of)

    def d_finish(self):
        del self.caches
        d_pages.release(self.d_pg)
        self.outcome = self.equal(self.toks, self.logits)


def serve(wave, retracted=()):
    """The two schedulers' event loops over one wave of requests until
    each has an outcome; retracted: requests waiting in the decode's
    retracted queue, resumed once this wave's transfers are over."""
    p_boot, p_wait, p_infl = list(wave), [], []
    d_pre, d_xfer, d_run, d_retr = list(wave), [], [], list(retracted)
    for q in wave:
        q.d_add()
        q.p_add()
    while any(q.outcome is None for q in list(wave) + list(retracted)):
        assert time.monotonic() < DEADLINE, [(q.room, q.outcome)
                                             for q in wave]
        # Decode: prealloc queue (the receivers' handshake), then pages.
        for q, st in polled(d_pre, "rcv"):
            if st == KVPoll.WaitingForInput:
                q.d_prealloc()
                d_pre.remove(q)
                d_xfer.append(q)
        # Prefill: bootstrap queue.
        for q, st in polled(p_boot, "snd"):
            if st == KVPoll.WaitingForInput:
                q.p_init()
                p_boot.remove(q)
                p_wait.append(q)
            elif st == KVPoll.Failed:
                q.p_end(st)
                p_boot.remove(q)
        # Prefill: one forward of chunked prefill per loop.
        if p_wait:
            q = p_wait[0]
            if q.fate == "killed" and q.done_tokens == 0:
                q.killed_pid = kill_prefill_member()
            # The aborted request's forward pass lasts until its ABORT
            # has reached every prefill rank (SGLang polls no room during
            # a forward): its last chunk then goes to a failed room.
            if q.fate == "aborted" and any(
                    x.poll() != KVPoll.Failed for x in q.snd):
                pass
            elif q.p_chunk():
                p_wait.pop(0)
                p_infl.append(q)
        # The decode aborts (its client went away) while the transfer is
        # under way: after the prefill sent a chunk, before the last.
        for q in p_wait:
            if q.fate == "abort" and q.done_tokens and q in d_xfer:
                for x in q.rcv:
                    x.abort()
                q.fate = "aborted"
        end_prefills(p_infl)
        # Decode: transfer queue, metadata gate.
        for q, st in polled(d_xfer, "rcv"):
            if st == KVPoll.Success:
                q.d_transferred()
                d_run.append(q)
            elif st == KVPoll.Failed:
                q.d_failed()
                q.outcome = "failed: " + q.d_why[0]
            else:
                continue
            d_xfer.remove(q)
        # Decode: the running batch, one token each; retraction.
        for q in list(d_run):
            if q.d_decode():
                q.d_finish()
                d_run.remove(q)
            elif q.fate == "retract" and not q.retracted and \
                    len(q.toks) == 3:
                q.d_retract()
                d_run.remove(q)
                q.outcome = "retracted"
        if d_retr and not d_pre and not d_xfer:
            for q in d_retr:
                q.d_resume()
                q.outcome = None
                d_run.append(q)
            d_retr = []
        time.sleep(0.0005)
    # Every prefill side has ended too (a failed request's prefill may
    # still be in its bootstrap or inflight queue).
    assert not p_wait, [(q.room, q.outcome, [x.poll() for x in q.snd])
                        for q in p_wait]
    while p_boot or p_infl:
        # (the decode side of each is over and cleared: its outcome)
        assert time.monotonic() < DEADLINE, [
            (q.room, q.outcome, [x.poll() for x in q.snd])
            for q in p_boot + p_infl]
        end_prefills(p_boot)
        end_prefills(p_infl)
        time.sleep(0.0005)


def report(q):
    step("request %d (%s): %s" % (q.room, q.fate, q.outcome))


ok, retract, abort = (Request(2001, "ok", 23), Request(2002, "retract", 17),
                      Request(2003, "abort", 11))
serve([ok, retract, abort])
report(ok)
assert retract.outcome == "retracted" and retract.retracted
assert abort.fate == "aborted" and abort.outcome.startswith("failed") and \
    "abort" in abort.outcome, abort.outcome
assert all("abort" in w or "another rank" in w or "Failed" in w
           for w in abort.p_why), abort.p_why
report(abort)
# The next request gets the retracted one's pages; the retracted request
# resumes once that transfer is over.
second = Request(2004, "ok", 19)
serve([second], retracted=[retract])
assert set(retract.freed) & set(second.d_pg), "the freed pages went elsewhere"
report(second)
report(retract)
# A prefill member killed under a request: it fails on both sides, with
# a reason; kv-up restarts the member and the next request succeeds.
tables = [m.kw.kv_args.table_path for m in dm]
before = peer_rows(tables)
killed = Request(2005, "killed", 21)
serve([killed])
assert killed.outcome.startswith("failed"), killed.outcome
assert killed.p_why and all(killed.p_why), killed.p_why
report(killed)
wait_restart_seen(tables, before)
after = Request(2006, "after", 23)
serve([after])
assert member_pid() != killed.killed_pid
report(after)
for m in pm + dm:
    m.kw.close()
print("model harness: ok")
sys.exit(0)
