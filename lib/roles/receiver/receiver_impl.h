/*
 * receiver_impl.h - the private state of kv-receiver, shared by receiver.c
 * (setup, poll loop, handlers), receiver_room.c (rooms, targets, the
 * counting rules) and receiver_boot.c (the asynchronous bootstrap cache),
 * and by the unit test. Not part of the library's public interface.
 */
#ifndef KVW_RECEIVER_IMPL_H
#define KVW_RECEIVER_IMPL_H

#include <stddef.h>
#include <sys/types.h>
#include <stdint.h>

#include "receiver.h"
#include "base/idmap.h"
#include "plan/rankmap.h"
#include "roles/ratelimit.h"
#include "table/rtab.h"
#include "wire/frame.h"

/* A set of distinct u32 (prefill unique ranks), grown on demand. */
struct receiver_rset {
	uint32_t *v;
	uint32_t n, cap;
};

/* Adds x: 1 if it was new, 0 if already present, KVW_ENOMEM. */
int receiver_rset_add(struct receiver_rset *s, uint32_t x);
int receiver_rset_has(const struct receiver_rset *s, uint32_t x);
void receiver_rset_free(struct receiver_rset *s);

struct rx_peer;
struct rx_boot;
struct rtab_fence;
struct rtab_grant;
struct rtab_grant_target;
struct wire_in;

#define RX_RETIRED 4u /* earlier epochs remembered per prefill peer */
#define RX_SYNC_NS 100000000ull /* peer table check (heartbeat's view) */
#define RX_FORGET_NS 60000000000ull /* default --forget-after */
#define RX_FENCE_POLL_NS 1000000ull /* recheck of rooms a sink still writes */

/* Per source on the peer ROUTER (a ROUTER identity: one connection, a
 * prefill control's or one of its workers'), frames per second and
 * bursts (issue 14). STATUS and ABORT_ACK come once per room per prefill
 * rank, so their rate is far above any room rate (tens of thousands a
 * second) and their burst holds a whole table (the receiver's 65,536
 * rooms) failed or aborted at once. A PING costs a PONG; kv-heartbeat
 * pings a peer a few times a second at most. */
#define RX_STATUS_RATE 200000.0
#define RX_STATUS_BURST 65536.0
#define RX_ACK_RATE 200000.0
#define RX_ACK_BURST 65536.0
#define RX_PING_RATE 1000.0
#define RX_PING_BURST 1000.0

/* One prefill rank a room talks to. */
struct rx_target {
	struct kvw_coord coord;
	uint32_t unique;       /* prefill unique rank (rankmap_unique) */
	uint8_t dummy;         /* dummy XFER_INFO, no data, no STATUS */
	uint32_t page_start;   /* its share of the room's pages */
	uint32_t page_count;
	uint64_t token;        /* its XFER_INFO token (receiver_room_send):
				* its STATUS counts only with it, its
				* batches carry it */
	struct rx_peer *peer;  /* NULL until the bootstrap resolved it */
};

