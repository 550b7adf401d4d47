/* test_gpu_l2pf.c - the fast path's L2 prefetch (struct ds_k_l2pf: RMSNorm, the q/k/v epilogue and
 * decode attention issue a prefetch of the next GEMM's weights) and the fused decode-attention
 * combine in the backend (counters in the fast state).
 *
 * A prefetch is a hint and must change no arithmetic: each *_pf launcher gives the bits of its
 * plain launcher for both modes (after / before the PDL wait), bulk and per-line prefetches,
 * with and without the evict_last policy, with and without PDL, on an unaligned odd-sized range,
 * with prefetch-only blocks added to small grids (guard bytes after every output: they must
 * write nothing); a bad mode is rejected. In the backend (small preset, decode after a
 * reference-path prompt), a decode step at batch 1, 8 and 33 gives the bits of the step without
 * prefetch, eagerly and captured / replayed, for both modes, full and odd-capped ranges. The
 * fused combine: one backend decodes several steps fused (eager, captured, then the graph
 * replayed at changing positions, rows with several splits), each step also run eagerly with
 * the combine kernel (the graph set aside); logits agree within fp32 tolerance (the same bits
 * are expected and printed) and the counters are back at zero. The environment settings are
 * parsed into the fast state, and bad values fail the backend's init by name. */
#include "gpu_util.h"
#include "gpu_model.h"
#include "cuda_internal.h"
#include "kernels.h"

/* ---- prefetch settings the kernel checks run under ---- */

struct pf_case {
	int mode;
	unsigned flags;
	int pdl;
};

static const struct pf_case pf_cases[] = {
    {DS_K_L2PF_AFTER_WAIT, 0, 1},
    {DS_K_L2PF_BEFORE_WAIT, 0, 1},
    {DS_K_L2PF_AFTER_WAIT, DS_K_L2PF_LINES, 0},
    {DS_K_L2PF_BEFORE_WAIT, DS_K_L2PF_LINES | DS_K_L2PF_EVICT_LAST, 1},
    {DS_K_L2PF_AFTER_WAIT, DS_K_L2PF_EVICT_LAST, 0},
    {DS_K_L2PF_BEFORE_WAIT, DS_K_L2PF_EVICT_LAST, 0},
};

#define PF_BYTES ((size_t)3 << 20) /* the buffer a range is cut from */

/* A range of an odd size at an odd offset of buf (trimmed to 16-byte bounds by the launcher). */
static struct ds_k_l2pf pf_range(const void *buf, const struct pf_case *k, int min_blocks)
{
	struct ds_k_l2pf pf = {(const uint8_t *)buf + 5, PF_BYTES - 1234567, k->mode, k->flags,
	                       min_blocks};
	return pf;
}

/* ---- RMSNorm ---- */

