"""test_prefix.py - the decode's prefix (issue 32 item 4): a decode that
holds a request's first pages already (its prefix cache) says how many
tokens (send_metadata's decode_prefix_len); the prefill engine reads it
(pop_decode_prefix_len) and sends only the pages after them; the pages the
decode holds are never written; a full hit moves the metadata alone; a
prefix that is not whole pages, and two destinations that disagree, fail
the room with a reason. On a group of several metadata buffers, so every
row is seen to move with the last chunk in each case."""
import ctypes

import numpy as np
import pytest

from conftest import Group, SHAPE
from kvwire import KVPoll, KVReceiver, KVSender
from kvwire._lib import FAILED, R_BAD_INDEX, lib, reason_str
from test_binding import room_id, wait_for

# The module's group (conftest's `group` and `mgrs`): SHAPE with three
# metadata buffers of different rows (4-token pages).
GROUP_ARGS = SHAPE + ["--aux-bytes", "8,4,32"]


def fill_rows(pool, slot, seed):
    rng = np.random.default_rng(seed)
    for b in pool.aux_buffers:
        b[slot] = rng.integers(0, 256, b.shape[1], dtype=np.uint8)


def rows(pool, slot):
    return [b[slot].copy() for b in pool.aux_buffers]


def begin(pm, dm, prefix_pages, dst):
    """The decode asks for pages dst after a prefix of prefix_pages pages
    (aux slot 2); returns (sender, receiver) once the prefill is
    WaitingForInput."""
    room = room_id()
    s = KVSender(pm, pm.kv_args.bootstrap_addr, room, [0], 0)
    r = KVReceiver(dm, dm.kv_args.bootstrap_addr, room)
    r.init(0)
    r.send_metadata(np.array(dst, np.int32), 2, [],
                    decode_prefix_len=prefix_pages * pm.kv_args.page_size)
    wait_for("prefill WaitingForInput",
             lambda: s.poll() == KVPoll.WaitingForInput)
    return s, r


def finish(s, r):
    wait_for("decode Success", lambda: r.poll() == KVPoll.Success)
    wait_for("prefill Success", lambda: s.poll() == KVPoll.Success)
    s.clear()
    r.clear()


def test_the_prefill_sends_only_the_pages_after_the_prefix(mgrs):
    pm, dm = mgrs
    held, dst, src = [20, 21], [10, 11], [3, 4, 5, 6]
    for layer in (0, 1):
        pm.pool.k(layer)[src] = np.arange(len(src) * 64, dtype=np.float32) \
            .reshape(len(src), 4, 2, 8) + layer
        pm.pool.v(layer)[src] = -1.0 - layer
        dm.pool.k(layer)[held] = 7.0  # the decode's own prefix pages
        dm.pool.v(layer)[held] = 7.0
    fill_rows(pm.pool, 5, 1)
    s, r = begin(pm, dm, len(held), dst)
    assert s.pop_decode_prefix_len() == 2 * pm.kv_args.page_size
    skip = s.pop_decode_prefix_len() // pm.kv_args.page_size
    s.init(len(src) - skip, 5)
    s.send(np.array(src[skip:], np.int32))
    finish(s, r)
    for layer in (0, 1):
        assert np.array_equal(dm.pool.k(layer)[dst], pm.pool.k(layer)[src[2:]])
        assert np.array_equal(dm.pool.v(layer)[dst], pm.pool.v(layer)[src[2:]])
        assert (dm.pool.k(layer)[held] == 7.0).all()  # never written
        assert (dm.pool.v(layer)[held] == 7.0).all()
    for got, want in zip(rows(dm.pool, 2), rows(pm.pool, 5)):
        assert np.array_equal(got, want)


def test_a_full_hit_moves_the_metadata_alone(mgrs):
    pm, dm = mgrs
    fill_rows(pm.pool, 6, 2)
    before = [dm.pool.k(0).copy(), dm.pool.v(1).copy()]
    s, r = begin(pm, dm, 3, [])
    assert s.pop_decode_prefix_len() == 3 * pm.kv_args.page_size
    s.init(0, 6)
    s.send(np.array([], np.int32))  # the last chunk, with no page
    finish(s, r)
    assert np.array_equal(dm.pool.k(0), before[0])
    assert np.array_equal(dm.pool.v(1), before[1])
    for got, want in zip(rows(dm.pool, 2), rows(pm.pool, 6)):
        assert np.array_equal(got, want)


def test_a_prefix_that_is_not_whole_pages_is_refused(mgrs):
    pm, dm = mgrs
    r = KVReceiver(dm, dm.kv_args.bootstrap_addr, room_id())
    r.init(0)
    with pytest.raises(ValueError, match="whole number of 4-token pages"):
        r.send_metadata(np.array([1], np.int32), 2, [], decode_prefix_len=6)
    r.clear()
    # The control process refuses it too (an engine in C): the room
    # fails at once as a bad index, and nothing reaches a prefill.
    room = room_id()
    pages = (ctypes.c_uint32 * 1)(1)
    assert lib.kvw_recv_begin(dm._e, room, dm.kv_args.bootstrap_addr.encode(),
                              0, pages, 1, 2, 6) == 0
    wait_for("decode room Failed", lambda: dm.status(room) is not None and
             dm.status(room).state == FAILED)
    assert reason_str(dm.status(room).reason) == reason_str(R_BAD_INDEX)
    assert lib.kvw_clear(dm._e, room) == 0


def test_destinations_that_disagree_on_the_prefix_fail_the_room():
    with Group(*(GROUP_ARGS + ["--decode-tp", 2])) as g:
        from kvwire import KVArgs, KVManager
        pm = KVManager(KVArgs.from_run_dir(g.dir, "prefill"), "prefill")
        dms = [KVManager(KVArgs.from_run_dir(g.dir, "decode", t), "decode")
               for t in (0, 1)]
        try:
            room = room_id()
            s = KVSender(pm, pm.kv_args.bootstrap_addr, room, [0, 1], 0)
            rs = [KVReceiver(d, d.kv_args.bootstrap_addr, room) for d in dms]
            for k, (r, held) in enumerate(zip(rs, (1, 2))):
                r.init(0)
                r.send_metadata(np.array([9 + k], np.int32), 2, [],
                                decode_prefix_len=held * 4)
            wait_for("prefill Failed", lambda: s.poll() == KVPoll.Failed)
            with pytest.raises(Exception, match=reason_str(R_BAD_INDEX)):
                s.failure_exception()
            for r in rs:
                wait_for("decode Failed", lambda: r.poll() == KVPoll.Failed)
                r.clear()
        finally:
            pm.close()
            for d in dms:
                d.close()
