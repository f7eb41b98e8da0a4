/*
 * tcp_proto.h - the tcp transport's byte protocol, version 4 (the full
 * contract, with the MAC's exact definition: docs/TCP-V4.md), shared
 * by the prefill side (xport_tcp.c, tcp_client.c) and the decode's sink
 * (tcp_sink.c). Everything is little-endian and packed field by field.
 *
 *   connect:  sink -> client  CHALLENGE "KVTC" u32 | version u16 | 0 u16
 *                                    | nonce_s 16                      (24)
 *             client -> sink  HELLO "KVTH" u32 | version u16 | flags u16
 *                                    | nonce_c 16 | fingerprint 8
 *                                    | mac 32 (tcp_auth.h)             (64)
 *             sink -> client  WELCOME "KVTW" u32 | status u32
 *                                    | fingerprint 8 | mac 32          (48)
 *   a batch:  client -> sink  "KVTB" u32 | ncopies u32 | batch id u64
 *                                    | room u64 | incarnation u64
 *                                    | total u64 | seq u64 | flags u32
 *                                    | 0 u32                           (56)
 *                             ncopies x (dst_off u64 | len u64)
 *                             head tag 16 (over header and copies)
 *                             `total` payload bytes, copy by copy
 *                             body tag 16 (over head tag and payload)
 *             sink -> client  ACK "KVTA" u32 | status u32 | batch id u64
 *                                    | seq u64 | tag 16                (40)
 *
 * Tags (tcp_mac.h) are keyed per connection and direction and bound to a
 * sequence number that counts batches (ACKs) on the connection from 0, so
 * a replayed, reordered, dropped or spliced batch or ACK is caught. The
 * sink checks the head tag before a payload byte is written and the body
 * tag before the ACK; an ACK OK means every byte of the batch is in
 * decode memory, as sent. The descriptor a decode sends in REGISTER:
 * "KVTD" u32 | version u16 | port u16 | pool size u64 | secret 16 | host
 * length u16 | host bytes.
 */
#ifndef KVW_TCP_PROTO_H
#define KVW_TCP_PROTO_H

#include <stdint.h>

#include "base/le.h"

#define TCP_VERSION 4u
#define TCP_HELLO_LEN 64u
#define TCP_CHALLENGE_LEN 24u
#define TCP_NONCE_LEN 16u
#define TCP_WELCOME_LEN 48u
#define TCP_BATCH_LEN 56u
#define TCP_COPY_LEN 16u
#define TCP_ACK_LEN 40u
#define TCP_ACK_SIGNED 24u /* ACK bytes under its tag */
#define TCP_TAG_BYTES 16u /* head, body and ACK tags */
#define TCP_SECRET_LEN 16u
#define TCP_DESC_FIXED 34u /* descriptor bytes before the host */
#define TCP_HOST_MAX 255u
#define TCP_MAX_COPIES 4096u /* copies in one batch (a worker sends 256) */

/* HELLO flags. */
#define TCP_F_ENCRYPT 1u /* the payload travels AES-256-GCM encrypted */

#define TCP_MAGIC_HELLO 0x4854564Bu   /* "KVTH" as bytes K V T H */
#define TCP_MAGIC_CHALLENGE 0x4354564Bu /* "KVTC" */
#define TCP_MAGIC_WELCOME 0x5754564Bu /* "KVTW" */
#define TCP_MAGIC_BATCH 0x4254564Bu   /* "KVTB" */
#define TCP_MAGIC_ACK 0x4154564Bu     /* "KVTA" */
#define TCP_MAGIC_DESC 0x4454564Bu    /* "KVTD" */

/* ACK and WELCOME statuses. */
enum tcp_status {
	TCP_OK = 0,
	TCP_BAD = 1,       /* malformed or out of the pool: connection closed */
	TCP_CHECKSUM = 2,  /* bytes landed but did not match: room fails */
	TCP_NOT_LIVE = 3,  /* the room is not live at the decode: discarded */
	TCP_SECRET = 4,    /* WELCOME: wrong secret or keys, closed */
	TCP_DEVICE = 5,    /* landed, but the copy on to the decode's GPU
			    * failed (mem.h): room fails */
	TCP_DEST = 6,      /* a copy outside the pages the decode granted
			    * the room's incarnation: nothing written, the
			    * room fails (integrity) */
	TCP_INTEGRITY = 7, /* a tag or seq was wrong: connection dropped,
			    * the client redials and resends */
};

#endif
