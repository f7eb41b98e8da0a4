/*
 * shape.c - model shape options and the layouts they imply; see shape.h.
 */
#include "shape.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout.h"
#include "plan.h"

void shape_default(struct shape *s)
{
	*s = (struct shape){
		.layers = 32, .draft_layers = 0, .page_tokens = 16,
		.kv_heads = 8, .head_dim = 128, .dtype_bytes = 2,
		.pages = 512, .aux_slots = 256, .naux = 1,
		.aux_bytes = { 64 }, .mla = 0,
	};
}

static int parse_u32(const char *v, uint32_t min, uint32_t max, uint32_t *out)
{
	char *end;
	unsigned long long x;

	if (!v || !*v)
		return -1;
	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno || *end || v[0] == '-' || x < min || x > max)
		return -1;
	*out = (uint32_t)x;
	return 0;
}

/* The valued shape options; "mla" (no value) is handled on its own. */
static const struct {
	const char *name;
	size_t off;
	uint32_t min, max;
} opts[] = {
	{ "layers", offsetof(struct shape, layers), 1, 4096 },
	{ "draft-layers", offsetof(struct shape, draft_layers), 0, 64 },
	{ "page-tokens", offsetof(struct shape, page_tokens), 1, 4096 },
	{ "heads", offsetof(struct shape, kv_heads), 1, 1024 },
	{ "head-dim", offsetof(struct shape, head_dim), 1, 65536 },
	{ "dtype-bytes", offsetof(struct shape, dtype_bytes), 1, 8 },
	{ "pages", offsetof(struct shape, pages), 1, 1u << 22 },
	{ "aux-slots", offsetof(struct shape, aux_slots), 1, 1u << 20 },
};
#define NOPTS (sizeof opts / sizeof opts[0])
#define AUX_MAX_BYTES (1u << 20)

/* The options past the numeric ones, in shape_flags' order. */
static const char *const more[] = { "aux-bytes", "state", "kv-layout",
				    "mla" };
#define NMORE (sizeof more / sizeof more[0])

static const char *const kv_layouts[SHAPE_NKV_LAYOUTS] = {
	[SHAPE_KV_SGLANG] = "sglang", [SHAPE_KV_VLLM] = "vllm",
	[SHAPE_KV_VLLM_BLOCKS] = "vllm-blocks",
};

const char *shape_option_name(unsigned i, int *takes_value)
{
	*takes_value = i < NOPTS + NMORE - 1;
	return i < NOPTS ? opts[i].name : i < NOPTS + NMORE ? more[i - NOPTS]
							    : NULL;
}

/* Calls each(item, i, ctx) for the comma-separated items of value in
 * order: their count, or -1 for more than max, an empty or over-long item
 * or one that each() refuses (non-zero). */
static int comma_items(const char *value, uint32_t max,
		       int (*each)(const char *item, uint32_t i, void *ctx),
		       void *ctx)
{
	char item[64];
	const char *at = value ? value : "";

	for (uint32_t n = 0;; n++) {
		size_t len = strcspn(at, ",");

		if (n == max || len == 0 || len >= sizeof item)
			return -1;
		memcpy(item, at, len);
		item[len] = '\0';
		if (each(item, n, ctx))
			return -1;
		if (at[len] == '\0')
			return (int)n + 1;
		at += len + 1;
	}
}

static const char *const state_kinds[KVW_NSTATE_KINDS] = {
	[KVW_STATE_SLOT] = "slot", [KVW_STATE_PAGED] = "paged",
	[KVW_STATE_EXACT] = "exact",
};
#define STATE_MAX_ROWS (1u << 22)
#define STATE_MAX_BYTES (1u << 30)
#define STATE_MAX_LAYERS 0xFFFFu /* a buffer's index: KVW_STATE_LAYER */

/* One "KIND:ROWS:BYTES[:rep][:layers=N]" of --state into specs[i]; 0 or
 * -1. */