static void rms_case(int n_rows, int hidden, bool with_rows, bool with_delta, const void *pfbuf)
{
	size_t xn = (size_t)(n_rows + 3) * hidden, on = (size_t)n_rows * hidden * 2;
	float *x = malloc(xn * 4), *dl = malloc(xn * 4);
	uint16_t *w = malloc((size_t)hidden * 2), *o0 = malloc(on), *o1 = malloc(on);
	float *x0 = malloc(xn * 4), *x1 = malloc(xn * 4);
	int32_t *rows = malloc((size_t)n_rows * 4);
	fill_f32(x, xn, 1, 2.0f);
	fill_f32(dl, xn, 2, 1.0f);
	fill_bf16(w, (size_t)hidden, 3, 1.5f);
	for (int r = 0; r < n_rows; r++) /* reversed, one padding row */
		rows[r] = r == n_rows / 2 && n_rows > 2 ? -1 : n_rows + 2 - r;
	float *dx = to_dev(x, xn * 4), *ddl = to_dev(dl, xn * 4);
	uint16_t *dw = to_dev(w, (size_t)hidden * 2), *dout = dev_alloc_guarded(on);
	int32_t *drows = to_dev(rows, (size_t)n_rows * 4);
	const float *delta = with_delta ? ddl : NULL;
	const int32_t *rr = with_rows ? drows : NULL;
	CK(ds_k_rmsnorm_pdl(dx, delta, rr, dw, n_rows, hidden, 1e-5f, dout, 0, 0));
	CK(cudaDeviceSynchronize());
	from_dev(o0, dout, on);
	from_dev(x0, dx, xn * 4);
	for (size_t k = 0; k < DS_ARRAY_LEN(pf_cases); k++) {
		struct ds_k_l2pf pf = pf_range(pfbuf, &pf_cases[k], 48);
		CK(cudaMemcpy(dx, x, xn * 4, cudaMemcpyHostToDevice));
		CK(cudaMemset(dout, 0x7f, on));
		CK(ds_k_rmsnorm_pf(dx, delta, rr, dw, n_rows, hidden, 1e-5f, dout, pf_cases[k].pdl,
		                   &pf, 0));
		CK(cudaDeviceSynchronize());
		from_dev(o1, dout, on);
		from_dev(x1, dx, xn * 4);
		if (memcmp(o0, o1, on) != 0 || memcmp(x0, x1, xn * 4) != 0)
			fail_msg("rmsnorm rows %d hidden %d (rows %d delta %d), prefetch case %zu: "
			         "bits differ from the plain launch",
			         n_rows, hidden, (int)with_rows, (int)with_delta, k);
		dev_check_guard(dout, on);
	}
	/* a bad mode: refused, nothing written */
	struct ds_k_l2pf bad = pf_range(pfbuf, &pf_cases[0], 48);
	bad.mode = 3;
	CK(cudaMemset(dout, 0x7f, on));
	assert_int_equal(
	    ds_k_rmsnorm_pf(dx, delta, rr, dw, n_rows, hidden, 1e-5f, dout, 0, &bad, 0),
	    cudaErrorInvalidValue);
	CK(cudaDeviceSynchronize());
	uint32_t word;
	from_dev(&word, dout, 4);
	assert_int_equal(word, 0x7f7f7f7fu);
	void *dv[] = {dx, ddl, dw, dout, drows};
	for (size_t i = 0; i < DS_ARRAY_LEN(dv); i++)
		cudaFree(dv[i]);
	free(x);
	free(dl);
	free(w);
	free(o0);
	free(o1);
	free(x0);
	free(x1);
	free(rows);
}

static void test_rmsnorm_pf(void **state)
{
	(void)state;
	void *pfbuf = NULL;
	CK(cudaMalloc(&pfbuf, PF_BYTES));
	rms_case(1, 4096, false, true, pfbuf);  /* 1 row + 47 prefetch-only blocks */
	rms_case(5, 1000, true, true, pfbuf);   /* output rows picked, one padding row */
	rms_case(33, 512, false, false, pfbuf); /* no residual add */
	rms_case(70, 1000, true, false, pfbuf); /* more rows than min_blocks: none added */
	cudaFree(pfbuf);
}

/* ---- q/k/v epilogue (RoPE, paged KV write) ---- */

#define QBS 16
#define QPOOL 64

