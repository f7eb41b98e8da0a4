/*
 * runinfo.c - parser of the run directory's endpoints file; see runinfo.h.
 * The text is split into lines, each line into tokens; a member line is
 * parsed into a local struct, validated whole, and only then appended.
 */
#include "runinfo.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shape.h"

struct runinfo {
	struct runinfo_member *m;
	uint32_t n;
	char *shape; /* NULL when no shape= line */
};

static const char *const role_names[] = {
	[RUNINFO_BOOTSTRAP] = "bootstrap",
	[RUNINFO_PREFILL] = "prefill",
	[RUNINFO_DECODE] = "decode",
	[RUNINFO_HEARTBEAT] = "heartbeat",
};

const char *runinfo_role_str(unsigned role)
{
	return role < sizeof role_names / sizeof role_names[0]
		       ? role_names[role]
		       : "?";
}

static int is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

/* Copies a value of vlen bytes into dst[KVW_MAX_STR + 1]. */
static int set_str(char *dst, size_t cap, const char *v, size_t vlen)
{
	if (vlen >= cap)
		return -1;
	memcpy(dst, v, vlen);
	dst[vlen] = '\0';
	return 0;
}

/* Parses one key=value token into *m; `seen` tracks duplicate keys. */
static int member_kv(struct runinfo_member *m, unsigned *seen, int *has_role,
		     const char *k, size_t klen, const char *v, size_t vlen,
		     char *err, size_t errlen)
{
	static const char *const keys[] = { "member", "role", "rank", "topo",
					    "listen", "engine", "table",
					    "pool" };
	char buf[KVW_MAX_STR + 1];
	uint32_t q[4];
	unsigned i;

	for (i = 0; i < sizeof keys / sizeof keys[0]; i++)
		if (strlen(keys[i]) == klen && memcmp(keys[i], k, klen) == 0)
			break;
	if (i == sizeof keys / sizeof keys[0])
		return 0; /* unknown key: a newer writer's */
	if (*seen & (1u << i))
		return kvw_errf(err, errlen, KVW_EINVAL, "key '%s' given twice",
				keys[i]);
	*seen |= 1u << i;
	if (vlen > KVW_MAX_STR)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"%s: value longer than %u bytes", keys[i],
				KVW_MAX_STR);
	memcpy(buf, v, vlen);
	buf[vlen] = '\0';
	switch (i) {
	case 0:
		if (set_str(m->name, sizeof m->name, v, vlen))
			return kvw_errf(err, errlen, KVW_EINVAL,
					"member name longer than %u",
					RUNINFO_NAME_MAX);
		return 0;
	case 1:
		for (unsigned r = 0; r < sizeof role_names / sizeof *role_names;
		     r++)
			if (strcmp(buf, role_names[r]) == 0) {
				m->role = r;
				*has_role = 1;
				return 0;
			}
		return kvw_errf(err, errlen, KVW_EINVAL, "unknown role '%s'",
				buf);
	case 2:
		if (shape_parse_quad(buf, 0, q))
			return kvw_errf(err, errlen, KVW_EINVAL,
					"bad rank '%s'", buf);
		m->rank = (struct kvw_coord){ q[0], q[1], q[2], q[3] };
		return 0;
	case 3:
		if (shape_parse_quad(buf, 1, q) || !q[0] || !q[1] || !q[2] ||
		    !q[3]) {
			return kvw_errf(err, errlen, KVW_EINVAL,
					"bad topo '%s'", buf);
		}
		m->topo = (struct kvw_topo){ q[0], q[1], q[2], q[3] };
		return 0;
	case 4:
		return set_str(m->listen, sizeof m->listen, v, vlen);
	case 5:
		return set_str(m->engine, sizeof m->engine, v, vlen);
	case 6:
		return set_str(m->table, sizeof m->table, v, vlen);
	default:
		return set_str(m->pool, sizeof m->pool, v, vlen);
	}
}

