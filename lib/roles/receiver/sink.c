/*
 * sink.c - a kv-receiver sink process (sink.h): the room table says which
 * rooms may be written, the receiver's grants (table/rtab_grant.h) which
 * incarnation and which pages; everything else is xport/tcp/tcp_sink.c.
 */
#include "sink.h"

#include <stdio.h>

#include "base/kvw.h"
#include "base/log.h"
#include "base/proc.h"
#include "mem/mem.h"
#include "mem/pool.h"
#include "roles/malformed.h"
#include "table/rtab.h"
#include "table/rtab_fence.h"
#include "table/rtab_grant.h"
#include "wire/wire_auth.h"
#include "xport/tcp/tcp_proto.h"
#include "xport/tcp/tcp_sink.h"
#include "xport/xport.h"

/* Copy i of a copy list as the wire has it. */
static void copy_at(const uint8_t *copies, uint32_t i, uint64_t *off,
		    uint64_t *len)
{
	const uint8_t *p = copies + (size_t)i * TCP_COPY_LEN;

	*off = le_get(p, 8);
	*len = le_get(p + 8, 8);
}

/* Every copy inside the pages granted to the incarnation ref and inside
 * the slice of the target whose token (`incarnation`) the batch carries:
 * TCP_ROOM_OK, DEST with the first copy outside in *bad and the target in
 * *target, or NOT_LIVE when there is no grant for it, the token is no
 * target's, or the grant changed during the check. */
static int granted(const struct sink_hook *x, struct rtab_ref ref,
		   uint64_t incarnation, const uint8_t *copies,
		   uint32_t ncopies, uint32_t *bad, uint32_t *target)
{
	struct rtab_grant_read rd;
	uint64_t off, len;
	uint32_t i;

	if (rtab_grant_begin(x->g, ref, incarnation, &rd) != RTAB_GRANT_OK)
		return TCP_ROOM_NOT_LIVE;
	for (i = 0; i < ncopies; i++) {
		copy_at(copies, i, &off, &len);
		if (!rtab_grant_covers(x->g, &rd, off, len))
			break;
	}
	if (!rtab_grant_still(x->g, &rd))
		return TCP_ROOM_NOT_LIVE;
	*bad = i;
	*target = rd.target;
	return i < ncopies ? TCP_ROOM_DEST : TCP_ROOM_OK;
}

/* A batch naming a page its room was not given, or bytes of it another
 * prefill rank writes (another stage's layer, another rank's heads):
 * nobody honest sends one (a flipped bit, a swapped copy list, a forged
 * batch, a wrong plan), so it is counted as a security refusal and its
 * room fails with `integrity`. */
static void refused(struct sink_hook *x, struct rtab_ref ref, uint64_t room,
		    const uint8_t *copies, uint32_t bad, uint32_t target)
{
	uint64_t off, len;

	copy_at(copies, bad, &off, &len);
	rtab_sec_add(x->t, RTAB_S_DEST_REFUSED, 1);
	LOG_RL(LOG_WARN, "room %llu: batch refused: copy %u (%llu bytes at "
	       "%llu) of target %u lies outside what the decode granted it "
	       "(the room's pages, its layers and head slice); the room "
	       "fails (integrity)", (unsigned long long)room, bad,
	       (unsigned long long)len, (unsigned long long)off, target);
	(void)rtab_fail(x->t, ref, KVW_R_INTEGRITY);
}

/* May write: in the table, not terminal, not armed for an abort, of the
 * granted incarnation, and every copy inside the pages granted to it. The
 * room is held in the fence *before* its state is read (rtab_fence.h says
 * why that order makes "releasable" final); anything but TCP_ROOM_OK lets
 * it go again, and nothing of the batch is written. */
int sink_room_begin(void *arg, uint32_t slot, uint64_t room,
		    uint64_t incarnation, const uint8_t *copies,
		    uint32_t ncopies)
{
	struct sink_hook *x = arg;
	struct rtab_ref ref;
	struct rtab_view v;
	uint32_t bad = 0, target = 0;
	int rc = TCP_ROOM_NOT_LIVE;

	if (rtab_lookup(x->t, room, &ref) != 0 ||
	    !rtab_fence_enter(x->f, x->id, slot, ref))
		return TCP_ROOM_NOT_LIVE;
	if (rtab_get(x->t, ref, &v) == 0 && !rtab_terminal(v.state) &&
	    !(v.flags & RTAB_F_ARMED))
		rc = granted(x, ref, incarnation, copies, ncopies, &bad,
			     &target);
	if (rc == TCP_ROOM_OK) {
		if (x->delay_us) { /* TEST ONLY: widens the race (proc.h) */
			LOG_ROOM(LOG_DEBUG, room, "test delay before a batch");
			proc_test_sleep_us(x->delay_us);
		}
		return rc;
	}
	rtab_fence_leave(x->f, x->id, slot);
	if (rc == TCP_ROOM_DEST)
		refused(x, ref, room, copies, bad, target);
	return rc;
}

void sink_room_end(void *arg, uint32_t slot)
{
	struct sink_hook *x = arg;

	rtab_fence_leave(x->f, x->id, slot);
}

