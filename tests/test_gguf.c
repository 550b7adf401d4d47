/* test_gguf.c - the GGUF reader and loader: a tiny llama written here in every supported type,
 * truncation at every byte, forged counts/lengths, random corruption. The real SmolLM2 file is
 * test_gguf_smollm2.c.
 *
 * Truncated images are copied into exact-size heap buffers so ASan flags any read past the end.
 * Expected weights are small integers (exact in every format), so loads compare bit for bit,
 * and Q/K are written with llama.cpp's row permutation so the loader must undo it. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "dequant.h"
#include "gguf.h"
#include "test_gguf_util.h"
#include "model.h"
#include "tensors.h"

#ifndef DS_SOURCE_ROOT
#define DS_SOURCE_ROOT "."
#endif

/* ---- a tiny GGUF writer ---- */

struct wbuf {
	uint8_t *p;
	size_t len, cap;
};

static void w_bytes(struct wbuf *b, const void *src, size_t n)
{
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2 + 256;
		b->p = realloc(b->p, b->cap);
		assert_non_null(b->p);
	}
	memcpy(b->p + b->len, src, n);
	b->len += n;
}

static void w_u32(struct wbuf *b, uint32_t v)
{
	uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
	w_bytes(b, x, 4);
}

static void w_u64(struct wbuf *b, uint64_t v)
{
	w_u32(b, (uint32_t)v);
	w_u32(b, (uint32_t)(v >> 32));
}

static void w_str(struct wbuf *b, const char *s)
{
	w_u64(b, strlen(s));
	w_bytes(b, s, strlen(s));
}

static void kv_u32(struct wbuf *b, const char *k, uint32_t v)
{
	w_str(b, k);
	w_u32(b, DS_GGUF_UINT32);
	w_u32(b, v);
}

static void kv_f32(struct wbuf *b, const char *k, float v)
{
	uint32_t u;
	memcpy(&u, &v, 4);
	w_str(b, k);
	w_u32(b, DS_GGUF_FLOAT32);
	w_u32(b, u);
}

static void kv_str(struct wbuf *b, const char *k, const char *v)
{
	w_str(b, k);
	w_u32(b, DS_GGUF_STRING);
	w_str(b, v);
}

/* Tiny llama: hidden 64, 2 layers, 4 heads / 2 kv heads of 16, ffn 128, vocab 40. */
enum { H = 64, NL = 2, NH = 4, NKV = 2, HD = 16, FF = 128, V = 40 };

struct tiny_opts {
	const char *arch;
	bool drop_tensor;    /* omit blk.1.ffn_up.weight */
	bool bad_shape;      /* write blk.0.attn_v.weight with out = 3*HD */
	uint32_t force_type; /* if nonzero: type for blk.0.attn_output.weight */
	bool untied;         /* write an output.weight */
	uint32_t alignment;  /* 0 = default (32, no key) */
	uint32_t version;    /* 0 = 3 */
	float rope_factor;   /* > 0: add rope_freqs.weight for Llama-3 scaling with this factor;
	                      * < 0: add one that matches no configuration */
};

static const uint32_t type_cycle[] = {DS_GGML_F32,  DS_GGML_F16,  DS_GGML_BF16,
                                      DS_GGML_Q8_0, DS_GGML_Q4_0, DS_GGML_Q4_1};

/* Value of HF element (r, c) of tensor i for type t: an integer pattern, exact everywhere. */
static float tval(int i, int64_t r, int64_t c, uint32_t t)
{
	uint32_t x = (uint32_t)(i * 7919 + r * 131 + c * 17);
	x ^= x >> 7;
	x *= 0x9e3779b1u;
	float v = (float)((x >> 20) % 16) - 8.0f; /* -8..7 */
	return t == DS_GGML_Q4_1 ? v + 8.5f : v;  /* Q4_1 with d = 1, m = 0.5 */
}

static uint16_t f32_to_f16_exact(float v) /* for small integers and halves only */
{
	if (v == 0.0f)
		return 0;
	uint32_t u;
	memcpy(&u, &v, 4);
	uint32_t sign = u >> 31, exp = (u >> 23) & 0xff, man = u & 0x7fffff;
	return (uint16_t)(sign << 15 | (exp - 127 + 15) << 10 | man >> 13);
}

