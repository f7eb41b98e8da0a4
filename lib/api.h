/*
 * api.h - what an inference engine links against to move KV through a
 * local kvwire control process (kv-sender on a prefill rank, kv-receiver on
 * a decode rank). A struct kvw_engine holds three things: a ZMQ DEALER
 * connected to the control process's engine socket (commands go out, no
 * replies come back), the control process's room table mapped read-only
 * (progress is read from it with plain loads, no syscall), and the KV pool
 * file mapped read-write (the engine's KV memory: prefill writes the pages it
 * sends, decode reads the pages it received).
 *
 * Threads: one kvw_engine belongs to one thread at a time (a ZMQ socket is
 * not thread-safe). kvw_poll only reads shared memory and may be called
 * from any thread while another sends, as long as the engine stays open.
 * Every engine of a process shares one ZMQ context (one I/O thread); the
 * last kvw_engine_close terminates it.
 *
 * Errors: every call returns 0 (or a value >= 0 where stated) or a
 * negative KVW_E* (lib/base/kvw.h). Sends never block: KVW_EAGAIN means the
 * control process's queue is full (or it is not up yet and the queue is
 * full); nothing was queued and the caller retries later. KVW_ESYS means the
 * socket or its context is gone: the engine must be closed.
 *
 * The top of lib/: this is the one public header. libkvwire.so is built
 * with hidden visibility and exports only what is marked KVW_API here and
 * in base/kvw.h (its codes' names); tests/api.exports pins the list.
 */
#ifndef KVW_API_H
#define KVW_API_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvw.h"

struct kvw_engine; /* opaque */

/* One room as the table shows it (a snapshot; fields may be from slightly
 * different instants, state and generation are consistent). */
struct kvw_room_status {
	uint32_t state;          /* enum kvw_state (KVW_CLEARED after CLEAR) */
	uint32_t reason;         /* enum kvw_reason; set when Failed */
	uint32_t generation;     /* incarnation of the room id in the table */
	uint32_t pages_expected; /* decode: pages of RECV_BEGIN */
	uint32_t pages_done;     /* pages moved so far (where counted) */
	uint32_t flags;          /* KVW_ROOM_F_* */
	/* Tokens the decode holds already from its prefix cache (SGLang's
	 * decode_prefix_len): decode, its RECV_BEGIN's; prefill, the
	 * XFER_INFO's, once the room is WaitingForInput: the prefill engine
	 * sends only the pages after them (SEND_BEGIN counts those). */
	uint32_t prefix_tokens;
	uint64_t bytes;          /* bytes moved so far (where counted) */
};

/* Room flags (the room table's RTAB_F_* bits, and KVW_ROOM_F_SENDING). */
#define KVW_ROOM_F_ARMED 0x1u      /* abort sent, waiting for every ack */
#define KVW_ROOM_F_RELEASABLE 0x2u /* every target acked the abort: the
				    * destination pages may be reused */
#define KVW_ROOM_F_DUMMY 0x4u
/* Prefill: jobs of the room are still at the sender's workers, which read
 * its source pages until each job has landed or failed (kvw_poll sets it
 * from the table's count of outstanding jobs; not a table bit). A room
 * that is terminal (or Cleared) without it is never read again: its
 * source pages may be reused. Wait for this, not for the decode's
 * RELEASABLE: on tcp a decode may release an aborted room while a batch
 * is still being sent (nothing more lands in its pages; issue 29). */
#define KVW_ROOM_F_SENDING 0x40000000u

/* Connects to the control process. engine_endpoint: its engine socket
 * (ipc://...); table_path: its room table (must exist: the control creates
 * it before binding); pool_path: its KV pool file (a name or path as
 * pool_path_for). The connect itself does not wait for the control process.
 * On success returns 0 and *out is the caller's, freed with
 * kvw_engine_close. On failure *out is NULL, err says why, and the return
 * is KVW_EINVAL (NULL or over-long argument), KVW_ENOENT (table or pool
 * missing), KVW_EVERSION (not a room table of this version), KVW_ENOMEM or
 * KVW_ESYS. err may be NULL. */
