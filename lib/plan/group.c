/*
 * group.c - the group plan; see group.h. The checks come first, each with
 * the message an operator acts on; then the members, written by one
 * function per kind so that each naming rule is stated once.
 */
#include "group.h"
#include "plan.h"

#include <stdio.h>
#include <string.h>

/* sun_path holds 108 bytes with its NUL. */
#define IPC_PATH_MAX 107u

static const char *const side_names[] = {
	[GROUP_BOTH] = "both",
	[GROUP_PREFILL] = "prefill",
	[GROUP_DECODE] = "decode",
};

int group_side_parse(const char *name, unsigned *side)
{
	for (unsigned i = 0; i < sizeof side_names / sizeof *side_names; i++)
		if (strcmp(name, side_names[i]) == 0) {
			*side = i;
			return 0;
		}
	return KVW_EINVAL;
}

static int runs_prefill(const struct group_spec *g)
{
	return g->side != GROUP_DECODE;
}

static int runs_decode(const struct group_spec *g)
{
	return g->side != GROUP_PREFILL;
}

/* The address control sockets bind: a split group talks over tcp:// and
 * defaults to loopback; one host uses ipc:// unless told an address. */
static const char *advertised(const struct group_spec *g)
{
	if (g->advertise && g->advertise[0])
		return g->advertise;
	return g->side == GROUP_BOTH ? NULL : "127.0.0.1";
}

static int sizes_ok(const struct group_spec *g)
{
	const uint32_t v[] = { g->ptp, g->ppp, g->dtp, g->dpp };

	for (size_t i = 0; i < sizeof v / sizeof *v; i++)
		if (v[i] < 1 || v[i] > GROUP_MAX_SIZE)
			return 0;
	return 1;
}

uint32_t group_size(const struct group_spec *g)
{
	uint32_t p = g->ptp * g->ppp, d = g->dtp * g->dpp;

	if (!sizes_ok(g))
		return 0;
	/* The bootstrap's line (decode: one per prefill instance named). */
	return (g->side == GROUP_DECODE ? g->nboot : 1) +
	       (runs_prefill(g) ? 2 * p : 0) + (runs_decode(g) ? 2 * d : 0);
}

static int all_of(const char *s, const char *set)
{
	return s[0] != '\0' && strspn(s, set) == strlen(s);
}

/* A numeric IPv4 or IPv6 address: it goes into tcp:// endpoints as is. */
static int numeric_ip(const char *a)
{
	size_t n = strlen(a);

	if (all_of(a, "0123456789."))
		return 1;
	if (n >= 2 && a[0] == '[' && a[n - 1] == ']')
		return strspn(a + 1, "0123456789abcdefABCDEF:") == n - 2 &&
		       n > 2;
	return all_of(a, "0123456789abcdefABCDEF:") && strchr(a, ':');
}

/* tcp://HOST:PORT, HOST without ':' (a name or IPv4), PORT digits. */
static int tcp_endpoint(const char *ep)
{
	const char *host, *colon;

	if (strncmp(ep, "tcp://", 6) != 0)
		return 0;
	host = ep + 6;
	colon = strchr(host, ':');
	return colon && colon > host && !strchr(colon + 1, ':') &&
	       all_of(colon + 1, "0123456789") && !strpbrk(host, " \t\n#");
}

