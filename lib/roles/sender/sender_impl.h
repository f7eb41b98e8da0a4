/*
 * sender_impl.h - the inside of kv-sender's control process, shared by its
 * files: sender.c (open, close, the poll loop), sender_room.c (the private
 * room map and its pure bookkeeping: destinations, queued chunks, job
 * queues), sender_xfer.c (engine commands, dispatch of JOBs, room endings),
 * sender_peer.c (decode peers: REGISTER, XFER_INFO, ABORT, outbound
 * sockets), sender_supervise.c (worker processes) and sender_boot.c
 * (registration at the bootstrap). Everything here runs on the one control
 * thread. Unit tests include this header to test the pure parts.
 */
#ifndef KVW_SENDER_IMPL_H
#define KVW_SENDER_IMPL_H

#include "roles/ratelimit.h"
#include <stdint.h>
#include <sys/types.h>

#include "sender.h"
#include "base/idmap.h"
#include "plan/plan.h"
#include "table/rtab.h"
#include "wire/chan.h"
#include "wire/frame.h"
#include "wire/wire.h"

#define SENDER_MAX_DST 256u    /* destinations of one room */
#define SENDER_MAX_PEERS 1024u /* decode peers remembered */
/* Decode endpoints one source (ROUTER identity: one connection) may
 * register: a decode rank registers one; a flood of fake REGISTERs from
 * one source cannot use up the peer table (issue 14). */
#define SENDER_PEERS_PER_SOURCE 8u
/* Per source: REGISTERs and XFER_INFOs per second, and bursts. */
#define SENDER_REGISTER_RATE 20.0
#define SENDER_REGISTER_BURST 64.0
#define SENDER_XFER_INFO_RATE 200000.0
#define SENDER_XFER_INFO_BURST 20000.0
#define SENDER_MAX_LAYOUT 4096u /* own layout buffers */

/* One decode rank that sent REGISTER. Rooms keep plain pointers to peers,
 * so a peer is freed only when no room names it (sender_reclaim.c); a new
 * epoch for the same endpoint rewrites the peer in place. */
struct sender_peer {
	char endpoint[RTAB_ENDPOINT_MAX];
	uint32_t id;       /* rtab peer id */
	uint32_t src_rank; /* the decode's header src_rank */
	uint64_t epoch;    /* the decode's header epoch */
	struct kvw_coord coord;
	struct kvw_topo topo;
	struct kvw_model model;
	uint8_t *desc; /* transport descriptor (owned) */
	uint32_t desclen;
	uint8_t src[RL_ID_MAX]; /* the source its last REGISTER came from */
	uint8_t srclen;
	uint64_t pool_dev, pool_ino; /* shm: the pool its descriptor names
				      * (0, 0: none; sender_authz.c) */
	struct plan *plan; /* NULL: unusable, why says why */
	char why[160];
	uint8_t refused;   /* unusable because its pool was refused
			    * (sender_authz.c): rooms fail as refused */
	void *out; /* DEALER to endpoint (s->dealers owns it), got on first send */
	uint64_t registered_ns; /* its first REGISTER of this epoch */
	uint8_t served;         /* an XFER_INFO of this epoch came */
	uint8_t busy;           /* scratch of sender_peers_reclaim */
};

/* A registration that has served no room, never answered a heartbeat and
 * is this old may be reclaimed when the table is full (sender_reclaim.c). */
#define SENDER_REGISTER_GRACE_NS 30000000000ull

/* What one XFER_INFO says of its destination (taken now, or held for the
 * id's next incarnation); pages point into the frame or a held copy. */
struct sender_xfer {
	struct frame_u32s pages;
	struct frame_bytes state; /* its state rows (frame_state_get) */
	uint32_t aux_slot;
	uint32_t required;      /* required_dst_info_num */
	uint32_t prefix_tokens; /* the decode holds these already */
	uint64_t token;
	int dummy;
};

/* One destination of a room: the pages one decode rank gave in XFER_INFO. */
struct sender_dst {
	struct sender_peer *peer;
	uint32_t *pages; /* owned */
	uint32_t npages;
	uint8_t *state;  /* owned: its state rows, as XFER_INFO packs them */
	uint32_t state_len;
	uint32_t aux_slot;
	uint32_t prefix_tokens;
	uint64_t token; /* its XFER_INFO's incarnation token (STATUS echoes it) */
	uint8_t dummy;
	uint8_t done; /* its last job finished */
};

