"""test_reuse.py - a room id used again (issue 29, item 4): right after
clear() and a new KVReceiver/KVSender under the same id, poll() never shows
the previous incarnation's Success. The control processes are SIGSTOPped
while the engines clear and begin again, so the table still holds the old
incarnation when they poll (no race to win); once resumed, the new
incarnation runs to Success with its own bytes. A room its decode aborted
before the prefill engine began it is Failed to that engine."""
import os
import signal

import numpy as np

from conftest import Group
from kvwire import KVArgs, KVManager, KVPoll, KVReceiver, KVSender
from test_binding import SHAPE, room_id, wait_for


def pid_of(group, member):
    with open(os.path.join(group.dir, "pids", member + ".pid")) as f:
        return int(f.read().split()[0])


def run_room(pm, dm, room, src, dst, fill):
    for layer in (0, 1):
        pm.pool.k(layer)[src] = fill + layer
    s = KVSender(pm, pm.kv_args.bootstrap_addr, room, [0], 0)
    r = KVReceiver(dm, dm.kv_args.bootstrap_addr, room)
    r.init(0)
    r.send_metadata(np.array(dst, np.int32), 1)
    wait_for("prefill WaitingForInput",
             lambda: s.poll() == KVPoll.WaitingForInput)
    s.init(len(src), 0)
    s.send(np.array(src, np.int32))
    wait_for("decode Success", lambda: r.poll() == KVPoll.Success)
    wait_for("prefill Success", lambda: s.poll() == KVPoll.Success)
    for layer in (0, 1):
        assert np.array_equal(dm.pool.k(layer)[dst], pm.pool.k(layer)[src])
    return s, r


def second_runs(pm, dm, s2, r2):
    """Incarnation 2 (decode pages 12, 13) runs to Success on both sides
    with its own bytes (prefill pages 5, 6), then is cleared."""
    wait_for("prefill WaitingForInput",
             lambda: s2.poll() == KVPoll.WaitingForInput)
    s2.init(2, 0)
    for layer in (0, 1):
        pm.pool.k(layer)[[5, 6]] = 7.0 + layer
    s2.send(np.array([5, 6], np.int32))
    wait_for("decode Success", lambda: r2.poll() == KVPoll.Success)
    wait_for("prefill Success", lambda: s2.poll() == KVPoll.Success)
    for layer in (0, 1):
        assert np.array_equal(dm.pool.k(layer)[[12, 13]],
                              pm.pool.k(layer)[[5, 6]])
    s2.clear()
    r2.clear()


def xfer_infos(group, room):
    """How many XFER_INFOs of room d0 has sent (its debug log)."""
    with open(os.path.join(group.dir, "logs", "d0.log")) as f:
        return sum(1 for line in f
                   if "room %d: XFER_INFO to prefill rank" % room in line)


def held_by_p0(group, room):
    """p0 has held an XFER_INFO of room for the id's next incarnation (its
    debug log)."""
    with open(os.path.join(group.dir, "logs", "p0.log")) as f:
        return any("room %d: XFER_INFO (token" % room in line and
                   "held until this one is cleared" in line for line in f)


def test_decode_begins_again_before_the_prefill_engine_clears():
    """The decode side clears and begins the id again first: its new
    XFER_INFO reaches kv-sender while the prefill engine has not cleared
    the old incarnation (Success, not cleared). It must be held for the
    next incarnation, not dropped as one for a finished room (the new room
    would then wait for a destination until its deadline); the engine's
    CLEAR and SEND_BEGIN come only after kv-sender said it holds it, so
    the order is the test's, not the scheduler's."""
    with Group("--heartbeat-interval", 300, *SHAPE,
               env={"KVW_LOG": "debug"}) as g:
        pm = KVManager(KVArgs.from_run_dir(g.dir, "prefill"), "prefill")
        dm = KVManager(KVArgs.from_run_dir(g.dir, "decode"), "decode")
        try:
            room = room_id()
            s, r = run_room(pm, dm, room, [3, 4], [10, 11], 1.0)
            r.clear()
            r2 = KVReceiver(dm, dm.kv_args.bootstrap_addr, room)
            r2.init(0)
            r2.send_metadata(np.array([12, 13], np.int32), 1)
            wait_for("p0 holding d0's second XFER_INFO",
                     lambda: held_by_p0(g, room))
            s.clear()
            s2 = KVSender(pm, pm.kv_args.bootstrap_addr, room, [0], 0)
            second_runs(pm, dm, s2, r2)
        finally:
            pm.close()
            dm.close()