/* Checks a parsed member line as a whole. */
static int member_check(const struct runinfo *ri, struct runinfo_member *m,
			int has_role, char *err, size_t errlen)
{
	if (m->name[0] == '\0')
		return kvw_errf(err, errlen, KVW_EINVAL, "no member= key");
	if (!has_role) {
		if (strcmp(m->name, "bootstrap") != 0)
			return kvw_errf(err, errlen, KVW_EINVAL,
					"member %s has no role", m->name);
		m->role = RUNINFO_BOOTSTRAP;
	}
	if (runinfo_find(ri, m->name))
		return kvw_errf(err, errlen, KVW_EINVAL,
				"member %s listed twice", m->name);
	if (m->rank.tp >= m->topo.tp || m->rank.pp >= m->topo.pp ||
	    m->rank.cp >= m->topo.cp || m->rank.dp >= m->topo.dp) {
		return kvw_errf(err, errlen, KVW_EINVAL,
				"member %s: rank outside its topo", m->name);
	}
	switch (m->role) {
	case RUNINFO_PREFILL:
	case RUNINFO_DECODE:
		if (!m->engine[0] || !m->table[0] || !m->pool[0] ||
		    !m->listen[0]) {
			return kvw_errf(err, errlen, KVW_EINVAL,
					"member %s: %s needs listen, "
					"engine, table and pool", m->name,
					runinfo_role_str(m->role));
		}
		break;
	case RUNINFO_HEARTBEAT:
		if (!m->table[0])
			return kvw_errf(err, errlen, KVW_EINVAL,
					"member %s: heartbeat needs " "table",
					m->name);
		break;
	default:
		if (!m->listen[0])
			return kvw_errf(err, errlen, KVW_EINVAL,
					"member %s: bootstrap needs " "listen",
					m->name);
		break;
	}
	return 0;
}

static int parse_member(struct runinfo *ri, const char *p, const char *end,
			char *err, size_t errlen)
{
	struct runinfo_member m;
	unsigned seen = 0;
	int has_role = 0, rc;

	memset(&m, 0, sizeof m);
	m.topo = (struct kvw_topo){ 1, 1, 1, 1 };
	while (p < end) {
		const char *tok, *eq;

		while (p < end && is_space(*p))
			p++;
		if (p == end)
			break;
		tok = p;
		while (p < end && !is_space(*p))
			p++;
		eq = memchr(tok, '=', (size_t)(p - tok));
		if (eq == NULL || eq == tok || eq + 1 == p)
			return kvw_errf(err, errlen, KVW_EINVAL,
					"token '%.*s' is not key=value",
					(int)(p - tok > 64 ? 64 : p - tok),
					tok);
		rc = member_kv(&m, &seen, &has_role, tok, (size_t)(eq - tok),
			       eq + 1, (size_t)(p - eq - 1), err, errlen);
		if (rc < 0)
			return rc;
	}
	rc = member_check(ri, &m, has_role, err, errlen);
	if (rc < 0)
		return rc;
	if (ri->n == RUNINFO_MAX_MEMBERS)
		return kvw_errf(err, errlen, KVW_EINVAL, "more than %u members",
				RUNINFO_MAX_MEMBERS);
	if ((ri->n & (ri->n - 1)) == 0) { /* grow at powers of two */
		size_t cap = ri->n ? 2 * (size_t)ri->n : 4;
		void *nm = realloc(ri->m, cap * sizeof *ri->m);

		if (nm == NULL)
			return kvw_errf(err, errlen, KVW_ENOMEM,
					"out of memory");
		ri->m = nm;
	}
	ri->m[ri->n++] = m;
	return 0;
}

static int parse_line(struct runinfo *ri, const char *p, const char *end,
		      char *err, size_t errlen)
{
	while (p < end && is_space(*p))
		p++;
	while (end > p && is_space(end[-1]))
		end--;
	if (p == end || *p == '#')
		return 0;
	if (end - p >= 6 && memcmp(p, "shape=", 6) == 0) {
		size_t len;

		if (ri->shape)
			return kvw_errf(err, errlen, KVW_EINVAL,
					"second shape= line");
		p += 6;
		len = (size_t)(end - p);
		ri->shape = malloc(len + 1);
		if (ri->shape == NULL)
			return kvw_errf(err, errlen, KVW_ENOMEM,
					"out of memory");
		memcpy(ri->shape, p, len);
		ri->shape[len] = '\0';
		return 0;
	}
	return parse_member(ri, p, end, err, errlen);
}

