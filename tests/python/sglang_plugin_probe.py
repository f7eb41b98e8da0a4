"""sglang_plugin_probe.py - run by test_sglang_plugin.py in a fresh
interpreter whose path holds tests/python/sglang_pinned (SGLang's plugin
and backend surface) and kvwire: SGLang's start-up (load_plugins()), its
argument parsing and backend lookup, then one room through the classes it
gets and its poll consensus. $KVW_RUN_DIR names a live group. Prints
"plugin: ok" at the end; any failed check raises."""
import sys
import time
import types

import numpy as np

# The prefill scheduler's module is imported before the plugins run: its
# names bound by `from ... import` must be rebound by SGLang's hooks.
from sglang.srt.disaggregation import prefill
from sglang.srt.plugins import load_plugins

from kvwire import conn

polled = []  # the sizes of poll_many's calls
_poll_many = conn.poll_many


def counted(rooms):
    polled.append(len(rooms))
    return _poll_many(rooms)


conn.poll_many = counted
load_plugins()
load_plugins()  # once per process, as SGLang's guard says

from sglang.srt import server_args  # noqa: E402
from sglang.srt.disaggregation.base.conn import (  # noqa: E402
    KVPoll, KVTransferMetric)
from sglang.srt.disaggregation.utils import (  # noqa: E402
    DisaggregationMode, KVClassType, TransferBackend, get_kv_class,
    poll_and_all_reduce)
from kvwire.adapters import sglang as adapter  # noqa: E402

args = server_args.parser().parse_args(
    ["--disaggregation-mode", "prefill",
     "--disaggregation-transfer-backend", "kvwire"])
backend = TransferBackend(args.disaggregation_transfer_backend)
assert backend is TransferBackend.KVWIRE and backend.value == "kvwire"
assert list(TransferBackend)[-1] is backend
assert server_args.DISAGG_TRANSFER_BACKEND_CHOICES.count("kvwire") == 1
try:
    server_args.parser().parse_args(
        ["--disaggregation-transfer-backend", "kvwire2"])
    raise AssertionError("an unknown backend parsed")
except SystemExit:
    pass
want = {KVClassType.MANAGER: adapter.KvwireKVManager,
        KVClassType.SENDER: adapter.KvwireKVSender,
        KVClassType.RECEIVER: adapter.KvwireKVReceiver,
        KVClassType.BOOTSTRAP_SERVER: adapter.KvwireKVBootstrapServer}
for lookup in (get_kv_class, prefill.get_kv_class):
    for kind, cls in want.items():
        assert lookup(backend, kind) is cls, (lookup, kind)
    assert lookup(backend, KVClassType.KVARGS).__module__ == \
        "sglang.srt.disaggregation.base.conn"
    try:
        lookup(TransferBackend.MOONCAKE, KVClassType.MANAGER)
        raise AssertionError("SGLang's own lookup was bypassed")
    except ValueError:
        pass
assert prefill.poll_and_all_reduce is poll_and_all_reduce

# One room through the classes SGLang got, polled as its queues poll.
kv_args = types.SimpleNamespace(engine_rank=0, pp_rank=0, kv_data_ptrs=[])
pm = get_kv_class(backend, KVClassType.MANAGER)(kv_args,
                                                DisaggregationMode.PREFILL)
dm = get_kv_class(backend, KVClassType.MANAGER)(kv_args,
                                                DisaggregationMode.DECODE)
addr = pm.kw.kv_args.bootstrap_addr
s = get_kv_class(backend, KVClassType.SENDER)(pm, addr, 77, [0], 0)
r = get_kv_class(backend, KVClassType.RECEIVER)(dm, addr, 77)
r.init(0)
r.send_metadata(np.array([5, 6], np.int32), 1)
deadline = time.monotonic() + 20


def until(states, rooms):
    while prefill.poll_and_all_reduce(rooms, None) != states:
        assert time.monotonic() < deadline, "gave up waiting for %s" % states
        time.sleep(0.001)


until([KVPoll.WaitingForInput], [s])
s.init(2, 2)
s.send(np.array([3, 4], np.int32), [])
until([KVPoll.Success] * 2, [s, r])
assert polled and max(polled) == 2
# Another TP rank still Bootstrapping: the MIN holds the room back.
assert prefill.poll_and_all_reduce([s, r], [[KVPoll.Bootstrapping] * 2]) == \
    [KVPoll.Bootstrapping] * 2
m = r.get_transfer_metric()
assert type(m) is KVTransferMetric and m.transfer_total_bytes > 0, m
s.clear()
r.clear()
pm.kw.close()
dm.kw.close()
print("plugin: ok")
sys.exit(0)
