"""conn.py - SGLang's transfer-backend interface over kvwire: KVPoll,
KVArgs, a manager per rank (KVManager), KVSender, KVReceiver and the
KVBootstrapServer, with the names and meanings of SGLang's
disaggregation base module (see python/README.md).

A manager is one struct kvw_engine: commands go to the rank's kv-sender or
kv-receiver, progress is read from its mapped room table, and the rank's
KV cache lives in kvwire's pool, exposed as numpy views (zero copy).
Senders and receivers never block on the network: init/send/send_metadata
queue one command each, poll() reads shared memory.
"""
import contextlib
import dataclasses
import os
import sys
import threading
import time
import weakref
from typing import Optional

import numpy as np

from . import _lib
from ._lib import lib
from .layout import (ROLE_AUX, Shape, c_layout, layer_range, make_layout,
                     rank_kv_heads, read_run_dir)
from .pool import KVPool


class KVPoll:
    """SGLang's room states; kvwire's table uses the same numbers."""
    Failed = 0
    Bootstrapping = 1
    WaitingForInput = 2
    Transferring = 3
    Success = 4


class KVWireError(RuntimeError):
    """A kvwire call failed: `code` is the KVW_E* value, `name` its name."""

    def __init__(self, what, code, detail=""):
        self.code = code
        self.name = _lib.strerror(code)
        super().__init__("%s: %s%s" % (what, self.name,
                                       ": " + detail if detail else ""))


class KVTransferError(Exception):
    """Raised by failure_exception(): the room and kvwire's reason."""

    def __init__(self, bootstrap_room, failure_reason, is_from_another_rank=False):
        super().__init__(failure_reason)
        self.bootstrap_room = bootstrap_room
        self.failure_reason = failure_reason
        self.is_from_another_rank = is_from_another_rank

    def __str__(self):
        return "KVTransferError(bootstrap_room=%d): %s" % (
            self.bootstrap_room, self.failure_reason)


@dataclasses.dataclass
class KVTransferMetric:
    """SGLang's KVTransferMetric (base/conn.py), field for field: what
    get_transfer_metric() reports of a room that succeeded."""
    # Entering WaitingForInput (the prefill has the decode's pages; the
    # decode has told it) to entering Success, on this side's table.
    transfer_latency_s: Optional[float] = None
    alloc_latency_s: Optional[float] = None  # kvwire does not allocate
    # Prefill: the bytes its workers moved for the room (every decode
    # rank); decode: its destination pages' bytes of every KV buffer and
    # its aux row of every metadata buffer.
    transfer_total_bytes: Optional[int] = None


@dataclasses.dataclass
class KVArgs:
    """A rank's configuration, SGLang's KVArgs in kvwire terms. Fill it with
    KVArgs.from_run_dir; the pointer lists are set by the manager once the
    pool is mapped."""
    run_dir: str = ""
    member: str = ""
    engine_rank: int = 0          # tp rank inside the instance
    pp_rank: int = 0
    tp_size: int = 1
    pp_size: int = 1
    prefill_start_layer: int = 0  # this rank's first layer
    prefill_end_layer: int = 0    # one past its last layer
    num_layers: int = 0           # layers of the whole model
    kv_head_num: int = 0          # kv heads on this rank
    total_kv_head_num: int = 0
    head_dim: int = 0
    page_size: int = 0            # tokens per page
    pages: int = 0                # pages in the pool
    aux_slots: int = 0            # rows of every metadata buffer
    dtype: object = None          # numpy dtype of the K/V elements
    shape: Shape = None
    engine_endpoint: str = ""
    table_path: str = ""
    pool_path: str = ""
    bootstrap_addr: str = ""      # the instance's kv-bootstrap endpoint
    # Prefill: a room no decode has asked for in this long fails (SGLang's
    # bootstrap timeout; kvwire's own deadline covers rooms it knows).
    bootstrap_timeout: float = float(os.environ.get("KVW_BOOTSTRAP_TIMEOUT",
                                                    300))
    send_timeout: float = 10.0    # how long a full command queue is retried
    # How long the control process may be away (a restart by kv-up takes
    # less) before calls raise and open rooms fail: a group that is gone
    # is said within seconds, never waited out.
    control_grace: float = float(os.environ.get("KVW_CONTROL_GRACE", 5))
    kv_data_ptrs: list = dataclasses.field(default_factory=list)
    kv_data_lens: list = dataclasses.field(default_factory=list)
    kv_item_lens: list = dataclasses.field(default_factory=list)
    kv_layer_ids: list = dataclasses.field(default_factory=list)
    aux_data_ptrs: list = dataclasses.field(default_factory=list)
    aux_data_lens: list = dataclasses.field(default_factory=list)
    aux_item_lens: list = dataclasses.field(default_factory=list)

    @classmethod
    def from_run_dir(cls, run_dir, mode, tp_rank=0, pp_rank=0, dtype=None):
        """The args of the `mode` ("prefill" or "decode") member at
        (tp_rank, pp_rank) of the group kv-up started in run_dir. dtype
        defaults to float32/float16/uint8/float64 by --dtype-bytes."""
        members, shape = read_run_dir(run_dir)
        m = [x for x in members.values() if x.role == mode and
             x.rank[0] == tp_rank and x.rank[1] == pp_rank]
        if not m:
            raise ValueError("%s/endpoints: no %s member at tp %d pp %d"
                             % (run_dir, mode, tp_rank, pp_rank))
        m = m[0]
        dt = np.dtype(dtype if dtype is not None else
                      {4: np.float32, 2: np.float16, 1: np.uint8,
                       8: np.float64}.get(shape.dtype_bytes, np.uint8))
        if dt.itemsize != shape.dtype_bytes and not shape.mla:
            raise ValueError("dtype %s is %d bytes, the group's "
                             "--dtype-bytes is %d" % (dt, dt.itemsize,
                                                      shape.dtype_bytes))
        first, count = layer_range(shape, m.topo[1], m.rank[1])
        boot = members.get("bootstrap")
        return cls(run_dir=run_dir, member=m.name, engine_rank=tp_rank,
                   pp_rank=pp_rank, tp_size=m.topo[0], pp_size=m.topo[1],
                   prefill_start_layer=first,
                   prefill_end_layer=first + count, num_layers=shape.layers,
                   kv_head_num=rank_kv_heads(shape, m.topo[0]),
                   total_kv_head_num=shape.kv_heads, head_dim=shape.head_dim,
                   page_size=shape.page_tokens, pages=shape.pages,
                   aux_slots=shape.aux_slots,
                   aux_item_lens=list(shape.aux_bytes),
                   dtype=dt, shape=shape, engine_endpoint=m.engine,
                   table_path=m.table, pool_path=m.pool,
                   bootstrap_addr=boot.listen if boot else "")


