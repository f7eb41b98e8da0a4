#!/usr/bin/python3
"""flood.py - hostile peers for tests/bats/hostile.bats. Frames are packed as
lib/wire/frame.h documents (helpers shared with fake_decode.py). Needs Debian's
/usr/bin/python3 (pyzmq).

  flood.py flood EP --target T --count N [--seed S]
      Sends N messages to the ROUTER at EP, every one of which the target
      must count as malformed exactly once: random bytes, an empty frame,
      64 frames, bad magic/version/flags/reserved, valid headers with bad
      payloads (short, out-of-range enums, zero required count), huge counts
      (length fields near 2^32, a page array over KVW_MAX_PAGES) and valid
      frames of types T does not serve. T: boot, sender-peer, sender-engine,
      receiver-peer, receiver-engine. Prints "sent N seconds S".
  flood.py decode --sender EP --engine EP --listen EP --prefill-pool P
                  --decode-pool P --case C [--room R] [shape flags]
      One decode rank + prefill engine against a real kv-sender whose decode
      pool is filled with canary bytes. Cases: dst-range (XFER_INFO page
      beyond the decode pool), src-range (SEND_CHUNK page beyond the prefill
      pool), lying-layout (REGISTER claims twice the pages its pool file
      has; the out-of-file page passes the planner and must be stopped by
      the transport), truncate (a room lands, the decode pool is truncated
      under the worker's mapping, the next room must fail). Each expects
      STATUS(Failed) with the case's reason and, except truncate, every byte
      of the decode pool still the canary. Prints "ok CASE reason N".
  flood.py registers EP --count N --dir DIR [--keys FILE]
      N REGISTERs from one source (one DEALER) at a kv-sender's peer
      socket, each from a new decode endpoint ipc://DIR/fake-I.peer naming
      a made-up pool (issue 14: the peer table must keep room for the real
      decodes). Prints "sent N seconds S".
  flood.py peer-flood EP --count N [--bench-rooms SEED,R] [--keys FILE]
      N messages from one source at a kv-receiver's peer socket, in turn:
      PING, STATUS(Success) and STATUS(Failed) for a room from prefill rank
      0 with a made-up token, ABORT_ACK for it, and a malformed message (as
      `flood`). The room is one of the R that `kv-bench --seed SEED` runs
      (its ids, drawn as kv-bench draws them), else random. Prints "sent N
      seconds S".
  With --keys (a group.keys file) both dial with CURVE as a member of that
  group (the group's own client key pair: a member gone bad).
  flood.py garbage-peer EP --count N [--boot EP]
      A prefill-rank stand-in for kv-heartbeat: answers every PING with N
      malformed messages and then a valid PONG; with --boot it also plays
      the bootstrap of a 1x1 prefill whose rank is EP. Runs until killed.
"""
import argparse
import os
import random
import struct
import sys
import time

import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_decode as fd  # noqa: E402
import intruder  # noqa: E402

T = fd.T
hdr = fd.hdr

# Valid frames of types the target does not serve.
WRONG = {
    'boot': ['STATUS', 'SEND_BEGIN', 'PONG', 'ABORT_ACK', 'CLEAR', 'JOB_DONE',
             'RECV_ABORT', 'SEND_CHUNK'],
    'sender-peer': ['STATUS', 'SEND_BEGIN', 'PONG', 'ABORT_ACK', 'CLEAR',
                    'JOB_DONE', 'RECV_ABORT', 'SEND_CHUNK'],
    'sender-engine': ['STATUS', 'PONG', 'ABORT_ACK', 'JOB_DONE', 'RECV_ABORT',
                      'PING'],
    'receiver-peer': ['SEND_BEGIN', 'PONG', 'CLEAR', 'JOB_DONE', 'RECV_ABORT',
                      'SEND_CHUNK'],
    'receiver-engine': ['STATUS', 'PONG', 'ABORT_ACK', 'JOB_DONE', 'SEND_BEGIN',
                        'PING'],
    # kv-heartbeat's DEALER serves PONG only (a PONG with another epoch is
    # a real restart, not garbage).
    'heartbeat': ['STATUS', 'ABORT_ACK', 'JOB_DONE', 'SEND_BEGIN', 'PING',
                  'CLEAR'],
}


