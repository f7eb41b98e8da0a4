/*
 * fuzz_rtab.c - libFuzzer target for the room table. An input whose first
 * byte is even is a program of table operations (insert, lookup,
 * transition, clear, job counts, peers, deadlines, sweeps, owner restart,
 * stale refs, passes that forget old Cleared rooms) run on a fresh
 * 16-slot table against a model; after every
 * operation the result code and the whole table are checked against the
 * model, and any difference abort()s. An odd first byte makes the rest of
 * the input a table file (raw, or behind a valid header when bit 1 is set)
 * that rtab_open and rtab_create must refuse cleanly or accept; an accepted
 * file is then read and swept without crashing.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "table/rtab.h"

#define CAP 16u
#define PEERS 4u
#define NK 24u
#define NSTALE 8u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct mkey {
	int has; /* the key has an incarnation in the table (any state) */
	struct rtab_ref ref;
	unsigned st, out, peer;
	uint64_t dl;
};

struct model {
	struct mkey k[NK];
	struct rtab_ref stale[NSTALE];
	unsigned nstale;
	char eps[PEERS][16]; /* endpoint per peer id - 1 */
	uint64_t ep_epoch[PEERS];
	unsigned npeers;
};

struct in {
	const uint8_t *p;
	size_t n;
};

static unsigned next(struct in *in)
{
	if (in->n == 0)
		return 0;
	in->n--;
	return *in->p++;
}