def test_poll_after_clear_and_rebegin_is_the_new_incarnation():
    with Group("--heartbeat-interval", 300, *SHAPE) as g:
        pm = KVManager(KVArgs.from_run_dir(g.dir, "prefill"), "prefill")
        dm = KVManager(KVArgs.from_run_dir(g.dir, "decode"), "decode")
        stopped = []
        try:
            room = room_id()
            s, r = run_room(pm, dm, room, [3, 4], [10, 11], 1.0)
            for m in ("p0", "d0"):
                os.kill(pid_of(g, m), signal.SIGSTOP)
                stopped.append(m)
            s.clear()
            r.clear()
            s2 = KVSender(pm, pm.kv_args.bootstrap_addr, room, [0], 0)
            r2 = KVReceiver(dm, dm.kv_args.bootstrap_addr, room)
            r2.init(0)
            r2.send_metadata(np.array([12, 13], np.int32), 1)
            # The table still holds incarnation 1 (Success) on both sides.
            assert dm.status(room) is None
            assert pm.status(room) is None
            assert r2.poll() == KVPoll.WaitingForInput
            assert s2.poll() == KVPoll.Bootstrapping
            for m in stopped:
                os.kill(pid_of(g, m), signal.SIGCONT)
            stopped = []
            second_runs(pm, dm, s2, r2)
        finally:
            for m in stopped:
                os.kill(pid_of(g, m), signal.SIGCONT)
            pm.close()
            dm.close()


def test_a_room_its_decode_aborted_before_the_prefill_began_is_failed():
    """The decode's XFER_INFO opens the prefill's room and its ABORT fails
    it, both before the prefill engine's SEND_BEGIN (as vLLM's connector
    begins a send after the decode gave up on it): kv-sender ignores that
    SEND_BEGIN, so the engine's poll must show the Failed (aborted) at once.
    It showed Bootstrapping until the engine's own bootstrap timeout: the
    row, over, was taken for an earlier incarnation of the id."""
    with Group(*SHAPE) as g:
        pm = KVManager(KVArgs.from_run_dir(g.dir, "prefill"), "prefill")
        dm = KVManager(KVArgs.from_run_dir(g.dir, "decode"), "decode")
        try:
            # A room first, so the decode knows the prefill rank and its
            # XFER_INFO goes out at RECV_BEGIN, before the abort.
            s, r = run_room(pm, dm, room_id(), [1], [2], 1.0)
            s.clear()
            r.clear()
            room = room_id()
            r = KVReceiver(dm, dm.kv_args.bootstrap_addr, room)
            r.init(0)
            r.send_metadata(np.array([3], np.int32), 1)
            r.abort()
            # Acked: kv-sender has failed the room it opened.
            wait_for("decode releasable", lambda: r.releasable)
            s = KVSender(pm, pm.kv_args.bootstrap_addr, room, [0], 0)
            s.init(1, 0)
            wait_for("prefill Failed", lambda: s.poll() == KVPoll.Failed)
            assert "abort" in s.failure_reason, s.failure_reason
            s.clear()
            r.clear()
            # The id again, begun by both: its own room, Success.
            s, r = run_room(pm, dm, room, [5], [6], 3.0)
            s.clear()
            r.clear()
        finally:
            pm.close()
            dm.close()


def test_an_engine_never_reads_a_room_another_engine_left_over():
    """Both engines close with their room over (Success) and not cleared;
    the next engine process on each rank begins the same id: the row it
    finds is not its room (an engine began it: RTAB_F_BEGUN), so its poll
    never shows that Success."""
    with Group(*SHAPE) as g:
        pm = KVManager(KVArgs.from_run_dir(g.dir, "prefill"), "prefill")
        dm = KVManager(KVArgs.from_run_dir(g.dir, "decode"), "decode")
        room = room_id()
        try:
            run_room(pm, dm, room, [1], [2], 1.0)
        finally:
            pm.close()
            dm.close()
        pm = KVManager(KVArgs.from_run_dir(g.dir, "prefill"), "prefill")
        dm = KVManager(KVArgs.from_run_dir(g.dir, "decode"), "decode")
        try:
            for m in (pm, dm):
                assert m.status(room).state == KVPoll.Success  # still there
            s = KVSender(pm, pm.kv_args.bootstrap_addr, room, [0], 0)
            s.init(1, 0)
            r = KVReceiver(dm, dm.kv_args.bootstrap_addr, room)
            r.init(0)
            r.send_metadata(np.array([2], np.int32), 1)
            assert s.poll() == KVPoll.Bootstrapping
            assert r.poll() == KVPoll.WaitingForInput
        finally:
            pm.close()
            dm.close()
