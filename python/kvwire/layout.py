"""layout.py - a group's run directory and the KV layout of each member,
both from libkvwire (kvw_group_read and kvw_pool_layout, lib/api.h): the
members kv-up planned (lib/plan/group.h) as DIR/endpoints records them, and
each rank's pool as lib/plan/shape.c lays it out. No rule is restated here
(issue 31): a pool holds, back to back, the K buffer of each of the
member's layers, their V buffers (MLA: one KV buffer per layer), the draft
buffers (decode only), then the AUX buffer; the library says where.
"""
import ctypes
import dataclasses

from . import _lib

# enum kvw_role; KVB: a block-major layer, a page a block's K then its V.
ROLE_K, ROLE_V, ROLE_KV, ROLE_AUX, ROLE_STATE, ROLE_KVB = 0, 1, 2, 3, 4, 5


def state_layer(component, layer):
    """KVW_STATE_LAYER: the layer id of a state component's buffer."""
    return component << 16 | layer
_ROLES = {0: "bootstrap", 1: "prefill", 2: "decode", 3: "heartbeat"}
_MAX_MEMBERS = 256  # RUNINFO_MAX_MEMBERS


class _Quad(ctypes.Structure):
    _fields_ = [(f, ctypes.c_uint32) for f in ("tp", "pp", "cp", "dp")]


class _Member(ctypes.Structure):
    """struct kvw_member."""
    _fields_ = [("name", ctypes.c_char * 64), ("role", ctypes.c_uint32),
                ("topo", _Quad), ("rank", _Quad),
                ("listen", ctypes.c_char * 256),
                ("engine", ctypes.c_char * 256),
                ("table", ctypes.c_char * 256),
                ("pool", ctypes.c_char * 256)]


_SHAPE_FIELDS = ("layers", "draft_layers", "page_tokens", "kv_heads",
                 "head_dim", "dtype_bytes", "pages", "aux_slots", "mla")
MAX_AUX = 32  # KVW_MAX_AUX: metadata buffers in one layout
# --kv-layout, by enum shape_kv_layout's value: every K then every V, per
# layer K then V (vLLM's per-layer tensor [2, blocks, ...]), or per layer
# each block's K then its V (vLLM's block-major [blocks, 2, ...]).
KV_LAYOUTS = ("sglang", "vllm", "vllm-blocks")


MAX_STATE = 8  # KVW_MAX_STATE: state components in one layout
# enum kvw_state_kind, by value: a row per request (Mamba), rows by page
# (SWA, DSA/NSA indexer), rows by position (a ring).
STATE_KINDS = ("slot", "paged", "exact")


class _StateSpec(ctypes.Structure):
    """struct kvw_state_spec."""
    _fields_ = [(f, ctypes.c_uint32)
                for f in ("kind", "rows", "bytes", "replicated", "layers")]


class _Shape(ctypes.Structure):
    """struct kvw_shape."""
    _fields_ = [(f, ctypes.c_uint32) for f in _SHAPE_FIELDS] + \
        [("naux", ctypes.c_uint32), ("aux_bytes", ctypes.c_uint32 * MAX_AUX),
         ("kv_layout", ctypes.c_uint32), ("nstate", ctypes.c_uint32),
         ("state", _StateSpec * MAX_STATE)]

    @classmethod
    def of(cls, shape):
        aux = tuple(int(x) for x in shape.aux_bytes)
        if not 1 <= len(aux) <= MAX_AUX:
            raise ValueError("aux_bytes: 1 to %d metadata buffers, not %d"
                             % (MAX_AUX, len(aux)))
        if shape.kv_layout not in KV_LAYOUTS:
            raise ValueError("kv_layout: %s, not %r"
                             % (" or ".join(KV_LAYOUTS), shape.kv_layout))
        state = tuple(shape.state)
        if len(state) > MAX_STATE:
            raise ValueError("state: at most %d components, not %d"
                             % (MAX_STATE, len(state)))
        specs = []
        for c in state:
            if c.kind not in STATE_KINDS:
                raise ValueError("state kind: %s, not %r"
                                 % (" or ".join(STATE_KINDS), c.kind))
            specs.append(_StateSpec(STATE_KINDS.index(c.kind), int(c.rows),
                                    int(c.bytes), int(bool(c.replicated)),
                                    int(c.layers)))
        return cls(*(int(getattr(shape, f)) for f in _SHAPE_FIELDS),
                   len(aux), (ctypes.c_uint32 * MAX_AUX)(*aux),
                   KV_LAYOUTS.index(shape.kv_layout), len(specs),
                   (_StateSpec * MAX_STATE)(*specs))


class _Buf(ctypes.Structure):
    """struct kvw_buf."""
    _fields_ = [("layer_id", ctypes.c_uint32), ("role", ctypes.c_uint8),
                ("pool", ctypes.c_uint8), ("offset", ctypes.c_uint64),
                ("item_len", ctypes.c_uint32), ("pages", ctypes.c_uint32)]


class _RankLayout(ctypes.Structure):
    """struct kvw_rank_layout."""
    _fields_ = [("first_layer", ctypes.c_uint32),
                ("layers", ctypes.c_uint32),
                ("rank_kv_heads", ctypes.c_uint32),
                ("nbufs", ctypes.c_uint32),
                ("pool_bytes", ctypes.c_uint64)]


_P = ctypes.POINTER
_lib.lib.kvw_group_read.restype = ctypes.c_int
_lib.lib.kvw_group_read.argtypes = [
    ctypes.c_char_p, _P(_Member), ctypes.c_uint32, _P(ctypes.c_uint32),
    _P(_Shape), ctypes.c_char_p, ctypes.c_size_t]
