/*
 * send.c - kv-ctl's one-way commands: the engine frames (SEND_BEGIN,
 * SEND_CHUNK, RECV_BEGIN, RECV_ABORT, CLEAR) built from arguments, and raw
 * hex frames for hostile-input tests; both go out through bootc_send*.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "base/proc.h"
#include "common/cli.h"
#include "roles/bootstrap/bootc.h"

/* Parses "1,2,3" ("" = none) into a calloc'd array (caller frees, also
 * on error). */
static int pages_parse(const char *s, uint32_t **out, uint32_t *n)
{
	size_t cap = 1;

	for (const char *p = s; *p; p++)
		cap += *p == ',';
	*n = 0;
	*out = calloc(cap, sizeof **out);
	if (!*out || cap > KVW_MAX_PAGES)
		return -1;
	for (char *end; *s; s = *end ? end + 1 : end) {
		unsigned long long v;

		errno = 0;
		v = strtoull(s, &end, 0);
		if (errno || end == s || *s == '-' || v > UINT32_MAX ||
		    (*end && (*end != ',' || !end[1])))
			return -1;
		(*out)[(*n)++] = (uint32_t)v;
	}
	return 0;
}

/* Builds the engine command of `cmd` from its arguments and sends it. */
int ctl_engine(void *ctx, const char *cmd, char **a, int n,
		     const struct opts *o)
{
	static const struct { const char *name; unsigned type; int nargs; } t[] = {
		{ "send-begin", FRAME_SEND_BEGIN, 4 },
		{ "send-chunk", FRAME_SEND_CHUNK, 3 },
		{ "recv-begin", FRAME_RECV_BEGIN, 5 },
		{ "abort", FRAME_RECV_ABORT, 2 },
		{ "clear", FRAME_CLEAR, 2 },
	};
	struct frame_msg m;
	uint32_t *pages = NULL, npages = 0;
	uint64_t room;
	char err[256];
	size_t i;
	int rc = KVW_EXIT_USAGE;

	for (i = 0; i < sizeof t / sizeof t[0]; i++)
		if (strcmp(cmd, t[i].name) == 0)
			break;
	if (i == sizeof t / sizeof t[0])
		return ctl_bad("unknown command", cmd);
	if (n != t[i].nargs)
		return ctl_bad("wrong number of arguments for", cmd);
	if (cli_u64(a[1], 0, UINT64_MAX, &room))
		return ctl_bad("bad ROOM", a[1]);
	frame_msg_init(&m, t[i].type, 0, room, proc_epoch());
	switch (t[i].type) {
	case FRAME_SEND_BEGIN:
		if (cli_u32(a[2], 0, UINT32_MAX, &m.u.send_begin.num_pages) ||
		    cli_u32(a[3], 0, UINT32_MAX, &m.u.send_begin.aux_slot))
			return ctl_bad("bad NPAGES or AUX", a[2]);
		break;
	case FRAME_SEND_CHUNK:
		if (pages_parse(a[2], &pages, &npages)) {
			rc = ctl_bad("bad PAGES", a[2]);
			goto out;
		}
		m.u.send_chunk.is_last = (uint8_t)o->last;
		m.u.send_chunk.pages = frame_u32s_of(pages, npages);
		break;
	case FRAME_RECV_BEGIN:
		if (strlen(a[2]) > KVW_MAX_STR ||
		    cli_u32(a[3], 0, UINT32_MAX, &m.u.recv_begin.aux_slot))
			return ctl_bad("bad BOOTSTRAP_EP or AUX", a[2]);
		if (pages_parse(a[4], &pages, &npages)) {
			rc = ctl_bad("bad PAGES", a[4]);
			goto out;
		}
		strcpy(m.u.recv_begin.bootstrap, a[2]);
		m.u.recv_begin.prefill_dp_rank = o->dp;
		m.u.recv_begin.pages = frame_u32s_of(pages, npages);
		break;
	}
	rc = bootc_send(ctx, a[0], &m, o->timeout_ms, err, sizeof err);
	rc = rc ? ctl_failed(rc, err) : KVW_EXIT_OK;
out:
	free(pages);
	return rc;
}

int ctl_raw(void *ctx, char **a, int n, const struct opts *o)
{
	static struct frame_part parts[BOOTC_RAW_MAX_PARTS];
	static uint8_t bytes[1u << 20];
	size_t used = 0;
	char err[256];
	int rc;

	if (n < 2 || n - 1 > (int)BOOTC_RAW_MAX_PARTS)
		return ctl_bad("raw needs EP and 1..256 frames", n ? a[0] : "");
	for (int i = 1; i < n; i++) {
		size_t len = strlen(a[i]);

		if (len % 2 || used + len / 2 > sizeof bytes)
			return ctl_bad("bad HEXFRAME", a[i]);
		parts[i - 1].data = bytes + used;
		parts[i - 1].len = len / 2;
		for (size_t k = 0; k < len; k += 2) {
			unsigned v;

			if (sscanf(a[i] + k, "%2x", &v) != 1 ||
			    !strchr("0123456789abcdefABCDEF", a[i][k + 1]))
				return ctl_bad("bad HEXFRAME", a[i]);
			bytes[used++] = (uint8_t)v;
		}
	}
	rc = bootc_send_raw(ctx, a[0], parts, (size_t)n - 1, o->timeout_ms,
			    err, sizeof err);
	return rc ? ctl_failed(rc, err) : KVW_EXIT_OK;
}