KVW_API int kvw_engine_open(const char *engine_endpoint, const char *table_path,
		    const char *pool_path, struct kvw_engine **out, char *err,
		    size_t errlen);

/* Closes the socket (unsent commands are dropped), unmaps the table and the
 * pool, frees *e and sets *e = NULL. Accepts NULL and *e == NULL. The
 * control process and its files are untouched. */
KVW_API void kvw_engine_close(struct kvw_engine **e);

/* The mapped pool: base address and size in bytes. The mapping belongs to
 * the engine and is valid until kvw_engine_close. */
KVW_API void *kvw_pool_base(const struct kvw_engine *e);
KVW_API uint64_t kvw_pool_size(const struct kvw_engine *e);

/* Registers the engine's KV cache in GPU memory (SGLang's kv_data_ptrs,
 * kv_data_lens, kv_item_lens: one buffer per layer and K/V, in the pool
 * layout's order) on CUDA device `device`: buffer i stands for the pool's
 * bytes from the sum of lens before it; pool bytes past the last buffer
 * (AUX) stay in the mapped host pool. Each buffer's allocation is exported
 * as a CUDA IPC handle into a record beside the pool
 * (kvwire.<name>.gpu), which the cuda transport's copiers open once per
 * registration; registering again replaces it (a new epoch), and
 * kvw_engine_close removes it. The memory must stay allocated until then.
 * Every argument is checked before CUDA is loaded: KVW_EINVAL for n of 0
 * or over 1024, a NULL array or pointer, a zero length or item length, a
 * length that is not a multiple of its item length, a buffer that
 * overflows the address space or overlaps another, or buffers larger than
 * the pool's layout together. Then KVW_ENODEV ("cuda: not available:
 * ..."), or KVW_ESYS for a CUDA or file error. err may be NULL. */
KVW_API int kvw_register_gpu_pool(struct kvw_engine *e, int device,
				  const uint64_t *ptrs, const uint64_t *lens,
				  const uint32_t *item_lens, uint32_t n,
				  char *err, size_t errlen);

/* Host memory the group's processes can map (docs/ARCHITECTURE.md,
 * "Engine memory"): size bytes (rounded up to whole pages), zeroed, kept
 * until kvw_free or kvw_engine_close. An engine that keeps its KV cache in
 * host memory allocates it here and then registers it in place with
 * kvw_register_host. 0 and *ptr; KVW_EINVAL (size 0 or past the address
 * space), KVW_ENOMEM (no room in /dev/shm), KVW_ESYS. err may be NULL. */
KVW_API int kvw_alloc(struct kvw_engine *e, uint64_t size, void **ptr,
		      char *err, size_t errlen);

/* Gives back an allocation of kvw_alloc (ptr as it returned it). 0;
 * KVW_ENOENT (not one of e's); KVW_ESTATE (a registered buffer lies in
 * it: kvw_unregister_host first). */
KVW_API int kvw_free(struct kvw_engine *e, void *ptr);

/* One buffer of the engine's KV memory as an engine describes it
 * (SGLang's kv_data_ptrs[i], kv_data_lens[i], kv_item_lens[i]): page p
 * of it is at ptr + p * item_len. layer_id and role name the buffer of
 * the group's layout it holds (kvw_pool_layout: the planner pairs buffers
 * by them). */
struct kvw_host_buf {
	uint64_t ptr;
	uint64_t len;
	uint32_t item_len;
	uint32_t layer_id;
	uint32_t role; /* enum kvw_role */
};

