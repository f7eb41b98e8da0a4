/*
 * sink.c - a kv-receiver sink process (sink.h): the room table says which
 * rooms may be written; everything else is xport/tcp_sink.c.
 */
#include "sink.h"

#include "malformed.h"
#include "base/kvw.h"
#include "base/log.h"
#include "base/proc.h"
#include "table/rtab.h"
#include "xport/pool.h"
#include "xport/tcp_sink.h"

struct sink_ctx {
	struct rtab *t;
};

/* Live: in the table, not terminal, and not armed for an abort (after
 * ABORT the decode waits for quiescence; no byte of the room may land). */
static int room_live(void *arg, uint64_t room)
{
	struct sink_ctx *x = arg;
	struct rtab_ref ref;
	struct rtab_view v;

	if (rtab_lookup(x->t, room, &ref) != 0 || rtab_get(x->t, ref, &v) != 0)
		return 0;
	return !rtab_terminal(v.state) && !(v.flags & RTAB_F_ARMED);
}

static void on_event(void *arg, const char *what)
{
	struct sink_ctx *x = arg;

	MALFORMED(x->t, "data port: %s", what);
}

int sink_run(const struct sink_cfg *cfg, char *err, size_t errlen)
{
	struct sink_ctx x = { 0 };
	struct pool *p = NULL;
	struct tcp_sink_stats st = { 0 };
	struct tcp_sink_cfg sc = { .listen_fd = cfg->listen_fd,
				   .secret = cfg->secret,
				   .room_live = room_live,
				   .event = on_event,
				   .arg = &x,
				   .stop = proc_stopping };
	int rc;

	rc = rtab_open(cfg->table, 1, &x.t, err, errlen);
	if (rc == 0)
		rc = pool_open(cfg->pool, 1, &p, err, errlen);
	if (rc == 0) {
		sc.base = pool_base(p);
		sc.size = pool_size(p);
		LOG(LOG_INFO, "serving the data port for pool %s", cfg->pool);
		rc = tcp_sink_run(&sc, &st, err, errlen);
		LOG(LOG_INFO, "stopping: %llu connections, %llu batches, %llu "
		    "bytes; refused %llu connections, %llu batches; %llu "
		    "checksum mismatches, %llu discarded",
		    (unsigned long long)st.conns, (unsigned long long)st.batches,
		    (unsigned long long)st.bytes, (unsigned long long)st.refused,
		    (unsigned long long)st.bad, (unsigned long long)st.checksum,
		    (unsigned long long)st.not_live);
	}
	pool_close(&p);
	rtab_close(&x.t);
	return rc;
}