int runinfo_parse(const char *text, size_t len, struct runinfo **out,
		  char *err, size_t errlen)
{
	struct runinfo *ri;
	const char *p = text, *end = text + len;
	unsigned line = 0;
	char why[512];
	int rc;

	*out = NULL;
	if (text == NULL && len > 0)
		return KVW_EINVAL;
	ri = calloc(1, sizeof *ri);
	if (ri == NULL)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;

		line++;
		why[0] = '\0';
		if (le - p > (ptrdiff_t)RUNINFO_LINE_MAX) {
			snprintf(why, sizeof why, "longer than %u bytes",
				 RUNINFO_LINE_MAX);
			rc = KVW_EINVAL;
		} else if (memchr(p, '\0', (size_t)(le - p))) {
			snprintf(why, sizeof why, "NUL byte in line");
			rc = KVW_EINVAL;
		} else {
			rc = parse_line(ri, p, le, why, sizeof why);
		}
		if (rc < 0) {
			kvw_seterr(err, errlen, "line %u: %s", line, why);
			runinfo_free(&ri);
			return rc;
		}
		p = nl ? nl + 1 : end;
	}
	*out = ri;
	return 0;
}

int runinfo_load(const char *path, struct runinfo **out, char *err,
		 size_t errlen)
{
	char file[4096], why[512];
	struct stat st;
	char *buf = NULL;
	size_t got = 0;
	int fd, rc;

	*out = NULL;
	if (path == NULL || *path == '\0')
		return KVW_EINVAL;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		snprintf(file, sizeof file, "%s/endpoints", path);
	else
		snprintf(file, sizeof file, "%s", path);
	fd = open(file, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		kvw_seterr(err, errlen, "%s: %s", file, strerror(errno));
		return errno == ENOENT ? KVW_ENOENT : KVW_ESYS;
	}
	buf = malloc(RUNINFO_FILE_MAX);
	if (buf == NULL) {
		close(fd);
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	}
	for (;;) {
		ssize_t r = read(fd, buf + got, RUNINFO_FILE_MAX - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			kvw_seterr(err, errlen, "%s: read: %s", file,
				   strerror(errno));
			rc = KVW_ESYS;
			goto done;
		}
		if (r == 0)
			break;
		got += (size_t)r;
		if (got == RUNINFO_FILE_MAX) {
			kvw_seterr(err, errlen, "%s: larger than %u bytes",
				   file, RUNINFO_FILE_MAX - 1);
			rc = KVW_EINVAL;
			goto done;
		}
	}
	rc = runinfo_parse(buf, got, out, why, sizeof why);
	if (rc < 0)
		kvw_seterr(err, errlen, "%s: %s", file, why);
done:
	free(buf);
	close(fd);
	return rc;
}

void runinfo_free(struct runinfo **ri)
{
	if (ri == NULL || *ri == NULL)
		return;
	free((*ri)->m);
	free((*ri)->shape);
	free(*ri);
	*ri = NULL;
}

uint32_t runinfo_count(const struct runinfo *ri)
{
	return ri->n;
}

const struct runinfo_member *runinfo_member(const struct runinfo *ri,
					    uint32_t i)
{
	return i < ri->n ? &ri->m[i] : NULL;
}

const struct runinfo_member *runinfo_find(const struct runinfo *ri,
					  const char *name)
{
	for (uint32_t i = 0; i < ri->n; i++)
		if (strcmp(ri->m[i].name, name) == 0)
			return &ri->m[i];
	return NULL;
}

const struct runinfo_member *runinfo_nth(const struct runinfo *ri,
					 unsigned role, uint32_t k)
{
	for (uint32_t i = 0; i < ri->n; i++)
		if (ri->m[i].role == role && k-- == 0)
			return &ri->m[i];
	return NULL;
}

uint32_t runinfo_nrole(const struct runinfo *ri, unsigned role)
{
	uint32_t c = 0;

	for (uint32_t i = 0; i < ri->n; i++)
		c += ri->m[i].role == role;
	return c;
}

const char *runinfo_bootstrap(const struct runinfo *ri)
{
	const struct runinfo_member *m = runinfo_nth(ri, RUNINFO_BOOTSTRAP, 0);

	return m ? m->listen : NULL;
}

const char *runinfo_shape(const struct runinfo *ri)
{
	return ri->shape;
}

