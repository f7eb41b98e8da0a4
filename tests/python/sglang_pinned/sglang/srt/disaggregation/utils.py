"""SGLang's backend choice and poll consensus (see ../../../README.md)."""
from enum import Enum


class DisaggregationMode(Enum):
    NULL = "null"
    PREFILL = "prefill"
    DECODE = "decode"


class TransferBackend(Enum):
    MOONCAKE = "mooncake"
    NIXL = "nixl"
    ASCEND = "ascend"
    FAKE = "fake"
    MORI = "mori"


class KVClassType(Enum):
    KVARGS = "kvargs"
    MANAGER = "manager"
    SENDER = "sender"
    RECEIVER = "receiver"
    BOOTSTRAP_SERVER = "bootstrap_server"


def get_kv_class(transfer_backend, class_type):
    # SGLang maps its own backends here; none of them exists in the
    # stand-in, and an unknown one raises as SGLang's does.
    raise ValueError(f"Unsupported transfer backend: {transfer_backend}")


def poll_and_all_reduce(pollers, gloo_group):
    """Each poller's state, then the MIN over the TP ranks. gloo_group:
    the other ranks' values (lists as long as pollers), standing for
    dist.all_reduce(op=MIN) over the gloo group."""
    polls = [int(poller.poll()) for poller in pollers]
    for other in gloo_group or ():
        polls = [min(a, b) for a, b in zip(polls, other)]
    return polls
