"""sglang.py - kvwire as an SGLang transfer backend. NOT TESTED AGAINST
SGLANG: it follows the interface of SGLang's disaggregation base module
(BaseKVManager, BaseKVSender, BaseKVReceiver, BaseKVBootstrapServer) and is
exercised here only through the kvwire package it wraps.

Where kvwire differs from SGLang's own backends: the KV cache SGLang
registers in kv_args (kv_data_ptrs) is moved where SGLang put it: pointers
that are not the rank's kvwire pool are registered in place
(KVManager.register_in_place: GPU buffers on args.gpu_id by CUDA IPC, host
memory only from the manager's alloc()), and the manager refuses, saying
why, what cannot be. SGLang's metadata buffers (aux_data_ptrs: output
ids, logprobs, hidden states...) stay where SGLang allocated them: the
prefill copies the request's row of each into the pool before its last
chunk, and the decode copies the row back before poll() first says
Success (SGLang's metadata gate reads them then); the group's --aux-bytes
must be SGLang's row lengths. SGLang's state buffers (state_types and
their lists) map onto kvwire's state components of their own layers
(_state_components) and are registered in place with the KV cache. The
run directory of the rank's kvwire group comes from $KVW_RUN_DIR (kv-up
--run-dir).

Loading: the plugin entry point (sglang_plugin.py) where SGLang has its
plugin framework; else a fork adds `KVWIRE = "kvwire"` to TransferBackend
and, in get_kv_class, returns
`kvwire.adapters.sglang.get_kv_class(class_type)`, or `install()` wraps
get_kv_class the same way for a backend whose value is "kvwire".
"""
import ctypes
import logging
import os
import shutil
import subprocess
import types

import numpy as np

from .. import conn
from ..bootstrap import KVBootstrapServer, _bin_dir
from ..layout import ROLE_STATE

log = logging.getLogger(__name__)

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
        self.prefill_info_table = {}  # SGLang's decode reads it by address
        try:
            # kvwire's state component c takes its rows from SGLang's
            # state type self.state_of[c]; sptrs... its buffers, in order.
            self.state_of, sptrs, slens, sitems = _state_components(
                args, self.kw)
            self.state_split = _state_split_whole(args)
            self.meta = _metadata_rows(args, self.kw.kv_args)
        except RuntimeError:
            self.kw.close()
            raise
        want = self.kw.kv_args.kv_data_ptrs  # its KV, then its state
        have = list(getattr(args, "kv_data_ptrs", None) or [])
        if not have and sptrs and \
                sptrs != want[len(want) - len(sptrs):]:
            self.kw.close()
            raise RuntimeError("kvwire: SGLang's state buffers are its "
                               "own and its KV cache is kvwire's pool: "
                               "give both where SGLang keeps them "
                               "(kv_data_ptrs and state_data_ptrs), or "
                               "neither")
        if have and have + sptrs != want[:len(have) + len(sptrs)]:
            try:
                # SGLang's KV cache and then its state buffers, in the
                # rank's layout order; its GPU buffers are on args.gpu_id.
                self.kw.register_in_place(
                    have + sptrs, list(args.kv_data_lens) + slens,
                    list(args.kv_item_lens) + sitems,
                    device=int(getattr(args, "gpu_id", 0) or 0))
            except (conn.KVWireError, ValueError) as e:
                self.kw.close()
                raise RuntimeError("kvwire: SGLang's KV cache "
                                   "(kv_data_ptrs%s) is not in kvwire's "
                                   "pool and cannot be registered where it "
                                   "is: %s" % (" and state_data_ptrs"
                                               if sptrs else "", e)) \
                    from None

    def state_rows(self, state_indices):
        """SGLang's state_indices (one entry per state type, as
        send_kv_chunk and the decode's prealloc queue build them: a Mamba
        slot as a one-element list or array, SWA/NSA page indices, None for
        a type the room does not name) as kvwire's, one list per
        component; None stays None (not the last chunk)."""
        if state_indices is None:
            return None
        lists = list(state_indices)
        if len(lists) != len(getattr(self.kv_args, "state_types", None)
                             or []):
            raise ValueError("kvwire: %d state lists for %d state types"
                             % (len(lists), len(getattr(
                                 self.kv_args, "state_types", None) or [])))
        flat = [np.asarray([] if x is None else x).reshape(-1)
                for x in lists]
        return [flat[t] for t in self.state_of]

    def register_to_bootstrap(self):
        """kv-sender registers itself at its kv-bootstrap: nothing to do."""

    def try_ensure_parallel_info(self, bootstrap_addr, **kwargs):
        """SGLang's decode asks this before it picks a prefill DP rank for
        a request (its prealloc queue then reads
        prefill_info_table[addr].dp_size and .follow_bootstrap_room, and
        retries a False a few times before it aborts the requests naming
        the address). The prefill instance's kv-bootstrap answers with its
        topology (kv-ctl lookup: a BOOT_LOOKUP, with $KVW_KEYS for tcp);
        the answer is kept. A page size other than this group's raises, as
        SGLang's own backends do."""
        if bootstrap_addr in self.prefill_info_table:
            return True
        info = _lookup_prefill(bootstrap_addr)
        if info is None:
            return False
        if info.page_size != self.kw.kv_args.page_size:
            raise RuntimeError("kvwire: the prefill instance at %s has %d-token"
                               " pages, this decode %d" % (
                                   bootstrap_addr, info.page_size,
                                   self.kw.kv_args.page_size))
        self.prefill_info_table[bootstrap_addr] = info
        return True


