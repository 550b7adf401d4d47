/* gguf_model.c - a llama.cpp GGUF (general.architecture = llama) as a struct ds_model.
 *
 * Hyperparameters come from the llama.* keys, token ids from tokenizer.ggml.*, and every tensor
 * of the canonical list (tensors.h) is found under its llama.cpp name, shape-checked against the
 * config, dequantized to bf16 (or, with ds_model_load_gguf_as, to f32) into model-owned buffers,
 * and the file is unmapped. Key design
 * decision: llama.cpp's converter permutes the rows of attn_q / attn_k so that its RoPE rotates
 * adjacent pairs (x[2i], x[2i+1]); we undo that permutation at load, so the weights are plain HF
 * layout and our rotate_half RoPE (pairs x[i], x[i + head_dim/2]) applies unchanged. The golden
 * test against transformers proves the direction. Llama-3.1 RoPE scaling is recovered from the
 * rope_freqs tensor (see match_llama3_rope). Identity = XXH3-128 of the header, metadata and
 * tensor-info bytes (which name every tensor's type, shape and offset). */
#include "dequant.h"
#include "gguf.h"
#include "model_internal.h"
#include "tensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <xxhash.h>

static enum ds_status need_u64(const struct ds_gguf *g, const char *key, uint64_t max, int *out,
                               struct ds_err *err)
{
	uint64_t v;
	enum ds_status s = ds_gguf_get_u64(g, key, &v);
	if (s == DS_ERR_NOT_FOUND)
		return ds_errf(err, DS_ERR_FORMAT, "%s: GGUF metadata: missing key %s", g->path,
		               key);
	if (s || v == 0 || v > max)
		return ds_errf(err, DS_ERR_FORMAT,
		               "%s: GGUF metadata: %s is not an integer in 1..%llu", g->path, key,
		               (unsigned long long)max);
	*out = (int)v;
	return DS_OK;
}

/* Optional key: absent keeps *out. */
static enum ds_status opt_f32(const struct ds_gguf *g, const char *key, float *out,
                              struct ds_err *err)
{
	enum ds_status s = ds_gguf_get_f32(g, key, out);
	if (s == DS_ERR_NOT_FOUND)
		return DS_OK;
	if (s)
		return ds_errf(err, DS_ERR_FORMAT, "%s: GGUF metadata: %s is not a number", g->path,
		               key);
	return DS_OK;
}

static enum ds_status opt_id(const struct ds_gguf *g, const char *key, int *out, struct ds_err *err)
{
	uint64_t v;
	enum ds_status s = ds_gguf_get_u64(g, key, &v);
	if (s == DS_ERR_NOT_FOUND)
		return DS_OK;
	if (s || v > INT32_MAX)
		return ds_errf(err, DS_ERR_FORMAT, "%s: GGUF metadata: %s is not a token id",
		               g->path, key);
	*out = (int)v;
	return DS_OK;
}

/* llama.cpp stores Llama-3.1-style RoPE scaling only as per-frequency divisors (rope_freqs,
 * head_dim/2 f32 values computed by convert_hf_to_gguf.py from factor, low/high_freq_factor
 * and original_max_position_embeddings). We recover those parameters by trying the published
 * configurations (3.1: factor 8, 3.2: factor 32; low 1, high 4, original context 8192) and
 * accept one only if it reproduces every stored divisor. */
static enum ds_status match_llama3_rope(const struct ds_gguf *g, const struct ds_gguf_tensor *t,
                                        struct ds_model_config *c, struct ds_err *err)
{
	int half = c->head_dim / 2;
	if (t->ggml_type != DS_GGML_F32 || t->dims[0] != (uint64_t)half || t->dims[1] != 1 ||
	    t->dims[2] != 1 || t->dims[3] != 1)
		return ds_errf(err, DS_ERR_FORMAT,
		               "%s: GGUF tensor rope_freqs.weight: expected %d F32 "
		               "values",
		               g->path, half);
	uint64_t orig = 8192;
	ds_gguf_get_u64(g, "llama.rope.scaling.original_context_length", &orig);
	static const double factors[] = {8.0, 16.0, 32.0};
	for (size_t k = 0; k < DS_ARRAY_LEN(factors); k++) {
		double factor = factors[k], lo = 1.0, hi = 4.0, old = (double)orig;
		bool match = true;
		for (int i = 0; i < half && match; i++) {
			double f = 1.0 / pow((double)c->rope_theta, (2.0 * i) / c->head_dim);
			double wavelen = 2.0 * M_PI / f, want;
			if (wavelen < old / hi)
				want = 1.0;
			else if (wavelen > old / lo)
				want = factor;
			else {
				double smooth = (old / wavelen - lo) / (hi - lo);
				want = 1.0 / ((1.0 - smooth) / factor + smooth);
			}
			float got;
			memcpy(&got, t->data + 4 * (size_t)i, 4);
			match = fabs((double)got - want) <= 1e-4 * want;
		}
		if (match) {
			c->rope_scaling = DS_ROPE_LLAMA3;
			c->rope_factor = (float)factor;
			c->rope_low_freq_factor = (float)lo;
			c->rope_high_freq_factor = (float)hi;
			c->rope_orig_max_pos = (int)orig;
			return DS_OK;
		}
	}
	return ds_errf(
	    err, DS_ERR_UNSUPPORTED,
	    "%s: GGUF: rope_freqs.weight does not match Llama-3 RoPE scaling (factor 8/16/32, "
	    "low 1, high 4, original context %llu)",
	    g->path, (unsigned long long)orig);
}

