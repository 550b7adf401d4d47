/* tokenizer_encode.c - text -> ids, step for step as HF `tokenizers` does it.
 *
 * 1. ill-formed UTF-8 -> U+FFFD; 2. added tokens are cut out (leftmost-longest, probing a
 * hash of contents by each distinct length); 3. every other segment is NFC-normalized when
 * asked and run through the pre-tokenizer pipeline (regex splits with HF's split
 * behaviors, ByteLevel); 4. each piece is merged by BPE with a binary heap ordered by
 * (merge rank, position), validating stale entries on pop, exactly like `tokenizers`'
 * Word::merge_all, so equal ranks and overlapping pairs resolve the same way.
 *
 * All scratch (pieces, symbols, heap) belongs to one call. The one shared mutable part is
 * the repeated-word cache (word bytes -> ids), behind a mutex that encode only ever
 * try-locks: a busy cache is skipped, never waited for, and a cached result is by
 * construction the result BPE would compute, so concurrency cannot change an encoding. */
#include <pthread.h>
#include <stdlib.h>
#include <utf8proc.h>
#include <xxhash.h>

#include "tokenizer_internal.h"

struct piece {
	const char *p;
	size_t len;
};

struct span {
	size_t s, e;
	bool match;
};

struct sym {
	int32_t id, prev, next;
	uint32_t len;
};

struct heap_ent {
	int32_t rank, pos, new_id;
	int32_t l_id, r_id; /* the pair when pushed: an entry is stale once either changed */
};

struct cache_ent {
	uint64_t h;     /* 0 = empty */
	uint32_t woff, wlen, ioff, n;
};

#define CACHE_SLOTS 262144u
#define CACHE_MAX_WORD 64

struct enc {
	const struct ds_tokenizer *t;
	bool specials_as_text;
	struct ds_err *err;
	int32_t *ids;
	size_t n_ids, cap_ids;
	struct piece *pa, *pb;
	size_t cap_pa, cap_pb;
	struct span *spans;
	size_t cap_spans;
	char **bufs; /* prefix-space copies, freed at the end of the segment */
	size_t n_bufs, cap_bufs;
	pcre2_match_data *md;
	pcre2_match_context *mc;
	pcre2_jit_stack *js;
	struct sym *sym;
	struct heap_ent *heap;
	size_t cap_sym;
};

struct ds_tok_cache {
	pthread_mutex_t mu;
	struct cache_ent *slots; /* (CACHE_SLOTS) */
	char *cw;                /* cached words */
	int32_t *cids;           /* cached ids */
	size_t n_cw, n_cids, n, cap_cw, cap_cids;
};

struct ds_tok_cache *ds_tok_cache_new(void)
{
	struct ds_tok_cache *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->slots = calloc(CACHE_SLOTS, sizeof(*c->slots));
	if (!c->slots || pthread_mutex_init(&c->mu, NULL) != 0) {
		free(c->slots);
		free(c);
		return NULL;
	}
	return c;
}

void ds_tok_cache_free(struct ds_tok_cache *c)
{
	if (!c)
		return;
	pthread_mutex_destroy(&c->mu);
	free(c->slots);
	free(c->cw);
	free(c->cids);
	free(c);
}

#define GROW(ptr, cap, need)                                                     \
	do {                                                                     \
		if ((need) > (cap)) {                                            \
			size_t nc_ = (cap) ? (cap) : 64;                         \
			while (nc_ < (need))                                     \
				nc_ *= 2;                                        \
			void *np_ = realloc((ptr), nc_ * sizeof(*(ptr)));        \
			if (!np_)                                                \
				return ds_errf(e->err, DS_ERR_NOMEM, "encode: out of memory"); \
			(ptr) = np_;                                             \
			(cap) = nc_;                                             \
		}                                                                \
	} while (0)

static enum ds_status push_id(struct enc *e, int32_t id)
{
	GROW(e->ids, e->cap_ids, e->n_ids + 1);
	e->ids[e->n_ids++] = id;
	return DS_OK;
}

/* ---- BPE on one pre-token ---- */