def _kv_lists(what, ptrs, lens, item_lens):
    """SGLang's kv_data_ptrs / lens / item_lens checked: their common
    length, or ValueError for lists of different lengths or values that
    are not unsigned integers of their width."""
    n = len(ptrs)
    if len(lens) != n or len(item_lens) != n:
        raise ValueError("%s: %d pointers, %d lengths, %d item lengths"
                         % (what, n, len(lens), len(item_lens)))
    for name, vals, bits in (("pointer", ptrs, 64), ("length", lens, 64),
                             ("item length", item_lens, 32)):
        for v in vals:
            if not isinstance(v, int) or not 0 <= v < 2 ** bits:
                raise ValueError("%s: %s %r is not an unsigned %d-bit "
                                 "integer" % (what, name, v, bits))
    return n


class KVManager:
    """One rank's connection to its kvwire control process (SGLang's
    KVManager). disaggregation_mode: "prefill" or "decode"."""

    def __init__(self, args: KVArgs, disaggregation_mode="prefill"):
        if disaggregation_mode not in ("prefill", "decode"):
            raise ValueError("disaggregation_mode: prefill or decode, not %r"
                             % (disaggregation_mode,))
        self.kv_args = args
        self.mode = disaggregation_mode
        self.lock = threading.Lock()
        self._e = None
        # Rooms of this manager not cleared yet, by id (a second live room
        # of one id on one side is refused).
        self._live = weakref.WeakValueDictionary()
        self._away_since = None  # when the control was first seen away
        self._gone_at = 0.0      # when control_gone last looked
        self._gone = None        # what it found
        self._allocs = {}        # kvw_alloc's memory objects, by address
        self._batch_depth = 0    # batch() blocks open
        # kvw_poll_many's arrays (_poll_rows), kept from call to call: an
        # engine polls its live rooms every step.
        self._poll_lock = threading.Lock()
        self._poll_cap = 0
        err = _lib.ctypes.create_string_buffer(256)
        e = _lib.ctypes.c_void_p()
        rc = lib.kvw_engine_open(args.engine_endpoint.encode(),
                                 args.table_path.encode(),
                                 args.pool_path.encode(),
                                 _lib.ctypes.byref(e), err, len(err))
        if rc < 0:
            raise KVWireError("kvw_engine_open(%s)" % args.member, rc,
                              err.value.decode(errors="replace"))
        self._e = e
        shape = args.shape
        rank = (args.engine_rank, args.pp_rank, 0, 0)
        topo = (args.tp_size, args.pp_size, 1, 1)
        bufs, need = make_layout(shape, topo, rank, self.mode == "decode")
        size = lib.kvw_pool_size(e)
        if size != need:
            self.close()
            raise ValueError("%s: pool %s has %d bytes, the shape needs %d"
                             % (args.member, args.pool_path, size, need))
        self.pool = KVPool(lib.kvw_pool_base(e), size, bufs, shape,
                           args.dtype)
        for name in ("kv_data_ptrs", "kv_data_lens", "kv_item_lens",
                     "kv_layer_ids", "aux_data_ptrs", "aux_data_lens",
                     "aux_item_lens"):
            setattr(args, name, [])  # this manager's pool, not a former one
        for b in bufs:
            ptr, ln = self.pool.base + b.offset, b.item_len * b.pages
            if b.role == ROLE_AUX:
                args.aux_data_ptrs.append(ptr)
                args.aux_data_lens.append(ln)
                args.aux_item_lens.append(b.item_len)
            else:
                args.kv_data_ptrs.append(ptr)
                args.kv_data_lens.append(ln)
                args.kv_item_lens.append(b.item_len)
                args.kv_layer_ids.append(b.layer_id)

    # ---- the engine handle, one caller at a time ------------------------

    def _handle(self):
        if self._e is None:
            raise RuntimeError("kvwire manager %s is closed"
                               % self.kv_args.member)
        return self._e

    def control_gone(self):
        """None while the control process runs (or has been away for less
        than control_grace, as in a restart); else why the group is gone.
        Looks at most every 0.2 s (a stat and a kill(pid, 0))."""
        now = time.monotonic()
        if now - self._gone_at < 0.2:
            return self._gone
        self._gone_at = now
        rc = self.control_check()
        if rc == 0:
            self._away_since, self._gone = None, None
        elif rc == _lib.ENOENT:
            self._gone = ("the group is gone: no room table at %s"
                          % self.kv_args.table_path)
        else:
            if self._away_since is None:
                self._away_since = now
            if now - self._away_since >= self.kv_args.control_grace:
                self._gone = ("the %s control process is gone: no process "
                              "has held its room table for %.1f s"
                              % (self.kv_args.member, now - self._away_since))
        return self._gone

    def call(self, what, fn, *args):
        """Runs a command (kvw_send_begin, ...) under the lock; a full queue
        (EAGAIN) is retried for send_timeout seconds. Raises KVWireError,
        also at once when the group is gone (control_gone)."""
        gone = self.control_gone()
        if gone:
            raise KVWireError("%s on %s" % (what, self.kv_args.member),
                              _lib.ENOENT, gone)
        deadline, nap = None, 50e-6
        while True:
            with self.lock:
                e = self._handle()
                rc = fn(e, *args)
                detail = "" if rc >= 0 else \
                    (lib.kvw_engine_error(e) or b"").decode(errors="replace")
            if rc != _lib.EAGAIN:
                break
            if deadline is None:  # read the clock only when it matters
                deadline = time.monotonic() + self.kv_args.send_timeout
            elif time.monotonic() >= deadline:
                break
            time.sleep(nap)  # the control drains its queue: poll again
            nap = min(nap * 2, 1e-3)
        if rc < 0:
            raise KVWireError("%s on %s" % (what, self.kv_args.member), rc,
                              detail)
        return rc

    @contextlib.contextmanager
    def batch(self):
        """Holds this manager's commands (kvw_engine_hold) for the block and
        sends them in one burst at its end: a scheduler step's BEGINs,
        chunks and clears over many rooms then wake the control process
        once, not once each (bench/README.md). A held command has no
        effect until the block ends: poll after it. Nested blocks send at
        the outermost end. What the end cannot send (the group gone, its
        queue full past send_timeout: KVWireError) stays queued ahead of
        later commands. One thread's blocks at a time, as SGLang's
        scheduler runs a manager."""
        if self._batch_depth == 0:
            self.call("kvw_engine_hold", lib.kvw_engine_hold, 1)
        self._batch_depth += 1
        try:
            yield self
        finally:
            self._batch_depth -= 1
            if self._batch_depth == 0:
                self.call("kvw_engine_hold", lib.kvw_engine_hold, 0)

    def register_gpu_pool(self, kv_data_ptrs, kv_data_lens, kv_item_lens,
                          device=0):
        """Registers this engine's KV cache in GPU memory: SGLang's
        kv_data_ptrs / kv_data_lens / kv_item_lens (device addresses, e.g.
        tensor.data_ptr(), one buffer per layer and K/V in the pool
        layout's order; the AUX slots stay in the mapped host pool). Each
        buffer's allocation is exported as a CUDA IPC handle that the cuda
        transport's workers open; the memory must stay allocated until
        close(). Raises ValueError for lists of different lengths or
        values that are not unsigned integers of their width, KVWireError
        for everything the C call refuses (EINVAL: count, NULL, zero or
        overflowing lengths, overlap, more than the pool holds; ENODEV:
        no usable GPU, with the reason). On success kv_args' kv_data_*
        lists name the GPU buffers."""
        n = _kv_lists("register_gpu_pool", kv_data_ptrs, kv_data_lens,
                      kv_item_lens)
        c = _lib.ctypes
        ptrs = (c.c_uint64 * max(n, 1))(*kv_data_ptrs)
        lens = (c.c_uint64 * max(n, 1))(*kv_data_lens)
        items = (c.c_uint32 * max(n, 1))(*kv_item_lens)
        err = c.create_string_buffer(256)
        with self.lock:
            rc = lib.kvw_register_gpu_pool(self._handle(), int(device), ptrs,
                                           lens, items, n, err, len(err))
        self._registered("register_gpu_pool", rc,
                         err.value.decode(errors="replace"), kv_data_ptrs,
                         kv_data_lens, kv_item_lens)

    def _registered(self, what, rc, detail, ptrs, lens, item_lens):
        """After a registration call: KVWireError when it failed, else
        kv_args' kv_data_* lists name the buffers now registered."""
        if rc < 0:
            raise KVWireError("%s(%s)" % (what, self.kv_args.member), rc,
                              detail)
        self.kv_args.kv_data_ptrs = list(ptrs)
        self.kv_args.kv_data_lens = list(lens)
        self.kv_args.kv_item_lens = list(item_lens)

    def alloc(self, nbytes):
        """Host memory the group's processes can map (kvw_alloc): a zeroed
        uint8 numpy array of nbytes. An engine that keeps its KV cache in
        host memory allocates it here (one array per buffer, or one for
        many: reshape or view it as it likes) and registers it in place
        with register_host_pool; memory from anywhere else is refused
        there, since no other process can reach it. The memory lives until
        close() and, after it, while a view of it is alive."""
        nbytes = int(nbytes)
        if nbytes <= 0:
            raise ValueError("alloc: %d bytes" % nbytes)
        c = _lib.ctypes
        ptr, err = c.c_void_p(), c.create_string_buffer(256)
        with self.lock:
            rc = lib.kvw_alloc(self._handle(), nbytes, c.byref(ptr), err,
                               len(err))
        if rc < 0:
            raise KVWireError("alloc(%d) on %s" % (nbytes,
                                                   self.kv_args.member),
                              rc, err.value.decode(errors="replace"))
        # A subclass so the memory object takes weak references (close
        # waits for the last view, as the pool's do).
        mem_type = type("HostMemory", (c.c_char * nbytes,), {})
        self._allocs[ptr.value] = mem_type.from_address(ptr.value)
        self._allocs_quiet = sys.getrefcount(self._allocs[ptr.value])
        return np.frombuffer(self._allocs[ptr.value], dtype=np.uint8)

    def register_host_pool(self, kv_data_ptrs, kv_data_lens, kv_item_lens):
        """Registers this engine's KV cache in its own host memory, in
        place: SGLang's kv_data_ptrs / kv_data_lens / kv_item_lens (one
        buffer per layer and K/V, in this rank's layout order, as kv_args
        lists them; page p of buffer i at ptr + p * item_len), every one
        inside memory from alloc(). kvwire's workers then read (prefill)
        or write (decode) those bytes where they are; the metadata buffers
        stay in the pool. Raises ValueError for lists of different lengths,
        a count other than the layout's or values that are not unsigned
        integers of their width; KVWireError (EINVAL) for what the C call
        refuses: a length that is not a multiple of its item length, an
        item length or page count other than the layout's, memory that
        alloc() did not give, buffers that are not whole pages of memory.
        On success kv_args' kv_data_* lists name the engine's buffers."""
        kv = [b for b in self.pool.buffers if b.role != ROLE_AUX]
        n = _kv_lists("register_host_pool", kv_data_ptrs, kv_data_lens,
                      kv_item_lens)
        if n != len(kv):
            raise ValueError("register_host_pool: %d buffers, this rank's "
                             "layout has %d KV buffers" % (n, len(kv)))
        c = _lib.ctypes
        hb = (_lib.HostBuf * n)(*[
            _lib.HostBuf(p, ln, it, b.layer_id, b.role)
            for p, ln, it, b in zip(kv_data_ptrs, kv_data_lens,
                                    kv_item_lens, kv)])
        layout = c_layout(self.pool.buffers)
        err = c.create_string_buffer(512)
        with self.lock:
            rc = lib.kvw_register_host(self._handle(), c.addressof(layout),
                                       len(self.pool.buffers), hb, n, err,
                                       len(err))
        self._registered("register_host_pool", rc,
                         err.value.decode(errors="replace"), kv_data_ptrs,
                         kv_data_lens, kv_item_lens)

    def register_in_place(self, kv_data_ptrs, kv_data_lens, kv_item_lens,
                          device=0):
        """An engine's KV cache where the engine put it, the lists as
        register_host_pool takes them: host memory from alloc() is
        registered as it is (register_host_pool); anything else is taken
        for the engine's GPU buffers on `device` (an engine's usual place)
        and exported to the group by CUDA IPC (register_gpu_pool). Raises
        ValueError for lists register_host_pool refuses before the call,
        KVWireError for host memory it refuses for another reason than
        where it came from, and KVWireError with both reasons when the
        memory is neither kvwire's host memory nor GPU memory it could
        export."""
        try:
            self.register_host_pool(kv_data_ptrs, kv_data_lens, kv_item_lens)
            return
        except KVWireError as host:
            if "did not allocate" not in str(host):
                raise
            why_host = str(host)
        try:
            self.register_gpu_pool(kv_data_ptrs, kv_data_lens, kv_item_lens,
                                   device=device)
        except KVWireError as gpu:
            raise KVWireError(
                "register", gpu.code, "not host memory from kvwire (%s), nor "
                "GPU memory it could export (%s)" % (why_host, gpu)) from None

    def unregister_host_pool(self):
        """Takes back register_host_pool: the pool's own pages serve again
        (zeroed), and kv_args' kv_data_* lists name them."""
        with self.lock:
            rc = lib.kvw_unregister_host(self._handle())
        kv = [b for b in self.pool.buffers if b.role != ROLE_AUX]
        self._registered("unregister_host_pool", rc, _lib.strerror(rc),
                         [self.pool.base + b.offset for b in kv],
                         [b.item_len * b.pages for b in kv],
                         [b.item_len for b in kv])

    def status(self, room) -> Optional[_lib.RoomStatus]:
        """The room's row in the table, or None when it is not there yet:
        an incarnation of the id this manager cleared, or one that was over
        when it began the room again, is never returned (kvw_poll)."""
        st = _lib.RoomStatus()
        return st if self._read_row("kvw_poll", lib.kvw_poll, room,
                                    _lib.ctypes.byref(st)) else None

    def _read_row(self, what, fn, room, out):
        """fn(engine, room, out) until it is not EAGAIN (a slot mid-rewrite,
        at most 1000 reads): True when read, False for ENOENT; raises on
        any other error."""
        e = self._handle()
        for _ in range(1000):
            rc = fn(e, room, out)
            if rc != _lib.EAGAIN:
                break
        if rc == _lib.ENOENT:
            return False
        if rc < 0:
            raise KVWireError("%s on %s" % (what, self.kv_args.member), rc)
        return True

    def statuses(self, rooms):
        """status() of every room id in rooms, in one call of the library
        (kvw_poll_many): a list of RoomStatus or None."""
        with self._poll_lock:
            rcs, _, sts = self._poll_rows(rooms)
            return [_row(rc, sts, i) for i, rc in enumerate(rcs)]

    def _poll_rows(self, rooms):
        """kvw_poll_many over the room ids in rooms, into this manager's
        arrays: (rcs, states, sts), rcs and the rows' states as lists and
        sts the RoomStatus array they index, good until the next call
        (the caller holds _poll_lock). Raises for a code other than 0 and
        ENOENT."""
        n = len(rooms)
        if n > self._poll_cap:
            cap = max(n, 2 * self._poll_cap, 64)
            self._poll_ids = np.empty(cap, np.uint64)
            self._poll_sts = (_lib.RoomStatus * cap)()
            self._poll_rcs = np.empty(cap, np.int32)
            # Each row's state (its first uint32) as a numpy column.
            self._poll_states = np.frombuffer(self._poll_sts, np.uint32) \
                .reshape(cap, -1)[:, 0]
            self._poll_args = (self._poll_ids.ctypes.data,
                               _lib.ctypes.addressof(self._poll_sts),
                               self._poll_rcs.ctypes.data)
            self._poll_cap = cap
        self._poll_ids[:n] = rooms
        ids, sts, rcs = self._poll_args
        e = self._handle()
        for _ in range(16):  # kvw_poll_many reads a busy slot 64 times
            lib.kvw_poll_many(e, ids, n, sts, rcs)
            codes = self._poll_rcs[:n].tolist()
            if _lib.EAGAIN not in codes:
                break
        for rc in codes:
            if rc != 0 and rc != _lib.ENOENT:
                raise KVWireError("kvw_poll on %s" % self.kv_args.member,
                                  rc)
        return codes, self._poll_states[:n].tolist(), self._poll_sts

    def room_times(self, room):
        """When the room's incarnation (status()'s) entered each state:
        CLOCK_MONOTONIC seconds by KVPoll value, None for a state it has
        not entered (or a table that does not measure); None when the
        room is not there (kvw_room_times)."""
        t = self._times_ns(room)
        return None if t is None else [x / 1e9 if x else None for x in t]

    def _times_ns(self, room):
        """kvw_room_times's array (ns, 0 for a state not entered), or None
        when the room is not there."""
        t = (_lib.ctypes.c_uint64 * _lib.NSTATES)()
        if not self._read_row("kvw_room_times", lib.kvw_room_times, room, t):
            return None
        return t

    def _latency_ns(self, room):
        """The room's WaitingForInput-to-Success time on this side's table
        in ns, None where it is not known (what a room's success reads:
        room_times without its list of floats)."""
        t = self._times_ns(room)
        if t is None or not (t[_lib.SUCCESS] and t[_lib.WAITING]):
            return None
        return max(0, t[_lib.SUCCESS] - t[_lib.WAITING])

    def epoch(self):
        return lib.kvw_control_epoch(self._handle())

    def control_check(self):
        """0 (control up), EAGAIN (restarting) or ENOENT (group gone)."""
        return lib.kvw_control_check(self._handle())

    def close(self):
        """Closes the manager: no command or poll after this. The engine
        (and the pool's mapping) closes now, or, while numpy views of the
        pool are alive, once the last one is gone."""
        with self.lock:
            e, self._e = self._e, None
        if e is None:
            return

        def close_engine():
            lib.kvw_engine_close(_lib.ctypes.byref(e))

        # The engine (and with it the pool's mapping and every alloc())
        # closes once the last view of any of them is gone.
        allocs, self._allocs = list(self._allocs.values()), {}
        # A view holds a reference past the dict's (now the list's) one
        # that alloc() measured; m holds one more.
        alive = [m for m in allocs
                 if sys.getrefcount(m) > self._allocs_quiet + 1]
        del allocs
        pending = [len(alive) + 1]

        def one_gone():
            pending[0] -= 1
            if pending[0] == 0:
                close_engine()

        for m in alive:
            weakref.finalize(m, one_gone)
        del alive
        pool = getattr(self, "pool", None)
        if pool is None:
            one_gone()
        else:
            pool.release(one_gone)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # At interpreter exit (sys.meta_path is gone) the process is ending:
        # the OS takes back the mapping and the socket, and a close deferred
        # to the last pool view (weakref.finalize) can no longer be set up.
        if getattr(self, "_e", None) is not None and \
                sys.meta_path is not None:
            self.close()