/* Private state of one room (one incarnation in the table). */
struct rx_room {
	union {                      /* linked in rx_rooms by node.id, */
		struct idmap_node node; /* which `id` names (its first */
		uint64_t id;            /* member) */
	};
	struct rtab_ref ref;
	uint64_t token;       /* this incarnation's base token, != 0: each
			       * target's own is derived from it
			       * (receiver_target_token) */
	struct kvw_topo ptopo; /* the prefill topology its targets map */
	uint32_t *pages;
	uint32_t npages;
	uint8_t *state;       /* its state rows, packed as RECV_BEGIN had them
			       * (frame_state_get); each real target's
			       * XFER_INFO carries them */
	uint32_t state_len;
	uint32_t aux_slot, prefill_dp;
	uint32_t prefix_tokens; /* held already: the prefill skips them */
	char boot_ep[FRAME_STR_SIZE];
	struct rx_target *targets; /* NULL until the topology is known */
	uint32_t ntargets;
	uint32_t required_dst_info_num;
	uint32_t required_resp;    /* required_prefill_response_num */
	struct receiver_rset success; /* unique ranks that reported Success */
	struct receiver_rset acked;   /* unique ranks that sent ABORT_ACK */
	uint32_t ack_needed;  /* distinct unique ranks that got XFER_INFO */
	int sent;             /* XFER_INFO went to every target */
	int inherited;        /* made for an incarnation of a previous
			       * receiver epoch (receiver_drain_inherited):
			       * its targets' unique ranks are not known, so
			       * each gets its own token and an ack counts
			       * for the target whose token it echoes */
	int armed;            /* ABORT sent, waiting for acks */
	uint64_t abort_token; /* this arming's token (ABORT carries it; an
			       * ABORT_ACK counts only with it); 0: unarmed */
	uint64_t ack_deadline_ns;
	int fence_wait;       /* tcp: armed, a sink still writes it */
	int tell_abort;       /* the engine aborted it while its prefill
			       * ranks were being looked up: once known, each
			       * is told (a dummy XFER_INFO, then ABORT), so
			       * a prefill room waiting for it fails now, not
			       * at its bootstrap timeout; released then */
};

/* Results of the counting rules. */
enum {
	RX_IGNORED = 0,  /* not a target of this room (or a dummy reporting) */
	RX_DUP = 1,      /* this rank was already counted */
	RX_COUNTED = 2,  /* counted, more are needed */
	RX_COMPLETE = 3, /* counted, the required number is reached */
};

/* Pure room bookkeeping (unit-tested). */
struct rx_room *receiver_room_new(uint64_t id, const uint32_t *pages,
				  uint32_t npages);
void receiver_room_free(struct rx_room *room);
/* Fills the room's targets from a computed map; unique ranks come from
 * rankmap_unique(m->prefill, coord) (prefill_tp is used only when the map
 * states no prefill topology). Returns 0, KVW_ENOMEM or KVW_EINVAL. */
int receiver_room_set_targets(struct rx_room *room, const struct rankmap *m,
			      uint32_t prefill_tp);
/* A Success STATUS from unique rank src: RX_IGNORED unless src is a real
 * (non-dummy) target; counts distinct ranks against required_resp. */
int receiver_room_success(struct rx_room *room, uint32_t src);
/* An ABORT_ACK from unique rank src (dummy targets included) carrying
 * token: RX_IGNORED unless the room is armed, token is the arming's token
 * (an ack of an older incarnation of the room id, or of an abort this room
 * never sent, changes nothing) and src a target; RX_DUP for a rank that
 * already acked; RX_COMPLETE when every target that got XFER_INFO acked.
 * An inherited room's targets are told apart by their tokens, not by src
 * (receiver_room_target_token). Returns KVW_ENOMEM on allocation failure. */
int receiver_room_ack(struct rx_room *room, uint32_t src, uint64_t token);
/* The token the ABORT to target i carries: the arming's; for an inherited
 * room the arming's + i (the range is reserved when it is armed), since
 * the ranks of its targets are not known. */
uint64_t receiver_room_target_token(const struct rx_room *room, uint32_t i);
/* Arms the room for an abort with token (!= 0): acks counted so far are
 * forgotten. Returns 0, or KVW_EINVAL for token 0 or a room armed already
 * (nothing changed). */
int receiver_room_arm(struct rx_room *room, uint64_t token);
/* Marks XFER_INFO as sent to every target: ack_needed = distinct ranks. */
void receiver_room_mark_sent(struct rx_room *room);

/* Room id -> room (lib/base/idmap.h); the map owns its rooms. */
struct rx_rooms {
	struct idmap m;
};
/* 0 or KVW_ENOMEM (see idmap_init). */
int receiver_rooms_init(struct rx_rooms *h, uint32_t nbuckets);
struct rx_room *receiver_rooms_get(const struct rx_rooms *h, uint64_t id);
/* Links room: 0, KVW_EEXIST (a room with its id is linked) or KVW_ENOMEM;
 * on error the caller keeps room. */