/* A chunk the engine sent that is not dispatched yet. */
struct sender_chunk {
	uint32_t *pages; /* owned */
	uint32_t n;
	uint8_t is_last;
};

/* One ABORT waiting for its ack: the decode that asked and the token its
 * ABORT carried (echoed in ABORT_ACK). Two decode ranks aborting one room
 * are two targets; one decode aborting two incarnations of a room id (two
 * tokens) is two targets too. */
struct sender_ack {
	struct sender_peer *peer;
	uint64_t token;
};

/* The control's private state of one room incarnation. */
struct sender_room {
	union {                      /* linked in sender_rooms by node.id, */
		struct idmap_node node; /* which `id` names (its first */
		uint64_t id;            /* member) */
	};
	struct rtab_ref ref;
	uint32_t num_pages, aux_slot;
	uint8_t begun;       /* SEND_BEGIN seen */
	uint8_t last_queued; /* a chunk with is_last was queued */
	uint8_t last_sent;   /* ... and dispatched */
	uint8_t final_sent;  /* the closing STATUS went out */
	uint8_t cleared;     /* engine sent CLEAR; kept only for ABORT acks */
	uint8_t given_up;    /* the engine cleared the id before it came:
			      * cleared once it ends (sender_orphan.c) */
	uint32_t queued_pages; /* pages of every chunk taken */
	uint32_t cursor;       /* pages dispatched so far */
	struct sender_chunk *q;
	uint32_t nq, capq;
	struct sender_dst *dst;
	uint32_t ndst, capdst;
	uint32_t required; /* required_dst_info_num (0: no XFER_INFO yet) */
	uint8_t *src_state; /* owned: the last chunk's state rows (packed) */
	uint32_t src_state_len;
	struct sender_ack *acks; /* ABORT requesters waiting for the ack */
	uint32_t nacks, capacks;
	uint64_t ack_deadline_ns; /* acks still owed then are dropped; 0: none */
	uint32_t inflight; /* jobs sent to a worker, JOB_DONE not yet seen */
	uint32_t told; /* 1 + the destination whose STATUS(Success) the worker
			* sends (its FRAME_JOB_FINAL job); 0: none */
	uint32_t worker; /* runs every job of the room; SENDER_NO_WORKER
			  * until the first job is dispatched */
	/* XFER_INFOs that came while this incarnation still held the id and
	 * belong to a later one (a decode that cleared and began the id again
	 * before this prefill's engine cleared it): taken up, in order, once
	 * this one is freed (sender_room_retire). */
	struct sender_dst *held;
	uint32_t nheld, capheld;
	uint32_t held_required;
	struct sender_room *gone_next; /* scratch of sender_sweep */
	uint64_t ended_ns; /* first seen ended, never begun (sender_orphan.c) */
};

#define SENDER_NO_WORKER UINT32_MAX
/* Queued job bytes up to which a worker takes more rooms (see
 * sender_worker_pick): about 400 us of copying at 5 GiB/s. */
#define SENDER_PACK_BYTES (2048u << 10)

/* Room id -> room (lib/base/idmap.h); the map owns its rooms. */
struct sender_rooms {
	struct idmap m;
};

/* One JOB sent to a worker and not yet answered. A worker answers its
 * jobs in order, so its queue's head is the job a JOB_DONE is about. */
struct sender_jobrec {
	uint64_t room;
	struct rtab_ref ref;
	uint32_t dst;   /* index into the room's dst[] */
	uint32_t pages; /* pages the job carries */
	uint8_t last;   /* FRAME_JOB_LAST */
	uint64_t bytes; /* bytes its copies move */
};

struct sender_jobq {
	struct sender_jobrec *a;
	uint32_t head, n, cap;
	uint64_t bytes; /* of every job queued */
};

struct sender_worker {
	pid_t pid;   /* 0: not running */
	struct chan ch; /* to this incarnation; fd -1 when none */
	int up;      /* hello seen from this incarnation */
	uint64_t started_ns;
	uint64_t restart_at_ns; /* 0: none pending */
	uint64_t progress_ns; /* last JOB_DONE, or the first job queued on an
			       * idle worker (liveness, sender_workers_tick) */
	struct sender_jobq q;
};

