"""test_state.py - state components (issue 32 item 3) on a live group: a
room's state rows move with its last chunk, each to the rows the decode
named, by the component's kind (a Mamba-like slot, SWA-like pages with a
page of drift, position rows that must match), and nothing else of any
state buffer changes; a room that breaks a kind's rule, or names a row
outside its component, fails with bad index before its last job moves;
a TP 2 -> 1 group sends a replicated component from one prefill rank, and
a sharded one each rank's part of a row (TP 2 -> 1 and 1 -> 2);
with PP 2 -> 1 each stage sends its layers' rows, and its share of a
component's own layers (:layers=N);
an engine with no state passes [] or None and nothing happens."""
import glob
import os

import numpy as np
import pytest

from conftest import SHAPE
from kvwire import KVPoll, KVReceiver, KVSender
from kvwire._lib import FAILED, R_BAD_INDEX
from test_binding import room_id, wait_for

# slot: 4 request slots of 24 bytes; paged: 32 rows of 16 bytes (SWA
# pages); exact: 8 rows of 8 bytes (a ring of positions).
STATE = "slot:4:24,paged:32:16,exact:8:8"
GROUP_ARGS = SHAPE + ["--state", STATE]


def fill(pool, seed, ncomp=3):
    """Every state row of every layer random; returns a copy of each."""
    rng = np.random.default_rng(seed)
    out = {}
    for c in range(ncomp):
        for layer in (0, 1):
            b = pool.state(c, layer)
            b[:] = rng.integers(0, 256, b.shape, dtype=np.uint8)
            out[c, layer] = b.copy()
    return out


def room(pm, dm, dst_state, src_state, pages=(3, 4), dst=(10, 11)):
    """One room of two pages with the given state lists; returns (s, r)
    once both ended."""
    rid = room_id()
    s = KVSender(pm, pm.kv_args.bootstrap_addr, rid, [0], 0)
    r = KVReceiver(dm, dm.kv_args.bootstrap_addr, rid)
    r.init(0)
    r.send_metadata(np.array(dst, np.int32), 1, dst_state)
    wait_for("prefill WaitingForInput",
             lambda: s.poll() in (KVPoll.WaitingForInput, KVPoll.Failed))
    s.init(len(pages), 2)
    s.send(np.array(pages, np.int32), src_state)
    wait_for("decode ends", lambda: r.poll() in (KVPoll.Success,
                                                 KVPoll.Failed))
    wait_for("prefill ends", lambda: s.poll() in (KVPoll.Success,
                                                  KVPoll.Failed))
    return s, r


def succeeded(r, senders):
    """Waits until the decode room r ends, asserts Success, then waits for
    every prefill sender's Success."""
    wait_for("decode ends", lambda: r.poll() in (KVPoll.Success,
                                                 KVPoll.Failed))
    assert r.poll() == KVPoll.Success
    for s in senders:
        wait_for("prefill Success", lambda: s.poll() == KVPoll.Success)


def moved(dm_before, dm, pm_rows, moves):
    """Every decode state row is as before except the (c, dst_row) of
    moves, which hold the prefill's (c, src_row), in every layer."""
    for (c, layer), before in dm_before.items():
        want = before.copy()
        for mc, src_row, dst_row in moves:
            if mc == c:
                want[dst_row] = pm_rows[c, layer][src_row]
        assert np.array_equal(dm.pool.state(c, layer), want), (c, layer)


def test_each_kind_moves_its_rows_and_nothing_else(mgrs):
    pm, dm = mgrs
    src = fill(pm.pool, 1)
    before = fill(dm.pool, 2)
    s, r = room(pm, dm, [[2], [5, 6, 7], [0, 1]], [[1], [9, 10, 11], [6, 7]])
    assert (r.poll(), s.poll()) == (KVPoll.Success, KVPoll.Success)
    moved(before, dm, src, [(0, 1, 2), (1, 9, 5), (1, 10, 6), (1, 11, 7),
                            (2, 6, 0), (2, 7, 1)])
    s.clear()
    r.clear()


