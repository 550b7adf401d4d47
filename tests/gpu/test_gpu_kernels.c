/* test_gpu_kernels.c - every CUDA kernel against its CPU twin on random data (never zeros), at
 * several shapes including odd ones, with guard bytes after each output; plus the reference
 * kernels' invariance (GEMM rows vs M and placement; attention split vs single block). */
#include "gpu_util.h"
#include "gpu_test_util.h"
#include "kernels.h"
#include "sample.h"
#include "synth.h"

/* ---- synthetic weights: bit-identical to the host generator ---- */

static void test_synth_matches_host(void **state)
{
	(void)state;
	size_t sizes[] = {1, 1000, 100003};
	uint64_t firsts[] = {0, 12345, 1ull << 33};
	for (size_t a = 0; a < DS_ARRAY_LEN(sizes); a++)
		for (size_t b = 0; b < DS_ARRAY_LEN(firsts); b++) {
			size_t n = sizes[a];
			uint64_t key = ds_synth_key("model.layers.3.mlp.down_proj.weight") + a;
			float scale = 0.0271f * (float)(b + 1), offset = b == 1 ? 1.0f : 0.0f;
			uint16_t *h = malloc(n * 2), *g = malloc(n * 2);
			ds_synth_fill(h, n, firsts[b], 42 + a, key, scale, offset);
			uint16_t *d = dev_alloc_guarded(n * 2);
			CK(ds_k_synth_fill(d, n, firsts[b], 42 + a, key, scale, offset, 0));
			from_dev(g, d, n * 2);
			dev_check_guard(d, n * 2);
			assert_memory_equal(h, g, n * 2);
			cudaFree(d);
			free(h);
			free(g);
		}
}

/* ---- embedding, RMSNorm, SiLU*mul ---- */

/* The embedding gather at hidden sizes of the 16-byte path (72, 4096) and the element path
 * (70: rows not a multiple of 8 elements, nor 16-byte aligned). */
static void embed_case(int V, int H)
{
	int T = 9;
	uint16_t *tab = malloc((size_t)V * H * 2);
	fill_bf16(tab, (size_t)V * H, 1, 1.0f);
	int32_t ids[9] = {0, V - 1, 5, 5, 17, V - 2, 1, V / 2, 2};
	float *x = malloc((size_t)T * H * 4);
	void *dt = to_dev(tab, (size_t)V * H * 2), *di = to_dev(ids, sizeof(ids));
	float *dx = dev_alloc_guarded((size_t)T * H * 4);
	CK(ds_k_embed(dt, di, T, H, dx, 0));
	from_dev(x, dx, (size_t)T * H * 4);
	dev_check_guard(dx, (size_t)T * H * 4);
	for (int t = 0; t < T; t++)
		for (int i = 0; i < H; i++)
			assert_true(x[t * H + i] == bf(tab[ids[t] * H + i]));
	cudaFree(dt);
	cudaFree(di);
	cudaFree(dx);
	free(tab);
	free(x);
}

static void test_embed(void **state)
{
	(void)state;
	embed_case(301, 72);
	embed_case(301, 70);
	embed_case(50, 4096);
}

/* parts > 1: the delta as that many partial sums (the fast path's split-K GEMM partials), added
 * in order before the residual add */
static void rmsnorm_case_parts(int n_x, int hidden, bool delta, bool gather, int parts)
{
	size_t nx = (size_t)n_x * hidden;
	float *x = malloc(nx * 4), *dl = malloc(nx * parts * 4), *xg = malloc(nx * 4);
	uint16_t *w = malloc((size_t)hidden * 2);
	fill_f32(x, nx, 11 + hidden, 3.0f);
	fill_f32(dl, nx * parts, 12 + hidden, 1.0f);
	fill_bf16(w, hidden, 13, 1.5f);
	int n_rows = gather ? (n_x + 1) / 2 : n_x;
	int32_t *rows = malloc((size_t)n_rows * 4);
	for (int r = 0; r < n_rows; r++)
		rows[r] = gather ? n_x - 1 - 2 * r : r;
	if (gather && n_rows > 1)
		rows[n_rows - 1] = -1; /* a padding row: zero output, x untouched */
	uint16_t *out = malloc((size_t)n_rows * hidden * 2), *twin = malloc((size_t)hidden * 2);
	gt_rmsnorm_parts_run(x, delta ? dl : NULL, parts, gather ? rows : NULL, w, n_x, n_rows,
	                     hidden, 1e-5f, out, xg);
	for (int r = 0; r < n_rows; r++) {
		if (rows[r] < 0) {
			for (int i = 0; i < hidden; i++)
				assert_int_equal(out[(size_t)r * hidden + i], 0);
			continue;
		}
		float *xr = x + (size_t)rows[r] * hidden;
		if (delta)
			for (int i = 0; i < hidden; i++) {
				float dv = dl[(size_t)rows[r] * hidden + i];
				for (int p = 1; p < parts; p++)
					dv += dl[(size_t)p * nx + (size_t)rows[r] * hidden + i];
				xr[i] = xr[i] + dv;
			}
		double ss = 0;
		for (int i = 0; i < hidden; i++)
			ss += (double)xr[i] * xr[i];
		float inv = (float)(1.0 / sqrt(ss / hidden + 1e-5));
		/* the kernel's own order (1024 threads for rows.cu's partials kernel): every
		 * form must give these bits */
		bool wide = (parts == 2 || parts == 4 || parts == 8) && hidden <= 4096;
		gt_rmsnorm_emulate(xr, w, hidden, 1e-5f, wide ? 1024 : 256, twin);
		for (int i = 0; i < hidden; i++) {
			uint16_t ref = ds_f32_to_bf16(xr[i] * inv * bf(w[i]));
			if (!bf16_close(ref, out[(size_t)r * hidden + i], 1))
				fail_msg("rmsnorm %dx%d row %d col %d: %g vs %g", n_x, hidden, r, i,
				         bf(ref), bf(out[(size_t)r * hidden + i]));
			if (twin[i] != out[(size_t)r * hidden + i])
				fail_msg(
				    "rmsnorm %dx%d row %d col %d: 0x%04x, the kernel's order gives "
				    "0x%04x",
				    n_x, hidden, r, i, out[(size_t)r * hidden + i], twin[i]);
		}
	}
	assert_memory_equal(x, xg, nx * 4); /* residual add is exact and lands in x */
	free(x);
	free(dl);
	free(xg);
	free(w);
	free(rows);
	free(out);
	free(twin);
}

