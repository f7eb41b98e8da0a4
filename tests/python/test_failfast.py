"""test_failfast.py - issue 33 item 4, fail fast and never wrong, through
the package as SGLang calls it: a group stopped under open rooms fails
them, and refuses new calls, naming the cause instead of hanging; a
second live room of one id on one side is refused; SGLang's own call
shapes (state_indices=[], decode_prefix_len=0, clear() after
failure_exception()) are accepted; a bootstrap server that cannot start
says kv-bootstrap's own reason."""
import gc
import socket
import time

import numpy as np
import pytest

from conftest import SHAPE, Group, managers
from kvwire import (KVBootstrapServer, KVPoll, KVReceiver, KVSender,
                    KVTransferError, poll_many)
from kvwire.conn import KVWireError

ROOM = 4242


def polls_until(room, want, bound=2000, poller="poll"):
    """Polls room (each poll reads the table, and the control's liveness
    at most every 0.2 s) until it says want; the bound is a count of
    polls with a pause, never a verdict on time. poller: "poll" (the
    room's own) or "poll_many" (the step's, with its shortcuts)."""
    for _ in range(bound):
        got = room.poll() if poller == "poll" else poll_many([room])[0]
        if got == want:
            return True
        time.sleep(0.01)
    return False


@pytest.mark.parametrize("poller", ["poll", "poll_many"])
def test_a_stopped_group_fails_open_rooms_and_refuses_calls_naming_it(
        poller):
    g = Group(*SHAPE)
    pm, dm = managers(g)
    try:
        # A prefill room no decode asked for, a decode room whose prefill
        # never sends: both would wait (300 s, and for ever) for a group
        # that is gone.
        s = KVSender(pm, pm.kv_args.bootstrap_addr, ROOM, [0], 0)
        r = KVReceiver(dm, dm.kv_args.bootstrap_addr, ROOM + 1)
        r.init(0)
        r.send_metadata(np.array([1, 2], np.int32), 1)
        assert s.poll() == KVPoll.Bootstrapping
        # The decode room's row is in its table before the group stops
        # (poll_many answers a row under way from its state alone, and a
        # missing one from the room's own record: both must see the group
        # gone).
        for _ in range(2000):
            if dm.status(ROOM + 1) is not None:
                break
            time.sleep(0.01)
        assert dm.status(ROOM + 1) is not None
        g.stop()
        assert polls_until(s, KVPoll.Failed, poller=poller)
        assert polls_until(r, KVPoll.Failed, poller=poller)
        for room in (s, r):
            assert "gone" in room.failure_reason
            with pytest.raises(KVTransferError, match="gone"):
                room.failure_exception()
            room.clear()  # SGLang's clear() after it: nothing to do
        late = KVReceiver(dm, dm.kv_args.bootstrap_addr, ROOM + 2)
        late.init(0)
        with pytest.raises(KVWireError, match="gone"):
            late.send_metadata(np.array([1], np.int32), 0)
    finally:
        pm.close()
        dm.close()
        g.stop()


def test_a_second_live_room_of_one_id_on_one_side_is_refused(mgrs):
    pm, dm = mgrs
    addr = dm.kv_args.bootstrap_addr
    first = KVReceiver(dm, addr, ROOM)
    first.init(0)
    first.send_metadata(np.array([3], np.int32), 0)
    # It would read the first one's row: Success over pages it never got.
    with pytest.raises(ValueError, match="room %d is live on .* already: "
                       "clear\\(\\) the KVReceiver" % ROOM):
        KVReceiver(dm, addr, ROOM)
    # The other side's room of the same id is another thing.
    KVSender(pm, pm.kv_args.bootstrap_addr, ROOM, [0], 0).clear()
    first.abort()
    first.clear()
    again = KVReceiver(dm, addr, ROOM)  # cleared: the id may begin again
    again.clear()
    # A room refused half-way (its address too long) holds nothing, even
    # while its traceback keeps the half-made object alive.
    with pytest.raises(ValueError, match="bootstrap address longer") as no:
        KVReceiver(dm, "x" * 5000, ROOM + 5)
    KVReceiver(dm, addr, ROOM + 5).clear()
    assert no.traceback
    # A room the engine dropped without clear() no longer holds the id.
    dropped = KVReceiver(dm, addr, ROOM + 7)
    del dropped
    gc.collect()
    KVReceiver(dm, addr, ROOM + 7).clear()


def test_sglang_call_shapes_are_accepted(mgrs):
    pm, dm = mgrs
    room = ROOM + 100
    r = KVReceiver(dm, dm.kv_args.bootstrap_addr, room)
    r.init(0)
    # SGLang passes one list per state type (none here) and a prefix 0.
    r.send_metadata(np.array([4, 5], np.int32), 2, state_indices=[],
                    decode_prefix_len=0)
    s = KVSender(pm, pm.kv_args.bootstrap_addr, room, [0], 0)
    assert polls_until(s, KVPoll.WaitingForInput)
    s.init(2, 0)
    s.send(np.array([6, 7], np.int32), state_indices=[])
    assert polls_until(r, KVPoll.Success)
    assert polls_until(s, KVPoll.Success)
    s.clear()
    r.clear()
    r.clear()  # twice: nothing


def test_a_bootstrap_server_that_cannot_start_says_why():
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    # tcp without keys or --insecure: kv-bootstrap refuses, and says so.
    with pytest.raises(RuntimeError, match="did not get ready \\(exit 100\\)"
                       ": .*needs the group's keys"):
        KVBootstrapServer("127.0.0.1", port)