static bool heap_less(const struct heap_ent *a, const struct heap_ent *b)
{
	return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(struct heap_ent *h, size_t *n, struct heap_ent x)
{
	size_t i = (*n)++;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (!heap_less(&x, &h[p]))
			break;
		h[i] = h[p];
		i = p;
	}
	h[i] = x;
}

static struct heap_ent heap_pop(struct heap_ent *h, size_t *n)
{
	struct heap_ent top = h[0], x = h[--(*n)];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= *n)
			break;
		if (c + 1 < *n && heap_less(&h[c + 1], &h[c]))
			c++;
		if (!heap_less(&h[c], &x))
			break;
		h[i] = h[c];
		i = c;
	}
	if (*n > 0)
		h[i] = x;
	return top;
}

static void push_pair(const struct ds_tokenizer *t, struct sym *sy, struct heap_ent *h, size_t *nh,
		      int32_t pos)
{
	const struct ds_tok_merge_slot *m = ds_tok_merge_find(t, sy[pos].id, sy[sy[pos].next].id);
	if (m)
		heap_push(h, nh, (struct heap_ent){ m->rank, pos, m->new_id, sy[pos].id, sy[sy[pos].next].id });
}

static void ds_tok_cache_prefetch(const struct ds_tok_cache *c, uint64_t h)
{
	__builtin_prefetch(&c->slots[(uint32_t)h & (CACHE_SLOTS - 1)]);
}

static struct cache_ent *cache_slot(struct ds_tok_cache *c, const uint8_t *w, size_t n, uint64_t h)
{
	for (uint32_t i = (uint32_t)h & (CACHE_SLOTS - 1);; i = (i + 1) & (CACHE_SLOTS - 1)) {
		struct cache_ent *ce = &c->slots[i];
		if (ce->h == 0 || (ce->h == h && ce->wlen == n && memcmp(c->cw + ce->woff, w, n) == 0))
			return ce;
	}
}

/* Appends the cached ids of w to e->ids: 1 when found, 0 when not (or busy), <0 on OOM. */
static int cache_get(struct enc *e, struct ds_tok_cache *c, const uint8_t *w, size_t n, uint64_t h)
{
	if (pthread_mutex_trylock(&c->mu) != 0)
		return 0;
	int found = 0;
	struct cache_ent *ce = cache_slot(c, w, n, h);
	if (ce->h) {
		found = 1;
		size_t need = e->n_ids + ce->n;
		if (need > e->cap_ids) {
			size_t nc = e->cap_ids ? e->cap_ids : 64;
			while (nc < need)
				nc *= 2;
			int32_t *p = realloc(e->ids, nc * sizeof(*p));
			if (p) {
				e->ids = p;
				e->cap_ids = nc;
			} else {
				found = -1;
			}
		}
		if (found > 0) {
			memcpy(e->ids + e->n_ids, c->cids + ce->ioff, ce->n * sizeof(int32_t));
			e->n_ids += ce->n;
		}
	}
	pthread_mutex_unlock(&c->mu);
	return found;
}

static bool grow_bytes(void **p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return true;
	size_t nc = *cap ? *cap : 4096;
	while (nc < need)
		nc *= 2;
	void *np = realloc(*p, nc * elem);
	if (!np)
		return false;
	*p = np;
	*cap = nc;
	return true;
}

static void cache_put(struct ds_tok_cache *c, const uint8_t *w, size_t n, uint64_t h,
		      const int32_t *ids, size_t cnt)
{
	if (pthread_mutex_trylock(&c->mu) != 0)
		return;
	if (c->n >= CACHE_SLOTS / 2) { /* full: start over rather than evict */
		memset(c->slots, 0, CACHE_SLOTS * sizeof(*c->slots));
		c->n = c->n_cw = c->n_cids = 0;
	}
	struct cache_ent *ce = cache_slot(c, w, n, h);
	if (!ce->h && grow_bytes((void **)&c->cw, &c->cap_cw, c->n_cw + n, 1) &&
	    grow_bytes((void **)&c->cids, &c->cap_cids, c->n_cids + cnt, sizeof(int32_t))) {
		memcpy(c->cw + c->n_cw, w, n);
		memcpy(c->cids + c->n_cids, ids, cnt * sizeof(int32_t));
		*ce = (struct cache_ent){ h, (uint32_t)c->n_cw, (uint32_t)n, (uint32_t)c->n_cids,
					  (uint32_t)cnt };
		c->n_cw += n;
		c->n_cids += cnt;
		c->n++;
	}
	pthread_mutex_unlock(&c->mu);
}

