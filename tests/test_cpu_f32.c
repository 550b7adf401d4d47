/* test_cpu_f32.c - the f32 precision option end to end on small synthetic models: loading as
 * f32, the CPU backend with f32 weights and with an f32 KV pool.
 *
 * Key idea: a bf16 model widened to f32 holds exactly the same values, so with a bf16 KV pool
 * the reference path must give the same bits as the bf16 model (embedding, biases, norms,
 * every matmul and the LM head all read f32 weights then). With an f32 KV pool the bits
 * change (KV is no longer rounded) but the reference path must stay batch-invariant, chunking
 * invariant and prefix-copy invariant. The config turns on Q/K/V biases and Q/K norms so every
 * weight the driver reads is covered. The golden test (test_gguf_golden.c) checks the f32 path
 * against transformers on the real model. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "backend.h"
#include "hf.h"
#include "model_internal.h"
#include "tensors.h"

#define NB 24 /* KV blocks */
#define BS 8  /* positions per block */

static struct ds_model_config test_cfg(void)
{
	struct ds_model_config c;
	assert_int_equal(ds_model_preset("tiny", &c), DS_OK);
	c.attn_bias = true;
	c.qk_norm = true;
	return c;
}

/* An f32 copy of m (every value widened: exact). */
static struct ds_model *widen(const struct ds_model *m)
{
	struct ds_model *w = NULL;
	struct ds_err err;
	assert_int_equal(ds_model_new(&m->cfg, &w, &err), DS_OK);
	w->wtype = DS_DTYPE_F32;
	int n = ds_tensor_count(&m->cfg);
	struct ds_tensor_desc *ts = calloc((size_t)n, sizeof(*ts));
	ds_tensor_list(&m->cfg, ts);
	struct ds_model_weights src = m->w;
	for (int i = 0; i < n; i++) {
		size_t k = (size_t)ds_tensor_numel(&ts[i]);
		const uint16_t *s = *ds_tensor_slot(&src, &ts[i]);
		assert_non_null(s);
		float *d = ds_model_alloc(w, k * sizeof(float));
		for (size_t j = 0; j < k; j++)
			d[j] = ds_bf16_to_f32(s[j]);
		*ds_tensor_slot(&w->w, &ts[i]) = (const uint16_t *)(const void *)d;
	}
	if (m->cfg.tie_embeddings)
		w->w.lm_head = w->w.tok_embd;
	free(ts);
	return w;
}

/* Sequence i's tokens: a fixed pseudo-random stream. */
static void fill_tokens(int32_t *t, int n, int seq, int V)
{
	for (int i = 0; i < n; i++)
		t[i] = (int32_t)((i * 31 + seq * 17 + 5) % V);
}

/* Runs seqs (all rows out) on path; logits into a new buffer. */
static float *run(struct ds_backend *be, enum ds_path path, struct ds_fwd_seq *seqs, int n_seqs)
{
	struct ds_fwd_batch b = {.path = path, .seqs = seqs, .n_seqs = n_seqs};
	int n_out = ds_fwd_batch_out_rows(&b);
	float *lg = malloc((size_t)n_out * be->model->cfg.vocab_size * sizeof(float));
	struct ds_fwd_row *rows = calloc((size_t)n_out, sizeof(*rows));
	b.rows = rows;
	b.logits = lg;
	struct ds_err err;
	if (ds_backend_forward(be, &b, &err) != DS_OK)
		fail_msg("forward: %s", err.msg);
	free(rows);
	return lg;
}

static struct ds_fwd_seq seq(const int32_t *tok, int n, int pos0, const int32_t *blocks)
{
	return (struct ds_fwd_seq){.tokens = tok + pos0,
	                           .n_tokens = n,
	                           .pos0 = pos0,
	                           .blocks = blocks,
	                           .n_blocks = 8,
	                           .all_rows = true,
	                           .sp = {.top_p = 1.0f}};
}

static void backend(struct ds_backend *be, const struct ds_model *m, enum ds_dtype kv)
{
	struct ds_err err;
	if (ds_backend_cpu_init_as(be, m, 2, kv, &err) != DS_OK ||
	    ds_backend_kv_init(be, NB, BS, &err) != DS_OK)
		fail_msg("cpu backend: %s", err.msg);
}