static enum ds_status read_config(const struct ds_gguf *g, struct ds_model_config *c,
                                  struct ds_err *err)
{
	enum ds_status s;
	struct ds_gguf_str arch;
	memset(c, 0, sizeof(*c));
	if (ds_gguf_get_str(g, "general.architecture", &arch))
		return ds_errf(err, DS_ERR_FORMAT,
		               "%s: GGUF metadata: missing general.architecture", g->path);
	if (arch.len != 5 || memcmp(arch.p, "llama", 5) != 0)
		return ds_errf(err, DS_ERR_UNSUPPORTED,
		               "%s: GGUF architecture '%.*s' is not supported (only llama)",
		               g->path, (int)DS_MIN(arch.len, 64), arch.p);
	snprintf(c->arch, sizeof(c->arch), "LlamaForCausalLM");
	if ((s = need_u64(g, "llama.context_length", 1u << 24, &c->max_pos, err)) ||
	    (s = need_u64(g, "llama.embedding_length", 1u << 16, &c->hidden, err)) ||
	    (s = need_u64(g, "llama.block_count", 1024, &c->n_layer, err)) ||
	    (s = need_u64(g, "llama.feed_forward_length", 1u << 18, &c->ffn, err)) ||
	    (s = need_u64(g, "llama.attention.head_count", 1024, &c->n_head, err)))
		return s;
	c->n_kv_head = c->n_head;
	if (ds_gguf_find(g, "llama.attention.head_count_kv") &&
	    (s = need_u64(g, "llama.attention.head_count_kv", 1024, &c->n_kv_head, err)))
		return s;
	if (c->hidden % c->n_head)
		return ds_errf(
		    err, DS_ERR_FORMAT,
		    "%s: GGUF metadata: embedding_length %d not divisible by head_count %d",
		    g->path, c->hidden, c->n_head);
	c->head_dim = c->hidden / c->n_head;
	if (ds_gguf_find(g, "llama.attention.key_length") &&
	    (s = need_u64(g, "llama.attention.key_length", 1u << 12, &c->head_dim, err)))
		return s;
	uint64_t rot;
	if (ds_gguf_get_u64(g, "llama.rope.dimension_count", &rot) == DS_OK &&
	    rot != (uint64_t)c->head_dim)
		return ds_errf(err, DS_ERR_UNSUPPORTED,
		               "%s: GGUF: partial RoPE (rope.dimension_count %llu != head_dim %d)",
		               g->path, (unsigned long long)rot, c->head_dim);
	c->rope_theta = 10000.0f;
	c->rms_eps = 1e-5f;
	if ((s = opt_f32(g, "llama.rope.freq_base", &c->rope_theta, err)) ||
	    (s = opt_f32(g, "llama.attention.layer_norm_rms_epsilon", &c->rms_eps, err)))
		return s;
	struct ds_gguf_str st;
	if (ds_gguf_get_str(g, "llama.rope.scaling.type", &st) == DS_OK &&
	    !(st.len == 4 && memcmp(st.p, "none", 4) == 0))
		return ds_errf(err, DS_ERR_UNSUPPORTED,
		               "%s: GGUF: RoPE scaling '%.*s' is not supported", g->path,
		               (int)DS_MIN(st.len, 32), st.p);
	const struct ds_gguf_tensor *rf = ds_gguf_find_tensor(g, "rope_freqs.weight");
	if (rf && (s = match_llama3_rope(g, rf, c, err)))
		return s;