/* The topology: sizes, the decode PP rule, TP sizes and kv heads. */
static int check_topology(const struct group_spec *g, char *err,
			  size_t errlen)
{
	uint32_t heads = g->shape.mla ? 1 : g->shape.kv_heads;

	if (!sizes_ok(g))
		return kvw_errf(err, errlen, KVW_EINVAL,
				"rank and stage counts must be integers in "
				"1..%u, got %u,%u prefill and %u,%u decode",
				GROUP_MAX_SIZE, g->ptp, g->ppp, g->dtp,
				g->dpp);
	if (g->dpp != 1 && g->dpp != g->ppp)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"--decode-pp must be 1 or the prefill PP (%u), "
				"got %u", g->ppp, g->dpp);
	if ((g->ptp > g->dtp ? g->ptp % g->dtp : g->dtp % g->ptp) != 0)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"prefill TP %u and decode TP %u do not divide "
				"one another", g->ptp, g->dtp);
	for (int i = 0; i < 2; i++) {
		uint32_t tp = i ? g->dtp : g->ptp;

		if (!plan_heads_split(heads, tp))
			return kvw_errf(err, errlen, KVW_EINVAL,
					"%u kv heads do not split over TP %u "
					"(need heads %% tp == 0, or tp %% heads "
					"== 0 when heads < tp)", heads, tp);
	}
	return 0;
}

/* Where the members live: run directory, run id, address, ports, the
 * prefill instances a decode side names, and the endpoints file's size. */
static int check_places(const struct group_spec *g, char *err,
			size_t errlen)
{
	const char *adv = advertised(g);

	/* The path goes into lines split on spaces and into ipc:// ones. */
	if (!g->dir || g->dir[0] != '/' ||
	    !all_of(g->dir, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuv"
			    "wxyz0123456789._+/-"))
		return kvw_errf(err, errlen, KVW_EINVAL,
				"run directory '%s': use only A-Z a-z 0-9 . _ "
				"+ - and / in its path (an absolute one)",
				g->dir ? g->dir : "");
	if (g->pool_dir &&
	    (g->pool_dir[0] != '/' || strlen(g->pool_dir) > GROUP_POOL_DIR_MAX ||
	     !all_of(g->pool_dir, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnop"
				  "qrstuvwxyz0123456789._+/-")))
		return kvw_errf(err, errlen, KVW_EINVAL,
				"pool directory '%s': want an absolute path "
				"of at most %u of A-Z a-z 0-9 . _ + - and /",
				g->pool_dir, GROUP_POOL_DIR_MAX);
	if (!g->runid || strlen(g->runid) > GROUP_RUNID_MAX ||
	    !all_of(g->runid, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrst"
			      "uvwxyz0123456789_-+") ||
	    strchr(g->runid, '+') != strrchr(g->runid, '+') ||
	    g->runid[0] == '+')
		return kvw_errf(err, errlen, KVW_EINVAL,
				"run id '%s': want 1..%u of A-Z a-z 0-9 _ -, "
				"or CLUSTER+ID", g->runid ? g->runid : "",
				GROUP_RUNID_MAX);
	if (adv && !numeric_ip(adv))
		return kvw_errf(err, errlen, KVW_EINVAL,
				"--advertise: want a numeric IP address, got "
				"'%s'", adv);
	if (adv && (g->port_base < 1 || g->port_base > 64000))
		return kvw_errf(err, errlen, KVW_EINVAL,
				"--port-base: want an integer in 1..64000, "
				"got '%u'", g->port_base);
	if (adv && (g->ptp * g->ppp >= GROUP_DECODE_PORTS ||
		    g->port_base + GROUP_DECODE_PORTS + g->dtp * g->dpp - 1 >
			    65535u))
		return kvw_errf(err, errlen, KVW_EINVAL,
				"--port-base %u: the group's ports (prefill "
				"rank i at %u+1+i, decode rank i at %u+%u+i) "
				"do not fit: use a lower --port-base or fewer "
				"ranks", g->port_base, g->port_base,
				g->port_base, GROUP_DECODE_PORTS);
	if (g->side != GROUP_DECODE && g->nboot)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"--bootstrap is for --role decode (this side "
				"runs its own kv-bootstrap)");
	if (g->nboot > GROUP_MAX_BOOTSTRAPS)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"%u --bootstrap, at most %u", g->nboot,
				GROUP_MAX_BOOTSTRAPS);
	for (uint32_t i = 0; i < g->nboot; i++) {
		if (!tcp_endpoint(g->bootstraps[i]) ||
		    strlen(g->bootstraps[i]) > KVW_MAX_STR)
			return kvw_errf(err, errlen, KVW_EINVAL,
					"--bootstrap: want the prefill side's "
					"tcp://HOST:PORT, got '%s'",
					g->bootstraps[i]);
		for (uint32_t j = 0; j < i; j++)
			if (strcmp(g->bootstraps[i], g->bootstraps[j]) == 0)
				return kvw_errf(err, errlen, KVW_EINVAL,
						"--bootstrap %s given twice",
						g->bootstraps[i]);
	}
	if (group_size(g) > RUNINFO_MAX_MEMBERS)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"a group of %u members is over the %u an "
				"endpoints file holds: use fewer ranks",
				group_size(g), RUNINFO_MAX_MEMBERS);
	return 0;
}

