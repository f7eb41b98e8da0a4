"""SGLang's transfer-backend base module, the names kvwire's adapter
uses (see ../../../../README.md)."""
import dataclasses
from typing import Optional


class KVPoll:
    Failed = 0
    Bootstrapping = 1
    WaitingForInput = 2
    Transferring = 3
    Success = 4


@dataclasses.dataclass
class KVTransferMetric:
    transfer_latency_s: Optional[float] = None
    alloc_latency_s: Optional[float] = None
    transfer_total_bytes: Optional[int] = None


class KVArgs:
    pass


class BaseKVManager:
    pass


class BaseKVSender:
    pass


class BaseKVReceiver:
    pass


class BaseKVBootstrapServer:
    pass
