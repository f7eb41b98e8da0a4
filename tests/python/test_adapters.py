"""test_adapters.py - the SGLang adapter's classes drive one room the way
SGLang's scheduler would (without SGLang: its base classes are absent
here), with SGLang's metadata buffers where SGLang allocates them; the
vLLM adapter imports. Neither is tested against the engine."""
import os
import signal
import time
import types

import numpy as np
import pytest

from conftest import ROOT, Group, run_probe
from kvwire import KVPoll
from kvwire.adapters import sglang, vllm


SMALL = ["--layers", 1, "--heads", 1, "--head-dim", 4, "--page-tokens", 2,
         "--pages", 8, "--aux-slots", 4, "--workers", 1]


def sglang_managers(monkeypatch, g):
    """The SGLang adapter's prefill and decode managers on group g's first
    ranks (KV in kvwire's pool), and the prefill's bootstrap address."""
    monkeypatch.setenv("KVW_RUN_DIR", g.dir)
    args = types.SimpleNamespace(engine_rank=0, pp_rank=0, kv_data_ptrs=[])
    pm = sglang.get_kv_class("manager")(args, "prefill")
    dm = sglang.get_kv_class("manager")(args, "decode")
    return pm, dm, pm.kw.kv_args.bootstrap_addr


def test_sglang_classes_move_a_room(monkeypatch):
    with Group(*SMALL) as g:
        pm, dm, addr = sglang_managers(monkeypatch, g)
        # SGLang's decode prealloc queue: the prefill instance's layout by
        # its bootstrap address before it picks the prefill DP rank.
        assert dm.try_ensure_parallel_info(addr)
        info = dm.prefill_info_table[addr]
        assert (info.dp_size, info.attn_tp_size, info.pp_size,
                info.page_size, info.follow_bootstrap_room) == \
            (1, 1, 1, 2, True)
        assert not dm.try_ensure_parallel_info("ipc://" + g.dir + "/none")
        assert "ipc://" + g.dir + "/none" not in dm.prefill_info_table
        s = sglang.get_kv_class("sender")(pm, addr, 99, [0], 0)
        r = sglang.get_kv_class("receiver")(dm, addr, 99)
        r.init(0)
        r.send_metadata(np.array([5], np.int32), 1)
        deadline = time.monotonic() + 20
        while s.poll() != KVPoll.WaitingForInput:
            assert time.monotonic() < deadline
            time.sleep(0.001)
        s.init(1, 2)
        s.send(np.array([3], np.int32))
        while r.poll() != KVPoll.Success or s.poll() != KVPoll.Success:
            assert time.monotonic() < deadline
            time.sleep(0.001)
        # SGLang logs each room's transfer metric: real figures here.
        for x in (s, r):
            m = x.get_transfer_metric()
            assert m.transfer_latency_s > 0
            assert m.transfer_total_bytes == \
                sum(dm.kw.kv_args.kv_item_lens) + \
                sum(dm.kw.kv_args.aux_item_lens)
        s.clear()
        r.clear()
        pm.kw.close()
        dm.kw.close()
    assert vllm.KvwireConnector.get_finished


def sglang_metadata(rows, item_lens):
    """Metadata buffers as SGLang's MetadataBuffers allocates them: its own
    memory (numpy here, torch CPU tensors there), outside kvwire's pool."""
    bufs = [np.zeros((rows, n), np.uint8) for n in item_lens]
    return bufs, dict(aux_data_ptrs=[b.ctypes.data for b in bufs],
                      aux_data_lens=[b.nbytes for b in bufs],
                      aux_item_lens=list(item_lens))