static int check(const struct group_spec *g, char *err, size_t errlen)
{
	int rc = check_topology(g, err, errlen);

	return rc < 0 ? rc : check_places(g, err, errlen);
}

/* ipc://DIR/file, its path checked against sun_path. */
static int ipc_endpoint(const struct group_spec *g, const char *file,
			char *out, size_t cap, char *err, size_t errlen)
{
	int n = snprintf(out, cap, "ipc://%s/%s", g->dir, file);

	if (n < 0 || (size_t)n >= cap || (size_t)n - 6 > IPC_PATH_MAX)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"ipc path %s/%s is %zu bytes, over the limit "
				"of %u (sun_path): use a shorter --run-dir",
				g->dir, file, strlen(g->dir) + 1 + strlen(file),
				IPC_PATH_MAX);
	return 0;
}

/* A control endpoint: tcp on the advertised address at port_base + port,
 * else ipc://DIR/file. */
static int endpoint(const struct group_spec *g, const char *file,
		    uint32_t port, char *out, size_t cap, char *err,
		    size_t errlen)
{
	const char *adv = advertised(g);

	if (!adv)
		return ipc_endpoint(g, file, out, cap, err, errlen);
	/* A numeric address and a port: always fits KVW_MAX_STR. */
	snprintf(out, cap, "tcp://%s:%u", adv, g->port_base + port);
	return 0;
}

/* A table in /dev/shm, a pool in the pool directory (the same unless
 * kv-up --pool-dir). */
static int shm_path(const struct group_spec *g, const char *name,
		    const char *kind, char *out, size_t cap)
{
	const char *dir = g->pool_dir && !strcmp(kind, "pool") ? g->pool_dir
							      : "/dev/shm";
	int n = snprintf(out, cap, "%s/kvwire.%s.%s.%s", dir, g->runid, name,
			 kind);

	return n < 0 || (size_t)n >= cap ? KVW_EINVAL : 0;
}

/* The bootstrap's line: this side's kv-bootstrap, or (decode) prefill
 * instance i's, named bootstrap, bootstrap1, ... */
static int bootstrap_member(const struct group_spec *g, uint32_t i,
			    struct runinfo_member *m, char *err,
			    size_t errlen)
{
	memset(m, 0, sizeof *m);
	if (i)
		snprintf(m->name, sizeof m->name, "bootstrap%u", i);
	else
		snprintf(m->name, sizeof m->name, "bootstrap");
	m->role = RUNINFO_BOOTSTRAP;
	m->topo = (struct kvw_topo){ 1, 1, 1, 1 };
	if (g->side == GROUP_DECODE) {
		snprintf(m->listen, sizeof m->listen, "%s", g->bootstraps[i]);
		return 0;
	}
	return endpoint(g, "boot.sock", 0, m->listen, sizeof m->listen, err,
			errlen);
}

/* Rank i of a side: control endpoint at port `port`, engine socket in the
 * run directory (engines run beside their member), table and pool in
 * /dev/shm. */
