/*
 * api.c - the engine-facing API (see api.h): engine commands become frames
 * on a DEALER to the control process's engine socket, and room progress is
 * read straight from the control process's mapped room table.
 */
#include "api.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "base/proc.h"
#include "mem/gpool.h"
#include "mem/pool.h"
#include "table/rtab.h"
#include "table/rtab_grant.h"
#include "wire/frame.h"
#include "wire/wire.h"

#include "api_engine.h"

/* Every engine handle of a process shares one ZMQ context, so one I/O
 * thread carries all their commands: a process driving both a prefill and
 * a decode rank (or several ranks) wakes one thread per batch of sends,
 * not one per handle. The last close terminates it. */
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static void *ctx_shared;
static unsigned ctx_users;

static void *ctx_get(void)
{
	void *c;

	pthread_mutex_lock(&ctx_lock);
	if (ctx_shared == NULL)
		ctx_shared = zmq_ctx_new();
	c = ctx_shared;
	if (c)
		ctx_users++;
	pthread_mutex_unlock(&ctx_lock);
	return c;
}

static void ctx_put(void)
{
	void *c = NULL;

	pthread_mutex_lock(&ctx_lock);
	if (ctx_users && --ctx_users == 0) {
		c = ctx_shared;
		ctx_shared = NULL;
	}
	pthread_mutex_unlock(&ctx_lock);
	if (c)
		zmq_ctx_term(c); /* every socket of it is closed by now */
}

_Static_assert(KVW_ROOM_F_ARMED == RTAB_F_ARMED, "flag bits match rtab");
_Static_assert(KVW_ROOM_F_RELEASABLE == RTAB_F_RELEASABLE, "flag bits");
_Static_assert(!(KVW_ROOM_F_SENDING & (RTAB_F_ARMED | RTAB_F_RELEASABLE |
				       RTAB_F_DUMMY | RTAB_F_INFO |
				       RTAB_F_BEGUN)),
	       "KVW_ROOM_F_SENDING is kvw_poll's, not a table bit");
_Static_assert(KVW_ROOM_F_DUMMY == RTAB_F_DUMMY, "flag bits match rtab");
_Static_assert(KVW_NO_AUX == RTAB_GRANT_NO_AUX, "a tell-only room's slot");

int kvw_engine_open(const char *engine_endpoint, const char *table_path,
		    const char *pool_path, struct kvw_engine **out, char *err,
		    size_t errlen)
{
	struct kvw_engine *e;
	char dummy[8];
	void *ctx;
	int rc;

	if (err == NULL) {
		err = dummy;
		errlen = sizeof dummy;
	}
	if (out == NULL)
		return KVW_EINVAL;
	*out = NULL;
	if (engine_endpoint == NULL || *engine_endpoint == '\0' ||
	    table_path == NULL || pool_path == NULL) {
		return kvw_errf(err, errlen, KVW_EINVAL,
				"engine endpoint, table and pool are "
				"required");
	}
	e = calloc(1, sizeof *e);
	if (e == NULL)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	e->epoch = proc_epoch();
	e->inc = calloc(1, sizeof *e->inc);
	if (e->inc == NULL || api_inc_init(e->inc) != 0) {
		rc = kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
		goto fail;
	}
	e->table_path = strdup(table_path);
	if (e->table_path == NULL) {
		rc = kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
		goto fail;
	}
	rc = rtab_open(table_path, 0, &e->tab, err, errlen);
	if (rc < 0)
		goto fail;

	rc = pool_open(pool_path, 1, &e->pool, err, errlen);
	if (rc < 0)
		goto fail;
	/* What a dead engine of this pool registered is no one's now. */
	api_mem_sweep(e);
	ctx = ctx_get();
	if (ctx == NULL) {
		kvw_seterr(err, errlen, "zmq_ctx_new: %s", zmq_strerror(errno));
		rc = KVW_ESYS;
		goto fail;
	}
	e->sock = wire_socket(ctx, ZMQ_DEALER, 0, err, errlen);
	if (e->sock == NULL) {
		ctx_put();
		rc = KVW_ESYS;
		goto fail;
	}
	/* An engine holds no keys: its control process is local (ipc); a
	 * tcp:// engine endpoint is refused (fail-closed). */
	rc = wire_connect(e->sock, engine_endpoint, err, errlen);
	if (rc)
		goto fail;
	*out = e;
	return 0;
fail:
	kvw_engine_close(&e);
	return rc;
}