/* Encodes n values (a multiple of 32 for block types) of type t. */
static void encode(struct wbuf *b, const float *v, size_t n, uint32_t t)
{
	for (size_t i = 0; i < n;) {
		uint8_t blk[40];
		switch (t) {
		case DS_GGML_F32:
			w_bytes(b, &v[i], 4);
			i++;
			break;
		case DS_GGML_F16: {
			uint16_t h = f32_to_f16_exact(v[i++]);
			w_bytes(b, &h, 2);
			break;
		}
		case DS_GGML_BF16: {
			uint16_t h = ds_f32_to_bf16(v[i++]);
			w_bytes(b, &h, 2);
			break;
		}
		case DS_GGML_Q8_0:
			blk[0] = 0x00, blk[1] = 0x3c; /* d = 1 */
			for (int j = 0; j < 32; j++)
				blk[2 + j] = (uint8_t)(int8_t)v[i + j];
			w_bytes(b, blk, 34);
			i += 32;
			break;
		case DS_GGML_Q4_0:
		case DS_GGML_Q4_1: {
			int hdr = t == DS_GGML_Q4_0 ? 2 : 4;
			float off = t == DS_GGML_Q4_0 ? 8.0f : -0.5f;
			blk[0] = 0x00, blk[1] = 0x3c; /* d = 1 */
			blk[2] = 0x00, blk[3] = 0x38; /* Q4_1: m = 0.5 */
			for (int j = 0; j < 16; j++)
				blk[hdr + j] = (uint8_t)((int)(v[i + j] + off) |
				                         (int)(v[i + j + 16] + off) << 4);
			w_bytes(b, blk, (size_t)hdr + 16);
			i += 32;
			break;
		}
		default:
			fail_msg("encode: type %u", t);
		}
	}
}

static void tiny_config(struct ds_model_config *c)
{
	memset(c, 0, sizeof(*c));
	c->vocab_size = V, c->hidden = H, c->n_layer = NL, c->n_head = NH, c->n_kv_head = NKV;
	c->head_dim = HD, c->ffn = FF, c->max_pos = 256, c->rms_eps = 1e-6f;
	c->rope_theta = 50000.0f, c->tie_embeddings = true;
}

/* The llama.cpp name of canonical descriptor d (mirrors the loader's table on purpose: a
 * second spelling, so a typo there fails here). */
static void llama_name(const struct ds_tensor_desc *d, char *buf, size_t len)
{
	static const char *names[] = {
	    [DS_T_TOK_EMBD] = "token_embd", [DS_T_OUT_NORM] = "output_norm",
	    [DS_T_LM_HEAD] = "output",      [DS_T_ATTN_NORM] = "attn_norm",
	    [DS_T_WQ] = "attn_q",           [DS_T_WK] = "attn_k",
	    [DS_T_WV] = "attn_v",           [DS_T_WO] = "attn_output",
	    [DS_T_FFN_NORM] = "ffn_norm",   [DS_T_W_GATE] = "ffn_gate",
	    [DS_T_W_UP] = "ffn_up",         [DS_T_W_DOWN] = "ffn_down",
	};
	if (d->layer < 0)
		snprintf(buf, len, "%s.weight", names[d->field]);
	else
		snprintf(buf, len, "blk.%d.%s.weight", d->layer, names[d->field]);
}

static uint32_t tensor_type(const struct ds_tensor_desc *d, int i, const struct tiny_opts *o)
{
	if (d->ndim == 1)
		return i % 2 ? DS_GGML_F16 : DS_GGML_F32;
	if (o->force_type && d->field == DS_T_WO && d->layer == 0)
		return o->force_type;
	return type_cycle[i % DS_ARRAY_LEN(type_cycle)];
}

