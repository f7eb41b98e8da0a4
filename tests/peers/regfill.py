#!/usr/bin/python3
"""regfill.py - decode stand-ins for tests/bats/reclaim.bats (issue 14: peer
slots are reclaimed). Frames are packed as lib/wire/frame.h documents (helpers
shared with fake_decode.py). Needs Debian's /usr/bin/python3 (pyzmq).

  regfill.py fill --sender EP --count N --prefix EP_PREFIX [--first K] [shape]
      Sends N REGISTERs to kv-sender's peer socket EP, each from a DEALER of
      its own (a source of its own), for the endpoints EP_PREFIX-K ...
      EP_PREFIX-(K+N-1). Each names transport "none", so each registration
      is refused (unusable) and holds a peer slot until reclaimed. Prints
      "sent N".
  regfill.py pong EP --epoch E
      A decode's return endpoint: a ROUTER bound at EP that answers every
      PING with a PONG of epoch E. Prints "ready", runs until killed.
"""
import argparse
import os
import random
import sys

import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_decode as fd  # noqa: E402


def fill(a):
    ctx = zmq.Context()
    shape = fd.Shape(a)
    for i in range(a.first, a.first + a.count):
        s = fd.connect(ctx, zmq.DEALER, a.sender)
        epoch = random.getrandbits(63) | 1
        s.send_multipart(fd.register_msg(shape, '%s-%d' % (a.prefix, i), b'',
                                         0, epoch, transport='none'))
        # fd.connect's LINGER is 1 s: on a loaded machine 1,024 ipc
        # handshakes queued at once take longer than that, and a socket
        # whose linger ran out drops its REGISTER (issue 30: reclaim.bats
        # saw fewer than 1,024 peers). ctx.term() waits for every one,
        # within one generous bound.
        s.setsockopt(zmq.LINGER, 60000)
        s.close()
    ctx.term()
    print('sent', a.count, flush=True)


def pong(a):
    ctx = zmq.Context()
    r = ctx.socket(zmq.ROUTER)
    r.setsockopt(zmq.LINGER, 0)
    r.bind(a.ep)
    print('ready', flush=True)
    while True:
        parts = r.recv_multipart()
        try:
            h = fd.parse_hdr(parts[1])
        except (ValueError, IndexError):
            continue
        if h['type'] == fd.T['PING']:
            r.send_multipart([parts[0], fd.hdr(fd.T['PONG'], 0, h['room'],
                                               a.epoch)])


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest='cmd', required=True)
    f = sub.add_parser('fill')
    f.add_argument('--sender', required=True)
    f.add_argument('--count', type=int, required=True)
    f.add_argument('--prefix', required=True)
    f.add_argument('--first', type=int, default=0)
    for name, dflt in (('layers', 2), ('page-tokens', 4), ('heads', 2),
                       ('head-dim', 8), ('dtype-bytes', 2), ('pool-pages', 32),
                       ('aux-slots', 4), ('aux-bytes', 16)):
        f.add_argument('--' + name, type=int, default=dflt)
    g = sub.add_parser('pong')
    g.add_argument('ep')
    g.add_argument('--epoch', type=lambda v: int(v, 0), required=True)
    a = p.parse_args()
    fill(a) if a.cmd == 'fill' else pong(a)


if __name__ == '__main__':
    main()