	/* vocab: the token list when present, else token_embd's shape (checked below anyway) */
	const struct ds_gguf_tensor *emb = ds_gguf_find_tensor(g, "token_embd.weight");
	const struct ds_gguf_kv *toks = ds_gguf_find(g, "tokenizer.ggml.tokens");
	if (toks && (toks->type != DS_GGUF_ARRAY || toks->arr_type != DS_GGUF_STRING))
		return ds_errf(err, DS_ERR_FORMAT,
		               "%s: GGUF metadata: tokenizer.ggml.tokens is not a string array",
		               g->path);
	uint64_t vocab = toks ? toks->arr_len : (emb && emb->n_dims == 2 ? emb->dims[1] : 0);
	if (vocab == 0 || vocab > INT32_MAX)
		return ds_errf(err, DS_ERR_FORMAT, "%s: GGUF: cannot tell the vocabulary size",
		               g->path);
	c->vocab_size = (int)vocab;
	c->bos_id = -1;
	int eos = -1, eot = -1;
	if ((s = opt_id(g, "tokenizer.ggml.bos_token_id", &c->bos_id, err)) ||
	    (s = opt_id(g, "tokenizer.ggml.eos_token_id", &eos, err)) ||
	    (s = opt_id(g, "tokenizer.ggml.eot_token_id", &eot, err)))
		return s;
	if (eos >= 0)
		c->eos_ids[c->n_eos++] = eos;
	if (eot >= 0 && eot != eos)
		c->eos_ids[c->n_eos++] = eot;
	c->tie_embeddings = ds_gguf_find_tensor(g, "output.weight") == NULL;
	struct ds_err cerr = {{0}};
	if (ds_model_config_check(c, &cerr))
		return ds_errf(err, DS_ERR_FORMAT, "%s: GGUF: %s", g->path, cerr.msg);
	return DS_OK;
}

/* llama.cpp name of a canonical tensor. */
static void gguf_name(const struct ds_tensor_desc *d, char *buf, size_t len)
{
	const char *sfx = "";
	switch (d->field) {
	case DS_T_TOK_EMBD:
		snprintf(buf, len, "token_embd.weight");
		return;
	case DS_T_OUT_NORM:
		snprintf(buf, len, "output_norm.weight");
		return;
	case DS_T_LM_HEAD:
		snprintf(buf, len, "output.weight");
		return;
	case DS_T_ATTN_NORM:
		sfx = "attn_norm.weight";
		break;
	case DS_T_WQ:
		sfx = "attn_q.weight";
		break;
	case DS_T_WK:
		sfx = "attn_k.weight";
		break;
	case DS_T_WV:
		sfx = "attn_v.weight";
		break;
	case DS_T_WO:
		sfx = "attn_output.weight";
		break;
	case DS_T_FFN_NORM:
		sfx = "ffn_norm.weight";
		break;
	case DS_T_W_GATE:
		sfx = "ffn_gate.weight";
		break;
	case DS_T_W_UP:
		sfx = "ffn_up.weight";
		break;
	case DS_T_W_DOWN:
		sfx = "ffn_down.weight";
		break;
	case DS_T_BQ:
		sfx = "attn_q.bias";
		break;
	case DS_T_BK:
		sfx = "attn_k.bias";
		break;
	case DS_T_BV:
		sfx = "attn_v.bias";
		break;
	case DS_T_Q_NORM:
		sfx = "attn_q_norm.weight";
		break;
	case DS_T_K_NORM:
		sfx = "attn_k_norm.weight";
		break;
	}
	snprintf(buf, len, "blk.%d.%s", d->layer, sfx);
}

/* The permutation on rows of elem-byte values (bf16 or f32). */
static void unpermute_rows(void *dst, const void *src, int n_head, int head_dim, int row_len,
                           size_t elem)
{
	int half = head_dim / 2;
	size_t row = (size_t)row_len * elem;
	for (int h = 0; h < n_head; h++)
		for (int j = 0; j < half; j++)
			for (int s = 0; s < 2; s++) {
				size_t from = (size_t)h * head_dim + 2 * j + s;
				size_t to = (size_t)h * head_dim + s * half + j;
				memcpy((char *)dst + to * row, (const char *)src + from * row, row);
			}
}

void ds_gguf_unpermute_rows(uint16_t *dst, const uint16_t *src, int n_head, int head_dim,
                            int row_len)
{
	unpermute_rows(dst, src, n_head, head_dim, row_len, sizeof(*dst));
}