static void qkv_case(int T, const void *pfbuf)
{
	struct ds_k_dims d = {8, 4, 64, QBS, QPOOL, 1e-5f};
	int D = d.head_dim, n_all = d.n_head + 2 * d.n_kv, max_pos = 512;
	size_t qkv_n = (size_t)T * n_all * D, q_n = (size_t)T * d.n_head * D;
	size_t kv_n = (size_t)QPOOL * 2 * d.n_kv * QBS * D, cs_n = (size_t)max_pos * D;
	float *qkv = malloc(qkv_n * 4), *cs = malloc(cs_n * 4);
	uint16_t *kv = malloc(kv_n * 2), *nw = malloc((size_t)D * 2);
	int32_t *pos = malloc((size_t)T * 4), *seq = malloc((size_t)T * 4);
	int32_t off[1] = {0}, bt[QPOOL];
	fill_f32(qkv, qkv_n, 11, 3.0f);
	fill_f32(cs, cs_n, 12, 1.0f);
	fill_bf16(kv, kv_n, 13, 1.0f);
	fill_bf16(nw, (size_t)D, 14, 1.2f);
	for (int j = 0; j < QPOOL; j++)
		bt[j] = (j * 29 + 3) % QPOOL; /* scrambled, distinct */
	for (int t = 0; t < T; t++) { /* one sequence, distinct positions; the last row pads */
		pos[t] = t == T - 1 && T > 1 ? -1 : (t * 7 + 5) % (QPOOL * QBS);
		seq[t] = 0;
	}
	float *dqkv = to_dev(qkv, qkv_n * 4), *dcs = to_dev(cs, cs_n * 4);
	uint16_t *dkv = to_dev(kv, kv_n * 2), *dnw = to_dev(nw, (size_t)D * 2);
	uint16_t *dq = dev_alloc_guarded(q_n * 2);
	int32_t *dpos = to_dev(pos, (size_t)T * 4), *dseq = to_dev(seq, (size_t)T * 4);
	int32_t *doff = to_dev(off, 4), *dbt = to_dev(bt, sizeof(bt));
	struct ds_k_tokmeta tm = {dpos, dseq, doff, dbt};
	uint16_t *q0 = malloc(q_n * 2), *q1 = malloc(q_n * 2);
	uint16_t *kv0 = malloc(kv_n * 2), *kv1 = malloc(kv_n * 2);
	CK(ds_k_qkv_rope_pdl(dqkv, NULL, dnw, dnw, dcs, tm, T, d, dq, dkv, 0, 0));
	CK(cudaDeviceSynchronize());
	from_dev(q0, dq, q_n * 2);
	from_dev(kv0, dkv, kv_n * 2);
	for (size_t k = 0; k < DS_ARRAY_LEN(pf_cases); k++) {
		struct ds_k_l2pf pf = pf_range(pfbuf, &pf_cases[k], 40);
		CK(cudaMemcpy(dkv, kv, kv_n * 2, cudaMemcpyHostToDevice));
		CK(cudaMemset(dq, 0x7f, q_n * 2));
		CK(ds_k_qkv_rope_pf(dqkv, NULL, dnw, dnw, dcs, tm, T, d, dq, dkv, pf_cases[k].pdl,
		                    &pf, 0));
		CK(cudaDeviceSynchronize());
		from_dev(q1, dq, q_n * 2);
		from_dev(kv1, dkv, kv_n * 2);
		if (memcmp(q0, q1, q_n * 2) != 0 || memcmp(kv0, kv1, kv_n * 2) != 0)
			fail_msg("qkv_rope T=%d, prefetch case %zu: q or KV bits differ from the "
			         "plain launch",
			         T, k);
		dev_check_guard(dq, q_n * 2);
	}
	struct ds_k_l2pf bad = pf_range(pfbuf, &pf_cases[0], 40);
	bad.mode = -1;
	assert_int_equal(ds_k_qkv_rope_pf(dqkv, NULL, dnw, dnw, dcs, tm, T, d, dq, dkv, 0, &bad, 0),
	                 cudaErrorInvalidValue);
	void *dv[] = {dqkv, dcs, dkv, dnw, dq, dpos, dseq, doff, dbt};
	for (size_t i = 0; i < DS_ARRAY_LEN(dv); i++)
		cudaFree(dv[i]);
	void *hv[] = {qkv, cs, kv, nw, pos, seq, q0, q1, kv0, kv1};
	for (size_t i = 0; i < DS_ARRAY_LEN(hv); i++)
		free(hv[i]);
}

static void test_qkv_rope_pf(void **state)
{
	(void)state;
	void *pfbuf = NULL;
	CK(cudaMalloc(&pfbuf, PF_BYTES));
	qkv_case(1, pfbuf);  /* grid (1, 4): prefetch-only rows added */
	qkv_case(9, pfbuf);  /* (9, 4) */
	qkv_case(65, pfbuf); /* (65, 1): enough blocks, none added */
	cudaFree(pfbuf);
}

