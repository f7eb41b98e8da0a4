#!/usr/bin/python3
"""fake_decode.py - plays a decode rank (and the prefill engine) against a
real kv-sender, packing frames exactly as lib/wire/frame.h documents. Used by
tests/bats/sender.bats; run with Debian's /usr/bin/python3 (it has pyzmq).

transfer: creates the decode pool file, binds a ROUTER for STATUS, sends
REGISTER and XFER_INFO to the sender's peer socket, writes a pattern into
the prefill pool's source pages, sends SEND_BEGIN and the chunks to the
engine socket, waits for STATUS and checks it. With --expect success it
also checks byte for byte that every K/V page and the aux slot landed where
XFER_INFO said, and that no other byte of the decode pool changed.
Exit: 0 as expected, 1 not as expected (one line on stderr says why).
"""
import argparse
import mmap
import os
import random
import struct
import sys
import time

import zmq

MAGIC = 0x3157564B
T = dict(BOOT_REGISTER=1, BOOT_LOOKUP=2, BOOT_REPLY=3, PING=4, PONG=5,
         REGISTER=6, XFER_INFO=7, ABORT=8, STATUS=9, ABORT_ACK=10,
         SEND_BEGIN=11, SEND_CHUNK=12, RECV_BEGIN=13, RECV_ABORT=14,
         CLEAR=15, JOB=16, JOB_DONE=17)
ROLE_K, ROLE_V, ROLE_AUX = 0, 1, 3
FAILED, SUCCESS = 0, 4


def hdr(typ, src_rank=0, room=0, epoch=1):
    return struct.pack('<IBBHIIQQ', MAGIC, 1, typ, 0, src_rank, 0, room, epoch)


def parse_hdr(b):
    if len(b) != 32:
        raise ValueError('header of %d bytes' % len(b))
    magic, ver, typ, flags, src, _res, room, epoch = struct.unpack('<IBBHIIQQ', b)
    if magic != MAGIC or ver != 1:
        raise ValueError('bad magic/version')
    return dict(type=typ, src_rank=src, room=room, epoch=epoch)


def pstr(s):
    b = s.encode()
    return struct.pack('<H', len(b)) + b


def u32s(a):
    return struct.pack('<%dI' % len(a), *a)


class Shape:
    """The layout shape_layout() builds for one rank: K buffers by layer,
    V buffers by layer, one AUX buffer, back to back from offset 0."""

    def __init__(self, a, tp=1):
        self.layers, self.page_tokens = a.layers, a.page_tokens
        self.heads, self.head_dim, self.dtype = a.heads, a.head_dim, a.dtype_bytes
        self.pages, self.aux_slots, self.aux_bytes = a.pool_pages, a.aux_slots, a.aux_bytes
        self.rank_heads = self.heads // tp if self.heads >= tp else 1
        self.head_bytes = self.head_dim * self.dtype
        self.item = self.page_tokens * self.rank_heads * self.head_bytes
        self.bufs = []  # (layer, role, offset, item_len, pages)
        off = 0
        for role in (ROLE_K, ROLE_V):
            for layer in range(self.layers):
                self.bufs.append((layer, role, off, self.item, self.pages))
                off += self.item * self.pages
        self.bufs.append((0, ROLE_AUX, off, self.aux_bytes, self.aux_slots))
        off += self.aux_bytes * self.aux_slots
        self.size = off

    def model(self):
        # page_tokens, dtype, total heads, rank heads, head_bytes, flags
        return struct.pack('<6I', self.page_tokens, self.dtype, self.heads,
                           self.rank_heads, self.head_bytes, 0)

    def bufs_wire(self):
        out = struct.pack('<I', len(self.bufs))
        for layer, role, off, item, pages in self.bufs:
            out += struct.pack('<IBBHQII', layer, role, 0, 0, off, item, pages)
        return out


def shm_desc(path, size):
    st = os.stat(path)
    p = path.encode()
    return b'KVSH' + struct.pack('<HHQQQ', 1, len(p), size, st.st_dev, st.st_ino) + p


