/*
 * sender_authz.c - which pool a decode's REGISTER may make this prefill's
 * workers map read-write (issue 14). The shm descriptor names a file by
 * path; before a worker ever opens it, the control checks that it can only
 * be the registering decode's own pool:
 *
 *   - a kvwire pool path (the transport's desc_file), a regular file reached
 *     without following a link, owned by this process's user, and the
 *     very file (st_dev, st_ino) the descriptor states;
 *   - never this rank's own pool (same st_dev and st_ino);
 *   - never a pool another registered decode (another endpoint) named:
 *     the first decode that names a pool owns it;
 *   - in a group kv-up started (this rank's pool is DIR/kvwire.G.pI.pool),
 *     exactly DIR/kvwire.G.dJ.pool, J being the member index kv-up gives
 *     the decode at the REGISTER's coordinates (pp * tp_size + tp): the
 *     run directory's name for that member's pool, so no other group's
 *     pool and no other member's;
 *   - in a group of a cluster (kv-up --cluster C: G is "C+rest"), the
 *     pool DIR/kvwire.C+R.dJ.pool of any group R of the same cluster
 *     (issue 34: xPyD on one host, where every decode instance receives
 *     from every prefill instance), still member J's.
 *
 * This is for a transport whose writers map a file the peer's descriptor
 * names (ops->desc_file: shm). Other transports map no file named by the
 * peer: nothing to check here.
 */
#include "sender_impl.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mem/pool.h"
#include "xport/xport.h"

/* Splits "DIR/kvwire.G.pI.pool" into its DIR/kvwire.G. prefix length: 1
 * with *pre set when path has that form, else 0. */
static int kvup_prefix(const char *path, size_t *pre)
{
	const char *base = strrchr(path, '/'), *dot, *q;
	size_t n = strlen(path);

	if (!base || n < 5 || strcmp(path + n - 5, ".pool") != 0)
		return 0;
	for (dot = path + n - 5; dot > base && dot[-1] != '.'; dot--)
		;
	/* dot: the member part "pI"; the group part sits between "kvwire."
	 * and it and must not be empty. */
	if (dot < base + 10 || dot[0] != 'p' || dot == path + n - 5 - 1)
		return 0;
	for (q = dot + 1; q < path + n - 5; q++)
		if (*q < '0' || *q > '9')
			return 0;
	*pre = (size_t)(dot - path);
	return 1;
}

/* Whether path is DIR/kvwire.C+R.dJ.pool: own[0..pre) is this rank's
 * "DIR/kvwire.C+G." and R a group name of kv-up's alphabet. */
static int cluster_pool(const char *own, size_t pre, const char *path,
			uint64_t j)
{
	const char *plus = memchr(own, '+', pre), *base = strrchr(own, '/');
	char tail[48];
	size_t c, r, n = strlen(path);

	if (!plus || !base || plus < base)
		return 0;
	c = (size_t)(plus - own) + 1; /* "DIR/kvwire.C+" */
	snprintf(tail, sizeof tail, ".d%llu.pool", (unsigned long long)j);
	if (n <= c + strlen(tail) || strncmp(path, own, c) != 0 ||
	    strcmp(path + n - strlen(tail), tail) != 0)
		return 0;
	r = n - c - strlen(tail);
	return strspn(path + c, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqr"
				"stuvwxyz0123456789_-") == r;
}

int sender_pool_allowed(const struct sender *s, const struct sender_peer *p,
			const struct frame_register *r, uint64_t *dev,
			uint64_t *ino, char *why, size_t whylen)
{
	const struct xport_ops *ops = xport_find(s->transport);
	struct xport_desc_file d;
	char own[POOL_PATH_MAX + 1], want[POOL_PATH_MAX + 1];
	struct stat st, mine;
	size_t pre;

	*dev = *ino = 0;
	/* A descriptor of another transport than ours maps nothing here. */
	if (!ops || !ops->desc_file || strcmp(r->transport, s->transport) != 0)
		return 1;
	if (ops->desc_file(r->desc.p, r->desc.len, &d, why, whylen))
		return 0;
	if (pool_path_for(s->pool_path, own, sizeof own) == 0 &&
	    kvup_prefix(own, &pre)) {
		uint64_t j = (uint64_t)r->coord.pp * r->topo.tp + r->coord.tp;

		snprintf(want, sizeof want, "%.*sd%llu.pool", (int)pre, own,
			 (unsigned long long)j);
		if (strcmp(d.path, want) != 0 &&
		    !cluster_pool(own, pre, d.path, j)) {
			snprintf(why, whylen, "pool %.200s is not this "
				 "group's%s pool of the decode at rank %u,%u "
				 "(%.200s)", d.path,
				 memchr(own, '+', pre) ? " or its cluster's" : "",
				 r->coord.tp, r->coord.pp, want);
			return 0;
		}
	}
	if (lstat(d.path, &st) != 0 || !S_ISREG(st.st_mode)) {
		snprintf(why, whylen, "pool %.200s is not a regular file",
			 d.path);
		return 0;
	}
	if (st.st_uid != geteuid()) {
		snprintf(why, whylen, "pool %.200s belongs to uid %u, not to "
			 "this group's user %u", d.path, (unsigned)st.st_uid,
			 (unsigned)geteuid());
		return 0;
	}
	if ((uint64_t)st.st_dev != d.dev || (uint64_t)st.st_ino != d.ino) {
		snprintf(why, whylen, "pool %.200s is not the file the "
			 "descriptor states", d.path);
		return 0;
	}
	if (s->pool && fstat(pool_fd(s->pool), &mine) == 0 &&
	    mine.st_dev == st.st_dev && mine.st_ino == st.st_ino) {
		snprintf(why, whylen, "pool %.200s is this prefill rank's own",
			 d.path);
		return 0;
	}
	for (uint32_t i = 0; i < s->npeers; i++) {
		const struct sender_peer *q = s->peers[i];

		if (q != p && q->pool_ino == d.ino && q->pool_dev == d.dev &&
		    strcmp(q->endpoint, r->endpoint) != 0) {
			snprintf(why, whylen, "pool %.200s is decode %.200s's",
				 d.path, q->endpoint);
			return 0;
		}
	}
	*dev = d.dev;
	*ino = d.ino;
	return 1;
}
