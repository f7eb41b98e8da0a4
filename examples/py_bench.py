#!/usr/bin/python3
"""py_bench.py - kv-bench's workload driven from Python through the kvwire
package: a prefill engine and a decode engine, each a scheduler loop with
its own managers, that share nothing but a queue standing in for the
router (which room goes where) and the kvwire group. One thread steps the
two loops' passes in turn (as two engines in lockstep); --threads runs
each in a thread of its own, as before (the two then hand the
interpreter's lock back and forth around every pass). Rooms of --pages-per-room
pages move in chunks of --chunk-pages; --abort-frac of them are aborted by
the decode at a random moment (right after its metadata, or a few polls
later, while the prefill sends); an aborted room's pages get a canary once
releasable, checked before they are used again (a byte landing after the
release is `corrupt`). With --verify every page of every room that
succeeded is checked against the pattern its prefill wrote. Source pages are always written first, every byte (as
kv-bench's demo does).

Output, as kv-bench's: rooms= success= failed= aborted= stuck= corrupt=
bytes= seconds= rooms_per_s= gib_per_s= (bytes: payload landed in decode
pools by rooms that succeeded: pages x page bytes over K and V buffers, plus
the aux slot).
"""
import argparse
import contextlib
import os
import queue
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))
from kvwire import (KVArgs, KVManager, KVPoll, KVReceiver,  # noqa: E402
                    KVSender, KVTransferError, poll_many)
from kvwire.layout import ROLE_AUX  # noqa: E402

DONE = (KVPoll.Success, KVPoll.Failed)