/* The word cache hash of a piece, 0 when the piece is not cached. */
static uint64_t cache_hash(const struct ds_tokenizer *t, const uint8_t *w, size_t n)
{
	return n > 1 && n <= CACHE_MAX_WORD && t->cache ? XXH3_64bits(w, n) | 1 : 0;
}

/* h: cache_hash(w, n), computed ahead by the caller */
static enum ds_status bpe_word(struct enc *e, const uint8_t *w, size_t n, uint64_t h)
{
	const struct ds_tokenizer *t = e->t;
	if (n == 1)
		return t->byte_id[w[0]] >= 0 ? push_id(e, t->byte_id[w[0]]) : DS_OK;
	if (t->ignore_merges) {
		int32_t id = ds_tok_vocab_find(t, (const char *)w, n);
		if (id >= 0)
			return push_id(e, id);
	}
	bool cacheable = h != 0;
	if (cacheable) {
		int r = cache_get(e, t->cache, w, n, h);
		if (r != 0)
			return r > 0 ? DS_OK : ds_errf(e->err, DS_ERR_NOMEM, "encode: out of memory");
	}

	if (n > e->cap_sym) {
		GROW(e->sym, e->cap_sym, n);
		/* the heap never holds more than n - 1 initial pairs plus 2 per merge */
		void *nh = realloc(e->heap, 3 * e->cap_sym * sizeof(*e->heap));
		if (!nh)
			return ds_errf(e->err, DS_ERR_NOMEM, "encode: out of memory");
		e->heap = nh;
	}
	struct sym *sy = e->sym;
	int32_t ns = 0;
	for (size_t i = 0; i < n; i++) {
		int32_t id = t->byte_id[w[i]];
		if (id < 0)
			continue; /* no unk token: the byte is dropped, as in `tokenizers` */
		sy[ns] = (struct sym){ id, ns - 1, ns + 1, 1 };
		ns++;
	}
	if (ns == 0)
		return DS_OK;
	sy[ns - 1].next = -1;
	if (t->n_merges == 0)
		goto emit;
	size_t nh = 0;
	/* the first lookups are independent: let their cache misses overlap */
	for (int32_t i = 0; i + 1 < ns; i++)
		ds_tok_merge_prefetch(t, sy[i].id, sy[i + 1].id);
	for (int32_t i = 0; i + 1 < ns; i++)
		push_pair(t, sy, e->heap, &nh, i);
	while (nh > 0) {
		struct heap_ent top = heap_pop(e->heap, &nh);
		struct sym *s = &sy[top.pos];
		/* `tokenizers` re-looks the pair up and compares the merged id; as symbols only
		 * grow by whole merges, that is the same as both ids being unchanged */
		if (s->len == 0 || s->next < 0 || s->id != top.l_id || sy[s->next].id != top.r_id)
			continue;
		int32_t right = s->next;
		s->id = top.new_id;
		s->len += sy[right].len;
		s->next = sy[right].next;
		sy[right].len = 0;
		if (s->next >= 0)
			sy[s->next].prev = top.pos;
		if (s->prev >= 0)
			push_pair(t, sy, e->heap, &nh, s->prev);
		if (s->next >= 0)
			push_pair(t, sy, e->heap, &nh, top.pos);
	}
emit:;
	size_t first = e->n_ids;
	for (int32_t i = 0; i >= 0; i = sy[i].next) {
		enum ds_status rv = push_id(e, sy[i].id);
		if (rv != DS_OK)
			return rv;
	}
	if (cacheable)
		cache_put(t->cache, w, n, h, e->ids + first, e->n_ids - first);
	return DS_OK;
}

/* ---- pre-tokenization ---- */

static enum ds_status add_span(struct enc *e, size_t *n, size_t s, size_t end, bool match)
{
	GROW(e->spans, e->cap_spans, *n + 1);
	e->spans[(*n)++] = (struct span){ s, end, match };
	return DS_OK;
}