/* HF-layout values of descriptor i, rows permuted the llama.cpp way for Q/K when perm. */
static float *tensor_values(const struct ds_tensor_desc *d, int i, uint32_t t, bool perm)
{
	int64_t rows = d->ndim == 2 ? d->shape[0] : 1,
	        cols = d->ndim == 2 ? d->shape[1] : d->shape[0];
	float *v = malloc((size_t)(rows * cols) * sizeof(float));
	assert_non_null(v);
	bool qk = perm && (d->field == DS_T_WQ || d->field == DS_T_WK);
	for (int64_t r = 0; r < rows; r++) {
		int64_t src = r;
		if (qk) { /* gguf row h*HD + 2j + s holds HF row h*HD + s*HD/2 + j */
			int64_t h = r / HD, j = (r % HD) / 2, s = r % 2;
			src = h * HD + s * (HD / 2) + j;
		}
		for (int64_t c = 0; c < cols; c++)
			v[r * cols + c] = tval(i, src, c, t);
	}
	return v;
}

static struct wbuf tiny_gguf(const struct tiny_opts *o)
{
	struct ds_model_config cfg;
	tiny_config(&cfg);
	cfg.tie_embeddings = !o->untied;
	int nt = ds_tensor_count(&cfg);
	struct ds_tensor_desc *ds = calloc((size_t)nt, sizeof(*ds));
	assert_non_null(ds);
	ds_tensor_list(&cfg, ds);
	uint32_t align = o->alignment ? o->alignment : 32;

	struct wbuf b = {0}, data = {0};
	w_u32(&b, 0x46554747u);
	w_u32(&b, o->version ? o->version : 3);
	int n_written = nt - (o->drop_tensor ? 1 : 0) + (o->rope_factor != 0.0f);
	w_u64(&b, (uint64_t)n_written);
	w_u64(&b, 14 + (o->alignment ? 1 : 0));
	kv_str(&b, "general.architecture", o->arch ? o->arch : "llama");
	kv_u32(&b, "llama.context_length", 256);
	kv_u32(&b, "llama.embedding_length", H);
	kv_u32(&b, "llama.block_count", NL);
	kv_u32(&b, "llama.feed_forward_length", FF);
	kv_u32(&b, "llama.attention.head_count", NH);
	kv_u32(&b, "llama.attention.head_count_kv", NKV);
	kv_f32(&b, "llama.rope.freq_base", 50000.0f);
	kv_f32(&b, "llama.attention.layer_norm_rms_epsilon", 1e-6f);
	kv_u32(&b, "tokenizer.ggml.bos_token_id", 1);
	kv_u32(&b, "tokenizer.ggml.eos_token_id", 2);
	if (o->alignment)
		kv_u32(&b, "general.alignment", o->alignment);
	/* string array: the token list */
	w_str(&b, "tokenizer.ggml.tokens");
	w_u32(&b, DS_GGUF_ARRAY);
	w_u32(&b, DS_GGUF_STRING);
	w_u64(&b, V);
	for (int i = 0; i < V; i++) {
		char tok[16];
		snprintf(tok, sizeof(tok), i == 0 ? "" : "tok%d", i); /* an empty string too */
		w_str(&b, tok);
	}
	/* an empty string array */
	w_str(&b, "general.tags");
	w_u32(&b, DS_GGUF_ARRAY);
	w_u32(&b, DS_GGUF_STRING);
	w_u64(&b, 0);
	/* a scalar array */
	w_str(&b, "tokenizer.ggml.token_type");
	w_u32(&b, DS_GGUF_ARRAY);
	w_u32(&b, DS_GGUF_INT32);
	w_u64(&b, V);
	for (int i = 0; i < V; i++)
		w_u32(&b, 1);