void kvw_engine_close(struct kvw_engine **ep)
{
	struct kvw_engine *e;

	if (ep == NULL || *ep == NULL)
		return;
	e = *ep;
	if (e->sock) {
		/* What is held goes now, as far as the queue takes it. */
		(void)api_hold_send(&e->hold, e->sock, e->err, sizeof e->err);
		wire_close(&e->sock);
		ctx_put(); /* this handle held the context with its socket */
	}
	rtab_close(&e->tab);
	/* The engine's host allocations and its record go with it. */
	api_mem_close(e);
	/* The engine's device memory goes with it: copiers see the record
	 * gone and close their handles. */
	if (e->gpu_registered) {
		char rec[POOL_PATH_MAX + 1];

		if (gpool_path_for(pool_path(e->pool), rec, sizeof rec) == 0)
			unlink(rec);
	}
	pool_close(&e->pool);
	if (e->inc)
		api_inc_fini(e->inc);
	free(e->inc);
	api_hold_free(&e->hold);
	free(e->table_path);
	free(e);
	*ep = NULL;
}

int kvw_control_check(const struct kvw_engine *e)
{
	struct rtab_info info;

	if (!rtab_is_at(e->tab, e->table_path))
		return KVW_ENOENT;
	rtab_info(e->tab, &info);
	/* EPERM: a process of another user holds the pid, so it runs. */
	if (info.owner_pid == 0 ||
	    (kill((pid_t)info.owner_pid, 0) != 0 && errno == ESRCH))
		return KVW_EAGAIN;
	return 0;
}

void *kvw_pool_base(const struct kvw_engine *e)
{
	return pool_base(e->pool);
}

uint64_t kvw_pool_size(const struct kvw_engine *e)
{
	return pool_size(e->pool);
}

int kvw_register_gpu_pool(struct kvw_engine *e, int device,
			  const uint64_t *ptrs, const uint64_t *lens,
			  const uint32_t *item_lens, uint32_t n, char *err,
			  size_t errlen)
{
	char rec[POOL_PATH_MAX + 1], dummy[8];
	int rc;

	if (err == NULL) {
		err = dummy;
		errlen = sizeof dummy;
	}
	if (e == NULL)
		return kvw_errf(err, errlen, KVW_EINVAL, "no engine");
	if (gpool_path_for(pool_path(e->pool), rec, sizeof rec) != 0)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"pool %s has no GPU record path",
				pool_path(e->pool));
	rc = gpool_export(rec, device, ptrs, lens, item_lens, n,
			  pool_size(e->pool), e->epoch, err, errlen);
	if (rc == 0) {
		e->gpu_registered = 1;
		/* Device memory replaces host memory: one registration. */
		if (e->host_registered)
			(void)kvw_unregister_host(e);
	}
	return rc;
}

const char *kvw_engine_error(const struct kvw_engine *e)
{
	return e->err;
}

/* Holds m behind the held commands (kvw_engine_hold); a full hold is
 * sent first. Without the hold (commands a flush could not send are
 * still queued) m goes after them: as far as the queue takes them now,
 * the rest with the next command or flush. */
static int hold_msg(struct kvw_engine *e, const struct frame_msg *m)
{
	int rc = 0;

	if (api_hold_bytes(&e->hold) >= API_HOLD_MAX)
		rc = api_hold_send(&e->hold, e->sock, e->err, sizeof e->err);
	if (rc == 0)
		rc = api_hold_put(&e->hold, m, e->err, sizeof e->err);
	if (rc == 0 && !e->hold.on)
		(void)api_hold_send(&e->hold, e->sock, e->err, sizeof e->err);
	return rc;
}