/* HF Pattern::find_matches: the piece cut into (span, is_match), covering all of it. */
static enum ds_status find_matches(struct enc *e, const pcre2_code *re, const char *p, size_t len,
				   size_t *ns)
{
	enum ds_status rv;
	*ns = 0;
	size_t prev = 0, start = 0;
	while (start <= len) {
		int rc = pcre2_match(re, (PCRE2_SPTR)p, len, start, PCRE2_NO_UTF_CHECK, e->md, e->mc);
		if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !e->js) {
			e->js = pcre2_jit_stack_create(64 * 1024, 16 * 1024 * 1024, NULL);
			if (!e->js)
				return ds_errf(e->err, DS_ERR_NOMEM, "encode: out of memory for the regex stack");
			pcre2_jit_stack_assign(e->mc, NULL, e->js);
			continue;
		}
		if (rc == PCRE2_ERROR_NOMATCH)
			break;
		if (rc < 0) {
			PCRE2_UCHAR msg[160];
			pcre2_get_error_message(rc, msg, sizeof(msg));
			return ds_errf(e->err, DS_ERR_INTERNAL, "encode: pre-tokenizer regex failed: %s",
				       (const char *)msg);
		}
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
		size_t ms = ov[0], me = ov[1];
		if (prev != ms && (rv = add_span(e, ns, prev, ms, false)) != DS_OK)
			return rv;
		if ((rv = add_span(e, ns, ms, me, true)) != DS_OK)
			return rv;
		prev = me;
		if (me == ms) {
			if (me >= len)
				break;
			int cl = ds_utf8_char_len((const uint8_t *)p + me, len - me);
			start = me + (size_t)(cl > 0 ? cl : 1);
		} else {
			start = me;
		}
	}
	if (prev != len)
		return add_span(e, ns, prev, len, false);
	return DS_OK;
}

static enum ds_status out_piece(struct enc *e, size_t *no, const char *p, size_t len)
{
	if (len == 0)
		return DS_OK;
	GROW(e->pb, e->cap_pb, *no + 1);
	e->pb[(*no)++] = (struct piece){ p, len };
	return DS_OK;
}

/* HF NormalizedString::split: folds the spans by behavior, dropping empty results. */
static enum ds_status split_piece(struct enc *e, const struct ds_tok_step *st, struct piece pc,
				  size_t *no)
{
	size_t ns;
	enum ds_status rv = find_matches(e, st->re, pc.p, pc.len, &ns);
	if (rv != DS_OK)
		return rv;
	struct span *sp = e->spans;
	if (st->invert)
		for (size_t i = 0; i < ns; i++)
			sp[i].match = !sp[i].match;
	size_t k = 0; /* folded spans are written back into sp[0..k) */
	bool prev_match = false;
	switch (st->behavior) {
	case DS_SPLIT_ISOLATED:
	case DS_SPLIT_REMOVED:
		k = ns;
		break;
	case DS_SPLIT_CONTIGUOUS:
	case DS_SPLIT_MERGED_PREV:
		for (size_t i = 0; i < ns; i++) {
			bool join = st->behavior == DS_SPLIT_CONTIGUOUS ? sp[i].match == prev_match
								       : sp[i].match && !prev_match;
			prev_match = sp[i].match;
			if (join && k > 0) {
				sp[k - 1].e = sp[i].e;
			} else {
				sp[k] = sp[i];
				sp[k++].match = false;
			}
		}
		break;
	case DS_SPLIT_MERGED_NEXT:
		/* the same fold run from the right, then put back in order */
		for (size_t i = ns; i-- > 0;) {
			bool join = sp[i].match && !prev_match;
			prev_match = sp[i].match;
			struct span cur = sp[i];
			if (join && k > 0) {
				sp[ns - k].s = cur.s;
			} else {
				k++;
				sp[ns - k] = cur;
				sp[ns - k].match = false;
			}
		}
		memmove(sp, sp + ns - k, k * sizeof(*sp));
		break;
	}
	for (size_t i = 0; i < k; i++) {
		if (st->behavior == DS_SPLIT_REMOVED && sp[i].match)
			continue;
		if ((rv = out_piece(e, no, pc.p + sp[i].s, sp[i].e - sp[i].s)) != DS_OK)
			return rv;
	}
	return DS_OK;
}