_I32 = np.dtype(np.int32)
# Up to this many indices, the bound is checked over a list: a numpy
# reduction costs a microsecond or more of fixed overhead (issue 33 item 6).
_SMALL = 256


def _pages_arg(kv_indices, pages, what):
    """kv_indices as a contiguous uint32 array after the checks SGLang's
    callers rely on: an int32 numpy array, 1-D, every index in the pool."""
    if not isinstance(kv_indices, np.ndarray):
        raise TypeError("%s: kv_indices must be a numpy int32 array, not %s"
                        % (what, type(kv_indices).__name__))
    if kv_indices.dtype != _I32:
        raise TypeError("%s: kv_indices must be int32, not %s"
                        % (what, kv_indices.dtype))
    if kv_indices.ndim != 1:
        raise ValueError("%s: kv_indices must be 1-D" % what)
    # The uint32 the API takes: a non-negative index keeps its value and a
    # negative one reads as 2**31 or more, past any pool, so one upper
    # bound checks both ends.
    u = np.ascontiguousarray(kv_indices).view(np.uint32)
    if u.size:
        top = max(u.tolist()) if u.size <= _SMALL else int(u.max())
        if top >= pages:
            bad = kv_indices[(kv_indices < 0) | (kv_indices >= pages)][0]
            raise IndexError("%s: page index %d outside the pool's %d "
                             "pages" % (what, bad, pages))
    return u


