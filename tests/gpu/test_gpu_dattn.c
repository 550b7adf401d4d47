/* test_gpu_dattn.c - the fast path's flash-decoding kernel (kernels/attn_decode.cu) against a CPU
 * double reference on random q and KV (never zeros): head_dim 64 and 128, GQA 3 and 4, batches
 * 1, 3, 32 and 257 with contexts 1, 2, 63, 64, 65, 511 and 2049 mixed in one batch, scrambled
 * block tables, padding rows (pos < 0: zeros), several grid splits, with and without PDL, a
 * poisoned output (every element must be written) and guard bytes after it. Also: one CUDA
 * graph replayed with changed positions and block tables, bad arguments rejected, and the CUDA
 * backend's fast decode (eager, captured, replayed) with this kernel vs DS_FAST_ATTN=old. Every
 * kernel check runs for every variant (reg: register-streamed, pipe: cp.async-pipelined, mma:
 * tensor cores), and
 * again with the fused merge (per-(row, KV head) counters: the same bits as the combine kernel,
 * counters back at zero, also across graph replays); the pipelined variant must fit more
 * blocks per SM than the register one. */
#include "gpu_util.h"
#include "gpu_model.h"
#include "kernels.h"

#define POOL 400 /* physical KV blocks; sequences map into them through scrambled tables */

static const int ctxs[] = {1, 2, 63, 64, 65, 511, 2049};
static const char *const vname[DS_K_ATTN_DECODE_N_VARIANTS] = {"reg", "pipe", "mma", "mma_block",
                                                               "mma_bulk"};

struct dfix {
	struct ds_k_dims d;
	int T, max_blk;           /* rows; block-table entries per row */
	int32_t *pos, *seq, *off; /* (T) each row its own sequence */
	int32_t *bt;              /* (T * max_blk) */
	uint16_t *kv, *q;         /* host copies */
	size_t kv_n, q_n;
	/* device */
	uint16_t *dkv, *dq, *dout;
	int32_t *dpos, *dseq, *doff, *dbt;
	float *dpart;
	unsigned *dcnt; /* (T * n_kv) counters of the fused merge, zero between calls */
};

static void dfix_tables(struct dfix *f, uint64_t salt)
{
	for (int t = 0; t < f->T; t++) {
		f->seq[t] = t;
		f->off[t] = t * f->max_blk;
		for (int j = 0; j < f->max_blk; j++)
			f->bt[(size_t)t * f->max_blk + j] =
			    (int32_t)(ds_hash3(salt, (uint64_t)t, (uint64_t)j) % POOL);
	}
}