/* Prefill of two sequences (47 and 30 tokens) in one batch, then 3 decode steps of both;
 * all logits concatenated into out (rows 47 + 30 + 3 * 2). */
static float *prefill_decode(struct ds_backend *be, enum ds_path path, size_t *n_floats)
{
	const int V = be->model->cfg.vocab_size;
	int32_t t0[64], t1[64];
	fill_tokens(t0, 64, 0, V);
	fill_tokens(t1, 64, 1, V);
	static const int32_t b0[8] = {0, 1, 2, 3, 4, 5, 6, 7};
	static const int32_t b1[8] = {8, 9, 10, 11, 12, 13, 14, 15};
	size_t rows = 47 + 30 + 6, per = (size_t)V;
	float *out = malloc(rows * per * sizeof(float));
	struct ds_fwd_seq s[2] = {seq(t0, 47, 0, b0), seq(t1, 30, 0, b1)};
	float *lg = run(be, path, s, 2);
	memcpy(out, lg, 77 * per * sizeof(float));
	free(lg);
	for (int d = 0; d < 3; d++) {
		s[0] = seq(t0, 1, 47 + d, b0);
		s[1] = seq(t1, 1, 30 + d, b1);
		lg = run(be, path, s, 2);
		memcpy(out + (77 + 2 * (size_t)d) * per, lg, 2 * per * sizeof(float));
		free(lg);
	}
	*n_floats = rows * per;
	return out;
}

/* f32 weights holding bf16 values + a bf16 KV pool: the reference path's bits of the bf16
 * model; the fast path (free to contract a*b+c per loop) stays close. */
static void test_f32_weights_same_bits(void **state)
{
	(void)state;
	struct ds_model_config c = test_cfg();
	struct ds_model *m16 = NULL;
	struct ds_err err;
	assert_int_equal(ds_model_synth(&c, 3, &m16, &err), DS_OK);
	struct ds_model *m32 = widen(m16);
	struct ds_backend a, b;
	backend(&a, m16, DS_DTYPE_BF16);
	backend(&b, m32, DS_DTYPE_BF16);
	char desc[128];
	ds_backend_describe(&b, desc, sizeof(desc));
	assert_non_null(strstr(desc, "f32 weights, bf16 KV"));
	size_t n, n2;
	float *want = prefill_decode(&a, DS_PATH_REF, &n);
	float *got = prefill_decode(&b, DS_PATH_REF, &n2);
	assert_int_equal(n, n2);
	if (memcmp(want, got, n * sizeof(float)) != 0)
		fail_msg("reference path: f32 weights give other bits than the bf16 model");
	free(want), free(got);
	want = prefill_decode(&a, DS_PATH_FAST, &n);
	got = prefill_decode(&b, DS_PATH_FAST, &n);
	double worst = 0;
	for (size_t i = 0; i < n; i++)
		worst = fmax(worst, fabs((double)want[i] - got[i]) / (fabs((double)want[i]) + 1.0));
	assert_true(worst < 1e-4);
	free(want), free(got);
	ds_backend_free(&a);
	ds_backend_free(&b);
	ds_model_free(m32);
	ds_model_free(m16);
}

/* An f32 model gets an f32 KV pool by default; its reference path is still invariant to the
 * batch, to prefill chunking and to a prefix copied by kv_copy_block, and its logits differ
 * from the bf16-KV ones (the KV really is f32) by no more than bf16 rounding explains. */