	for (int i = 0; i < nt; i++) {
		const struct ds_tensor_desc *d = &ds[i];
		if (o->drop_tensor && d->field == DS_T_W_UP && d->layer == 1)
			continue;
		char name[96];
		llama_name(d, name, sizeof(name));
		uint32_t t = tensor_type(d, i, o);
		int64_t rows = d->ndim == 2 ? d->shape[0] : 1;
		int64_t cols = d->ndim == 2 ? d->shape[1] : d->shape[0];
		if (o->bad_shape && d->field == DS_T_WV && d->layer == 0)
			rows = 3 * HD;
		while (data.len % align) {
			uint8_t z = 0;
			w_bytes(&data, &z, 1);
		}
		w_str(&b, name);
		w_u32(&b, d->ndim == 2 ? 2 : 1);
		w_u64(&b, (uint64_t)cols);
		if (d->ndim == 2)
			w_u64(&b, (uint64_t)rows);
		w_u32(&b, t);
		w_u64(&b, data.len);
		uint32_t enc_t =
		    ds_dequant_supported(t) ? t : DS_GGML_Q4_0; /* unsupported: any bytes */
		float *v = tensor_values(d, i, enc_t, true);
		if (!ds_dequant_supported(t)) {
			uint32_t blck, bytes;
			assert_int_equal(ds_gguf_type_size(t, &blck, &bytes), DS_OK);
			size_t nb = (size_t)(rows * cols) / blck * bytes;
			uint8_t *z = calloc(nb, 1);
			w_bytes(&data, z, nb);
			free(z);
		} else {
			int64_t real_rows = d->ndim == 2 ? d->shape[0] : 1;
			encode(&data, v, (size_t)(real_rows * cols), t);
			if (rows > real_rows) { /* bad_shape: extra rows of zeros */
				float *z =
				    calloc((size_t)((rows - real_rows) * cols), sizeof(float));
				if (t == DS_GGML_Q4_1)
					for (int64_t k = 0; k < (rows - real_rows) * cols; k++)
						z[k] = 0.5f;
				encode(&data, z, (size_t)((rows - real_rows) * cols), t);
				free(z);
			}
		}
		free(v);
	}
	if (o->rope_factor != 0.0f) { /* convert_hf_to_gguf.py's Llama-3 rope factors */
		float f[HD / 2];
		double factor = fabs(o->rope_factor);
		for (int i = 0; i < HD / 2; i++) {
			double wl = 2 * M_PI * pow(50000.0, 2.0 * i / HD);
			double smooth = (8192.0 / wl - 1.0) / 3.0;
			f[i] = wl < 2048   ? 1.0f
			       : wl > 8192 ? (float)factor
			                   : (float)(1.0 / ((1 - smooth) / factor + smooth));
		}
		if (o->rope_factor < 0)
			f[HD / 2 - 2] *= 1.01f;
		while (data.len % align) {
			uint8_t z = 0;
			w_bytes(&data, &z, 1);
		}
		w_str(&b, "rope_freqs.weight");
		w_u32(&b, 1);
		w_u64(&b, HD / 2);
		w_u32(&b, DS_GGML_F32);
		w_u64(&b, data.len);
		w_bytes(&data, f, sizeof(f));
	}
	while (b.len % align) {
		uint8_t z = 0;
		w_bytes(&b, &z, 1);
	}
	w_bytes(&b, data.p, data.len);
	free(data.p);
	free(ds);
	return b;
}

static char *write_tmp(const struct wbuf *b)
{
	char *path = strdup("/tmp/ds_test_gguf_XXXXXX");
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, b->p, b->len), (ssize_t)b->len);
	close(fd);
	return path;
}

/* ---- tiny-model tests ---- */