/* Sends (or holds) m; records the error text (or clears it). */
static int send_msg(struct kvw_engine *e, const struct frame_msg *m)
{
	int rc;

	e->err[0] = '\0';
	rc = e->hold.on || e->hold.n > 0
		     ? hold_msg(e, m)
		     : wire_send(e->sock, m, NULL, 0, e->err, sizeof e->err);
	if (rc == 0)
		e->err[0] = '\0';
	return rc;
}

int kvw_engine_hold(struct kvw_engine *e, int on)
{
	int rc = 0;

	if (!e)
		return KVW_EINVAL;
	e->err[0] = '\0';
	e->hold.on = on ? 1 : 0;
	if (!on)
		rc = kvw_engine_flush(e);
	return rc;
}

int kvw_engine_flush(struct kvw_engine *e)
{
	if (!e)
		return KVW_EINVAL;
	e->err[0] = '\0';
	return api_hold_send(&e->hold, e->sock, e->err, sizeof e->err);
}

uint32_t kvw_engine_held(const struct kvw_engine *e)
{
	return e ? e->hold.n : 0;
}

/* An api_inc error: nothing was queued. */
static int noted(struct kvw_engine *e, int rc)
{
	snprintf(e->err, sizeof e->err, "%s: nothing queued",
		 rc == KVW_EAGAIN ? "room table busy" : "out of memory");
	return rc;
}

/* Sends a BEGIN of m's room after recording the incarnation it replaces
 * (api_inc.h), so kvw_poll never shows that one as this room. */
static int send_begin(struct kvw_engine *e, const struct frame_msg *m)
{
	int rc = api_inc_begin(e->inc, e->tab, m->hdr.room);

	if (rc < 0)
		return noted(e, rc);
	return send_msg(e, m);
}

static int bad(struct kvw_engine *e, const char *what)
{
	snprintf(e->err, sizeof e->err, "%s", what);
	return KVW_EINVAL;
}

int kvw_send_begin(struct kvw_engine *e, uint64_t room, uint32_t num_pages,
		   uint32_t aux_slot)
{
	struct frame_msg m;

	frame_msg_init(&m, FRAME_SEND_BEGIN, 0, room, e->epoch);
	m.u.send_begin.num_pages = num_pages;
	m.u.send_begin.aux_slot = aux_slot;
	return send_begin(e, &m);
}

int kvw_send_chunk(struct kvw_engine *e, uint64_t room, const uint32_t *pages,
		   uint32_t n, int is_last)
{
	struct frame_msg m;

	if (n > KVW_MAX_PAGES)
		return bad(e, "SEND_CHUNK: more than KVW_MAX_PAGES pages");
	if (n > 0 && pages == NULL)
		return bad(e, "SEND_CHUNK: pages is NULL");
	if (n == 0 && !is_last)
		return bad(e, "SEND_CHUNK: empty chunk that is not the last");
	frame_msg_init(&m, FRAME_SEND_CHUNK, 0, room, e->epoch);
	m.u.send_chunk.is_last = is_last ? 1 : 0;
	m.u.send_chunk.pages = frame_u32s_of(pages, n);
	return send_msg(e, &m);
}

/* Packs state[0..nstate) into a new buffer (*out, *len; NULL and 0 for
 * none): 0, or KVW_EINVAL / KVW_ENOMEM with e's error set. */
static int state_pack(struct kvw_engine *e, const char *what,
		      const struct kvw_state_rows *state, uint32_t nstate,
		      uint8_t **out, size_t *len)
{
	const uint32_t *lists[KVW_MAX_STATE];
	uint32_t n[KVW_MAX_STATE];
	size_t need = 0;

	*out = NULL;
	*len = 0;
	if (nstate == 0)
		return 0;
	if (state == NULL || nstate > KVW_MAX_STATE) {
		snprintf(e->err, sizeof e->err, "%s: %u state lists (at most "
			 "%u; state not NULL)", what, nstate, KVW_MAX_STATE);
		return KVW_EINVAL;
	}
	for (uint32_t i = 0; i < nstate; i++) {
		if (state[i].n > KVW_MAX_STATE_IDX ||
		    (state[i].n && state[i].rows == NULL)) {
			snprintf(e->err, sizeof e->err, "%s: state list %u of "
				 "%u rows (at most %u; rows not NULL)", what,
				 i, state[i].n, KVW_MAX_STATE_IDX);
			return KVW_EINVAL;
		}
		lists[i] = state[i].rows;
		n[i] = state[i].n;
		need += 4 + 4 * (size_t)state[i].n;
	}
	*out = malloc(need);
	if (*out == NULL) {
		snprintf(e->err, sizeof e->err, "%s: out of memory", what);
		return KVW_ENOMEM;
	}
	*len = frame_state_pack(*out, need, nstate, n, lists);
	return 0;
}