def _state_arg(state_indices, what):
    """SGLang's state_indices (one list per state type, None or [] for a
    type the room does not name) as (a kvw_state_rows array, its length,
    the arrays it points into), or None when it names no row at all."""
    if state_indices is None:
        return None
    lists = list(state_indices)
    if len(lists) > _lib.MAX_STATE:
        raise ValueError("%s: %d state lists, at most %d" %
                         (what, len(lists), _lib.MAX_STATE))
    keep = []
    for i, rows in enumerate(lists):
        a = np.asarray([] if rows is None else rows)
        if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
            raise TypeError("%s: state list %d must be a 1-D list of "
                            "integers" % (what, i))
        if a.size > _lib.MAX_STATE_IDX or (a.size and a.min() < 0):
            raise ValueError("%s: state list %d: %d rows, each >= 0 (at "
                             "most %d)" % (what, i, a.size,
                                           _lib.MAX_STATE_IDX))
        keep.append(np.ascontiguousarray(a, dtype=np.uint32))
    if not any(a.size for a in keep):
        return None
    arr = (_lib.StateRows * len(keep))(
        *(_lib.StateRows(a.ctypes.data if a.size else None, a.size)
          for a in keep))
    return arr, len(keep), keep


def _ptr(a):
    """The address of a contiguous array's data, for a c_void_p argument:
    through a ctypes view of its buffer (a third of .ctypes.data's cost),
    or .ctypes.data for an array that lends no writable bytes (read-only,
    empty)."""
    try:
        return _lib.ctypes.addressof(_lib.ctypes.c_char.from_buffer(a))
    except (TypeError, ValueError):
        return a.ctypes.data