static void test_f32_kv_invariant(void **state)
{
	(void)state;
	struct ds_model_config c = test_cfg();
	struct ds_model *m16 = NULL;
	struct ds_err err;
	assert_int_equal(ds_model_synth(&c, 4, &m16, &err), DS_OK);
	struct ds_model *m32 = widen(m16);
	struct ds_backend be, be16kv;
	assert_int_equal(ds_backend_cpu_init(&be, m32, 2, &err), DS_OK);
	assert_int_equal(ds_backend_kv_init(&be, NB, BS, &err), DS_OK);
	char desc[128];
	ds_backend_describe(&be, desc, sizeof(desc));
	assert_non_null(strstr(desc, "f32 weights, f32 KV"));
	backend(&be16kv, m32, DS_DTYPE_BF16);
	const int V = c.vocab_size;
	const size_t per = (size_t)V * sizeof(float);
	int32_t t0[64], t1[64];
	fill_tokens(t0, 64, 0, V);
	fill_tokens(t1, 64, 1, V);
	static const int32_t b0[8] = {0, 1, 2, 3, 4, 5, 6, 7};
	static const int32_t b1[8] = {8, 9, 10, 11, 12, 13, 14, 15};
	static const int32_t b2[8] = {16, 1, 2, 3, 4, 5, 6, 7}; /* b0 with block 0 copied */

	/* alone, one pass of 40 tokens */
	struct ds_fwd_seq s[2] = {seq(t0, 40, 0, b0)};
	float *alone = run(&be, DS_PATH_REF, s, 1);
	/* the same sequence in a batch behind another one, prefilled in chunks 13 + 27 */
	s[0] = seq(t1, 21, 0, b1);
	s[1] = seq(t0, 13, 0, b0);
	float *part1 = run(&be, DS_PATH_REF, s, 2);
	s[0] = seq(t0, 27, 13, b0);
	s[1] = seq(t1, 5, 21, b1);
	float *part2 = run(&be, DS_PATH_REF, s, 2);
	if (memcmp(alone, part1 + 21 * (size_t)V, 13 * per) != 0 ||
	    memcmp(alone + 13 * (size_t)V, part2, 27 * per) != 0)
		fail_msg("f32 KV: reference logits depend on the batch or the chunking");
	/* a prefix in a copied block: block 0 -> 16, then continue from position 8 */
	assert_int_equal(ds_backend_kv_copy_block(&be, 0, 16, &err), DS_OK);
	s[0] = seq(t0, 32, 8, b2);
	float *copied = run(&be, DS_PATH_REF, s, 1);
	if (memcmp(alone + 8 * (size_t)V, copied, 32 * per) != 0)
		fail_msg("f32 KV: a copied prefix block gives other logits");
	/* bf16 KV: other bits, close values */
	s[0] = seq(t0, 40, 0, b0);
	float *kv16 = run(&be16kv, DS_PATH_REF, s, 1);
	assert_memory_not_equal(alone, kv16, 40 * per);
	double worst = 0;
	for (size_t i = 0; i < 40 * (size_t)V; i++)
		worst =
		    fmax(worst, fabs((double)alone[i] - kv16[i]) / (fabs((double)alone[i]) + 1));
	assert_true(worst < 0.05);
	/* the fast path runs on f32 KV too, close to the reference */
	float *fast = run(&be, DS_PATH_FAST, s, 1);
	double fw = 0;
	for (size_t i = 0; i < 40 * (size_t)V; i++)
		fw = fmax(fw, fabs((double)alone[i] - fast[i]) / (fabs((double)alone[i]) + 1));
	assert_true(fw < 1e-4);
	free(alone), free(part1), free(part2), free(copied), free(kv16), free(fast);
	ds_backend_free(&be);
	ds_backend_free(&be16kv);
	ds_model_free(m32);
	ds_model_free(m16);
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	return remove(p);
}

/* ds_model_load_as(.., DS_DTYPE_F32): BF16 and F32 safetensors load to the widened bf16
 * values; the identity differs from the bf16 load's; deferred synthetic dirs refuse f32. */