static int state_item(const char *item, uint32_t i, void *specs)
{
	char kind[8];
	unsigned long long rows, bytes, layers = 0;
	int used = 0, rep;

	if (sscanf(item, "%7[a-z]:%llu:%llu%n", kind, &rows, &bytes,
		   &used) != 3 || rows == 0 || rows > STATE_MAX_ROWS ||
	    bytes == 0 || bytes > STATE_MAX_BYTES)
		return -1;
	rep = strncmp(item + used, ":rep", 4) == 0 &&
	      (item[used + 4] == '\0' || item[used + 4] == ':');
	used += rep ? 4 : 0;
	if (item[used] != '\0') {
		const char *d = item + used + 8;
		char *end;

		if (strncmp(item + used, ":layers=", 8) != 0 ||
		    !isdigit((unsigned char)*d))
			return -1;
		errno = 0;
		layers = strtoull(d, &end, 10);
		if (*end != '\0' || errno || layers == 0 ||
		    layers > STATE_MAX_LAYERS)
			return -1;
	}
	for (uint32_t k = 0; k < KVW_NSTATE_KINDS; k++)
		if (strcmp(kind, state_kinds[k]) == 0) {
			((struct kvw_state_spec *)specs)[i] =
				(struct kvw_state_spec){
					.kind = k, .rows = (uint32_t)rows,
					.bytes = (uint32_t)bytes,
					.replicated = (uint32_t)rep,
					.layers = (uint32_t)layers };
			return 0;
		}
	return -1;
}

/* "--state none" or "--state KIND:ROWS:BYTES[:rep][:layers=N],...": the
 * state components; *s is changed only when the whole list is good. */
static int state_option(struct shape *s, const char *value, char *err,
			size_t errlen)
{
	struct kvw_state_spec c[KVW_MAX_STATE] = { 0 };
	int n = value && strcmp(value, "none") == 0
			? 0 : comma_items(value, KVW_MAX_STATE, state_item, c);

	if (n < 0)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"--state: want none, or 1 to %u components "
				"KIND:ROWS:BYTES[:rep][:layers=N] separated "
				"by commas (KIND slot, paged or exact; ROWS in "
				"[1, %u], BYTES in [1, %u], N in [1, %u]), got "
				"'%s'", KVW_MAX_STATE, STATE_MAX_ROWS,
				STATE_MAX_BYTES, STATE_MAX_LAYERS,
				value ? value : "");
	s->nstate = (uint32_t)n;
	memcpy(s->state, c, sizeof c);
	return 1;
}

static int kv_layout_option(struct shape *s, const char *value, char *err,
			    size_t errlen)
{
	for (uint32_t i = 0; i < SHAPE_NKV_LAYOUTS; i++)
		if (value && strcmp(value, kv_layouts[i]) == 0) {
			s->kv_layout = i;
			return 1;
		}
	return kvw_errf(err, errlen, KVW_EINVAL,
			"--kv-layout: want sglang (every K, then every V), "
			"vllm (per layer K then V) or vllm-blocks (per "
			"layer, each block's K then its V), got '%s'",
			value ? value : "");
}

static int aux_item(const char *item, uint32_t i, void *bytes)
{
	return parse_u32(item, 1, AUX_MAX_BYTES, (uint32_t *)bytes + i);
}

/* "--aux-bytes N[,N...]": every metadata buffer's row bytes; *s is
 * changed only when the whole list is good. */
static int aux_option(struct shape *s, const char *value, char *err,
		      size_t errlen)
{
	uint32_t bytes[KVW_MAX_AUX] = { 0 };
	int n = comma_items(value, KVW_MAX_AUX, aux_item, bytes);

	if (n < 0)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"--aux-bytes: want 1 to %u integers in [1, %u] "
				"separated by commas (one per metadata "
				"buffer), got '%s'", KVW_MAX_AUX,
				AUX_MAX_BYTES, value ? value : "");
	s->naux = (uint32_t)n;
	memcpy(s->aux_bytes, bytes, sizeof bytes);
	return 1;
}

int shape_option(struct shape *s, const char *name, const char *value,
		 char *err, size_t errlen)
{
	if (strcmp(name, "mla") == 0) {
		s->mla = 1;
		return 1;
	}
	if (strcmp(name, "aux-bytes") == 0)
		return aux_option(s, value, err, errlen);
	if (strcmp(name, "kv-layout") == 0)
		return kv_layout_option(s, value, err, errlen);
	if (strcmp(name, "state") == 0)
		return state_option(s, value, err, errlen);
	for (size_t i = 0; i < NOPTS; i++) {
		if (strcmp(name, opts[i].name) != 0)
			continue;
		if (parse_u32(value, opts[i].min, opts[i].max,
			      (uint32_t *)((char *)s + opts[i].off))) {
			return kvw_errf(err, errlen, KVW_EINVAL,
					"--%s: want an integer in "
					"[%u, %u], got '%s'", name, opts[i].min,
					opts[i].max, value ? value : "");
		}
		return 1;
	}
	return 0;
}