def valid(name, rnd):
    """A well-formed message of type name (bodies per frame.h)."""
    room = rnd.getrandbits(64)
    h = hdr(T[name], rnd.getrandbits(8), room, rnd.getrandbits(63) | 1)
    if name == 'STATUS':
        return [h, struct.pack('<BIQ', 4, 0, 1) + fd.pstr('x')]
    if name == 'SEND_BEGIN':
        return [h, struct.pack('<II', 4, 0)]
    if name == 'SEND_CHUNK':
        return [h, struct.pack('<B', 0), fd.u32s([1, 2])]
    if name == 'JOB_DONE':
        return [h, struct.pack('<IIiIQI', 1, 1, 0, 0, 0, 1)]
    return [h]  # PING, PONG, ABORT_ACK, CLEAR, RECV_ABORT


def bad_header(rnd):
    b = bytearray(hdr(T['PING'], 0, rnd.getrandbits(64)))
    what = rnd.randrange(5)
    if what == 0:
        b[0] ^= 0xFF                      # magic
    elif what == 1:
        b[4] = 2 + rnd.randrange(250)     # version
    elif what == 2:
        b[6] = 1 + rnd.randrange(255)     # flags
    elif what == 3:
        b[12] = 1 + rnd.randrange(255)    # reserved
    else:
        b[5] = 18 + rnd.randrange(238)    # unknown type
    return [bytes(b)]


def bad_payload(rnd):
    room = rnd.getrandbits(64)
    k = rnd.randrange(7)
    if k == 0:   # STATUS with a state that is neither Success nor Failed
        return [hdr(T['STATUS'], 0, room), struct.pack('<BIQ', 2, 0, 1) + fd.pstr('')]
    if k == 1:   # XFER_INFO with required_dst_info_num 0
        return [hdr(T['XFER_INFO'], 0, room), struct.pack('<IIBQI', 0, 0, 0, 1, 0), fd.u32s([1])]
    if k == 2:   # SEND_CHUNK with is_last 2
        return [hdr(T['SEND_CHUNK'], 0, room), struct.pack('<B', 2), fd.u32s([1])]
    if k == 3:   # a body-less type with a body
        return [hdr(T['PING'], 0, room), os.urandom(rnd.randrange(1, 40))]
    if k == 4:   # a short REGISTER body
        return [hdr(T['REGISTER'], 0, room), os.urandom(rnd.randrange(0, 30))]
    if k == 5:   # trailing bytes after a valid SEND_BEGIN body
        return [hdr(T['SEND_BEGIN'], 0, room), struct.pack('<III', 1, 0, 7)]
    # a page array that is not a whole number of u32
    return [hdr(T['XFER_INFO'], 0, room), struct.pack('<IIBQI', 0, 1, 0, 1, 0), b'\x01\x02\x03']


def huge_count(rnd, big):
    room = rnd.getrandbits(64)
    k = rnd.randrange(4)
    if k == 0:   # REGISTER: descriptor length near 2^32
        body = struct.pack('<4I', 0, 0, 0, 0) + struct.pack('<4I', 1, 1, 1, 1)
        body += fd.pstr('ipc:///x') + fd.pstr('shm') + struct.pack('<I', 0xFFFFFFF0)
        return [hdr(T['REGISTER'], 0, room), body]
    if k == 1:   # REGISTER: buffer count near 2^32
        body = struct.pack('<4I', 0, 0, 0, 0) + struct.pack('<4I', 1, 1, 1, 1)
        body += fd.pstr('ipc:///x') + fd.pstr('shm') + struct.pack('<I', 0)
        body += struct.pack('<6I', 16, 2, 8, 8, 256, 0) + struct.pack('<I', 0xFFFFFFFF)
        return [hdr(T['REGISTER'], 0, room), body]
    if k == 2:   # RECV_BEGIN: string length 65535 with a short body
        return [hdr(T['RECV_BEGIN'], 0, room), struct.pack('<H', 0xFFFF) + b'ab', b'']
    # one page over KVW_MAX_PAGES (rare: 256 KiB each)
    if rnd.randrange(50) == 0:
        return [hdr(T['SEND_CHUNK'], 0, room), struct.pack('<B', 0), big]
    return [hdr(T['XFER_INFO'], 0, room), struct.pack('<IIBQI', 0, 0xFFFFFFFF, 9, 1, 0), b'']


