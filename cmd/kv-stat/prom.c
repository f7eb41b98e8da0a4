/*
 * prom.c - the Prometheus text format of kvwire's measures (see prom.h).
 * Names follow SGLang's and vLLM's KV-transfer metrics under a kvwire_
 * prefix, in base units (seconds, bytes): kvwire_transfer_latency_seconds
 * (sglang:kv_transfer_latency_ms, nixl_xfer_time_seconds),
 * kvwire_transferred_bytes_total (nixl_bytes_transferred),
 * kvwire_failed_rooms_total{reason} (num_transfer_failed_reqs_total,
 * nixl_num_failed_transfers), plus bootstrap latency, abort drain time,
 * rooms by state, peers by liveness and frame counters.
 */
#include "prom.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

static const char *const state_lbl[KVW_NSTATES] = {
	[KVW_FAILED] = "failed",
	[KVW_BOOTSTRAPPING] = "bootstrapping",
	[KVW_WAITING] = "waiting",
	[KVW_TRANSFERRING] = "transferring",
	[KVW_SUCCESS] = "success",
	[KVW_CLEARED] = "cleared",
};

static const char *const reason_lbl[] = {
	"none", "aborted", "timeout", "peer_dead", "peer_restart", "transfer",
	"bad_index", "layout", "worker_died", "owner_restart", "bootstrap",
	"cleared", "pages", "integrity", "refused",
};
_Static_assert(sizeof reason_lbl / sizeof reason_lbl[0] == KVW_NREASONS,
	       "a label per reason");

static const char *const live_lbl[] = { "unknown", "alive", "dead" };

static const char *const sec_lbl[RTAB_NSEC] = {
	"unauthorised", "rate_limited", "auth_failed", "reclaimed",
	"integrity_failed", "redials", "resent", "dest_refused",
};

/* Plain counters of the header: name, help, counter index. */
static const struct {
	const char *name;
	const char *help;
	unsigned which;
} counters[] = {
	{ "kvwire_transferred_bytes_total",
	  "Bytes moved for rooms (counted where they are copied: prefill).",
	  RTAB_C_BYTES },
	{ "kvwire_rooms_inserted_total", "Room incarnations created.",
	  RTAB_C_INSERTED },
	{ "kvwire_malformed_frames_total", "Malformed frames dropped.",
	  RTAB_C_MALFORMED },
	{ "kvwire_stale_messages_total",
	  "Messages dropped for a room incarnation that is gone.",
	  RTAB_C_STALE },
	{ "kvwire_refused_messages_total",
	  "Messages refused in their room's state.", RTAB_C_REFUSED },
	{ "kvwire_worker_restarts_total", "Workers started again after dying.",
	  RTAB_C_WORKER_RESTART },
	{ "kvwire_owner_restarts_total",
	  "Control processes that reopened this table after a restart.",
	  RTAB_C_OWNER_RESTART },
};

static const struct {
	const char *name;
	const char *help;
} hists[RTAB_NHISTS] = {
	[RTAB_H_TRANSFER] = { "kvwire_transfer_latency_seconds",
			      "Waiting (XFER_INFO) to Success, per room." },
	[RTAB_H_BOOTSTRAP] = { "kvwire_bootstrap_latency_seconds",
			       "Room creation to Waiting, per room." },
	[RTAB_H_ABORT_DRAIN] = { "kvwire_abort_drain_seconds",
				 "Abort armed to pages releasable, per room." },
};

/* Per table, read once so every family shows the same instant. */
struct snap {
	char lbl[2 * 320];        /* the table's name as a label value */
	struct rtab_info info;
	struct rtab_metrics_view m;
	uint64_t rooms[KVW_NSTATES];
	uint64_t peers[3];
};

static void take(const struct rtab *t, struct snap *s)
{
	struct rtab_view v;
	struct rtab_peer_view pv;
	uint32_t c = 0;

	rtab_info(t, &s->info);
	rtab_metrics_get(t, &s->m);
	while (rtab_next(t, &c, &v) == 0)
		if (v.state < KVW_NSTATES)
			s->rooms[v.state]++;
	c = 0;
	while (rtab_peer_next(t, &c, &pv) == 0)
		s->peers[pv.liveness < 3 ? pv.liveness : 0]++;
}

/* name escaped for a label value (backslash, quote, newline), cut short
 * rather than overflow. */
static void label(char *out, size_t len, const char *name)
{
	size_t o = 0;

	for (; *name && o + 3 < len; name++) {
		if (*name == '\\' || *name == '"') {
			out[o++] = '\\';
			out[o++] = *name;
		} else if (*name == '\n') {
			out[o++] = '\\';
			out[o++] = 'n';
		} else {
			out[o++] = *name;
		}
	}
	out[o] = '\0';
}