static void test_parse_tiny(void **state)
{
	(void)state;
	struct tiny_opts o = {0};
	struct wbuf b = tiny_gguf(&o);
	struct ds_gguf *g = NULL;
	struct ds_err err = {{0}};
	assert_int_equal(ds_gguf_parse(b.p, b.len, "tiny.gguf", &g, &err), DS_OK);
	assert_int_equal(g->version, 3);
	assert_int_equal(g->n_kv, 14);
	assert_int_equal(g->alignment, 32);
	assert_int_equal(g->data_offset % 32, 0);
	uint64_t u;
	float f;
	struct ds_gguf_str s;
	assert_int_equal(ds_gguf_get_u64(g, "llama.block_count", &u), DS_OK);
	assert_int_equal(u, NL);
	assert_int_equal(ds_gguf_get_f32(g, "llama.rope.freq_base", &f), DS_OK);
	assert_true(f == 50000.0f);
	assert_int_equal(ds_gguf_get_str(g, "general.architecture", &s), DS_OK);
	assert_int_equal(s.len, 5);
	assert_memory_equal(s.p, "llama", 5);
	assert_int_equal(ds_gguf_get_u64(g, "no.such.key", &u), DS_ERR_NOT_FOUND);
	assert_int_equal(ds_gguf_get_str(g, "llama.block_count", &s), DS_ERR_FORMAT);
	assert_int_equal(ds_gguf_get_u64(g, "general.architecture", &u), DS_ERR_FORMAT);
	const struct ds_gguf_kv *toks = ds_gguf_find(g, "tokenizer.ggml.tokens");
	assert_non_null(toks);
	assert_int_equal(toks->arr_len, V);
	assert_int_equal(ds_gguf_arr_str(toks, 0, &s), DS_OK);
	assert_int_equal(s.len, 0);
	assert_int_equal(ds_gguf_arr_str(toks, 39, &s), DS_OK);
	assert_int_equal(s.len, 5);
	assert_memory_equal(s.p, "tok39", 5);
	assert_int_equal(ds_gguf_arr_str(toks, 40, &s), DS_ERR_NOT_FOUND);
	const struct ds_gguf_kv *tags = ds_gguf_find(g, "general.tags");
	assert_int_equal(tags->arr_len, 0);
	assert_int_equal(ds_gguf_arr_str(tags, 0, &s), DS_ERR_NOT_FOUND);
	assert_int_equal(ds_gguf_arr_str(ds_gguf_find(g, "tokenizer.ggml.token_type"), 0, &s),
	                 DS_ERR_FORMAT);
	const struct ds_gguf_tensor *t = ds_gguf_find_tensor(g, "blk.1.ffn_down.weight");
	assert_non_null(t);
	assert_int_equal(t->n_dims, 2);
	assert_int_equal(t->dims[0], FF);
	assert_int_equal(t->dims[1], H);
	assert_null(ds_gguf_find_tensor(g, "output.weight"));
	ds_gguf_close(g);
	free(b.p);
}

static void check_loaded(const struct ds_model *m, const struct tiny_opts *o)
{
	const struct ds_model_config *c = &m->cfg;
	assert_int_equal(c->vocab_size, V);
	assert_int_equal(c->hidden, H);
	assert_int_equal(c->n_layer, NL);
	assert_int_equal(c->n_head, NH);
	assert_int_equal(c->n_kv_head, NKV);
	assert_int_equal(c->head_dim, HD);
	assert_int_equal(c->ffn, FF);
	assert_int_equal(c->max_pos, 256);
	assert_true(c->rope_theta == 50000.0f);
	assert_true(c->rms_eps == 1e-6f);
	assert_int_equal(c->bos_id, 1);
	assert_int_equal(c->n_eos, 1);
	assert_int_equal(c->eos_ids[0], 2);
	assert_int_equal(c->tie_embeddings, !o->untied);
	if (!o->untied)
		assert_ptr_equal(m->w.lm_head, m->w.tok_embd);

	int nt = ds_tensor_count(c);
	struct ds_tensor_desc *ds = calloc((size_t)nt, sizeof(*ds));
	ds_tensor_list(c, ds);
	struct ds_model_weights w = m->w;
	for (int i = 0; i < nt; i++) {
		uint32_t t = tensor_type(&ds[i], i, o);
		float *want = tensor_values(&ds[i], i, t, false); /* HF order: un-permuted */
		const uint16_t *got = *ds_tensor_slot(&w, &ds[i]);
		assert_non_null(got);
		int64_t n = ds_tensor_numel(&ds[i]);
		for (int64_t k = 0; k < n; k++)
			if (got[k] != ds_f32_to_bf16(want[k]))
				fail_msg("%s [%lld]: got %g want %g", ds[i].name, (long long)k,
				         (double)ds_bf16_to_f32(got[k]), (double)want[k]);
		free(want);
	}
	free(ds);
}