/* "--aux-bytes A,B,..." into buf[len]: its length, or -1 when it does
 * not fit. */
static int aux_flag(const struct shape *s, const char *sep, char *buf,
		    size_t len)
{
	int n = snprintf(buf, len, "%s--aux-bytes", sep);

	for (uint32_t k = 0; k < s->naux && n >= 0 && (size_t)n < len; k++) {
		int m = snprintf(buf + n, len - (size_t)n, "%c%u",
				 k ? ',' : ' ', s->aux_bytes[k]);

		n = m < 0 ? -1 : n + m;
	}
	return n;
}

const char *shape_state_kind_str(uint32_t kind)
{
	return kind < KVW_NSTATE_KINDS ? state_kinds[kind] : "?";
}

/* "--state KIND:ROWS:BYTES[:rep][:layers=N],..." into buf[len] ("" without
 * state components): its length, or -1 when it does not fit. */
static int state_flag(const struct shape *s, const char *sep, char *buf,
		      size_t len)
{
	int n = s->nstate ? snprintf(buf, len, "%s--state", sep) : 0;

	for (uint32_t k = 0; k < s->nstate && n >= 0 && (size_t)n < len; k++) {
		const struct kvw_state_spec *c = &s->state[k];
		int m = snprintf(buf + n, len - (size_t)n, "%c%s:%u:%u%s",
				 k ? ',' : ' ',
				 shape_state_kind_str(c->kind),
				 c->rows, c->bytes, c->replicated ? ":rep" : "");

		n = m < 0 ? -1 : n + m;
		if (c->layers && n >= 0 && (size_t)n < len) {
			m = snprintf(buf + n, len - (size_t)n, ":layers=%u",
				     c->layers);
			n = m < 0 ? -1 : n + m;
		}
	}
	return n;
}

int shape_flags(const struct shape *s, char *buf, size_t len)
{
	size_t at = 0;
	int n;

	for (size_t i = 0; i < NOPTS + NMORE; i++) {
		const char *sep = at ? " " : "";

		if (i < NOPTS)
			n = snprintf(buf + at, len - at, "%s--%s %u", sep,
				     opts[i].name,
				     *(const uint32_t *)((const char *)s +
							 opts[i].off));
		else if (i == NOPTS)
			n = aux_flag(s, sep, buf + at, len - at);
		else if (i == NOPTS + 1)
			n = state_flag(s, sep, buf + at, len - at);
		else if (i == NOPTS + 2)
			n = snprintf(buf + at, len - at, "%s--kv-layout %s",
				     sep, s->kv_layout < SHAPE_NKV_LAYOUTS
						  ? kv_layouts[s->kv_layout]
						  : "?");
		else
			n = s->mla ? snprintf(buf + at, len - at, "%s--mla",
					      sep)
				   : 0;
		if (n < 0 || (size_t)n >= len - at)
			return KVW_ERANGE;
		at += (size_t)n;
	}
	return (int)at;
}

const char *shape_usage(void)
{
	return "model shape: --layers N --draft-layers N --page-tokens N "
	       "--heads N --head-dim N --dtype-bytes N --pages N "
	       "--aux-slots N --aux-bytes N[,N...] "
	       "--state none|KIND:ROWS:BYTES[:rep][:layers=N][,...] "
	       "--kv-layout sglang|vllm|vllm-blocks --mla";
}

void shape_model(const struct shape *s, const struct kvw_topo *t,
		 const struct kvw_coord *c, struct kvw_model *m)
{
	uint32_t tp = t->tp ? t->tp : 1;

	(void)c;
	memset(m, 0, sizeof *m);
	m->page_tokens = s->page_tokens;
	m->dtype = s->dtype_bytes;
	m->total_kv_heads = s->mla ? 1 : s->kv_heads;
	/* Fewer heads than ranks: each rank holds one replicated head. */
	m->rank_kv_heads = s->mla ? 1 : (s->kv_heads >= tp ? s->kv_heads / tp : 1);
	m->head_bytes = s->head_dim * s->dtype_bytes;
	m->flags = s->mla ? KVW_MODEL_MLA : 0;
}

