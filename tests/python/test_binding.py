"""test_binding.py - the kvwire package on a live group: every KVPoll
state in the order SGLang's scheduler expects, abort, clear, a failure's
exception text, the zero-copy pool views, and bad use refused with a clear
Python exception."""
import ctypes
import os
import random
import socket
import subprocess
import time

import numpy as np
import pytest

from conftest import BIN, SHAPE
from kvwire import (KVArgs, KVBootstrapServer, KVManager, KVPoll, KVReceiver,
                    KVSender, KVTransferError, make_layout, poll_many,
                    read_run_dir)
from kvwire._lib import lib

def wait_for(what, cond, timeout=20.0):
    """Polls cond() (a read of the mapped room table) until true, bounded."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "gave up waiting for " + what
        time.sleep(0.001)


def room_id():
    return random.randrange(1, 2 ** 63)


def open_room(pm, dm, dst):
    """A fresh room: the decode asked for pages dst (aux slot 1), the
    prefill saw it (WaitingForInput) and said how many pages it sends."""
    room = room_id()
    s = KVSender(pm, pm.kv_args.bootstrap_addr, room, [0], 0)
    r = KVReceiver(dm, dm.kv_args.bootstrap_addr, room)
    r.init(0)
    r.send_metadata(np.array(dst, np.int32), 1)
    wait_for("prefill WaitingForInput",
             lambda: s.poll() == KVPoll.WaitingForInput)
    s.init(len(dst), 0)
    return s, r


def test_layout_is_the_members_layout(group_factory):
    g = group_factory("--prefill-tp", 2, "--draft-layers", 1, *SHAPE)
    members, shape = read_run_dir(g.dir)
    for name, mode, tp in (("p0", "prefill", 0), ("p1", "prefill", 1),
                           ("d0", "decode", 0)):
        with KVManager(KVArgs.from_run_dir(g.dir, mode, tp), mode) as m:
            # KVManager refuses a pool whose size is not the layout's.
            assert m.pool.size == lib.kvw_pool_size(m._e)
            assert m.pool.size == os.path.getsize(members[name].pool)
            a = m.kv_args
            heads = 1 if mode == "prefill" else 2
            assert a.kv_head_num == heads
            assert set(a.kv_item_lens) == {4 * heads * 8 * 4}
            assert m.pool.k(1).shape == (32, 4, heads, 8)
    bufs, size = make_layout(shape, (1, 1, 1, 1), (0, 0, 0, 0), True)
    assert [b.layer_id for b in bufs] == [0, 1, 0, 1, 1000000, 1000000, 0]


def test_states_in_sglang_order_and_bytes_land(mgrs):
    pm, dm = mgrs
    room = room_id()
    src, dst = [3, 4, 5], [20, 7, 11]
    for layer in (0, 1):
        pm.pool.k(layer)[src] = np.arange(192, dtype=np.float32) \
            .reshape(3, 4, 2, 8) + layer
        pm.pool.v(layer)[src] = -1.0 - layer
    pm.pool.aux[6, :4] = [9, 8, 7, 6]
    s = KVSender(pm, pm.kv_args.bootstrap_addr, room, [0], 0)
    r = KVReceiver(dm, dm.kv_args.bootstrap_addr, room)
    seen = {"p": [s.poll()], "d": [r.poll()]}
    r.init(0)
    seen["d"].append(r.poll())
    r.send_metadata(np.array(dst, np.int32), 2)
    seen["d"].append(r.poll())
    wait_for("prefill WaitingForInput",
             lambda: s.poll() == KVPoll.WaitingForInput)
    seen["p"].append(s.poll())
    s.init(3, 6)
    s.send(np.array(src[:2], np.int32))
    wait_for("prefill Transferring", lambda: s.poll() == KVPoll.Transferring)
    seen["p"].append(s.poll())
    s.send(np.array(src[2:], np.int32))  # completes num_kv_indices: last
    wait_for("decode Success", lambda: r.poll() == KVPoll.Success)
    wait_for("prefill Success", lambda: s.poll() == KVPoll.Success)
    seen["p"].append(s.poll())
    seen["d"].append(r.poll())
    assert seen["p"] == [KVPoll.Bootstrapping, KVPoll.WaitingForInput,
                         KVPoll.Transferring, KVPoll.Success]
    assert seen["d"] == [KVPoll.Bootstrapping, KVPoll.WaitingForInput,
                         KVPoll.WaitingForInput, KVPoll.Success]
    for layer in (0, 1):
        assert np.array_equal(dm.pool.k(layer)[dst], pm.pool.k(layer)[src])
        assert np.array_equal(dm.pool.v(layer)[dst], pm.pool.v(layer)[src])
    assert list(dm.pool.aux[2, :4]) == [9, 8, 7, 6]
    assert r.releasable
    s.clear()
    r.clear()
    # A terminal state is latched: poll after clear still says Success.
    assert s.poll() == KVPoll.Success and r.poll() == KVPoll.Success
    with pytest.raises(RuntimeError, match="used after clear"):
        s.send(np.array([1], np.int32))
    s.clear()  # twice: nothing (SGLang clears after failure_exception)
    with pytest.raises(RuntimeError, match="used after clear"):
        r.abort()


def test_decode_abort_releases_and_names_the_reason(mgrs):
    pm, dm = mgrs
    s, r = open_room(pm, dm, [1, 2])
    room = s.bootstrap_room
    s.send(np.array([5], np.int32))
    r.abort()
    assert r.poll() == KVPoll.Failed
    wait_for("decode releasable", lambda: r.releasable)
    wait_for("prefill Failed", lambda: s.poll() == KVPoll.Failed)
    with pytest.raises(KVTransferError, match="prefill room failed on p0: "
                       "aborted") as e:
        s.failure_exception()
    assert e.value.bootstrap_room == room
    with pytest.raises(KVTransferError, match="aborted by the decode"):
        r.failure_exception()
    # failure_exception cleared both rooms.
    with pytest.raises(RuntimeError, match="used after clear"):
        s.send(np.array([6], np.int32))


def test_prefill_abort_fails_the_decode(mgrs):
    pm, dm = mgrs
    s, r = open_room(pm, dm, [3])
    s.abort()
    assert s.poll() == KVPoll.Failed
    wait_for("decode Failed", lambda: r.poll() == KVPoll.Failed)
    with pytest.raises(KVTransferError, match="decode room failed on d0: "
                       "cleared while active"):
        r.failure_exception()
    with pytest.raises(KVTransferError, match="aborted by the prefill"):
        s.failure_exception()


def test_batch_holds_commands_until_its_end(mgrs):
    """KVManager.batch: inside the block the commands are held (none has
    reached the control: the rooms are not in its table); at its end they
    go, in order, and every room moves its bytes to Success on both sides,
    as without the block."""
    pm, dm = mgrs
    pages = [(12, 28), (13, 29), (14, 30)]
    for i, (src, _) in enumerate(pages):
        pm.pool.k(0)[src] = 100.0 + i
        pm.pool.v(1)[src] = -100.0 - i
    senders, receivers = [], []
    with dm.batch():
        for src, dst in pages:
            room = room_id()
            senders.append(KVSender(pm, pm.kv_args.bootstrap_addr, room,
                                    [0], 0))
            r = KVReceiver(dm, dm.kv_args.bootstrap_addr, room)
            r.init(0)
            r.send_metadata(np.array([dst], np.int32), 1)
            receivers.append(r)
        assert lib.kvw_engine_held(dm._e) == 3
        assert dm.statuses([r.bootstrap_room for r in receivers]) == \
            [None] * 3
    assert lib.kvw_engine_held(dm._e) == 0
    wait_for("prefill WaitingForInput", lambda: poll_many(senders) ==
             [KVPoll.WaitingForInput] * 3)
    with pm.batch():
        with pm.batch():  # nested: sent at the outer end
            for s, (src, _) in zip(senders, pages):
                s.init(1, 0)
                s.send(np.array([src], np.int32))
        assert lib.kvw_engine_held(pm._e) == 6
        assert poll_many(senders) == [KVPoll.WaitingForInput] * 3
    wait_for("all Success", lambda: poll_many(senders + receivers) ==
             [KVPoll.Success] * 6)
    for src, dst in pages:
        assert np.array_equal(dm.pool.k(0)[dst], pm.pool.k(0)[src])
        assert np.array_equal(dm.pool.v(1)[dst], pm.pool.v(1)[src])
    with dm.batch():
        for x in senders + receivers:
            x.clear()
    assert lib.kvw_engine_held(dm._e) == 0


def test_poll_many_is_each_rooms_poll(mgrs):
    """Issue 33 item 6: poll_many (one table read per manager) answers for
    every room what its own poll() answers, in every state, over rooms of
    both managers mixed, and raises as poll() does for a cleared room."""
    pm, dm = mgrs
    fresh = KVReceiver(dm, dm.kv_args.bootstrap_addr, room_id())
    inited = KVReceiver(dm, dm.kv_args.bootstrap_addr, room_id())
    inited.init(0)
    s1, r1 = open_room(pm, dm, [1, 2])   # WaitingForInput / Transferring
    s2, r2 = open_room(pm, dm, [3])
    s2.send(np.array([4], np.int32))     # the last chunk: to Success
    s3, r3 = open_room(pm, dm, [5])
    r3.abort()                           # Failed (aborted)
    lone = KVSender(pm, pm.kv_args.bootstrap_addr, room_id(), [0], 0)
    rooms = [fresh, inited, s1, r1, s2, r2, s3, r3, lone, r2]
    wait_for("room 2 done both sides",
             lambda: poll_many([s2, r2]) == [KVPoll.Success] * 2)
    wait_for("room 3 failed both sides",
             lambda: poll_many([s3, r3]) == [KVPoll.Failed] * 2)
    many = poll_many(rooms)
    assert many == [x.poll() for x in rooms]
    assert many[:2] == [KVPoll.Bootstrapping, KVPoll.WaitingForInput]
    assert many[4:8] == [KVPoll.Success, KVPoll.Success, KVPoll.Failed,
                         KVPoll.Failed]
    assert many[8] == KVPoll.Bootstrapping
    assert poll_many([]) == []
    # Past the bootstrap timeout, a prefill room that no decode asked for
    # fails through poll_many (its shortcut for a room not in the table
    # yet) as through poll().
    late = KVSender(pm, pm.kv_args.bootstrap_addr, room_id(), [0], 0)
    waited = pm.kv_args.bootstrap_timeout
    pm.kv_args.bootstrap_timeout = 0.0
    try:
        assert poll_many([late, lone]) == [KVPoll.Failed] * 2
        assert "no decode asked for the room" in late.failure_reason
    finally:
        pm.kv_args.bootstrap_timeout = waited
    late.clear()
    s1.send(np.array([6, 7], np.int32))
    wait_for("room 1 done", lambda: poll_many([s1, r1]) ==
             [KVPoll.Success] * 2)
    for x in (s1, r1, s2, r2, lone, fresh, inited):
        x.clear()
    # A room that ended keeps its state after clear(); one cleared before
    # it ended is spent: poll() raises, and so does poll_many.
    assert poll_many([s1, r1]) == [s1.poll(), r1.poll()] == \
        [KVPoll.Success] * 2
    with pytest.raises(RuntimeError, match="used after clear"):
        fresh.poll()
    with pytest.raises(RuntimeError, match="used after clear"):
        poll_many([s3, fresh])
    for x in (s3, r3):
        with pytest.raises(KVTransferError):
            x.failure_exception()


def test_transfer_metric_is_the_rooms(mgrs):
    """Issue 33 item 2: get_transfer_metric() of a room that succeeded has
    its latency (WaitingForInput to Success on each side's table, within
    the wall time the test saw) and its bytes (the decode's pages of every
    KV buffer and its aux rows; the prefill's, counted by its workers, the
    same here), kept after clear(); None before Success and for a room
    that failed."""
    pm, dm = mgrs
    t0 = time.monotonic()
    s, r = open_room(pm, dm, [9, 10, 11])
    assert s.get_transfer_metric() is None and r.get_transfer_metric() is None
    s.send(np.array([1, 2, 3], np.int32))
    wait_for("both Success", lambda: poll_many([s, r]) ==
             [KVPoll.Success] * 2)
    wall = time.monotonic() - t0
    a = dm.kv_args
    want = 3 * sum(a.kv_item_lens) + sum(a.aux_item_lens)
    for x in (s, r):
        m = x.get_transfer_metric()
        assert 0 < m.transfer_latency_s <= wall, (m, wall)
        assert m.transfer_total_bytes == want
        assert m.alloc_latency_s is None
        x.clear()
        assert x.get_transfer_metric() == m
    s3, r3 = open_room(pm, dm, [5])
    r3.abort()
    wait_for("failed", lambda: poll_many([s3, r3]) == [KVPoll.Failed] * 2)
    assert s3.get_transfer_metric() is None and r3.get_transfer_metric() is None
    for x in (s3, r3):
        with pytest.raises(KVTransferError):
            x.failure_exception()


def test_timeout_is_the_failure_text(group_factory):
    g = group_factory("--waiting-timeout", 1, *SHAPE)
    with KVManager(KVArgs.from_run_dir(g.dir, "decode"), "decode") as dm:
        r = KVReceiver(dm, dm.kv_args.bootstrap_addr, room_id())
        r.init(0)
        r.send_metadata(np.array([0], np.int32), 0)
        wait_for("decode timeout", lambda: r.poll() == KVPoll.Failed)
        with pytest.raises(KVTransferError,
                           match="decode room failed on d0: timeout"):
            r.failure_exception()


def test_pool_views_are_the_engines_memory(mgrs, group):
    pm, dm = mgrs
    k = dm.pool.k(1)
    b = [x for x in dm.pool.buffers if x.layer_id == 1 and x.role == 0][0]
    assert k.ctypes.data == lib.kvw_pool_base(dm._e) + b.offset
    k[17, 2, 1, :] = np.arange(8, dtype=np.float32) + 0.5
    # A C reader: a second engine of the same member maps the pool anew.
    members, _ = read_run_dir(group.dir)
    d0, err = members["d0"], ctypes.create_string_buffer(256)
    e = ctypes.c_void_p()
    assert lib.kvw_engine_open(d0.engine.encode(), d0.table.encode(),
                               d0.pool.encode(), ctypes.byref(e), err,
                               256) == 0, err.value
    try:
        base = lib.kvw_pool_base(e)
        assert base != lib.kvw_pool_base(dm._e)
        off = b.offset + ((17 * 4 + 2) * 2 + 1) * 8 * 4
        got = np.frombuffer(ctypes.string_at(base + off, 32), np.float32)
        assert np.array_equal(got, np.arange(8, dtype=np.float32) + 0.5)
    finally:
        lib.kvw_engine_close(ctypes.byref(e))
    # A view outlives close(): the engine closes once it is gone.
    dm.close()
    assert k[17, 2, 1, 0] == 0.5
    with pytest.raises(RuntimeError, match="manager is closed"):
        dm.pool.k(0)
    r = KVReceiver(dm, "x:1", 5)
    r.init(0)
    with pytest.raises(RuntimeError, match="manager d0 is closed"):
        r.send_metadata(np.array([0], np.int32), 0)


def test_bad_use_is_refused(mgrs, group):
    pm, dm = mgrs
    addr = pm.kv_args.bootstrap_addr
    with pytest.raises(ValueError, match="bootstrap_room"):
        KVSender(pm, addr, None, [0], 0)
    with pytest.raises(ValueError, match="bootstrap_room"):
        KVReceiver(dm, addr, -3)
    s = KVSender(pm, addr, room_id(), [0], 0)
    with pytest.raises(RuntimeError, match="before init"):
        s.send(np.array([1], np.int32))
    with pytest.raises(ValueError, match="num_kv_indices 33 outside"):
        s.init(33, 0)
    with pytest.raises(ValueError, match="aux_index 8 outside"):
        s.init(2, 8)
    s.init(2, 0)
    with pytest.raises(TypeError, match="int32, not int64"):
        s.send(np.array([1], np.int64))
    with pytest.raises(TypeError, match="numpy int32 array, not list"):
        s.send([1])
    with pytest.raises(IndexError, match="page index 32 outside the pool's "
                       "32 pages"):
        s.send(np.array([1, 32], np.int32))
    with pytest.raises(IndexError, match="page index -1"):
        s.send(np.array([-1], np.int32))
    with pytest.raises(ValueError, match="run past the 2 of init"):
        s.send(np.array([1, 2, 3], np.int32))
    with pytest.raises(ValueError, match="state_indices go with the last "
                       "chunk"):
        s.send(np.array([1], np.int32), state_indices=[[1]])
    s.clear()
    with pytest.raises(RuntimeError, match="used after clear"):
        s.send(np.array([1], np.int32))
    with pytest.raises(RuntimeError, match="used after clear"):
        s.init(1, 0)
    r = KVReceiver(dm, addr, room_id())
    with pytest.raises(RuntimeError, match="before init"):
        r.send_metadata(np.array([1], np.int32), 0)
    r.init(0)
    with pytest.raises(ValueError, match="aux_index None"):
        r.send_metadata(np.array([1], np.int32), None)
    with pytest.raises(IndexError, match="page index 99"):
        r.send_metadata(np.array([99], np.int32), 0)
    with pytest.raises(KeyError, match="layer 5 has no K buffer"):
        dm.pool.k(5)
    with pytest.raises(ValueError, match="no decode member at tp 1"):
        KVArgs.from_run_dir(group.dir, "decode", 1)
    with pytest.raises(ValueError, match="dtype float64 is 8 bytes"):
        KVArgs.from_run_dir(group.dir, "decode", dtype=np.float64)


def free_port():
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        return sk.getsockname()[1]


def ping(ep, keys):
    return subprocess.run([os.path.join(BIN, "kv-ctl"), "--keys", keys,
                           "--timeout", "2", "ping", ep],
                          stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def test_bootstrap_server_starts_and_supervises(tmp_path):
    port = free_port()
    keys = str(tmp_path / "keys")
    subprocess.run([os.path.join(BIN, "kv-keygen"), keys], check=True,
                   stdout=subprocess.DEVNULL)
    with KVBootstrapServer("127.0.0.1", port, keys=keys) as b:
        assert b.bootstrap_addr == "127.0.0.1:%d" % port
        assert ping(b.endpoint, keys)
        first = b.proc.pid
        b.proc.kill()
        wait_for("bootstrap restarted",
                 lambda: b.restarts == 1 and b.proc.pid != first)
        wait_for("bootstrap answers", lambda: ping(b.endpoint, keys))
        last = b.proc
    assert last.poll() is not None