static void rmsnorm_case(int n_x, int hidden, bool delta, bool gather)
{
	rmsnorm_case_parts(n_x, hidden, delta, gather, 1);
}

static void test_rmsnorm(void **state)
{
	(void)state;
	rmsnorm_case(1, 64, false, false);
	rmsnorm_case(7, 4096, true, false);
	rmsnorm_case(33, 1000, true, true);
	rmsnorm_case(5, 4097, false, true);
	/* the register form at 4, 8 and 16 elements a thread (above), and past 16 * 256
	 * elements the kernel's loop form */
	rmsnorm_case(4, 1500, true, false);
	rmsnorm_case(3, 9001, true, true);
	/* the loop form at the register form's sizes (DS_RMSNORM_LOOP=1): the same bits (the
	 * twin check) */
	assert_int_equal(setenv("DS_RMSNORM_LOOP", "1", 1), 0);
	rmsnorm_case(7, 4096, true, false);
	rmsnorm_case(33, 1000, true, true);
	assert_int_equal(unsetenv("DS_RMSNORM_LOOP"), 0);
	/* split-K partials: 2, 4 and 8 parts, both forms, with a gather */
	rmsnorm_case_parts(8, 4096, true, false, 2);
	rmsnorm_case_parts(5, 1000, true, true, 8);
	rmsnorm_case_parts(3, 9001, true, true, 4);
}

static void test_silu_mul(void **state)
{
	(void)state;
	int shapes[][2] = {{1, 160}, {3, 1001}, {17, 14336}};
	for (size_t s = 0; s < DS_ARRAY_LEN(shapes); s++) {
		int T = shapes[s][0], F = shapes[s][1];
		size_t n = (size_t)T * 2 * F;
		float *gu = malloc(n * 4);
		fill_f32(gu, n, 21 + s, 6.0f);
		float *dgu = to_dev(gu, n * 4);
		size_t on = (size_t)T * F * 2;
		uint16_t *dout = dev_alloc_guarded(on), *out = malloc(on);
		CK(ds_k_silu_mul(dgu, T, F, dout, 0));
		from_dev(out, dout, on);
		dev_check_guard(dout, on);
		for (int t = 0; t < T; t++)
			for (int i = 0; i < F; i++) {
				double g = gu[(size_t)t * 2 * F + i],
				       u = gu[(size_t)t * 2 * F + F + i];
				uint16_t ref = ds_f32_to_bf16((float)(g / (1.0 + exp(-g)) * u));
				if (!bf16_close(ref, out[(size_t)t * F + i], 1))
					fail_msg("silu_mul %dx%d at (%d, %d): %g vs %g", T, F, t, i,
					         bf(ref), bf(out[(size_t)t * F + i]));
			}
		cudaFree(dgu);
		cudaFree(dout);
		free(gu);
		free(out);
	}
}

/* ---- q/k/v epilogue with RoPE and the paged KV write ---- */