_lib.lib.kvw_pool_layout.restype = ctypes.c_int
_lib.lib.kvw_pool_layout.argtypes = [
    _P(_Shape), _P(_Quad), _P(_Quad), ctypes.c_int, _P(_Buf),
    ctypes.c_uint32, _P(_RankLayout), ctypes.c_char_p, ctypes.c_size_t]


@dataclasses.dataclass(frozen=True)
class State:
    """struct kvw_state_spec: one state component (kv-up --state)."""
    kind: str         # "slot", "paged" or "exact" (STATE_KINDS)
    rows: int
    bytes: int        # the whole row; each TP rank holds bytes / tp
    replicated: bool = False   # every TP rank holds the whole row
    # Buffers of its own (an engine's Mamba or SWA layers), split over PP
    # as the layers are; 0: one per model layer.
    layers: int = 0


@dataclasses.dataclass
class Shape:
    """struct kvw_shape: the model shape a group was started with."""
    layers: int
    draft_layers: int
    page_tokens: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int
    pages: int
    aux_slots: int
    mla: bool
    # A row's bytes of each metadata buffer (--aux-bytes A,B,...): a
    # room's aux slot selects one row of every one.
    aux_bytes: tuple = (64,)
    kv_layout: str = "sglang"     # --kv-layout: one of KV_LAYOUTS
    state: tuple = ()             # --state: State components


@dataclasses.dataclass
class Member:
    """struct kvw_member: one line of DIR/endpoints."""
    name: str
    role: str
    topo: tuple = (1, 1, 1, 1)   # tp, pp, cp, dp
    rank: tuple = (0, 0, 0, 0)
    listen: str = ""
    engine: str = ""
    table: str = ""
    pool: str = ""


@dataclasses.dataclass
class Buffer:
    """struct kvw_buf: `pages` items of `item_len` bytes at `offset`."""
    layer_id: int
    role: int
    offset: int
    item_len: int
    pages: int


def _quad(q):
    return (q.tp, q.pp, q.cp, q.dp)


def read_run_dir(run_dir):
    """Returns (members by name, Shape) of DIR/endpoints."""
    out = (_Member * _MAX_MEMBERS)()
    n, shape = ctypes.c_uint32(), _Shape()
    err = ctypes.create_string_buffer(512)
    rc = _lib.lib.kvw_group_read(str(run_dir).encode(), out, _MAX_MEMBERS,
                                 ctypes.byref(n), ctypes.byref(shape), err,
                                 len(err))
    if rc == _lib.ENOENT:
        raise FileNotFoundError(err.value.decode(errors="replace"))
    if rc < 0:
        raise ValueError(err.value.decode(errors="replace"))
    members = {}
    for m in out[:n.value]:
        members[m.name.decode()] = Member(
            name=m.name.decode(), role=_ROLES.get(m.role, "?"),
            topo=_quad(m.topo), rank=_quad(m.rank),
            listen=m.listen.decode(), engine=m.engine.decode(),
            table=m.table.decode(), pool=m.pool.decode())
    fields = {f: getattr(shape, f) for f in _SHAPE_FIELDS}
    fields["mla"] = bool(fields["mla"])
    fields["aux_bytes"] = tuple(shape.aux_bytes[:shape.naux])
    fields["kv_layout"] = KV_LAYOUTS[shape.kv_layout] \
        if shape.kv_layout < len(KV_LAYOUTS) else "?"
    fields["state"] = tuple(
        State(STATE_KINDS[c.kind] if c.kind < len(STATE_KINDS) else "?",
              c.rows, c.bytes, bool(c.replicated), c.layers)
        for c in shape.state[:min(shape.nstate, MAX_STATE)])
    return members, Shape(**fields)


def _rank_layout(shape, topo, rank, decode):
    """kvw_pool_layout: (buffers, struct kvw_rank_layout)."""
    cs = _Shape.of(shape)
    t = _Quad(*(list(topo) + [1, 1, 1, 1])[:4])
    r = _Quad(*(list(rank) + [0, 0, 0, 0])[:4])
    info, err = _RankLayout(), ctypes.create_string_buffer(512)
    cap = 0
    while True:
        bufs = (_Buf * max(cap, 1))()
        rc = _lib.lib.kvw_pool_layout(ctypes.byref(cs), ctypes.byref(t),
                                      ctypes.byref(r), int(bool(decode)),
                                      bufs, cap, ctypes.byref(info), err,
                                      len(err))
        if rc == _lib.ENOMEM and info.nbufs > cap:
            cap = info.nbufs
            continue
        if rc < 0:
            raise ValueError(err.value.decode(errors="replace"))
        return [Buffer(b.layer_id, b.role, b.offset, b.item_len, b.pages)
                for b in bufs[:info.nbufs]], info


def c_layout(bufs):
    """Buffers as a struct kvw_buf array (kvw_register_host's layout)."""
    arr = (_Buf * max(len(bufs), 1))()
    for i, b in enumerate(bufs):
        arr[i] = _Buf(b.layer_id, b.role, 0, b.offset, b.item_len, b.pages)
    return arr


def make_layout(shape, topo, rank, decode):
    """(buffers, pool bytes) of the member with topology `topo` and
    coordinates `rank` (decode: with draft layers)."""
    bufs, info = _rank_layout(shape, topo, rank, decode)
    return bufs, info.pool_bytes


def layer_range(shape, pp, pp_rank):
    """(first, count): the layers PP stage pp_rank of pp holds."""
    _, info = _rank_layout(shape, (1, pp), (0, pp_rank), False)
    return info.first_layer, info.layers


def rank_kv_heads(shape, tp):
    """The KV heads each rank of TP size tp holds (1 with MLA)."""
    _, info = _rank_layout(shape, (tp, 1), (0, 0), False)
    return info.rank_kv_heads
