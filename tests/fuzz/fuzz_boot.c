/*
 * fuzz_boot.c - libFuzzer target for kv-bootstrap's request handling: the
 * same path the program runs (frame_decode, then boot_handle, then
 * frame_encode of the reply), over a sequence of messages against one
 * bootstrap per input, so registrations build state that later lookups and
 * conflicting registrations meet. Input: repeated records of byte 0 = part
 * count (mod KVW_MAX_FRAMES + 1), then per part a u16 LE length and that many
 * bytes (fuzz_input.h: each part copied to its own exact-size heap buffer so
 * ASan sees any over-read). Checked: boot_handle only ever answers a decoded
 * request with 0 or KVW_EINVAL; every reply it makes encodes (the program would
 * send it); the registered count never exceeds the expected count; a reply
 * carries the request's room and the bootstrap's epoch.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "roles/bootstrap/boot.h"
#include "wire/frame.h"

#define NMAX FUZZ_NMAX
#define EPOCH 0x1234u
#define MAX_MSGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct frame_out out;
	struct boot *b = boot_open(EPOCH, NULL, 0);
	size_t off = 0;
	int n;

	if (!b)
		abort();
	for (int k = 0; k < MAX_MSGS; k++) {
		struct frame_part parts[NMAX];
		uint8_t *mem[NMAX] = { 0 };
		struct frame_msg req, reply;
		char err[256];
		int rc;

		n = fuzz_cut(data, size, &off, 0, parts, mem);
		if (n < 0)
			break;
		if (frame_decode(parts, (size_t)n, &req, err, sizeof err) == 0) {
			rc = boot_handle(b, &req, &reply, err, sizeof err);
			if (rc != 0 && rc != KVW_EINVAL)
				abort();
			if (rc == 0) {
				if (frame_encode(&reply, &out, err, sizeof err) != 0)
					abort(); /* the program could not send it */
				if (reply.hdr.room != req.hdr.room ||
				    reply.hdr.epoch != EPOCH)
					abort();
			}
			if (boot_expected(b) && boot_registered(b) > boot_expected(b))
				abort();
		}
		for (int i = 0; i < n; i++)
			free(mem[i]);
	}
	boot_close(&b);
	return 0;
}