/* ---- decode attention ---- */

#define APOOL 300
#define ABS 16

static void attn_case(int T, int n_split, int variant, const void *pfbuf)
{
	struct ds_k_dims d = {8, 2, 128, ABS, APOOL, 1e-5f};
	int D = d.head_dim, max_blk = 50;
	size_t kv_n = (size_t)APOOL * 2 * d.n_kv * ABS * D, q_n = (size_t)T * d.n_head * D;
	uint16_t *kv = malloc(kv_n * 2), *q = malloc(q_n * 2);
	int32_t *pos = malloc((size_t)T * 4), *seq = malloc((size_t)T * 4),
	        *off = malloc((size_t)T * 4), *bt = malloc((size_t)T * max_blk * 4);
	fill_bf16(kv, kv_n, 21, 1.0f);
	fill_bf16(q, q_n, 22, 3.0f);
	for (int t = 0; t < T; t++) {
		pos[t] = t == 2 ? -1 : (int)(ds_hash3(23, (uint64_t)t, 0) % (max_blk * ABS));
		seq[t] = t;
		off[t] = t * max_blk;
		for (int j = 0; j < max_blk; j++)
			bt[t * max_blk + j] =
			    (int32_t)(ds_hash3(24, (uint64_t)t, (uint64_t)j) % APOOL);
	}
	uint16_t *dkv = to_dev(kv, kv_n * 2), *dq = to_dev(q, q_n * 2);
	uint16_t *dout = dev_alloc_guarded(q_n * 2);
	int32_t *dpos = to_dev(pos, (size_t)T * 4), *dseq = to_dev(seq, (size_t)T * 4);
	int32_t *doff = to_dev(off, (size_t)T * 4), *dbt = to_dev(bt, (size_t)T * max_blk * 4);
	float *dpart = NULL;
	unsigned *dcnt = NULL;
	CK(cudaMalloc((void **)&dpart, (size_t)T * d.n_head * n_split * (D + 2) * 4));
	CK(cudaMalloc((void **)&dcnt, (size_t)T * d.n_kv * sizeof(unsigned)));
	CK(cudaMemset(dcnt, 0, (size_t)T * d.n_kv * sizeof(unsigned)));
	struct ds_k_tokmeta tm = {dpos, dseq, doff, dbt};
	uint16_t *o0 = malloc(q_n * 2), *o1 = malloc(q_n * 2);
	CK(ds_k_attn_decode_v(dq, dkv, tm, T, d, n_split, dpart, dout, NULL, variant, 0, 0));
	CK(cudaDeviceSynchronize());
	from_dev(o0, dout, q_n * 2);
	for (size_t k = 0; k < DS_ARRAY_LEN(pf_cases); k++)
		for (int fused = 0; fused < 2; fused++) {
			struct ds_k_l2pf pf = pf_range(pfbuf, &pf_cases[k], 1);
			CK(cudaMemset(dout, 0x7f, q_n * 2));
			CK(ds_k_attn_decode_pf(dq, dkv, tm, T, d, n_split, dpart, dout,
			                       fused ? dcnt : NULL, variant, pf_cases[k].pdl, &pf,
			                       0));
			CK(cudaDeviceSynchronize());
			from_dev(o1, dout, q_n * 2);
			if (memcmp(o0, o1, q_n * 2) != 0)
				fail_msg(
				    "attn_decode variant %d T=%d split %d fused %d, prefetch case "
				    "%zu: bits differ from the plain launch",
				    variant, T, n_split, fused, k);
			dev_check_guard(dout, q_n * 2);
		}
	unsigned *cnt = malloc((size_t)T * d.n_kv * sizeof(unsigned));
	from_dev(cnt, dcnt, (size_t)T * d.n_kv * sizeof(unsigned));
	for (int i = 0; i < T * d.n_kv; i++)
		assert_int_equal(cnt[i], 0);
	struct ds_k_l2pf bad = pf_range(pfbuf, &pf_cases[0], 1);
	bad.mode = 7;
	assert_int_equal(
	    ds_k_attn_decode_pf(dq, dkv, tm, T, d, n_split, dpart, dout, NULL, variant, 0, &bad, 0),
	    cudaErrorInvalidValue);
	void *dv[] = {dkv, dq, dout, dpos, dseq, doff, dbt, dpart, dcnt};
	for (size_t i = 0; i < DS_ARRAY_LEN(dv); i++)
		cudaFree(dv[i]);
	void *hv[] = {kv, q, pos, seq, off, bt, o0, o1, cnt};
	for (size_t i = 0; i < DS_ARRAY_LEN(hv); i++)
		free(hv[i]);
}