/* Room ids the engine cleared before this control knew them
 * (sender_orphan.c): a FIFO of at most SENDER_GIVEN_UP_MAX, looked up by
 * id. A ring slot is a record of the map while it holds the newest entry
 * of its id. */
#define SENDER_GIVEN_UP_MAX 4096u
struct sender_given_up_id {
	struct idmap_node node; /* node.id: the room id */
	uint64_t t_ns;          /* when the engine cleared it */
};
struct sender_given_up {
	struct idmap m;
	struct sender_given_up_id *ring;
	uint32_t head; /* next slot to write: the oldest entry */
};

struct sender {
	/* config (strings owned) */
	char *listen, *engine_ep, *bootstrap, *table_path, *pool_path;
	char *transport, *exe, *name, *log_level;
	uint32_t nworkers;
	uint32_t last_worker; /* picked last (sender_worker_pick) */
	struct kvw_topo topo;
	struct kvw_coord coord;
	struct shape shape;
	uint64_t room_timeout_ns;
	uint64_t worker_stall_ns; /* see sender_cfg */
	uint32_t rank;
	uint64_t epoch;

	/* own layout */
	struct kvw_model model;
	struct kvw_buf *bufs;
	uint32_t nbufs;
	uint64_t pool_bytes;
	uint32_t layer_first, layer_count;

	struct rtab *t;
	struct pool *pool;
	int made_files; /* bit 0: this open created the table, bit 1: the pool
			 * (a failed open removes what it made, nothing else) */
	void *ctx;
	struct dealers *dealers; /* DEALERs to decodes' return endpoints */
	void *peer_sock, *eng_sock;

	struct sender_rooms rooms;
	struct sender_given_up given_up; /* sender_orphan.c */
	uint64_t next_orphan_ns;         /* next sender_orphan_sweep */
	struct sender_peer **peers;
	uint32_t npeers;
	struct sender_worker w[SENDER_MAX_WORKERS];

	/* planning scratch, reused per job */
	struct plan_copy *pc;
	struct frame_copy *fc;
	size_t cap_copies;

	/* staying registered at the bootstrap (sender_boot.c) */
	void *boot_sock;            /* DEALER to the bootstrap, NULL: none */
	uint64_t boot_epoch;        /* epoch of the bootstrap that said OK */
	uint64_t boot_next_ns;      /* next PING */
	uint64_t boot_asked_epoch;  /* BOOT_REGISTER sent to this epoch ... */
	uint64_t boot_asked_ns;     /* ... at this time */

	struct wpoll *wp; /* the loop's sockets (sender_run), NULL outside it */

	uint64_t next_sweep_ns;
	uint64_t next_notice_ns; /* next sender_notice */
	uint64_t ack_expiry_ns; /* earliest ack_deadline_ns of a room; 0: none */
	int ready_fd;
	uint64_t zap_seen; /* ZAP refusals already in the table (authz.h) */
	struct ratelimit rl_register, rl_xfer; /* per source (ratelimit.h) */
};

/* Tells the loop that a message went out on sock (one of its polled
 * sockets or not): see wpoll.h. Every send on a polled socket calls it. */
void sender_sent_on(struct sender *s, void *sock);

/* ---- sender_room.c: pure bookkeeping (no sockets, no table) ---------- */

int sender_rooms_init(struct sender_rooms *m, uint32_t nbuckets);
/* Frees every room and the buckets; accepts a zeroed map. */
void sender_rooms_free(struct sender_rooms *m);
struct sender_room *sender_rooms_get(const struct sender_rooms *m, uint64_t id);
/* Adds a zeroed room with this id: 0 and *out, KVW_EEXIST (*out = it) or
 * KVW_ENOMEM. */
int sender_rooms_add(struct sender_rooms *m, uint64_t id,
		     struct sender_room **out);
/* Removes and frees the room with this id (no-op when absent). */
void sender_rooms_del(struct sender_rooms *m, uint64_t id);
/* Calls fn for every room; fn may delete the room it was given (only). */
void sender_rooms_foreach(struct sender_rooms *m,
			  void (*fn)(void *arg, struct sender_room *r),
			  void *arg);