/* Registers the engine's own host memory in place: each of bufs[0..n)
 * holds the buffer of `layout` (this rank's, from kvw_pool_layout) with
 * its layer id and role, so kvwire's copies read (prefill) and write
 * (decode) the engine's bytes where they are; layout buffers not named
 * stay in the pool file. Every buffer must come from kvw_alloc. Replaces
 * the previous registration (GPU or host; kvw_register_gpu_pool replaces
 * this one in turn); the group's processes lay the memory over their
 * mappings of the pool before their next batch, and kvw_pool_base() shows
 * it too. kvw_engine_close takes it back. Refused with
 * KVW_EINVAL and the reason in err: n of 0 or over the layout's count, a
 * NULL array, a zero length or item length, a length that is not a
 * multiple of its item length, a (layer, role) the layout lacks or named
 * twice, an item length other than the layout's, fewer pages than the
 * layout's, two buffers on the same bytes, memory that kvw_alloc did not
 * give (err says how to allocate instead), or buffers whose pool bytes
 * are not whole pages of memory (4096 bytes here; err names them).
 * KVW_ESYS: the record. */
KVW_API int kvw_register_host(struct kvw_engine *e,
			      const struct kvw_buf *layout, uint32_t nlayout,
			      const struct kvw_host_buf *bufs, uint32_t n,
			      char *err, size_t errlen);

/* Takes back what kvw_register_host registered: the pool file's own bytes
 * serve again (as zeros). 0, or KVW_ENOENT when nothing is registered. */
KVW_API int kvw_unregister_host(struct kvw_engine *e);

/* The last send error's text ("" after a success); owned by e. */
KVW_API const char *kvw_engine_error(const struct kvw_engine *e);

/* Commands held back, sent in one burst: an engine that gives its
 * commands one at a time (a scheduler step's SEND_CHUNKs, BEGINs and
 * CLEARs over many rooms) wakes its ZMQ I/O thread and the control
 * process for each; held and flushed together they cross in one wake-up
 * of each. With on = 1 every later command (kvw_send_*, kvw_recv_*,
 * kvw_abort, kvw_clear) is checked and encoded as now (its page list
 * copied: the caller's arrays are free again on return) and held, in
 * order, until kvw_engine_flush or kvw_engine_hold(e, 0); its return is
 * then 0 (held), a refusal as without the hold, or KVW_EAGAIN (nothing
 * queued) when API_HOLD_MAX bytes are held and the control's queue takes
 * none of them. A held command is not sent: no poll shows its effect and
 * its room's deadlines do not start until it is flushed. on = 0 ends the
 * hold and flushes; what that flush cannot send stays queued, and every
 * later command goes behind it (sent as far as the queue takes them, the
 * rest with the next command or flush), so the order holds.
 * kvw_engine_close sends what is queued as far as the queue takes it. 0,
 * or KVW_EAGAIN / KVW_ESYS as kvw_engine_flush. */
KVW_API int kvw_engine_hold(struct kvw_engine *e, int on);

/* Sends every held command, oldest first: 0, KVW_EAGAIN (the control's
 * queue is full: the rest stays held, in order; flush again) or KVW_ESYS
 * (err says why; the rest stays held). 0 when nothing is held. */
KVW_API int kvw_engine_flush(struct kvw_engine *e);

/* How many commands are held. */
KVW_API uint32_t kvw_engine_held(const struct kvw_engine *e);

/* ---- prefill side (kv-sender) ---------------------------------------- */

/* SEND_BEGIN: the room will send num_pages pages and aux slot aux_slot. */
KVW_API int kvw_send_begin(struct kvw_engine *e, uint64_t room, uint32_t num_pages,
		   uint32_t aux_slot);

/* SEND_CHUNK: the next n source pages of the room (pages[0..n) are copied
 * into the message before return; the caller keeps the array). is_last
 * marks the room's final chunk (the aux slot goes with it); n may be 0 only
 * for a last chunk. KVW_EINVAL when n > KVW_MAX_PAGES, pages is NULL with
 * n > 0, or n == 0 with is_last == 0. */
KVW_API int kvw_send_chunk(struct kvw_engine *e, uint64_t room, const uint32_t *pages,
		   uint32_t n, int is_last);

/* The rows of one state component a room names (struct kvw_state_spec,
 * docs/ARCHITECTURE.md "State components"): a request's slot (slot
 * kind), its pages of the component's pool (paged) or its positions
 * (exact). n of 0: none of this component. */
struct kvw_state_rows {
	const uint32_t *rows;
	uint32_t n;
};