def message(target, rnd, big):
    k = rnd.randrange(8)
    if k == 0:
        return [os.urandom(rnd.randrange(1, 200))]
    if k == 1:
        return [b'']
    if k == 2:
        n = 64 if rnd.randrange(2) else rnd.randrange(9, 64)
        return [hdr(T['PING'], 0, 1)] + [os.urandom(rnd.randrange(0, 8)) for _ in range(n - 1)]
    if k == 3:
        return bad_header(rnd)
    if k == 4:
        return bad_payload(rnd)
    if k == 5:
        return huge_count(rnd, big)
    return valid(rnd.choice(WRONG[target]), rnd)


def send_all(a, make):
    """Sends make(i) for i < a.count from one DEALER (a.keys: CURVE as a
    member), blocking at the HWM, and waits until every one is handed
    over."""
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.SNDHWM, 10000)
    s.setsockopt(zmq.LINGER, 30000)
    if getattr(a, 'keys', None):
        intruder.curve(s, a.keys, True)
    s.connect(a.ep)
    t0 = time.monotonic()
    for i in range(a.count):
        s.send_multipart(make(i))
    s.close()  # lingers until every message is handed over
    ctx.term()
    print('sent %d seconds %.2f' % (a.count, time.monotonic() - t0))


def flood(a):
    rnd = random.Random(a.seed)
    big = b'\x07' * (4 * 65537)
    send_all(a, lambda i: message(a.target, rnd, big))


def registers(a):
    shape = fd.Shape(argparse.Namespace(layers=2, page_tokens=16, heads=2,
                                        head_dim=16, dtype_bytes=2,
                                        pool_pages=64, aux_slots=4,
                                        aux_bytes=16))
    epoch = random.getrandbits(63) | 1

    def make(i):
        pool = '/dev/shm/kvwire.fake-%d.pool' % i
        desc = (b'KVSH' + struct.pack('<HHQQQ', 1, len(pool), shape.size, 0, i) +
                pool.encode())
        return fd.register_msg(shape, 'ipc://%s/fake-%d.peer' % (a.dir, i),
                               desc, 0, epoch)
    send_all(a, make)


def bench_ids(seed, n):
    """The first n room ids of kv-bench --seed seed (next_id in
    cmd/kv-bench/bench.c: splitmix64, top bit clear, never 0)."""
    m, out = (1 << 64) - 1, []
    while len(out) < n:
        seed = (seed + 0x9e3779b97f4a7c15) & m
        z = seed
        z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & m
        z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & m
        z = (z ^ (z >> 31)) & 0x7fffffffffffffff
        if z:
            out.append(z)
    return out


def peer_flood(a):
    rnd = random.Random(a.seed)
    big = b'\x07' * (4 * 65537)
    rooms = []
    if a.bench_rooms:
        seed, n = (int(x) for x in a.bench_rooms.split(','))
        rooms = bench_ids(seed, n)
    epoch = rnd.getrandbits(63) | 1

    def make(i):
        room = rnd.choice(rooms) if rooms else rnd.getrandbits(64)
        token = rnd.getrandbits(64) | 1
        k = i % 5
        if k == 0:
            return [hdr(T['PING'], 0, room, epoch)]
        if k in (1, 2):  # Success, then Failed (transfer)
            return [hdr(T['STATUS'], 0, room, epoch),
                    struct.pack('<BIQ', 4 if k == 1 else 0, 0 if k == 1 else 5,
                                token) + fd.pstr('forged')]
        if k == 3:
            return [hdr(T['ABORT_ACK'], 0, room, epoch), struct.pack('<Q', token)]
        return message('receiver-peer', rnd, big)
    send_all(a, make)