_UNREAD = object()  # poll(): the room's row is not read yet


def _row(rc, sts, i):
    """Row i of a kvw_poll_many array as status() returns it: a copy, or
    None for a room not there (rc ENOENT)."""
    return _lib.RoomStatus.from_buffer_copy(sts, i * _ROW) if rc == 0 \
        else None


_ROW = _lib.ctypes.sizeof(_lib.RoomStatus)


def poll_many(rooms):
    """[r.poll() for r in rooms], with one read of each manager's table for
    all of its rooms that need one (kvw_poll_many) instead of one call per
    room: for an engine that polls every live room each step (SGLang's
    poll_and_all_reduce). rooms: KVSender and KVReceiver objects, of any
    managers, in any mix. While its group is up, a room still under way
    in the table (its row there, Bootstrapping to Transferring) is
    answered from the row's state alone, and one whose command its control
    has not taken yet (no row, the same control epoch) from _absent(), as
    poll() would answer them; every other room goes through poll() with
    its row (issue 33 item 6: the per-room work of a step is most of a
    Python engine's cost)."""
    rooms = list(rooms)
    out = [None] * len(rooms)
    ask = {}  # manager -> indices into rooms of those that read the table
    for i, r in enumerate(rooms):
        if r.conclude_state is not None:
            out[i] = r.conclude_state
        elif r._needs_row():
            ask.setdefault(r.kv_mgr, []).append(i)
        else:
            out[i] = r.poll()
    for mgr, idx in ask.items():
        with mgr._poll_lock:
            rcs, states, sts = mgr._poll_rows([rooms[i].bootstrap_room
                                               for i in idx])
            up = mgr.control_gone() is None
            epoch = now = None
            for j, i in enumerate(idx):
                s, r, rc, ans = states[j], rooms[i], rcs[j], None
                if up and rc == 0 and 0 < s < _lib.SUCCESS:
                    ans = r._UNDER_WAY[s]
                elif up and rc == _lib.ENOENT:
                    if epoch is None:
                        epoch, now = mgr.epoch(), time.monotonic()
                    if r._epoch is None or r._epoch == epoch:
                        ans = r._absent(now)
                out[i] = r.poll(_row(rc, sts, j)) if ans is None else ans
    return out