int runinfo_shape_apply(const char *flags, struct shape *s, char *err,
			size_t errlen)
{
	char *buf, *save = NULL, *tok, why[256];
	int rc = 0;

	if (flags == NULL)
		return 0;
	buf = strdup(flags);
	if (buf == NULL)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	for (tok = strtok_r(buf, " \t", &save); tok;
	     tok = strtok_r(NULL, " \t", &save)) {
		char *name = tok + 2, *val, *eq;

		if (strncmp(tok, "--", 2) != 0 || tok[2] == '\0') {
			kvw_seterr(err, errlen, "shape: '%s' is not an option",
				   tok);
			rc = KVW_EINVAL;
			break;
		}
		eq = strchr(name, '=');
		if (eq) {
			*eq = '\0';
			val = eq + 1;
		} else if (strcmp(name, "mla") == 0) {
			val = NULL;
		} else {
			val = strtok_r(NULL, " \t", &save);
		}
		why[0] = '\0';
		rc = shape_option(s, name, val, why, sizeof why);
		if (rc == 0) {
			kvw_seterr(err, errlen, "shape: unknown option --%s",
				   name);
			rc = KVW_EINVAL;
			break;
		}
		if (rc < 0) {
			kvw_seterr(err, errlen, "shape: %s", why);
			break;
		}
		rc = 0;
	}
	free(buf);
	return rc;
}

int runinfo_check_topo(const struct runinfo *ri, unsigned role, uint32_t tp,
		       uint32_t pp, char *err, size_t errlen)
{
	for (uint32_t k = 0; k < runinfo_nrole(ri, role); k++) {
		const struct runinfo_member *m = runinfo_nth(ri, role, k);

		if ((tp && m->topo.tp != tp) || (pp && m->topo.pp != pp))
			return kvw_errf(err, errlen, KVW_EINVAL,
					"member %s has tp %u pp %u, not "
					"the tp %u pp %u asked", m->name,
					m->topo.tp, m->topo.pp,
					tp ? tp : m->topo.tp,
					pp ? pp : m->topo.pp);
	}
	return 0;
}

/* A value written into a line must read back as one token. */
static int token_ok(const char *v)
{
	if (v[0] == '\0' || strlen(v) > KVW_MAX_STR)
		return 0;
	for (; *v; v++)
		if (is_space(*v) || *v == '\n' || *v == '#')
			return 0;
	return 1;
}

int runinfo_format(const struct runinfo_member *m, char *buf, size_t len)
{
	int n;

	if (!token_ok(m->name) || strchr(m->name, '=') ||
	    strlen(m->name) > RUNINFO_NAME_MAX)
		return KVW_EINVAL;
	switch (m->role) {
	case RUNINFO_BOOTSTRAP:
		if (!token_ok(m->listen))
			return KVW_EINVAL;
		/* "bootstrap" says its role by its name; others say it. */
		n = strcmp(m->name, "bootstrap") == 0
			    ? snprintf(buf, len, "member=bootstrap listen=%s",
				       m->listen)
			    : snprintf(buf, len, "member=%s role=bootstrap "
				       "listen=%s", m->name, m->listen);
		break;
	case RUNINFO_PREFILL:
	case RUNINFO_DECODE:
		if (!token_ok(m->listen) || !token_ok(m->engine) ||
		    !token_ok(m->table) || !token_ok(m->pool) ||
		    m->topo.cp != 1 || m->topo.dp != 1 || !m->topo.tp ||
		    !m->topo.pp || m->rank.tp >= m->topo.tp ||
		    m->rank.pp >= m->topo.pp || m->rank.cp || m->rank.dp)
			return KVW_EINVAL;
		n = snprintf(buf, len, "member=%s role=%s rank=%u,%u "
			     "topo=%u,%u listen=%s engine=%s table=%s pool=%s",
			     m->name, runinfo_role_str(m->role), m->rank.tp,
			     m->rank.pp, m->topo.tp, m->topo.pp, m->listen,
			     m->engine, m->table, m->pool);
		break;
	case RUNINFO_HEARTBEAT:
		if (!token_ok(m->table))
			return KVW_EINVAL;
		n = snprintf(buf, len, "member=%s role=heartbeat table=%s",
			     m->name, m->table);
		break;
	default:
		return KVW_EINVAL;
	}
	if (n < 0 || (size_t)n >= len)
		return KVW_ERANGE;
	return n;
}