# ---- hostile decode against a real kv-sender --------------------------------

CANARY = 0xA5


def decode(a):
    rnd = random.Random(a.room)
    shape = fd.Shape(a, tp=1)
    claimed = shape
    if a.case == 'lying-layout':
        a2 = argparse.Namespace(**vars(a))
        a2.pool_pages = a.pool_pages * 2
        claimed = fd.Shape(a2, tp=1)
    dpool = fd.make_pool(a.decode_pool, shape.size)
    dpool[:] = bytes([CANARY]) * shape.size
    spool = fd.open_pool(a.prefill_pool)
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind(a.listen)
    peer = fd.connect(ctx, zmq.DEALER, a.sender)
    eng = fd.connect(ctx, zmq.DEALER, a.engine)
    epoch = rnd.getrandbits(63) | 1
    desc = fd.shm_desc(a.decode_pool, shape.size)
    peer.send_multipart(fd.register_msg(claimed, a.listen, desc, 0, epoch))

    def room(rid, spages, dpages, want, reason):
        peer.send_multipart(fd.xfer_info_msg(rid, 0, 1, 0, dpages, 0, epoch))
        eng.send_multipart(fd.send_begin_msg(rid, len(spages), 0))
        eng.send_multipart(fd.send_chunk_msg(rid, spages, True))
        h, st = fd.wait_status(router, rid, a.timeout)
        if st is None:
            fd.fail('%s: no STATUS for room %d' % (a.case, rid))
        if st['state'] != want or (reason is not None and st['reason'] != reason):
            fd.fail('%s: room %d STATUS state %d reason %d (%s)' %
                    (a.case, rid, st['state'], st['reason'], st['text']))
        return st

    n = 3
    spages = rnd.sample(range(a.pool_pages), n)
    dpages = rnd.sample(range(a.pool_pages), n)
    if a.case == 'dst-range':
        dpages[1] = a.pool_pages + 5
        st = room(a.room, spages, dpages, fd.FAILED, 6)
    elif a.case == 'src-range':
        spages[1] = 0xFFFFFFF0
        st = room(a.room, spages, dpages, fd.FAILED, 6)
    elif a.case == 'lying-layout':
        dpages[1] = a.pool_pages + 3  # inside the claimed layout, past the file
        st = room(a.room, spages, dpages, fd.FAILED, 5)
    else:  # truncate
        room(a.room, spages, dpages, fd.SUCCESS, None)
        os.truncate(a.decode_pool, shape.size // 4)
        dp2 = [p for p in range(a.pool_pages - n, a.pool_pages)]  # past the cut
        st = room(a.room + 1, spages, dp2, fd.FAILED, 5)
    if a.case != 'truncate':
        if bytes(dpool) != bytes([CANARY]) * shape.size:
            first = next(i for i, b in enumerate(bytes(dpool)) if b != CANARY)
            fd.fail('%s: decode pool byte %d changed' % (a.case, first))
        if os.stat(a.decode_pool).st_size != shape.size:
            fd.fail('%s: decode pool size changed' % a.case)
    print('ok %s reason %d: %s' % (a.case, st['reason'], st['text']))
    ctx.destroy(linger=0)


# ---- a prefill rank that answers PING with garbage first -----------------------

def boot_reply(ep, room, want):
    """BOOT_REPLY OK for a 1x1 prefill whose only rank listens on ep."""
    coord = (0, 0, 0, 0) if want[0] == 0xFFFFFFFF else want
    body = (struct.pack('<I', 0) + struct.pack('<4I', 1, 1, 1, 1) +
            struct.pack('<4I', *coord) + fd.pstr(ep if want[0] != 0xFFFFFFFF else '') +
            struct.pack('<6I', 16, 2, 8, 8, 256, 0) + struct.pack('<2IQ', 0, 1, 0) +
            fd.pstr(''))
    return [hdr(T['BOOT_REPLY'], 0, room), body]


def garbage_peer(a):
    rnd = random.Random(1)
    big = b'\x07' * (4 * 65537)
    ctx = zmq.Context()
    s = ctx.socket(zmq.ROUTER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.SNDHWM, 100000)
    s.bind(a.ep)
    poller = zmq.Poller()
    poller.register(s, zmq.POLLIN)
    boot = None
    if a.boot:
        boot = ctx.socket(zmq.ROUTER)
        boot.setsockopt(zmq.LINGER, 0)
        boot.bind(a.boot)
        poller.register(boot, zmq.POLLIN)
    epoch = random.getrandbits(63) | 1
    if a.ready_fd is not None:
        os.write(a.ready_fd, b'READY\n')
        os.close(a.ready_fd)
    while True:
        if boot is not None and boot in dict(poller.poll()):
            parts = boot.recv_multipart()
            h = fd.parse_hdr(parts[1])
            if h['type'] == T['BOOT_LOOKUP']:
                want = struct.unpack_from('<4I', parts[2])
                boot.send_multipart([parts[0]] + boot_reply(a.ep, h['room'], want))
            continue
        if boot is not None and not s.poll(0):
            continue
        parts = s.recv_multipart()
        ident, h = parts[0], fd.parse_hdr(parts[1])
        if h['type'] != T['PING']:
            continue
        for _ in range(a.count):
            s.send_multipart([ident] + message('heartbeat', rnd, big))
        s.send_multipart([ident, hdr(T['PONG'], 0, h['room'], epoch)])


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest='cmd', required=True)
    f = sub.add_parser('flood')
    f.add_argument('ep')
    f.add_argument('--target', choices=sorted(WRONG), required=True)
    f.add_argument('--count', type=int, default=100000)
    f.add_argument('--seed', type=int, default=1)
    d = sub.add_parser('decode')
    for name in ('sender', 'engine', 'listen', 'prefill-pool', 'decode-pool'):
        d.add_argument('--' + name, required=True)
    d.add_argument('--case', choices=('dst-range', 'src-range', 'lying-layout',
                                      'truncate'), required=True)
    d.add_argument('--room', type=int, default=70)
    d.add_argument('--timeout', type=float, default=10)
    for name, dflt in (('layers', 2), ('page-tokens', 4), ('heads', 2),
                       ('head-dim', 8), ('dtype-bytes', 2), ('pool-pages', 32),
                       ('aux-slots', 4), ('aux-bytes', 16)):
        d.add_argument('--' + name, type=int, default=dflt)
    r = sub.add_parser('registers')
    r.add_argument('ep')
    r.add_argument('--count', type=int, default=10000)
    r.add_argument('--dir', required=True)
    r.add_argument('--keys')
    q = sub.add_parser('peer-flood')
    q.add_argument('ep')
    q.add_argument('--count', type=int, default=100000)
    q.add_argument('--bench-rooms')
    q.add_argument('--seed', type=int, default=1)
    q.add_argument('--keys')
    g = sub.add_parser('garbage-peer')
    g.add_argument('ep')
    g.add_argument('--count', type=int, default=200)
    g.add_argument('--ready-fd', type=int)
    g.add_argument('--boot', help='also answer BOOT_LOOKUP here (1x1 prefill)')
    a = p.parse_args()
    {'flood': flood, 'decode': decode, 'registers': registers,
     'peer-flood': peer_flood, 'garbage-peer': garbage_peer}[a.cmd](a)


if __name__ == '__main__':
    main()