int kvw_send_last_state(struct kvw_engine *e, uint64_t room,
			const uint32_t *pages, uint32_t n,
			const struct kvw_state_rows *state, uint32_t nstate)
{
	struct frame_msg m;
	uint8_t *part;
	size_t len;
	int rc;

	if (n > KVW_MAX_PAGES)
		return bad(e, "SEND_CHUNK: more than KVW_MAX_PAGES pages");
	if (n > 0 && pages == NULL)
		return bad(e, "SEND_CHUNK: pages is NULL");
	rc = state_pack(e, "SEND_CHUNK", state, nstate, &part, &len);
	if (rc < 0)
		return rc;
	frame_msg_init(&m, FRAME_SEND_CHUNK, 0, room, e->epoch);
	m.u.send_chunk.is_last = 1;
	m.u.send_chunk.pages = frame_u32s_of(pages, n);
	m.u.send_chunk.state = (struct frame_bytes){ part, (uint32_t)len };
	rc = send_msg(e, &m);
	free(part);
	return rc;
}

int kvw_recv_begin(struct kvw_engine *e, uint64_t room,
		   const char *bootstrap_ep, uint32_t prefill_dp_rank,
		   const uint32_t *pages, uint32_t n, uint32_t aux_slot,
		   uint32_t prefix_tokens)
{
	return kvw_recv_begin_state(e, room, bootstrap_ep, prefill_dp_rank,
				    pages, n, aux_slot, prefix_tokens, NULL,
				    0);
}

int kvw_recv_begin_state(struct kvw_engine *e, uint64_t room,
			 const char *bootstrap_ep, uint32_t prefill_dp_rank,
			 const uint32_t *pages, uint32_t n, uint32_t aux_slot,
			 uint32_t prefix_tokens,
			 const struct kvw_state_rows *state, uint32_t nstate)
{
	struct frame_msg m;
	uint8_t *part;
	size_t len;
	int rc;

	if (bootstrap_ep == NULL || *bootstrap_ep == '\0')
		return bad(e, "RECV_BEGIN: bootstrap address missing");
	len = strlen(bootstrap_ep);
	if (len > KVW_MAX_STR)
		return bad(e, "RECV_BEGIN: bootstrap address too long");
	if (n > KVW_MAX_PAGES)
		return bad(e, "RECV_BEGIN: more than KVW_MAX_PAGES pages");
	if (n > 0 && pages == NULL)
		return bad(e, "RECV_BEGIN: pages is NULL");
	frame_msg_init(&m, FRAME_RECV_BEGIN, 0, room, e->epoch);
	memcpy(m.u.recv_begin.bootstrap, bootstrap_ep, len + 1);
	m.u.recv_begin.aux_slot = aux_slot;
	m.u.recv_begin.prefill_dp_rank = prefill_dp_rank;
	m.u.recv_begin.prefix_tokens = prefix_tokens;
	m.u.recv_begin.pages = frame_u32s_of(pages, n);
	rc = state_pack(e, "RECV_BEGIN", state, nstate, &part, &len);
	if (rc < 0)
		return rc;
	m.u.recv_begin.state = (struct frame_bytes){ part, (uint32_t)len };
	rc = send_begin(e, &m);
	free(part);
	return rc;
}

int kvw_abort(struct kvw_engine *e, uint64_t room)
{
	struct frame_msg m;

	frame_msg_init(&m, FRAME_RECV_ABORT, 0, room, e->epoch);
	return send_msg(e, &m);
}