static enum ds_status run_step(struct enc *e, const struct ds_tok_step *st, size_t *np)
{
	enum ds_status rv;
	struct piece *in = e->pa;
	size_t n = *np, no = 0;
	if (st->kind == DS_STEP_BYTELEVEL && st->add_prefix_space) {
		size_t total = 0;
		for (size_t i = 0; i < n; i++)
			total += in[i].len + 1;
		GROW(e->bufs, e->cap_bufs, e->n_bufs + 1);
		char *b = malloc(total + 1);
		if (!b)
			return ds_errf(e->err, DS_ERR_NOMEM, "encode: out of memory");
		e->bufs[e->n_bufs++] = b;
		for (size_t i = 0; i < n; i++) {
			char *d = b;
			if (in[i].p[0] != ' ')
				*b++ = ' ';
			memcpy(b, in[i].p, in[i].len);
			b += in[i].len;
			in[i] = (struct piece){ d, (size_t)(b - d) };
		}
	}
	if (!st->re)
		return DS_OK;
	for (size_t i = 0; i < n; i++)
		if ((rv = split_piece(e, st, in[i], &no)) != DS_OK)
			return rv;
	/* swap the piece lists */
	struct piece *tp = e->pa;
	size_t tc = e->cap_pa;
	e->pa = e->pb;
	e->cap_pa = e->cap_pb;
	e->pb = tp;
	e->cap_pb = tc;
	*np = no;
	return DS_OK;
}

static enum ds_status encode_segment(struct enc *e, const char *s, size_t len)
{
	const struct ds_tokenizer *t = e->t;
	enum ds_status rv = DS_OK;
	if (len == 0)
		return DS_OK;
	utf8proc_uint8_t *nfc = NULL;
	if (t->nfc) {
		/* every code point below U+0300 is NFC_Quick_Check=Yes and starts no composition:
		 * the bytes C0..CB lead exactly those code points */
		bool stable = true;
		for (size_t i = 0; i < len && stable; i++)
			stable = (uint8_t)s[i] < 0xcc;
		if (!stable) {
			utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len,
							  &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
			if (r < 0)
				return ds_errf(e->err, DS_ERR_INTERNAL, "encode: NFC failed: %s",
					       utf8proc_errmsg(r));
			s = (const char *)nfc;
			len = (size_t)r;
		}
	}
	GROW(e->pa, e->cap_pa, 1);
	e->pa[0] = (struct piece){ s, len };
	size_t np = 1;
	for (int i = 0; i < t->n_steps && rv == DS_OK; i++)
		rv = run_step(e, &t->steps[i], &np);
	/* hash the pieces LOOKAHEAD ahead of their BPE so that the cache slot misses overlap */
	enum { LOOKAHEAD = 8 };
	uint64_t hs[LOOKAHEAD];
	for (size_t i = 0; i < np + LOOKAHEAD && rv == DS_OK; i++) {
		if (i >= LOOKAHEAD) { /* first use the slot that piece i is about to take */
			size_t k = i - LOOKAHEAD;
			rv = bpe_word(e, (const uint8_t *)e->pa[k].p, e->pa[k].len, hs[k % LOOKAHEAD]);
		}
		if (i < np) {
			hs[i % LOOKAHEAD] = cache_hash(t, (const uint8_t *)e->pa[i].p, e->pa[i].len);
			if (hs[i % LOOKAHEAD])
				ds_tok_cache_prefetch(t->cache, hs[i % LOOKAHEAD]);
		}
	}
	for (size_t i = 0; i < e->n_bufs; i++)
		free(e->bufs[i]);
	e->n_bufs = 0;
	free(nfc);
	return rv;
}

/* ---- added tokens ---- */