/* The room's last SEND_CHUNK (as kvw_send_chunk with is_last) with its
 * state rows: state[i] the prefill engine's rows of component i, nstate
 * at most KVW_MAX_STATE, each at most KVW_MAX_STATE_IDX rows (copied
 * before return). They move with the room's last pages and its metadata
 * rows, each to the rows the decode named for that component: one row a
 * side (slot), the first min(both) rows (paged, a difference warned), or
 * equal lists (exact); anything else, or a row outside its buffer, fails
 * the room (bad index) before a byte of its last job moves. A component
 * the decode names no rows of is not sent. KVW_EINVAL for more lists or
 * rows than the caps, or a NULL list with rows; state rows sent to a
 * group without state components fail the room. */
KVW_API int kvw_send_last_state(struct kvw_engine *e, uint64_t room,
				const uint32_t *pages, uint32_t n,
				const struct kvw_state_rows *state,
				uint32_t nstate);

/* ---- decode side (kv-receiver) --------------------------------------- */

/* RECV_BEGIN: receive the room from the prefill instance whose bootstrap is
 * bootstrap_ep (at most KVW_MAX_STR bytes), dp group prefill_dp_rank, into
 * destination pages pages[0..n) (copied before
 * return; n may be 0 for a room of aux data only) and aux slot aux_slot.
 * prefix_tokens: tokens of the request this decode holds already (its
 * prefix cache; 0 for none), a whole number of pages: the prefill is told
 * and sends only the pages after them, so pages[] lists the pages after
 * the prefix (none on a full hit: the metadata still comes). A prefix
 * that is not whole pages fails the room (bad index).
 * n == 0 with aux_slot KVW_NO_AUX: a room that asks nothing of its
 * prefill ranks (each hears of it as a dummy destination: no page and no
 * aux row of this decode is written), only to tell them of an abort: for
 * a request the engine aborts before it gave it pages and a metadata row
 * (SGLang's abort() after init()), kvw_abort right after; their rooms then
 * fail (aborted) now, not at their bootstrap timeout. It never succeeds.
 * KVW_EINVAL when n > KVW_MAX_PAGES, pages is NULL with n > 0, or the
 * bootstrap address is NULL, empty or too long. */
#define KVW_NO_AUX 0xFFFFFFFFu /* kvw_recv_begin: no aux slot (tell only) */

KVW_API int kvw_recv_begin(struct kvw_engine *e, uint64_t room,
		   const char *bootstrap_ep, uint32_t prefill_dp_rank,
		   const uint32_t *pages, uint32_t n, uint32_t aux_slot,
		   uint32_t prefix_tokens);

/* kvw_recv_begin with the rows of each state component the room's state
 * lands in (state[i]: component i; the caps of kvw_send_last_state).
 * kv-receiver checks them against its layout before any prefill rank
 * hears of the room: a list for a component the layout lacks, a row
 * outside its component or more than one row of a slot component fails
 * the room (bad index). Each prefill rank that holds the component sends its rows
 * there (a replicated one: one prefill rank per decode rank); Success
 * means they landed. */
KVW_API int kvw_recv_begin_state(struct kvw_engine *e, uint64_t room,
				 const char *bootstrap_ep,
				 uint32_t prefill_dp_rank,
				 const uint32_t *pages, uint32_t n,
				 uint32_t aux_slot, uint32_t prefix_tokens,
				 const struct kvw_state_rows *state,
				 uint32_t nstate);

/* RECV_ABORT: fail the room (reason aborted) and ask every prefill target
 * to stop; the room's flags show KVW_ROOM_F_RELEASABLE once all acked (a
 * room whose prefill ranks were still being looked up: once they are known
 * and told). Clear only after that, or a prefill room waiting for this one
 * may not hear of it. */
KVW_API int kvw_abort(struct kvw_engine *e, uint64_t room);

/* ---- both sides -------------------------------------------------------- */

/* CLEAR: the engine is done with the room; the control process drops its
 * state (a room still active is failed first). */
KVW_API int kvw_clear(struct kvw_engine *e, uint64_t room);