static void family(FILE *f, const char *name, const char *type,
		   const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One table's samples of a family with one more label: key=lbl[k] for k
 * in [from, to). */
static void labelled(FILE *f, const char *name, const char *table,
		     const char *key, const char *const *lbl, const uint64_t *v,
		     unsigned from, unsigned to)
{
	for (unsigned k = from; k < to; k++)
		fprintf(f, "%s{table=\"%s\",%s=\"%s\"} %llu\n", name, table,
			key, lbl[k], (unsigned long long)v[k]);
}

static void hist(FILE *f, const char *name, const char *table,
		 const struct rtab_hist_view *h)
{
	uint64_t cum = 0;

	for (unsigned i = 0; i < RTAB_HIST_BUCKETS; i++) {
		cum += h->bucket[i];
		if (i < RTAB_HIST_BOUNDS)
			fprintf(f, "%s_bucket{table=\"%s\",le=\"%g\"} %llu\n",
				name, table, (double)rtab_hist_bound_ns(i) / 1e9,
				(unsigned long long)cum);
		else
			fprintf(f, "%s_bucket{table=\"%s\",le=\"+Inf\"} %llu\n",
				name, table, (unsigned long long)cum);
	}
	fprintf(f, "%s_sum{table=\"%s\"} %.9f\n%s_count{table=\"%s\"} %llu\n",
		name, table, (double)h->sum_ns / 1e9, name, table,
		(unsigned long long)cum);
}

static int owner_alive(uint32_t pid)
{
	return pid != 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

int prom_write(FILE *f, const struct render_table *tb, unsigned n)
{
	struct snap *s = calloc(n ? n : 1, sizeof *s);

	if (!s)
		return -1;
	for (unsigned i = 0; i < n; i++) {
		if (tb[i].t)
			take(tb[i].t, &s[i]);
		label(s[i].lbl, sizeof s[i].lbl, tb[i].name);
	}
	family(f, "kvwire_table_up", "gauge",
	       "1 when the room table could be read.");
	for (unsigned i = 0; i < n; i++)
		fprintf(f, "kvwire_table_up{table=\"%s\"} %d\n", s[i].lbl,
			tb[i].t != NULL);
	family(f, "kvwire_owner_up", "gauge",
	       "1 while the table's control process is alive.");
	for (unsigned i = 0; i < n; i++)
		if (tb[i].t)
			fprintf(f, "kvwire_owner_up{table=\"%s\"} %d\n",
				s[i].lbl, owner_alive(s[i].info.owner_pid));
	family(f, "kvwire_metrics_enabled", "gauge",
	       "1 while the table records its measures.");
	for (unsigned i = 0; i < n; i++)
		if (tb[i].t)
			fprintf(f, "kvwire_metrics_enabled{table=\"%s\"} %d\n",
				s[i].lbl, !s[i].m.off);
	family(f, "kvwire_insecure", "gauge",
	       "1 while the table's owner runs --insecure (no authentication "
	       "on tcp://).");
	for (unsigned i = 0; i < n; i++)
		if (tb[i].t)
			fprintf(f, "kvwire_insecure{table=\"%s\"} %d\n",
				s[i].lbl, s[i].m.insecure);
	family(f, "kvwire_security_refusals_total", "counter",
	       "Messages and connections refused: unauthorised, rate_limited, "
	       "auth_failed (ZAP or data-port handshake), integrity_failed "
	       "(tcp batch or ACK with a wrong tag or seq); and the tcp "
	       "redials and resent batches.");
	for (unsigned i = 0; i < n; i++)
		if (tb[i].t)
			labelled(f, "kvwire_security_refusals_total", s[i].lbl,
				 "kind", sec_lbl, s[i].m.sec, 0, RTAB_NSEC);
	family(f, "kvwire_rooms_reclaimed_total", "counter",
	       "Ended rooms the owner cleared because nobody else would (a "
	       "room its engine never began).");
	for (unsigned i = 0; i < n; i++)
		if (tb[i].t)
			fprintf(f, "kvwire_rooms_reclaimed_total{table=\"%s\"} "
				"%llu\n", s[i].lbl,
				(unsigned long long)s[i].m.rooms_reclaimed);
	for (unsigned k = 0; k < sizeof counters / sizeof counters[0]; k++) {
		family(f, counters[k].name, "counter", counters[k].help);
		for (unsigned i = 0; i < n; i++)
			if (tb[i].t)
				fprintf(f, "%s{table=\"%s\"} %llu\n",
					counters[k].name, s[i].lbl,
					(unsigned long long)s[i].info
						.counters[counters[k].which]);
	}
	family(f, "kvwire_rooms_entered_total", "counter",
	       "Rooms that entered each state.");
	for (unsigned i = 0; i < n; i++)
		if (tb[i].t)
			labelled(f, "kvwire_rooms_entered_total", s[i].lbl,
				 "state", state_lbl, s[i].m.entered, 0,
				 KVW_NSTATES);
	family(f, "kvwire_failed_rooms_total", "counter",
	       "Rooms failed, by reason.");
	for (unsigned i = 0; i < n; i++)
		if (tb[i].t)
			labelled(f, "kvwire_failed_rooms_total", s[i].lbl,
				 "reason", reason_lbl, s[i].m.failed, 1,
				 KVW_NREASONS);
	family(f, "kvwire_rooms", "gauge", "Rooms in the table, by state.");
	for (unsigned i = 0; i < n; i++)
		if (tb[i].t)
			labelled(f, "kvwire_rooms", s[i].lbl, "state", state_lbl,
				 s[i].rooms, 0, KVW_NSTATES);
	family(f, "kvwire_peers", "gauge", "Peers, by liveness.");
	for (unsigned i = 0; i < n; i++)
		if (tb[i].t)
			labelled(f, "kvwire_peers", s[i].lbl, "liveness",
				 live_lbl, s[i].peers, 0, 3);
	for (unsigned h = 0; h < RTAB_NHISTS; h++) {
		family(f, hists[h].name, "histogram", hists[h].help);
		for (unsigned i = 0; i < n; i++)
			if (tb[i].t)
				hist(f, hists[h].name, s[i].lbl,
				     &s[i].m.hist[h]);
	}
	free(s);
	return ferror(f) ? -1 : 0;
}

char *prom_text(const struct render_table *tb, unsigned n, size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);
	int rc;

	if (!f)
		return NULL;
	rc = prom_write(f, tb, n);
	if (fclose(f) != 0 || rc < 0) {
		free(buf);
		return NULL;
	}
	return buf;
}