def test_paged_drift_moves_the_shorter_list_and_a_component_not_asked_is_not_sent(mgrs):
    pm, dm = mgrs
    src = fill(pm.pool, 3)
    before = fill(dm.pool, 4)
    # the prefill has one page more than the decode (SGLang's drift); the
    # decode names no slot row: the prefill's slot row is not sent
    s, r = room(pm, dm, [[], [20, 21], None], [[3], [1, 2, 3], []])
    assert (r.poll(), s.poll()) == (KVPoll.Success, KVPoll.Success)
    moved(before, dm, src, [(1, 1, 20), (1, 2, 21)])
    s.clear()
    r.clear()


def logs_say(group, text):
    for f in glob.glob(os.path.join(group.dir, "logs", "*.log")):
        with open(f, errors="replace") as fh:
            if text in fh.read():
                return True
    return False


@pytest.mark.parametrize("dst_state,src_state,why", [
    ([[1]], [[1, 2]], "slot): 2 source and 1 destination rows"),
    ([[], [], [0, 1]], [[], [], [0]], "exact): 1 source and 2 destination"),
    ([[], [4]], [[], []], "the decode named 1 rows, the prefill sent none"),
    ([[], [3]], [[], [40]], "row 40 (source)"),
])
def test_a_rule_broken_fails_the_room_and_moves_nothing(group, mgrs,
                                                        dst_state,
                                                        src_state, why):
    pm, dm = mgrs
    fill(pm.pool, 5)
    before = fill(dm.pool, 6)
    k_before = dm.pool.k(0)[[10, 11]].copy()
    s, r = room(pm, dm, dst_state, src_state)
    assert r.poll() == KVPoll.Failed and s.poll() == KVPoll.Failed
    st = dm.status(r.bootstrap_room)
    assert st.state == FAILED and st.reason == R_BAD_INDEX
    wait_for("the reason in a log", lambda: logs_say(group, why))
    moved(before, dm, {}, [])
    # the last job never went: neither its pages nor any state row moved
    assert np.array_equal(dm.pool.k(0)[[10, 11]], k_before)
    s.clear()
    r.clear()


@pytest.mark.parametrize("dst_state", [
    [[4]],                       # slot row outside the 4 slots
    [[0, 1]],                    # two rows of a slot component
    [[], [], [8]],               # exact row outside the 8
    [[], [], [], [0]],           # a fourth list: the layout has three
])
def test_a_decode_row_outside_its_component_fails_at_begin(mgrs, dst_state):
    pm, dm = mgrs
    rid = room_id()
    r = KVReceiver(dm, dm.kv_args.bootstrap_addr, rid)
    r.init(0)
    r.send_metadata(np.array([1], np.int32), 1, dst_state)
    wait_for("decode fails", lambda: r.poll() == KVPoll.Failed)
    assert dm.status(rid).reason == R_BAD_INDEX
    r.clear()


def test_no_state_passes_empty_lists(mgrs):
    pm, dm = mgrs
    before = fill(dm.pool, 7)
    for st in ([], None, [[], [], []], [None, None]):
        s, r = room(pm, dm, st, st)
        assert (r.poll(), s.poll()) == (KVPoll.Success, KVPoll.Success)
        s.clear()
        r.clear()
    moved(before, dm, {}, [])


def test_state_rows_go_with_the_last_chunk_only(mgrs):
    pm, dm = mgrs
    rid = room_id()
    s = KVSender(pm, pm.kv_args.bootstrap_addr, rid, [0], 0)
    s.init(2, 0)
    with pytest.raises(ValueError, match="go with the last chunk"):
        s.send(np.array([1], np.int32), [[1]])
    with pytest.raises(TypeError, match="state list 0"):
        s.send(np.array([1, 2], np.int32), [["a"]])
    s.clear()