static void test_attn_decode_pf(void **state)
{
	(void)state;
	void *pfbuf = NULL;
	CK(cudaMalloc(&pfbuf, PF_BYTES));
	for (int v = 0; v < DS_K_ATTN_DECODE_N_VARIANTS; v++) {
		attn_case(1, 1, v, pfbuf);
		attn_case(1, 16, v, pfbuf);
		attn_case(9, 4, v, pfbuf);
	}
	cudaFree(pfbuf);
}

/* ---- the backend ---- */

#define BS 16

static void fwd_ok(struct ds_backend *be, enum ds_path path, struct ds_fwd_seq *s, int n,
                   float *logits, struct ds_fwd_row *rows)
{
	struct ds_fwd_batch b = {path, s, n, rows, logits};
	struct ds_err err;
	if (ds_backend_forward(be, &b, &err) != DS_OK)
		fail_msg("forward: %s", err.msg);
}

static const char *const env_names[] = {"DS_L2_PF",      "DS_L2_PF_MB",     "DS_L2_PF_OP",
                                        "DS_L2_PF_HINT", "DS_L2_PF_BLOCKS", "DS_FAST_ATTN_FUSED"};

static void env_clear(void)
{
	for (size_t i = 0; i < DS_ARRAY_LEN(env_names); i++)
		assert_int_equal(unsetenv(env_names[i]), 0);
}

/* A small-preset backend with room for n_seq sequences of n_blk blocks. */
static void backend_open(struct ds_backend *be, struct ds_model **m, uint64_t seed, int n_seq,
                         int n_blk)
{
	struct ds_err err;
	*m = model_deferred("small", seed);
	assert_non_null(*m);
	if (ds_backend_cuda_init(be, *m, 0, &err) != DS_OK)
		fail_msg("cuda init: %s", err.msg);
	if (ds_backend_kv_init(be, n_seq * n_blk, BS, &err) != DS_OK)
		fail_msg("kv init: %s", err.msg);
}

/* Sequence i: prompt tokens tok[i * stride ..], blocks blk[i * nb ..]. */
struct seqs {
	int n, L, stride, nb, V;
	int32_t *tok, *blk;
	struct ds_fwd_seq *ss;
	struct ds_fwd_row *rows;
};

static void seqs_init(struct seqs *s, int n, int L, int steps, int V, uint64_t seed)
{
	s->n = n;
	s->L = L;
	s->stride = L + steps;
	s->nb = (L + steps + BS - 1) / BS;
	s->V = V;
	s->tok = malloc((size_t)n * s->stride * 4);
	s->blk = malloc((size_t)n * s->nb * 4);
	s->ss = calloc((size_t)n, sizeof(*s->ss));
	s->rows = malloc((size_t)n * L * sizeof(*s->rows));
	for (int i = 0; i < n * s->stride; i++)
		s->tok[i] = (int32_t)(ds_hash3(seed, 4, (uint64_t)i) % (uint64_t)V);
	for (int i = 0; i < n * s->nb; i++)
		s->blk[i] = (int32_t)((i * 37 + 11) % (n * s->nb)); /* scrambled, distinct */
}

static void seqs_free(struct seqs *s)
{
	free(s->tok);
	free(s->blk);
	free(s->ss);
	free(s->rows);
}

/* The first B sequences as one pass: prompts (L tokens from position 0) or decode step k
 * (token L + k at position L + k). */
