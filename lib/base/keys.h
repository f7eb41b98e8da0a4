/*
 * keys.h - the group's key material, on disk and in memory.
 *
 * A group (both sides of it, on every host) shares one key directory made
 * by `kv-keygen DIR`: mode 0700, holding `group.keys` (mode 0600, owned by
 * the user) with
 *   - a CURVE server key pair: every control socket bound on tcp:// is a
 *     CURVE server with it (wire/wire_auth.h);
 *   - a CURVE client key pair: members dial with it, and each process's
 *     ZAP handler admits only its public half;
 *   - a 32-byte data key: the tcp data port's handshake is a MAC under it
 *     over the sink's fresh challenge.
 * The keys are drawn by libzmq (zmq_curve_keypair, libsodium inside) and
 * libsodium (randombytes); nothing here is hand-made crypto. Loading
 * refuses a directory or file that others could read or write, that
 * another user owns, or that is not what it says.
 */
#ifndef KVW_KEYS_H
#define KVW_KEYS_H

#include <stddef.h>
#include <stdint.h>

#define KEYS_Z85 41u  /* a 32-byte key in Z85, with its NUL */
#define KEYS_DATA 32u /* the data key's bytes */
#define KEYS_FILE "group.keys"

struct keys {
	char server_public[KEYS_Z85], server_secret[KEYS_Z85];
	char client_public[KEYS_Z85], client_secret[KEYS_Z85];
	uint8_t data[KEYS_DATA];
};

/* Makes DIR (mode 0700, or an existing one that passes the same checks as
 * keys_load) and DIR/group.keys (0600, written in full under a private
 * name, then linked: never half a file, never an overwrite). 0, KVW_EEXIST
 * (keys already there), KVW_EINVAL (DIR unsafe: its mode or owner) or
 * KVW_ESYS, with the reason in err. */
int keys_make(const char *dir, char *err, size_t errlen);

/* Reads DIR/group.keys into *k after checking DIR and the file (owned by
 * this user, no access for group or others, a directory and a regular
 * file) and every key (Z85 of 32 bytes; the public halves must match the
 * secret ones). 0, KVW_ENOENT, KVW_EINVAL (unsafe or malformed) or
 * KVW_ESYS, with err; *k is zeroed on any error. */
int keys_load(const char *dir, struct keys *k, char *err, size_t errlen);

/* Fingerprints, for logs and kv-stat (never the keys themselves): the
 * first 8 bytes of BLAKE2b-256 (libsodium's crypto_generichash) as 16 hex
 * digits and a NUL. keys_fp of one raw 32-byte public key; keys_fp_z85 of
 * one in Z85 (0, or KVW_EINVAL with out "?"); keys_group_fp of the group:
 * of its server public key's 32 bytes then its client public key's, so
 * two key directories share it only if both public halves match. An
 * operator can reproduce one: the raw bytes through `b2sum -l 256`. */
#define KEYS_FP 17u
void keys_fp(const uint8_t raw[32], char out[KEYS_FP]);
int keys_fp_z85(const char *z85, char out[KEYS_FP]);
int keys_group_fp(const struct keys *k, char out[KEYS_FP]);

/* Zeroes *k in a way the compiler keeps. */
void keys_wipe(struct keys *k);

#endif
