/*
 * tcp_proto.h - the tcp transport's byte protocol, shared by the prefill
 * side (xport_tcp.c) and the decode's sink (tcp_sink.c). Everything is
 * little-endian and packed field by field; nothing is sent as a struct.
 *
 *   connect:  sink -> client  CHALLENGE magic "KVTC" u32 | version u16
 *                                    | 0 u16 | nonce 16 bytes          (24)
 *             client -> sink  HELLO  magic "KVTH" u32 | version u16 | 0 u16
 *                                    | mac 32 bytes (tcp_auth.h)       (40)
 *             sink -> client  WELCOME magic "KVTW" u32 | status u32    (8)
 *   a batch:  client -> sink  BATCH  magic "KVTB" u32 | ncopies u32
 *                                    | batch id u64 | room u64
 *                                    | total u64 | reserved 0 u64     (40)
 *                             then ncopies x (dst_off u64 | len u64)
 *                             then `total` payload bytes, copy by copy
 *                             then the payload's xxh3-64 u64         (8)
 *             sink -> client  ACK    magic "KVTA" u32 | status u32
 *                                    | batch id u64                    (16)
 *
 * The sink checks the whole copy list against its pool before it reads a
 * payload byte; an ACK with status OK means every byte of the batch is in
 * decode memory and matched the checksum. The checksum follows the
 * payload so that the sender can hash each part right after it sent it
 * (still in the cache) and the sink each part as it lands. The descriptor a decode sends in
 * REGISTER: magic "KVTD" u32 | version u16 | port u16 | pool size u64
 * | secret 16 | host length u16 | host bytes.
 */
#ifndef KVW_TCP_PROTO_H
#define KVW_TCP_PROTO_H

#include <stdint.h>

#include "le.h"

#define TCP_VERSION 3u
#define TCP_HELLO_LEN 40u
#define TCP_CHALLENGE_LEN 24u
#define TCP_NONCE_LEN 16u
#define TCP_WELCOME_LEN 8u
#define TCP_BATCH_LEN 40u
#define TCP_COPY_LEN 16u
#define TCP_ACK_LEN 16u
#define TCP_TRAILER_LEN 8u
#define TCP_SECRET_LEN 16u
#define TCP_DESC_FIXED 34u /* descriptor bytes before the host */
#define TCP_HOST_MAX 255u
#define TCP_MAX_COPIES 4096u /* copies in one batch (a worker sends 256) */

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
	TCP_SECRET = 4,    /* WELCOME: wrong secret, connection closed */
	TCP_DEVICE = 5,    /* landed, but the copy on to the decode's GPU
			    * failed (cuda_stage.h): room fails */
	TCP_DEST = 6,      /* a copy outside the pages the decode granted
			    * the room: nothing written, room fails */
};

#endif