static int rank_member(const struct group_spec *g, unsigned role,
		       uint32_t tp, uint32_t pp, struct runinfo_member *m,
		       char *err, size_t errlen)
{
	int prefill = role == RUNINFO_PREFILL;
	uint32_t tps = prefill ? g->ptp : g->dtp, pps = prefill ? g->ppp : g->dpp;
	uint32_t i = pp * tps + tp;
	char file[RUNINFO_NAME_MAX + 8];
	int rc;

	memset(m, 0, sizeof *m);
	snprintf(m->name, sizeof m->name, "%c%u", prefill ? 'p' : 'd', i);
	m->role = role;
	m->topo = (struct kvw_topo){ tps, pps, 1, 1 };
	m->rank = (struct kvw_coord){ tp, pp, 0, 0 };
	snprintf(file, sizeof file, "%s.peer", m->name);
	rc = endpoint(g, file, prefill ? 1 + i : GROUP_DECODE_PORTS + i,
		      m->listen, sizeof m->listen, err, errlen);
	if (rc < 0)
		return rc;
	snprintf(file, sizeof file, "%s.eng", m->name);
	rc = ipc_endpoint(g, file, m->engine, sizeof m->engine, err, errlen);
	if (rc < 0)
		return rc;
	if (shm_path(g, m->name, "rooms", m->table, sizeof m->table) ||
	    shm_path(g, m->name, "pool", m->pool, sizeof m->pool))
		return kvw_errf(err, errlen, KVW_EINVAL,
				"run id or pool directory too long");
	return 0;
}

/* The heartbeat of rank member r watches r's peers through r's table. */
static void heartbeat_member(const struct runinfo_member *r,
			     struct runinfo_member *m)
{
	memset(m, 0, sizeof *m);
	snprintf(m->name, sizeof m->name, "hb%.32s",
		 r->role == RUNINFO_PREFILL ? r->name : r->name + 1);
	m->role = RUNINFO_HEARTBEAT;
	m->topo = (struct kvw_topo){ 1, 1, 1, 1 };
	memcpy(m->table, r->table, sizeof m->table);
}

static int side_ranks(const struct group_spec *g, unsigned role,
		      struct runinfo_member *out, uint32_t *k, char *err,
		      size_t errlen)
{
	int prefill = role == RUNINFO_PREFILL;
	uint32_t tps = prefill ? g->ptp : g->dtp, pps = prefill ? g->ppp : g->dpp;

	for (uint32_t pp = 0; pp < pps; pp++)
		for (uint32_t tp = 0; tp < tps; tp++) {
			int rc = rank_member(g, role, tp, pp, &out[(*k)++], err,
					     errlen);
			if (rc < 0)
				return rc;
		}
	return 0;
}

int group_plan(const struct group_spec *g, struct runinfo_member *out,
	       uint32_t cap, uint32_t *n, char *err, size_t errlen)
{
	uint32_t k = 0, p0, d0 = 0, np = 0, nd = 0, nb;
	int rc = check(g, err, errlen);

	*n = 0;
	if (rc < 0)
		return rc;
	if (cap < group_size(g)) {
		*n = group_size(g);
		return kvw_errf(err, errlen, KVW_ENOMEM,
				"%u members need room for %u", cap, *n);
	}
	nb = g->side == GROUP_DECODE ? g->nboot : 1;
	for (uint32_t i = 0; rc == 0 && i < nb; i++)
		rc = bootstrap_member(g, i, &out[k++], err, errlen);
	p0 = k;
	if (rc == 0 && runs_prefill(g)) {
		rc = side_ranks(g, RUNINFO_PREFILL, out, &k, err, errlen);
		np = k - p0;
	}
	if (rc == 0 && runs_decode(g)) {
		d0 = k;
		rc = side_ranks(g, RUNINFO_DECODE, out, &k, err, errlen);
		nd = k - d0;
	}
	if (rc < 0)
		return rc;
	/* Decode ranks' heartbeats first, as kv-up has always started them. */
	for (uint32_t i = 0; i < nd; i++)
		heartbeat_member(&out[d0 + i], &out[k++]);
	for (uint32_t i = 0; i < np; i++)
		heartbeat_member(&out[p0 + i], &out[k++]);
	*n = k;
	return 0;
}
