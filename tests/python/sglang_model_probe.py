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
"model harness: ok".

Each TP rank of each engine is a process of its own, forked before any
kvwire object exists, as SGLang runs a scheduler per rank: a rank holds
its manager, its pool pages and its heads only, and its engine's ranks
meet in a group of their own (SGLang's gloo and NCCL groups, here shared
memory and a barrier) for the poll consensus and for the model's
all-reduce (pd_model.RankCaches). The two engines step in lockstep, a
barrier per scheduler loop (the router's order), and learn of each other
only through kvwire and a board of the test's own: how far the prefill's
chunks are, that the decode aborted, whether either still has work."""
import multiprocessing
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
from ranks import WAIT, Group, rank_body, run_ranks  # noqa: E402

END = (KVPoll.Success, KVPoll.Failed)
FLOATS = max(64 * CFG.hidden, CFG.vocab)  # a forward's rows, or logits
F32 = np.float32


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


# The board: what one engine's rank 0 tells the other engine's ranks,
# written between two loops' syncs and read at the sync.
P_BUSY, D_BUSY, DONE_TOKENS, ABORTED = 0, 1, 2, 10  # + request index
BOARD = ABORTED + 8  # words


class Rank:
    """This process: its engine (P or D), its TP rank, its engine's group,
    the barrier every rank of both engines shares, the board."""

    def __init__(self, mode, rank, group, everyone, board):
        self.mode, self.rank = mode, rank
        self.group, self.everyone, self.board = group, everyone, board
        self.lead = rank == 0  # writes the board
        self.printer = mode == D and rank == 0

    def sync(self):
        """The router's order: every rank of both engines at the same
        loop; the board as it stands then (everything written before the
        first barrier, read by all before anyone writes again)."""
        self.everyone.wait(WAIT)
        board = list(self.board)
        self.everyone.wait(WAIT)
        return board

    def tell(self, at, value):
        if self.lead:
            self.board[at] = int(value)


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


def polled(queue, side):
    """(request, the TP ranks' consensus) for each request of a queue, side
    "snd" (its prefill sender) or "rcv" (its decode receiver):
    poll_and_all_reduce on this rank, then the all-reduce MIN over the
    engine's ranks; a list of its own, so the caller may move requests out
    of the queue."""
    if not queue:
        return []
    local = poll_and_all_reduce([getattr(q, side) for q in queue], None)
    return list(zip(queue, ME.group.all_reduce_min(ME.rank, local)))


def every_rank_failed(x):
    """x (this rank's room) and the same room on every other rank of the
    engine poll Failed (the MAX of the polls is Failed)."""
    return -ME.group.all_reduce_min(ME.rank, [-x.poll()])[0] == \
        KVPoll.Failed


def end_prefills(queue):
    """The prefill's requests of queue whose rooms ended leave it."""
    for q, st in polled(queue, "snd"):
        if st in END:
            q.p_end(st)
            queue.remove(q)


def failed(x):
    """SGLang on a failed request: failure_exception() (the reason), then
    clear()."""
    try:
        x.failure_exception()
        raise AssertionError("a failed room raised nothing")
    except AssertionError:
        raise
    except Exception as e:  # SGLang catches its KVTransferError
        why = str(e)
    x.clear()
    return why


backend = TransferBackend(server("prefill", PTP)
                          .disaggregation_transfer_backend)
Manager = get_kv_class(backend, KVClassType.MANAGER)
Sender = get_kv_class(backend, KVClassType.SENDER)
Receiver = get_kv_class(backend, KVClassType.RECEIVER)
P, D = DisaggregationMode.PREFILL, DisaggregationMode.DECODE
ME = None  # this process's Rank, set in rank_main


class Engine:
    """This rank's part of its engine: its manager and metadata buffers,
    the engine's page and aux-slot allocators (the same on every rank)."""

    def __init__(self):
        tp = PTP if ME.mode == P else DTP
        self.meta = Metadata(16)
        self.m = manager(ME.mode, tp, ME.rank, self.meta)
        assert self.m.kw.kv_args.engine_rank == ME.rank
        self.addr = self.m.kw.kv_args.bootstrap_addr  # the prefill's
        if ME.mode == P:
            self.pages, self.aux = Blocks(64), list(range(16))
        else:
            self.pages = Blocks(64, range(63, -1, -1))
            self.aux = list(range(15, -1, -1))
            assert self.m.try_ensure_parallel_info(self.addr)

    def caches(self, pages):
        """This rank's cache over pages, in a RankCaches of its engine."""
        tp = PTP if ME.mode == P else DTP
        return pd_model.RankCaches(tp, ME.rank, pd_model.PagedCache(
            self.m.kw.pool, pages, PT), ME.group)


class Request(Reference):
    def __init__(self, room, fate, prompt_len):
        Reference.__init__(self, room, prompt_len)
        self.room, self.fate = room, fate
        self.i = room - 2001  # its place on the board
        self.outcome = None
        self.retracted = False
        self.kill_sent = False

    # ---- prefill ----
    def p_add(self):
        self.snd = Sender(E.m, E.addr, self.room, list(range(DTP)), 0)

    def p_init(self):
        self.p_pg = E.pages.alloc(self.n_pages)
        self.p_slot = E.aux.pop()
        assert self.snd.pop_decode_prefix_len() == 0
        self.snd.init(self.n_pages, self.p_slot)
        self.p_caches = E.caches(self.p_pg)
        self.done_tokens = 0

    def p_chunk(self, chunk_pages=2):
        """One chunk of chunked prefill on this rank (its heads, the
        attention outputs all-reduced over the ranks); True after the
        last."""
        lo = self.done_tokens
        hi = min(lo + chunk_pages * PT, len(self.prompt))
        pos = np.arange(lo, hi)
        x = MODEL.layers(MODEL.embed[self.prompt[lo:hi]], pos, 0, CFG.layers,
                         self.p_caches, PTP)
        last = hi == len(self.prompt)
        if last:  # process_batch_result, on every rank
            pd_model.write_metadata(E.meta, self.p_slot, self.room, x[-1],
                                    MODEL.logits(x))
        ids = np.array(self.p_pg[lo // PT:-(-hi // PT)], np.int32)
        self.snd.send(ids, [])  # state_indices: one list per state type
        self.done_tokens = hi
        ME.tell(DONE_TOKENS + self.i, hi)
        return last

    def p_end(self, st):
        """Out of the bootstrap (failed there) or the inflight queue."""
        if st == KVPoll.Failed:
            self.p_why = failed(self.snd)
        else:
            self.snd.clear()
        if hasattr(self, "p_pg"):
            E.pages.release(self.p_pg)
            E.aux.append(self.p_slot)
            del self.p_caches

    # ---- decode ----
    def d_add(self):
        self.rcv = Receiver(mgr=E.m, bootstrap_addr=E.addr,
                            bootstrap_room=self.room, prefill_dp_rank=0)
        self.rcv.init(0)

    def d_prealloc(self):
        self.d_pg = E.pages.alloc(self.n_pages)
        self.d_slot = E.aux.pop()
        self.rcv.send_metadata(np.array(self.d_pg, np.int32), self.d_slot,
                               [], decode_prefix_len=0)

    def d_transferred(self):
        """The metadata gate: every decode rank's row gives the same first
        token and logits."""
        tok, logits = pd_model.read_metadata(MODEL, E.meta, self.d_slot,
                                             self.room)
        toks = ME.group.gather(ME.rank, np.array([tok], F32))
        rows = ME.group.gather(ME.rank, logits)
        assert all(t[0] == toks[0][0] and np.array_equal(lg, rows[0])
                   for t, lg in zip(toks, rows)), self.room
        self.rcv.clear()
        E.aux.append(self.d_slot)
        self.toks, self.logits = [tok], [logits]
        self.caches = E.caches(self.d_pg)

    def d_failed(self):
        self.d_why = failed(self.rcv)
        E.pages.release(self.d_pg)
        E.aux.append(self.d_slot)

    def d_decode(self):
        """One decode step (a running-batch forward) on this rank."""
        return self.decode_step(self.d_pg, E.pages, self.caches)

    def d_retract(self):
        del self.caches
        E.pages.release(self.d_pg)
        self.freed, self.d_pg = self.d_pg, None
        self.retracted = True

    def d_resume(self):
        """SGLang resumes a retracted request by prefilling again what it
        had."""
        self.d_pg, self.caches = self.recompute(E.pages, E.caches)

    def d_finish(self):
        del self.caches
        E.pages.release(self.d_pg)
        self.outcome = self.equal(self.toks, self.logits)


def prefill_loop(st, board):
    """One loop of the prefill's scheduler on this rank."""
    p_boot, p_wait, p_infl = st
    for q, s in polled(p_boot, "snd"):  # the bootstrap queue
        if s == KVPoll.WaitingForInput:
            q.p_init()
            p_boot.remove(q)
            p_wait.append(q)
        elif s == KVPoll.Failed:
            q.p_end(s)
            p_boot.remove(q)
    if p_wait:  # one forward of chunked prefill per loop
        q = p_wait[0]
        if q.fate == "killed" and not q.kill_sent:
            # Once every rank began the room, before its first chunk (a
            # loop of its own: no rank's chunk before the kill).
            if ME.lead:
                q.killed_pid = kill_prefill_member()
            q.kill_sent = True
        elif q.fate == "abort" and q.done_tokens and not (
                board[ABORTED + q.i] and every_rank_failed(q.snd)):
            # The aborted request's forward pass lasts until its ABORT has
            # reached every prefill rank (SGLang polls no room during a
            # forward): its last chunk then goes to a failed room.
            pass
        elif q.p_chunk():
            p_wait.pop(0)
            p_infl.append(q)
    end_prefills(p_infl)
    ME.tell(P_BUSY, bool(p_boot or p_wait or p_infl))


def decode_loop(st, board, everyone):
    """One loop of the decode's scheduler on this rank."""
    d_pre, d_xfer, d_run, d_retr = st
    for q, s in polled(d_pre, "rcv"):  # the prealloc queue, then pages
        if s == KVPoll.WaitingForInput:
            q.d_prealloc()
            d_pre.remove(q)
            d_xfer.append(q)
    # The decode aborts (its client went away) while the transfer is under
    # way: after the prefill sent a chunk, before the last.
    for q in d_xfer:
        if q.fate == "abort" and board[DONE_TOKENS + q.i]:
            q.rcv.abort()
            q.fate = "aborted"
            ME.tell(ABORTED + q.i, 1)
    for q, s in polled(d_xfer, "rcv"):  # transfer queue, metadata gate
        if s == KVPoll.Success:
            q.d_transferred()
            d_run.append(q)
        elif s == KVPoll.Failed:
            q.d_failed()
            q.outcome = "failed: " + q.d_why
        else:
            continue
        d_xfer.remove(q)
    for q in list(d_run):  # the running batch, one token each
        if q.d_decode():
            q.d_finish()
            d_run.remove(q)
        elif q.fate == "retract" and not q.retracted and len(q.toks) == 3:
            q.d_retract()
            d_run.remove(q)
            q.outcome = "retracted"
    if d_retr and not d_pre and not d_xfer:
        for q in d_retr:
            q.d_resume()
            q.outcome = None
            d_run.append(q)
        d_retr[:] = []
    ME.tell(D_BUSY, any(q.outcome is None for q in everyone))


def serve(wave, retracted=()):
    """Both schedulers' event loops over one wave of requests, in
    lockstep, until the decode has an outcome for each and the prefill
    has ended each room; retracted: requests waiting in the decode's
    retracted queue, resumed once this wave's transfers are over."""
    if ME.mode == P:
        st = (list(wave), [], [])
        for q in wave:
            q.p_add()
        ME.tell(P_BUSY, 1)
    else:
        st = (list(wave), [], [], list(retracted))
        for q in wave:
            q.d_add()
        ME.tell(D_BUSY, 1)
    while True:
        board = ME.sync()
        if not board[P_BUSY] and not board[D_BUSY]:
            return
        assert time.monotonic() < DEADLINE, [(q.room, q.outcome)
                                             for q in wave]
        if ME.mode == P:
            prefill_loop(st, board)
        else:
            decode_loop(st, board, list(wave) + list(retracted))
        time.sleep(0.0005)


def report(q):
    if ME.printer:
        step("request %d (%s): %s" % (q.room, q.fate, q.outcome))


def scenario():
    ok, retract, abort = (Request(2001, "ok", 23),
                          Request(2002, "retract", 17),
                          Request(2003, "abort", 11))
    serve([ok, retract, abort])
    if ME.mode == P:
        assert abort.p_why and all(
            "abort" in w or "another rank" in w or "Failed" in w
            for w in [abort.p_why]), abort.p_why
    else:
        report(ok)
        assert retract.outcome == "retracted" and retract.retracted
        assert abort.fate == "aborted" and \
            abort.outcome.startswith("failed") and \
            "abort" in abort.outcome, abort.outcome
        report(abort)
    # The next request gets the retracted one's pages; the retracted
    # request resumes once that transfer is over.
    second = Request(2004, "ok", 19)
    serve([second], retracted=[retract])
    if ME.mode == D:
        assert set(retract.freed) & set(second.d_pg), \
            "the freed pages went elsewhere"
        report(second)
        report(retract)
    # A prefill member killed under a request: it fails on both sides,
    # with a reason; kv-up restarts the member and the next request
    # succeeds.
    if ME.mode == D:
        tables = [E.m.kw.kv_args.table_path]
        before = peer_rows(tables)
    killed = Request(2005, "killed", 21)
    serve([killed])
    if ME.mode == P:
        assert killed.p_why, killed.p_why
    else:
        assert killed.outcome.startswith("failed"), killed.outcome
        report(killed)
        wait_restart_seen(tables, before)
    ME.everyone.wait(WAIT)  # every decode rank saw the restart
    after = Request(2006, "after", 23)
    serve([after])
    if ME.mode == P and ME.lead:
        assert member_pid() != killed.killed_pid
    report(after)


def rank_main(me):
    """A rank process: its engine's scheduler (ranks.rank_body)."""
    def body():
        global ME, E
        ME = me
        E = Engine()
        scenario()
        E.m.kw.close()
    rank_body(body, [me.everyone, me.group.bar])


E = None  # this process's Engine, set in rank_main
ctx = multiprocessing.get_context("fork")  # before any kvwire object
everyone = ctx.Barrier(PTP + DTP)
board = ctx.Array("q", BOARD, lock=False)
groups = {P: Group(ctx, PTP, FLOATS), D: Group(ctx, DTP, FLOATS)}
run_ranks([ctx.Process(target=rank_main,
                       args=(Rank(mode, r, groups[mode], everyone, board),))
           for mode, tp in ((P, PTP), (D, DTP)) for r in range(tp)])
print("model harness: ok")
sys.exit(0)
