/* tokenizer_internal.h - the tokenizer's private layout, shared by tokenizer*.c only.
 *
 * Loaders (JSON, GGUF, byte-level) fill a struct ds_tok_builder with token strings in
 * their vocab form (byte-level mapped), merges as string pairs and the pre-tokenizer
 * pipeline; ds_tok_build() turns it into the immutable struct ds_tokenizer. */
#ifndef DS_TOKENIZER_INTERNAL_H
#define DS_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer.h"

/* ---- the pre-tokenizer pipeline (HF pre_tokenizers) ---- */

enum ds_tok_split_behavior {
	DS_SPLIT_ISOLATED,
	DS_SPLIT_REMOVED,
	DS_SPLIT_MERGED_PREV,
	DS_SPLIT_MERGED_NEXT,
	DS_SPLIT_CONTIGUOUS,
};

enum ds_tok_step_kind {
	DS_STEP_SPLIT,     /* Split / Digits: regex matches with a behavior */
	DS_STEP_BYTELEVEL, /* ByteLevel: optional prefix space, optional GPT-2 regex split */
};

struct ds_tok_step {
	enum ds_tok_step_kind kind;
	pcre2_code *re; /* NULL for ByteLevel with use_regex = false */
	enum ds_tok_split_behavior behavior;
	bool invert;
	bool add_prefix_space;
};

#define DS_TOK_MAX_STEPS 8
#define DS_TOK_MAX_AFFIX 4

/* The regexes named by llama.cpp's tokenizer.ggml.pre values and HF's ByteLevel. */
extern const char ds_tok_re_gpt2[];
extern const char ds_tok_re_llama3[];
extern const char ds_tok_re_qwen2[];

/* ---- the tokenizer ---- */

enum {
	DS_TOKF_PRESENT = 1, /* the id has a token */
	DS_TOKF_ADDED = 2,   /* matched in the text before pre-tokenization */
	DS_TOKF_SPECIAL = 4, /* skipped by decode(skip_special) */
	DS_TOKF_LSTRIP = 8,
	DS_TOKF_RSTRIP = 16,
	DS_TOKF_MODEL = 32,  /* in the BPE model's vocab (vs added only) */
	DS_TOKF_MAPPED = 64, /* its vocab string is in the byte-level mapping's image */
};

struct ds_tok_entry {
	uint32_t off, len;   /* raw bytes (the piece) in pool */
	uint32_t coff, clen; /* added tokens: the content matched in text, in pool */
	uint32_t flags;
};

struct ds_tok_merge_slot {
	uint64_t key; /* (left id << 32 | right id) + 1; 0 = empty */
	int32_t rank, new_id;
};

struct ds_tokenizer {
	int n_vocab;
	struct ds_tok_entry *tok; /* (n_vocab) */
	char *pool;
	size_t pool_len;

	int32_t byte_id[256]; /* initial BPE symbol of each byte, -1 when absent */

	/* model-vocab bytes -> id (ignore_merges), open addressing, -1 = empty */
	int32_t *vmap;
	uint32_t vmap_mask;

	/* (left, right) -> (rank, merged id) */
	struct ds_tok_merge_slot *merges;
	uint64_t merge_mask;
	int n_merges;

	/* added tokens: content -> id, probed per distinct length, longest first */
	int32_t *amap;
	uint32_t amap_mask;
	uint32_t added_lens[64];
	int n_added_lens;
	uint8_t added_first[32]; /* bitmap of first bytes */
	int n_added;

	struct ds_tok_step steps[DS_TOK_MAX_STEPS];
	int n_steps;
	bool nfc;
	bool ignore_merges;

	int32_t prefix[DS_TOK_MAX_AFFIX], suffix[DS_TOK_MAX_AFFIX];
	int n_prefix, n_suffix;
	int bos_id, eos_id, pad_id;

	struct ds_tok_cache *cache; /* the only mutable part; has its own lock; may be NULL */
};

/* The repeated-word cache (tokenizer_encode.c). NULL on OOM (encoding works without). */
struct ds_tok_cache *ds_tok_cache_new(void);
void ds_tok_cache_free(struct ds_tok_cache *c);

