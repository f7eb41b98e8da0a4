/*
 * render.c - kv-stat's output: per table a header line with the owner and
 * counters, the rooms (one line each) and the peers, as text or as one
 * JSON document. Everything is read with the table's snapshot calls, so a
 * running owner is never disturbed; a row is one consistent snapshot of
 * its room or peer.
 */
#include "render.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/types.h>

#include "fds.h"

static const char *const counter_names[] = {
	[RTAB_C_MALFORMED] = "malformed",
	[RTAB_C_INSERTED] = "inserted",
	[RTAB_C_FAILED] = "failed",
	[RTAB_C_STALE] = "stale",
	[RTAB_C_REFUSED] = "refused",
	[RTAB_C_WORKER_RESTART] = "worker_restarts",
	[RTAB_C_OWNER_RESTART] = "owner_restarts",
	[RTAB_C_BYTES] = "bytes",
};
#define NCOUNTER_NAMES (sizeof counter_names / sizeof counter_names[0])

static const char *liveness_str(unsigned l)
{
	return l == RTAB_PEER_ALIVE ? "alive"
	       : l == RTAB_PEER_DEAD ? "dead"
				     : "unknown";
}

/* Ends the counters line with rooms_reclaimed, then the security
 * counters, and a loud INSECURE when the owner runs --insecure (issue 14:
 * never a quiet state). */
static void security_line(FILE *f, const struct rtab *t)
{
	struct rtab_metrics_view m;

	rtab_metrics_get(t, &m);
	fprintf(f, " rooms_reclaimed=%llu\nsecurity:",
		(unsigned long long)m.rooms_reclaimed);
	for (unsigned c = 0; c < RTAB_NSEC; c++)
		fprintf(f, " %s=%llu", rtab_sec_str(c),
			(unsigned long long)m.sec[c]);
	if (m.key_fp)
		fprintf(f, " keys=%016llx", (unsigned long long)m.key_fp);
	fprintf(f, "%s\n", m.insecure ? " INSECURE (owner runs --insecure: "
		"no authentication on tcp://)" : "");
}

/* Adds rooms_reclaimed to "counters", closes it and adds "security",
 * "insecure" and "keys" (the owner's group keys' fingerprint, or null) to
 * the JSON. */
static void security_json(FILE *f, const struct rtab *t)
{
	struct rtab_metrics_view m;

	rtab_metrics_get(t, &m);
	fprintf(f, ",\"rooms_reclaimed\":%llu",
		(unsigned long long)m.rooms_reclaimed);
	fputs("},\"security\":{", f);
	for (unsigned c = 0; c < RTAB_NSEC; c++)
		fprintf(f, "%s\"%s\":%llu", c ? "," : "", rtab_sec_str(c),
			(unsigned long long)m.sec[c]);
	fprintf(f, "},\"insecure\":%s", m.insecure ? "true" : "false");
	if (m.key_fp)
		fprintf(f, ",\"keys\":\"%016llx\"",
			(unsigned long long)m.key_fp);
	else
		fputs(",\"keys\":null", f);
}