static void qkv_case(bool bias, bool qk_norm)
{
	struct ds_k_dims d = {
	    .n_head = 4, .n_kv = 2, .head_dim = 64, .block_size = 16, .n_blocks = 8, .eps = 1e-6f};
	int D = d.head_dim, half = D / 2, n_all = d.n_head + 2 * d.n_kv, max_pos = 128;
	int T = 6;
	int32_t pos[6] = {0, 1, 37, 5, -1, 100};
	int32_t seq[6] = {0, 0, 0, 1, 1, 1};
	int32_t bt_off[2] = {0, 3};
	int32_t bt[10] = {5, 2, 7, 1, 0, 3, 6, 4, 4, 4};
	size_t nq = (size_t)T * n_all * D;
	float *qkv = malloc(nq * 4);
	fill_f32(qkv, nq, 31, 2.0f);
	uint16_t b_h[512], qn[64], kn[64];
	fill_bf16(b_h, (size_t)n_all * D, 32, 0.5f);
	fill_bf16(qn, 64, 33, 1.2f);
	fill_bf16(kn, 64, 34, 1.2f);
	float *cs = malloc((size_t)max_pos * half * 2 * 4);
	for (int p = 0; p < max_pos; p++)
		for (int i = 0; i < half; i++) {
			double a = p * pow(10000.0, -2.0 * i / D);
			cs[(p * half + i) * 2] = (float)cos(a);
			cs[(p * half + i) * 2 + 1] = (float)sin(a);
		}
	size_t kv_n = (size_t)d.n_blocks * 2 * d.n_kv * d.block_size * D;
	uint16_t *kv = malloc(kv_n * 2), *kv_ref = malloc(kv_n * 2);
	fill_bf16(kv, kv_n, 35, 1.0f);
	memcpy(kv_ref, kv, kv_n * 2);
	uint16_t *q_ref = malloc((size_t)T * d.n_head * D * 2);
	for (int t = 0; t < T; t++)
		for (int h = 0; h < n_all; h++) {
			float v[64];
			for (int i = 0; i < D; i++) {
				v[i] = qkv[((size_t)t * n_all + h) * D + i];
				if (bias)
					v[i] = v[i] + bf(b_h[h * D + i]);
			}
			bool is_q = h < d.n_head, is_k = !is_q && h < d.n_head + d.n_kv;
			if (qk_norm && (is_q || is_k)) {
				double ss = 0;
				for (int i = 0; i < D; i++)
					ss += (double)v[i] * v[i];
				float inv = (float)(1.0 / sqrt(ss / D + d.eps));
				for (int i = 0; i < D; i++)
					v[i] = v[i] * inv * bf((is_q ? qn : kn)[i]);
			}
			uint16_t o[64];
			if ((is_q || is_k) && pos[t] >= 0) {
				for (int i = 0; i < half; i++) {
					float c = cs[(pos[t] * half + i) * 2],
					      s = cs[(pos[t] * half + i) * 2 + 1];
					o[i] = ds_f32_to_bf16(v[i] * c - v[i + half] * s);
					o[i + half] = ds_f32_to_bf16(v[i + half] * c + v[i] * s);
				}
			} else {
				for (int i = 0; i < D; i++)
					o[i] = pos[t] >= 0 ? ds_f32_to_bf16(v[i]) : 0;
			}
			if (is_q) {
				memcpy(q_ref + ((size_t)t * d.n_head + h) * D, o, (size_t)D * 2);
			} else if (pos[t] >= 0) {
				int blk = bt[bt_off[seq[t]] + pos[t] / d.block_size];
				int slot = is_k ? h - d.n_head : d.n_kv + (h - d.n_head - d.n_kv);
				size_t off = (((size_t)blk * 2 * d.n_kv + slot) * d.block_size +
				              pos[t] % d.block_size) *
				             D;
				memcpy(kv_ref + off, o, (size_t)D * 2);
			}
		}
	float *dqkv = to_dev(qkv, nq * 4), *dcs = to_dev(cs, (size_t)max_pos * half * 2 * 4);
	uint16_t *db = to_dev(b_h, sizeof(b_h)), *dqn = to_dev(qn, 128), *dkn = to_dev(kn, 128);
	int32_t *dpos = to_dev(pos, sizeof(pos)), *dseq = to_dev(seq, sizeof(seq));
	int32_t *doff = to_dev(bt_off, sizeof(bt_off)), *dbt = to_dev(bt, sizeof(bt));
	uint16_t *dkv = dev_alloc_guarded(kv_n * 2);
	CK(cudaMemcpy(dkv, kv, kv_n * 2, cudaMemcpyHostToDevice));
	size_t qn_b = (size_t)T * d.n_head * D * 2;
	uint16_t *dq = dev_alloc_guarded(qn_b);
	struct ds_k_tokmeta tm = {dpos, dseq, doff, dbt};
	CK(ds_k_qkv_rope(dqkv, bias ? db : NULL, qk_norm ? dqn : NULL, qk_norm ? dkn : NULL, dcs,
	                 tm, T, d, dq, dkv, 0));
	uint16_t *q_out = malloc(qn_b), *kv_out = malloc(kv_n * 2);
	from_dev(q_out, dq, qn_b);
	from_dev(kv_out, dkv, kv_n * 2);
	dev_check_guard(dq, qn_b);
	dev_check_guard(dkv, kv_n * 2);
	for (size_t i = 0; i < qn_b / 2; i++)
		if (!bf16_close(q_ref[i], q_out[i], 1))
			fail_msg("qkv_rope q[%zu] %g vs %g", i, bf(q_ref[i]), bf(q_out[i]));
	for (size_t i = 0; i < kv_n; i++)
		if (!bf16_close(kv_ref[i], kv_out[i], 1))
			fail_msg(
			    "qkv_rope kv[%zu] %g vs %g (untouched slots must keep their bytes)", i,
			    bf(kv_ref[i]), bf(kv_out[i]));
	void *fr[] = {dqkv, dcs, db, dqn, dkn, dpos, dseq, doff, dbt, dkv, dq};
	for (size_t i = 0; i < DS_ARRAY_LEN(fr); i++)
		cudaFree(fr[i]);
	free(qkv);
	free(cs);
	free(kv);
	free(kv_ref);
	free(q_ref);
	free(q_out);
	free(kv_out);
}