def _lookup_prefill(bootstrap_addr):
    """The topology of the prefill instance whose kv-bootstrap is at
    bootstrap_addr (host:port or an endpoint), as SGLang's prefill info:
    None (and a warning saying why) when it does not answer in time."""
    ep = bootstrap_addr if "://" in bootstrap_addr else \
        "tcp://" + bootstrap_addr
    exe = os.path.join(_bin_dir(), "kv-ctl")
    if not os.path.exists(exe):
        exe = shutil.which("kv-ctl") or exe
    try:
        r = subprocess.run([exe, "--timeout", "2", "lookup", ep],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        log.warning("kvwire: no prefill info from %s: %s", ep, e)
        return None
    out = dict(line.split("=", 1) for line in
               r.stdout.decode(errors="replace").splitlines() if "=" in line)
    if r.returncode != 0 or out.get("status") != "OK":
        log.warning("kvwire: no prefill info from %s (kv-ctl lookup exit "
                    "%d): %s", ep, r.returncode,
                    r.stdout.decode(errors="replace").strip()[-200:])
        return None
    try:
        tp, pp, cp, dp = (int(x) for x in out["topo"].split(","))
        page = int(out["page_tokens"])
    except (KeyError, ValueError):
        log.warning("kvwire: an answer from %s without a topology: %r",
                    ep, out)
        return None
    return types.SimpleNamespace(
        dp_size=dp, attn_tp_size=tp, attn_cp_size=cp, pp_size=pp,
        page_size=page, follow_bootstrap_room=True)


# How kvwire indexes the rows of each of SGLang's state types (base/conn.py
# StateType at 0094505da741): a Mamba slot per request, pool pages for the
# sliding-window, NSA/DSA indexer and MiniMax index-K pools.
_STATE_KINDS = {"mamba": "slot", "swa": "paged", "nsa": "paged",
                "dsa": "paged", "minimax_index_k": "paged"}


def _state_components(args, mgr):
    """SGLang's state buffers against this rank's kvwire layout. SGLang
    lists a component per state type (kv_args.state_types, with
    state_data_ptrs / state_data_lens / state_item_lens a list per type:
    setup_state_kv_args in disaggregation/utils.py at 000c2b942308; an
    older SGLang's one state_type with flat lists is refused by
    _sglang_state_lists); one type's buffers may
    have rows of several sizes (a Mamba type lists its conv tensor's
    buffer of each Mamba layer, then its SSM tensor's). Each run of
    buffers of one row size is a kvwire component of that many layers of
    its own (kv-up --state KIND:ROWS:BYTES:layers=N), in SGLang's order.
    Returns (the SGLang type of each kvwire component, and the state
    buffers' ptrs, lens and item lens in kvwire's layout order); raises
    RuntimeError naming the --state this rank needs when the group's
    components are not these."""
    types_, ptrs, lens, items = _sglang_state_lists(args)
    runs = []  # (type index, kind, rows, item, [(ptr, len)])
    for t, (ty, ps, ls, its) in enumerate(zip(types_, ptrs, lens, items)):
        name = str(getattr(ty, "value", ty)).lower()
        if name not in _STATE_KINDS:
            raise RuntimeError("kvwire: SGLang's state type %r has no "
                               "kvwire kind (known: %s)"
                               % (name, ", ".join(sorted(_STATE_KINDS))))
        if not len(ps) == len(ls) == len(its) or 0 in its:
            raise RuntimeError("kvwire: state type %s: %d ptrs, %d lens, "
                               "%d item lens" % (name, len(ps), len(ls),
                                                 len(its)))
        for p, ln, it in zip(ps, ls, its):
            rows = ln // it
            if runs and runs[-1][0] == t and runs[-1][2:4] == (rows, it):
                runs[-1][4].append((p, ln))
            else:
                runs.append((t, _STATE_KINDS[name], rows, it, [(p, ln)]))
    have = [[b for b in mgr.pool.buffers
             if b.role == ROLE_STATE and b.layer_id >> 16 == c]
            for c in range(len(mgr.kv_args.shape.state))]
    ok = len(have) == len(runs) and all(
        mgr.kv_args.shape.state[c].kind == kind and len(bs) == len(bufs) and
        all((b.pages, b.item_len) == (rows, it) for b in bs)
        for c, ((_, kind, rows, it, bufs), bs) in enumerate(zip(runs, have)))
    if not ok:
        tp = mgr.kv_args.tp_size
        raise RuntimeError(
            "kvwire: SGLang's state buffers (%s) need a group started with "
            "--state %s (sharded over TP %d; layers: this PP stage's "
            "buffers, of all stages in the flag); this group has --state %s"
            % (", ".join(str(getattr(x, "value", x)) for x in types_) or
               "none",
               ",".join("%s:%d:%d:layers=%d" % (k, r, it * tp, len(b))
                        for _, k, r, it, b in runs) or "none", tp,
               ",".join("%s:%d:%d%s%s" % (
                   c.kind, c.rows, c.bytes, ":rep" if c.replicated else "",
                   ":layers=%d" % c.layers if c.layers else "")
                   for c in mgr.kv_args.shape.state) or "none"))
    flat = [b for run in runs for b in run[4]]
    return ([run[0] for run in runs], [p for p, _ in flat],
            [ln for _, ln in flat],
            [run[3] for run in runs for _ in run[4]])


def _state_split_whole(args):
    """None when every state tensor is split over TP along its row's first
    dimension (state_dim_per_tensor 0, no conv shard groups): kvwire's
    rule for a sharded row under a TP mismatch (rank r holds contiguous
    part r of it) is then SGLang's. Else why not: a row split along another
    dimension, or in sub-blocks (state_conv_shard_groups: GDN's conv state
    [key_dim, key_dim, value_dim]), is not one contiguous part per rank,
    and kvwire would move wrong bytes between different TP sizes."""
    for t, dims in enumerate(getattr(args, "state_dim_per_tensor", None)
                             or []):
        for i, d in enumerate(dims or []):
            if d:
                return "state type %d's tensor %d is split over TP along " \
                    "dimension %d of its row" % (t, i, d)
    for t, groups in enumerate(getattr(args, "state_conv_shard_groups",
                                       None) or []):
        for i, g in enumerate(groups or []):
            if g:
                return "state type %d's tensor %d is split over TP in " \
                    "sub-blocks %s" % (t, i, list(g))
    return None


def _sglang_state_lists(args):
    """(types, ptr lists, len lists, item-len lists) of SGLang's KVArgs in
    its state_types form; ([], [], [], []) for none. An older SGLang's one
    state_type with flat lists (and flat state_indices) is refused."""
    ptrs = list(getattr(args, "state_data_ptrs", None) or [])
    lens = list(getattr(args, "state_data_lens", None) or [])
    items = list(getattr(args, "state_item_lens", None) or [])
    types_ = getattr(args, "state_types", None)
    if types_ is None:
        one = getattr(args, "state_type", "none") or "none"
        if one == "none" or not ptrs:
            return [], [], [], []
        raise RuntimeError("kvwire: this SGLang hands its %s state as one "
                           "state_type with flat lists; kvwire takes the "
                           "state_types form (a list per type: SGLang at "
                           "000c2b942308 or later)" % one)
    types_ = list(types_)
    if not len(types_) == len(ptrs) == len(lens) == len(items):
        raise RuntimeError("kvwire: %d state types, %d ptr lists, %d len "
                           "lists, %d item-len lists" % (
                               len(types_), len(ptrs), len(lens),
                               len(items)))
    return types_, [list(x) for x in ptrs], [list(x) for x in lens], \
        [list(x) for x in items]


def _metadata_rows(args, kw):
    """SGLang's metadata buffers (kv_args.aux_data_ptrs / lens /
    item_lens: output ids, logprobs, top-k, hidden states, ...), which
    SGLang allocates itself: [(sglang_ptr, kvwire_ptr, item_len)] per
    buffer, for copying one row between them (_copy_rows); [] when SGLang
    passed none or kvwire's own (allocated in the pool). The group's
    metadata buffers must have SGLang's row lengths (kv-up --aux-bytes) and
    at least its rows (--aux-slots): refused with the flags to use
    otherwise."""
    ptrs = list(getattr(args, "aux_data_ptrs", None) or [])
    lens = list(getattr(args, "aux_data_lens", None) or [])
    items = list(getattr(args, "aux_item_lens", None) or [])
    if not ptrs or ptrs == list(kw.aux_data_ptrs[:len(ptrs)]):
        return []
    if not len(ptrs) == len(lens) == len(items) or 0 in items:
        raise RuntimeError("kvwire: aux_data_ptrs, aux_data_lens and "
                           "aux_item_lens disagree (%d, %d, %d entries)"
                           % (len(ptrs), len(lens), len(items)))
    rows = min(ln // it for ln, it in zip(lens, items))
    if items != list(kw.aux_item_lens) or rows > kw.aux_slots:
        raise RuntimeError(
            "kvwire: SGLang's %d metadata buffers (rows of %s bytes, %d "
            "rows) need a group started with --aux-bytes %s --aux-slots %d "
            "or more; this group has --aux-bytes %s --aux-slots %d"
            % (len(items), ",".join(map(str, items)), rows,
               ",".join(map(str, items)), rows,
               ",".join(map(str, kw.aux_item_lens)), kw.aux_slots))
    return list(zip(ptrs, kw.aux_data_ptrs, items))


def _copy_rows(meta, slot, to_kvwire):
    """One row (aux index slot) of every metadata buffer, from SGLang's
    buffers into kvwire's pool (prefill, before the last chunk) or back
    (decode, once the room succeeded)."""
    for sg, kw, n in meta:
        a, b = sg + slot * n, kw + slot * n
        ctypes.memmove(b, a, n) if to_kvwire else ctypes.memmove(a, b, n)


class KvwireKVSender(conn.KVSender, BaseKVSender):
    def __init__(self, mgr, bootstrap_addr, bootstrap_room, dest_tp_ranks,
                 pp_rank, req_has_disagg_prefill_dp_rank=False):
        conn.KVSender.__init__(self, mgr.kw, bootstrap_addr, bootstrap_room,
                               dest_tp_ranks, pp_rank)
        self._mgr = mgr
        self._meta = mgr.meta
        self._aux = None

    def init(self, num_kv_indices, aux_index=None):
        conn.KVSender.init(self, num_kv_indices, aux_index)
        self._aux = int(aux_index)

    def should_send_kv_chunk(self, num_pages, last_chunk):
        """SGLang asks before each send (send_kv_chunk); its base's answer
        (num_pages > 0) would skip the last chunk of a request whose pages
        the decode holds whole (a full prefix hit), and the room would
        never end: kvwire's last chunk carries the metadata row and the
        state rows, so it always goes."""
        return num_pages > 0 or bool(last_chunk)

    def send(self, kv_indices, state_indices=None, num_kv_tokens=None,
             token_position_offset=None):
        """SGLang's send. num_kv_tokens (newer SGLang's third argument: the
        chunk's tokens, its last page maybe partial) and
        token_position_offset (an older name) are accepted: kvwire moves
        whole pages, a partial last page included. A chunk of a room
        already failed is dropped, as SGLang's own backends drop it
        (mooncake's add_transfer_request): SGLang's forward does not poll,
        so an ABORT may land between two chunks, and its inflight queue
        reports the failure."""
        if self.conclude_state == KVPoll.Failed:
            return
        # SGLang has written the request's metadata row before its last
        # chunk: it goes into kvwire's pool now, and moves with that chunk.
        if self._meta and self.num_kv_indices is not None and \
                self.sent + len(kv_indices) == self.num_kv_indices:
            _copy_rows(self._meta, self._aux, True)
        conn.KVSender.send(self, kv_indices, self._mgr.state_rows(
            state_indices))

    def get_transfer_metric(self):
        return _sglang_metric(conn.KVSender.get_transfer_metric(self))


class KvwireKVReceiver(conn.KVReceiver, BaseKVReceiver):
    def __init__(self, mgr, bootstrap_addr, bootstrap_room=None, *args,
                 **kwargs):
        conn.KVReceiver.__init__(self, mgr.kw, bootstrap_addr, bootstrap_room)
        self._mgr = mgr
        self._meta = mgr.meta
        self._aux = None
        self._landed = False
        self._released = False  # a Failed room's pages may be reused

    def send_metadata(self, kv_indices, aux_index=None, state_indices=None,
                      decode_prefix_len=None):
        """SGLang's; a request whose state kvwire cannot slice between the
        prefill's TP size and this decode's (_state_split_whole) fails now,
        with the reason, and its prefill ranks are told: it never lands
        wrong state as Success."""
        why = self._unsliceable(state_indices)
        if why:
            self._fail(why)
            conn.KVReceiver.abort(self)
            self._aux = int(aux_index)
            return
        conn.KVReceiver.send_metadata(self, kv_indices, aux_index,
                                      self._mgr.state_rows(state_indices),
                                      decode_prefix_len)
        self._aux = int(aux_index)

    def _unsliceable(self, state_indices):
        m = self._mgr
        info = m.prefill_info_table.get(self.bootstrap_addr)
        tp = m.kw.kv_args.tp_size
        if not m.state_split or not state_indices or info is None or \
                info.attn_tp_size == tp:
            return None
        return ("kvwire: the prefill's TP %d and this decode's TP %d split "
                "SGLang's state rows differently, and %s: kvwire moves a "
                "sharded row as one contiguous part per rank"
                % (info.attn_tp_size, tp, m.state_split))

    def poll(self, st=conn._UNREAD):
        """SGLang reads its metadata buffers once poll() says Success: the
        room's row is copied into them before the first Success is said.
        SGLang frees the request's pages once poll() says Failed: Failed is
        said once no byte of the room can land any more (`settled()`:
        every prefill target acked the ABORT, or its ack deadline passed,
        or the group is gone), Transferring until then; a prefill worker
        still copying would otherwise write into pages SGLang gave to
        another request."""
        state = conn.KVReceiver.poll(self, st)
        if state == KVPoll.Failed and not self._released:
            if not self.settled():
                return KVPoll.Transferring
            self._released = True
        if state == KVPoll.Success and self._meta and not self._landed:
            _copy_rows(self._meta, self._aux, False)
            self._landed = True
        return state

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