def test_sglang_metadata_buffers_stay_sglangs(monkeypatch):
    """Issue 33 item 2: the request's row of each of SGLang's own metadata
    buffers reaches the decode's row of its own buffers before poll() says
    Success, and no other row changes; a group whose --aux-bytes or
    --aux-slots do not fit SGLang's buffers is refused naming the flags."""
    items = [64, 24, 40]
    with Group("--layers", 1, "--heads", 1, "--head-dim", 4, "--page-tokens",
               2, "--pages", 8, "--aux-slots", 4, "--aux-bytes",
               ",".join(map(str, items)), "--workers", 1) as g:
        monkeypatch.setenv("KVW_RUN_DIR", g.dir)
        pbufs, pmeta = sglang_metadata(4, items)
        dbufs, dmeta = sglang_metadata(4, items)
        cls = sglang.get_kv_class("manager")
        pm = cls(types.SimpleNamespace(engine_rank=0, pp_rank=0, **pmeta),
                 "prefill")
        dm = cls(types.SimpleNamespace(engine_rank=0, pp_rank=0, **dmeta),
                 "decode")
        for i, b in enumerate(pbufs):
            b[:] = np.arange(b.size, dtype=np.uint32).reshape(b.shape) * \
                (i + 3) % 251
        addr = pm.kw.kv_args.bootstrap_addr
        s = sglang.get_kv_class("sender")(pm, addr, 98, [0], 0)
        r = sglang.get_kv_class("receiver")(dm, addr, 98)
        r.init(0)
        r.send_metadata(np.array([2, 3], np.int32), 1)  # decode row 1
        deadline = time.monotonic() + 20
        while s.poll() != KVPoll.WaitingForInput:
            assert time.monotonic() < deadline
            time.sleep(0.001)
        s.init(2, 3)  # prefill row 3
        s.send(np.array([4], np.int32))
        assert not any(b.any() for b in dbufs)
        s.send(np.array([5], np.int32))  # the last chunk
        while r.poll() != KVPoll.Success:
            assert time.monotonic() < deadline
            time.sleep(0.001)
        for p, d in zip(pbufs, dbufs):
            assert (d[1] == p[3]).all() and d[1].any()
            assert not d[[0, 2, 3]].any()
        s.clear()
        r.clear()
        pm.kw.close()
        dm.kw.close()
        for bad in ([64, 24], [64, 24, 41]):
            _, meta = sglang_metadata(4, bad)
            with pytest.raises(RuntimeError, match="--aux-bytes " +
                               ",".join(map(str, bad))):
                cls(types.SimpleNamespace(engine_rank=0, pp_rank=0, **meta),
                    "decode")
        _, meta = sglang_metadata(5, items)
        with pytest.raises(RuntimeError, match="--aux-slots 5"):
            cls(types.SimpleNamespace(engine_rank=0, pp_rank=0, **meta),
                "decode")


def abort_with_the_prefill_stopped(g, sender, abort, unsettled):
    """Once the prefill room has its decode's XFER_INFO, stops group g's
    prefill rank (SIGSTOP: no ABORT_ACK can come, and on shm its worker
    could still be copying), calls abort() and then unsettled() over 200
    polls; the rank resumes after, whatever happened."""
    deadline = time.monotonic() + 30
    while sender.poll() != KVPoll.WaitingForInput:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    p0 = int(open(os.path.join(g.dir, "pids", "p0.pid")).read())
    os.kill(p0, signal.SIGSTOP)
    try:
        abort()
        for _ in range(200):
            unsettled()
            time.sleep(0.005)
    finally:
        os.kill(p0, signal.SIGCONT)