int kvw_clear(struct kvw_engine *e, uint64_t room)
{
	struct frame_msg m;
	int rc;

	/* Recorded first: the incarnation cleared is whatever the table
	 * shows before the control takes the CLEAR. */
	rc = api_inc_clear(e->inc, e->tab, room);
	if (rc < 0)
		return noted(e, rc);
	frame_msg_init(&m, FRAME_CLEAR, 0, room, e->epoch);
	return send_msg(e, &m);
}

/* The public struct's size is what the Python binding mirrors
 * (python/kvwire/_lib.py RoomStatus): a field added is added there too. */
_Static_assert(sizeof(struct kvw_room_status) == 40,
	       "struct kvw_room_status as python/kvwire mirrors it");

/* Reads the room's incarnation that kvw_poll reports into *v and, when
 * times is not NULL, its state entry times: 0, KVW_ENOENT (not in the
 * table, or an older incarnation this engine's BEGIN hides), KVW_EAGAIN
 * (the slot kept changing) or another rtab error. The slot can be reused
 * between lookup and get (CLEAR + a new incarnation), or between get and
 * the times: the read that notices (ESTALE) starts over. */
static int incarnation(const struct kvw_engine *e, uint64_t room,
		       struct rtab_view *v, uint64_t times[KVW_NSTATES])
{
	struct rtab_ref ref;
	int rc;

	for (int tries = 0; tries < 4; tries++) {
		rc = rtab_lookup(e->tab, room, &ref);
		if (rc < 0)
			return rc;
		rc = rtab_get(e->tab, ref, v);
		if (rc == KVW_ESTALE)
			continue;
		if (rc < 0)
			return rc;
		if (api_inc_hidden(e->inc, v))
			return KVW_ENOENT; /* an older incarnation: ours is
					    * not in the table yet */
		if (times == NULL)
			return 0;
		rc = rtab_times(e->tab, ref, times);
		if (rc != KVW_ESTALE)
			return rc;
	}
	return KVW_EAGAIN;
}

int kvw_poll(const struct kvw_engine *e, uint64_t room,
	     struct kvw_room_status *st)
{
	struct rtab_view v;
	int rc = incarnation(e, room, &v, NULL);

	if (rc < 0)
		return rc;
	st->state = v.state;
	st->reason = v.reason;
	st->generation = v.ref.gen;
	st->pages_expected = v.pages_expected;
	st->pages_done = v.pages_done;
	st->prefix_tokens = v.prefix_tokens;
	st->flags = v.flags | (v.outstanding ? KVW_ROOM_F_SENDING : 0);
	st->bytes = v.bytes;
	return 0;
}

int kvw_room_times(const struct kvw_engine *e, uint64_t room,
		   uint64_t enter_ns[KVW_NSTATES])
{
	struct rtab_view v;
	uint64_t t[KVW_NSTATES];
	int rc;

	if (e == NULL || enter_ns == NULL)
		return KVW_EINVAL;
	rc = incarnation(e, room, &v, t);
	if (rc < 0)
		return rc;
	memcpy(enter_ns, t, sizeof t); /* *enter_ns unchanged on error */
	return 0;
}

/* How often poll_many reads a slot that stays mid-rewrite before it
 * reports KVW_EAGAIN for that room: a rewrite is a few stores, so a
 * slot still busy after this many reads belongs to a stopped owner. */
#define POLL_MANY_TRIES 64

int kvw_poll_many(const struct kvw_engine *e, const uint64_t *rooms,
		  uint32_t n, struct kvw_room_status *st, int32_t *rcs)
{
	int got = 0;

	if (e == NULL || n > INT32_MAX ||
	    (n > 0 && (rooms == NULL || st == NULL || rcs == NULL)))
		return KVW_EINVAL; /* the count must fit the int it returns */
	for (uint32_t i = 0; i < n; i++) {
		int rc = KVW_EAGAIN;

		for (int t = 0; t < POLL_MANY_TRIES && rc == KVW_EAGAIN; t++)
			rc = kvw_poll(e, rooms[i], &st[i]);
		rcs[i] = rc;
		got += rc == 0;
	}
	return got;
}

uint64_t kvw_control_epoch(const struct kvw_engine *e)
{
	return rtab_owner_epoch(e->tab);
}