class _Room:
    """What KVSender and KVReceiver share: the latch on a terminal state,
    the failure reason, clear() and the failure exception."""

    side = ""

    def __init__(self, mgr, bootstrap_addr, bootstrap_room):
        if bootstrap_room is None or not 0 < int(bootstrap_room) < 2 ** 64:
            raise ValueError("bootstrap_room must be an integer in "
                             "[1, 2**64)")
        self.kv_mgr = mgr
        self.bootstrap_addr = bootstrap_addr
        self.bootstrap_room = int(bootstrap_room)
        self.conclude_state = None
        self.failure_reason = None
        self._cleared = False
        # Once Success is seen: (latency ns, bytes), then the
        # KVTransferMetric made of them (get_transfer_metric).
        self._metric = None
        self._epoch = None  # the control's epoch when it took our command
        old = mgr._live.get(self.bootstrap_room)
        if old is not None and not old._cleared:
            # Both would read the one row of the table: the second would
            # report the first's Success over pages it never got.
            raise ValueError("room %d is live on %s already: clear() the "
                             "%s of it before beginning the id again"
                             % (self.bootstrap_room, mgr.kv_args.member,
                                type(old).__name__))

    def _claim(self):
        """The id is this room's on its manager (the subclass's checks all
        passed: a room refused half-way holds nothing)."""
        self.kv_mgr._live[self.bootstrap_room] = self

    def _usable(self, what):
        if self._cleared:
            raise RuntimeError("%s: %s room %d used after clear()"
                               % (what, self.side, self.bootstrap_room))

    def _fail(self, reason):
        if self.failure_reason is None:
            self.failure_reason = reason
        self.conclude_state = KVPoll.Failed
        return KVPoll.Failed

    def _read(self, st=_UNREAD):
        """The room's table row (st, when the caller read it already);
        None when it is not there. A command that a control process took
        before it restarted died with it: Failed."""
        if st is _UNREAD:
            st = self.kv_mgr.status(self.bootstrap_room)
        if st is not None and st.state == _lib.CLEARED:
            st = None  # an earlier incarnation of the id: ours is not in yet
        if st is None or st.state not in (_lib.FAILED, _lib.SUCCESS):
            gone = self.kv_mgr.control_gone()
            if gone:
                self._fail(gone)
                return None
        if st is None:
            if self._epoch is not None and self.kv_mgr.epoch() != self._epoch:
                self._fail("owner restarted: the %s control process "
                           "restarted before it took the room" % self.side)
            return None
        if st.state == _lib.FAILED:
            self._fail(_lib.reason_str(st.reason) if st.reason else None)
        elif st.state == _lib.SUCCESS:
            self.conclude_state = KVPoll.Success
            self._measure(st)
        return st

    def _measure(self, st):
        """What the room's KVTransferMetric needs, read once as it
        succeeds (its row is gone after clear()); the metric itself is
        made when asked for (most engines never ask)."""
        self._metric = (self.kv_mgr._latency_ns(self.bootstrap_room),
                        self._bytes(st))

    def get_transfer_metric(self):
        """SGLang's: the KVTransferMetric of a room that succeeded (latency
        and bytes; speed is their quotient), None before Success or for a
        room that failed."""
        if self.conclude_state is None and not self._cleared:
            self.poll()
        if self.conclude_state != KVPoll.Success:
            return None
        if isinstance(self._metric, tuple):
            lat, nbytes = self._metric
            self._metric = KVTransferMetric(
                transfer_latency_s=None if lat is None else lat / 1e9,
                transfer_total_bytes=nbytes)
        return self._metric

    def failure_exception(self):
        """SGLang's: latches Failed, clears the room, raises
        KVTransferError naming the reason kvwire recorded."""
        if self.conclude_state is None:
            self.poll()
        if self.conclude_state != KVPoll.Failed:
            self._fail(None)
        reason = self.failure_reason
        if not self._cleared:
            self.clear()
        if reason is None:
            raise KVTransferError(self.bootstrap_room, "Failed due to an "
                                  "unknown reason from another rank", True)
        raise KVTransferError(self.bootstrap_room, "%s room failed on %s: %s"
                              % (self.side, self.kv_mgr.kv_args.member,
                                 reason))

    def clear(self):
        """The engine is done with the room (CLEAR); a room still active is
        failed by its control process first. The object is then spent; a
        second clear() does nothing (SGLang clears after
        failure_exception(), which has cleared already). A group that is
        gone has nothing left to clear."""
        if self._cleared:
            return
        if self.kv_mgr.control_gone() is None:
            self.kv_mgr.call("kvw_clear", lib.kvw_clear, self.bootstrap_room)
        self._cleared = True
        if self.kv_mgr._live.get(self.bootstrap_room) is self:
            del self.kv_mgr._live[self.bootstrap_room]