static void seqs_set(struct seqs *s, int B, bool prompt, int k)
{
	for (int i = 0; i < B; i++) {
		int32_t *t = s->tok + (size_t)i * s->stride;
		s->ss[i] = (struct ds_fwd_seq){.tokens = prompt ? t : t + s->L + k,
		                               .n_tokens = prompt ? s->L : 1,
		                               .pos0 = prompt ? 0 : s->L + k,
		                               .blocks = s->blk + (size_t)i * s->nb,
		                               .n_blocks = s->nb,
		                               .all_rows = false,
		                               .sp = {0.0f, 0, 1.0f, 1}};
	}
}

/* Prefetch settings of the backend check: mode, cap (bytes; odd: partial ranges), flags. */
struct be_pf {
	int mode;
	size_t cap;
	unsigned flags;
	bool pdl;
};

static const struct be_pf be_pfs[] = {
    {DS_K_L2PF_AFTER_WAIT, (size_t)24 << 20, 0, true},
    {DS_K_L2PF_BEFORE_WAIT, (size_t)24 << 20, 0, true},
    {DS_K_L2PF_AFTER_WAIT, 100003, DS_K_L2PF_EVICT_LAST, true},
    {DS_K_L2PF_BEFORE_WAIT, 300007, DS_K_L2PF_LINES, true},
    {DS_K_L2PF_AFTER_WAIT, 100003, DS_K_L2PF_LINES | DS_K_L2PF_EVICT_LAST, false},
};

/* A decode step with prefetch gives the bits of the step without, eagerly and from the graph. */
static void test_backend_pf_bits(void **state)
{
	(void)state;
	env_clear();
	struct ds_model *m;
	struct ds_backend be;
	struct seqs s;
	int B_max = 33, L = 45;
	backend_open(&be, &m, 31, B_max, (L + 1 + BS - 1) / BS);
	struct ds_cuda_ctx *c = be.ctx;
	int V = m->cfg.vocab_size;
	seqs_init(&s, B_max, L, 1, V, 7);
	seqs_set(&s, B_max, true, 0);
	fwd_ok(&be, DS_PATH_REF, s.ss, B_max, NULL, s.rows);
	size_t rowb = (size_t)V * 4;
	float *lg0 = malloc((size_t)B_max * rowb), *lg = malloc((size_t)B_max * rowb);
	int sizes[] = {1, 8, 33};
	for (size_t si = 0; si < DS_ARRAY_LEN(sizes); si++) {
		int B = sizes[si];
		seqs_set(&s, B, false, 0);
		ds_cuda_fast_graphs_reset(c);
		c->fast.l2pf_mode = DS_K_L2PF_OFF;
		c->fast.pdl = true;
		fwd_ok(&be, DS_PATH_FAST, s.ss, B, lg0, s.rows); /* eager, no prefetch */
		for (size_t k = 0; k < DS_ARRAY_LEN(be_pfs); k++) {
			ds_cuda_fast_graphs_reset(c);
			c->fast.l2pf_mode = be_pfs[k].mode;
			c->fast.l2pf_cap = be_pfs[k].cap;
			c->fast.l2pf_flags = be_pfs[k].flags;
			c->fast.pdl = be_pfs[k].pdl;
			for (int r = 0; r < 4; r++) { /* eager, capture, replays */
				memset(lg, 0, (size_t)B * rowb);
				fwd_ok(&be, DS_PATH_FAST, s.ss, B, lg, s.rows);
				if (memcmp(lg0, lg, (size_t)B * rowb) != 0)
					fail_msg(
					    "batch %d, prefetch setting %zu, run %d (%s): logits "
					    "differ from the step without prefetch",
					    B, k, r, r ? "graph" : "eager");
			}
		}
		double sd = 0;
		for (int i = 0; i < V; i++)
			sd += (double)lg0[i] * lg0[i];
		assert_true(sd > 0 && isfinite(sd));
	}
	free(lg0);
	free(lg);
	seqs_free(&s);
	ds_backend_free(&be);
	ds_model_free(m);
}