def register_msg(shape, endpoint, desc, src_rank, epoch, coord=(0, 0, 0, 0),
                 topo=(1, 1, 1, 1), transport='shm'):
    body = struct.pack('<4I', *coord) + struct.pack('<4I', *topo)
    body += pstr(endpoint) + pstr(transport)
    body += struct.pack('<I', len(desc)) + desc
    body += shape.model() + shape.bufs_wire()
    return [hdr(T['REGISTER'], src_rank, 0, epoch), body]


def xfer_info_msg(room, aux, required, dummy, pages, src_rank, epoch, token=1,
                  prefix_tokens=0):
    # token: the decode room's incarnation token; every STATUS echoes it
    body = struct.pack('<IIBQI', aux, required, dummy, token, prefix_tokens)
    return [hdr(T['XFER_INFO'], src_rank, room, epoch), body, u32s(pages)]


def send_begin_msg(room, n, aux):
    return [hdr(T['SEND_BEGIN'], 0, room), struct.pack('<II', n, aux)]


def send_chunk_msg(room, pages, last):
    return [hdr(T['SEND_CHUNK'], 0, room), struct.pack('<B', 1 if last else 0),
            u32s(pages)]


def parse_status(parts):
    h = parse_hdr(parts[0])
    if h['type'] != T['STATUS']:
        return h, None
    state, reason, token, n = struct.unpack_from('<BIQH', parts[1])
    text = parts[1][15:15 + n].decode(errors='replace')
    return h, dict(state=state, reason=reason, token=token, text=text)


def make_pool(path, size):
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.ftruncate(fd, size)
    m = mmap.mmap(fd, size)
    os.close(fd)
    return m


def open_pool(path):
    fd = os.open(path, os.O_RDWR)
    size = os.fstat(fd).st_size
    m = mmap.mmap(fd, size)
    os.close(fd)
    return m


def fail(msg):
    print('fake_decode: ' + msg, file=sys.stderr)
    sys.exit(1)


def connect(ctx, typ, ep):
    s = ctx.socket(typ)
    s.setsockopt(zmq.LINGER, 1000)
    s.connect(ep)
    return s


def wait_status(router, room, timeout):
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not router.poll(int(left * 1000)):
            return None, None
        parts = router.recv_multipart()[1:]
        h, st = parse_status(parts)
        if st is not None and h['room'] == room:
            return h, st


def abort_then_ack(a, router, peer, src_rank, epoch):
    """Sends ABORT for the room and waits for its ABORT_ACK (a STATUS
    Failed may come first and is noted)."""
    token = 0x5eed0000 + a.room
    peer.send_multipart([hdr(T['ABORT'], src_rank, a.room, epoch), struct.pack('<IQ', 1, token)])
    deadline = time.monotonic() + a.timeout
    failed = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not router.poll(int(left * 1000)):
            fail('no ABORT_ACK for room %d within %gs' % (a.room, a.timeout))
        parts = router.recv_multipart()[1:]
        h, st = parse_status(parts)
        if h['room'] != a.room:
            continue
        if st is not None and st['state'] == FAILED:
            failed = st['reason']
        if h['type'] == T['ABORT_ACK']:
            if len(parts) != 2 or struct.unpack('<Q', parts[1])[0] != token:
                fail('ABORT_ACK for room %d without its token' % a.room)
            print('ok room %d: ABORT_ACK (STATUS Failed reason %s first)' % (a.room, failed))
            return


