"""sglang_plugin.py - kvwire as an SGLang transfer backend with no patch
to SGLang: the entry point `kvwire` of SGLang's general-plugin group
`sglang.srt.plugins` (python/pyproject.toml). SGLang's load_plugins()
(sglang/srt/plugins/__init__.py at 0298b5b40b4d) calls register() early in
every process; register() then

- makes "kvwire" a valid `--disaggregation-transfer-backend` choice (the
  DISAGG_TRANSFER_BACKEND_CHOICES list is the one argparse holds, so it is
  extended in place, wherever this SGLang defines or re-exports it);
- gives TransferBackend a KVWIRE member ("kvwire"), so the scheduler's
  TransferBackend(server_args.disaggregation_transfer_backend) works;
- registers two AROUND hooks with SGLang's HookRegistry, which
  load_plugins() applies after every plugin ran and propagates to the
  modules that imported the originals by name (prefill.py, decode.py):
  get_kv_class answers kvwire's classes for TransferBackend.KVWIRE, and
  poll_and_all_reduce reads the table once per manager for kvwire rooms
  (kvwire.poll_many) before SGLang's own all-reduce.

An SGLang without the plugin framework (older than the hook registry)
cannot load it: register() then raises ImportError naming what is
missing, and the fork route of python/README.md remains.
"""
import importlib
import logging

from .. import conn

log = logging.getLogger(__name__)

BACKEND = "kvwire"
# Where SGLang keeps the backend choices: arg_groups/choices.py defines the
# list in newer trees and server_args.py re-exports it (older trees define
# it there). The same list object is extended once.
_CHOICE_MODULES = ("sglang.srt.arg_groups.choices", "sglang.srt.server_args")
_UTILS = "sglang.srt.disaggregation.utils"


def register():
    """SGLang's plugin entry point: see the module's text. Idempotent."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    _add_choice()
    _add_member()
    HookRegistry.register(_UTILS + ".get_kv_class", around_get_kv_class,
                          HookType.AROUND)
    HookRegistry.register(_UTILS + ".poll_and_all_reduce",
                          around_poll_and_all_reduce, HookType.AROUND)
    log.info("kvwire: --disaggregation-transfer-backend %s registered",
             BACKEND)


def _add_choice():
    seen = []
    for name in _CHOICE_MODULES:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        lst = getattr(mod, "DISAGG_TRANSFER_BACKEND_CHOICES", None)
        if isinstance(lst, list) and not any(lst is s for s in seen):
            seen.append(lst)
            if BACKEND not in lst:
                lst.append(BACKEND)
    if not seen:
        raise ImportError("kvwire plugin: no DISAGG_TRANSFER_BACKEND_CHOICES "
                          "list in %s" % " or ".join(_CHOICE_MODULES))


def _add_member():
    """TransferBackend.KVWIRE, made as Enum makes its members (an Enum
    class cannot be extended by subclassing)."""
    tb = importlib.import_module(_UTILS).TransferBackend
    if BACKEND in tb._value2member_map_:
        return tb(BACKEND)
    m = object.__new__(tb)
    m._name_, m._value_ = "KVWIRE", BACKEND
    m.__objclass__ = tb
    if hasattr(next(iter(tb)), "_sort_order_"):
        m._sort_order_ = len(tb._member_names_)
    type.__setattr__(tb, "KVWIRE", m)
    tb._member_names_.append("KVWIRE")
    tb._member_map_["KVWIRE"] = m
    tb._value2member_map_[BACKEND] = m
    return m


def _is_kvwire(backend):
    return getattr(backend, "value", backend) == BACKEND


def around_get_kv_class(original, transfer_backend, class_type, *args,
                        **kwargs):
    """SGLang's get_kv_class, with kvwire's classes for its backend (and
    SGLang's own KVArgs for KVClassType.KVARGS, which the manager takes)."""
    if not _is_kvwire(transfer_backend):
        return original(transfer_backend, class_type, *args, **kwargs)
    from . import sglang
    cls = sglang.get_kv_class(class_type)
    if cls is not None:
        return cls
    if getattr(class_type, "value", class_type) == "kvargs":
        from sglang.srt.disaggregation.base.conn import KVArgs
        return KVArgs
    return None


class _Polled:
    """A poller whose poll() is a value already read (by poll_many)."""
    __slots__ = ("state",)

    def __init__(self, state):
        self.state = state

    def poll(self):
        return self.state


def around_poll_and_all_reduce(original, pollers, *args, **kwargs):
    """SGLang polls every request of a queue, then takes the MIN over its
    TP ranks. kvwire's rooms are read with one table read per manager
    (poll_many, the same answers as their own poll()); SGLang's function
    then does what it always does with them (its all-reduce, its failure
    injection) over the values."""
    pollers = list(pollers)
    if pollers and all(isinstance(p, conn._Room) for p in pollers):
        pollers = [_Polled(s) for s in conn.poll_many(pollers)]
    return original(pollers, *args, **kwargs)
