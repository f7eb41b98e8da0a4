"""sglang.py - kvwire as an SGLang transfer backend. NOT TESTED AGAINST
SGLANG: it follows the interface of SGLang's disaggregation base module
(BaseKVManager, BaseKVSender, BaseKVReceiver, BaseKVBootstrapServer) and is
exercised here only through the kvwire package it wraps.

Where kvwire differs from SGLang's own backends: kvwire moves KV between
its pools, so the engine's KV cache and metadata buffers must be allocated
*in* the rank's kvwire pool (KVManager.pool views). The manager checks that
the pointers SGLang registers in kv_args are the pool's and refuses
otherwise. The run directory of the rank's kvwire group comes from
$KVW_RUN_DIR (kv-up --run-dir).

Loading: a fork adds `KVWIRE = "kvwire"` to TransferBackend and, in
get_kv_class, returns `kvwire.adapters.sglang.get_kv_class(class_type)`;
out of tree, `install()` wraps get_kv_class the same way for a backend
whose value is "kvwire" (the CLI choice must be added alongside, as
out-of-tree backend plugins do).
"""
import os

from .. import conn
from ..bootstrap import KVBootstrapServer

try:  # SGLang's bases when SGLang is installed; plain classes otherwise.
    from sglang.srt.disaggregation.base.conn import (BaseKVBootstrapServer,
                                                     BaseKVManager,
                                                     BaseKVReceiver,
                                                     BaseKVSender)
except ImportError:
    BaseKVManager = BaseKVSender = BaseKVReceiver = \
        BaseKVBootstrapServer = object
try:
    from sglang.srt.disaggregation.base.conn import KVTransferMetric
except ImportError:
    KVTransferMetric = None

KVPoll = conn.KVPoll


class KvwireKVManager(BaseKVManager):
    """SGLang constructs it as (kv_args, disaggregation_mode, server_args,
    is_mla_backend); kv_args.engine_rank and pp_rank pick the member."""

    def __init__(self, args, disaggregation_mode, server_args=None,
                 is_mla_backend=False):
        mode = getattr(disaggregation_mode, "value", disaggregation_mode)
        run_dir = os.environ.get("KVW_RUN_DIR")
        if not run_dir:
            raise RuntimeError("kvwire: set KVW_RUN_DIR to the rank's kvwire "
                               "run directory (kv-up --run-dir)")
        tp = getattr(args, "engine_rank", 0) % max(
            1, getattr(server_args, "tp_size", 1) or 1)
        self.kw = conn.KVManager(conn.KVArgs.from_run_dir(
            run_dir, mode, tp, getattr(args, "pp_rank", 0) or 0), mode)
        self.kv_args = args
        want = self.kw.kv_args.kv_data_ptrs
        have = list(getattr(args, "kv_data_ptrs", None) or [])
        if have and have != want[:len(have)]:
            raise RuntimeError("kvwire: the KV cache must live in kvwire's "
                               "pool (KVManager.pool views); kv_data_ptrs "
                               "point elsewhere")

    def register_to_bootstrap(self):
        """kv-sender registers itself at its kv-bootstrap: nothing to do."""


class KvwireKVSender(conn.KVSender, BaseKVSender):
    def __init__(self, mgr, bootstrap_addr, bootstrap_room, dest_tp_ranks,
                 pp_rank, req_has_disagg_prefill_dp_rank=False):
        conn.KVSender.__init__(self, mgr.kw, bootstrap_addr, bootstrap_room,
                               dest_tp_ranks, pp_rank)

    def send(self, kv_indices, state_indices=None, token_position_offset=0):
        conn.KVSender.send(self, kv_indices, state_indices)

    def get_transfer_metric(self):
        return _sglang_metric(conn.KVSender.get_transfer_metric(self))


class KvwireKVReceiver(conn.KVReceiver, BaseKVReceiver):
    def __init__(self, mgr, bootstrap_addr, bootstrap_room=None, *args,
                 **kwargs):
        conn.KVReceiver.__init__(self, mgr.kw, bootstrap_addr, bootstrap_room)

    def get_transfer_metric(self):
        return _sglang_metric(conn.KVReceiver.get_transfer_metric(self))


def _sglang_metric(m):
    """kvwire's KVTransferMetric as SGLang's own dataclass where SGLang is
    importable (the same fields; an older SGLang without
    alloc_latency_s gets the others)."""
    if m is None or KVTransferMetric is None:
        return m
    fields = getattr(KVTransferMetric, "__dataclass_fields__", {})
    return KVTransferMetric(**{k: v for k, v in vars(m).items()
                               if k in fields})


class KvwireKVBootstrapServer(KVBootstrapServer, BaseKVBootstrapServer):
    """kv-bootstrap on SGLang's (host, port), supervised."""


def get_kv_class(class_type):
    """The kvwire class for SGLang's KVClassType (or its value); None for
    KVARGS: SGLang's own KVArgs is filled and handed to the manager."""
    name = getattr(class_type, "value", class_type)
    return {"kvargs": None, "manager": KvwireKVManager,
            "sender": KvwireKVSender, "receiver": KvwireKVReceiver,
            "bootstrap_server": KvwireKVBootstrapServer}.get(name)


def install():
    """Wraps SGLang's get_kv_class so a backend whose value is "kvwire"
    gets these classes."""
    from sglang.srt.disaggregation import utils

    original = utils.get_kv_class
    if getattr(original, "_kvwire", False):
        return

    def wrapped(transfer_backend, class_type):
        if getattr(transfer_backend, "value", transfer_backend) == "kvwire":
            cls = get_kv_class(class_type)
            if cls is not None:
                return cls
            from sglang.srt.disaggregation.base.conn import KVArgs
            return KVArgs
        return original(transfer_backend, class_type)

    wrapped._kvwire = True
    utils.get_kv_class = wrapped