def test_tp2_to_1_a_replicated_component_comes_from_one_prefill_rank(
        group_factory):
    from kvwire import KVArgs, KVManager
    g = group_factory("--prefill-tp", 2, *SHAPE, "--state",
                      "slot:4:24:rep,paged:32:16:rep")
    p0 = KVManager(KVArgs.from_run_dir(g.dir, "prefill", 0), "prefill")
    p1 = KVManager(KVArgs.from_run_dir(g.dir, "prefill", 1), "prefill")
    dm = KVManager(KVArgs.from_run_dir(g.dir, "decode"), "decode")
    try:
        src0 = fill(p0.pool, 8, 2)
        fill(p1.pool, 9, 2)
        before = fill(dm.pool, 10, 2)
        rid = room_id()
        r = KVReceiver(dm, dm.kv_args.bootstrap_addr, rid)
        r.init(0)
        r.send_metadata(np.array([10, 11], np.int32), 1, [[2], [5, 6]])
        senders = [KVSender(m, m.kv_args.bootstrap_addr, rid, [0], 0)
                   for m in (p0, p1)]
        for s in senders:
            wait_for("prefill WaitingForInput",
                     lambda: s.poll() == KVPoll.WaitingForInput)
        senders[0].init(2, 2)
        senders[0].send(np.array([3, 4], np.int32), [[1], [9, 10]])
        # rank 1 names a slot row outside its 4 slots and other pages: if
        # it sent the replicated rows, its room would fail (bad index) or
        # its bytes would land
        senders[1].init(2, 2)
        senders[1].send(np.array([3, 4], np.int32), [[999], [30, 31]])
        succeeded(r, senders)
        moved(before, dm, src0, [(0, 1, 2), (1, 9, 5), (1, 10, 6)])
        for x in (*senders, r):
            x.clear()
    finally:
        for m in (p0, p1, dm):
            m.close()


