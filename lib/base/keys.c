/*
 * keys.c - the key directory of keys.h. group.keys is six lines of text:
 *
 *   kvwire-keys 1
 *   server-public Z85   server-secret Z85
 *   client-public Z85   client-secret Z85     (one key per line)
 *   data HEX64
 *
 * Key pairs come from zmq_curve_keypair (libsodium inside libzmq), the
 * data key from getrandom; a loaded pair is checked with zmq_curve_public.
 */
#include "keys.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "kvw.h"

#define KEYS_MAGIC "kvwire-keys 1"

void keys_wipe(struct keys *k)
{
	volatile unsigned char *p = (volatile unsigned char *)k;

	for (size_t i = 0; i < sizeof *k; i++)
		p[i] = 0;
}

/* BLAKE2b-256 of n bytes, its first 8 as hex. */
static void fp_of(const uint8_t *in, size_t n, char out[KEYS_FP])
{
	uint8_t h[32];

	crypto_generichash(h, sizeof h, in, n, NULL, 0);
	for (int i = 0; i < 8; i++)
		snprintf(out + 2 * i, 3, "%02x", h[i]);
}

void keys_fp(const uint8_t raw[32], char out[KEYS_FP])
{
	fp_of(raw, 32, out);
}

int keys_fp_z85(const char *z85, char out[KEYS_FP])
{
	uint8_t raw[32];

	if (strlen(z85) != KEYS_Z85 - 1 || !zmq_z85_decode(raw, z85)) {
		snprintf(out, KEYS_FP, "?");
		return KVW_EINVAL;
	}
	keys_fp(raw, out);
	return 0;
}

int keys_group_fp(const struct keys *k, char out[KEYS_FP])
{
	uint8_t raw[64];

	if (strlen(k->server_public) != KEYS_Z85 - 1 ||
	    strlen(k->client_public) != KEYS_Z85 - 1 ||
	    !zmq_z85_decode(raw, k->server_public) ||
	    !zmq_z85_decode(raw + 32, k->client_public)) {
		snprintf(out, KEYS_FP, "?");
		return KVW_EINVAL;
	}
	fp_of(raw, sizeof raw, out);
	return 0;
}

/* st is safe to hold keys: ours, nobody else may read or write it. */
static int safe(const struct stat *st, const char *path, int want_dir,
		char *err, size_t errlen)
{
	if (want_dir ? !S_ISDIR(st->st_mode) : !S_ISREG(st->st_mode))
		return kvw_errf(err, errlen, KVW_EINVAL, "%s: not a %s", path,
				want_dir ? "directory" : "regular file");
	if (st->st_uid != geteuid())
		return kvw_errf(err, errlen, KVW_EINVAL,
				"%s: owned by uid %u, not by this user (%u)",
				path, (unsigned)st->st_uid, (unsigned)geteuid());
	if (st->st_mode & 077)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"%s: mode %03o lets others in (want %s)", path,
				(unsigned)(st->st_mode & 0777),
				want_dir ? "0700" : "0600");
	return 0;
}

static int dir_ok(const char *dir, int make, char *err, size_t errlen)
{
	struct stat st;

	if (make && mkdir(dir, 0700) != 0 && errno != EEXIST)
		return kvw_errf(err, errlen, KVW_ESYS, "mkdir %s: %s", dir,
				strerror(errno));
	if (lstat(dir, &st) != 0)
		return kvw_errf(err, errlen, errno == ENOENT ? KVW_ENOENT : KVW_ESYS,
				"%s: %s", dir, strerror(errno));
	return safe(&st, dir, 1, err, errlen);
}