class KVSender(_Room):
    """Prefill side of one room (SGLang's KVSender). dest_tp_ranks and
    pp_rank are accepted for the interface: kvwire's sender learns its
    destinations from the decode's registration."""

    side = "prefill"
    # poll()'s answer for a row Bootstrapping, WaitingForInput or
    # Transferring while the group is up (poll_many's shortcut).
    _UNDER_WAY = (None, _lib.BOOTSTRAPPING, _lib.WAITING, _lib.TRANSFERRING)

    def __init__(self, mgr, bootstrap_addr, bootstrap_room, dest_tp_ranks=None,
                 pp_rank=0, req_has_disagg_prefill_dp_rank=False):
        super().__init__(mgr, bootstrap_addr, bootstrap_room)
        self.dest_tp_ranks = dest_tp_ranks
        self.pp_rank = pp_rank
        self.num_kv_indices = None
        self.sent = 0
        self._t0 = time.monotonic()
        self._claim()

    @staticmethod
    def _bytes(st):
        return int(st.bytes)  # counted by kv-sender's workers

    def pop_decode_prefix_len(self):
        """The tokens the decode holds already from its prefix cache
        (its send_metadata's decode_prefix_len, 0 for none), known once
        the room is WaitingForInput: the engine sends only the pages after
        them, and init() counts those (SGLang's finalize_bootstrap)."""
        self._usable("pop_decode_prefix_len")
        st = self._read()
        return int(st.prefix_tokens) if st is not None else 0

    def init(self, num_kv_indices, aux_index=None):
        """SEND_BEGIN: the room sends num_kv_indices pages (after the
        decode's prefix, if any) and the prefill aux slot aux_index, one
        row of every metadata buffer, with the last chunk."""
        self._usable("init")
        a = self.kv_mgr.kv_args
        if self.num_kv_indices is not None:
            raise RuntimeError("init: room %d already initialised"
                               % self.bootstrap_room)
        if not 0 <= int(num_kv_indices) <= a.pages:
            raise ValueError("init: num_kv_indices %d outside 0..%d (pool "
                             "pages)" % (num_kv_indices, a.pages))
        if aux_index is None or not 0 <= int(aux_index) < a.aux_slots:
            raise ValueError("init: aux_index %r outside 0..%d" %
                             (aux_index, a.aux_slots - 1))
        self.kv_mgr.call("kvw_send_begin", lib.kvw_send_begin,
                         self.bootstrap_room, int(num_kv_indices),
                         int(aux_index))
        self._epoch = self.kv_mgr.epoch()
        self.num_kv_indices = int(num_kv_indices)

    def send(self, kv_indices, state_indices=None):
        """SEND_CHUNK of the room's next pages; the chunk that completes
        num_kv_indices is the last (the aux slot goes with it)."""
        self._usable("send")
        if self.num_kv_indices is None:
            raise RuntimeError("send: room %d before init()"
                               % self.bootstrap_room)
        state = _state_arg(state_indices, "send")
        if self.conclude_state is not None:
            raise RuntimeError("send: room %d already %s" % (
                self.bootstrap_room, "failed" if self.conclude_state ==
                KVPoll.Failed else "done"))
        pages = _pages_arg(kv_indices, self.kv_mgr.kv_args.pages, "send")
        n = pages.size
        if self.sent + n > self.num_kv_indices:
            raise ValueError("send: %d pages after %d run past the %d of "
                             "init()" % (n, self.sent, self.num_kv_indices))
        end = self.sent + n
        if state is not None and end != self.num_kv_indices:
            raise ValueError("send: state_indices go with the last chunk "
                             "(%d of %d pages sent after this one)"
                             % (end, self.num_kv_indices))
        for lo in range(0, max(n, 1), _lib.MAX_PAGES):
            part = pages[lo:lo + _lib.MAX_PAGES]
            last = end == self.num_kv_indices and lo + part.size >= n
            if part.size == 0 and not last:
                break
            if last and state is not None:
                self.kv_mgr.call("kvw_send_last_state",
                                 lib.kvw_send_last_state,
                                 self.bootstrap_room, _ptr(part), part.size,
                                 state[0], state[1])
                continue
            self.kv_mgr.call("kvw_send_chunk", lib.kvw_send_chunk,
                             self.bootstrap_room, _ptr(part), part.size,
                             int(last))
        self.sent = end

    def _needs_row(self):
        return self.conclude_state is None and not self._cleared

    def _absent(self, now):
        """poll()'s answer for a room not in the table under the control
        epoch that took its command, the group up (poll_many's): None
        once the bootstrap timeout has passed (poll() fails it)."""
        if now - self._t0 > self.kv_mgr.kv_args.bootstrap_timeout:
            return None
        return KVPoll.Bootstrapping

    def poll(self, st=_UNREAD):
        """SGLang's poll(); st: the room's row when the caller read it
        already (poll_many)."""
        if self.conclude_state is not None:
            return self.conclude_state
        self._usable("poll")
        if st is _UNREAD:
            st = self.kv_mgr.status(self.bootstrap_room)
        if st is not None and st.state in (_lib.FAILED, _lib.SUCCESS) and \
                st.flags & _lib.ROOM_F_SENDING:
            # Ended, but a worker still reads the source pages (an
            # aborted room's job draining): the engine frees them on
            # Success or Failed, so not yet (issue 29).
            return KVPoll.Transferring
        st = self._read(st)
        if self.conclude_state is not None:
            return self.conclude_state
        if st is None:
            if time.monotonic() - self._t0 > \
                    self.kv_mgr.kv_args.bootstrap_timeout:
                return self._fail("timeout: no decode asked for the room "
                                  "in %gs (Bootstrapping)" %
                                  self.kv_mgr.kv_args.bootstrap_timeout)
            return KVPoll.Bootstrapping
        return st.state

    def abort(self):
        """Fails the room here and at kv-sender (its decode hears STATUS
        Failed): kvwire's prefill abort is a CLEAR of an active room."""
        self._usable("abort")
        self._fail("aborted by the prefill engine")
        self.clear()