/* Reads the room's current incarnation from the mapped table: no syscall,
 * no message. Returns 0 and fills *st; KVW_ENOENT when the room is not in
 * the table (its BEGIN not processed yet: "pending"); KVW_EAGAIN when the
 * owner is rewriting the slot right now (retry). *st is unchanged on
 * error.
 *
 * Only the incarnation of this engine's last BEGIN is reported: once the
 * engine sent CLEAR for a room id (and maybe a new BEGIN under it), the
 * incarnation the table showed when the CLEAR was sent, any incarnation
 * already over (Success, Failed) when the BEGIN was sent, and any Cleared
 * tombstone of the id are reported as KVW_ENOENT ("pending"), never as the
 * room's state, until the control process inserts the new one (a new
 * generation). An incarnation still live at BEGIN is the room's own (on
 * prefill a decode may open it before SEND_BEGIN). So poll through the
 * handle that sends BEGIN and CLEAR: another handle reads the table as it
 * is (Cleared tombstones included). A BEGIN without CLEAR of a room that
 * ended is refused by the control process and stays "pending". BEGIN and
 * CLEAR read the table once before they queue: KVW_EAGAIN (nothing
 * queued) also when its slot stayed mid-rewrite. */
KVW_API int kvw_poll(const struct kvw_engine *e, uint64_t room,
	     struct kvw_room_status *st);

/* kvw_poll of rooms[0..n) in one call (an engine polls every live room
 * each step; one call instead of n is what a binding's per-call cost
 * saves): rcs[i] gets what kvw_poll returns for rooms[i] and st[i] its
 * status where rcs[i] is 0 (untouched otherwise). A slot mid-rewrite is
 * read again a bounded number of times before KVW_EAGAIN is reported for
 * that room alone. Returns how many rooms were read (rcs[i] == 0), or
 * KVW_EINVAL (e NULL, n over INT32_MAX, or an array NULL with n > 0;
 * nothing written). */
KVW_API int kvw_poll_many(const struct kvw_engine *e, const uint64_t *rooms,
			  uint32_t n, struct kvw_room_status *st,
			  int32_t *rcs);

/* When the room's incarnation (the one kvw_poll reports) entered each
 * state, in CLOCK_MONOTONIC ns: enter_ns[s] for s in [0, KVW_NSTATES), 0
 * for a state it has not entered, and 0 throughout where the table does
 * not measure (kv-bench switching the measures off). A transfer's latency
 * on this side is enter_ns[KVW_SUCCESS] - enter_ns[KVW_WAITING] (the
 * table's own histogram measures the same). Returns 0, KVW_ENOENT or
 * KVW_EAGAIN as kvw_poll; KVW_EINVAL for NULL. */
KVW_API int kvw_room_times(const struct kvw_engine *e, uint64_t room,
			   uint64_t enter_ns[KVW_NSTATES]);

/* The epoch of the control process that owns the table now; it changes
 * when that process restarts (the restarted one fails every room that was
 * still active). A command accepted under one epoch whose room is still
 * missing (kvw_poll: KVW_ENOENT) under another was lost with the old
 * process: the engine should treat that room as failed. */
KVW_API uint64_t kvw_control_epoch(const struct kvw_engine *e);

/* Whether the control process is still there, without a message: 0 (its
 * table is in place and its process runs), KVW_EAGAIN (the table is in
 * place but no process owns it now: it may be restarting, and a group
 * supervisor restarts it within a second or two), or KVW_ENOENT (the table
 * file was removed or replaced: the group is gone; close the engine). One
 * stat(2) and one kill(pid, 0). */
KVW_API int kvw_control_check(const struct kvw_engine *e);

/* The group of a run directory and its members' KV pool layout, as kv-up
 * planned them (lib/plan/group.h) and recorded them in DIR/endpoints: an
 * engine's bindings (python/kvwire) read them here and compute no naming
 * or layout rule of their own (issue 31). Neither call opens a socket. */