int keys_make(const char *dir, char *err, size_t errlen)
{
	struct keys k;
	char path[4096], tmp[4200], hex[2 * KEYS_DATA + 1];
	FILE *f;
	int fd, rc;

	if (snprintf(path, sizeof path, "%s/%s", dir, KEYS_FILE) >= (int)sizeof path)
		return kvw_errf(err, errlen, KVW_EINVAL, "key directory path too long");
	rc = dir_ok(dir, 1, err, errlen);
	if (rc)
		return rc;
	if (access(path, F_OK) == 0)
		return kvw_errf(err, errlen, KVW_EEXIST,
				"%s exists: keys are never overwritten", path);
	if (zmq_curve_keypair(k.server_public, k.server_secret) != 0 ||
	    zmq_curve_keypair(k.client_public, k.client_secret) != 0)
		return kvw_errf(err, errlen, KVW_ESYS,
				"zmq_curve_keypair: %s (libzmq without CURVE?)",
				zmq_strerror(errno));
	if (getrandom(k.data, sizeof k.data, 0) != (ssize_t)sizeof k.data) {
		keys_wipe(&k);
		return kvw_errf(err, errlen, KVW_ESYS, "getrandom: %s",
				strerror(errno));
	}
	for (unsigned i = 0; i < KEYS_DATA; i++)
		snprintf(hex + 2 * i, 3, "%02x", k.data[i]);
	snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	f = fd >= 0 ? fdopen(fd, "w") : NULL;
	rc = KVW_ESYS;
	if (f && fprintf(f, "%s\nserver-public %s\nserver-secret %s\n"
			 "client-public %s\nclient-secret %s\ndata %s\n",
			 KEYS_MAGIC, k.server_public, k.server_secret,
			 k.client_public, k.client_secret, hex) > 0 &&
	    fflush(f) == 0 && fsync(fd) == 0)
		rc = 0;
	if (f)
		fclose(f);
	else if (fd >= 0)
		close(fd);
	/* link, not rename: an existing file is never replaced. */
	if (rc == 0 && link(tmp, path) != 0)
		rc = errno == EEXIST ? KVW_EEXIST : KVW_ESYS;
	if (rc)
		kvw_seterr(err, errlen, "%s: %s", path, strerror(errno));
	unlink(tmp);
	memset(hex, 0, sizeof hex);
	keys_wipe(&k);
	return rc;
}

/* "NAME VALUE\n" into val[cap]: 0 or -1. */
static int field(FILE *f, const char *name, char *val, size_t cap)
{
	char line[256];
	size_t n = strlen(name), len;

	if (!fgets(line, sizeof line, f) || strncmp(line, name, n) != 0 ||
	    line[n] != ' ')
		return -1;
	len = strcspn(line + n + 1, "\n");
	if (len + 1 != cap)
		return -1;
	memcpy(val, line + n + 1, len);
	val[len] = '\0';
	memset(line, 0, sizeof line);
	return 0;
}

static int pair_ok(const char *pub, const char *sec)
{
	char derived[KEYS_Z85];
	uint8_t raw[32];

	return zmq_z85_decode(raw, pub) != NULL &&
	       zmq_z85_decode(raw, sec) != NULL &&
	       zmq_curve_public(derived, sec) == 0 && strcmp(derived, pub) == 0;
}

int keys_load(const char *dir, struct keys *k, char *err, size_t errlen)
{
	char path[4096], line[64], hex[2 * KEYS_DATA + 1];
	struct stat st;
	FILE *f = NULL;
	int rc, fd;

	memset(k, 0, sizeof *k);
	if (snprintf(path, sizeof path, "%s/%s", dir, KEYS_FILE) >= (int)sizeof path)
		return kvw_errf(err, errlen, KVW_EINVAL, "key directory path too long");
	rc = dir_ok(dir, 0, err, errlen);
	if (rc)
		return rc;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return kvw_errf(err, errlen, errno == ENOENT ? KVW_ENOENT : KVW_ESYS,
				"%s: %s", path, strerror(errno));
	if (fstat(fd, &st) != 0) {
		close(fd);
		return kvw_errf(err, errlen, KVW_ESYS, "%s: %s", path,
				strerror(errno));
	}
	rc = safe(&st, path, 0, err, errlen);
	if (rc == 0 && !(f = fdopen(fd, "r")))
		rc = kvw_errf(err, errlen, KVW_ESYS, "%s: %s", path,
			      strerror(errno));
	if (!f)
		close(fd);
	if (rc)
		return rc;
	rc = !fgets(line, sizeof line, f) || strcmp(line, KEYS_MAGIC "\n") ||
	     field(f, "server-public", k->server_public, KEYS_Z85) ||
	     field(f, "server-secret", k->server_secret, KEYS_Z85) ||
	     field(f, "client-public", k->client_public, KEYS_Z85) ||
	     field(f, "client-secret", k->client_secret, KEYS_Z85) ||
	     field(f, "data", hex, sizeof hex) ? -1 : 0;
	for (unsigned i = 0; rc == 0 && i < KEYS_DATA; i++) {
		unsigned v;

		if (sscanf(hex + 2 * i, "%2x", &v) != 1)
			rc = -1;
		k->data[i] = (uint8_t)v;
	}
	fclose(f);
	memset(hex, 0, sizeof hex);
	if (rc == 0 && (!pair_ok(k->server_public, k->server_secret) ||
			!pair_ok(k->client_public, k->client_secret)))
		rc = -1;
	if (rc) {
		keys_wipe(k);
		return kvw_errf(err, errlen, KVW_EINVAL,
				"%s: not a kvwire key file (or a key in it is "
				"malformed)", path);
	}
	return 0;
}