class KVReceiver(_Room):
    """Decode side of one room (SGLang's KVReceiver). bootstrap_addr is the
    prefill instance's kv-bootstrap: an endpoint (tcp://, ipc://) or
    SGLang's host:port."""

    side = "decode"
    # poll()'s answer for a row under way (poll_many's): the decode waits
    # for input until the transfer begins.
    _UNDER_WAY = (None, KVPoll.WaitingForInput, KVPoll.WaitingForInput,
                  _lib.TRANSFERRING)

    def __init__(self, mgr, bootstrap_addr, bootstrap_room=None,
                 prefill_dp_rank=None):
        super().__init__(mgr, bootstrap_addr, bootstrap_room)
        ep = bootstrap_addr if "://" in bootstrap_addr else \
            "tcp://" + bootstrap_addr
        if len(ep.encode()) > _lib.MAX_STR:
            raise ValueError("bootstrap address longer than %d bytes"
                             % _lib.MAX_STR)
        self._endpoint = ep
        self.prefill_dp_rank = prefill_dp_rank
        self._inited = False
        self._begun = False
        self._npages = 0
        self._claim()

    def _bytes(self, st):
        a = self.kv_mgr.kv_args
        return self._npages * sum(a.kv_item_lens) + sum(a.aux_item_lens)

    def init(self, prefill_dp_rank=0):
        """Marks the receiver ready for metadata (WaitingForInput); kvwire's
        receiver resolves the prefill ranks itself after send_metadata."""
        self._usable("init")
        self.prefill_dp_rank = int(prefill_dp_rank or 0)
        self._inited = True

    def send_metadata(self, kv_indices, aux_index=None, state_indices=None,
                      decode_prefix_len=None):
        """RECV_BEGIN: receive the room into pages kv_indices and aux slot
        aux_index (one row of every metadata buffer). decode_prefix_len:
        tokens of the request this decode holds already (its prefix
        cache), a whole number of pages; kv_indices then lists only the
        pages after them (none on a full hit: the metadata still comes),
        and the prefill is told to skip them (pop_decode_prefix_len)."""
        self._usable("send_metadata")
        if not self._inited:
            raise RuntimeError("send_metadata: room %d before init()"
                               % self.bootstrap_room)
        if self._begun:
            raise RuntimeError("send_metadata: room %d sent twice"
                               % self.bootstrap_room)
        state = _state_arg(state_indices, "send_metadata")
        a = self.kv_mgr.kv_args
        prefix = int(decode_prefix_len or 0)
        if prefix < 0 or prefix % a.page_size:
            raise ValueError("send_metadata: decode_prefix_len %d is not a "
                             "whole number of %d-token pages"
                             % (prefix, a.page_size))
        if aux_index is None or not 0 <= int(aux_index) < a.aux_slots:
            raise ValueError("send_metadata: aux_index %r outside 0..%d"
                             % (aux_index, a.aux_slots - 1))
        pages = _pages_arg(kv_indices, a.pages, "send_metadata")
        if pages.size > _lib.MAX_PAGES:
            raise ValueError("send_metadata: more than %d pages"
                             % _lib.MAX_PAGES)
        if state is None:
            self.kv_mgr.call("kvw_recv_begin", lib.kvw_recv_begin,
                             self.bootstrap_room, self._endpoint.encode(),
                             self.prefill_dp_rank, _ptr(pages), pages.size,
                             int(aux_index), prefix)
        else:
            self.kv_mgr.call("kvw_recv_begin_state",
                             lib.kvw_recv_begin_state,
                             self.bootstrap_room, self._endpoint.encode(),
                             self.prefill_dp_rank, _ptr(pages), pages.size,
                             int(aux_index), prefix, state[0], state[1])
        self._epoch = self.kv_mgr.epoch()
        self._npages = int(pages.size)
        self._begun = True

    def _needs_row(self):
        return self.conclude_state is None and not self._cleared and \
            self._begun

    @staticmethod
    def _absent(now):
        """poll()'s answer for a begun room not in the table yet under the
        epoch that took its RECV_BEGIN, the group up (poll_many's)."""
        return KVPoll.WaitingForInput

    def poll(self, st=_UNREAD):
        """SGLang's poll(); st: the room's row when the caller read it
        already (poll_many)."""
        if self.conclude_state is not None:
            return self.conclude_state
        self._usable("poll")
        if not self._begun:
            return KVPoll.WaitingForInput if self._inited else \
                KVPoll.Bootstrapping
        st = self._read(st)
        if self.conclude_state is not None:
            return self.conclude_state
        if st is None or st.state in (_lib.BOOTSTRAPPING, _lib.WAITING):
            return KVPoll.WaitingForInput
        return st.state

    def abort(self):
        """RECV_ABORT: fails the room and asks every prefill target to stop;
        `releasable` says when its pages may be reused. A room init()ed
        but not begun (SGLang aborts requests of its prealloc queue) is
        begun with no page and no aux row (kvw_recv_begin's KVW_NO_AUX:
        its prefill ranks hear of it as a dummy destination) and aborted
        at once, so a prefill room waiting for it fails now, not at its
        bootstrap timeout, as SGLang's own backends tell their prefill."""
        self._usable("abort")
        self._fail("aborted by the decode engine")
        if not self._begun and self._inited:
            self.kv_mgr.call("kvw_recv_begin", lib.kvw_recv_begin,
                             self.bootstrap_room, self._endpoint.encode(),
                             self.prefill_dp_rank, None, 0, _lib.NO_AUX, 0)
            self._epoch = self.kv_mgr.epoch()
            self._begun = True
        if self._begun:
            self.kv_mgr.call("kvw_abort", lib.kvw_abort, self.bootstrap_room)

    def settled(self):
        """True once the room's pages may go back to the engine's
        allocator: releasable, or the group's control process is gone (no
        ack can come any more; an engine must not wait for ever). What the
        adapters wait for before they tell an engine that frees pages on
        Failed."""
        if self.kv_mgr.control_gone():
            return True
        return self.releasable

    @property
    def releasable(self):
        """True once no byte of the room can land any more: every prefill
        target acked the abort, or the room succeeded (or never began)."""
        if not self._begun:
            return True
        self._usable("releasable")
        st = self.kv_mgr.status(self.bootstrap_room)
        if st is None:
            return False
        return st.state == _lib.SUCCESS or \
            bool(st.flags & _lib.ROOM_F_RELEASABLE)