/* The decode step of the first B sequences at step k, eagerly with the combine kernel
 * (attn_fused off) while the bucket's captured graph (fused) is set aside and kept. */
static void step_unfused(struct ds_backend *be, struct seqs *s, int B, float *lg)
{
	struct ds_cuda_ctx *c = be->ctx;
	int bi = 0;
	while ((1 << bi) < B)
		bi++;
	cudaGraphExec_t g = c->fast.graph[bi];
	bool warm = c->fast.warm[bi];
	c->fast.graph[bi] = NULL;
	c->fast.warm[bi] = false; /* the next decode of this bucket runs eagerly */
	c->fast.attn_fused = false;
	fwd_ok(be, DS_PATH_FAST, s->ss, B, lg, s->rows);
	c->fast.attn_fused = true;
	c->fast.graph[bi] = g;
	c->fast.warm[bi] = warm;
}

/* Fused combine vs the combine kernel over several decode steps of one backend (the same GEMM
 * choices): the fused step runs eagerly, is captured, then replayed at new positions; prompts of
 * 300 tokens give rows with several splits. */
static void test_backend_fused(void **state)
{
	(void)state;
	int B_max = 33, L = 300, steps = 6;
	struct ds_model *m;
	struct ds_backend be;
	struct seqs s;
	env_clear();
	backend_open(&be, &m, 41, B_max, (L + steps + BS - 1) / BS);
	struct ds_cuda_ctx *c = be.ctx;
	assert_true(c->fast.attn_fused);
	int V = m->cfg.vocab_size;
	seqs_init(&s, B_max, L, steps, V, 9);
	size_t rowb = (size_t)V * 4;
	float *lf = malloc((size_t)B_max * rowb), *lu = malloc((size_t)B_max * rowb);
	int sizes[] = {1, 8, 33};
	for (size_t si = 0; si < DS_ARRAY_LEN(sizes); si++) {
		int B = sizes[si], bi = si == 0 ? 0 : si == 1 ? 3 : 6;
		seqs_set(&s, B, true, 0); /* prompts again: each batch starts from the same KV */
		fwd_ok(&be, DS_PATH_REF, s.ss, B, NULL, s.rows);
		for (int k = 0; k < steps; k++) {
			seqs_set(&s, B, false, k);
			fwd_ok(&be, DS_PATH_FAST, s.ss, B, lf,
			       s.rows); /* eager, capture, replays */
			assert_true(k < 2 || c->fast.graph[bi] != NULL);
			step_unfused(&be, &s, B, lu);
			double maxd = 0, sd = 0;
			int agree = 0;
			for (int r = 0; r < B; r++) {
				const float *x = lf + (size_t)r * V, *y = lu + (size_t)r * V;
				int ax = 0, ay = 0;
				for (int i = 0; i < V; i++) {
					maxd = fmax(maxd, fabs((double)x[i] - y[i]));
					sd += (double)y[i] * y[i];
					ax = x[i] > x[ax] ? i : ax;
					ay = y[i] > y[ay] ? i : ay;
				}
				agree += ax == ay;
			}
			sd = sqrt(sd / ((double)B * V));
			bool same = memcmp(lf, lu, (size_t)B * rowb) == 0;
			if (k == 0 || k == steps - 1)
				print_message(
				    "batch %d step %d: fused vs combine kernel max |dlogit| "
				    "%.3g (sd %.3g), argmax agree %d/%d, bit-identical %d\n",
				    B, k, maxd, sd, agree, B, (int)same);
			assert_true(sd > 0.1 && isfinite(sd));
			if (!(maxd <= 1e-2 * sd + 1e-3) || agree < B - (B > 1))
				fail_msg("batch %d step %d: fused combine off by %.3g (sd %.3g), "
				         "argmax agree %d/%d",
				         B, k, maxd, sd, agree, B);
		}
	}
	/* the fused merge left its counters at zero */
	size_t n = (size_t)DS_CUDA_MAX_DECODE * m->cfg.n_kv_head;
	unsigned *cnt = malloc(n * sizeof(unsigned));
	from_dev(cnt, c->fast.attn_cnt, n * sizeof(unsigned));
	for (size_t i = 0; i < n; i++)
		if (cnt[i])
			fail_msg("attention counter %zu = %u after the steps, want 0", i, cnt[i]);
	free(cnt);
	free(lf);
	free(lu);
	seqs_free(&s);
	ds_backend_free(&be);
	ds_model_free(m);
}