static bool is_space(uint8_t c)
{
	return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Finds the leftmost-longest added token in s[from, len): its id and span, or -1. With
 * skip_special a special match is passed over whole, as `tokenizers` does (its text is then
 * plain text; no shorter token inside it is looked for). */
static int32_t find_added(const struct ds_tokenizer *t, const char *s, size_t from, size_t len,
			  bool skip_special, size_t *ms, size_t *me)
{
	for (size_t i = from; i < len; i++) {
		uint8_t c = (uint8_t)s[i];
		if (!(t->added_first[c >> 3] & (1u << (c & 7))))
			continue;
		for (int k = 0; k < t->n_added_lens; k++) {
			size_t l = t->added_lens[k];
			if (l > len - i)
				continue;
			int32_t id = ds_tok_added_find(t, s + i, l);
			if (id < 0)
				continue;
			if (skip_special && (t->tok[id].flags & DS_TOKF_SPECIAL)) {
				i += l - 1;
				break;
			}
			*ms = i;
			*me = i + l;
			return id;
		}
	}
	return -1;
}

static enum ds_status encode_text(struct enc *e, const char *s, size_t len)
{
	const struct ds_tokenizer *t = e->t;
	enum ds_status rv;
	size_t seg = 0;
	while (seg <= len) {
		size_t ms = len, me = len;
		int32_t id = t->n_added ? find_added(t, s, seg, len, e->specials_as_text, &ms, &me) : -1;
		if (id >= 0) {
			uint32_t f = t->tok[id].flags;
			if (f & DS_TOKF_LSTRIP)
				while (ms > seg && is_space((uint8_t)s[ms - 1]))
					ms--;
			if (f & DS_TOKF_RSTRIP)
				while (me < len && is_space((uint8_t)s[me]))
					me++;
		}
		if ((rv = encode_segment(e, s + seg, ms - seg)) != DS_OK)
			return rv;
		if (id < 0)
			break;
		if ((rv = push_id(e, id)) != DS_OK)
			return rv;
		seg = me;
	}
	return DS_OK;
}

static enum ds_status encode(const struct ds_tokenizer *t, const char *text, size_t len,
			     bool add_special, bool specials_as_text, int32_t **ids, size_t *n_ids,
			     struct ds_err *err)
{
	enum ds_status rv = DS_OK;
	*ids = NULL;
	*n_ids = 0;
	struct enc e = { .t = t, .err = err, .specials_as_text = specials_as_text };
	char *clean = NULL;
	if (!ds_utf8_sanitize((const uint8_t *)text, len, NULL)) {
		clean = malloc(3 * len + 1);
		if (!clean)
			return ds_errf(err, DS_ERR_NOMEM, "encode: out of memory");
		len = ds_utf8_sanitize((const uint8_t *)text, len, clean);
		text = clean;
	}
	e.md = pcre2_match_data_create(4, NULL);
	e.mc = pcre2_match_context_create(NULL);
	if (!e.md || !e.mc) {
		rv = ds_errf(err, DS_ERR_NOMEM, "encode: out of memory");
		goto out;
	}
	for (int i = 0; add_special && i < t->n_prefix && rv == DS_OK; i++)
		rv = push_id(&e, t->prefix[i]);
	if (rv == DS_OK)
		rv = encode_text(&e, text, len);
	for (int i = 0; add_special && i < t->n_suffix && rv == DS_OK; i++)
		rv = push_id(&e, t->suffix[i]);
out:
	if (rv == DS_OK && e.n_ids > 0) {
		*ids = e.ids;
		*n_ids = e.n_ids;
	} else {
		free(e.ids);
	}
	pcre2_match_data_free(e.md);
	pcre2_match_context_free(e.mc);
	pcre2_jit_stack_free(e.js);
	free(e.pa);
	free(e.pb);
	free(e.spans);
	free(e.bufs);
	free(e.sym);
	free(e.heap);
	free(clean);
	return rv;
}

enum ds_status ds_tokenizer_encode(const struct ds_tokenizer *t, const char *text, size_t len,
				   bool add_special, int32_t **ids, size_t *n_ids, struct ds_err *err)
{
	return encode(t, text, len, add_special, false, ids, n_ids, err);
}

enum ds_status ds_tokenizer_encode_untrusted(const struct ds_tokenizer *t, const char *text,
					     size_t len, bool add_special, int32_t **ids,
					     size_t *n_ids, struct ds_err *err)
{
	return encode(t, text, len, add_special, true, ids, n_ids, err);
}
