"""test_xpyd.py - xPyD on one host over shm (issue 34): two groups started
with the same `kv-up --cluster` each hold a prefill and a decode instance,
and rooms routed over all four (prefill, decode) pairs arrive byte for byte
(K, V and aux), each decode naming its room's prefill instance by that
instance's bootstrap; the same with four split groups, two prefill and two
decode instances each naming both prefill bootstraps, as
docs/ARCHITECTURE.md shows a 2P2D layout. Groups that are not of one
cluster refuse each other's pools, and the room fails with reason
"refused", not as a layout mismatch."""
import random
import socket

import numpy as np
import pytest

from conftest import Group
from kvwire import (KVArgs, KVManager, KVPoll, KVReceiver, KVSender,
                    KVTransferError)
from kvwire import _lib
from test_binding import SHAPE, room_id, wait_for


def managers(g):
    return (KVManager(KVArgs.from_run_dir(g.dir, "prefill"), "prefill"),
            KVManager(KVArgs.from_run_dir(g.dir, "decode"), "decode"))


def one_room(p, d, rng, src, dst):
    """A room from prefill manager p to decode manager d (the decode names
    p's instance by its bootstrap): random K, V and aux at src, read back
    at dst. Returns (sender, receiver) once both ended."""
    room = room_id()
    for layer in range(2):
        p.pool.k(layer)[src] = rng.standard_normal(
            p.pool.k(layer)[src].shape).astype(np.float32)
        p.pool.v(layer)[src] = rng.standard_normal(
            p.pool.v(layer)[src].shape).astype(np.float32)
    p.pool.aux[3, :8] = rng.integers(0, 256, 8, dtype=np.uint8)
    s = KVSender(p, p.kv_args.bootstrap_addr, room, [0], 0)
    r = KVReceiver(d, p.kv_args.bootstrap_addr, room)
    r.init(0)
    r.send_metadata(np.array(dst, np.int32), 5)
    wait_for("prefill WaitingForInput",
             lambda: s.poll() in (KVPoll.WaitingForInput, KVPoll.Failed))
    s.init(len(src), 3)
    s.send(np.array(src, np.int32))
    wait_for("decode ended",
             lambda: r.poll() in (KVPoll.Success, KVPoll.Failed))
    wait_for("prefill ended",
             lambda: s.poll() in (KVPoll.Success, KVPoll.Failed))
    return s, r


def route(pairs, rooms, rng):
    """rooms rooms, round-robin over pairs {name: (prefill mgr, decode
    mgr)}, each checked byte for byte; returns rooms per pair."""
    done = {k: 0 for k in pairs}
    for i in range(rooms):
        name = list(pairs)[i % len(pairs)]
        p, d = pairs[name]
        src = rng.choice(32, 3, replace=False).tolist()
        dst = rng.choice(32, 3, replace=False).tolist()
        s, r = one_room(p, d, rng, src, dst)
        assert r.poll() == KVPoll.Success, \
            "%s room %d: %s" % (name, i, d.status(r.bootstrap_room))
        for layer in range(2):
            assert np.array_equal(d.pool.k(layer)[dst], p.pool.k(layer)[src])
            assert np.array_equal(d.pool.v(layer)[dst], p.pool.v(layer)[src])
        assert np.array_equal(d.pool.aux[5, :8], p.pool.aux[3, :8])
        s.clear()
        r.clear()
        done[name] += 1
    return done


def port_bases(n):
    """n port bases N whose N, N+1 and N+512 (a split group's bootstrap,
    rank 0 and decode rank 0) are free on loopback now."""
    bases = []
    while len(bases) < n:
        b = random.randrange(20000, 30000, 1000)
        try:
            for port in (b, b + 1, b + 512):
                with socket.socket() as so:
                    so.bind(("127.0.0.1", port))
        except OSError:
            continue
        if b not in bases:
            bases.append(b)
    return bases


def test_two_by_two_over_shm_in_one_cluster():
    cluster = "x%d" % random.randrange(10 ** 6)
    rng = np.random.default_rng(7)
    with Group(*SHAPE, "--cluster", cluster) as a, \
            Group(*SHAPE, "--cluster", cluster) as b:
        (pa, da), (pb, db) = managers(a), managers(b)
        try:
            pairs = {"a->a": (pa, da), "a->b": (pa, db), "b->a": (pb, da),
                     "b->b": (pb, db)}
            assert route(pairs, 80, rng) == {k: 20 for k in pairs}
        finally:
            for m in (pa, da, pb, db):
                m.close()


def test_two_prefill_and_two_decode_instances_split_as_the_docs_show():
    cluster = "x%d" % random.randrange(10 ** 6)
    rng = np.random.default_rng(9)
    b = port_bases(4)
    common = list(SHAPE) + ["--cluster", cluster, "--transport", "shm",
                            "--insecure"]
    boots = ["--bootstrap", "tcp://127.0.0.1:%d" % b[0],
             "--bootstrap", "tcp://127.0.0.1:%d" % b[1]]
    with Group(*common, "--role", "prefill", "--port-base", b[0]) as p1, \
            Group(*common, "--role", "prefill", "--port-base", b[1]) as p2, \
            Group(*common, "--role", "decode", "--port-base", b[2],
                  *boots) as d1, \
            Group(*common, "--role", "decode", "--port-base", b[3],
                  *boots) as d2:
        ms = {g: KVManager(KVArgs.from_run_dir(x.dir, mode), mode)
              for g, x, mode in (("p1", p1, "prefill"), ("p2", p2, "prefill"),
                                 ("d1", d1, "decode"), ("d2", d2, "decode"))}
        try:
            pairs = {"%s->%s" % (p, d): (ms[p], ms[d])
                     for p in ("p1", "p2") for d in ("d1", "d2")}
            assert route(pairs, 40, rng) == {k: 10 for k in pairs}
        finally:
            for m in ms.values():
                m.close()


def test_groups_of_no_one_cluster_refuse_each_others_pools():
    rng = np.random.default_rng(8)
    with Group(*SHAPE, "--cluster", "x%d" % random.randrange(10 ** 6)) as a, \
            Group(*SHAPE) as b:
        (pa, da), (pb, db) = managers(a), managers(b)
        try:
            s, r = one_room(pa, db, rng, [1, 2], [3, 4])
            assert r.poll() == KVPoll.Failed
            st = db.status(r.bootstrap_room)
            assert _lib.reason_str(st.reason) == "refused", \
                _lib.reason_str(st.reason)
            with pytest.raises(KVTransferError, match="d0: refused"):
                r.failure_exception()
            # Within a group, the same decode is served.
            s, r = one_room(pb, db, rng, [1, 2], [3, 4])
            assert r.poll() == KVPoll.Success
        finally:
            for m in (pa, da, pb, db):
                m.close()
