#!/usr/bin/python3
"""late.py - sends one frame of an earlier incarnation of a room id, in the
name of a real member of a kv-up group, to another member's peer socket:
what a late STATUS (a worker's, or a restarted control's) or a late
XFER_INFO looks like on the wire. Used by tests/bats/reuse.bats; frames are
packed as tests/peers/fake_decode.py packs them (lib/wire/frame.h).

  late.py status EP SRC EPOCH ROOM success|failed REASON TOKEN
  late.py xfer-info EP SRC EPOCH ROOM TOKEN AUX PAGES|dummy

EPOCH is hex (kv-stat's peer table shows it). Exit 0 once the frame was
handed to a connected DEALER (linger 3 s), 100 on bad arguments.
"""
import os
import struct
import sys

import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fake_decode import FAILED, SUCCESS, T, hdr, pstr, xfer_info_msg  # noqa: E402


def send_one(ep, parts):
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.linger = 3000
    s.connect(ep)
    s.send_multipart(parts)
    s.close()
    ctx.term()


def main(argv):
    if len(argv) == 8 and argv[0] == 'status':
        ep, src, epoch, room = argv[1], int(argv[2]), int(argv[3], 16), int(argv[4])
        state = {'success': SUCCESS, 'failed': FAILED}[argv[5]]
        body = struct.pack('<BIQ', state, int(argv[6]), int(argv[7])) + \
            pstr('late STATUS of an earlier incarnation (test)')
        send_one(ep, [hdr(T['STATUS'], src, room, epoch), body])
    elif len(argv) == 8 and argv[0] == 'xfer-info':
        ep, src, epoch, room = argv[1], int(argv[2]), int(argv[3], 16), int(argv[4])
        dummy = argv[7] == 'dummy'
        pages = [] if dummy else [int(p) for p in argv[7].split(',')]
        send_one(ep, xfer_info_msg(room, int(argv[6]), 1, int(dummy), pages,
                                   src, epoch, int(argv[5])))
    else:
        print(__doc__, file=sys.stderr)
        return 100
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
