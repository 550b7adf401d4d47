/* tokenizer_gguf.c - byte-level BPE from GGUF metadata (tokenizer.ggml.model == "gpt2").
 *
 * GGUF stores the vocab and merges in HF's byte-level form but names the pre-tokenizer
 * only by llama.cpp's tokenizer.ggml.pre string; the table below maps each name we support
 * to the pipeline of the model's own tokenizer.json (what HF `tokenizers` would run), so
 * a GGUF-loaded tokenizer encodes token for token like the model's tokenizer.json.
 * Token types: CONTROL (3) become special added tokens, USER_DEFINED (4) plain added ones.
 * ds_tokenizer_load (the path dispatcher) lives here too: it is the one caller of ds_gguf_open. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf.h"
#include "tokenizer_internal.h"

enum pre_kind { PRE_GPT2, PRE_LLAMA3, PRE_QWEN2, PRE_DIGITS_GPT2 };

static const struct {
	const char *name;
	enum pre_kind kind;
} pre_table[] = {
	{ "default", PRE_GPT2 },        { "gpt2", PRE_GPT2 },          { "gpt-2", PRE_GPT2 },
	{ "llama3", PRE_LLAMA3 },       { "llama-bpe", PRE_LLAMA3 },   { "llama-v3", PRE_LLAMA3 },
	{ "qwen2", PRE_QWEN2 },         { "smollm", PRE_DIGITS_GPT2 }, { "starcoder", PRE_DIGITS_GPT2 },
	{ "refact", PRE_DIGITS_GPT2 },  { "codeshell", PRE_DIGITS_GPT2 },
};

static enum ds_status set_pre(struct ds_tok_builder *b, const char *pre, struct ds_err *err)
{
	size_t k = 0;
	while (k < DS_ARRAY_LEN(pre_table) && strcmp(pre_table[k].name, pre) != 0)
		k++;
	if (k == DS_ARRAY_LEN(pre_table))
		return ds_errf(err, DS_ERR_UNSUPPORTED,
			       "%s: tokenizer.ggml.pre \"%s\" is not supported (gpt2, llama-bpe, qwen2, smollm ...)",
			       b->src, pre);
	enum ds_status rv = DS_OK;
	switch (pre_table[k].kind) {
	case PRE_GPT2:
		rv = ds_tok_builder_step(b, DS_STEP_BYTELEVEL, ds_tok_re_gpt2, false, DS_SPLIT_ISOLATED,
					 false, false, err);
		break;
	case PRE_LLAMA3:
	case PRE_QWEN2: {
		bool l3 = pre_table[k].kind == PRE_LLAMA3;
		rv = ds_tok_builder_step(b, DS_STEP_SPLIT, l3 ? ds_tok_re_llama3 : ds_tok_re_qwen2, false,
					 DS_SPLIT_ISOLATED, false, false, err);
		if (rv == DS_OK)
			rv = ds_tok_builder_step(b, DS_STEP_BYTELEVEL, NULL, false, DS_SPLIT_ISOLATED,
						 false, false, err);
		b->ignore_merges = l3; /* Llama-3's tokenizer.json sets it; Qwen2's does not */
		b->nfc = !l3;          /* Qwen2's tokenizer.json normalizes to NFC */
		break;
	}
	case PRE_DIGITS_GPT2:
		rv = ds_tok_builder_step(b, DS_STEP_SPLIT, "\\p{N}", false, DS_SPLIT_ISOLATED, false,
					 false, err);
		if (rv == DS_OK)
			rv = ds_tok_builder_step(b, DS_STEP_BYTELEVEL, ds_tok_re_gpt2, false,
						 DS_SPLIT_ISOLATED, false, false, err);
		break;
	}
	return rv;
}

static const struct ds_gguf_kv *find_array(const struct ds_gguf *g, const char *key,
					   enum ds_gguf_type elem, uint64_t elem_size)
{
	const struct ds_gguf_kv *kv = ds_gguf_find(g, key);
	if (!kv || kv->type != DS_GGUF_ARRAY || kv->arr_type != elem)
		return NULL;
	if (elem_size && kv->arr_len > kv->data_len / elem_size)
		return NULL;
	return kv;
}