/* Whether peer p is a destination of r (its XFER_INFO reached r). */
int sender_room_has_dst(const struct sender_room *r,
			const struct sender_peer *p);

/* Makes sure s->pc and s->fc hold n copies; 0 or KVW_ENOMEM. */
int sender_scratch(struct sender *s, size_t n);

/* Frees what a destination owns (its pages and state rows). */
void sender_dst_free(struct sender_dst *d);

/* Keeps a copy of the last chunk's state rows (packed as the frame has
 * them; none for len 0). 0 or KVW_ENOMEM (the old ones kept). */
int sender_room_set_src_state(struct sender_room *r, struct frame_bytes st);

/* The state copies of destination di of room r, appended at s->pc[*nc..)
 * (*nc grows): every state component both layouts hold, its rows by its
 * kind's rule (sender_state.c). 0; KVW_ERANGE / KVW_EINVAL with why (the
 * room must fail: bad index); KVW_ENOMEM. */
int sender_state_copies(struct sender *s, const struct sender_room *r,
			uint32_t di, size_t *nc, char *why, size_t whylen);

/* Adds or overwrites (same peer) the destination of peer p with a copy of
 * x's pages and state rows. Returns its index (>= 0), KVW_ENOMEM, or
 * KVW_ERANGE when the room already has SENDER_MAX_DST destinations. */
int sender_room_set_dst(struct sender_room *r, struct sender_peer *p,
			const struct sender_xfer *x);
/* Holds a copy of an XFER_INFO (peer p's destination and the number of
 * destinations it said the room needs) for the id's next incarnation; a
 * later one from the same peer replaces it. 0, KVW_ERANGE (already
 * SENDER_MAX_DST held) or KVW_ENOMEM. */
int sender_room_hold(struct sender_room *r, struct sender_peer *p,
		     const struct sender_xfer *x);
/* Whether an XFER_INFO of peer p carrying `token` is for a later
 * incarnation than r: p is a destination of r under another token. */
int sender_room_is_later(const struct sender_room *r,
			 const struct sender_peer *p, uint64_t token);
/* Destinations that receive data (not dummy). */
uint32_t sender_room_nreal(const struct sender_room *r);
/* 1 when every destination decode said it needs has arrived. */
int sender_room_ready(const struct sender_room *r);
/* 1 when every real destination's last job finished (and there is one). */
int sender_room_all_done(const struct sender_room *r);
/* Queues a copy of a chunk. KVW_ERANGE when the chunk would run past
 * num_pages or follows the last chunk (nothing queued); KVW_ENOMEM. */
int sender_room_push_chunk(struct sender_room *r, struct frame_u32s pages,
			   int is_last);
/* Drops the oldest queued chunk (no-op when none). */
void sender_room_pop_chunk(struct sender_room *r);
/* Drops every queued chunk. */
void sender_room_drop_chunks(struct sender_room *r);
/* Remembers (p, token) as an ABORT ack target, once per distinct pair;
 * the first target of a room sets its ack deadline to `deadline_ns`.
 * Returns 1 when added, 0 when that pair was already there, KVW_ENOMEM. */
int sender_room_add_ack(struct sender_room *r, struct sender_peer *p,
			uint64_t token, uint64_t deadline_ns);
/* 1 when the room's acks may go out now: targets are owed and nothing of
 * the incarnation is outstanding (jobs sent and not yet given back by a
 * worker), else 0. */
int sender_room_ack_due(const struct sender_room *r, uint32_t outstanding);

/* The dst pages for source pages [cursor, cursor + n) of destination d:
 * 0 with *out pointing into d->pages, or KVW_ERANGE when that runs past
 * d's page list. */
int sender_dst_slice(const struct sender_dst *d, uint32_t cursor, uint32_t n,
		     const uint32_t **out);

/* Pages per JOB so that one job's copies stay within max_copies given the
 * plan's worst case (plan_chunk_max), at least 1, at most n. */
uint32_t sender_job_pages(const struct plan *p, uint32_t n, int with_aux,
			  uint64_t max_copies);