static void test_qkv_rope(void **state)
{
	(void)state;
	qkv_case(false, false);
	qkv_case(true, false);
	qkv_case(true, true);
}

/* ---- reference GEMM ---- */

typedef cudaError_t (*gemm_fn)(const uint16_t *, const uint16_t *, float *, int, int, int,
                               cudaStream_t);

static void gemm_case(gemm_fn gemm, int M, int N, int K)
{
	struct gt_gemm_case g;
	gt_gemm_case_init(&g, M, N, K, 41 + M, 42 + N);
	size_t na = (size_t)M * K, nc = (size_t)M * N;
	float *dC = dev_alloc_guarded(nc * 4), *C = g.C;
	CK(gemm(g.dA, g.dW, dC, M, N, K, 0));
	CK(cudaDeviceSynchronize());
	from_dev(C, dC, nc * 4);
	dev_check_guard(dC, nc * 4);
	gt_gemm_reference(g.A, g.W, M, N, K, true, g.ref, g.sabs);
	gt_gemm_check(C, g.ref, g.sabs, M, N, K, true, "gemm");
	/* invariance: each row alone (M = 1) and the rows reversed give the same bits */
	uint16_t *Ar = malloc(na * 2);
	for (int m = 0; m < M; m++)
		memcpy(Ar + (size_t)(M - 1 - m) * K, g.A + (size_t)m * K, (size_t)K * 2);
	uint16_t *dAr = to_dev(Ar, na * 2);
	float *dCr = dev_alloc_guarded(nc * 4), *Cr = malloc(nc * 4);
	CK(gemm(dAr, g.dW, dCr, M, N, K, 0));
	from_dev(Cr, dCr, nc * 4);
	for (int m = 0; m < M; m++)
		assert_memory_equal(C + (size_t)m * N, Cr + (size_t)(M - 1 - m) * N, (size_t)N * 4);
	int probe[3] = {0, M / 2, M - 1};
	float *row = malloc((size_t)N * 4);
	for (int i = 0; i < 3; i++) {
		CK(gemm(g.dA + (size_t)probe[i] * K, g.dW, dCr, 1, N, K, 0));
		from_dev(row, dCr, (size_t)N * 4);
		assert_memory_equal(row, C + (size_t)probe[i] * N, (size_t)N * 4);
	}
	cudaFree(dC);
	cudaFree(dAr);
	cudaFree(dCr);
	free(Ar);
	free(Cr);
	free(row);
	gt_gemm_case_free(&g);
}

static void test_gemm_ref(void **state)
{
	(void)state;
	CK(ds_k_gemm_ref_setup());
	CK(ds_k_gemm_mma_setup());
	gemm_fn fns[2] = {ds_k_gemm_ref, ds_k_gemm_mma};
	for (int f = 0; f < 2; f++) {
		gemm_case(fns[f], 1, 128, 64);
		gemm_case(fns[f], 3, 72, 40);
		gemm_case(fns[f], 17, 200, 136);
		gemm_case(fns[f], 130, 264, 512);
		gemm_case(fns[f], 257, 1000, 1032);
		gemm_case(fns[f], 64, 512, 4096);
		gemm_case(fns[f], 300, 384, 200);
	}
}

static void test_gemv(void **state)
{
	(void)state;
	int shapes[][2] = {{128, 64}, {72, 40}, {1000, 136}, {4096, 4104}, {333, 14336}};
	for (int M = 1; M <= DS_K_GEMV_MAX_M; M++)
		for (size_t s = 0; s < DS_ARRAY_LEN(shapes); s++) {
			int N = shapes[s][0], K = shapes[s][1];
			struct gt_gemm_case g;
			gt_gemm_case_init(&g, M, N, K, 71 + M, 72 + s);
			size_t nc = (size_t)M * N;
			float *dC = dev_alloc_guarded(nc * 4);
			CK(ds_k_gemv(g.dA, g.dW, dC, M, N, K, 0));
			from_dev(g.C, dC, nc * 4);
			dev_check_guard(dC, nc * 4);
			gt_gemm_reference(g.A, g.W, M, N, K, true, g.ref, g.sabs);
			gt_gemm_check(g.C, g.ref, g.sabs, M, N, K, true, "gemv");
			cudaFree(dC);
			gt_gemm_case_free(&g);
		}
}