static int get_id(const struct ds_gguf *g, const char *key)
{
	uint64_t v;
	return ds_gguf_get_u64(g, key, &v) == DS_OK && v < INT32_MAX ? (int)v : -1;
}

static bool get_bool(const struct ds_gguf *g, const char *key)
{
	const struct ds_gguf_kv *kv = ds_gguf_find(g, key);
	return kv && kv->type == DS_GGUF_BOOL && kv->data_len >= 1 && kv->data[0] != 0;
}

static enum ds_status load_tokens(struct ds_tok_builder *b, const struct ds_gguf *g,
				  const struct ds_gguf_kv *toks, struct ds_err *err)
{
	const struct ds_gguf_kv *types = ds_gguf_find(g, "tokenizer.ggml.token_type");
	if (types && (types->type != DS_GGUF_ARRAY ||
		      (types->arr_type != DS_GGUF_INT32 && types->arr_type != DS_GGUF_UINT32) ||
		      types->arr_len != toks->arr_len || types->data_len / 4 < types->arr_len))
		return ds_errf(err, DS_ERR_FORMAT,
			       "%s: tokenizer.ggml.token_type is not an int32 array of %llu entries",
			       b->src, (unsigned long long)toks->arr_len);
	for (uint64_t i = 0; i < toks->arr_len; i++) {
		struct ds_gguf_str s;
		enum ds_status rv = ds_gguf_arr_str(toks, i, &s);
		if (rv != DS_OK)
			return ds_errf(err, rv, "%s: tokenizer.ggml.tokens[%llu] unreadable", b->src,
				       (unsigned long long)i);
		int32_t type = 1;
		if (types)
			memcpy(&type, types->data + 4 * i, 4);
		uint32_t f = type == 3   ? DS_TOKF_MODEL | DS_TOKF_ADDED | DS_TOKF_SPECIAL
			     : type == 4 ? DS_TOKF_MODEL | DS_TOKF_ADDED
					 : DS_TOKF_MODEL;
		if ((rv = ds_tok_builder_set(b, (int)i, s.p, s.len, f, err)) != DS_OK)
			return rv;
	}
	return DS_OK;
}

static enum ds_status load_merges(struct ds_tok_builder *b, const struct ds_gguf_kv *merges,
				  struct ds_err *err)
{
	for (uint64_t i = 0; i < merges->arr_len; i++) {
		struct ds_gguf_str s;
		enum ds_status rv = ds_gguf_arr_str(merges, i, &s);
		if (rv != DS_OK)
			return ds_errf(err, rv, "%s: tokenizer.ggml.merges[%llu] unreadable", b->src,
				       (unsigned long long)i);
		const char *sp = memchr(s.p, ' ', s.len);
		if (!sp || memchr(sp + 1, ' ', s.len - (size_t)(sp - s.p) - 1))
			return ds_errf(err, DS_ERR_FORMAT,
				       "%s: tokenizer.ggml.merges[%llu] \"%.*s\" is not \"left right\"",
				       b->src, (unsigned long long)i, (int)DS_MIN(s.len, 64u), s.p);
		size_t ll = (size_t)(sp - s.p);
		if ((rv = ds_tok_builder_merge(b, s.p, ll, sp + 1, s.len - ll - 1, err)) != DS_OK)
			return rv;
	}
	return DS_OK;
}

