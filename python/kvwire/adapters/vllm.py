"""vllm.py - kvwire as a vLLM v1 KV connector. NOT TESTED AGAINST VLLM: it
follows the KVConnectorBase_V1 interface (scheduler side and worker side)
and is exercised here only through the kvwire package it wraps.

Load it with
  --kv-transfer-config '{"kv_connector": "KvwireConnector",
    "kv_connector_module_path": "kvwire.adapters.vllm",
    "kv_role": "kv_producer" | "kv_consumer",
    "kv_connector_extra_config": {"run_dir": DIR}}'
A vLLM block is a kvwire page: the KV cache tensors vLLM registers must be
the rank's kvwire pool (register_kv_caches checks their addresses). The
prefill (producer) returns kv_transfer_params {room, bootstrap_addr} from
request_finished; the router hands them to the decode (consumer), whose
blocks are filled by kvwire before the request is scheduled.
"""
import random

import numpy as np

from .. import conn

try:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (
        KVConnectorBase_V1, KVConnectorMetadata)
except ImportError:  # without vLLM: plain bases, for import and docs
    KVConnectorBase_V1 = object

    class KVConnectorMetadata:
        pass


class KvwireMetadata(KVConnectorMetadata):
    """Scheduler -> worker: rooms to send (producer) or receive (consumer)
    this step, as (room, bootstrap_addr, block ids)."""

    def __init__(self):
        self.sends = []
        self.recvs = []


class KvwireConnector(KVConnectorBase_V1):
    def __init__(self, vllm_config, role, *args, **kwargs):
        if KVConnectorBase_V1 is not object:
            super().__init__(vllm_config, role, *args, **kwargs)
        tc = vllm_config.kv_transfer_config
        self.producer = tc.kv_role == "kv_producer"
        self.run_dir = (tc.kv_connector_extra_config or {})["run_dir"]
        self.mode = "prefill" if self.producer else "decode"
        pc = vllm_config.parallel_config
        self.args = conn.KVArgs.from_run_dir(
            self.run_dir, self.mode, getattr(pc, "rank", 0) %
            max(1, pc.tensor_parallel_size))
        self.mgr = None           # worker side, at register_kv_caches
        self.pending = KvwireMetadata()
        self.rooms = {}           # req id -> KVSender / KVReceiver
        self.params = {}          # consumer: req id -> kv_transfer_params

    # ---- scheduler side ------------------------------------------------

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        p = getattr(request, "kv_transfer_params", None) or {}
        if self.producer or "kvwire_room" not in p:
            return 0, False
        return len(request.prompt_token_ids) - num_computed_tokens, True

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        p = getattr(request, "kv_transfer_params", None) or {}
        if not self.producer and num_external_tokens and "kvwire_room" in p:
            ids = blocks.get_block_ids()[0]
            self.pending.recvs.append((request.request_id, p["kvwire_room"],
                                       p["bootstrap_addr"], list(ids)))

    def build_connector_meta(self, scheduler_output):
        meta, self.pending = self.pending, KvwireMetadata()
        return meta

    def request_finished(self, request, block_ids):
        if not self.producer:
            return False, None
        room = random.randrange(1, 2 ** 63)
        self.pending.sends.append((request.request_id, room,
                                   self.args.bootstrap_addr, list(block_ids)))
        # Blocks stay allocated until get_finished reports the send done.
        return True, {"kvwire_room": room,
                      "bootstrap_addr": self.args.bootstrap_addr}

    # ---- worker side ---------------------------------------------------

    def register_kv_caches(self, kv_caches):
        self.mgr = conn.KVManager(self.args, self.mode)
        base, size = self.mgr.pool.base, self.mgr.pool.size
        for name, t in kv_caches.items():
            if not base <= t.data_ptr() < base + size:
                raise RuntimeError("kvwire: KV cache %s is not in kvwire's "
                                   "pool" % name)

    def start_load_kv(self, forward_context, **kwargs):
        meta = self._get_connector_metadata()
        for req, room, addr, ids in meta.recvs:
            r = conn.KVReceiver(self.mgr, addr, room)
            r.init(0)
            r.send_metadata(np.array(ids, np.int32), 0)
            self.rooms[req] = r
        for req, room, addr, ids in meta.sends:
            s = conn.KVSender(self.mgr, addr, room)
            s.init(len(ids), 0)
            self.rooms[req] = (s, np.array(ids, np.int32))

    def wait_for_layer_load(self, layer_name):
        """kvwire delivers whole rooms: get_finished reports them."""

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        """The KV is written in place (the cache is kvwire's pool)."""

    def wait_for_save(self):
        for x in self.rooms.values():
            if isinstance(x, tuple) and x[0].sent == 0 and \
                    x[0].poll() != conn.KVPoll.Bootstrapping:
                x[0].send(x[1])

    def get_finished(self, finished_req_ids):
        self.wait_for_save()
        sent, recvd = set(), set()
        for req, x in list(self.rooms.items()):
            obj = x[0] if isinstance(x, tuple) else x
            st = obj.poll()
            if st not in (conn.KVPoll.Success, conn.KVPoll.Failed):
                continue
            if st == conn.KVPoll.Failed:
                try:
                    obj.failure_exception()
                except conn.KVTransferError:
                    pass  # vLLM learns of it as a finished transfer
            else:
                obj.clear()
            (sent if isinstance(x, tuple) else recvd).add(req)
            del self.rooms[req]
        return sent or None, recvd or None
