/* tokenizer.c - building the immutable tokenizer, lookups, decoding and streaming decode.
 *
 * Loaders hand over vocab-form strings; here they become raw byte pieces (the GPT-2
 * byte<->unicode mapping undone), and merges become an open-addressing table keyed by the
 * (left id, right id) pair. A token whose string is not in the mapping's image keeps its
 * UTF-8 bytes, exactly like the ByteLevel decoder of HF `tokenizers`; such tokens cannot be
 * reached by byte-level BPE, so merges naming them are dropped (they could never fire). */
#include <stdio.h>
#include <stdlib.h>
#include <xxhash.h>

#include "tokenizer_internal.h"

/* ---- regexes of the known pre-tokenizers ---- */

const char ds_tok_re_gpt2[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const char ds_tok_re_llama3[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
	"\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char ds_tok_re_qwen2[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
	"\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* ---- hash tables ---- */

static uint32_t table_size(size_t n)
{
	uint32_t s = 16;
	while (s < 2 * n + 1)
		s <<= 1;
	return s;
}

static uint64_t pair_hash(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	return k;
}

static int32_t bytes_map_find(const struct ds_tokenizer *t, const int32_t *map, uint32_t mask,
			      const char *s, size_t len, bool content)
{
	uint32_t h = (uint32_t)XXH3_64bits(s, len) & mask;
	for (;; h = (h + 1) & mask) {
		int32_t id = map[h];
		if (id < 0)
			return -1;
		const struct ds_tok_entry *e = &t->tok[id];
		uint32_t off = content ? e->coff : e->off, l = content ? e->clen : e->len;
		if (l == len && memcmp(t->pool + off, s, len) == 0)
			return id;
	}
}

static void bytes_map_put(const struct ds_tokenizer *t, int32_t *map, uint32_t mask, int32_t id,
			  bool content)
{
	const struct ds_tok_entry *e = &t->tok[id];
	uint32_t off = content ? e->coff : e->off, l = content ? e->clen : e->len;
	if (bytes_map_find(t, map, mask, t->pool + off, l, content) >= 0)
		return; /* first id wins */
	uint32_t h = (uint32_t)XXH3_64bits(t->pool + off, l) & mask;
	while (map[h] >= 0)
		h = (h + 1) & mask;
	map[h] = id;
}

int32_t ds_tok_vocab_find(const struct ds_tokenizer *t, const char *s, size_t len)
{
	return bytes_map_find(t, t->vmap, t->vmap_mask, s, len, false);
}

int32_t ds_tok_added_find(const struct ds_tokenizer *t, const char *s, size_t len)
{
	if (!t->amap)
		return -1;
	return bytes_map_find(t, t->amap, t->amap_mask, s, len, true);
}

void ds_tok_merge_prefetch(const struct ds_tokenizer *t, int32_t l, int32_t r)
{
	uint64_t key = (((uint64_t)(uint32_t)l << 32) | (uint32_t)r) + 1;
	__builtin_prefetch(&t->merges[pair_hash(key) & t->merge_mask]);
}

const struct ds_tok_merge_slot *ds_tok_merge_find(const struct ds_tokenizer *t, int32_t l, int32_t r)
{
	uint64_t key = (((uint64_t)(uint32_t)l << 32) | (uint32_t)r) + 1;
	for (uint64_t h = pair_hash(key) & t->merge_mask;; h = (h + 1) & t->merge_mask) {
		const struct ds_tok_merge_slot *s = &t->merges[h];
		if (s->key == key)
			return s;
		if (s->key == 0)
			return NULL;
	}
}

static void merge_put(struct ds_tokenizer *t, int32_t l, int32_t r, int32_t rank, int32_t id)
{
	uint64_t key = (((uint64_t)(uint32_t)l << 32) | (uint32_t)r) + 1;
	uint64_t h = pair_hash(key) & t->merge_mask;
	while (t->merges[h].key != 0 && t->merges[h].key != key)
		h = (h + 1) & t->merge_mask;
	if (t->merges[h].key == 0)
		t->n_merges++;
	/* a repeated pair takes the later rank, as a Rust HashMap collect() does */
	t->merges[h] = (struct ds_tok_merge_slot){ .key = key, .rank = rank, .new_id = id };
}

/* ---- the builder ---- */

enum ds_status ds_tok_builder_init(struct ds_tok_builder *b, const char *src, int n_vocab,
				   struct ds_err *err)
{
	memset(b, 0, sizeof(*b));
	b->src = src;
	b->bos_id = b->eos_id = b->pad_id = -1;
	if (n_vocab <= 0 || n_vocab > (1 << 24))
		return ds_errf(err, DS_ERR_FORMAT, "%s: vocabulary size %d out of range", src, n_vocab);
	b->n_vocab = n_vocab;
	b->str = calloc((size_t)n_vocab, sizeof(*b->str));
	b->slen = calloc((size_t)n_vocab, sizeof(*b->slen));
	b->flags = calloc((size_t)n_vocab, sizeof(*b->flags));
	if (!b->str || !b->slen || !b->flags) {
		ds_tok_builder_free(b);
		return ds_errf(err, DS_ERR_NOMEM, "%s: out of memory for %d tokens", src, n_vocab);
	}
	return DS_OK;
}

void ds_tok_builder_free(struct ds_tok_builder *b)
{
	if (b->str)
		for (int i = 0; i < b->n_vocab; i++)
			free(b->str[i]);
	for (size_t i = 0; i < b->n_merges; i++) {
		free(b->merge_l[i]);
		free(b->merge_r[i]);
	}
	for (int i = 0; i < b->n_steps; i++)
		pcre2_code_free(b->steps[i].re);
	free(b->str);
	free(b->slen);
	free(b->flags);
	free(b->merge_l);
	free(b->merge_r);
	memset(b, 0, sizeof(*b));
}

static char *dup_n(const char *s, size_t n)
{
	char *d = malloc(n + 1);
	if (d) {
		memcpy(d, s, n);
		d[n] = 0;
	}
	return d;
}

enum ds_status ds_tok_builder_set(struct ds_tok_builder *b, int id, const char *s, size_t len,
				  uint32_t flags, struct ds_err *err)
{
	if (id < 0 || id >= b->n_vocab)
		return ds_errf(err, DS_ERR_FORMAT, "%s: token id %d out of range [0, %d)", b->src,
			       id, b->n_vocab);
	if (len > UINT32_MAX / 4)
		return ds_errf(err, DS_ERR_FORMAT, "%s: token %d too long", b->src, id);
	char *d = dup_n(s, len);
	if (!d)
		return ds_errf(err, DS_ERR_NOMEM, "%s: out of memory", b->src);
	free(b->str[id]);
	b->str[id] = d;
	b->slen[id] = (uint32_t)len;
	b->flags[id] |= flags | DS_TOKF_PRESENT;
	return DS_OK;
}

enum ds_status ds_tok_builder_merge(struct ds_tok_builder *b, const char *l, size_t ll,
				    const char *r, size_t rl, struct ds_err *err)
{
	if (b->n_merges == b->cap_merges) {
		size_t cap = b->cap_merges ? 2 * b->cap_merges : 1024;
		char **nl = realloc(b->merge_l, cap * sizeof(*nl));
		if (nl)
			b->merge_l = nl;
		char **nr = realloc(b->merge_r, cap * sizeof(*nr));
		if (nr)
			b->merge_r = nr;
		if (!nl || !nr)
			return ds_errf(err, DS_ERR_NOMEM, "%s: out of memory for merges", b->src);
		b->cap_merges = cap;
	}
	char *dl = dup_n(l, ll), *dr = dup_n(r, rl);
	if (!dl || !dr) {
		free(dl);
		free(dr);
		return ds_errf(err, DS_ERR_NOMEM, "%s: out of memory for merges", b->src);
	}
	b->merge_l[b->n_merges] = dl;
	b->merge_r[b->n_merges] = dr;
	b->n_merges++;
	return DS_OK;
}

/* The patterns come from Oniguruma (HF `tokenizers`), whose \s is exactly Unicode White_Space;
 * PCRE2's \s with UCP also takes U+180E. \s and \S are therefore spelled out as classes. */
#define WS_ITEMS "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

static char *rewrite_space_classes(const char *p)
{
	size_t n = strlen(p), o = 0;
	char *out = malloc(n * (sizeof(WS_ITEMS) + 3) + 1);
	if (!out)
		return NULL;
	bool in_class = false;
	for (size_t i = 0; i < n;) {
		if (p[i] == '\\' && i + 1 < n) {
			char d = p[i + 1];
			const char *rep = NULL;
			if (d == 's')
				rep = in_class ? WS_ITEMS : "[" WS_ITEMS "]";
			else if (d == 'S' && !in_class)
				rep = "[^" WS_ITEMS "]";
			if (rep) {
				memcpy(out + o, rep, strlen(rep));
				o += strlen(rep);
			} else {
				out[o++] = p[i];
				out[o++] = d;
			}
			i += 2;
			continue;
		}
		if (p[i] == '[' && !in_class) {
			in_class = true;
			out[o++] = p[i++];
			if (i < n && p[i] == '^')
				out[o++] = p[i++];
			if (i < n && p[i] == ']') /* a leading ']' is literal */
				out[o++] = p[i++];
			continue;
		}
		if (p[i] == '[' && in_class && i + 1 < n && p[i + 1] == ':') { /* [:posix:] */
			const char *end = strstr(p + i + 2, ":]");
			size_t l = end ? (size_t)(end - (p + i)) + 2 : n - i;
			memcpy(out + o, p + i, l);
			o += l;
			i += l;
			continue;
		}
		if (p[i] == ']' && in_class)
			in_class = false;
		out[o++] = p[i++];
	}
	out[o] = 0;
	return out;
}

enum ds_status ds_tok_builder_step(struct ds_tok_builder *b, enum ds_tok_step_kind kind,
				   const char *pattern, bool literal,
				   enum ds_tok_split_behavior behavior, bool invert,
				   bool add_prefix_space, struct ds_err *err)
{
	if (b->n_steps == DS_TOK_MAX_STEPS)
		return ds_errf(err, DS_ERR_UNSUPPORTED, "%s: more than %d pre-tokenizers", b->src,
			       DS_TOK_MAX_STEPS);
	struct ds_tok_step *s = &b->steps[b->n_steps];
	memset(s, 0, sizeof(*s));
	s->kind = kind;
	s->behavior = behavior;
	s->invert = invert;
	s->add_prefix_space = add_prefix_space;
	if (pattern) {
		int ec;
		PCRE2_SIZE eo; /* offset into the rewritten pattern: not reported */
		uint32_t opt = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP); /* LITERAL refuses UCP */
		char *re = literal ? NULL : rewrite_space_classes(pattern);
		if (!literal && !re)
			return ds_errf(err, DS_ERR_NOMEM, "%s: out of memory", b->src);
		s->re = pcre2_compile((PCRE2_SPTR)(re ? re : pattern), PCRE2_ZERO_TERMINATED, opt, &ec,
				      &eo, NULL);
		free(re);
		if (!s->re) {
			PCRE2_UCHAR msg[160];
			pcre2_get_error_message(ec, msg, sizeof(msg));
			return ds_errf(err, DS_ERR_UNSUPPORTED, "%s: pre-tokenizer regex /%s/: %s", b->src,
				       pattern, (const char *)msg);
		}
		/* JIT is an optimization; the interpreter gives the same matches */
		(void)pcre2_jit_compile(s->re, PCRE2_JIT_COMPLETE);
	}
	b->n_steps++;
	return DS_OK;
}

static enum ds_status pool_add(struct ds_tokenizer *t, size_t *cap, const char *s, size_t n,
			       uint32_t *off)
{
	if (t->pool_len + n > *cap) {
		size_t c = *cap ? *cap : 1 << 16;
		while (c < t->pool_len + n)
			c *= 2;
		char *p = realloc(t->pool, c);
		if (!p)
			return DS_ERR_NOMEM;
		t->pool = p;
		*cap = c;
	}
	memcpy(t->pool + t->pool_len, s, n);
	*off = (uint32_t)t->pool_len;
	t->pool_len += n;
	return DS_OK;
}

static enum ds_status build_tokens(struct ds_tok_builder *b, struct ds_tokenizer *t,
				   struct ds_err *err)
{
	size_t cap = 0, maxlen = 1;
	for (int i = 0; i < b->n_vocab; i++)
		maxlen = DS_MAX(maxlen, b->slen[i] + 1u);
	char *raw = malloc(maxlen);
	if (!raw)
		return ds_errf(err, DS_ERR_NOMEM, "%s: out of memory", b->src);
	size_t n_model = 0;
	for (int i = 0; i < b->n_vocab; i++) {
		struct ds_tok_entry *e = &t->tok[i];
		e->flags = b->flags[i];
		if (!b->str[i])
			continue;
		size_t rl;
		bool mapped = ds_tok_unmap(b->str[i], b->slen[i], raw, &rl);
		const char *piece = mapped ? raw : b->str[i];
		size_t pl = mapped ? rl : b->slen[i];
		if (pool_add(t, &cap, piece, pl, &e->off) != DS_OK)
			goto nomem;
		e->len = (uint32_t)pl;
		if (mapped)
			e->flags |= DS_TOKF_MAPPED;
		if (e->flags & DS_TOKF_ADDED) {
			if (pool_add(t, &cap, b->str[i], b->slen[i], &e->coff) != DS_OK)
				goto nomem;
			e->clen = b->slen[i];
			t->n_added++;
		}
		n_model += (e->flags & DS_TOKF_MODEL) != 0;
	}
	free(raw);

	t->vmap_mask = table_size(n_model) - 1;
	t->vmap = malloc(((size_t)t->vmap_mask + 1) * sizeof(int32_t));
	if (!t->vmap)
		return ds_errf(err, DS_ERR_NOMEM, "%s: out of memory", b->src);
	memset(t->vmap, 0xff, ((size_t)t->vmap_mask + 1) * sizeof(int32_t));
	for (int i = 0; i < b->n_vocab; i++) {
		uint32_t f = t->tok[i].flags;
		if ((f & DS_TOKF_MODEL) && (f & DS_TOKF_MAPPED))
			bytes_map_put(t, t->vmap, t->vmap_mask, i, false);
	}
	for (int c = 0; c < 256; c++) {
		char ch = (char)c;
		t->byte_id[c] = ds_tok_vocab_find(t, &ch, 1);
	}

	if (t->n_added) {
		t->amap_mask = table_size((size_t)t->n_added) - 1;
		t->amap = malloc(((size_t)t->amap_mask + 1) * sizeof(int32_t));
		if (!t->amap)
			return ds_errf(err, DS_ERR_NOMEM, "%s: out of memory", b->src);
		memset(t->amap, 0xff, ((size_t)t->amap_mask + 1) * sizeof(int32_t));
		for (int i = 0; i < b->n_vocab; i++) {
			const struct ds_tok_entry *e = &t->tok[i];
			if (!(e->flags & DS_TOKF_ADDED) || e->clen == 0)
				continue;
			bytes_map_put(t, t->amap, t->amap_mask, i, true);
			t->added_first[(uint8_t)t->pool[e->coff] >> 3] |=
				(uint8_t)(1u << ((uint8_t)t->pool[e->coff] & 7));
			int k = 0;
			while (k < t->n_added_lens && t->added_lens[k] != e->clen)
				k++;
			if (k == t->n_added_lens) {
				if (k == (int)DS_ARRAY_LEN(t->added_lens))
					return ds_errf(err, DS_ERR_UNSUPPORTED,
						       "%s: added tokens of more than %d lengths",
						       b->src, k);
				t->added_lens[t->n_added_lens++] = e->clen;
			}
		}
		/* longest first: leftmost-longest matching probes lengths in this order */
		for (int i = 1; i < t->n_added_lens; i++)
			for (int j = i; j > 0 && t->added_lens[j] > t->added_lens[j - 1]; j--) {
				uint32_t x = t->added_lens[j];
				t->added_lens[j] = t->added_lens[j - 1];
				t->added_lens[j - 1] = x;
			}
	}
	return DS_OK;
nomem:
	free(raw);
	return ds_errf(err, DS_ERR_NOMEM, "%s: out of memory", b->src);
}

static enum ds_status build_merges(struct ds_tok_builder *b, struct ds_tokenizer *t,
				   struct ds_err *err)
{
	t->merge_mask = table_size(b->n_merges) - 1;
	t->merges = calloc(t->merge_mask + 1, sizeof(*t->merges));
	size_t cap = 256;
	char *buf = malloc(cap);
	if (!t->merges || !buf) {
		free(buf);
		return ds_errf(err, DS_ERR_NOMEM, "%s: out of memory for merges", b->src);
	}
	enum ds_status rv = DS_OK;
	for (size_t i = 0; i < b->n_merges; i++) {
		size_t ll = strlen(b->merge_l[i]), rl = strlen(b->merge_r[i]);
		if (ll + rl > cap) {
			cap = 2 * (ll + rl);
			char *nb = realloc(buf, cap);
			if (!nb) {
				rv = ds_errf(err, DS_ERR_NOMEM, "%s: out of memory", b->src);
				break;
			}
			buf = nb;
		}
		size_t a, c;
		if (!ds_tok_unmap(b->merge_l[i], ll, buf, &a) ||
		    !ds_tok_unmap(b->merge_r[i], rl, buf + a, &c))
			continue; /* names a token byte-level BPE can never form */
		int32_t l = ds_tok_vocab_find(t, buf, a), r = ds_tok_vocab_find(t, buf + a, c);
		int32_t m = ds_tok_vocab_find(t, buf, a + c);
		if (l < 0 || r < 0 || m < 0) {
			rv = ds_errf(err, DS_ERR_FORMAT,
				     "%s: merge #%zu \"%s %s\": %s is not in the vocabulary", b->src,
				     i, b->merge_l[i], b->merge_r[i],
				     l < 0 ? "the left part" : r < 0 ? "the right part" : "the merged token");
			break;
		}
		merge_put(t, l, r, (int32_t)i, m);
	}
	free(buf);
	return rv;
}

enum ds_status ds_tok_build(struct ds_tok_builder *b, struct ds_tokenizer **out,
			    struct ds_err *err)
{
	enum ds_status rv;
	*out = NULL;
	struct ds_tokenizer *t = calloc(1, sizeof(*t));
	if (!t || !(t->tok = calloc((size_t)b->n_vocab, sizeof(*t->tok)))) {
		rv = ds_errf(err, DS_ERR_NOMEM, "%s: out of memory", b->src);
		goto fail;
	}
	t->n_vocab = b->n_vocab;
	if ((rv = build_tokens(b, t, err)) != DS_OK)
		goto fail;
	if (b->need_merges && b->n_merges == 0) {
		int multi = 0;
		for (int i = 0; i < t->n_vocab; i++)
			multi += (t->tok[i].flags & DS_TOKF_MODEL) && t->tok[i].len > 1;
		if (multi > 0) {
			rv = ds_errf(err, DS_ERR_FORMAT,
				     "%s: BPE model has no merges but %d multi-byte tokens need them",
				     b->src, multi);
			goto fail;
		}
	}
	if ((rv = build_merges(b, t, err)) != DS_OK)
		goto fail;
	for (int i = 0; i < b->n_prefix + b->n_suffix; i++) {
		int32_t id = i < b->n_prefix ? b->prefix[i] : b->suffix[i - b->n_prefix];
		if (id < 0 || id >= t->n_vocab || !(t->tok[id].flags & DS_TOKF_PRESENT)) {
			rv = ds_errf(err, DS_ERR_FORMAT, "%s: post-processor adds token id %d, which is not in the vocabulary",
				     b->src, (int)id);
			goto fail;
		}
	}
	int *special[] = { &b->bos_id, &b->eos_id, &b->pad_id };
	for (size_t i = 0; i < DS_ARRAY_LEN(special); i++)
		if (*special[i] >= t->n_vocab || (*special[i] >= 0 && !(t->tok[*special[i]].flags & DS_TOKF_PRESENT)))
			*special[i] = -1; /* a BOS/EOS/PAD id without a token: treat as absent */
	memcpy(t->steps, b->steps, sizeof(b->steps));
	t->n_steps = b->n_steps;
	b->n_steps = 0; /* regexes now belong to t */
	t->nfc = b->nfc;
	t->ignore_merges = b->ignore_merges;
	memcpy(t->prefix, b->prefix, sizeof(t->prefix));
	memcpy(t->suffix, b->suffix, sizeof(t->suffix));
	t->n_prefix = b->n_prefix;
	t->n_suffix = b->n_suffix;
	t->bos_id = b->bos_id;
	t->eos_id = b->eos_id;
	t->pad_id = b->pad_id;
	t->cache = ds_tok_cache_new();
	ds_tok_builder_free(b);
	*out = t;
	return DS_OK;
fail:
	ds_tok_builder_free(b);
	ds_tokenizer_free(t);
	return rv;
}

void ds_tokenizer_free(struct ds_tokenizer *t)
{
	if (!t)
		return;
	for (int i = 0; i < t->n_steps; i++)
		pcre2_code_free(t->steps[i].re);
	free(t->tok);
	free(t->pool);
	free(t->vmap);
	free(t->amap);
	free(t->merges);
	ds_tok_cache_free(t->cache);
	free(t);
}

/* ---- queries ---- */

int ds_tokenizer_vocab_size(const struct ds_tokenizer *t) { return t->n_vocab; }
int ds_tokenizer_bos_id(const struct ds_tokenizer *t) { return t->bos_id; }
int ds_tokenizer_eos_id(const struct ds_tokenizer *t) { return t->eos_id; }
int ds_tokenizer_pad_id(const struct ds_tokenizer *t) { return t->pad_id; }

const char *ds_tokenizer_piece(const struct ds_tokenizer *t, int id, size_t *len)
{
	if (id < 0 || id >= t->n_vocab || !(t->tok[id].flags & DS_TOKF_PRESENT)) {
		*len = 0;
		return NULL;
	}
	*len = t->tok[id].len;
	return t->pool + t->tok[id].off;
}

int ds_tokenizer_find_added(const struct ds_tokenizer *t, const char *s)
{
	return ds_tok_added_find(t, s, strlen(s));
}

bool ds_tokenizer_is_special(const struct ds_tokenizer *t, int id)
{
	return id >= 0 && id < t->n_vocab && (t->tok[id].flags & DS_TOKF_SPECIAL);
}

/* ---- decode ---- */

enum ds_status ds_tokenizer_decode(const struct ds_tokenizer *t, const int32_t *ids, size_t n,
				   bool skip_special, char **text, size_t *len, struct ds_err *err)
{
	*text = NULL;
	*len = 0;
	size_t total = 0;
	for (size_t i = 0; i < n; i++) {
		if (ids[i] < 0 || ids[i] >= t->n_vocab || !(t->tok[ids[i]].flags & DS_TOKF_PRESENT))
			return ds_errf(err, DS_ERR_INVALID, "decode: unknown token id %d at %zu",
				       (int)ids[i], i);
		total += t->tok[ids[i]].len;
	}
	uint8_t *raw = malloc(total + 1);
	char *o = malloc(3 * total + 1);
	if (!raw || !o) {
		free(raw);
		free(o);
		return ds_errf(err, DS_ERR_NOMEM, "decode: out of memory for %zu bytes", total);
	}
	size_t r = 0;
	for (size_t i = 0; i < n; i++) {
		const struct ds_tok_entry *e = &t->tok[ids[i]];
		if (skip_special && (e->flags & DS_TOKF_SPECIAL))
			continue;
		memcpy(raw + r, t->pool + e->off, e->len);
		r += e->len;
	}
	size_t ol = ds_utf8_sanitize(raw, r, o);
	free(raw);
	o[ol] = 0;
	*text = o;
	*len = ol;
	return DS_OK;
}

/* ---- streaming decode ---- */

void ds_tokenizer_stream_init(struct ds_tokenizer_stream *s, const struct ds_tokenizer *t,
			      bool skip_special)
{
	memset(s, 0, sizeof(*s));
	s->tok = t;
	s->skip_special = skip_special;
}

static enum ds_status stream_reserve(struct ds_tokenizer_stream *s, size_t need, struct ds_err *err)
{
	if (need <= s->out_cap)
		return DS_OK;
	size_t c = s->out_cap ? s->out_cap : 64;
	while (c < need)
		c *= 2;
	char *p = realloc(s->out, c);
	if (!p)
		return ds_errf(err, DS_ERR_NOMEM, "decode stream: out of memory");
	s->out = p;
	s->out_cap = c;
	return DS_OK;
}

enum ds_status ds_tokenizer_stream_push(struct ds_tokenizer_stream *s, int32_t id,
					const char **text, size_t *len, struct ds_err *err)
{
	const struct ds_tokenizer *t = s->tok;
	*text = "";
	*len = 0;
	if (id < 0 || id >= t->n_vocab || !(t->tok[id].flags & DS_TOKF_PRESENT))
		return ds_errf(err, DS_ERR_INVALID, "decode stream: unknown token id %d", (int)id);
	const struct ds_tok_entry *e = &t->tok[id];
	if (s->skip_special && (e->flags & DS_TOKF_SPECIAL))
		return DS_OK;
	size_t n = (size_t)s->n_pending + e->len;
	/* pending + piece, then the sanitized output, in one buffer */
	enum ds_status rv = stream_reserve(s, n + 3 * n + 1, err);
	if (rv != DS_OK)
		return rv;
	uint8_t *in = (uint8_t *)s->out + 3 * n + 1;
	memcpy(in, s->pending, (size_t)s->n_pending);
	memcpy(in + s->n_pending, t->pool + e->off, e->len);
	/* hold back a valid but incomplete character at the end */
	size_t keep = 0;
	for (size_t k = 1; k <= 3 && k <= n; k++) {
		int cl = ds_utf8_char_len(in + n - k, k);
		if (cl < 0) {
			keep = k;
			break;
		}
		if (in[n - k] >= 0xc0 || in[n - k] < 0x80)
			break; /* a lead byte or ASCII that is complete or invalid */
	}
	size_t ol = ds_utf8_sanitize(in, n - keep, s->out);
	memcpy(s->pending, in + n - keep, keep);
	s->n_pending = (int)keep;
	s->out[ol] = 0;
	*text = s->out;
	*len = ol;
	return DS_OK;
}

enum ds_status ds_tokenizer_stream_flush(struct ds_tokenizer_stream *s, const char **text,
					 size_t *len, struct ds_err *err)
{
	*text = "";
	*len = 0;
	if (s->n_pending == 0)
		return DS_OK;
	enum ds_status rv = stream_reserve(s, 4, err);
	if (rv != DS_OK)
		return rv;
	memcpy(s->out, "\xef\xbf\xbd", 4);
	s->n_pending = 0;
	*text = s->out;
	*len = 3;
	return DS_OK;
}

void ds_tokenizer_stream_free(struct ds_tokenizer_stream *s)
{
	free(s->out);
	memset(s, 0, sizeof(*s));
}
