"""kvwire for Python engines: SGLang's transfer-backend interface (KVPoll,
KVArgs, KVManager, KVSender, KVReceiver, KVBootstrapServer) over
libkvwire.so's public API, with the rank's KV pool as numpy views."""
from .bootstrap import KVBootstrapServer
from .conn import (KVArgs, KVManager, KVPoll, KVReceiver, KVSender,
                   KVTransferError, KVTransferMetric, KVWireError, poll_many)
from .layout import Shape, make_layout, read_run_dir
from .pool import KVPool

__all__ = ["KVArgs", "KVBootstrapServer", "KVManager", "KVPoll", "KVPool",
           "KVReceiver", "KVSender", "KVTransferError", "KVTransferMetric",
           "KVWireError",
           "Shape", "make_layout", "poll_many", "read_run_dir"]