int receiver_rooms_put(struct rx_rooms *h, struct rx_room *room);
/* Unlinks and returns the room, or NULL. */
struct rx_room *receiver_rooms_del(struct rx_rooms *h, uint64_t id);
/* Iteration: from a zeroed *it, the next room or NULL; the room returned
 * may be unlinked before the next call (idmap_next). */
struct rx_room *receiver_rooms_next(const struct rx_rooms *h,
				    struct idmap_iter *it);
/* Number of rooms linked. */
uint32_t receiver_rooms_count(const struct rx_rooms *h);
void receiver_rooms_free(struct rx_rooms *h);

/* ---- receiver_sink.c: sink processes (ops->sink_info: tcp) ---------- */

/* Starts cfg->sinks sink processes on the transport's listening socket.
 * 0, or KVW_E* with err. */
int receiver_sinks_start(struct receiver *r, char *err, size_t errlen);
/* Reaps sinks that died and restarts them (at most once a second each);
 * call from the loop. */
void receiver_sinks_tick(struct receiver *r);
/* SIGTERM to every sink, a bounded wait, SIGKILL for the rest. */
void receiver_sinks_stop(struct receiver *r);

/* Bootstrap retry backoff: the next delay after `prev_ms` (0 = first),
 * doubling from 100 ms up to 500 ms, with jitter from `rnd`; always in
 * [100, 500]. */
uint32_t receiver_boot_backoff(uint32_t prev_ms, uint32_t rnd);

/* ---- the running receiver ---------------------------------------- */

/* One prefill rank the receiver has resolved. */
struct rx_peer {
	char ep[FRAME_STR_SIZE];
	uint32_t id;      /* rtab peer id */
	uint32_t unique;  /* its unique rank */
	uint64_t epoch;   /* last epoch heard from it, 0 = none yet */
	int registered;   /* REGISTER sent in this epoch */
	void *sock;       /* outbound DEALER (r->dealers owns it) */
	uint64_t retired[RX_RETIRED]; /* its earlier epochs (0: unused) */
	uint32_t nretired;            /* epochs retired so far */
	int dead;         /* its rooms were failed for a DEAD liveness */
	uint64_t dead_since_ns; /* when it was first seen dead (dead set) */
	int busy;         /* scratch: a room names it (receiver_forget.c) */
};

/* What an epoch heard from a peer means (receiver_epoch_note). */
enum {
	RX_EP_CURRENT = 0, /* the recorded one (or the first one, now recorded) */
	RX_EP_NEW = 1,     /* a new incarnation: recorded, the old one retired */
	RX_EP_STALE = 2,   /* one of its retired epochs: drop the message */
};

/* Pure: classifies `epoch` (0 = none: CURRENT) for peer p and records a
 * new one. Epochs are random, so "older" means "retired": one p had
 * before; the last RX_RETIRED are remembered. */
int receiver_epoch_note(struct rx_peer *p, uint64_t epoch);

#define RX_MAX_SINKS RECEIVER_MAX_SINKS

/* One sink process (tcp): forked, exec'd in sink mode, restarted. */
struct rx_sink {
	pid_t pid;            /* 0: not running */
	uint64_t restart_ns;  /* not before then (a crash loop waits 1 s) */
};

struct receiver {
	struct wpoll *wp; /* the loop's sockets (receiver_run), else NULL */
	struct rx_sink sink[RX_MAX_SINKS];
	uint32_t nsinks;  /* 0 unless the transport needs sinks (tcp) */
	struct rtab_fence *fence; /* which room each sink writes (tcp) */
	struct rtab_grant *grant; /* which pages each room's sinks may
				   * write (tcp) */
	uint32_t fence_waiting;   /* rooms with fence_wait set */
	char *exe;        /* program exec'd in sink mode */
	char **sink_env;  /* its environment: ours + the secret; owned */
	char listen[FRAME_STR_SIZE];
	char engine[FRAME_STR_SIZE];
	char *table_path;
	char *pool_path;
	char transport[FRAME_STR_SIZE];
	struct kvw_topo topo;
	struct kvw_coord rank;
	struct shape shape;
	uint64_t timeout_ns;
	uint64_t epoch;
	uint32_t my_rank; /* header src_rank: the decode tp rank */
	int all_cp_ranks; /* pull from every prefill CP rank */

