"""pool.py - a rank's kvwire pool as numpy arrays over the engine's own
mapping (kvw_pool_base / kvw_pool_size): no copy, so an engine that writes
its KV cache through these arrays writes straight into the memory kvwire's
workers copy from (prefill) or into (decode).
"""
import ctypes
import sys
import weakref

import numpy as np

from .layout import ROLE_AUX, ROLE_K, ROLE_KV, ROLE_KVB, ROLE_STATE, \
    ROLE_V, state_layer


class KVPool:
    """K and V buffers per layer, each pages x page_tokens x heads x
    head_dim of `dtype` (with --kv-layout vllm-blocks one buffer per layer,
    pages x 2 x page_tokens x heads x head_dim, and k() / v() its halves:
    strided views); `aux_buffers` the metadata buffers, each aux_slots
    rows of its own bytes (uint8), `aux` the first of them; `raw` the
    whole pool as uint8. Every view keeps the mapping: a manager closed
    while views are alive closes its engine when the last one goes."""

    def __init__(self, base, size, bufs, shape, dtype):
        self.base = base
        self.size = size
        self.buffers = bufs
        # A subclass so the memory object takes weak references: the
        # manager closes the engine once the last view of it is gone.
        mem_type = type("PoolMemory", (ctypes.c_char * size,), {})
        self._mem = mem_type.from_address(base)
        self._shape = shape
        self._dtype = np.dtype(dtype)
        self._by_key = {(b.layer_id, b.role): b for b in bufs}
        self._quiet = sys.getrefcount(self._mem)

    @property
    def raw(self):
        """The whole pool as uint8."""
        return np.frombuffer(self._memory(), dtype=np.uint8)

    def exported(self):
        """True while a view made by this pool is alive."""
        return sys.getrefcount(self._mem) > self._quiet

    def release(self, close):
        """Calls close() now if no view is alive, else once the last view
        is gone. The pool makes no views after this."""
        mem, self._mem = self._mem, None
        if sys.getrefcount(mem) > self._quiet:
            weakref.finalize(mem, close)
        else:
            close()

    def _memory(self):
        if self._mem is None:
            raise RuntimeError("kvwire pool: its manager is closed")
        return self._mem

    def _view(self, b):
        s = self._shape
        if b.role in (ROLE_AUX, ROLE_STATE):
            shape = (b.pages, b.item_len)
            dt = np.uint8
        else:
            dt = self._dtype
            per_page = b.item_len // dt.itemsize
            if s.mla:
                shape = (b.pages, s.page_tokens, per_page // s.page_tokens)
            elif b.role == ROLE_KVB:
                heads = per_page // (2 * s.page_tokens * s.head_dim)
                shape = (b.pages, 2, s.page_tokens, heads, s.head_dim)
            else:
                heads = per_page // (s.page_tokens * s.head_dim)
                shape = (b.pages, s.page_tokens, heads, s.head_dim)
        return np.ndarray(shape, dtype=dt, buffer=self._memory(),
                          offset=b.offset)

    def buffer(self, layer_id, role):
        try:
            return self._view(self._by_key[(layer_id, role)])
        except KeyError:
            raise KeyError("layer %d has no %s buffer on this rank" %
                           (layer_id, {ROLE_K: "K", ROLE_V: "V", ROLE_KV: "KV",
                                       ROLE_KVB: "KVB"}.get(role, "?"))) \
                from None

    def _block_major(self):
        return self._shape.kv_layout == "vllm-blocks"

    def k(self, layer_id):
        """Layer layer_id's K buffer (MLA: its latent KV buffer; block-major:
        the K half of every block, a strided view)."""
        if self._block_major():
            return self.buffer(layer_id, ROLE_KVB)[:, 0]
        return self.buffer(layer_id, ROLE_KV if self._shape.mla else ROLE_K)

    def v(self, layer_id):
        if self._block_major():
            return self.buffer(layer_id, ROLE_KVB)[:, 1]
        return self.buffer(layer_id, ROLE_V)

    def state(self, component, layer_id):
        """State component `component`'s buffer of layer layer_id: its
        rows x row bytes (this rank's part of a sharded row), uint8."""
        return self.buffer(state_layer(component, layer_id), ROLE_STATE)

    @property
    def aux(self):
        """Metadata buffer 0 (aux_slots x its row bytes, uint8)."""
        return self.buffer(0, ROLE_AUX)

    @property
    def aux_buffers(self):
        """Every metadata buffer in order, aux_slots x row bytes of uint8
        each: a room's aux slot is one row of every one."""
        return [self._view(b) for b in self.buffers if b.role == ROLE_AUX]
