/*
 * sink.c - a kv-receiver sink process (sink.h): the room table says which
 * rooms may be written; everything else is xport/tcp_sink.c.
 */
#include "sink.h"

#include <stdio.h>

#include "malformed.h"
#include "base/kvw.h"
#include "base/log.h"
#include "base/proc.h"
#include "table/rtab.h"
#include "table/rtab_fence.h"
#include "wire/wire_auth.h"
#include "xport/cuda_stage.h"
#include "xport/pool.h"
#include "xport/tcp_sink.h"

struct sink_ctx {
	struct rtab *t;
	struct rtab_fence *f;
	uint32_t id;
	uint64_t delay_us; /* TEST ONLY: KVW_TEST_SINK_DELAY_US (proc.h) */
};

/* May write: in the table, not terminal, and not armed for an abort. The
 * room is held in the fence *before* its state is read (rtab_fence.h says
 * why that order makes "releasable" final); a no lets it go again. */
static int room_begin(void *arg, uint32_t slot, uint64_t room)
{
	struct sink_ctx *x = arg;
	struct rtab_ref ref;
	struct rtab_view v;

	if (rtab_lookup(x->t, room, &ref) != 0 ||
	    !rtab_fence_enter(x->f, x->id, slot, ref))
		return 0;
	if (rtab_get(x->t, ref, &v) == 0 && !rtab_terminal(v.state) &&
	    !(v.flags & RTAB_F_ARMED)) {
		if (x->delay_us) { /* TEST ONLY: widens the race (proc.h) */
			LOG_ROOM(LOG_DEBUG, room, "test delay before a batch");
			proc_test_sleep_us(x->delay_us);
		}
		return 1;
	}
	rtab_fence_leave(x->f, x->id, slot);
	return 0;
}

static void room_end(void *arg, uint32_t slot)
{
	struct sink_ctx *x = arg;

	rtab_fence_leave(x->f, x->id, slot);
}

static void on_event(void *arg, const char *what)
{
	struct sink_ctx *x = arg;

	MALFORMED(x->t, "data port: %s", what);
}

static void on_auth_failed(void *arg)
{
	struct sink_ctx *x = arg;

	rtab_sec_add(x->t, RTAB_S_AUTH_FAILED, 1);
}

int sink_fence_path(const char *table, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%s.fence", table);

	return n < 0 || (size_t)n >= len ? KVW_EINVAL : 0;
}

int sink_run(const struct sink_cfg *cfg, char *err, size_t errlen)
{
	struct sink_ctx x = { .id = cfg->id,
			      .delay_us = proc_test_delay_us("KVW_TEST_SINK_DELAY_US") };
	uint8_t group[KEYS_DATA];
	struct pool *p = NULL;
	struct tcp_sink_stats st = { 0 };
	struct tcp_sink_cfg sc = { .listen_fd = cfg->listen_fd,
				   .secret = cfg->secret,
				   .group_key = wire_auth_data_key(group) ? group
									 : NULL,
				   .max_conns = SINK_MAX_CONNS,
				   .room_begin = room_begin,
				   .room_end = room_end,
				   .event = on_event,
				   .auth_failed = on_auth_failed,
				   .arg = &x,
				   .stop = proc_stopping };
	char fence[4096];
	int rc;

	if (sink_fence_path(cfg->table, fence, sizeof fence) != 0)
		return kvw_errf(err, errlen, KVW_EINVAL, "table path too long");
	rc = rtab_open(cfg->table, 1, &x.t, err, errlen);
	if (rc == 0)
		rc = rtab_fence_open(fence, &x.f, err, errlen);
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
		rc = cstage_open(&sc.stage, cfg->pool, pool_size(p), err,
				 errlen);
	if (rc == 0) {
		sc.base = pool_base(p);
		sc.size = pool_size(p);
		LOG(LOG_INFO, "serving the data port for pool %s", cfg->pool);
		rc = tcp_sink_run(&sc, &st, err, errlen);
		LOG(LOG_INFO, "stopping: %llu connections, %llu batches, %llu "
		    "bytes; refused %llu connections, %llu batches; %llu "
		    "checksum mismatches, %llu discarded, %llu not copied to "
		    "the GPU",
		    (unsigned long long)st.conns, (unsigned long long)st.batches,
		    (unsigned long long)st.bytes, (unsigned long long)st.refused,
		    (unsigned long long)st.bad, (unsigned long long)st.checksum,
		    (unsigned long long)st.not_live,
		    (unsigned long long)st.device);
	}
	cstage_close(&sc.stage);
	pool_close(&p);
	rtab_fence_close(&x.f);
	rtab_close(&x.t);
	return rc;
}