/* ---- attention ---- */

struct attn_fix {
	struct ds_k_dims d;
	int T, n_seq;
	int32_t pos[16], seq[16], bt_off[4], bt[64];
	uint16_t *kv, *q;
	size_t kv_n, q_n;
};

static void attn_ref_cpu(const struct attn_fix *f, int t, int h, double *out)
{
	const struct ds_k_dims *d = &f->d;
	int D = d->head_dim, G = d->n_head / d->n_kv, kh = h / G, p = f->pos[t];
	const uint16_t *qv = f->q + ((size_t)t * d->n_head + h) * D;
	double *s = malloc((size_t)(p + 1) * sizeof(double)), m = -INFINITY, l = 0;
	for (int j = 0; j <= p; j++) {
		int blk = f->bt[f->bt_off[f->seq[t]] + j / d->block_size];
		const uint16_t *k =
		    f->kv +
		    (((size_t)blk * 2 * d->n_kv + kh) * d->block_size + j % d->block_size) * D;
		double a = 0;
		for (int i = 0; i < D; i++)
			a += (double)bf(qv[i]) * bf(k[i]);
		s[j] = a / sqrt((double)D);
		m = fmax(m, s[j]);
	}
	for (int i = 0; i < D; i++)
		out[i] = 0;
	for (int j = 0; j <= p; j++) {
		int blk = f->bt[f->bt_off[f->seq[t]] + j / d->block_size];
		const uint16_t *v =
		    f->kv + (((size_t)blk * 2 * d->n_kv + d->n_kv + kh) * d->block_size +
		             j % d->block_size) *
		                D;
		double e = exp(s[j] - m);
		l += e;
		for (int i = 0; i < D; i++)
			out[i] += e * bf(v[i]);
	}
	for (int i = 0; i < D; i++)
		out[i] /= l;
	free(s);
}

static void attn_case(int n_head, int n_kv, int D)
{
	struct attn_fix f;
	memset(&f, 0, sizeof(f));
	f.d = (struct ds_k_dims){n_head, n_kv, D, 16, 40, 1e-5f};
	/* seq 0: 1 position; seq 1: 70; seq 2: 400 (blocks shuffled) */
	int lens[3] = {1, 70, 400};
	int nb = 0;
	for (int s = 0; s < 3; s++) {
		f.bt_off[s] = nb;
		int need = (lens[s] + 15) / 16;
		for (int i = 0; i < need; i++, nb++)
			f.bt[nb] = (nb * 7 + 3) % f.d.n_blocks;
	}
	int rows[][2] = {{0, 0},   {1, 0},   {1, 63},  {1, 64},  {1, 69}, {2, 5},
	                 {2, 127}, {2, 128}, {2, 255}, {2, 399}, {0, -1}};
	f.T = (int)DS_ARRAY_LEN(rows);
	for (int t = 0; t < f.T; t++) {
		f.seq[t] = rows[t][0];
		f.pos[t] = rows[t][1];
	}
	f.kv_n = (size_t)f.d.n_blocks * 2 * n_kv * 16 * D;
	f.q_n = (size_t)f.T * n_head * D;
	f.kv = malloc(f.kv_n * 2);
	f.q = malloc(f.q_n * 2);
	fill_bf16(f.kv, f.kv_n, 51 + D, 1.0f);
	fill_bf16(f.q, f.q_n, 52 + D, 2.0f);
	uint16_t *dkv = to_dev(f.kv, f.kv_n * 2), *dq = to_dev(f.q, f.q_n * 2);
	int32_t *dpos = to_dev(f.pos, sizeof(f.pos)), *dseq = to_dev(f.seq, sizeof(f.seq));
	int32_t *doff = to_dev(f.bt_off, sizeof(f.bt_off)), *dbt = to_dev(f.bt, sizeof(f.bt));
	struct ds_k_tokmeta tm = {dpos, dseq, doff, dbt};
	size_t part_n = (size_t)f.T * n_head * 8 * (D + 2);
	float *dpart = NULL;
	CK(cudaMalloc((void **)&dpart, part_n * 4));
	CK(ds_k_attn_setup(f.d));
	size_t on = f.q_n * 2;
	uint16_t *dout = dev_alloc_guarded(on), *o_loop = malloc(on), *o_split = malloc(on);
	CK(ds_k_attn_ref(dq, dkv, tm, f.T, f.d, 0, dpart, dout, 0));
	from_dev(o_loop, dout, on);
	dev_check_guard(dout, on);
	CK(cudaMemset(dout, 0x7f, on));
	CK(ds_k_attn_ref(dq, dkv, tm, f.T, f.d, 399 / 64 + 1, dpart, dout, 0));
	from_dev(o_split, dout, on);
	dev_check_guard(dout, on);
	/* the reference's split changes the work distribution, never the bits */
	assert_memory_equal(o_loop, o_split, on);
	double ref[512];
	for (int t = 0; t < f.T; t++)
		for (int h = 0; h < n_head; h++) {
			const uint16_t *g = o_loop + ((size_t)t * n_head + h) * D;
			if (f.pos[t] < 0) {
				for (int i = 0; i < D; i++)
					assert_int_equal(g[i], 0);
				continue;
			}
			attn_ref_cpu(&f, t, h, ref);
			for (int i = 0; i < D; i++)
				if (!bf16_close(ds_f32_to_bf16((float)ref[i]), g[i], 2) &&
				    fabs(ref[i] - bf(g[i])) > 1e-3)
					fail_msg("attn ref t=%d h=%d i=%d: %g vs %g", t, h, i,
					         ref[i], bf(g[i]));
		}
	int splits[] = {1, 2, 7};
	uint16_t *o_fast = malloc(on);
	for (size_t s = 0; s < DS_ARRAY_LEN(splits); s++) {
		CK(cudaMemset(dout, 0x7f, on));
		CK(ds_k_attn_fast(dq, dkv, tm, f.T, f.d, splits[s], dpart, dout, 0));
		from_dev(o_fast, dout, on);
		dev_check_guard(dout, on);
		for (int t = 0; t < f.T; t++)
			for (int h = 0; h < n_head; h++) {
				const uint16_t *g = o_fast + ((size_t)t * n_head + h) * D;
				if (f.pos[t] < 0)
					continue;
				attn_ref_cpu(&f, t, h, ref);
				for (int i = 0; i < D; i++)
					if (!bf16_close(ds_f32_to_bf16((float)ref[i]), g[i], 2) &&
					    fabs(ref[i] - bf(g[i])) > 1e-3)
						fail_msg(
						    "attn fast split %d t=%d h=%d i=%d: %g vs %g",
						    splits[s], t, h, i, ref[i], bf(g[i]));
			}
	}
	void *fr[] = {dkv, dq, dpos, dseq, doff, dbt, dpart, dout};
	for (size_t i = 0; i < DS_ARRAY_LEN(fr); i++)
		cudaFree(fr[i]);
	free(f.kv);
	free(f.q);
	free(o_loop);
	free(o_split);
	free(o_fast);
}

