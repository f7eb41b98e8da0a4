"""test_abort_early.py - an abort the decode engine makes before kvwire
knows its prefill ranks still reaches them. The decode's kv-receiver looks
the prefill ranks up at the bootstrap when it first meets a prefill
instance; an abort in that moment was released at once ("no target got
XFER_INFO") and told no one, so a prefill room already begun waited for
its decode until its bootstrap timeout (300 s by default). The bootstrap
is SIGSTOPped across the decode's begin and abort, so the lookup is still
unanswered when the abort comes (no race to win); once it answers, the
prefill rank is told and its room fails, aborted, and the decode's room
becomes releasable."""
import os
import signal

import numpy as np

from conftest import SHAPE, Group, managers
from kvwire import KVPoll, KVReceiver, KVSender
from test_binding import room_id, wait_for


def pid_of(group, member):
    with open(os.path.join(group.dir, "pids", member + ".pid")) as f:
        return int(f.read().split()[0])


def test_an_abort_before_the_lookup_answered_fails_the_prefill_room():
    with Group(*SHAPE, env={"KVW_LOG": "debug"}) as g:
        pm, dm = managers(g)
        boot = pid_of(g, "bootstrap")
        stopped = False
        try:
            room = room_id()
            s = KVSender(pm, pm.kv_args.bootstrap_addr, room, [0], 0)
            s.init(2, 0)  # the prefill's room waits for its decode
            os.kill(boot, signal.SIGSTOP)
            stopped = True
            r = KVReceiver(dm, dm.kv_args.bootstrap_addr, room)
            r.init(0)
            r.send_metadata(np.array([4, 5], np.int32), 1)
            r.abort()
            os.kill(boot, signal.SIGCONT)
            stopped = False
            wait_for("prefill Failed", lambda: s.poll() == KVPoll.Failed)
            assert "abort" in s.failure_reason, s.failure_reason
            wait_for("decode releasable", lambda: r.releasable)
            with open(os.path.join(g.dir, "logs", "d0.log")) as f:
                log = f.read()
            # The abort came while the lookup was unanswered (the path
            # under test, not an abort after XFER_INFO).
            assert "room %d: aborted while its prefill ranks are looked " \
                "up" % room in log, log[-2000:]
            assert "room %d: aborted before its XFER_INFO: 1 of 1 prefill " \
                "targets told" % room in log, log[-2000:]
            s.clear()
            r.clear()
        finally:
            if stopped:
                os.kill(boot, signal.SIGCONT)
            pm.close()
            dm.close()


def abort_unbegun(g, pm, dm, stop_bootstrap):
    """A decode request init()ed and aborted before send_metadata (SGLang
    aborts requests of its prealloc queue so): its prefill room fails,
    aborted; the decode's room is Failed and releasable. stop_bootstrap:
    the lookup still unanswered when the abort comes (the bootstrap
    SIGSTOPped across the decode's init and abort)."""
    boot = pid_of(g, "bootstrap")
    room = room_id()
    s = KVSender(pm, pm.kv_args.bootstrap_addr, room, [0], 0)
    s.init(2, 0)
    if stop_bootstrap:
        os.kill(boot, signal.SIGSTOP)
    try:
        r = KVReceiver(dm, dm.kv_args.bootstrap_addr, room)
        r.init(0)
        r.abort()
    finally:
        if stop_bootstrap:
            os.kill(boot, signal.SIGCONT)
    wait_for("prefill Failed", lambda: s.poll() == KVPoll.Failed)
    assert "abort" in s.failure_reason, s.failure_reason
    wait_for("decode releasable", lambda: r.releasable)
    assert r.poll() == KVPoll.Failed
    s.clear()
    r.clear()
    return room


def test_an_abort_before_send_metadata_fails_the_prefill_room():
    """As SGLang's backends tell the prefill ranks they resolved at init:
    kvwire begins a room of no page and no aux row (KVW_NO_AUX), its
    prefill ranks a dummy destination of it, and aborts it at once; with
    the prefill ranks known (a room before it) and while still looked
    up. Nothing of the decode's memory is written: the prefill never
    reached a chunk, and a dummy destination gets no job."""
    with Group(*SHAPE, env={"KVW_LOG": "debug"}) as g:
        pm, dm = managers(g)
        try:
            cold = abort_unbegun(g, pm, dm, stop_bootstrap=True)
            warm = abort_unbegun(g, pm, dm, stop_bootstrap=False)
            with open(os.path.join(g.dir, "logs", "d0.log")) as f:
                log = f.read()
            assert "room %d: aborted before its XFER_INFO: 1 of 1 prefill " \
                "targets told" % cold in log, log[-2000:]
            assert "room %d: ABORT (aborted) sent to 1 targets" % warm in log, \
                log[-2000:]
        finally:
            pm.close()
            dm.close()