/* ---- building ---- */

struct ds_tok_builder {
	const char *src; /* file name for messages */
	int n_vocab;
	char **str;      /* (n_vocab) vocab-form string, NUL-terminated, or NULL */
	uint32_t *slen;
	uint32_t *flags;
	char **merge_l, **merge_r; /* (n_merges) borrowed or owned per merges_owned */
	size_t n_merges, cap_merges;
	struct ds_tok_step steps[DS_TOK_MAX_STEPS];
	int n_steps;
	bool nfc, ignore_merges, need_merges;
	int32_t prefix[DS_TOK_MAX_AFFIX], suffix[DS_TOK_MAX_AFFIX];
	int n_prefix, n_suffix;
	int bos_id, eos_id, pad_id;
};

enum ds_status ds_tok_builder_init(struct ds_tok_builder *b, const char *src, int n_vocab,
				   struct ds_err *err);
void ds_tok_builder_free(struct ds_tok_builder *b);
/* Sets id's string (copied, len bytes) and flags. DS_ERR_FORMAT when id is out of range. */
enum ds_status ds_tok_builder_set(struct ds_tok_builder *b, int id, const char *s, size_t len,
				  uint32_t flags, struct ds_err *err);
/* Appends merge (l, r) (copied); rank = order of appending. */
enum ds_status ds_tok_builder_merge(struct ds_tok_builder *b, const char *l, size_t ll,
				    const char *r, size_t rl, struct ds_err *err);
/* Appends a pre-tokenizer step; pattern NULL for a regex-less ByteLevel. */
enum ds_status ds_tok_builder_step(struct ds_tok_builder *b, enum ds_tok_step_kind kind,
				   const char *pattern, bool literal,
				   enum ds_tok_split_behavior behavior, bool invert,
				   bool add_prefix_space, struct ds_err *err);
/* Consumes b (freed on success and failure) and yields the tokenizer. */
enum ds_status ds_tok_build(struct ds_tok_builder *b, struct ds_tokenizer **out,
			    struct ds_err *err);

/* Lookups: model-vocab raw bytes -> id, added content -> id (-1 when absent), and the
 * merge of (l, r) (NULL when none). */
int32_t ds_tok_vocab_find(const struct ds_tokenizer *t, const char *s, size_t len);
int32_t ds_tok_added_find(const struct ds_tokenizer *t, const char *s, size_t len);
const struct ds_tok_merge_slot *ds_tok_merge_find(const struct ds_tokenizer *t, int32_t l, int32_t r);
/* Starts loading the merge table slot of (l, r): the table is far larger than the caches. */
void ds_tok_merge_prefetch(const struct ds_tokenizer *t, int32_t l, int32_t r);

/* ---- helpers shared by the loaders and encode ---- */

/* GPT-2 bytes_to_unicode: the code point standing for byte b in vocab strings. */
uint32_t ds_tok_byte_to_cp(uint8_t b);
/* Undoes the mapping on a vocab string: true and out (len bytes, cap >= len) on success,
 * false when s holds a character outside the mapping's image or is not UTF-8. */
bool ds_tok_unmap(const char *s, size_t len, char *out, size_t *out_len);
/* Appends the vocab (mapped) form of raw bytes to out (cap >= 2*len+1), NUL-terminated. */
size_t ds_tok_map(const uint8_t *raw, size_t len, char *out);

/* Replaces ill-formed UTF-8 with U+FFFD per maximal subpart. Returns the number of output
 * bytes written to out (cap >= 3*len) or, with out NULL, whether in is valid (1) or not (0). */
size_t ds_utf8_sanitize(const uint8_t *in, size_t len, char *out);
/* Length of the valid character at p (1..4), 0 when ill-formed, -k when p[0..n) is a valid
 * but incomplete prefix needing more bytes. */
int ds_utf8_char_len(const uint8_t *p, size_t n);
/* Length of the maximal ill-formed subpart at p (>= 1). */
size_t ds_utf8_bad_len(const uint8_t *p, size_t n);

#endif
