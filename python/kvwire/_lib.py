"""_lib.py - libkvwire.so through ctypes: the prototypes of lib/api.h, the
room status struct mirrored field by field, and the codes of lib/base/kvw.h.

The library is found at $KVW_LIB, else at lib/libkvwire.so of the checkout
this package lives in, else where `make install` put it (_libpath.py), else
by the dynamic loader's search (LD_LIBRARY_PATH, the ld.so cache): the case
of a package placed by `pip install ./python` beside an installed library. An
engine handle is serialised by its manager's lock, as lib/api.h asks.
"""
import ctypes
import os

# lib/base/kvw.h: enum kvw_err
OK = 0
EINVAL = -1
ENOMEM = -2
ESYS = -3
ENOENT = -4
EEXIST = -5
ESTALE = -6
ESTATE = -7
EVERSION = -8
ETIMEDOUT = -9
EAGAIN = -10
ENODEV = -11
ERANGE = -12
EPEER = -13
ECORRUPT = -14

# enum kvw_state (the first five are SGLang's KVPoll) and room flags.
FAILED, BOOTSTRAPPING, WAITING, TRANSFERRING, SUCCESS, CLEARED = range(6)
ROOM_F_ARMED = 0x1
ROOM_F_RELEASABLE = 0x2
ROOM_F_DUMMY = 0x4
# Prefill: the sender's workers still read the room's source pages
# (kvw_poll's, from the table's outstanding jobs; lib/api.h).
ROOM_F_SENDING = 0x40000000

# enum kvw_reason
R_ABORTED = 1
R_TIMEOUT = 2
R_BAD_INDEX = 6
R_OWNER_RESTART = 9

NSTATES = 6        # KVW_NSTATES: kvw_room_times's entries
MAX_PAGES = 65536  # KVW_MAX_PAGES: page indices in one chunk
NO_AUX = 0xFFFFFFFF  # KVW_NO_AUX: a room that only tells of an abort
MAX_STR = 255      # KVW_MAX_STR


MAX_STATE = 8  # KVW_MAX_STATE: state components of a layout
MAX_STATE_IDX = 4096  # KVW_MAX_STATE_IDX: rows of one component a room names


class StateRows(ctypes.Structure):
    """struct kvw_state_rows: one state component's rows of a room."""
    _fields_ = [("rows", ctypes.c_void_p), ("n", ctypes.c_uint32)]


class HostBuf(ctypes.Structure):
    """struct kvw_host_buf of lib/api.h."""
    _fields_ = [("ptr", ctypes.c_uint64), ("len", ctypes.c_uint64),
                ("item_len", ctypes.c_uint32), ("layer_id", ctypes.c_uint32),
                ("role", ctypes.c_uint32)]


class RoomStatus(ctypes.Structure):
    """struct kvw_room_status of lib/api.h, field for field."""
    _fields_ = [
        ("state", ctypes.c_uint32),
        ("reason", ctypes.c_uint32),
        ("generation", ctypes.c_uint32),
        ("pages_expected", ctypes.c_uint32),
        ("pages_done", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("prefix_tokens", ctypes.c_uint32),
        ("bytes", ctypes.c_uint64),
    ]


assert ctypes.sizeof(RoomStatus) == 40  # pinned in lib/api.c too


def _path():
    env = os.environ.get("KVW_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    checkout = os.path.join(here, "..", "..", "lib", "libkvwire.so")
    if os.path.exists(checkout):
        return checkout
    try:
        # Written by `make install`: where the library was installed.
        from ._libpath import LIBPATH
        return LIBPATH
    except ImportError:
        return "libkvwire.so"  # pip's copy: the loader searches


def _load():
    path = _path()
    try:
        # PyDLL keeps the GIL across calls: every call of the API is short
        # and never blocks (sends are non-blocking, polls read shared
        # memory), and handing the GIL to another thread and back around
        # each one costs more than the call (up to the switch interval).
        lib = ctypes.PyDLL(path)
    except OSError as e:
        raise ImportError("kvwire: cannot load %s (run `make`, `make "
                          "install` (then ldconfig), or set KVW_LIB): %s"
                          % (path, e)) from None
    P, U32, U64, I = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64, \
        ctypes.c_int
    U32P = ctypes.POINTER(ctypes.c_uint32)
    protos = {
        "kvw_engine_open": (I, [ctypes.c_char_p, ctypes.c_char_p,
                                ctypes.c_char_p, ctypes.POINTER(P),
                                ctypes.c_char_p, ctypes.c_size_t]),
        "kvw_engine_close": (None, [ctypes.POINTER(P)]),
        "kvw_pool_base": (P, [P]),
        "kvw_pool_size": (U64, [P]),
        "kvw_engine_error": (ctypes.c_char_p, [P]),
        "kvw_engine_hold": (I, [P, I]),
        "kvw_engine_flush": (I, [P]),
        "kvw_engine_held": (U32, [P]),
        "kvw_send_begin": (I, [P, U64, U32, U32]),
        # Page lists go as addresses (c_void_p): a numpy array's
        # .ctypes.data costs a fifth of .ctypes.data_as(POINTER) (issue 33
        # item 6: a Python room's calls).
        "kvw_send_chunk": (I, [P, U64, P, U32, I]),
        "kvw_recv_begin": (I, [P, U64, ctypes.c_char_p, U32, P, U32,
                               U32, U32]),
        "kvw_send_last_state": (I, [P, U64, P, U32,
                                    ctypes.POINTER(StateRows), U32]),
        "kvw_recv_begin_state": (I, [P, U64, ctypes.c_char_p, U32, P, U32,
                                     U32, U32, ctypes.POINTER(StateRows),
                                     U32]),
        "kvw_abort": (I, [P, U64]),
        "kvw_clear": (I, [P, U64]),
        "kvw_poll": (I, [P, U64, ctypes.POINTER(RoomStatus)]),
        # Arrays as addresses: the manager keeps its own (poll_many).
        "kvw_poll_many": (I, [P, P, U32, P, P]),
        "kvw_register_gpu_pool": (I, [P, I, ctypes.POINTER(U64),
                                      ctypes.POINTER(U64), U32P, U32,
                                      ctypes.c_char_p, ctypes.c_size_t]),
        "kvw_alloc": (I, [P, U64, ctypes.POINTER(P), ctypes.c_char_p,
                          ctypes.c_size_t]),
        "kvw_free": (I, [P, P]),
        # The layout goes as the address of kvwire.layout's _Buf array.
        "kvw_register_host": (I, [P, P, U32, ctypes.POINTER(HostBuf), U32,
                                  ctypes.c_char_p, ctypes.c_size_t]),
        "kvw_unregister_host": (I, [P]),
        "kvw_room_times": (I, [P, U64, ctypes.POINTER(U64)]),
        "kvw_control_epoch": (U64, [P]),
        "kvw_control_check": (I, [P]),
        "kvw_strerror": (ctypes.c_char_p, [I]),
        "kvw_state_str": (ctypes.c_char_p, [ctypes.c_uint]),
        "kvw_reason_str": (ctypes.c_char_p, [ctypes.c_uint]),
    }
    for name, (res, args) in protos.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    return lib


lib = _load()


def strerror(rc):
    return lib.kvw_strerror(rc).decode()


def state_str(state):
    return lib.kvw_state_str(state).decode()


def reason_str(reason):
    return lib.kvw_reason_str(reason).decode()