static void dfix_upload_meta(struct dfix *f)
{
	CK(cudaMemcpy(f->dpos, f->pos, (size_t)f->T * 4, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(f->dseq, f->seq, (size_t)f->T * 4, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(f->doff, f->off, (size_t)f->T * 4, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(f->dbt, f->bt, (size_t)f->T * f->max_blk * 4, cudaMemcpyHostToDevice));
}

/* T rows of n_head heads; q amplitude varies by row so some softmaxes are sharply peaked. */
static void dfix_init(struct dfix *f, int n_head, int n_kv, int D, int bs, int T, uint64_t seed)
{
	memset(f, 0, sizeof(*f));
	f->d = (struct ds_k_dims){n_head, n_kv, D, bs, POOL, 1e-5f};
	f->T = T;
	f->max_blk = (2049 + 2 * 70 + bs - 1) / bs; /* + graph replay growth */
	f->pos = calloc((size_t)T, 4);
	f->seq = calloc((size_t)T, 4);
	f->off = calloc((size_t)T, 4);
	f->bt = calloc((size_t)T * f->max_blk, 4);
	f->kv_n = (size_t)POOL * 2 * n_kv * bs * D;
	f->q_n = (size_t)T * n_head * D;
	f->kv = malloc(f->kv_n * 2);
	f->q = malloc(f->q_n * 2);
	fill_bf16(f->kv, f->kv_n, seed, 1.0f);
	for (int t = 0; t < T; t++) {
		float a = (t % 4 == 1) ? 8.0f : 2.0f;
		for (size_t i = 0; i < (size_t)n_head * D; i++)
			f->q[(size_t)t * n_head * D + i] =
			    ds_f32_to_bf16(rnd(seed + 1, (size_t)t * n_head * D + i, a));
	}
	dfix_tables(f, seed + 2);
	f->dkv = to_dev(f->kv, f->kv_n * 2);
	f->dq = to_dev(f->q, f->q_n * 2);
	f->dpos = to_dev(f->pos, (size_t)T * 4);
	f->dseq = to_dev(f->seq, (size_t)T * 4);
	f->doff = to_dev(f->off, (size_t)T * 4);
	f->dbt = to_dev(f->bt, (size_t)T * f->max_blk * 4);
	CK(cudaMalloc((void **)&f->dpart,
	              (size_t)T * n_head * DS_K_ATTN_DECODE_MAX_SPLIT * (D + 2) * 4));
	f->dout = dev_alloc_guarded(f->q_n * 2);
	CK(cudaMalloc((void **)&f->dcnt, (size_t)T * n_kv * sizeof(unsigned)));
	CK(cudaMemset(f->dcnt, 0, (size_t)T * n_kv * sizeof(unsigned)));
}

/* The fused merge left every counter at zero. */
static void dfix_check_counters(const struct dfix *f, const char *what)
{
	size_t n = (size_t)f->T * f->d.n_kv;
	unsigned *h = malloc(n * sizeof(unsigned));
	from_dev(h, f->dcnt, n * sizeof(unsigned));
	for (size_t i = 0; i < n; i++)
		if (h[i] != 0)
			fail_msg("%s: counter %zu = %u after the call, want 0", what, i, h[i]);
	free(h);
}

static void dfix_free(struct dfix *f)
{
	void *dv[] = {f->dkv, f->dq, f->dout, f->dpos, f->dseq, f->doff, f->dbt, f->dpart, f->dcnt};
	for (size_t i = 0; i < DS_ARRAY_LEN(dv); i++)
		cudaFree(dv[i]);
	free(f->pos);
	free(f->seq);
	free(f->off);
	free(f->bt);
	free(f->kv);
	free(f->q);
}

static struct ds_k_tokmeta dfix_tm(const struct dfix *f)
{
	struct ds_k_tokmeta tm = {f->dpos, f->dseq, f->doff, f->dbt};
	return tm;
}

/* out (D) for row t, query head h, in double. */
static void dref(const struct dfix *f, int t, int h, double *out, double *s)
{
	const struct ds_k_dims *d = &f->d;
	int D = d->head_dim, G = d->n_head / d->n_kv, kh = h / G, p = f->pos[t];
	const uint16_t *qv = f->q + ((size_t)t * d->n_head + h) * D;
	const int32_t *bt = f->bt + f->off[f->seq[t]];
	int bs = d->block_size;
	double m = -INFINITY, l = 0;
	for (int j = 0; j <= p; j++) {
		const uint16_t *k =
		    f->kv + (((size_t)bt[j / bs] * 2 * d->n_kv + kh) * bs + j % bs) * D;
		double a = 0;
		for (int i = 0; i < D; i++)
			a += (double)bf(qv[i]) * bf(k[i]);
		s[j] = a / sqrt((double)D);
		m = fmax(m, s[j]);
	}
	for (int i = 0; i < D; i++)
		out[i] = 0;
	for (int j = 0; j <= p; j++) {
		const uint16_t *v =
		    f->kv + (((size_t)bt[j / bs] * 2 * d->n_kv + d->n_kv + kh) * bs + j % bs) * D;
		double e = exp(s[j] - m);
		l += e;
		for (int i = 0; i < D; i++)
			out[i] += e * bf(v[i]);
	}
	for (int i = 0; i < D; i++)
		out[i] /= l;
}

/* The reference output of every row (zeros for padding rows), (T, n_head, D). */
static double *dref_all(const struct dfix *f)
{
	int D = f->d.head_dim, H = f->d.n_head;
	double *r = calloc(f->q_n, sizeof(double)), *s = malloc(4096 * sizeof(double));
	for (int t = 0; t < f->T; t++)
		if (f->pos[t] >= 0)
			for (int h = 0; h < H; h++)
				dref(f, t, h, r + ((size_t)t * H + h) * D, s);
	free(s);
	return r;
}

static void dcheck(const struct dfix *f, const double *ref, const char *what, int split)
{
	size_t on = f->q_n * 2;
	uint16_t *g = malloc(on);
	from_dev(g, f->dout, on);
	dev_check_guard(f->dout, on);
	int D = f->d.head_dim, H = f->d.n_head;
	for (int t = 0; t < f->T; t++)
		for (int h = 0; h < H; h++)
			for (int i = 0; i < D; i++) {
				size_t k = ((size_t)t * H + h) * D + i;
				if (f->pos[t] < 0) {
					if (g[k] != 0)
						fail_msg(
						    "%s split %d: padding row %d head %d dim %d "
						    "= %#x, want 0",
						    what, split, t, h, i, g[k]);
					continue;
				}
				if (!bf16_close(ds_f32_to_bf16((float)ref[k]), g[k], 2) &&
				    fabs(ref[k] - bf(g[k])) > 1e-3)
					fail_msg("%s split %d: row %d (pos %d) head %d dim %d: %g, "
					         "want %g",
					         what, split, t, f->pos[t], h, i, bf(g[k]), ref[k]);
			}
	free(g);
}

/* Row r of a batch of T: a mix of the contexts, every 5th row (from 3) padding. */
static int row_pos(int r, int T, int salt)
{
	if (T > 1 && r % 5 == 3)
		return -1;
	return ctxs[(r * 3 + T + salt) % (int)DS_ARRAY_LEN(ctxs)] - 1;
}

static void dcase_bs(int n_head, int n_kv, int D, int bs, int T, int salt)
{
	struct dfix f;
	dfix_init(&f, n_head, n_kv, D, bs, T,
	          1000 + (uint64_t)D * 7 + (uint64_t)n_head + (uint64_t)T);
	for (int t = 0; t < T; t++)
		f.pos[t] = row_pos(t, T, salt);
	dfix_upload_meta(&f);
	double *ref = dref_all(&f);
	int splits[] = {1, 2, 7, DS_K_ATTN_DECODE_MAX_SPLIT};
	char what[96];
	uint16_t *sep = malloc(f.q_n * 2), *fused = malloc(f.q_n * 2);
	for (int v = 0; v < DS_K_ATTN_DECODE_N_VARIANTS; v++)
		for (size_t s = 0; s < DS_ARRAY_LEN(splits); s++) {
			int pdl = (int)((s + (size_t)v) & 1);
			snprintf(what, sizeof(what), "%s D=%d heads %d/%d bs %d T=%d pdl %d",
			         vname[v], D, n_head, n_kv, bs, T, pdl);
			CK(cudaMemset(f.dout, 0x7f, f.q_n * 2));
			CK(ds_k_attn_decode_v(f.dq, f.dkv, dfix_tm(&f), T, f.d, splits[s], f.dpart,
			                      f.dout, NULL, v, pdl, 0));
			CK(cudaDeviceSynchronize());
			dcheck(&f, ref, what, splits[s]);
			/* fused merge (counters): the same bits, counters back at zero */
			from_dev(sep, f.dout, f.q_n * 2);
			CK(cudaMemset(f.dout, 0x7f, f.q_n * 2));
			CK(cudaMemset(f.dpart, 0xff, (size_t)T * n_head * splits[s] * (D + 2) * 4));
			CK(ds_k_attn_decode_v(f.dq, f.dkv, dfix_tm(&f), T, f.d, splits[s], f.dpart,
			                      f.dout, f.dcnt, v, pdl, 0));
			CK(cudaDeviceSynchronize());
			from_dev(fused, f.dout, f.q_n * 2);
			dev_check_guard(f.dout, f.q_n * 2);
			if (memcmp(sep, fused, f.q_n * 2) != 0)
				fail_msg("%s split %d: fused merge differs from the combine kernel",
				         what, splits[s]);
			dfix_check_counters(&f, what);
		}
	free(sep);
	free(fused);
	free(ref);
	dfix_free(&f);
}

static void dcase(int n_head, int n_kv, int D, int T, int salt)
{
	dcase_bs(n_head, n_kv, D, 16, T, salt);
}

static void test_dattn_d128_g4(void **state)
{
	(void)state;
	for (int c = 0; c < (int)DS_ARRAY_LEN(ctxs); c++)
		dcase(8, 2, 128, 1, c);
	dcase(8, 2, 128, 3, 0);
	dcase(32, 8, 128, 32, 0);
	dcase(8, 2, 128, 257, 1);
}

static void test_dattn_d64_g3(void **state)
{
	(void)state;
	for (int c = 0; c < (int)DS_ARRAY_LEN(ctxs); c += 2)
		dcase(6, 2, 64, 1, c);
	dcase(6, 2, 64, 3, 1);
	dcase(6, 2, 64, 32, 2);
	dcase(3, 1, 64, 257, 0);
}

static void test_dattn_other_g(void **state)
{
	(void)state;
	dcase(9, 3, 128, 3, 2);         /* GQA 3, head_dim 128 */
	dcase(16, 4, 64, 32, 3);        /* GQA 4, head_dim 64 */
	dcase(8, 1, 128, 3, 4);         /* GQA 8 */
	dcase(2, 2, 64, 3, 5);          /* no GQA */
	dcase_bs(8, 2, 128, 12, 32, 6); /* block size not a power of two */
	dcase_bs(6, 2, 64, 32, 3, 0);
	/* blocks of 4 positions: a 2049-position row spans 513, so the mma variant's blocks at 1
	 * and 2 splits read the table from L2 (more than its 256 shared-memory entries), at 7 and
	 * 64 from shared memory */
	dcase_bs(8, 2, 128, 4, 8, 0);
}

/* One graph, captured once with PDL, replayed after the positions (and block tables) changed:
 * rows grow, a padding row becomes real and a real row becomes padding. */
static void graph_replay(int variant, bool fused)
{
	struct dfix f;
	int T = 32;
	dfix_init(&f, 32, 8, 128, 16, T, 77);
	for (int t = 0; t < T; t++)
		f.pos[t] = row_pos(t, T, 0);
	dfix_upload_meta(&f);
	cudaStream_t st;
	CK(cudaStreamCreate(&st)); /* blocking: ordered after the legacy-stream copies below */
	cudaGraph_t g = NULL;
	cudaGraphExec_t ge = NULL;
	CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
	cudaError_t le = ds_k_attn_decode_v(f.dq, f.dkv, dfix_tm(&f), T, f.d, 9, f.dpart, f.dout,
	                                    fused ? f.dcnt : NULL, variant, 1, st);
	CK(cudaStreamEndCapture(st, &g));
	CK(le);
	CK(cudaGraphInstantiate(&ge, g, 0));
	for (int round = 0; round < 3; round++) {
		if (round > 0) {
			for (int t = 0; t < T; t++) {
				if (f.pos[t] < 0)
					f.pos[t] = round * 40 + t;
				else if (t % 7 == round)
					f.pos[t] = -1;
				else
					f.pos[t] += 1 + (t * 13 + round) % 70;
			}
			dfix_tables(&f, 500 + (uint64_t)round);
			dfix_upload_meta(&f);
		}
		double *ref = dref_all(&f);
		CK(cudaMemset(f.dout, 0x7f, f.q_n * 2));
		CK(cudaDeviceSynchronize());
		CK(cudaGraphLaunch(ge, st));
		CK(cudaStreamSynchronize(st));
		dcheck(&f, ref, vname[variant], 9);
		if (fused)
			dfix_check_counters(&f, "graph replay, fused merge");
		free(ref);
	}
	cudaGraphExecDestroy(ge);
	cudaGraphDestroy(g);
	cudaStreamDestroy(st);
	dfix_free(&f);
}

static void test_dattn_graph_replay(void **state)
{
	(void)state;
	for (int v = 0; v < DS_K_ATTN_DECODE_N_VARIANTS; v++)
		for (int fused = 0; fused < 2; fused++)
			graph_replay(v, fused);
}

static void test_dattn_rejects(void **state)
{
	(void)state;
	struct ds_k_dims ok = {32, 8, 128, 16, 10, 1e-5f}, bad = ok;
	assert_true(ds_k_attn_decode_supported(ok));
	bad.head_dim = 96;
	assert_false(ds_k_attn_decode_supported(bad));
	bad = ok;
	bad.n_head = 36; /* G = 4.5 */
	assert_false(ds_k_attn_decode_supported(bad));
	bad = ok;
	bad.n_head = 8 * (DS_K_ATTN_DECODE_MAX_G + 1);
	assert_false(ds_k_attn_decode_supported(bad));
	bad = ok;
	bad.n_kv = 0;
	assert_false(ds_k_attn_decode_supported(bad));
	struct ds_k_tokmeta tm = {NULL, NULL, NULL, NULL};
	float *part = (float *)(uintptr_t)16;
	uint16_t *out = (uint16_t *)(uintptr_t)16;
	bad = ok;
	bad.head_dim = 96;
	assert_int_equal(ds_k_attn_decode(NULL, NULL, tm, 1, bad, 1, part, out, 0, 0),
	                 cudaErrorInvalidValue);
	assert_int_equal(ds_k_attn_decode(NULL, NULL, tm, 1, ok, 0, part, out, 0, 0),
	                 cudaErrorInvalidValue);
	assert_int_equal(ds_k_attn_decode(NULL, NULL, tm, 1, ok, DS_K_ATTN_DECODE_MAX_SPLIT + 1,
	                                  part, out, 0, 0),
	                 cudaErrorInvalidValue);
	assert_int_equal(ds_k_attn_decode(NULL, NULL, tm, 1, ok, 2, NULL, out, 0, 0),
	                 cudaErrorInvalidValue);
	int bps = 0;
	CK(ds_k_attn_decode_occupancy(ok, &bps));
	assert_true(bps >= 1);
	bad = ok;
	bad.head_dim = 96;
	assert_int_equal(ds_k_attn_decode_occupancy(bad, &bps), cudaErrorInvalidValue);
	/* nothing to do */
	assert_int_equal(ds_k_attn_decode(NULL, NULL, tm, 0, ok, 2, part, out, 0, 0), cudaSuccess);
	/* variants: unknown ones rejected; the pipelined one fits more blocks per SM (its point) */
	assert_int_equal(ds_k_attn_decode_v(NULL, NULL, tm, 1, ok, 1, part, out, NULL, -1, 0, 0),
	                 cudaErrorInvalidValue);
	assert_int_equal(ds_k_attn_decode_v(NULL, NULL, tm, 1, ok, 1, part, out, NULL,
	                                    DS_K_ATTN_DECODE_N_VARIANTS, 0, 0),
	                 cudaErrorInvalidValue);
	assert_int_equal(ds_k_attn_decode_occupancy_v(ok, DS_K_ATTN_DECODE_N_VARIANTS, &bps),
	                 cudaErrorInvalidValue);
	int bv[DS_K_ATTN_DECODE_N_VARIANTS];
	for (int v = 0; v < DS_K_ATTN_DECODE_N_VARIANTS; v++) {
		CK(ds_k_attn_decode_occupancy_v(ok, v, &bv[v]));
		print_message("D=128 G=4: %s variant %d blocks of 128 threads per SM\n", vname[v],
		              bv[v]);
	}
	assert_int_equal(bv[DS_K_ATTN_DECODE_REG], bps);
	assert_true(bv[DS_K_ATTN_DECODE_PIPE] > bv[DS_K_ATTN_DECODE_REG]);
}

/* ---- in the backend: the decode kernel vs DS_FAST_ATTN=old ---- */

#define NSEQ 5
#define KV_BS 16

/* Prefills NSEQ sequences on the reference path, then decodes their last tokens as one fast
 * batch three times (eager, capture, replay: bit-identical) into lg (NSEQ, vocab). */
static void backend_decode(const char *sel, float *lg)
{
	if (sel)
		assert_int_equal(setenv("DS_FAST_ATTN", sel, 1), 0);
	else
		assert_int_equal(unsetenv("DS_FAST_ATTN"), 0);
	struct ds_model *m = model_deferred("small", 11);
	assert_non_null(m);
	struct ds_backend be;
	struct ds_err err;
	if (ds_backend_cuda_init(&be, m, 0, &err) != DS_OK)
		fail_msg("cuda init: %s", err.msg);
	if (ds_backend_kv_init(&be, 128, KV_BS, &err) != DS_OK)
		fail_msg("kv init: %s", err.msg);
	int V = m->cfg.vocab_size, lens[NSEQ] = {1, 40, 100, 333, 700}, nb = 0;
	int32_t *tok[NSEQ], *blk[NSEQ];
	struct ds_fwd_seq pre[NSEQ], dec[NSEQ];
	struct ds_fwd_row rows[NSEQ];
	struct ds_sample_params sp = {0.0f, 0, 1.0f, 1};
	int n_pre = 0;
	for (int i = 0; i < NSEQ; i++) {
		int L = lens[i], n = (L + KV_BS - 1) / KV_BS;
		tok[i] = malloc((size_t)L * 4);
		blk[i] = malloc((size_t)n * 4);
		for (int j = 0; j < L; j++)
			tok[i][j] = (int32_t)(ds_hash3(21, (uint64_t)i, (uint64_t)j) % (uint64_t)V);
		for (int j = 0; j < n; j++, nb++)
			blk[i][j] = (int32_t)((nb * 37 + 5) % 128); /* scrambled, distinct */
		if (L > 1)
			pre[n_pre++] = (struct ds_fwd_seq){tok[i], L - 1, 0, blk[i], n, false, sp, false};
		dec[i] = (struct ds_fwd_seq){tok[i] + L - 1, 1, L - 1, blk[i], n, false, sp, false};
	}
	struct ds_fwd_batch b = {DS_PATH_REF, pre, n_pre, rows, NULL};
	if (ds_backend_forward(&be, &b, &err) != DS_OK)
		fail_msg("prefill: %s", err.msg);
	size_t lb = (size_t)NSEQ * V * 4;
	float *again = malloc(lb);
	for (int k = 0; k < 3; k++) {
		struct ds_fwd_batch d = {DS_PATH_FAST, dec, NSEQ, rows, k ? again : lg};
		if (ds_backend_forward(&be, &d, &err) != DS_OK)
			fail_msg("decode (%s): %s", sel ? sel : "new", err.msg);
		if (k)
			assert_memory_equal(lg, again, lb);
	}
	free(again);
	for (int i = 0; i < NSEQ; i++) {
		free(tok[i]);
		free(blk[i]);
	}
	ds_backend_free(&be);
	ds_model_free(m);
	assert_int_equal(unsetenv("DS_FAST_ATTN"), 0);
}

static void backend_compare(const float *a, const float *o, int V, const char *what)
{
	double maxd = 0, sd = 0;
	int agree = 0, same = 1;
	for (int r = 0; r < NSEQ; r++) {
		const float *x = a + (size_t)r * V, *y = o + (size_t)r * V;
		int ax = 0, ay = 0;
		for (int i = 0; i < V; i++) {
			maxd = fmax(maxd, fabs((double)x[i] - y[i]));
			sd += (double)y[i] * y[i];
			ax = x[i] > x[ax] ? i : ax;
			ay = y[i] > y[ay] ? i : ay;
		}
		agree += ax == ay;
	}
	same = memcmp(a, o, (size_t)NSEQ * V * 4) == 0;
	sd = sqrt(sd / ((double)NSEQ * V));
	print_message("small fast decode, attn_decode %s vs old kernel: max |dlogit| %.4f (sd "
	              "%.2f), argmax agree %d/%d, bit-identical %d\n",
	              what, maxd, sd, agree, NSEQ, same);
	assert_true(maxd < 0.05 * sd + 0.05);
	assert_true(agree >= NSEQ - 1);
	assert_false(same); /* the switch really selects another kernel */
}

static void test_dattn_backend_vs_old(void **state)
{
	(void)state;
	struct ds_model_config cfg;
	assert_int_equal(ds_model_preset("small", &cfg), DS_OK);
	int V = cfg.vocab_size;
	float *o = malloc((size_t)NSEQ * V * 4);
	backend_decode("old", o);
	const char *sel[] = {NULL, "reg", "pipe", "mma_block", "mma_bulk"}; /* default: mma */
	for (int k = 0; k < (int)DS_ARRAY_LEN(sel); k++) {
		float *a = malloc((size_t)NSEQ * V * 4);
		backend_decode(sel[k], a);
		backend_compare(a, o, V, sel[k] ? sel[k] : "default (mma)");
		free(a);
	}
	free(o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_dattn_rejects),      cmocka_unit_test(test_dattn_d128_g4),
	    cmocka_unit_test(test_dattn_d64_g3),       cmocka_unit_test(test_dattn_other_g),
	    cmocka_unit_test(test_dattn_graph_replay), cmocka_unit_test(test_dattn_backend_vs_old),
	};
	return cmocka_run_group_tests_name("gpu_dattn", tests, NULL, NULL);
}
