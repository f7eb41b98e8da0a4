"""layout.py - a group's run directory and the KV layout of each member,
computed in Python by the rules of lib/plan/shape.c (shape_layout) and
lib/plan/layout.c (layout_make), from the shape flags kv-up recorded in
DIR/endpoints. One pool holds, back to back: the K buffer of each of the
member's layers, their V buffers, the draft K and V buffers (decode only),
then the AUX buffer (aux_slots x aux_bytes). A K or V buffer is pages x
page_tokens x rank_kv_heads x head_dim elements of dtype_bytes each.
"""
import dataclasses
import shlex

DRAFT_BASE = 1000000  # LAYOUT_DRAFT_BASE: draft layer i has id base + i
ROLE_K, ROLE_V, ROLE_KV, ROLE_AUX = 0, 1, 2, 3


@dataclasses.dataclass
class Shape:
    """struct shape with shape_default's values."""
    layers: int = 32
    draft_layers: int = 0
    page_tokens: int = 16
    kv_heads: int = 8
    head_dim: int = 128
    dtype_bytes: int = 2
    pages: int = 512
    aux_slots: int = 256
    aux_bytes: int = 64
    mla: bool = False

    @classmethod
    def from_flags(cls, text):
        """Parses the `shape=` line's flags ("--layers 4 --mla ...")."""
        s, words = cls(), shlex.split(text or "")
        i = 0
        while i < len(words):
            w = words[i]
            if not w.startswith("--"):
                raise ValueError("shape flags: unexpected %r" % w)
            name = w[2:].replace("-", "_")
            if name == "mla":
                s.mla = True
                i += 1
                continue
            if name == "heads":
                name = "kv_heads"
            if name not in {f.name for f in dataclasses.fields(cls)} or \
                    i + 1 >= len(words):
                raise ValueError("shape flags: bad option %r" % w)
            setattr(s, name, int(words[i + 1]))
            i += 2
        return s


@dataclasses.dataclass
class Member:
    """One line of DIR/endpoints (lib/cli/runinfo.h)."""
    name: str
    role: str
    topo: tuple = (1, 1, 1, 1)   # tp, pp, cp, dp
    rank: tuple = (0, 0, 0, 0)
    listen: str = ""
    engine: str = ""
    table: str = ""
    pool: str = ""


def _quad(text, fill):
    v = [int(x) for x in text.split(",")]
    return tuple(v + [fill] * (4 - len(v)))


def read_run_dir(run_dir):
    """Returns (members by name, Shape) of DIR/endpoints."""
    members, shape = {}, Shape()
    with open("%s/endpoints" % run_dir) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("shape="):
                shape = Shape.from_flags(line[len("shape="):])
                continue
            kv = dict(t.split("=", 1) for t in line.split())
            name = kv["member"]
            role = kv.get("role", "bootstrap" if name == "bootstrap" else "")
            members[name] = Member(
                name=name, role=role,
                topo=_quad(kv["topo"], 1) if "topo" in kv else (1, 1, 1, 1),
                rank=_quad(kv["rank"], 0) if "rank" in kv else (0, 0, 0, 0),
                listen=kv.get("listen", ""), engine=kv.get("engine", ""),
                table=kv.get("table", ""), pool=kv.get("pool", ""))
    return members, shape


@dataclasses.dataclass
class Buffer:
    """struct kvw_buf: `pages` items of `item_len` bytes at `offset`."""
    layer_id: int
    role: int
    offset: int
    item_len: int
    pages: int


def rank_kv_heads(shape, tp):
    """shape_model: heads split over TP, one replicated head per rank when
    there are fewer heads than ranks (MLA: one latent "head")."""
    if shape.mla:
        return 1
    return shape.kv_heads // tp if shape.kv_heads >= tp else 1


def layer_range(shape, pp, pp_rank):
    """shape_layers: (first, count) of stage pp_rank of pp, an even split
    with the first (layers % pp) stages one layer more."""
    base, rem = divmod(shape.layers, pp)
    r = min(pp_rank, pp - 1)
    return r * base + min(r, rem), base + (r < rem)


def make_layout(shape, topo, rank, decode):
    """shape_layout + layout_make: (buffers, pool bytes) of the member with
    topology `topo` and coordinates `rank` (decode: with draft layers)."""
    tp, pp = topo[0] or 1, topo[1] or 1
    if not shape.mla and (shape.kv_heads % tp if shape.kv_heads >= tp
                          else tp % shape.kv_heads):
        raise ValueError("%d kv heads do not split over tp %d"
                         % (shape.kv_heads, tp))
    item = shape.page_tokens * rank_kv_heads(shape, tp) * \
        shape.head_dim * shape.dtype_bytes
    first, count = layer_range(shape, pp, rank[1])
    draft = shape.draft_layers if decode else 0
    roles = [ROLE_KV] if shape.mla else [ROLE_K, ROLE_V]
    bufs, off = [], 0
    for ids in (range(first, first + count),
                range(DRAFT_BASE, DRAFT_BASE + draft)):
        for role in roles:
            for layer in ids:
                bufs.append(Buffer(layer, role, off, item, shape.pages))
                off += item * shape.pages
    if shape.aux_slots:
        bufs.append(Buffer(0, ROLE_AUX, off, shape.aux_bytes,
                           shape.aux_slots))
        off += shape.aux_bytes * shape.aux_slots
    return bufs, off