def test_pp2_to_1_each_stage_sends_the_state_rows_of_its_layers(
        group_factory):
    """PP: each prefill stage holds the state buffers of its layers only
    (layer 0 on stage 0, layer 1 on stage 1 here) and sends their rows
    with its own last chunk; the decode, one stage, gets layer 0's rows
    from stage 0 and layer 1's from stage 1 (different bytes on each
    stage, so a row from the wrong stage shows), and the room succeeds
    only once both stages' rows landed."""
    from kvwire import KVArgs, KVManager
    g = group_factory("--prefill-pp", 2, *SHAPE, "--state", STATE)
    stages = [KVManager(KVArgs.from_run_dir(g.dir, "prefill", 0, pp),
                        "prefill") for pp in (0, 1)]
    dm = KVManager(KVArgs.from_run_dir(g.dir, "decode"), "decode")
    try:
        src = {}
        for pp, m in enumerate(stages):
            with pytest.raises(KeyError):
                m.pool.state(0, 1 - pp)  # the other stage's layer
            rng = np.random.default_rng(20 + pp)
            for c in range(3):
                b = m.pool.state(c, pp)
                b[:] = rng.integers(0, 256, b.shape, dtype=np.uint8)
                src[c, pp] = b.copy()
        before = fill(dm.pool, 22)
        rid = room_id()
        r = KVReceiver(dm, dm.kv_args.bootstrap_addr, rid)
        r.init(0)
        r.send_metadata(np.array([10, 11], np.int32), 1,
                        [[2], [5, 6], [0]])
        senders = [KVSender(m, m.kv_args.bootstrap_addr, rid, [0], pp)
                   for pp, m in enumerate(stages)]
        for s in senders:
            wait_for("prefill WaitingForInput",
                     lambda: s.poll() == KVPoll.WaitingForInput)
        senders[0].init(2, 2)
        senders[0].send(np.array([3, 4], np.int32), [[1], [9, 10], [4]])
        assert r.poll() != KVPoll.Success  # stage 1 has sent nothing
        senders[1].init(2, 2)
        senders[1].send(np.array([3, 4], np.int32), [[1], [9, 10], [4]])
        succeeded(r, senders)
        moved(before, dm, src, [(0, 1, 2), (1, 9, 5), (1, 10, 6),
                                (2, 4, 0)])
        for x in (*senders, r):
            x.clear()
    finally:
        for m in (*stages, dm):
            m.close()


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_components_of_their_own_layers_split_over_the_pp_stages(
        group_factory, transport):
    """--state KIND:ROWS:BYTES:layers=N: a component of N buffers of its
    own (a hybrid model's Mamba or SWA layers are not its attention
    layers: SGLang lists them apart), split over the PP stages by the
    layers' rule: 3 slot buffers and 5 paged ones over 2 stages are
    2 + 1 and 3 + 2. The decode (one stage) holds all eight and gets each
    buffer's rows from the stage that holds it (different bytes on each
    stage, so a row from the wrong stage shows); on tcp the grant lets a
    stage write its share of them (stage 1's buffers 2 and 3, 4 lie past
    its one model layer)."""
    from kvwire import KVArgs, KVManager
    own = (3, 5)
    g = group_factory("--prefill-pp", 2, *SHAPE, "--state",
                      "slot:4:24:layers=3,paged:32:16:layers=5",
                      "--transport", transport)
    stages = [KVManager(KVArgs.from_run_dir(g.dir, "prefill", 0, pp),
                        "prefill") for pp in (0, 1)]
    dm = KVManager(KVArgs.from_run_dir(g.dir, "decode"), "decode")
    shares = ({0: (0, 1), 1: (0, 1, 2)}, {0: (2,), 1: (3, 4)})
    try:
        src = {}
        for pp, m in enumerate(stages):
            rng = np.random.default_rng(50 + pp)
            for c, n in enumerate(own):
                for i in range(n):
                    if i not in shares[pp][c]:
                        with pytest.raises(KeyError):
                            m.pool.state(c, i)  # the other stage's
                        continue
                    b = m.pool.state(c, i)
                    b[:] = rng.integers(0, 256, b.shape, dtype=np.uint8)
                    src[c, i] = b.copy()
        rng = np.random.default_rng(52)
        before = {}
        for c, n in enumerate(own):
            with pytest.raises(KeyError):
                dm.pool.state(c, n)
            for i in range(n):
                b = dm.pool.state(c, i)
                b[:] = rng.integers(0, 256, b.shape, dtype=np.uint8)
                before[c, i] = b.copy()
        rid = room_id()
        r = KVReceiver(dm, dm.kv_args.bootstrap_addr, rid)
        r.init(0)
        r.send_metadata(np.array([10, 11], np.int32), 1, [[2], [5, 6]])
        senders = [KVSender(m, m.kv_args.bootstrap_addr, rid, [0], pp)
                   for pp, m in enumerate(stages)]
        for s in senders:
            wait_for("prefill WaitingForInput",
                     lambda: s.poll() == KVPoll.WaitingForInput)
            s.init(2, 2)
            s.send(np.array([3, 4], np.int32), [[1], [9, 10]])
        succeeded(r, senders)
        moved(before, dm, src, [(0, 1, 2), (1, 9, 5), (1, 10, 6)])
        for x in (*senders, r):
            x.clear()
    finally:
        for m in (*stages, dm):
            m.close()


