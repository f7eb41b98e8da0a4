"""test_adapters.py - the SGLang adapter's classes drive one room the way
SGLang's scheduler would (without SGLang: its base classes are absent
here); the vLLM adapter imports. Neither is tested against the engine."""
import time
import types

import numpy as np

from conftest import Group
from kvwire import KVPoll
from kvwire.adapters import sglang, vllm


def test_sglang_classes_move_a_room(monkeypatch):
    with Group("--layers", 1, "--heads", 1, "--head-dim", 4, "--page-tokens",
               2, "--pages", 8, "--aux-slots", 4, "--workers", 1) as g:
        monkeypatch.setenv("KVW_RUN_DIR", g.dir)
        args = types.SimpleNamespace(engine_rank=0, pp_rank=0,
                                     kv_data_ptrs=[])
        pm = sglang.get_kv_class("manager")(args, "prefill")
        dm = sglang.get_kv_class("manager")(args, "decode")
        addr = pm.kw.kv_args.bootstrap_addr
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