static int owner_alive(uint32_t pid)
{
	return pid != 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

/* Seconds from t_ns to now (monotonic); negative never. */
static double ago_s(uint64_t now, uint64_t t_ns)
{
	return t_ns && now > t_ns ? (double)(now - t_ns) / 1e9 : 0.0;
}

/* Flags as "armed,releasable,dummy" into buf ("-" when none). */
static const char *flags_str(uint32_t fl, char *buf, size_t len)
{
	snprintf(buf, len, "%s%s%s", fl & RTAB_F_ARMED ? "armed," : "",
		 fl & RTAB_F_RELEASABLE ? "releasable," : "",
		 fl & RTAB_F_DUMMY ? "dummy," : "");
	if (buf[0] == '\0')
		snprintf(buf, len, "-");
	else
		buf[strlen(buf) - 1] = '\0';
	return buf;
}

/* The next room to show: 0 and *v, or KVW_ENOENT at the end. */
static int next_room(const struct rtab *t, const struct render_opts *o,
		     uint32_t *cursor, struct rtab_view *v)
{
	if (o->have_room) {
		struct rtab_ref ref;

		if (*cursor)
			return KVW_ENOENT;
		*cursor = 1;
		if (rtab_lookup(t, o->room, &ref) < 0 ||
		    rtab_get(t, ref, v) < 0)
			return KVW_ENOENT;
		return 0;
	}
	while (rtab_next(t, cursor, v) == 0)
		if (o->all || v->state != KVW_CLEARED)
			return 0;
	return KVW_ENOENT;
}

static void peer_endpoint(const struct rtab *t, uint32_t id, char *buf,
			  size_t len)
{
	struct rtab_peer_view pv;

	if (id && rtab_peer_get(t, id, &pv) == 0)
		snprintf(buf, len, "%s", pv.endpoint);
	else
		snprintf(buf, len, "-");
}

unsigned render_text(FILE *f, const struct render_table *tb, unsigned n,
		     const struct render_opts *o)
{
	uint64_t now = rtab_now_ns();
	unsigned shown = 0;

	for (unsigned k = 0; k < n; k++) {
		const struct render_table *x = &tb[k];
		struct rtab_info in;
		unsigned long nfd, maxfd;
		struct rtab_view v;
		struct rtab_peer_view pv;
		uint32_t cur = 0;
		unsigned rows = 0;

		if (k)
			fputc('\n', f);
		if (x->t == NULL) {
			fprintf(f, "table %s %s: %s\n", x->name, x->path,
				x->error);
			continue;
		}
		rtab_info(x->t, &in);
		fprintf(f, "table %s %s owner_epoch=%016llx pid=%u (%s) "
			"capacity=%u peers=%u/%u", x->name, x->path,
			(unsigned long long)in.owner_epoch, in.owner_pid,
			owner_alive(in.owner_pid) ? "running" : "gone",
			in.capacity, in.peer_count, in.peer_capacity);
		if (fds_of(in.owner_pid, &nfd, &maxfd) == 0)
			fprintf(f, " fds=%lu/%lu", nfd, maxfd);
		fputc('\n', f);
		fprintf(f, "counters:");
		for (unsigned c = 0; c < NCOUNTER_NAMES; c++)
			fprintf(f, " %s=%llu", counter_names[c],
				(unsigned long long)in.counters[c]);
		security_line(f, x->t); /* ends the counters line too */
		while (next_room(x->t, o, &cur, &v) == 0) {
			char fl[48], ep[RTAB_ENDPOINT_MAX];

			if (rows++ == 0)
				fprintf(f, "%-20s %-15s %-16s %8s %-4s %-24s "
					"%11s %12s %3s %s\n", "ROOM", "STATE",
					"REASON", "AGE", "PEER", "ENDPOINT",
					"PAGES", "BYTES", "OUT", "FLAGS");
			peer_endpoint(x->t, v.peer, ep, sizeof ep);
			fprintf(f, "%-20llu %-15s %-16s %7.2fs %-4u %-24s "
				"%5u/%-5u %12llu %3u %s\n",
				(unsigned long long)v.room,
				kvw_state_str(v.state),
				v.reason ? kvw_reason_str(v.reason) : "-",
				ago_s(now, v.t_created_ns), v.peer, ep,
				v.pages_done, v.pages_expected,
				(unsigned long long)v.bytes, v.outstanding,
				flags_str(v.flags, fl, sizeof fl));
		}
		shown += rows;
		if (rows == 0)
			fprintf(f, "rooms: none\n");
		if (o->have_room)
			continue;
		cur = 0;
		rows = 0;
		while (rtab_peer_next(x->t, &cur, &pv) == 0) {
			char seen[32];

			if (rows++ == 0)
				fprintf(f, "%-4s %-40s %-16s %-8s %6s %s\n",
					"PEER", "ENDPOINT", "EPOCH", "LIVE",
					"MISSES", "LAST_SEEN");
			if (pv.last_seen_ns)
				snprintf(seen, sizeof seen, "%.2fs ago",
					 ago_s(now, pv.last_seen_ns));
			else
				snprintf(seen, sizeof seen, "never");
			fprintf(f, "%-4u %-40s %016llx %-8s %6u %s\n", pv.id,
				pv.endpoint, (unsigned long long)pv.epoch,
				liveness_str(pv.liveness), pv.misses, seen);
		}
		if (rows == 0)
			fprintf(f, "peers: none\n");
	}
	return shown;
}

/* A JSON string: quotes, backslashes and control bytes escaped. */
static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void json_room(FILE *f, const struct rtab *t, const struct rtab_view *v,
		      uint64_t now)
{
	char ep[RTAB_ENDPOINT_MAX];

	/* Room ids are 64-bit: a string, so no JSON reader rounds them. */
	fprintf(f, "{\"room\":\"%llu\",\"slot\":%u,\"generation\":%u,"
		"\"state\":", (unsigned long long)v->room, v->ref.slot,
		v->ref.gen);
	json_str(f, kvw_state_str(v->state));
	fprintf(f, ",\"state_code\":%u,\"reason\":", v->state);
	json_str(f, kvw_reason_str(v->reason));
	fprintf(f, ",\"reason_code\":%u,\"age_s\":%.3f,\"peer\":%u,"
		"\"peer_endpoint\":", v->reason, ago_s(now, v->t_created_ns),
		v->peer);
	peer_endpoint(t, v->peer, ep, sizeof ep);
	if (v->peer && strcmp(ep, "-") != 0)
		json_str(f, ep);
	else
		fputs("null", f);
	fprintf(f, ",\"pages_done\":%u,\"pages_expected\":%u,\"bytes\":%llu,"
		"\"outstanding\":%u,\"flags\":%u,\"armed\":%s,"
		"\"releasable\":%s,\"dummy\":%s,\"deadline_in_s\":",
		v->pages_done, v->pages_expected, (unsigned long long)v->bytes,
		v->outstanding, v->flags,
		v->flags & RTAB_F_ARMED ? "true" : "false",
		v->flags & RTAB_F_RELEASABLE ? "true" : "false",
		v->flags & RTAB_F_DUMMY ? "true" : "false");
	if (v->deadline_ns)
		fprintf(f, "%.3f", v->deadline_ns >= now
					   ? (double)(v->deadline_ns - now) / 1e9
					   : -(double)(now - v->deadline_ns) / 1e9);
	else
		fputs("null", f);
	fputc('}', f);
}

static void json_peer(FILE *f, const struct rtab_peer_view *pv, uint64_t now)
{
	fprintf(f, "{\"id\":%u,\"endpoint\":", pv->id);
	json_str(f, pv->endpoint);
	fprintf(f, ",\"epoch\":\"%016llx\",\"liveness\":\"%s\",\"misses\":%u,"
		"\"last_seen_s_ago\":", (unsigned long long)pv->epoch,
		liveness_str(pv->liveness), pv->misses);
	if (pv->last_seen_ns)
		fprintf(f, "%.3f}", ago_s(now, pv->last_seen_ns));
	else
		fputs("null}", f);
}

unsigned render_json(FILE *f, const struct render_table *tb, unsigned n,
		     const struct render_opts *o)
{
	uint64_t now = rtab_now_ns();
	unsigned shown = 0;

	fputs("{\"tables\":[", f);
	for (unsigned k = 0; k < n; k++) {
		const struct render_table *x = &tb[k];
		struct rtab_info in;
		unsigned long nfd, maxfd;
		struct rtab_view v;
		struct rtab_peer_view pv;
		uint32_t cur = 0;
		unsigned rows = 0;

		fputs(k ? ",{\"name\":" : "{\"name\":", f);
		json_str(f, x->name);
		fputs(",\"path\":", f);
		json_str(f, x->path);
		if (x->t == NULL) {
			fputs(",\"error\":", f);
			json_str(f, x->error);
			fputc('}', f);
			continue;
		}
		rtab_info(x->t, &in);
		fprintf(f, ",\"owner_epoch\":\"%016llx\",\"owner_pid\":%u,"
			"\"owner_alive\":%s,\"capacity\":%u,"
			"\"peer_capacity\":%u",
			(unsigned long long)in.owner_epoch, in.owner_pid,
			owner_alive(in.owner_pid) ? "true" : "false",
			in.capacity, in.peer_capacity);
		/* The owner's open files and soft limit (0: unlimited); null
		 * when /proc cannot tell (another host, gone). */
		if (fds_of(in.owner_pid, &nfd, &maxfd) == 0)
			fprintf(f, ",\"fds\":{\"open\":%lu,\"limit\":%lu}",
				nfd, maxfd);
		else
			fputs(",\"fds\":null", f);
		fputs(",\"counters\":{", f);
		for (unsigned c = 0; c < NCOUNTER_NAMES; c++)
			fprintf(f, "%s\"%s\":%llu", c ? "," : "",
				counter_names[c],
				(unsigned long long)in.counters[c]);
		security_json(f, x->t);
		fputs(",\"rooms\":[", f);
		while (next_room(x->t, o, &cur, &v) == 0) {
			if (rows++)
				fputc(',', f);
			json_room(f, x->t, &v, now);
		}
		shown += rows;
		fputs("],\"peers\":[", f);
		cur = 0;
		rows = 0;
		while (rtab_peer_next(x->t, &cur, &pv) == 0) {
			if (rows++)
				fputc(',', f);
			json_peer(f, &pv, now);
		}
		fputs("]}", f);
	}
	fputs("]}\n", f);
	return shown;
}