/* Job queue of one worker. push: 0 or KVW_ENOMEM. head: NULL when empty. */
int sender_jobq_push(struct sender_jobq *q, const struct sender_jobrec *j);
const struct sender_jobrec *sender_jobq_head(const struct sender_jobq *q);
/* The i-th oldest record (0: the head), or NULL past the end. */
const struct sender_jobrec *sender_jobq_at(const struct sender_jobq *q,
					   uint32_t i);
void sender_jobq_pop(struct sender_jobq *q);
/* Takes back the record pushed last (its send failed). */
void sender_jobq_unpush(struct sender_jobq *q);
void sender_jobq_free(struct sender_jobq *q);
/* The worker for a room with nothing in flight (see sender_supervise.c), or
 * SENDER_NO_WORKER while none is up. */
uint32_t sender_worker_pick(struct sender *s);

/* Worker index of a room: a hash of its id modulo n. */

/* ---- sender_xfer.c: engine commands, dispatch, endings ---------------- */

void sender_on_engine(struct sender *s, const struct frame_msg *m);
/* Finds or creates the room (inserting it in the table). NULL when it
 * cannot be created or its incarnation is not ours (logged). */
struct sender_room *sender_room_open(struct sender *s, uint64_t id);
/* Sends whatever queued chunks can go now. */
void sender_dispatch(struct sender *s, struct sender_room *r);
/* Fails the room (if not terminal yet) and sends STATUS(Failed) with the
 * table's reason to every real destination, once. Drops queued chunks. */
/* The worker of r's final job died before its JOB_DONE came, so maybe
 * before its STATUS(Success) left it (a killed process loses what its
 * sockets still held): if r is Success, that job's destination hears it
 * again from the control. A second Success from one rank is counted once
 * (its token names the incarnation); without it that decode would wait
 * for its deadline. The other destinations are told as always. */
void sender_room_retell(struct sender *s, struct sender_room *r);
void sender_room_fail(struct sender *s, struct sender_room *r,
		      unsigned reason, const char *why);
/* Sends pending ABORT acks (one ABORT_ACK carrying its token per target)
 * once nothing of the room is outstanding; frees a cleared room whose acks
 * are all sent and whose jobs are all answered. May free r. */
void sender_room_acks(struct sender *s, struct sender_room *r);
/* Whether a cleared room may be freed now: no ack owed and nothing of it
 * outstanding in the table (its JOB_DONEs may still be on their way: they
 * are ignored once it is gone). */
int sender_room_gone(struct sender *s, const struct sender_room *r);
/* Frees r, then takes up the XFER_INFOs it held for the id's next
 * incarnation (sender_peer_take_held). */
void sender_room_retire(struct sender *s, struct sender_room *r);
void sender_on_job_done(struct sender *s, uint32_t w, const struct frame_msg *m);
/* Reports rooms another process ended in the table (a worker, the
 * heartbeat): STATUS(Failed) with the table's reason, or the Success
 * other destinations have not heard, to every real destination, once.
 * The loop calls it every SENDER_NOTICE_NS. */
#define SENDER_NOTICE_NS 100000000ull
void sender_notice(struct sender *s);
/* rtab_expire sweep, and ack targets past their deadline are dropped with
 * a warning (a cleared room holding only them is freed); returns the next
 * deadline (0: none). */
uint64_t sender_sweep(struct sender *s, uint64_t now);

/* ---- sender_orphan.c: ended rooms nobody will clear ------------------ */

/* 0, or KVW_ENOMEM (then g remembers nothing, and add/take are no-ops). */
int sender_given_up_init(struct sender_given_up *g);
void sender_given_up_fini(struct sender_given_up *g);
/* The engine cleared id, unknown here, at now_ns. */
void sender_given_up_add(struct sender_given_up *g, uint64_t id,
			 uint64_t now_ns);
/* Forgets id: 1 when it was cleared by the engine less than max_age_ns
 * before now_ns, else 0. */
int sender_given_up_take(struct sender_given_up *g, uint64_t id,
			 uint64_t now_ns, uint64_t max_age_ns);
/* A room given up by its engine that has ended is cleared (counted):
 * 1, and the caller then lets sender_room_acks free it; else 0. */
int sender_orphan_end(struct sender *s, struct sender_room *r);
/* Clears every room that ended without SEND_BEGIN, owes nothing, and was
 * given up or has been seen ended for the room timeout; frees those that
 * are gone. The loop calls it every SENDER_ORPHAN_EVERY_NS. */