enum ds_status ds_tokenizer_load_gguf(const struct ds_gguf *g, struct ds_tokenizer **out,
				      struct ds_err *err)
{
	enum ds_status rv;
	struct ds_tok_builder b;
	const char *src = g->path;
	*out = NULL;
	struct ds_gguf_str model, pre = { "default", 7 };
	if (ds_gguf_get_str(g, "tokenizer.ggml.model", &model) != DS_OK)
		return ds_errf(err, DS_ERR_FORMAT, "%s: no tokenizer.ggml.model string", src);
	if (model.len != 4 || memcmp(model.p, "gpt2", 4) != 0)
		return ds_errf(err, DS_ERR_UNSUPPORTED,
			       "%s: tokenizer.ggml.model \"%.*s\" is not supported (only gpt2 byte-level BPE)",
			       src, (int)DS_MIN(model.len, 64u), model.p);
	(void)ds_gguf_get_str(g, "tokenizer.ggml.pre", &pre);
	char pre_name[64];
	snprintf(pre_name, sizeof(pre_name), "%.*s", (int)DS_MIN(pre.len, 63u), pre.p);
	const struct ds_gguf_kv *toks = find_array(g, "tokenizer.ggml.tokens", DS_GGUF_STRING, 0);
	if (!toks || toks->arr_len == 0 || toks->arr_len > (1u << 24))
		return ds_errf(err, DS_ERR_FORMAT, "%s: tokenizer.ggml.tokens is missing or not a string array",
			       src);
	const struct ds_gguf_kv *merges = find_array(g, "tokenizer.ggml.merges", DS_GGUF_STRING, 0);
	if (!merges)
		return ds_errf(err, DS_ERR_FORMAT, "%s: tokenizer.ggml.merges is missing: BPE needs merges",
			       src);
	if ((rv = ds_tok_builder_init(&b, src, (int)toks->arr_len, err)) != DS_OK)
		return rv;
	b.need_merges = true;
	if ((rv = load_tokens(&b, g, toks, err)) != DS_OK || (rv = load_merges(&b, merges, err)) != DS_OK ||
	    (rv = set_pre(&b, pre_name, err)) != DS_OK)
		goto fail;
	b.bos_id = get_id(g, "tokenizer.ggml.bos_token_id");
	b.eos_id = get_id(g, "tokenizer.ggml.eos_token_id");
	b.pad_id = get_id(g, "tokenizer.ggml.padding_token_id");
	if (get_bool(g, "tokenizer.ggml.add_bos_token") && b.bos_id >= 0)
		b.prefix[b.n_prefix++] = b.bos_id;
	if (get_bool(g, "tokenizer.ggml.add_eos_token") && b.eos_id >= 0)
		b.suffix[b.n_suffix++] = b.eos_id;
	return ds_tok_build(&b, out, err);
fail:
	ds_tok_builder_free(&b);
	return rv;
}

/* ---- loading by path ---- */

static bool ends_with(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && strcmp(s + a - b, suf) == 0;
}

enum ds_status ds_tokenizer_load(const char *path, struct ds_tokenizer **out, struct ds_err *err)
{
	*out = NULL;
	if (!path)
		return ds_errf(err, DS_ERR_INVALID, "tokenizer: no path");
	struct stat st;
	if (stat(path, &st) != 0)
		return ds_errf(err, DS_ERR_IO, "%s: %s", path, strerror(errno));
	if (!S_ISDIR(st.st_mode) && ends_with(path, ".gguf")) {
		struct ds_gguf *g;
		enum ds_status rv = ds_gguf_open(path, &g, err);
		if (rv != DS_OK)
			return rv;
		rv = ds_tokenizer_load_gguf(g, out, err);
		ds_gguf_close(g);
		return rv;
	}
	char tj[4096], tc[4096];
	if (S_ISDIR(st.st_mode)) {
		snprintf(tj, sizeof(tj), "%s/tokenizer.json", path);
		snprintf(tc, sizeof(tc), "%s/tokenizer_config.json", path);
	} else {
		snprintf(tj, sizeof(tj), "%s", path);
		const char *slash = strrchr(path, '/');
		snprintf(tc, sizeof(tc), "%.*stokenizer_config.json",
			 slash ? (int)(slash - path + 1) : 0, path);
	}
	return ds_tokenizer_load_json(tj, access(tc, R_OK) == 0 ? tc : NULL, out, err);
}