	struct rtab *tab;
	struct pool *pool;
	struct xport *xp;
	uint8_t desc[KVW_MAX_DESC];
	size_t desclen;
	uint32_t pool_id; /* the pool's registration with xp */
	struct kvw_buf *bufs;
	uint64_t *page_seen; /* one bit per pool page, all clear between uses
			      * (RECV_BEGIN's repeated-page check) */
	uint32_t nbufs;
	struct kvw_model model;

	int made_files; /* bit 0: this open created the table, bit 1: the pool
			 * (a failed open removes what it made, nothing else) */
	void *ctx;
	struct dealers *dealers; /* bootstraps' and prefill peers' DEALERs */
	void *peer_sock;   /* ROUTER on listen */
	void *engine_sock; /* ROUTER on engine */

	struct rx_rooms rooms;
	struct rx_boot **boots;
	uint32_t nboots, capboots;
	struct rx_peer **peers;
	uint32_t npeers, cappeers;

	uint64_t next_deadline; /* cached earliest room deadline, 0 = none */
	uint64_t next_ack_deadline;
	uint64_t next_sync_ns;  /* next receiver_peers_sync */
	uint64_t forget_ns;     /* grace before a dead peer is forgotten */
	uint64_t abort_seq;     /* tokens drawn so far (receiver_token) */
	uint8_t token_key[16];  /* their key (receiver_token_init) */
	uint8_t target_key[16]; /* the targets' tokens' key without a grant */
	uint32_t rnd;           /* jitter state */
	uint64_t zap_seen;      /* ZAP refusals already in the table (authz.h) */
	struct ratelimit rl_status, rl_ack, rl_ping; /* per source, on the
						      * peer ROUTER */
};

/* ---- receiver_forget.c: prefill instances that left ------------------ */

/* Pure: whether peer p may be forgotten at now_ns: declared dead at least
 * grace_ns ago and named by no room (busy, as marked by the caller). */
int receiver_peer_departed(const struct rx_peer *p, uint64_t now_ns,
			   uint64_t grace_ns);
/* Forgets the peers and bootstraps that left (see the file); the loop
 * calls it with the peer sync, before it sets the sockets to poll. */
void receiver_forget_departed(struct receiver *r, uint64_t now);
/* Drops every bootstrap no room waits on, none of whose coordinates
 * names a peer or awaits an answer, and that no room asked for the last
 * r->forget_ns: its DEALER closed, logged (receiver_boot.c). */
void receiver_boots_forget_idle(struct receiver *r, uint64_t now);

/* An engine message (RECV_BEGIN, RECV_ABORT, CLEAR; receiver_engine.c). */
void receiver_engine_msg(struct receiver *r, const struct frame_msg *m);

/* Handles one decoded message as the loop does: from the engine socket
 * (engine != 0) or from the peer ROUTER. For the fuzz target and tests. */
void receiver_dispatch(struct receiver *r, int engine, const struct frame_msg *m);

/* One decoded message from source in->id on the peer ROUTER at now_ns,
 * as the loop takes it: past its source's token bucket
 * (receiver_limit_admit), then to its handler. */
void receiver_peer_in(struct receiver *r, const struct wire_in *in,
		      const struct frame_msg *m, uint64_t now_ns);

/* ---- receiver_limit.c: per-source limits on the peer ROUTER ---------- */

/* Empty buckets for every source (receiver_open). */
void receiver_limit_init(struct receiver *r);
/* Takes one token of the bucket of a message of `type` from source id
 * (its ROUTER identity) at now_ns: 1 when it may go on; 0 when the source
 * is over its rate, counted (RTAB_S_RATE_LIMITED) and warned about at a
 * bounded rate, nothing else changed. Types the ROUTER does not take pass
 * (their handler counts them malformed). */
