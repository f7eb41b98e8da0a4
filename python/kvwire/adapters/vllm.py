"""vllm.py - kvwire as a vLLM v1 KV connector (KVConnectorBase_V1,
vllm/distributed/kv_transfer/kv_connector/v1/base.py). Tested against a
stand-in of that base module (tests/python/vllm_pinned), not against
vLLM itself.

Load it with
  --kv-transfer-config '{"kv_connector": "KvwireConnector",
    "kv_connector_module_path": "kvwire.adapters.vllm",
    "kv_role": "kv_producer" | "kv_consumer",
    "kv_connector_extra_config": {"run_dir": DIR}}'
A vLLM block is a kvwire page. The group runs --kv-layout vllm (per layer
one [2, blocks, block_size, heads, head_dim] tensor, K then V: the flash
attention backend's) or --kv-layout vllm-blocks (per layer one [blocks, 2,
block_size, heads, head_dim] tensor, each block's K then its V: the
block-major layout of FlashInfer), as the attention backend lays it.
register_kv_caches takes vLLM's per-layer tensors where vLLM put them: on a
GPU they are exported to the group by CUDA IPC (the cuda transport), in
host memory they must come from kvwire's allocator (the manager's alloc()),
and the connector's pool_tensors() (views of the rank's kvwire pool) are
used as they are. The prefill (producer)
returns kv_transfer_params {kvwire_room, bootstrap_addr} from
request_finished; the router hands them to the decode (consumer), whose
blocks kvwire fills before get_finished reports the request loaded; a
room that failed reports its blocks through get_block_ids_with_load_errors
(vLLM recomputes them) rather than as loaded.

Aborts, as vLLM's scheduler makes them (vLLM at 003df2961dd8,
vllm/v1/core/sched/scheduler.py, finish_requests and
_update_from_kv_xfer_finished): a prefill request that did not end
FINISHED_LENGTH_CAPPED (aborted, or stopped otherwise) hands nothing over
and its blocks go at once; a decode request aborted while its blocks load
(WAITING_FOR_REMOTE_KVS) keeps them in vLLM until its id comes back as
finished receiving, and the worker aborts its room and reports it only
once no byte of it can land (settled()); a decode request aborted before
vLLM gave it blocks still tells its prefill, with a room of no pages
aborted at once, so the prefill's blocks go too (as the NIXL connector
does).
"""
import random

import numpy as np

from .. import conn
from ..layout import ROLE_AUX, ROLE_K, ROLE_KVB, ROLE_V

try:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (
        KVConnectorBase_V1, KVConnectorMetadata)
except ImportError:  # without vLLM: what the base class gives a connector
    class KVConnectorMetadata:
        pass

    class KVConnectorBase_V1:
        def __init__(self, vllm_config, role, kv_cache_config=None):
            self._connector_metadata = None

        def bind_connector_metadata(self, connector_metadata):
            self._connector_metadata = connector_metadata

        def clear_connector_metadata(self):
            self._connector_metadata = None

        def _get_connector_metadata(self):
            return self._connector_metadata


class KvwireMetadata(KVConnectorMetadata):
    """Scheduler -> worker: rooms to send (producer) or receive (consumer)
    this step, as (req id, room, bootstrap_addr, block ids)."""

    def __init__(self):
        self.sends = []
        self.recvs = []