#define CHECK(c)                                                          \
	do {                                                              \
		if (!(c)) {                                               \
			fprintf(stderr, "fuzz_rtab: %s:%d: %s\n", __FILE__,   \
				__LINE__, #c);                            \
			abort();                                          \
		}                                                         \
	} while (0)

static uint64_t key_of(unsigned k)
{
	return k == 0 ? 0 : k == 1 ? UINT64_MAX : k * 0x9e3779b97f4a7c15ULL;
}

static int active(unsigned st)
{
	return st == KVW_BOOTSTRAPPING || st == KVW_WAITING ||
	       st == KVW_TRANSFERRING;
}

static void add_stale(struct model *m, struct rtab_ref r)
{
	m->stale[m->nstale++ % NSTALE] = r;
}

/* The whole table agrees with the model. */
static void check_all(struct rtab *t, const struct model *m)
{
	struct rtab_view v;
	uint32_t c = 0;
	unsigned n = 0, want = 0;

	while (rtab_next(t, &c, &v) == 0) {
		unsigned k;

		for (k = 0; k < NK && key_of(k) != v.room; k++)
			;
		CHECK(k < NK && m->k[k].has);
		CHECK(v.ref.slot == m->k[k].ref.slot && v.ref.gen == m->k[k].ref.gen);
		CHECK(v.state == m->k[k].st && v.outstanding == m->k[k].out);
		CHECK(v.peer == m->k[k].peer && v.deadline_ns == m->k[k].dl);
		n++;
	}
	for (unsigned k = 0; k < NK; k++) {
		struct rtab_ref r;
		int rc = rtab_lookup(t, key_of(k), &r);

		if (!m->k[k].has) {
			CHECK(rc == KVW_ENOENT);
			continue;
		}
		want++;
		CHECK(rc == 0 && r.slot == m->k[k].ref.slot &&
		      r.gen == m->k[k].ref.gen);
	}
	CHECK(n == want);
	for (unsigned i = 0; i < NSTALE && i < m->nstale; i++)
		CHECK(rtab_state(t, m->stale[i]) == KVW_ESTALE);
}

static void op_insert(struct rtab *t, struct model *m, struct in *in)
{
	unsigned k = next(in) % NK, peer = next(in) % (PEERS + 1);
	uint64_t dl = next(in);
	struct mkey *mk = &m->k[k];
	struct rtab_ref r;
	unsigned busy = 0;
	int rc, want;

	for (unsigned j = 0; j < NK; j++)
		busy += m->k[j].has && (m->k[j].st != KVW_CLEARED || m->k[j].out);
	if (mk->has && mk->st != KVW_CLEARED)
		want = KVW_EEXIST;
	else if (mk->has && mk->out != 0)
		want = KVW_EAGAIN;
	else if (!mk->has && busy == CAP)
		want = KVW_ENOMEM;
	else
		want = 0;
	rc = rtab_insert(t, key_of(k), peer, dl, &r);
	CHECK(rc == want);
	if (rc == KVW_EEXIST)
		CHECK(r.slot == mk->ref.slot && r.gen == mk->ref.gen);
	if (rc != 0)
		return;
	if (mk->has) {
		CHECK(r.slot == mk->ref.slot && r.gen == mk->ref.gen + 1);
		add_stale(m, mk->ref);
	}
	for (unsigned j = 0; j < NK; j++) {
		struct mkey *o = &m->k[j];

		if (j == k || !o->has || o->ref.slot != r.slot)
			continue;
		/* took another key's tombstone */
		CHECK(o->st == KVW_CLEARED && o->out == 0 && r.gen == o->ref.gen + 1);
		add_stale(m, o->ref);
		o->has = 0;
	}
	mk->has = 1;
	mk->ref = r;
	mk->st = KVW_BOOTSTRAPPING;
	mk->out = 0;
	mk->peer = peer;
	mk->dl = dl;
}

static void op_transition(struct rtab *t, struct model *m, struct in *in)
{
	unsigned k = next(in) % NK, to = next(in) % (KVW_NSTATES + 1);
	struct mkey *mk = &m->k[k];
	unsigned prev = 99;
	int rc;

	if (!mk->has)
		return;
	rc = rtab_transition_if(t, mk->ref, RTAB_M_ANY, to, KVW_R_TRANSFER, &prev);
	if (to >= KVW_NSTATES) {
		CHECK(rc == KVW_EINVAL);
		return;
	}
	CHECK(prev == mk->st);
	CHECK(rc == (rtab_legal(mk->st, to) ? 0 : KVW_ESTATE));
	if (rc == 0)
		mk->st = to;
}

static void op_clear(struct rtab *t, struct model *m, struct in *in)
{
	struct mkey *mk = &m->k[next(in) % NK];
	int rc;

	if (!mk->has)
		return;
	rc = rtab_clear(t, mk->ref, KVW_R_CLEARED);
	CHECK(rc == (mk->st == KVW_CLEARED ? KVW_ESTATE : 0));
	mk->st = KVW_CLEARED;
}

static void op_jobs(struct rtab *t, struct model *m, struct in *in)
{
	struct mkey *mk = &m->k[next(in) % NK];
	int delta = (int)(next(in) % 5) - 2;
	int rc;

	if (!mk->has)
		return;
	rc = rtab_outstanding_add(t, mk->ref, delta);
	if ((int)mk->out + delta < 0) {
		CHECK(rc == KVW_ERANGE);
		return;
	}
	mk->out = (unsigned)((int)mk->out + delta);
	CHECK(rc == (int)mk->out);
}

static void op_fail_peer(struct rtab *t, struct model *m, struct in *in)
{
	unsigned peer = next(in) % (PEERS + 1), want = 0;
	int rc = rtab_fail_peer(t, peer, KVW_R_PEER_DEAD, NULL, NULL);

	if (peer == 0) {
		CHECK(rc == KVW_EINVAL);
		return;
	}
	for (unsigned j = 0; j < NK; j++) {
		struct mkey *o = &m->k[j];

		if (o->has && o->peer == peer && active(o->st)) {
			o->st = KVW_FAILED;
			want++;
		}
	}
	CHECK(rc == (int)want);
}

static void op_expire(struct rtab *t, struct model *m, struct in *in)
{
	uint64_t now = next(in);
	unsigned want = 0;
	int rc = rtab_expire(t, now, NULL, NULL);

	for (unsigned j = 0; j < NK; j++) {
		struct mkey *o = &m->k[j];

		if (o->has && o->dl != 0 && o->dl <= now && active(o->st)) {
			o->st = KVW_FAILED;
			want++;
		}
	}
	CHECK(rc == (int)want);
}

static void op_restart(struct rtab *t, struct model *m, struct in *in)
{
	unsigned want = 0;
	uint64_t epoch = next(in);
	int rc = rtab_fail_stale_owner(t, epoch, NULL, NULL);

	for (unsigned j = 0; j < NK; j++) {
		struct mkey *o = &m->k[j];

		if (!o->has)
			continue;
		if (active(o->st)) {
			o->st = KVW_FAILED;
			want++;
		}
		o->out = 0;
	}
	CHECK(rc == (int)want);
	CHECK(rtab_owner_epoch(t) == epoch);
}

static void op_peer(struct rtab *t, struct model *m, struct in *in)
{
	char ep[16];
	uint64_t epoch = next(in) % 4;
	uint32_t id = 0;
	int ch = -1, rc;
	unsigned i;

	snprintf(ep, sizeof(ep), "tcp://h:%u", next(in) % 6);
	rc = rtab_peer_upsert(t, ep, epoch, &id, &ch);
	for (i = 0; i < m->npeers && strcmp(m->eps[i], ep) != 0; i++)
		;
	if (i == m->npeers) {
		if (m->npeers == PEERS) {
			CHECK(rc == KVW_ENOMEM);
			return;
		}
		memcpy(m->eps[i], ep, sizeof(ep));
		m->ep_epoch[i] = epoch;
		m->npeers++;
		CHECK(rc == 0 && id == i + 1 && ch == 0);
		return;
	}
	CHECK(rc == 0 && id == i + 1);
	CHECK(ch == (epoch != 0 && m->ep_epoch[i] != 0 && m->ep_epoch[i] != epoch));
	if (epoch != 0)
		m->ep_epoch[i] = epoch;
}

/* A pass of rtab_reclaim, wanting every slot EMPTY (it forgets whatever
 * it may) or none (it only ages): a key whose incarnation it forgot has
 * a stale ref and is gone from the model, and only a jobless Cleared one
 * may be; every key it kept stays found where it was (check_all). */
static void op_reclaim(struct rtab *t, struct model *m, struct in *in)
{
	int rc = rtab_reclaim(t, next(in) % 2 ? CAP : 0);
	unsigned gone = 0;

	CHECK(rc >= 0);
	for (unsigned j = 0; j < NK; j++) {
		struct mkey *o = &m->k[j];

		if (!o->has || rtab_state(t, o->ref) != KVW_ESTALE)
			continue;
		CHECK(o->st == KVW_CLEARED && o->out == 0);
		add_stale(m, o->ref);
		o->has = 0;
		gone++;
	}
	CHECK(gone == (unsigned)rc);
}

static void run_ops(const uint8_t *data, size_t size, const char *path)
{
	struct model *m = calloc(1, sizeof(*m));
	struct rtab *t = NULL;
	struct in in = { data, size };
	char err[256];
	unsigned steps = 0;

	CHECK(m != NULL);
	unlink(path);
	CHECK(rtab_create(path, CAP, PEERS, 1, &t, NULL, err, sizeof(err)) == 0);
	while (in.n > 0 && steps++ < 512) {
		switch (next(&in) % 11) {
		case 0:
		case 1:
			op_insert(t, m, &in);
			break;
		case 2:
		case 3:
			op_transition(t, m, &in);
			break;
		case 4:
			op_clear(t, m, &in);
			break;
		case 5:
			op_jobs(t, m, &in);
			break;
		case 6:
			op_fail_peer(t, m, &in);
			break;
		case 7:
			op_expire(t, m, &in);
			break;
		case 8:
			op_peer(t, m, &in);
			break;
		case 9:
			op_restart(t, m, &in);
			break;
		case 10:
			op_reclaim(t, m, &in);
			break;
		}
		check_all(t, m);
	}
	rtab_close(&t);
	unlink(path);
	free(m);
}

/* Whatever an accepted file holds, reading and sweeping it is safe. */
static void poke(struct rtab *t, int owner)
{
	struct rtab_view v;
	struct rtab_peer_view pv;
	struct rtab_info info;
	struct rtab_ref r;
	uint32_t c = 0;

	rtab_info(t, &info);
	while (rtab_next(t, &c, &v) == 0) {
		(void)rtab_transition(t, v.ref, KVW_FAILED, 1);
		(void)rtab_outstanding_add(t, v.ref, -1);
		(void)rtab_clear(t, v.ref, 1);
	}
	c = 0;
	while (rtab_peer_next(t, &c, &pv) == 0)
		CHECK(strlen(pv.endpoint) < RTAB_ENDPOINT_MAX);
	for (unsigned k = 0; k < 4; k++)
		(void)rtab_lookup(t, key_of(k), &r);
	(void)rtab_next_deadline(t);
	(void)rtab_expire(t, UINT64_MAX, NULL, NULL);
	(void)rtab_fail_peer(t, 1, 1, NULL, NULL);
	if (owner) {
		uint32_t id;

		(void)rtab_fail_stale_owner(t, 2, NULL, NULL);
		for (unsigned k = 0; k < CAP + 2; k++)
			(void)rtab_insert(t, key_of(k), 1, 0, &r);
		(void)rtab_peer_upsert(t, "tcp://x:1", 1, &id, NULL);
	}
}

static void run_file(const uint8_t *data, size_t size, const char *path)
{
	size_t len = RTAB_HDR_SIZE + CAP * RTAB_ENTRY_SIZE + PEERS * RTAB_PEER_SIZE;
	uint8_t *buf = NULL;
	const uint8_t *body = data + 1;
	size_t blen = size - 1;
	struct rtab *t = NULL;
	char err[256];
	int fd, rc;

	if (data[0] & 2) {
		/* a valid header, the input as its entries and peers */
		struct rtab_hdr h;

		buf = calloc(1, len);
		CHECK(buf != NULL);
		memset(&h, 0, sizeof(h));
		h.magic = RTAB_MAGIC;
		h.version = RTAB_VERSION;
		h.hdr_size = RTAB_HDR_SIZE;
		h.entry_size = RTAB_ENTRY_SIZE;
		h.capacity = CAP;
		h.peer_capacity = PEERS;
		h.peer_entry_size = RTAB_PEER_SIZE;
		memcpy(buf, &h, sizeof(h));
		memcpy(buf + sizeof(h), body,
		       blen < len - sizeof(h) ? blen : len - sizeof(h));
		if (data[0] & 4) /* keep the input's own peer_count */
			memcpy(buf + 44, body, blen < 4 ? blen : 4);
		body = buf;
		blen = len;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0);
	CHECK(write(fd, body, blen) == (ssize_t)blen);
	close(fd);

	rc = rtab_open(path, 0, &t, err, sizeof(err));
	CHECK((rc == 0) == (t != NULL));
	if (rc == 0)
		poke(t, 0);
	rtab_close(&t);
	rc = rtab_open(path, 1, &t, err, sizeof(err));
	if (rc == 0)
		poke(t, 0);
	rtab_close(&t);
	rc = rtab_create(path, CAP, PEERS, 1, &t, NULL, err, sizeof(err));
	CHECK(rc == 0 || rc == KVW_EVERSION);
	if (rc == 0)
		poke(t, 1);
	rtab_close(&t);
	unlink(path);
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char path[128];

	if (path[0] == '\0')
		snprintf(path, sizeof(path), "/dev/shm/kvwire.fuzz_rtab.%ld.rooms",
			 (long)getpid());
	if (size == 0)
		return 0;
	if (data[0] & 1)
		run_file(data, size, path);
	else
		run_ops(data + 1, size - 1, path);
	return 0;
}