int receiver_limit_admit(struct receiver *r, const uint8_t *id, size_t idlen,
			 unsigned type, uint64_t now_ns);

/* receiver_room.c: sending and room transitions. */
struct rx_peer *receiver_peer_get(struct receiver *r, const char *ep,
				  uint32_t unique, char *err, size_t errlen);
/* A message from peer p carried epoch: records it; a changed epoch is a
 * restart: the peer's rooms fail (KVW_R_PEER_RESTART), it is registered
 * again before its next XFER_INFO. Returns 1 on a restart, 0 for its
 * current epoch, -1 for a retired epoch (counted stale: drop the
 * message). */
int receiver_peer_seen(struct receiver *r, struct rx_peer *p, uint64_t epoch);
/* Takes in what other processes wrote in the peer table (kv-heartbeat): a
 * new epoch fails the peer's rooms (peer restart) and forces a new
 * REGISTER; DEAD liveness fails them (peer dead). Rooms with several
 * targets are covered here, not only those whose table peer id is p. */
void receiver_peers_sync(struct receiver *r);
/* Every target is resolved: REGISTER where needed, XFER_INFO to each,
 * Bootstrapping -> WaitingForInput. */
void receiver_room_send(struct receiver *r, struct rx_room *room);
/* Fails the room (if not terminal) with reason, then arms it (RTAB_F_ARMED,
 * a fresh token) BEFORE any ABORT leaves, then sends ABORT to every target
 * (real and dummy) that got XFER_INFO; releasable at once if none did, else
 * once every target acked (receiver.c) or at the release deadline (now +
 * the waiting timeout) with a warning. A Success room is left alone; an
 * armed one is not aborted twice. */
void receiver_room_abort(struct receiver *r, struct rx_room *room,
			 unsigned reason);
/* The one place a room becomes releasable. With sinks (tcp) the decode
 * writes its own bytes, so an armed room is released as soon as no sink
 * writes it (rtab_fence.h), whatever the prefill says or fails to say;
 * until then it waits (receiver_fence_tick). Without sinks the caller has
 * its reason (every ack, none needed, the release deadline). */
void receiver_room_release(struct receiver *r, struct rx_room *room,
			   const char *why);
/* tcp: the room's incarnation and pages granted to the sinks
 * (table/rtab_grant.h), before any XFER_INFO of it leaves: 0, or -1 (the
 * room cannot be sent). Without sinks: 0, nothing to do. */
int receiver_room_grant(struct receiver *r, struct rx_room *room);
/* The token of target i of room (its XFER_INFO carries it): derived from
 * the room's base token as the sinks check it (rtab_grant_token). */
uint64_t receiver_target_token(const struct receiver *r,
			       const struct rx_room *room, uint32_t i);
/* receiver_slice.c: what target t of room may write (its PP stage's
 * layers, the aux slot, its head slice of each K/V token slot), as the
 * prefill rank's plan (sender_peer.c) writes it; a dummy nothing. */
void receiver_target_slice(const struct receiver *r,
			   const struct rx_room *room,
			   const struct rx_target *t,
			   struct rtab_grant_target *out);
/* tcp: withdraws the room's grant (at CLEAR and when releasable): a late
 * batch of this incarnation writes nothing. Without sinks a no-op. */
void receiver_room_withdraw(struct receiver *r, struct rx_room *room);
/* Rechecks the rooms waiting for a sink (tcp); 1 while any still waits. */
int receiver_fence_tick(struct receiver *r);
void receiver_room_fail(struct receiver *r, struct rx_room *room,
			unsigned reason, const char *why);
uint32_t receiver_rand(struct receiver *r);
/* Draws the key of this receiver's tokens (receiver_open). */
void receiver_token_init(struct receiver *r);
/* A fresh non-zero token (room incarnations and abort armings): a keyed
 * hash of a counter under a key drawn per receiver (issue 14): neither
 * another incarnation's nor another room's tokens tell it, so a prefill
 * rank can echo only the tokens of the rooms it was sent. */
uint64_t receiver_token(struct receiver *r);
/* 1 when token is the token of one of this incarnation's targets (a
 * STATUS counts only with its own target's: receiver.c). */