class Pages:
    """A pool's K/V buffers as uint32 rows (one row per page) and its aux
    slots, for writing and checking patterns."""

    def __init__(self, mgr):
        raw = mgr.pool.raw
        kv = [b for b in mgr.pool.buffers if b.role != ROLE_AUX]
        self.rows = [raw[b.offset:b.offset + b.pages * b.item_len]
                     .view(np.uint32).reshape(b.pages, -1) for b in kv]
        self.aux = mgr.pool.aux.view(np.uint32)
        # Buffers of one size at one stride (kvwire's pool: one after
        # another) are one (buffer, page, word) array, so a room's pages
        # take one numpy operation for every buffer, not one each: the
        # engine's own writes are not what is measured.
        self.block, step = None, kv[1].offset - kv[0].offset \
            if len(kv) > 1 else 0
        if step > 0 and all(b.item_len == kv[0].item_len and
                            b.pages == kv[0].pages and
                            b.offset == kv[0].offset + i * step
                            for i, b in enumerate(kv)) and \
                step % 4 == 0 and kv[0].item_len % 4 == 0:
            words = raw[kv[0].offset:kv[-1].offset +
                        kv[-1].pages * kv[-1].item_len].view(np.uint32)
            self.block = np.lib.stride_tricks.as_strided(
                words, (len(kv), kv[0].pages, kv[0].item_len // 4),
                (step, kv[0].item_len, 4))
            # pattern()'s per-buffer term, i * 40503, as a column each.
            self.steps = (np.arange(len(kv), dtype=np.uint64) * 40503 %
                          2 ** 32).astype(np.uint32)[:, None, None]

    # 0, 1, 2, ... as a column of uint32: pattern() adds a room's base to
    # its first n rows (uint32 arithmetic wraps as the % 2**32 would).
    # The engine's own writes are not what is measured: the pattern costs
    # one numpy operation, not three (astype of a uint64 temporary).
    _COUNT = np.arange(65536, dtype=np.uint32)[:, None]

    @staticmethod
    def pattern(key, i, n):
        """The words of buffer i's n pages for room key (a word per page)."""
        base = np.uint32((key * 2654435761 + i * 40503) % 2 ** 32)
        if n <= len(Pages._COUNT):
            return Pages._COUNT[:n] + base
        return (np.arange(n, dtype=np.uint64)[:, None] + int(base)) \
            .astype(np.uint32)

    @staticmethod
    def where(pages):
        """pages as an index: a slice when they are one run (the common
        case with a free list handed out in order): a slice costs a fifth
        of a fancy index in numpy's fixed overhead."""
        n = len(pages)
        if n and int(pages[-1]) - int(pages[0]) == n - 1 and \
                (n < 3 or list(pages) == list(range(int(pages[0]),
                                                    int(pages[0]) + n))):
            return slice(int(pages[0]), int(pages[0]) + n)
        return pages

    def fill(self, key, pages, aux):
        at = self.where(pages)
        n = len(pages)
        if self.block is not None and n <= len(Pages._COUNT):
            # pattern(key, i, n) for every buffer i at once (uint32 sums
            # wrap as pattern()'s % 2**32 does).
            self.block[:, at] = (self.steps +
                                 np.uint32(key * 2654435761 % 2 ** 32)) + \
                Pages._COUNT[:n]
        else:
            for i, r in enumerate(self.rows):
                r[at] = self.pattern(key, i, n)
        self.aux[aux] = np.uint32(key % 2 ** 32)

    def check(self, key, pages, aux):
        at = self.where(pages)
        for i, r in enumerate(self.rows):
            if not (r[at] == self.pattern(key, i, len(pages))).all():
                return False
        return bool((self.aux[aux] == np.uint32(key % 2 ** 32)).all())


def nap(idle):
    """kv-bench's wait between passes after `idle` seconds without
    progress: yield the CPU to the group at first, then sleep longer, up to
    1 ms, so an idle engine does not take a core the workers need."""
    time.sleep(0 if idle < 2e-4 else min(idle / 8, 1e-3))


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.c = dict(rooms=0, success=0, failed=0, aborted=0, stuck=0,
                      corrupt=0)

    def add(self, k):
        with self.lock:
            self.c[k] += 1


def prefill(run_dir, inbox, stats, o, stop):
    """The prefill engine's scheduler loop: a generator, one pass a step,
    each yielding whether the pass made progress (drive())."""
    args = KVArgs.from_run_dir(run_dir, "prefill")
    # A room its decode aborted before telling the prefill ends here.
    args.bootstrap_timeout = o.room_timeout / 2
    mgr = KVManager(args, "prefill")
    step = mgr.batch if o.batch else contextlib.nullcontext
    pat = Pages(mgr)
    free = list(range(mgr.kv_args.pages))
    slots = list(range(mgr.kv_args.aux_slots))
    live, n = [], o.pages_per_room
    try:
        while not (stop.is_set() and not live and inbox.empty()):
            progress = False
            with step():
                while len(free) >= n and slots:
                    try:
                        room = inbox.get_nowait()
                    except queue.Empty:
                        break
                    pages, free = free[:n], free[n:]
                    aux = slots.pop()
                    pat.fill(room, pages, aux)  # the engine writes its KV
                    live.append(dict(s=KVSender(mgr, mgr.kv_args.bootstrap_addr,
                                                room, None, 0), room=room,
                                     pages=np.array(pages, np.int32), aux=aux,
                                     sent=-1, t=time.monotonic()))
                    progress = True
                # Every live room polled in one read of the table per pass, as
                # SGLang's scheduler polls its queue (poll_and_all_reduce).
                now = time.monotonic()
                for x, st in zip(list(live), poll_many([x["s"] for x in live])):
                    s = x["s"]
                    if x["sent"] < 0 and st == KVPoll.WaitingForInput:
                        s.init(n, x["aux"])
                        x["sent"] = 0
                    while x["sent"] >= 0 and x["sent"] < n and \
                            s.conclude_state is None:
                        s.send(x["pages"][x["sent"]:x["sent"] + o.chunk_pages])
                        x["sent"] += o.chunk_pages
                        progress = True
                    stuck = now - x["t"] > o.room_timeout
                    if st in DONE or stuck:
                        if st == KVPoll.Failed:
                            try:
                                s.failure_exception()  # clears the room
                            except KVTransferError:
                                pass
                        else:
                            s.clear()
                        live.remove(x)
                        free.extend(x["pages"].tolist())
                        slots.append(x["aux"])
                        progress = True
            yield progress
    finally:
        pat = None  # drops its pool views before close
        mgr.close()


def decode(run_dir, outbox, stats, o, seed, stop):
    """The decode engine's scheduler loop, as prefill(): returns (bytes
    landed, seconds) and, ending, tells the prefill loop (stop)."""
    mgr = KVManager(KVArgs.from_run_dir(run_dir, "decode"), "decode")
    step = mgr.batch if o.batch else contextlib.nullcontext
    pat = Pages(mgr)
    rng = np.random.default_rng(seed)
    free = list(range(mgr.kv_args.pages))
    slots = list(range(mgr.kv_args.aux_slots))
    canary = []       # (key, pages, aux) of released aborted rooms
    live, n, started = [], o.pages_per_room, 0
    room_bytes = sum(r.shape[1] * 4 for r in pat.rows) * n + \
        sum(mgr.kv_args.aux_item_lens)
    landed = 0

    def flush_canaries():
        for key, pages, aux in canary:
            if not pat.check(key, pages, aux):
                stats.add("corrupt")
            free.extend(pages)
            slots.append(aux)
        canary.clear()

    t0 = time.monotonic()
    try:
        while started < o.rooms or live:
            progress = False
            with step():
                if started < o.rooms and (len(free) < n or not slots):
                    flush_canaries()
                while started < o.rooms and len(live) < o.concurrency and \
                        len(free) >= n and slots:
                    room = int(rng.integers(1, 2 ** 63))
                    pages, free = free[:n], free[n:]
                    aux = slots.pop()
                    r = KVReceiver(mgr, mgr.kv_args.bootstrap_addr, room)
                    r.init(0)
                    r.send_metadata(np.array(pages, np.int32), aux)
                    abort_at = int(rng.integers(0, 4)) \
                        if rng.random() < o.abort_frac else -1
                    live.append(dict(r=r, room=room, pages=pages, aux=aux,
                                     abort_at=abort_at, polls=0,
                                     t=time.monotonic()))
                    outbox.put(room)
                    started += 1
                    progress = True
                for x in live if o.abort_frac > 0 else ():
                    r = x["r"]
                    if x["abort_at"] >= 0 and r.conclude_state is None and \
                            x["polls"] >= x["abort_at"]:
                        r.abort()
                now = time.monotonic()
                for x, st in zip(list(live), poll_many([x["r"] for x in live])):
                    r = x["r"]
                    x["polls"] += 1
                    timed_out = now - x["t"] > o.room_timeout
                    if x["abort_at"] >= 0:
                        if not (r.releasable or timed_out):
                            continue
                        stats.add("stuck" if timed_out else "aborted")
                        if not timed_out:  # its pages wait under a canary
                            pat.fill(x["room"] ^ 0x5555, x["pages"], x["aux"])
                            canary.append((x["room"] ^ 0x5555, x["pages"],
                                           x["aux"]))
                    elif st == KVPoll.Success:
                        ok = not o.verify or pat.check(x["room"], x["pages"],
                                                       x["aux"])
                        stats.add("success" if ok else "corrupt")
                        landed += room_bytes if ok else 0
                        free.extend(x["pages"])
                        slots.append(x["aux"])
                    elif st == KVPoll.Failed:
                        stats.add("failed")  # its pages stay out of use
                    elif timed_out:
                        stats.add("stuck")
                    else:
                        continue
                    stats.add("rooms")
                    r.clear()
                    live.remove(x)
                    progress = True
            yield progress
        flush_canaries()
        return landed, time.monotonic() - t0
    finally:
        stop.set()
        pat = None  # drops its pool views before close
        mgr.close()


def drive(loops):
    """Steps scheduler loops (prefill(), decode()) in turn, a pass each,
    until every one has ended; returns what each returned. When no pass
    made progress it naps as kv-bench does. A loop that raises ends the
    others (their managers close)."""
    live, out = dict(enumerate(loops)), [None] * len(loops)
    last = time.monotonic()
    try:
        while live:
            progress = False
            for k, g in list(live.items()):
                try:
                    progress |= next(g)
                except StopIteration as e:
                    out[k] = e.value
                    del live[k]
            if progress:
                last = time.monotonic()
            else:
                nap(time.monotonic() - last)
    finally:
        for g in live.values():
            g.close()
    return out


def run(run_dir, o, seed=None):
    """Runs the workload on the group of run_dir; returns a dict of
    kv-bench's output keys."""
    q, stats, stop, out, errs = queue.Queue(), Stats(), threading.Event(), \
        {}, []
    pl = prefill(run_dir, q, stats, o, stop)
    dl = decode(run_dir, q, stats, o, seed, stop)
    if o.threads:
        def p():
            try:
                drive([pl])
            except BaseException as e:
                errs.append(e)

        tp = threading.Thread(target=p)
        tp.start()
        try:
            (out["bytes"], out["seconds"]), = drive([dl])
        finally:
            stop.set()
            tp.join()
    else:
        _, (out["bytes"], out["seconds"]) = drive([pl, dl])
    if errs:
        raise errs[0]
    res = dict(stats.c, **out)
    res["rooms_per_s"] = res["rooms"] / res["seconds"]
    res["gib_per_s"] = res["bytes"] / res["seconds"] / 2 ** 30
    return res


def options(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--rooms", type=int, default=100)
    ap.add_argument("--pages-per-room", type=int, default=16)
    ap.add_argument("--chunk-pages", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--abort-frac", type=float, default=0.0)
    ap.add_argument("--room-timeout", type=float, default=60.0)
    ap.add_argument("--verify", action="store_true")
    ap.add_argument("--batch", action="store_true",
                    help="each engine's commands of a pass held and sent "
                    "together at its end (KVManager.batch)")
    ap.add_argument("--threads", action="store_true",
                    help="each engine's loop in a thread of its own, not "
                    "both stepped in turn by one")
    return ap.parse_args(argv)


def main():
    o = options()
    res = run(o.run_dir, o)
    print(" ".join("%s=%s" % (k, ("%.4g" % v) if isinstance(v, float) else v)
                   for k, v in res.items()))
    return 0 if res["success"] + res["aborted"] == res["rooms"] and \
        not res["stuck"] and not res["corrupt"] else 1


if __name__ == "__main__":
    sys.exit(main())