def test_sglang_decode_says_failed_only_once_the_pages_are_free(
        monkeypatch):
    """SGLang frees a request's pages when poll() says Failed. A room the
    decode aborts while its prefill rank is stopped (SIGSTOP: no ABORT_ACK
    can come, and on shm its worker could still be copying) stays
    Transferring for SGLang, over many polls; once the rank resumes and
    acks, poll() says Failed and the room is releasable. With the group
    stopped, an open room says Failed all the same (no ack can come)."""
    with Group(*SMALL) as g:
        pm, dm, addr = sglang_managers(monkeypatch, g)
        s = sglang.get_kv_class("sender")(pm, addr, 98, [0], 0)
        r = sglang.get_kv_class("receiver")(dm, addr, 98)
        r.init(0)
        r.send_metadata(np.array([5, 6], np.int32), 1)
        def unsettled():
            assert r.poll() == KVPoll.Transferring
            assert not r.releasable

        abort_with_the_prefill_stopped(g, s, r.abort, unsettled)
        deadline = time.monotonic() + 30
        while r.poll() != KVPoll.Failed:
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert r.releasable
        with pytest.raises(Exception, match="abort"):
            r.failure_exception()
        r.clear()
        s.clear()
        # A group that is gone acks nothing any more: an open room still
        # says Failed, without waiting for ever.
        r = sglang.get_kv_class("receiver")(dm, addr, 97)
        r.init(0)
        r.send_metadata(np.array([5, 6], np.int32), 1)
        g.stop()
        while r.poll() != KVPoll.Failed:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with pytest.raises(Exception, match="gone"):
            r.failure_exception()
        pm.kw.close()
        dm.kw.close()


def test_vllm_failed_load_is_reported_once_its_blocks_are_free():
    """vLLM recomputes or reuses a failed load's blocks once get_finished
    reports it: a receive that fails while its prefill rank is stopped
    (SIGSTOP: its ABORT unacked) is not reported, over many steps, until
    the rank resumes and acks."""
    with Group("--kv-layout", "vllm", "--layers", 1, "--heads", 1,
               "--head-dim", 4, "--page-tokens", 2, "--pages", 8,
               "--aux-slots", 4, "--workers", 1) as g:
        def connector(role):
            c = types.SimpleNamespace(
                kv_transfer_config=types.SimpleNamespace(
                    kv_role=role,
                    kv_connector_extra_config={"run_dir": g.dir}),
                parallel_config=types.SimpleNamespace(
                    rank=0, tensor_parallel_size=1))
            return vllm.KvwireConnector(c, "worker")

        prod, cons = connector("kv_producer"), connector("kv_consumer")
        meta = vllm.KvwireMetadata()
        meta.sends.append(("r", 4242, prod.args.bootstrap_addr, [1, 2]))
        prod.bind_connector_metadata(meta)
        prod.start_load_kv(None)
        meta = vllm.KvwireMetadata()
        meta.recvs.append(("r", 4242, prod.args.bootstrap_addr, [5, 6]))
        cons.bind_connector_metadata(meta)
        cons.start_load_kv(None)
        sender, recv = prod.rooms["r"][0], cons.rooms["r"][0]
        def unsettled():
            assert cons.get_finished(set()) == (None, None)
            assert cons.get_block_ids_with_load_errors() == set()

        # The room fails at once; its ABORT waits for the rank.
        abort_with_the_prefill_stopped(g, sender, recv.abort, unsettled)
        deadline = time.monotonic() + 30
        done = None
        while not done:
            assert time.monotonic() < deadline
            done = cons.get_finished(set())[1]
            time.sleep(0.001)
        assert done == {"r"}
        assert cons.get_block_ids_with_load_errors() == {5, 6}
        prod.rooms["r"][0].clear()
        prod.shutdown()
        cons.shutdown()


def test_sglang_gpu_kv_cache_is_registered_where_it_is():
    """SGLang's KV cache in GPU buffers of its own (kv_data_ptrs on both
    sides, over the CPU stand-in runtime: the plumbing, not a GPU) is
    registered in place by the adapter and one room moves between those
    buffers (sglang_gpu_probe.py, in a process of its own so the stand-in
    is the runtime it loads)."""
    fake = os.path.join(ROOT, "build", "default", "tests", "libfakecudart.so")
    assert os.path.exists(fake), "make builds %s" % fake
    with Group("--layers", 2, "--heads", 2, "--head-dim", 8, "--page-tokens",
               4, "--pages", 8, "--dtype-bytes", 4, "--aux-slots", 4,
               "--workers", 1, "--transport", "cuda",
               env={"KVW_CUDART": fake}) as g:
        run_probe("sglang_gpu_probe.py", "sglang_pinned", g.dir,
                  "sglang gpu: ok", env={"KVW_CUDART": fake})