def abort_unregistered(a, peer, src_rank, epoch):
    """Waits (bounded) for the file a.abort_after_file, then ABORTs the room
    as the same decode (epoch, src_rank) without registering again, and waits
    for the ABORT_ACK on the DEALER the ABORT went out on: a restarted
    kv-sender answers on the ROUTER identity it came from."""
    deadline = time.monotonic() + a.timeout
    while not os.path.exists(a.abort_after_file):
        if time.monotonic() > deadline:
            fail('%s never appeared' % a.abort_after_file)
        time.sleep(0.02)  # polling for the test's go file, bounded above
    token = 0x5eed0000 + a.room
    start = time.monotonic()
    peer.send_multipart([hdr(T['ABORT'], src_rank, a.room, epoch), struct.pack('<IQ', 1, token)])
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not peer.poll(int(left * 1000)):
            fail('no ABORT_ACK for room %d within %gs' % (a.room, a.timeout))
        parts = peer.recv_multipart()
        h = parse_hdr(parts[0])
        if h['type'] == T['ABORT_ACK'] and h['room'] == a.room:
            if len(parts) != 2 or struct.unpack('<Q', parts[1])[0] != token:
                fail('ABORT_ACK for room %d without its token' % a.room)
            print('ok room %d: ABORT_ACK on the DEALER after %.3fs, epoch %x' %
                  (a.room, time.monotonic() - start, h['epoch']))
            return


