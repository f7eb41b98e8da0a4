"""SGLang's transfer-backend base module, the names kvwire's adapter
uses (see ../../../../README.md)."""
import dataclasses
import enum
from typing import Optional


class StateType(str, enum.Enum):
    """The state types a model's pools hand a backend (base/conn.py at
    0094505da741; the DeepSeek-V4 ones left out)."""
    MAMBA = "mamba"
    SWA = "swa"
    NSA = "nsa"
    DSA = "dsa"


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
    def should_send_kv_chunk(self, num_pages, last_chunk):
        """The base's answer, which send_kv_chunk (prefill.py at
        000c2b942308) asks before every send."""
        return num_pages > 0


class BaseKVReceiver:
    pass


class BaseKVBootstrapServer:
    pass