def test_sglang_state_types_move_where_sglang_keeps_them():
    """Issue 33 item 2's state: a hybrid model's Mamba (conv and SSM rows
    per Mamba layer, a slot per request) and SWA (K and V pages per SWA
    layer) state in GPU buffers of SGLang's own, as SGLang's KVArgs lists
    them (a list of buffers per state type), mapped by the adapter onto
    kvwire components of their own layers and registered in place with
    the KV cache; one room moves the pages and the rows SGLang's
    send_kv_chunk and prealloc queue name (sglang_state_probe.py, over
    the CPU stand-in runtime); a group whose --state does not fit is
    refused naming the one that would."""
    fake = os.path.join(ROOT, "build", "default", "tests", "libfakecudart.so")
    assert os.path.exists(fake), "make builds %s" % fake
    with Group("--layers", 2, "--heads", 2, "--head-dim", 8, "--page-tokens",
               4, "--pages", 8, "--dtype-bytes", 4, "--aux-slots", 4,
               "--state", "slot:4:96:layers=3,slot:4:256:layers=3,"
               "paged:6:64:layers=4", "--workers", 1, "--transport", "cuda",
               env={"KVW_CUDART": fake}) as g:
        run_probe("sglang_state_probe.py", "sglang_pinned", g.dir,
                  "sglang state: ok", env={"KVW_CUDART": fake})


def test_sglang_kv_cache_kvwire_cannot_reach_is_refused_with_why(
        monkeypatch):
    """kv_data_ptrs in host memory kvwire did not give, on a machine
    without a usable CUDA runtime: the manager refuses, saying both."""
    monkeypatch.setenv("KVW_CUDART", "/nonexistent/libcudart.so")
    with Group("--layers", 1, "--heads", 1, "--head-dim", 4, "--page-tokens",
               2, "--pages", 8, "--aux-slots", 4, "--workers", 1) as g:
        monkeypatch.setenv("KVW_RUN_DIR", g.dir)
        # The layout's own lengths (2 tokens x 4 of bf16 a page, 8
        # pages), in numpy's memory.
        mine = [np.zeros(128, np.uint8) for _ in range(2)]
        args = types.SimpleNamespace(
            engine_rank=0, pp_rank=0,
            kv_data_ptrs=[b.ctypes.data for b in mine],
            kv_data_lens=[128, 128], kv_item_lens=[16, 16])
        with pytest.raises(RuntimeError) as e:
            sglang.get_kv_class("manager")(args, "prefill")
        for want in ("not in kvwire's pool", "did not allocate",
                     "KVManager.alloc", "cuda: not available"):
            assert want in str(e.value), str(e.value)


def test_prefill_info_is_the_bootstraps_answer(monkeypatch):
    """The prefill instance's layout comes from its kv-bootstrap: a TP 2
    prefill says attn_tp_size 2."""
    with Group("--prefill-tp", 2, "--layers", 1, "--heads", 2, "--head-dim",
               4, "--page-tokens", 4, "--pages", 8, "--workers", 1) as g:
        monkeypatch.setenv("KVW_RUN_DIR", g.dir)
        dm = sglang.get_kv_class("manager")(
            types.SimpleNamespace(engine_rank=0, pp_rank=0), "decode")
        addr = dm.kw.kv_args.bootstrap_addr
        assert dm.try_ensure_parallel_info(addr)
        info = dm.prefill_info_table[addr]
        assert (info.attn_tp_size, info.dp_size, info.page_size) == (2, 1, 4)
        dm.kw.close()