int receiver_room_token_ok(const struct rx_room *room, uint64_t token);

/* For a transport whose registration follows the engine's epoch where
 * the engine keeps the pool on a GPU (ops->refresh; rdma: its record, one
 * stat, rdma_gpu.h), checked before each room's first message. A new
 * descriptor (rdma: new rkeys) marks every prefill peer unregistered, so
 * REGISTER goes again before the room's XFER_INFO and their workers
 * connect anew for it. 0 (also for a transport without refresh), or -1
 * when the GPU pool cannot be registered: the room fails, since nothing
 * may write a pool whose regions are gone. */
int receiver_pool_fresh(struct receiver *r);

/* Before talking to p: takes in what the peer table says of it and
 * REGISTERs in this epoch when not yet done. 0; RX_PEER_DEAD when the
 * heartbeat declared it dead and it has not answered since (nothing is
 * sent); -1 when the REGISTER could not be sent. */
#define RX_PEER_DEAD 1
int receiver_peer_ready(struct receiver *r, struct rx_peer *p);

/* receiver_drain.c: the drain point (see the file comment). */
/* Fails the room (if not terminal) with reason and starts its abort round
 * (receiver_room_abort): for failures another party reported. */
void receiver_drain_failed(struct receiver *r, struct rx_room *room,
			   unsigned reason, const char *why);
/* Prefill peer p restarted (KVW_R_PEER_RESTART) or died (KVW_R_PEER_DEAD):
 * it must register again, every room that has it as a target fails and
 * aborts; on a restart it counts as having acked every armed room. */
void receiver_drain_peer_lost(struct receiver *r, struct rx_peer *p,
			      unsigned reason);
/* Aborts every room that got XFER_INFO, is Failed in the table (by
 * kv-heartbeat, say) and is not armed yet. Called every RX_SYNC_NS. */
void receiver_drain_scan(struct receiver *r);
/* The engine aborts a room id this receiver has no private state for: an
 * incarnation failed when this receiver took the table over from its
 * previous epoch (or one it armed and died waiting for). Starts an abort
 * round to the prefill rank the table names, REGISTERing first, so the
 * room becomes releasable once that rank has drained it. */
void receiver_drain_inherited(struct receiver *r, uint64_t id);
/* An ABORT_ACK (receiver_room_ack) that releases the room when it is the
 * last one; returns what receiver_room_ack returned. */
int receiver_drain_ack(struct receiver *r, struct rx_room *room, uint32_t src,
		       uint64_t token);

/* receiver_boot.c: the bootstrap cache. */
/* Queues the room on its bootstrap's resolution; may finish at once. */
void receiver_boot_want(struct receiver *r, struct rx_room *room);
/* Whether the engine began the room only to tell its prefill ranks of an
 * abort (no page, aux slot KVW_NO_AUX: kvw_recv_begin): each gets a dummy
 * XFER_INFO. */
int receiver_room_tell_only(const struct rx_room *room);
/* Whether the room waits on its bootstrap's resolution. */
int receiver_boot_waits(const struct receiver *r, const struct rx_room *room);
/* A BOOT_REPLY arrived on bootstrap b's DEALER. */
void receiver_boot_reply(struct receiver *r, struct rx_boot *b,
			 const struct frame_msg *m);
/* Resends due lookups; returns the earliest timer (0 = none). */
uint64_t receiver_boot_tick(struct receiver *r, uint64_t now);
void *receiver_boot_sock(const struct rx_boot *b);
/* Tells the loop a message went out on sock (see wpoll.h): every send on a
 * socket of the loop's set calls it. */
void receiver_sent_on(struct receiver *r, void *sock);
void receiver_boot_free(struct rx_boot *b);
/* Drops what every bootstrap entry cached about prefill peer p (its
 * coordinates, and the topology of an entry no room waits on): the next
 * room resolves it again, at a new endpoint or with a new topology. */
void receiver_boot_forget(struct receiver *r, const struct rx_peer *p);

#endif
