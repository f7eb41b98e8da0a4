/*
 * authz.c - the table marks of authz.h.
 */
#include "authz.h"

#include <stdlib.h>

#include "wire/wire_auth.h"

void authz_mark(struct rtab *t)
{
	char fp[KEYS_FP];

	rtab_set_insecure(t, wire_auth_mode() == WIRE_AUTH_INSECURE);
	rtab_set_key_fp(t, wire_auth_group_fp(fp) ? strtoull(fp, NULL, 16)
						   : 0);
}

void authz_publish(struct rtab *t, uint64_t *seen)
{
	uint64_t now = wire_auth_refused();

	if (now > *seen) {
		rtab_sec_add(t, RTAB_S_AUTH_FAILED, now - *seen);
		*seen = now;
	}
}