/* Members' roles in struct kvw_member. */
#define KVW_MEMBER_BOOTSTRAP 0u
#define KVW_MEMBER_PREFILL 1u
#define KVW_MEMBER_DECODE 2u
#define KVW_MEMBER_HEARTBEAT 3u

/* One member of a group: strings NUL-terminated, "" where the role has
 * none (a heartbeat has only its table). */
struct kvw_member {
	char name[64];
	uint32_t role;         /* KVW_MEMBER_* */
	struct kvw_topo topo;  /* 1,1,1,1 for bootstrap and heartbeat */
	struct kvw_coord rank;
	char listen[256];      /* control endpoint (bootstrap: its own) */
	char engine[256];      /* engine socket, ipc:// */
	char table[256];       /* room table */
	char pool[256];        /* KV pool file */
};

/* The model shape a group was started with (kv-up's shape flags). */
struct kvw_shape {
	uint32_t layers, draft_layers, page_tokens, kv_heads, head_dim;
	uint32_t dtype_bytes, pages, aux_slots;
	uint32_t mla; /* 1: one latent KV buffer per layer */
	/* naux metadata buffers of aux_slots rows, a row of buffer i being
	 * aux_bytes[i] bytes (--aux-bytes A,B,...); 1 to KVW_MAX_AUX */
	uint32_t naux;
	uint32_t aux_bytes[KVW_MAX_AUX];
	/* Where K and V lie (--kv-layout): 0 "sglang", every layer's K then
	 * every V; 1 "vllm", per layer its K then its V (vLLM's per-layer
	 * [2, blocks, block_size, heads, head_dim] tensor). */
	uint32_t kv_layout;
	/* State components (--state): nstate of KVW_MAX_STATE; each one
	 * buffer per layer of a rank's PP stage, after the draft layers'
	 * buffers and before the AUX buffers in kvw_pool_layout. */
	uint32_t nstate;
	struct kvw_state_spec state[KVW_MAX_STATE];
};

/* Reads DIR/endpoints (run_dir may also name the file): members in start
 * order into out[0..*n) and, when shape is not NULL, the group's shape
 * (the defaults where the file has no shape line). Returns 0; KVW_ENOMEM
 * when cap is too small (*n = members); KVW_ENOENT, KVW_EINVAL (a line the
 * format refuses) or KVW_ESYS with err saying which file and line. */
KVW_API int kvw_group_read(const char *run_dir, struct kvw_member *out,
			   uint32_t cap, uint32_t *n, struct kvw_shape *shape,
			   char *err, size_t errlen);

/* What kvw_pool_layout says of one rank besides its buffers. */
struct kvw_rank_layout {
	uint32_t first_layer;   /* its PP stage holds layers first_layer.. */
	uint32_t layers;        /* .. first_layer + layers - 1 */
	uint32_t rank_kv_heads; /* KV heads it holds (1 with MLA) */
	uint32_t nbufs;         /* buffers written (or needed) */
	uint64_t pool_bytes;    /* the pool size they need */
};

/* The KV pool layout of the rank at `rank` of `topo` (tp and pp are used)
 * for a group of `shape`: K buffers of its layers, then V (MHA; with
 * kv_layout 1, K and V layer by layer; MLA: one KV buffer per layer), then
 * draft layers' (decode only, when `decode` is
 * non-zero), then each state component's buffer per layer (role
 * KVW_ROLE_STATE, layer id KVW_STATE_LAYER(component, layer)), then the
 * AUX buffers (layer id = their index), back to back
 * from offset 0 (the layout
 * kv-sender and kv-receiver create their pools with). Returns 0 with
 * bufs[0..out->nbufs) and *out; KVW_ENOMEM when cap is too small
 * (out->nbufs = needed); KVW_EINVAL with err (kv heads that do not split
 * over topo->tp, a rank outside topo, sizes that overflow). */
KVW_API int kvw_pool_layout(const struct kvw_shape *shape,
			    const struct kvw_topo *topo,
			    const struct kvw_coord *rank, int decode,
			    struct kvw_buf *bufs, uint32_t cap,
			    struct kvw_rank_layout *out, char *err,
			    size_t errlen);

#endif