static void test_load_tiny(void **state)
{
	(void)state;
	struct tiny_opts variants[] = {{0}, {.untied = true, .alignment = 64, .version = 2}};
	uint8_t id0[16];
	for (size_t v = 0; v < DS_ARRAY_LEN(variants); v++) {
		struct wbuf b = tiny_gguf(&variants[v]);
		char *path = write_tmp(&b);
		struct ds_model *m = NULL;
		struct ds_err err = {{0}};
		enum ds_status s = ds_model_load_gguf(path, &m, &err);
		if (s)
			fail_msg("load: %s", err.msg);
		check_loaded(m, &variants[v]);
		assert_string_equal(m->source, path);
		assert_false(m->synthetic);
		if (v == 0) {
			memcpy(id0, m->identity, 16);
			/* the identity is a function of the header bytes: reload gives the same */
			struct ds_model *m2 = NULL;
			assert_int_equal(ds_model_load_gguf(path, &m2, &err), DS_OK);
			assert_memory_equal(m2->identity, id0, 16);
			ds_model_free(m2);
		} else {
			assert_memory_not_equal(m->identity, id0, 16);
		}
		ds_model_free(m);
		unlink(path);
		free(path);
		free(b.p);
	}
}

static void test_load_llama3_rope(void **state)
{
	(void)state;
	const float factors[] = {8.0f, 32.0f};
	for (size_t i = 0; i < DS_ARRAY_LEN(factors); i++) {
		struct wbuf b = tiny_gguf(&(struct tiny_opts){.rope_factor = factors[i]});
		char *path = write_tmp(&b);
		struct ds_model *m = NULL;
		struct ds_err err = {{0}};
		if (ds_model_load_gguf(path, &m, &err))
			fail_msg("%s", err.msg);
		assert_int_equal(m->cfg.rope_scaling, DS_ROPE_LLAMA3);
		assert_true(m->cfg.rope_factor == factors[i]);
		assert_true(m->cfg.rope_low_freq_factor == 1.0f);
		assert_true(m->cfg.rope_high_freq_factor == 4.0f);
		assert_int_equal(m->cfg.rope_orig_max_pos, 8192);
		ds_model_free(m);
		unlink(path);
		free(path);
		free(b.p);
	}
	struct wbuf b = tiny_gguf(&(struct tiny_opts){0});
	char *path = write_tmp(&b);
	struct ds_model *m = NULL;
	struct ds_err err;
	assert_int_equal(ds_model_load_gguf(path, &m, &err), DS_OK);
	assert_int_equal(m->cfg.rope_scaling, DS_ROPE_NONE);
	ds_model_free(m);
	unlink(path);
	free(path);
	free(b.p);
}

static void expect_load_error(const struct tiny_opts *o, enum ds_status want, const char *needle)
{
	struct wbuf b = tiny_gguf(o);
	char *path = write_tmp(&b);
	struct ds_model *m = (struct ds_model *)&b; /* must be reset to NULL */
	struct ds_err err = {{0}};
	enum ds_status s = ds_model_load_gguf(path, &m, &err);
	if (s != want || !strstr(err.msg, needle) || !strstr(err.msg, path))
		fail_msg("want %s with '%s', got %s: %s", ds_status_str(want), needle,
		         ds_status_str(s), err.msg);
	assert_null(m);
	unlink(path);
	free(path);
	free(b.p);
}

static void test_load_errors(void **state)
{
	(void)state;
	expect_load_error(&(struct tiny_opts){.drop_tensor = true}, DS_ERR_NOT_FOUND,
	                  "blk.1.ffn_up.weight");
	expect_load_error(&(struct tiny_opts){.bad_shape = true}, DS_ERR_FORMAT,
	                  "blk.0.attn_v.weight");
	expect_load_error(&(struct tiny_opts){.force_type = 20 /* IQ4_NL */}, DS_ERR_UNSUPPORTED,
	                  "IQ4_NL");
	expect_load_error(&(struct tiny_opts){.arch = "gpt2"}, DS_ERR_UNSUPPORTED, "gpt2");
	expect_load_error(&(struct tiny_opts){.rope_factor = -8.0f}, DS_ERR_UNSUPPORTED,
	                  "rope_freqs");
	struct ds_model *m = NULL;
	struct ds_err err = {{0}};
	assert_int_equal(ds_model_load_gguf("/tmp", &m, &err), DS_ERR_IO); /* a directory */
	struct wbuf empty = {0};
	char *path = write_tmp(&empty);
	assert_int_equal(ds_model_load_gguf(path, &m, &err), DS_ERR_FORMAT);
	assert_non_null(strstr(err.msg, path));
	unlink(path);
	free(path);
	assert_int_equal(ds_model_load_gguf("/nonexistent/x.gguf", &m, &err), DS_ERR_IO);
	assert_non_null(strstr(err.msg, "/nonexistent/x.gguf"));
}