void shape_layers(const struct shape *s, const struct kvw_topo *t,
		  const struct kvw_coord *c, uint32_t *first, uint32_t *count)
{
	kvw_pp_share(s->layers, t->pp, c->pp, first, count);
}

void shape_state_layers(const struct shape *s, uint32_t comp,
			const struct kvw_topo *t, const struct kvw_coord *c,
			uint32_t *first, uint32_t *count)
{
	kvw_pp_share(comp < s->nstate && comp < KVW_MAX_STATE &&
				     s->state[comp].layers
			     ? s->state[comp].layers
			     : s->layers,
		     t->pp, c->pp, first, count);
}

int shape_layout(const struct shape *s, const struct kvw_topo *t,
		 const struct kvw_coord *c, int with_draft,
		 struct kvw_buf *out, uint32_t cap, uint32_t *n,
		 uint64_t *pool_bytes, char *err, size_t errlen)
{
	struct kvw_model m;
	struct layout_spec spec;
	struct kvw_state_spec st[KVW_MAX_STATE];
	uint32_t st_first[KVW_MAX_STATE], st_count[KVW_MAX_STATE];

	shape_model(s, t, c, &m);
	/* A member refuses a shape that no peer could exchange with. */
	if (!s->mla && t->tp && !plan_heads_split(s->kv_heads, t->tp))
		return kvw_errf(err, errlen, KVW_EINVAL,
				"%u kv heads do not split over tp %u (need a "
				"multiple or a divisor of it)",
				s->kv_heads, t->tp);
	memset(&spec, 0, sizeof spec);
	shape_layers(s, t, c, &spec.first_layer, &spec.layers);
	spec.draft_layers = with_draft ? s->draft_layers : 0;
	spec.mla = s->mla;
	spec.per_layer = s->kv_layout == SHAPE_KV_VLLM;
	spec.block_major = s->kv_layout == SHAPE_KV_VLLM_BLOCKS;
	spec.item_len = layout_item_len(&m);
	spec.pages = s->pages;
	spec.aux_slots = s->aux_slots;
	spec.naux = s->naux;
	spec.aux_item_lens = s->aux_bytes;
	/* A sharded component's row is split over TP like the heads: each
	 * rank holds bytes / tp of it; a replicated one the whole row. */
	for (uint32_t i = 0; i < s->nstate && i < KVW_MAX_STATE; i++) {
		uint32_t tp = t->tp ? t->tp : 1;

		st[i] = s->state[i];
		shape_state_layers(s, i, t, c, &st_first[i], &st_count[i]);
		if (st[i].replicated)
			continue;
		if (st[i].bytes % tp)
			return kvw_errf(err, errlen, KVW_EINVAL,
					"state component %u: rows of %u bytes "
					"do not split over tp %u (add :rep "
					"when every rank holds the whole row)",
					i, st[i].bytes, tp);
		st[i].bytes /= tp;
	}
	spec.nstate = s->nstate;
	spec.state = st;
	spec.state_first = st_first;
	spec.state_count = st_count;
	if (spec.item_len == 0)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"page of %u tokens x %u heads x %u bytes "
				"does not fit 32 bits", m.page_tokens,
				m.rank_kv_heads, m.head_bytes);
	return layout_make(&spec, out, cap, n, pool_bytes, err, errlen);
}

int shape_parse_quad(const char *s, uint32_t fill, uint32_t out[4])
{
	char buf[128], *save = NULL, *tok;
	int i = 0;

	if (!s || strlen(s) >= sizeof buf)
		return KVW_EINVAL;
	for (int k = 0; k < 4; k++)
		out[k] = fill;
	strcpy(buf, s);
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (i == 4 || parse_u32(tok, 0, 1u << 20, &out[i]))
			return KVW_EINVAL;
		i++;
	}
	return i >= 1 ? 0 : KVW_EINVAL;
}