static enum ds_status load_tensor(struct ds_model *m, const struct ds_gguf *g,
                                  const struct ds_tensor_desc *d, struct ds_err *err)
{
	char name[96];
	gguf_name(d, name, sizeof(name));
	const struct ds_gguf_tensor *t = ds_gguf_find_tensor(g, name);
	if (!t)
		return ds_errf(err, DS_ERR_NOT_FOUND, "%s: GGUF: missing tensor %s (for %s)",
		               g->path, name, d->name);
	/* GGUF dims are fastest-first: a (out, in) HF weight is dims {in, out} */
	int64_t want0 = d->ndim == 2 ? d->shape[1] : d->shape[0];
	int64_t want1 = d->ndim == 2 ? d->shape[0] : 1;
	bool ok = t->dims[0] == (uint64_t)want0 && t->dims[1] == (uint64_t)want1 &&
	          t->dims[2] == 1 && t->dims[3] == 1;
	if (!ok)
		return ds_errf(
		    err, DS_ERR_FORMAT,
		    "%s: GGUF tensor %s has shape [%llu, %llu, %llu, %llu], expected [%lld, %lld]",
		    g->path, name, (unsigned long long)t->dims[0], (unsigned long long)t->dims[1],
		    (unsigned long long)t->dims[2], (unsigned long long)t->dims[3],
		    (long long)want0, (long long)want1);
	if (!ds_dequant_supported(t->ggml_type))
		return ds_errf(err, DS_ERR_UNSUPPORTED,
		               "%s: GGUF tensor %s: type %s is not supported", g->path, name,
		               ds_gguf_type_name(t->ggml_type));
	size_t n = (size_t)ds_tensor_numel(d);
	bool permuted = d->field == DS_T_WQ || d->field == DS_T_WK;
	bool f32 = m->wtype == DS_DTYPE_F32;
	size_t elem = f32 ? sizeof(float) : sizeof(uint16_t);
	void *buf = ds_model_alloc(m, n * elem);
	void *tmp = permuted ? malloc(n * elem) : buf;
	if (!buf || !tmp) {
		if (tmp != buf)
			free(tmp);
		return ds_errf(err, DS_ERR_NOMEM, "%s: out of memory for %s", g->path, name);
	}
	enum ds_status s = f32 ? ds_dequant_f32(t->ggml_type, t->data, n, tmp)
	                       : ds_dequant_bf16(t->ggml_type, t->data, n, tmp);
	if (!s && permuted) {
		int heads = d->field == DS_T_WQ ? m->cfg.n_head : m->cfg.n_kv_head;
		unpermute_rows(buf, tmp, heads, m->cfg.head_dim, (int)d->shape[1], elem);
	}
	if (tmp != buf)
		free(tmp);
	if (s)
		return ds_errf(err, s, "%s: GGUF tensor %s: cannot dequantize", g->path, name);
	*ds_tensor_slot(&m->w, d) = buf; /* f32 data when m->wtype says so (model.h) */
	return DS_OK;
}

enum ds_status ds_model_load_gguf(const char *path, struct ds_model **out, struct ds_err *err)
{
	return ds_model_load_gguf_as(path, DS_DTYPE_BF16, out, err);
}

enum ds_status ds_model_load_gguf_as(const char *path, enum ds_dtype wtype, struct ds_model **out,
                                     struct ds_err *err)
{
	struct ds_gguf *g = NULL;
	struct ds_model *m = NULL;
	struct ds_tensor_desc *descs = NULL;
	struct ds_model_config cfg;
	enum ds_status s;
	*out = NULL;
	if ((s = ds_gguf_open(path, &g, err)))
		return s;
	if ((s = read_config(g, &cfg, err)))
		goto fail;
	if ((s = ds_model_new(&cfg, &m, err)))
		goto fail;
	m->wtype = wtype;
	int nt = ds_tensor_count(&cfg);
	descs = calloc((size_t)nt, sizeof(*descs));
	if (!descs) {
		s = ds_errf(err, DS_ERR_NOMEM, "%s: out of memory", path);
		goto fail;
	}
	ds_tensor_list(&cfg, descs);
	for (int i = 0; i < nt; i++)
		if ((s = load_tensor(m, g, &descs[i], err)))
			goto fail;
	if (cfg.tie_embeddings)
		m->w.lm_head = m->w.tok_embd;
	XXH128_hash_t h = XXH3_128bits_withSeed(g->base, (size_t)g->info_len,
	                                        wtype == DS_DTYPE_F32 ? DS_MODEL_F32_ID_SEED : 0);
	XXH128_canonical_t canon;
	XXH128_canonicalFromHash(&canon, h);
	memcpy(m->identity, canon.digest, sizeof(m->identity));
	snprintf(m->source, sizeof(m->source), "%s", path);
	free(descs);
	ds_gguf_close(g);
	*out = m;
	return DS_OK;
fail:
	free(descs);
	ds_model_free(m);
	ds_gguf_close(g);
	return s;
}