static void test_truncate_every_byte(void **state)
{
	(void)state;
	struct wbuf b = tiny_gguf(&(struct tiny_opts){0});
	struct ds_err err;
	assert_int_equal(parse_copy(b.p, b.len, &err), DS_OK);
	for (size_t len = 0; len < b.len; len++) {
		err.msg[0] = 0;
		enum ds_status s = parse_copy(b.p, len, &err);
		if (s != DS_ERR_FORMAT || !strstr(err.msg, "cut.gguf"))
			fail_msg("cut at %zu/%zu: %s: %s", len, b.len, ds_status_str(s), err.msg);
	}
	free(b.p);
}

/* Writes v at byte off of a copy and parses it. */
static enum ds_status parse_patched(const struct wbuf *b, size_t off, const void *v, size_t n,
                                    struct ds_err *err)
{
	uint8_t *c = malloc(b->len);
	memcpy(c, b->p, b->len);
	memcpy(c + off, v, n);
	enum ds_status s = parse_copy(c, b->len, err);
	free(c);
	return s;
}

static void test_forged_fields(void **state)
{
	(void)state;
	struct wbuf b = tiny_gguf(&(struct tiny_opts){0});
	struct ds_err err;
	const uint64_t big[] = {UINT64_MAX, UINT64_MAX / 2, (uint64_t)1 << 40, 1u << 20};
	/* header counts: n_tensors at 8, n_kv at 16 */
	for (size_t i = 0; i < DS_ARRAY_LEN(big); i++) {
		assert_int_equal(parse_patched(&b, 8, &big[i], 8, &err), DS_ERR_FORMAT);
		assert_int_equal(parse_patched(&b, 16, &big[i], 8, &err), DS_ERR_FORMAT);
	}
	uint32_t v = 1;
	assert_int_equal(parse_patched(&b, 4, &v, 4, &err), DS_ERR_UNSUPPORTED);
	v = 0x03000000; /* a big-endian version 3 */
	assert_int_equal(parse_patched(&b, 4, &v, 4, &err), DS_ERR_FORMAT);
	assert_int_equal(parse_patched(&b, 0, "GGUX", 4, &err), DS_ERR_FORMAT);

	/* every u64 length field in metadata and tensor infos: locate them by walking */
	struct ds_gguf *g = NULL;
	assert_int_equal(ds_gguf_parse(b.p, b.len, "x", &g, &err), DS_OK);
	const uint8_t *base = b.p;
	for (uint64_t i = 0; i < g->n_kv; i++) {
		size_t key_len_off = (size_t)((const uint8_t *)g->kv[i].key.p - base) - 8;
		size_t type_off = key_len_off + 8 + g->kv[i].key.len;
		for (size_t k = 0; k < DS_ARRAY_LEN(big); k++)
			assert_int_equal(parse_patched(&b, key_len_off, &big[k], 8, &err),
			                 DS_ERR_FORMAT);
		uint32_t bad_types[] = {13, 0xffffffffu};
		for (size_t k = 0; k < 2; k++)
			assert_int_equal(parse_patched(&b, type_off, &bad_types[k], 4, &err),
			                 DS_ERR_FORMAT);
		if (g->kv[i].type == DS_GGUF_ARRAY) {
			size_t len_off = type_off + 8;
			for (size_t k = 0; k < DS_ARRAY_LEN(big); k++)
				assert_int_equal(parse_patched(&b, len_off, &big[k], 8, &err),
				                 DS_ERR_FORMAT);
			uint32_t nested = DS_GGUF_ARRAY;
			assert_int_equal(parse_patched(&b, type_off + 4, &nested, 4, &err),
			                 DS_ERR_FORMAT);
		}
	}
	for (uint64_t i = 0; i < g->n_tensors; i++) {
		const struct ds_gguf_tensor *t = &g->tensors[i];
		size_t name_off = (size_t)((const uint8_t *)t->name.p - base);
		size_t nd_off = name_off + t->name.len;
		size_t type_off = nd_off + 4 + 8 * t->n_dims, off_off = type_off + 4;
		uint32_t nd[] = {0, 5, 0xffffffffu};
		for (size_t k = 0; k < DS_ARRAY_LEN(nd); k++)
			assert_int_equal(parse_patched(&b, nd_off, &nd[k], 4, &err), DS_ERR_FORMAT);
		for (size_t k = 0; k < DS_ARRAY_LEN(big); k++) {
			assert_int_equal(parse_patched(&b, name_off - 8, &big[k], 8, &err),
			                 DS_ERR_FORMAT);
			assert_int_equal(parse_patched(&b, nd_off + 4, &big[k], 8, &err),
			                 DS_ERR_FORMAT);
			assert_int_equal(parse_patched(&b, off_off, &big[k], 8, &err),
			                 DS_ERR_FORMAT);
		}
		uint64_t zero = 0, odd = t->offset + 1;
		assert_int_equal(parse_patched(&b, nd_off + 4, &zero, 8, &err), DS_ERR_FORMAT);
		assert_int_equal(parse_patched(&b, off_off, &odd, 8, &err), DS_ERR_FORMAT);
		uint32_t bad_type = 99;
		assert_int_equal(parse_patched(&b, type_off, &bad_type, 4, &err),
		                 DS_ERR_UNSUPPORTED);
	}
	ds_gguf_close(g);
	free(b.p);
}