static void on_event(void *arg, const char *what)
{
	struct sink_hook *x = arg;

	MALFORMED(x->t, "data port: %s", what);
}

/* A late batch of an incarnation that ended here (aborted, failed,
 * cleared): read and discarded, nothing written. Normal after an abort,
 * so counted as stale like any late message, not as malformed. */
static void on_stale(void *arg, uint64_t room)
{
	struct sink_hook *x = arg;

	rtab_counter_add(x->t, RTAB_C_STALE, 1);
	LOG_ROOM(LOG_DEBUG, room, "data port: batch of an incarnation that is "
		 "not live here discarded (nothing written)");
}

static void on_auth_failed(void *arg)
{
	struct sink_hook *x = arg;

	rtab_sec_add(x->t, RTAB_S_AUTH_FAILED, 1);
}

static void on_integrity_failed(void *arg)
{
	struct sink_hook *x = arg;

	rtab_sec_add(x->t, RTAB_S_INTEGRITY_FAILED, 1);
}

int sink_fence_path(const char *table, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%s.fence", table);

	return n < 0 || (size_t)n >= len ? KVW_EINVAL : 0;
}

int sink_grant_path(const char *table, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%s.grant", table);

	return n < 0 || (size_t)n >= len ? KVW_EINVAL : 0;
}

int sink_run(const struct sink_cfg *cfg, char *err, size_t errlen)
{
	struct sink_hook x = { .id = cfg->id,
			       .delay_us = proc_test_delay_us("KVW_TEST_SINK_DELAY_US") };
	uint8_t group[KEYS_DATA];
	struct pool *p = NULL;
	struct tcp_sink_stats st = { 0 };
	struct tcp_sink_cfg sc = { .listen_fd = cfg->listen_fd,
				   .secret = cfg->secret,
				   .group_key = wire_auth_data_key(group) ? group
									 : NULL,
				   .max_conns = SINK_MAX_CONNS,
				   .room_begin = sink_room_begin,
				   .room_end = sink_room_end,
				   .event = on_event,
				   .stale = on_stale,
				   .auth_failed = on_auth_failed,
				   .integrity_failed = on_integrity_failed,
				   .require_encrypt = xport_encrypt_env(),
				   .arg = &x,
				   .stop = proc_stopping };
	char fence[4096], grant[4096];
	int rc;

	if (sink_fence_path(cfg->table, fence, sizeof fence) != 0 ||
	    sink_grant_path(cfg->table, grant, sizeof grant) != 0)
		return kvw_errf(err, errlen, KVW_EINVAL, "table path too long");
	rc = rtab_open(cfg->table, 1, &x.t, err, errlen);
	if (rc == 0)
		rc = rtab_fence_open(fence, &x.f, err, errlen);
	if (rc == 0)
		rc = rtab_grant_open(grant, &x.g, err, errlen);
	if (rc == 0 && rtab_grant_slots(x.g) != rtab_capacity(x.t))
		rc = kvw_errf(err, errlen, KVW_EVERSION, "grant file has %u "
			      "slots, the table %u", rtab_grant_slots(x.g),
			      rtab_capacity(x.t));
	if (rc == 0 && x.id >= rtab_fence_sinks(x.f))
		rc = kvw_errf(err, errlen, KVW_EINVAL, "sink %u: the fence has "
			      "%u rows", x.id, rtab_fence_sinks(x.f));
	if (rc == 0 && rtab_fence_slots(x.f) < SINK_MAX_CONNS)
		rc = kvw_errf(err, errlen, KVW_EINVAL, "fence has %u slots per "
			      "sink, fewer than %u", rtab_fence_slots(x.f),
			      SINK_MAX_CONNS);
	if (rc == 0)
		rc = pool_open(cfg->pool, 1, &p, err, errlen);
	/* A decode engine may keep its KV on a GPU (a record beside the
	 * pool): then batches land in the host pool and go on to the GPU. */
	if (rc == 0)
		rc = mem_region_open(&sc.mem, cfg->pool, pool_size(p),
				     MEM_STAGE, err, errlen);
	if (rc == 0) {
		sc.base = pool_base(p);
		sc.pool = p;
		sc.size = pool_size(p);
		LOG(LOG_INFO, "serving the data port for pool %s", cfg->pool);
		rc = tcp_sink_run(&sc, &st, err, errlen);
		LOG(LOG_INFO, "stopping: %llu connections, %llu batches, %llu "
		    "bytes; refused %llu connections, %llu batches; %llu "
		    "integrity failures, %llu outside the room's pages, %llu "
		    "discarded, %llu not copied to the GPU",
		    (unsigned long long)st.conns, (unsigned long long)st.batches,
		    (unsigned long long)st.bytes, (unsigned long long)st.refused,
		    (unsigned long long)st.bad, (unsigned long long)st.integrity,
		    (unsigned long long)st.dest, (unsigned long long)st.not_live,
		    (unsigned long long)st.device);
	}
	mem_region_close(&sc.mem);
	pool_close(&p);
	rtab_grant_close(&x.g);
	rtab_fence_close(&x.f);
	rtab_close(&x.t);
	return rc;
}