#define SENDER_ORPHAN_EVERY_NS 1000000000ull
void sender_orphan_sweep(struct sender *s, uint64_t now);

/* ---- sender_authz.c ---------------------------------------------------- */

/* Whether REGISTER r (from the decode at r->endpoint; p: its peer, or
 * NULL for a new one) may name the pool its descriptor names: 1 (with the
 * pool's identity in *dev, *ino; 0, 0 for a transport that maps no file),
 * or 0 with why[] saying why not (issue 14). */
int sender_pool_allowed(const struct sender *s, const struct sender_peer *p,
			const struct frame_register *r, uint64_t *dev,
			uint64_t *ino, char *why, size_t whylen);

/* ---- sender_peer.c ----------------------------------------------------- */

void sender_on_peer(struct sender *s, const struct wire_in *in,
		    const struct frame_msg *m);
/* Sends m to the peer's endpoint over its DEALER (made on first use).
 * Failures are logged (rate-limited); returns 0 or a KVW_E*. */
int sender_peer_send(struct sender *s, struct sender_peer *p,
		     struct frame_msg *m);
void sender_peers_free(struct sender *s);
/* Takes up one XFER_INFO a freed incarnation of room `id` held for a later
 * one, as if it came now. */
void sender_peer_take_held(struct sender *s, uint64_t id,
			   const struct sender_dst *d, uint32_t required);

/* ---- sender_reclaim.c ---------------------------------------------------- */

/* Frees the peers (of source src[srclen] only, unless src is NULL) that
 * no room names and whose registration was refused, died or never served
 * a room in its grace time, with their table slots and DEALERs; returns
 * how many went. */
uint32_t sender_peers_reclaim(struct sender *s, const uint8_t *src,
			      size_t srclen, uint64_t now_ns);

/* ---- sender_supervise.c --------------------------------------------------- */

int sender_workers_start(struct sender *s, char *err, size_t errlen);
/* Reads every whole message worker k's channel holds and handles it
 * (hello, JOB_DONE), after writing what the channel had queued. A channel
 * that ended (the worker died: SIGCHLD follows) or broke (the worker is
 * killed) is closed. */
void sender_worker_drain(struct sender *s, uint32_t k);
/* Reaps dead workers, fails their rooms, restarts them when due. */
void sender_workers_reap(struct sender *s);
/* Restarts workers whose restart time has come, and kills a worker that
 * has jobs queued and answered none for worker_stall_ns (it gets no new
 * room from then on; its death fails its rooms and restarts it); returns
 * the nearest such time (0: none). */
uint64_t sender_workers_tick(struct sender *s, uint64_t now);
/* 1 when every worker is up. */
int sender_workers_all_up(const struct sender *s);
/* Sends a JOB to worker w and records it: 0, or a KVW_E* (nothing
 * recorded). */
int sender_worker_send(struct sender *s, uint32_t w, struct frame_msg *m,
		       const struct sender_jobrec *rec);
void sender_workers_stop(struct sender *s);

/* ---- sender_boot.c ----------------------------------------------------- */

/* Registers this rank at the bootstrap with bootc_call, retrying every
 * 200 ms - 1 s (jittered) until OK. No bootstrap configured: returns 0 at
 * once. Returns 0, KVW_EINVAL when the bootstrap REFUSED (text in err), or
 * KVW_ESYS when SIGTERM arrived or zmq failed. Blocks; called once before
 * the poll loop. */
int sender_boot_register(struct sender *s, char *err, size_t errlen);
/* After registration: the DEALER that keeps the registration alive (see
 * sender_boot.c). 0, or KVW_ESYS with err. No bootstrap: 0, no socket. */
int sender_boot_open(struct sender *s, char *err, size_t errlen);
/* PINGs the bootstrap when due; returns the next time it is due (0: no
 * bootstrap). */
uint64_t sender_boot_tick(struct sender *s, uint64_t now);
/* A message on the bootstrap DEALER: a PONG of a new bootstrap epoch
 * sends BOOT_REGISTER again; a BOOT_REPLY OK records that epoch. */
void sender_boot_on_reply(struct sender *s, const struct frame_msg *m);

#endif