static void test_attention(void **state)
{
	(void)state;
	attn_case(8, 2, 64);
	attn_case(4, 4, 128);
	attn_case(32, 8, 128);
	attn_case(4, 2, 16);
}

/* ---- sampling ---- */

/* Id i's Gumbel noise in row p, as the host sampler draws it (common/sample.c). */
static double gumbel_noise(const struct ds_k_sample_row *p, int i)
{
	return -log(-log(ds_hash_unit_open(ds_sample_key(p->seed, p->pos, i))));
}

static void sample_case(int vocab)
{
	/* the reference sampler's near ties (the last three rows, below) are not the fast path's
	 * cases */
	struct ds_k_sample_row sp[] = {
	    {0.0f, 0, 1.0f, 0, 7, 3},     {0.7f, 0, 1.0f, 0, 7, 4},
	    {1.0f, 0, 1.0f, 0, 99, 1000}, {1.0f, 1, 1.0f, 0, 5, 9},
	    {0.8f, 5, 1.0f, 0, 5, 10},    {1.2f, 50, 1.0f, 0, 6, 11},
	    {1.0f, 0, 0.9f, 0, 8, 12},    {0.6f, 0, 0.5f, 0, 8, 13},
	    {1.0f, 40, 0.8f, 0, 9, 14},   {1.0f, vocab, 1.0f, 0, 9, 15},
	    {2.0f, 0, 0.999f, 0, 10, 16}, {0.5f, 3, 0.3f, 0, 11, 17},
	    {1.0f, 0, 0.02f, 0, 12, 18},  {0.0f, 0, 1.0f, 0, 12, 19},
	    {1.0f, 7, 1.0f, 0, 13, 20},   {1.0f, 0, 0.7f, 0, 14, 21},
	    {1.0f, 0, 1.0f, 0, 21, 30},   {0.9f, 100, 1.0f, 0, 22, 31},
	    {0.7f, 0, 1.0f, 0, 23, 32},
	};
	int R = (int)DS_ARRAY_LEN(sp), R_fast = R - 3;
	size_t n = (size_t)R * vocab;
	float *L = malloc(n * 4);
	fill_f32(L, n, 61 + vocab, 4.0f);
	for (int r = 0; r < R; r++) {
		float *lr = L + (size_t)r * vocab;
		if (r % 3 == 0) { /* exact ties at the top */
			lr[vocab / 2] = 9.0f;
			lr[17] = 9.0f;
			lr[vocab - 1] = 9.0f;
		}
		if (r % 4 == 1) /* ties at a top-k cut */
			for (int i = 0; i < 12; i++)
				lr[(i * 37) % vocab] = 5.5f;
	}
	/* Rows R_fast, R_fast + 1: two ids far above the rest whose Gumbel-perturbed logits are
	 * within fp32 rounding of each other, in one thread of the reference sampler (ids 1024
	 * apart in its strided walk; adjacent in the filtered row's contiguous ranges), so its fp32
	 * brackets hold both and its fp64 pass decides. Row R_fast + 2: -inf logits (decided in
	 * fp64 on the spot, never taken). */
	for (int k = 0; k < 2 && vocab >= 4096; k++) {
		int r = R_fast + k, step = k == 0 ? 1024 : 1;
		float *lr = L + (size_t)r * vocab;
		double T = sp[r].temperature;
		int per = (vocab + 1023) / 1024; /* the filtered walk's range a thread */
		for (int i = k == 0 ? 300 : 2 * per;; i++) {
			if (k == 1 && i % per == per - 1)
				continue;
			double ni = gumbel_noise(&sp[r], i), nj = gumbel_noise(&sp[r], i + step);
			if (fabs(ni - nj) < 2.0) {
				lr[i] = 30.0f;
				lr[i + step] = (float)(T * (30.0 / T + ni - nj));
				break;
			}
		}
	}
	for (int i = 5; i < vocab; i += 97)
		L[(size_t)(R_fast + 2) * vocab + i] = -INFINITY;
	float *dL = to_dev(L, n * 4);
	struct ds_k_sample_row *dsp = to_dev(sp, sizeof(sp));
	size_t on = (size_t)R * sizeof(struct ds_k_sample_out);
	struct ds_k_sample_out *dout = dev_alloc_guarded(on), *out = malloc(on);
	size_t wsb = ds_k_sample_ws_bytes(R, vocab);
	void *ws = NULL;
	CK(cudaMalloc(&ws, wsb));
	CK(cudaMemset(ws, 0, wsb));
	CK(ds_k_sample(dL, R, vocab, dsp, dout, 0));
	from_dev(out, dout, on);
	dev_check_guard(dout, on);
	struct ds_k_sample_out *dsplit = dev_alloc_guarded(on), *split = malloc(on),
	                       *split2 = malloc(on);
	/* the reference sampler's bits are each row's alone: the same bytes launched again, and
	 * for rows 3.. launched as a batch of their own (other row indices, other neighbours) */
	CK(ds_k_sample(dL, R, vocab, dsp, dsplit, 0));
	from_dev(split, dsplit, on);
	assert_memory_equal(split, out, on);
	CK(ds_k_sample(dL + (size_t)3 * vocab, R - 3, vocab, dsp + 3, dsplit, 0));
	from_dev(split, dsplit, (size_t)(R - 3) * sizeof(*split));
	assert_memory_equal(split, out + 3, (size_t)(R - 3) * sizeof(*split));
	/* the fast path's sampler (ranges of a row in nb blocks, fp32 Gumbel noise and top-p
	 * weights) on the same workspace, launch after launch at other row and block counts: the
	 * same tokens (a temperature row could differ where two perturbed logits, or a top-p cut's
	 * mass and its target, are within fp32 rounding; none of these rows is such a case) and
	 * margins as the reference one, logprobs within rounding, and its counters back at zero (a
	 * repeated launch gives the first one's bits; counters that moved with the rows or the
	 * block count would land on an earlier launch's parts) */
	int nmax = ds_k_sample_split_blocks(vocab);
	const struct {
		int rows, nb;
	} runs[] = {{R, nmax}, {5, nmax}, {R, DS_MIN(3, nmax)}, {R - 1, 1}, {R, nmax}};
	for (size_t k = 0; k < DS_ARRAY_LEN(runs); k++) {
		int rows = runs[k].rows, nb = runs[k].nb;
		size_t rb = (size_t)rows * sizeof(struct ds_k_sample_out);
		CK(ds_k_sample_split_pdl(dL, rows, vocab, nb, dsp, dsplit, ws, R, 0, 0));
		from_dev(split, dsplit, rb);
		CK(ds_k_sample_split_pdl(dL, rows, vocab, nb, dsp, dsplit, ws, R, 0, 0));
		from_dev(split2, dsplit, rb);
		assert_memory_equal(split, split2, rb);
		for (int r = 0; r < DS_MIN(rows, R_fast); r++) {
			assert_int_equal(split[r].token, out[r].token);
			assert_true(split[r].margin == out[r].margin);
			assert_true(fabsf(split[r].logprob - out[r].logprob) < 1e-5f);
		}
	}
	dev_check_guard(dsplit, on);
	assert_int_equal(ds_k_sample_split_pdl(dL, R, vocab, nmax + 1, dsp, dsplit, ws, R, 0, 0),
	                 cudaErrorInvalidValue);
	if (nmax > 1)
		assert_int_equal(
		    ds_k_sample_split_pdl(dL, R, vocab, nmax, dsp, dsplit, ws, R - 1, 0, 0),
		    cudaErrorInvalidValue);
	print_message("sample vocab %d: split over up to %d blocks, same tokens and margins\n",
	              vocab, nmax);
	cudaFree(ws);
	cudaFree(dsplit);
	free(split);
	free(split2);
	void *scratch = malloc(ds_sample_scratch_size(vocab));
	for (int r = 0; r < R; r++) {
		struct ds_sample_params p = {sp[r].temperature, sp[r].top_k, sp[r].top_p,
		                             sp[r].seed};
		struct ds_sample_result want;
		ds_sample(L + (size_t)r * vocab, vocab, &p, sp[r].pos, scratch, &want);
		if (want.token != out[r].token)
			fail_msg("sample vocab %d row %d (T=%g k=%d p=%g): host %d device %d",
			         vocab, r, p.temperature, p.top_k, p.top_p, want.token,
			         out[r].token);
		assert_true(want.margin == out[r].margin);
		assert_true(fabsf(want.logprob - out[r].logprob) < 1e-4f);
	}
	cudaFree(dL);
	cudaFree(dsp);
	cudaFree(dout);
	free(L);
	free(out);
	free(scratch);
}