class KvwireConnector(KVConnectorBase_V1):
    def __init__(self, vllm_config, role, *args, **kwargs):
        super().__init__(vllm_config, role, *args, **kwargs)
        tc = vllm_config.kv_transfer_config
        self.producer = tc.kv_role == "kv_producer"
        self.extra = tc.kv_connector_extra_config or {}
        self.run_dir = self.extra["run_dir"]
        self.mode = "prefill" if self.producer else "decode"
        pc = vllm_config.parallel_config
        self.args = conn.KVArgs.from_run_dir(
            self.run_dir, self.mode, getattr(pc, "rank", 0) %
            max(1, pc.tensor_parallel_size))
        self.mgr = None           # worker side: the rank's kvwire engine
        self.pending = KvwireMetadata()
        self.rooms = {}           # req id -> (KVSender/KVReceiver, ids, aux)
        self.free_aux = list(range(self.args.aux_slots))
        self.finished = set()     # ids vLLM said finished, rooms live
        self.loads = set()        # scheduler: consumer ids given blocks
        self.notify = set()       # worker: rooms aborted, never reported
        self.sent_done = set()    # producer: sends over, not reported yet
        self.load_errors = set()  # consumer: blocks of failed rooms

    # ---- scheduler side ------------------------------------------------

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        """The prompt's tokens, loaded by kvwire, for a decode request the
        router gave a room; 0 once its load was scheduled (a request
        preempted after it recomputes: its room is spent)."""
        p = getattr(request, "kv_transfer_params", None) or {}
        if self.producer or "kvwire_room" not in p or \
                request.request_id in self.loads:
            return 0, False
        return len(request.prompt_token_ids) - num_computed_tokens, True

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        p = getattr(request, "kv_transfer_params", None) or {}
        if not self.producer and num_external_tokens and "kvwire_room" in p:
            ids = blocks.get_block_ids()[0]
            self.loads.add(request.request_id)
            self.pending.recvs.append((request.request_id, p["kvwire_room"],
                                       p["bootstrap_addr"], list(ids)))

    def build_connector_meta(self, scheduler_output):
        meta, self.pending = self.pending, KvwireMetadata()
        return meta

    def request_finished(self, request, block_ids):
        """Producer: a request that ended FINISHED_LENGTH_CAPPED (the
        router's max_tokens=1) hands its blocks to a room and keeps them
        until get_finished reports the send over; any other end (an abort)
        frees them at once. Consumer: vLLM itself keeps the blocks of a
        request aborted while they load; one aborted before it had blocks
        gets a room of no pages, aborted at once, so that its prefill
        frees its own."""
        rid = request.request_id
        if not self.producer:
            p = getattr(request, "kv_transfer_params", None) or {}
            if "kvwire_room" in p and rid not in self.loads:
                self.pending.recvs.append((rid, p["kvwire_room"],
                                           p["bootstrap_addr"], None))
            self.loads.discard(rid)
            return False, None
        if _status(request) != "FINISHED_LENGTH_CAPPED":
            return False, None
        room = random.randrange(1, 2 ** 63)
        self.pending.sends.append((request.request_id, room,
                                   self.args.bootstrap_addr, list(block_ids)))
        # Blocks stay allocated until get_finished reports the send done.
        return True, {"kvwire_room": room,
                      "bootstrap_addr": self.args.bootstrap_addr}

    # ---- worker side ---------------------------------------------------

    def _manager(self):
        if self.mgr is None:
            self.mgr = conn.KVManager(self.args, self.mode)
        return self.mgr

    def pool_tensors(self):
        """The rank's per-layer KV cache as vLLM lays it out, one view of
        the pool per layer, by layer name: [2, blocks, block_size,
        kv_heads, head_dim] (K then V) with --kv-layout vllm, [blocks, 2,
        block_size, kv_heads, head_dim] (each block's K then its V) with
        --kv-layout vllm-blocks: the memory to give vLLM's layers (kvwire
        moves the pool's pages). Refused for any other layout."""
        m = self._manager()
        layout = m.kv_args.shape.kv_layout
        if layout not in ("vllm", "vllm-blocks"):
            raise RuntimeError("kvwire: vLLM's per-layer KV tensors need a "
                               "group started with --kv-layout vllm (or "
                               "vllm-blocks for a block-major backend); "
                               "this one's is %s" % layout)
        a, raw = m.kv_args, m.pool.raw
        out = {}
        for b in m.pool.buffers:
            if b.role not in (ROLE_K, ROLE_KVB) or \
                    b.layer_id >= a.num_layers:
                continue
            # A layer's K and V (vllm) or its blocks (vllm-blocks): one
            # run of pool bytes either way.
            n = (1 if b.role == ROLE_KVB else 2) * b.pages * b.item_len
            dims = (a.page_size, a.kv_head_num, a.head_dim)
            out["model.layers.%d.self_attn.attn" % b.layer_id] = \
                raw[b.offset:b.offset + n].view(a.dtype).reshape(
                    (b.pages, 2) + dims if b.role == ROLE_KVB
                    else (2, b.pages) + dims)
        return out

    def register_kv_caches(self, kv_caches):
        """vLLM's per-layer tensors, in layer order, each laid out as
        pool_tensors() says for the group's --kv-layout. The pool's own views
        (pool_tensors()) are used as they are; other tensors are registered
        in place (KVManager.register_in_place), the K half and the V half
        of each layer a buffer each (vllm), or each layer's tensor one
        buffer of whole blocks (vllm-blocks): vLLM's GPU tensors on their device
        (extra config "gpu_id" where a tensor does not say) by CUDA IPC,
        host tensors over memory from the manager's alloc(). Raises
        RuntimeError with the reason when they cannot be."""
        want = list(self.pool_tensors().items())
        got = list(kv_caches.items())
        if len(got) != len(want):
            raise RuntimeError("kvwire: %d KV cache tensors, this rank's "
                               "pool holds %d layers" % (len(got), len(want)))
        if all(_addr(t) == w.ctypes.data and _nbytes(t) == w.nbytes
               for (_, t), (_, w) in zip(got, want)):
            return
        m = self._manager()
        kv = [b for b in m.pool.buffers if b.role != ROLE_AUX]
        layers = [b.layer_id for b in kv if b.role in (ROLE_K, ROLE_KVB)]
        tensor = dict(zip(layers, (t for _, t in got)))
        ptrs, lens, items = [], [], []
        for b in kv:
            t = tensor.get(b.layer_id)
            if t is None:
                raise RuntimeError("kvwire: no KV cache tensor for layer %d "
                                   "of this rank's layout" % b.layer_id)
            if b.role == ROLE_KVB:  # the blocks, K and V together
                ptrs.append(_addr(t))
                lens.append(_nbytes(t))
            else:
                half = _nbytes(t) // 2
                ptrs.append(_addr(t) + (half if b.role == ROLE_V else 0))
                lens.append(half)
            items.append(b.item_len)
        t0 = got[0][1]
        dev = getattr(getattr(t0, "device", None), "index", None)
        if dev is None:
            dev = int(self.extra.get("gpu_id", 0))
        try:
            m.register_in_place(ptrs, lens, items, device=dev)
        except (conn.KVWireError, ValueError) as e:
            raise RuntimeError(
                "kvwire: vLLM's KV cache tensors (%s, ...) are not kvwire's "
                "pool and cannot be registered where they are: %s; on the "
                "host, allocate them from the connector's manager "
                "(alloc()) or use pool_tensors()" % (got[0][0], e)) from None

    def start_load_kv(self, forward_context, **kwargs):
        meta = self._get_connector_metadata()
        if meta is None:
            return
        m = self._manager()
        for req, room, addr, ids in meta.recvs:
            if ids is None:  # aborted before it had blocks
                self._tell_aborted(m, req, room, addr)
                continue
            aux = self._aux()
            r = conn.KVReceiver(m, addr, room)
            r.init(0)
            r.send_metadata(np.array(ids, np.int32), aux)
            self.rooms[req] = (r, ids, aux)
        for req, room, addr, ids in meta.sends:
            aux = self._aux()
            s = conn.KVSender(m, addr, room)
            s.init(len(ids), aux)
            self.rooms[req] = (s, ids, aux)

    def _tell_aborted(self, m, req, room, addr):
        """A request vLLM aborted before it had blocks: its prefill keeps
        its blocks for it, so a receiver init()ed and aborted at once tells
        it (KVReceiver.abort: a room of no page and no aux row, its prefill
        ranks a dummy destination), as NIXL's connector tells its prefill.
        Best effort, never raised into vLLM: with the group gone the
        prefill's room ends on its own timeout. vLLM hears nothing of it."""
        r = None
        try:
            r = conn.KVReceiver(m, addr, room)
            r.init(0)
            r.abort()
        except (RuntimeError, ValueError):  # KVWireError is one too
            try:
                if r is not None:
                    r.clear()
            except RuntimeError:
                pass
            return
        self.notify.add(req)
        self.rooms[req] = (r, [], None)  # no aux row: nothing lands

    def _aux(self):
        """A metadata row of its own for each live room (vLLM moves no
        metadata, but two live rooms never share a row)."""
        if not self.free_aux:
            raise RuntimeError("kvwire: more live rooms than the group's "
                               "%d aux slots (kv-up --aux-slots)"
                               % self.args.aux_slots)
        return self.free_aux.pop()

    def wait_for_layer_load(self, layer_name):
        """kvwire delivers whole rooms: get_finished reports them."""

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        """The KV is written in place (the cache is kvwire's pool)."""

    def wait_for_save(self):
        """A producer's room goes once its decode asked for it."""
        unsent = [(x, ids) for x, ids, _ in self.rooms.values()
                  if isinstance(x, conn.KVSender) and x.sent == 0 and
                  x.conclude_state is None]
        # One table read for all of them, as get_finished's.
        for (x, ids), st in zip(unsent,
                                conn.poll_many([x for x, _ in unsent])):
            if st == conn.KVPoll.WaitingForInput:
                x.send(np.array(ids, np.int32))

    def get_finished(self, finished_req_ids):
        """(sends over, loads over): a send is reported once vLLM has named
        its request finished (here or before), as the base class asks; a
        load that failed is reported too, its blocks named by
        get_block_ids_with_load_errors, once no byte of it can land any
        more (settled())."""
        self.wait_for_save()
        for req in finished_req_ids or ():
            x = self.rooms.get(req, (None,))[0]
            if x is None and req not in self.sent_done:
                continue  # a load reported already: nothing owed
            self.finished.add(req)
            if isinstance(x, conn.KVReceiver) and x.conclude_state is None:
                x.abort()  # vLLM aborted it while its blocks load
        recvd = set()
        live = list(self.rooms.items())
        for (req, (x, ids, aux)), st in zip(
                live, conn.poll_many([v[0] for _, v in live])):
            if st not in (conn.KVPoll.Success, conn.KVPoll.Failed):
                continue
            if st == conn.KVPoll.Failed:
                if isinstance(x, conn.KVReceiver):
                    # vLLM reuses or recomputes into the blocks once it
                    # hears: only when no byte of the room can land.
                    if not x.settled():
                        continue
                    if req not in self.finished:
                        self.load_errors.update(ids)
                try:
                    x.failure_exception()  # clears the room
                except conn.KVTransferError:
                    pass
            else:
                x.clear()
            if aux is not None:  # a notify room lent none
                self.free_aux.append(aux)
            del self.rooms[req]
            if req in self.notify:  # vLLM forgot it: nothing to report
                self.notify.discard(req)
                self.finished.discard(req)
            elif isinstance(x, conn.KVReceiver):
                recvd.add(req)
                self.finished.discard(req)
            else:
                self.sent_done.add(req)
        sent = self.sent_done & self.finished
        self.sent_done -= sent
        self.finished -= sent
        return sent or None, recvd or None

    def get_block_ids_with_load_errors(self):
        out, self.load_errors = self.load_errors, set()
        return out

    def shutdown(self):
        """vLLM's worker is stopping: the rank's engine closes (at once,
        or once the last pool view vLLM holds is gone)."""
        if self.mgr is not None:
            self.mgr.close()


def _status(request):
    """The name of a vLLM request's status (RequestStatus, an enum)."""
    st = getattr(request, "status", None)
    return getattr(st, "name", st)


def _addr(t):
    """A tensor's data address: torch's data_ptr(), or a numpy array's."""
    return t.data_ptr() if hasattr(t, "data_ptr") else t.ctypes.data


def _nbytes(t):
    return t.nbytes if hasattr(t, "nbytes") else \
        t.numel() * t.element_size()