static void test_alignment_key(void **state)
{
	(void)state;
	struct wbuf b = tiny_gguf(&(struct tiny_opts){.alignment = 64});
	struct ds_gguf *g = NULL;
	struct ds_err err;
	assert_int_equal(ds_gguf_parse(b.p, b.len, "a.gguf", &g, &err), DS_OK);
	assert_int_equal(g->alignment, 64);
	assert_int_equal(g->data_offset % 64, 0);
	const struct ds_gguf_kv *kv = ds_gguf_find(g, "general.alignment");
	size_t val_off = (size_t)(kv->data - b.p);
	ds_gguf_close(g);
	uint32_t bad[] = {0, 3, 48, 1u << 31};
	for (size_t i = 0; i < DS_ARRAY_LEN(bad); i++) {
		assert_int_equal(parse_patched(&b, val_off, &bad[i], 4, &err), DS_ERR_FORMAT);
		assert_non_null(strstr(err.msg, "alignment"));
	}
	free(b.p);
}

/* Random byte flips in the header/metadata/info region: any status, never a crash. */
static void test_random_corruption(void **state)
{
	(void)state;
	struct wbuf b = tiny_gguf(&(struct tiny_opts){0});
	struct ds_gguf *g = NULL;
	struct ds_err err;
	assert_int_equal(ds_gguf_parse(b.p, b.len, "x", &g, &err), DS_OK);
	size_t info = (size_t)g->info_len;
	ds_gguf_close(g);
	uint8_t *c = malloc(b.len);
	uint64_t x = 0x243f6a8885a308d3ull;
	int ok = 0;
	for (int it = 0; it < 3000; it++) {
		memcpy(c, b.p, b.len);
		int flips = 1 + it % 4;
		for (int k = 0; k < flips; k++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			c[(x >> 8) % info] ^= (uint8_t)(1u << (x % 8));
		}
		ok += parse_copy(c, b.len, &err) == DS_OK;
	}
	free(c);
	free(b.p);
	print_message("random corruption: %d/3000 still parse\n", ok);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse_tiny),          cmocka_unit_test(test_load_tiny),
	    cmocka_unit_test(test_load_llama3_rope),    cmocka_unit_test(test_load_errors),
	    cmocka_unit_test(test_truncate_every_byte), cmocka_unit_test(test_forged_fields),
	    cmocka_unit_test(test_alignment_key),       cmocka_unit_test(test_random_corruption),
	};
	return cmocka_run_group_tests_name("gguf", tests, NULL, NULL);
}
