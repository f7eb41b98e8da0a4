"""The prefill scheduler's imports (see ../../../README.md): by name, so a
hook must reach this module's bindings too."""
from sglang.srt.disaggregation.utils import (  # noqa: F401
    KVClassType, TransferBackend, get_kv_class, poll_and_all_reduce)