def transfer(a):
    rnd = random.Random(a.room)
    src_shape = Shape(a, tp=1)
    dst_shape = Shape(a, tp=1)
    dpool = make_pool(a.decode_pool, dst_shape.size)
    spool = open_pool(a.prefill_pool)
    if len(spool) != src_shape.size:
        fail('prefill pool is %d bytes, shape says %d' % (len(spool), src_shape.size))
    n = a.npages
    spages = rnd.sample(range(a.pool_pages), n)
    dpages = rnd.sample(range(a.pool_pages), n)
    if a.bad_index:
        dpages[-1] = a.pool_pages + 7  # outside the decode pool
    src_aux, dst_aux = rnd.randrange(a.aux_slots), rnd.randrange(a.aux_slots)
    # Pattern in the source pages and aux slot (random bytes per page).
    for layer, role, off, item, _ in src_shape.bufs:
        idxs = [src_aux] if role == ROLE_AUX else spages
        for i in idxs:
            spool[off + i * item: off + (i + 1) * item] = rnd.randbytes(item)
    before = bytes(dpool)

    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind(a.listen)
    peer = connect(ctx, zmq.DEALER, a.sender)
    eng = connect(ctx, zmq.DEALER, a.engine)
    epoch = rnd.getrandbits(63) | 1
    src_rank = 0
    desc = shm_desc(a.desc_path or a.decode_pool, dst_shape.size)
    peer.send_multipart(register_msg(dst_shape, a.listen, desc, src_rank, epoch))
    xtok = 0x70c0000 + a.room  # the room incarnation's token
    peer.send_multipart(xfer_info_msg(a.room, dst_aux, 1, 0, dpages, src_rank, epoch,
                                      xtok))
    eng.send_multipart(send_begin_msg(a.room, n, src_aux))
    if a.abort:
        # --abort-wait FILE: the room waits (Waiting) until FILE exists.
        while a.abort_wait and not os.path.exists(a.abort_wait):
            if router.poll(20):  # a bounded poll, not a pause
                router.recv_multipart()
        abort_then_ack(a, router, peer, src_rank, epoch)
        ctx.destroy(linger=0)
        return
    if a.abort_after_file:
        print('registered room %d' % a.room, flush=True)
        abort_unregistered(a, peer, src_rank, epoch)
        ctx.destroy(linger=0)
        return
    step = max(1, (n + a.chunks - 1) // a.chunks)
    for k in range(0, n, step):
        eng.send_multipart(send_chunk_msg(a.room, spages[k:k + step], k + step >= n))
    h, st = wait_status(router, a.room, a.timeout)
    if st is None:
        fail('no STATUS for room %d within %gs' % (a.room, a.timeout))
    if st['token'] != xtok:
        fail('STATUS for room %d carries token %d, its XFER_INFO had %d' %
             (a.room, st['token'], xtok))
    want = SUCCESS if a.expect == 'success' else FAILED
    if st['state'] != want or (a.reason is not None and st['reason'] != a.reason):
        fail('STATUS state %d reason %d (%s), expected %s%s' %
             (st['state'], st['reason'], st['text'], a.expect,
              '' if a.reason is None else ' reason %d' % a.reason))
    if a.expect == 'success':
        expect = bytearray(before)
        for (sl, sr, so, si, _), (dl, dr, do, di, _) in zip(src_shape.bufs, dst_shape.bufs):
            assert (sl, sr, si) == (dl, dr, di)
            pairs = [(src_aux, dst_aux)] if sr == ROLE_AUX else zip(spages, dpages)
            for s, d in pairs:
                expect[do + d * di: do + (d + 1) * di] = spool[so + s * si: so + (s + 1) * si]
        got = bytes(dpool)
        if got != bytes(expect):
            first = next(i for i in range(len(got)) if got[i] != expect[i])
            fail('decode pool differs from the expected bytes at offset %d' % first)
    print('ok room %d: STATUS %s reason %d src_rank %d, %d pages' %
          (a.room, 'Success' if st['state'] == SUCCESS else 'Failed',
           st['reason'], h['src_rank'], n))
    if a.abort_after:
        abort_then_ack(a, router, peer, src_rank, epoch)
    ctx.destroy(linger=0)


def abort_other(a):
    shape = Shape(a, tp=1)
    make_pool(a.decode_pool, shape.size)
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind(a.listen)
    peer = connect(ctx, zmq.DEALER, a.sender)
    epoch = random.getrandbits(63) | 1
    desc = shm_desc(a.decode_pool, shape.size)
    peer.send_multipart(register_msg(shape, a.listen, desc, 0, epoch))
    abort_then_ack(a, router, peer, 0, epoch)
    ctx.destroy(linger=0)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest='cmd', required=True)
    t = sub.add_parser('transfer')
    t.add_argument('--sender', required=True, help="sender's --listen")
    t.add_argument('--engine', required=True, help="sender's --engine")
    t.add_argument('--listen', required=True, help='own ROUTER for STATUS')
    t.add_argument('--prefill-pool', required=True)
    t.add_argument('--decode-pool', required=True)
    t.add_argument('--room', type=int, required=True)
    t.add_argument('--npages', type=int, default=8)
    t.add_argument('--chunks', type=int, default=2)
    t.add_argument('--expect', choices=('success', 'failed'), default='success')
    t.add_argument('--reason', type=int)
    t.add_argument('--bad-index', action='store_true')
    t.add_argument('--abort', action='store_true',
                   help='send no chunk; ABORT the room and wait for ABORT_ACK')
    t.add_argument('--abort-after', action='store_true',
                   help='after the STATUS, ABORT the room and wait for ABORT_ACK')
    t.add_argument('--abort-after-file', metavar='FILE',
                   help='send no chunk; once FILE exists (the test restarted '
                   'kv-sender), ABORT the room without registering again and '
                   'wait for the ABORT_ACK on the DEALER')
    t.add_argument('--abort-wait', help='with --abort: wait for this file first')
    t.add_argument('--desc-path', help='the pool file the REGISTER names '
                   '(default: --decode-pool; issue 14: another file is refused)')
    t.add_argument('--timeout', type=float, default=10)
    for name, dflt in (('layers', 2), ('page-tokens', 4), ('heads', 2),
                       ('head-dim', 8), ('dtype-bytes', 2), ('pool-pages', 32),
                       ('aux-slots', 4), ('aux-bytes', 16)):
        t.add_argument('--' + name, type=int, default=dflt)
    i = sub.add_parser('abort-other',
                       help='register as another decode (own pool, own '
                       'socket) and ABORT a room it is not a destination of; '
                       'wait for the ABORT_ACK (issue 14: acked, nothing else)')
    i.add_argument('--sender', required=True)
    i.add_argument('--listen', required=True)
    i.add_argument('--decode-pool', required=True)
    i.add_argument('--room', type=int, required=True)
    i.add_argument('--timeout', type=float, default=10)
    for name, dflt in (('layers', 2), ('page-tokens', 4), ('heads', 2),
                       ('head-dim', 8), ('dtype-bytes', 2), ('pool-pages', 32),
                       ('aux-slots', 4), ('aux-bytes', 16)):
        i.add_argument('--' + name, type=int, default=dflt)
    a = p.parse_args()
    if a.cmd == 'transfer':
        transfer(a)
    elif a.cmd == 'abort-other':
        abort_other(a)


if __name__ == '__main__':
    main()