/* The environment settings land in the fast state; bad values fail the init by name. */
static void test_env_settings(void **state)
{
	(void)state;
	struct ds_model *m = model_deferred("tiny", 3);
	assert_non_null(m);
	struct ds_backend be;
	struct ds_err err;
	env_clear();
	assert_int_equal(setenv("DS_L2_PF", "2", 1), 0);
	assert_int_equal(setenv("DS_L2_PF_MB", "7", 1), 0);
	assert_int_equal(setenv("DS_L2_PF_OP", "line", 1), 0);
	assert_int_equal(setenv("DS_L2_PF_HINT", "last", 1), 0);
	assert_int_equal(setenv("DS_L2_PF_BLOCKS", "5", 1), 0);
	assert_int_equal(setenv("DS_FAST_ATTN_FUSED", "0", 1), 0);
	if (ds_backend_cuda_init(&be, m, 0, &err) != DS_OK)
		fail_msg("cuda init: %s", err.msg);
	struct ds_cuda_fast *f = &((struct ds_cuda_ctx *)be.ctx)->fast;
	assert_int_equal(f->l2pf_mode, DS_K_L2PF_BEFORE_WAIT);
	assert_true(f->l2pf_cap == (size_t)7 << 20);
	assert_int_equal(f->l2pf_flags, DS_K_L2PF_LINES | DS_K_L2PF_EVICT_LAST);
	assert_int_equal(f->l2pf_min_blocks, 5);
	assert_false(f->attn_fused);
	ds_backend_free(&be);
	env_clear();
	if (ds_backend_cuda_init(&be, m, 0, &err) != DS_OK)
		fail_msg("cuda init: %s", err.msg);
	f = &((struct ds_cuda_ctx *)be.ctx)->fast;
	assert_int_equal(f->l2pf_mode, DS_K_L2PF_OFF);
	assert_true(f->l2pf_cap == (size_t)24 << 20);
	assert_int_equal(f->l2pf_flags, 0);
	assert_int_equal(f->l2pf_min_blocks, 128);
	assert_true(f->attn_fused);
	assert_non_null(f->attn_cnt);
	ds_backend_free(&be);
	const char *bad[][2] = {{"DS_L2_PF", "3"},          {"DS_L2_PF", "on"},
	                        {"DS_L2_PF_MB", "-1"},      {"DS_L2_PF_OP", "bulky"},
	                        {"DS_L2_PF_HINT", "first"}, {"DS_L2_PF_BLOCKS", "0"},
	                        {"DS_FAST_ATTN_FUSED", "2"}};
	for (size_t i = 0; i < DS_ARRAY_LEN(bad); i++) {
		env_clear();
		assert_int_equal(setenv(bad[i][0], bad[i][1], 1), 0);
		assert_int_equal(ds_backend_cuda_init(&be, m, 0, &err), DS_ERR_INVALID);
		if (!strstr(err.msg, bad[i][0]))
			fail_msg("%s=%s: the error does not name the variable: %s", bad[i][0],
			         bad[i][1], err.msg);
	}
	env_clear();
	ds_model_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_rmsnorm_pf),     cmocka_unit_test(test_qkv_rope_pf),
	    cmocka_unit_test(test_attn_decode_pf), cmocka_unit_test(test_backend_pf_bits),
	    cmocka_unit_test(test_backend_fused),  cmocka_unit_test(test_env_settings),
	};
	return cmocka_run_group_tests_name("gpu_l2pf", tests, NULL, NULL);
}