def sharded_room(g, ptp, dtp):
    """One room of a group whose components are sharded over TP (each
    rank holds its part of a row, part r of tp: SGLang's Mamba state
    sliced by its sharded dim): every prefill rank's rows random, the
    decode names slot row 2 and paged rows 5, 6; returns (the prefill
    rows by rank, the decode's rows before, by rank, the decode
    managers) once the room succeeded."""
    from kvwire import KVArgs, KVManager
    pms = [KVManager(KVArgs.from_run_dir(g.dir, "prefill", r), "prefill")
           for r in range(ptp)]
    dms = [KVManager(KVArgs.from_run_dir(g.dir, "decode", r), "decode")
           for r in range(dtp)]
    try:
        src = [fill(m.pool, 30 + r, 2) for r, m in enumerate(pms)]
        before = [fill(m.pool, 40 + r, 2) for r, m in enumerate(dms)]
        rid = room_id()
        rs = [KVReceiver(m, m.kv_args.bootstrap_addr, rid) for m in dms]
        for r in rs:
            r.init(0)
            r.send_metadata(np.array([10, 11], np.int32), 1, [[2], [5, 6]])
        ss = [KVSender(m, m.kv_args.bootstrap_addr, rid, None, 0)
              for m in pms]
        for s in ss:
            wait_for("prefill WaitingForInput",
                     lambda: s.poll() == KVPoll.WaitingForInput)
            s.init(2, 2)
            s.send(np.array([3, 4], np.int32), [[1], [9, 10]])
        for r in rs:
            wait_for("decode Success", lambda: r.poll() == KVPoll.Success)
        for s in ss:
            wait_for("prefill Success", lambda: s.poll() == KVPoll.Success)
        after = [{k: m.pool.state(*k).copy() for k in before[0]}
                 for m in dms]
        for x in (*ss, *rs):
            x.clear()
        return src, before, after
    finally:
        for m in (*pms, *dms):
            m.close()


@pytest.mark.parametrize("ptp,dtp,transport", [
    (2, 1, "shm"), (2, 1, "tcp"), (1, 2, "shm"), (1, 2, "tcp")])
def test_a_sharded_component_moves_each_ranks_part_of_a_row_under_tp_mismatch(
        group_factory, ptp, dtp, transport):
    """Issue 32 item 3, TP-sharded state: rank r of tp holds part r of
    every row. Prefill TP 2 -> decode TP 1: the decode's row is prefill
    rank 0's row then rank 1's; TP 1 -> 2: decode rank r gets part r of
    the prefill's row; every other byte of every state buffer stays (on
    tcp each prefill rank may write only its part: the grant)."""
    g = group_factory("--prefill-tp", ptp, "--decode-tp", dtp,
                      *SHAPE, "--state", "slot:4:48,paged:32:32",
                      "--transport", transport)
    src, before, after = sharded_room(g, ptp, dtp)
    moves = [(0, 1, 2), (1, 9, 5), (1, 10, 6)]
    for d in range(dtp):
        for (c, layer), got in after[d].items():
            want = before[d][c, layer].copy()
            for mc, srow, drow in moves:
                if mc != c:
                    continue
                if ptp > dtp:  # the decode row: every prefill rank's part
                    want[drow] = np.concatenate(
                        [src[p][c, layer][srow] for p in range(ptp)])
                else:  # this decode rank's part of the prefill's row
                    n = want.shape[1]
                    want[drow] = src[0][c, layer][srow][d * n:(d + 1) * n]
            assert np.array_equal(got, want), (d, c, layer)


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_state_rows_move_on_each_transport_and_tcp_sinks_take_only_granted_rows(
        group_factory, transport):
    """On tcp a sink writes a row only if the decode granted it to the
    room (lib/table/rtab_grant.h: state-row owner maps): rows land as on
    shm, and a second room reusing the same rows after the first was
    cleared gets them."""
    from conftest import managers
    g = group_factory(*SHAPE, "--state", STATE, "--transport", transport)
    pm, dm = managers(g)
    try:
        for seed in (11, 12):
            src = fill(pm.pool, seed)
            before = fill(dm.pool, seed + 10)
            s, r = room(pm, dm, [[3], [0, 31], [7]], [[0], [4, 5], [2]])
            assert (r.poll(), s.poll()) == (KVPoll.Success, KVPoll.Success)
            moved(before, dm, src, [(0, 0, 3), (1, 4, 0), (1, 5, 31),
                                    (2, 2, 7)])
            s.clear()
            r.clear()
    finally:
        pm.close()
        dm.close()