static void test_load_as_f32(void **state)
{
	(void)state;
	struct ds_model_config c; /* a plain Llama (HF configs name their architecture) */
	assert_int_equal(ds_model_preset("tiny", &c), DS_OK);
	struct ds_err err;
	struct ds_model *ref = NULL;
	assert_int_equal(ds_model_synth(&c, 9, &ref, &err), DS_OK);
	int n = ds_tensor_count(&c);
	struct ds_tensor_desc *ts = calloc((size_t)n, sizeof(*ts));
	ds_tensor_list(&c, ts);
	const enum ds_hf_dtype file_types[] = {DS_HF_BF16, DS_HF_F32};
	for (size_t f = 0; f < DS_ARRAY_LEN(file_types); f++) {
		char dir[] = "/tmp/ds_f32_XXXXXX";
		assert_non_null(mkdtemp(dir));
		struct ds_hf_write_opts o = {.dtype = file_types[f]};
		if (ds_model_write_hf(&c, 9, dir, &o, &err) != DS_OK)
			fail_msg("write_hf: %s", err.msg);
		struct ds_model *m16 = NULL, *m32 = NULL;
		assert_int_equal(ds_model_load(dir, &m16, &err), DS_OK);
		if (ds_model_load_as(dir, DS_DTYPE_F32, &m32, &err) != DS_OK)
			fail_msg("load_as f32: %s", err.msg);
		assert_int_equal(m16->wtype, DS_DTYPE_BF16);
		assert_int_equal(m32->wtype, DS_DTYPE_F32);
		assert_memory_not_equal(m16->identity, m32->identity, 16);
		struct ds_model_weights w32 = m32->w, wr = ref->w;
		for (int i = 0; i < n; i++) {
			const float *got = ds_model_w_f32(*ds_tensor_slot(&w32, &ts[i]));
			const uint16_t *want = *ds_tensor_slot(&wr, &ts[i]);
			for (int64_t k = 0; k < ds_tensor_numel(&ts[i]); k++)
				if (got[k] != ds_bf16_to_f32(want[k]))
					fail_msg("%s[%lld]: %g, want %g", ts[i].name, (long long)k,
					         (double)got[k], (double)ds_bf16_to_f32(want[k]));
		}
		ds_model_free(m16);
		ds_model_free(m32);
		nftw(dir, rm_cb, 8, FTW_DEPTH | FTW_PHYS);
	}
	free(ts);
	ds_model_free(ref);

	char dir[] = "/tmp/ds_f32_XXXXXX";
	assert_non_null(mkdtemp(dir));
	struct ds_hf_write_opts o = {.deferred = true};
	assert_int_equal(ds_model_write_hf(&c, 9, dir, &o, &err), DS_OK);
	struct ds_model *m = NULL;
	assert_int_equal(ds_model_load_as(dir, DS_DTYPE_F32, &m, &err), DS_ERR_UNSUPPORTED);
	assert_null(m);
	assert_non_null(strstr(err.msg, "bf16 only"));
	nftw(dir, rm_cb, 8, FTW_DEPTH | FTW_PHYS);
	assert_int_equal(ds_model_load_as("/nonexistent/x.gguf", DS_DTYPE_F32, &m, &err),
	                 DS_ERR_IO);
	assert_int_equal(ds_model_load_as("/tmp", (enum ds_dtype)7, &m, &err), DS_ERR_INVALID);
}

static void test_dtype_names_and_bad_args(void **state)
{
	(void)state;
	enum ds_dtype t;
	struct ds_err err;
	assert_int_equal(ds_dtype_parse("f32", &t, &err), DS_OK);
	assert_int_equal(t, DS_DTYPE_F32);
	assert_int_equal(ds_dtype_parse("fp32", &t, &err), DS_OK);
	assert_int_equal(ds_dtype_parse("bf16", &t, &err), DS_OK);
	assert_int_equal(t, DS_DTYPE_BF16);
	assert_int_equal(ds_dtype_parse("f16", &t, &err), DS_ERR_INVALID);
	assert_non_null(strstr(err.msg, "f16"));
	assert_string_equal(ds_dtype_name(DS_DTYPE_F32), "f32");
	assert_string_equal(ds_dtype_name(DS_DTYPE_BF16), "bf16");
	struct ds_model_config c = test_cfg();
	struct ds_model *m = NULL;
	assert_int_equal(ds_model_synth(&c, 1, &m, &err), DS_OK);
	struct ds_backend be;
	assert_int_equal(ds_backend_cpu_init_as(&be, m, 1, (enum ds_dtype)9, &err), DS_ERR_INVALID);
	assert_null(be.iface);
	ds_model_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_f32_weights_same_bits),
	    cmocka_unit_test(test_f32_kv_invariant),
	    cmocka_unit_test(test_load_as_f32),
	    cmocka_unit_test(test_dtype_names_and_bad_args),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