static void test_sample(void **state)
{
	(void)state;
	sample_case(259);
	sample_case(4096);
	sample_case(128256);
}

/* The sampler's top-k and top-p searches (a few key bits a pass) find the keys the
 * one-bit-a-pass searches find (ds_k_sample_search_check), on rows of random logits, of logits
 * on a coarse grid (many equal keys at every cut), of one value, and with -inf entries, at
 * temperatures 0.5-3 and cuts from one id to almost all. */
static void search_case(int vocab)
{
	enum { R = 96 };
	size_t n = (size_t)R * vocab;
	float *L = malloc(n * 4);
	fill_f32(L, n, 71 + vocab, 4.0f);
	struct ds_k_sample_row sp[R];
	const int ks[] = {0, 1, 2, 7, 50, 1000, vocab - 1};
	const float ps[] = {1.0f, 0.02f, 0.3f, 0.9f, 0.999f}, ts[] = {0.5f, 1.0f, 3.0f};
	for (int r = 0; r < R; r++) {
		float *lr = L + (size_t)r * vocab;
		if (r % 4 == 1) /* a coarse grid: ties everywhere */
			for (int i = 0; i < vocab; i++)
				lr[i] = floorf(lr[i] * 2.0f) / 2.0f;
		if (r % 8 == 2) /* one value */
			for (int i = 0; i < vocab; i++)
				lr[i] = 1.25f;
		if (r % 8 == 3) /* masked ids */
			for (int i = 0; i < vocab; i += 3)
				lr[i] = -INFINITY;
		struct ds_k_sample_row row = {ts[r % 3], ks[(r / 3) % 7], ps[(r / 2) % 5],
		                              0,         (uint64_t)r,     r};
		if (row.top_k == 0 && row.top_p >= 1.0f)
			row.top_p = 0.5f;
		sp[r] = row;
	}
	float *dL = to_dev(L, n * 4);
	struct ds_k_sample_row *dsp = to_dev(sp, sizeof(sp));
	uint32_t out[R * 4], *dout = dev_alloc_guarded(sizeof(out));
	for (int f32 = 0; f32 < 2; f32++) {
		CK(ds_k_sample_search_check(dL, R, vocab, dsp, f32, dout, 0));
		from_dev(out, dout, sizeof(out));
		dev_check_guard(dout, sizeof(out));
		int nk = 0, np = 0;
		for (int r = 0; r < R; r++) {
			if (out[4 * r] != out[4 * r + 1] || out[4 * r + 2] != out[4 * r + 3])
				fail_msg(
				    "vocab %d row %d (T=%g k=%d p=%g, %s weights): top-k key %08x "
				    "vs %08x, top-p cut %08x vs %08x",
				    vocab, r, sp[r].temperature, sp[r].top_k, sp[r].top_p,
				    f32 ? "fp32" : "fp64", out[4 * r], out[4 * r + 1],
				    out[4 * r + 2], out[4 * r + 3]);
			nk += out[4 * r] != 0;
			np += out[4 * r + 2] != 0;
		}
		print_message("sample searches vocab %d, %s weights: %d top-k keys and %d top-p "
		              "cuts equal the bitwise searches'\n",
		              vocab, f32 ? "fp32" : "fp64", nk, np);
		assert_true(nk >= R / 2 && np >= R / 3);
	}
	cudaFree(dL);
	cudaFree(dsp);
	cudaFree(dout);
	free(L);
}

static void test_sample_search(void **state)
{
	(void)state;
	search_case(259);
	search_case(4096);
	search_case(128256);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_synth_matches_host),
	    cmocka_unit_test(test_embed),
	    cmocka_unit_test(test_rmsnorm),
	    cmocka_unit_test(test_silu_mul),
	    cmocka_unit_test(test_qkv_rope),
	    cmocka_unit_test(test_gemm_ref),
	    cmocka_unit_test(test_gemv),
	    cmocka_unit_test(test_attention),
	    cmocka_unit_test(test_sample),
	    cmocka_unit_test(test_sample_search),
	};
	return cmocka_run_group_tests_name("gpu_kernels", tests, NULL, NULL);
}
