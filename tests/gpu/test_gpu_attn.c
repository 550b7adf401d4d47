/* test_gpu_attn.c - the tensor-core reference attention (kernels/attn_mma.cu): accuracy against
 * a CPU double reference and bit invariance (memcmp) of a row's output across passes.
 *
 * Fixture: four sequences of random KV (never zeros) in paged blocks of 16 positions placed in
 * scrambled order; a query row is (sequence, position) and its q is a pure function of that
 * pair, so the same row can be put in passes of any shape. Accuracy: every element must lie
 * within a bound derived from the algorithm, not a loose constant: P is rounded to bf16
 * (relative error <= 2^-8 per weight), which moves the output by at most
 * 2^-8 * sum_j w_j |v_j - out| (x 1.02 for exp2 and score errors), plus the bf16 rounding of
 * the output (<= 2^-8 |out|), plus 1e-4 for the fp32 accumulation on tensor cores (truncating
 * adds; a misplaced row or position errs by ~0.1). Invariance: a verify window of 32 rows
 * equals each row computed alone (T = 1) and the same rows inside bigger mixed passes at other
 * places; a prefill of 367 rows equals its chunks 17 + 100 + 250; rows of a pass with more
 * groups than CTAs equal the rows alone. Every pass runs walked and split (tiles spread over
 * CTAs, partials combined) and in auto mode, compared by memcmp; a long-context test (8192)
 * does the same for decode rows, a batch, a window and a prefill chunk, also on the grid a
 * graph captured for a larger capacity uses. tests/gpu/test_attn_mma_emu.cc (unit suite) runs the
 * same kernel source on the CPU through emulated warp primitives. */
#include "gpu_util.h"
#include "kernels.h"

#define BS 16
#define NSEQ 5
#define NBLK 1031 /* prime: block i of the fixture lives in physical block (7 i + 3) % 1031 */
#define MAXT 128 /* rows per pass (the prefill test uses its own arrays) */

static const int seq_len[NSEQ] = {3, 130, 1001, 600, 8200};
#define LONG_TOP 8199 /* the last position of sequence 4 */

struct fix {
	struct ds_k_dims d;
	uint16_t *kv; /* host copy, (NBLK, 2, n_kv, BS, D) */
	size_t kv_n;
	int32_t bt_off[NSEQ], bt[NBLK];
	uint16_t *dkv;
	int32_t *dbt_off, *dbt;
	float q_amp;
	int n_sm; /* the device's SMs (ds_k_attn_ref_mma_occ) */
};

/* a pass: rows (seq, pos); pos < 0 is a padding row */
struct row {
	int seq, pos;
};

static uint16_t q_val(const struct fix *f, int seq, int pos, int h, int i)
{
	uint64_t k =
	    (((uint64_t)seq * 4096 + (uint64_t)pos) * (uint64_t)f->d.n_head + (uint64_t)h) *
	        (uint64_t)f->d.head_dim +
	    (uint64_t)i;
	return ds_f32_to_bf16(rnd(77 + (uint64_t)f->d.head_dim, k, f->q_amp));
}

static const uint16_t *kv_at(const struct fix *f, int seq, int pos, int kh, int v)
{
	const struct ds_k_dims *d = &f->d;
	int blk = f->bt[f->bt_off[seq] + pos / BS];
	return f->kv + (((size_t)blk * 2 + (size_t)v) * d->n_kv + (size_t)kh) * BS * d->head_dim +
	       (size_t)(pos % BS) * d->head_dim;
}

static void fix_init(struct fix *f, int n_head, int n_kv, int D)
{
	memset(f, 0, sizeof(*f));
	f->d = (struct ds_k_dims){n_head, n_kv, D, BS, NBLK, 1e-5f};
	f->q_amp = 3.0f;
	int nb = 0;
	for (int s = 0; s < NSEQ; s++) {
		f->bt_off[s] = nb;
		for (int i = 0; i < (seq_len[s] + BS - 1) / BS; i++, nb++)
			f->bt[nb] = (nb * 7 + 3) % NBLK;
	}
	assert_true(nb <= NBLK);
	f->kv_n = (size_t)NBLK * 2 * n_kv * BS * D;
	f->kv = malloc(f->kv_n * 2);
	fill_bf16(f->kv, f->kv_n, 91 + (uint64_t)D, 1.0f);
	f->dkv = to_dev(f->kv, f->kv_n * 2);
	f->dbt_off = to_dev(f->bt_off, sizeof(f->bt_off));
	f->dbt = to_dev(f->bt, sizeof(f->bt));
	assert_true(ds_k_attn_ref_mma_supported(f->d));
	CK(ds_k_attn_ref_mma_setup(f->d));
	int dev = 0;
	CK(cudaGetDevice(&dev));
	CK(cudaDeviceGetAttribute(&f->n_sm, cudaDevAttrMultiProcessorCount, dev));
}

static void fix_free(struct fix *f)
{
	cudaFree(f->dkv);
	cudaFree(f->dbt_off);
	cudaFree(f->dbt);
	free(f->kv);
}

/* Runs the kernel on a pass of T rows; returns the host output (T, n_head, D) bf16. Checks the
 * guards after the output and the partials and that padding rows are zero. mode -2: the
 * walk-only API (ds_k_attn_ref_mma_plan, ds_k_attn_ref_mma); else ds_k_attn_ref_mma_plan_split
 * with that mode (0 walk, 1 split, -1 auto) and ds_k_attn_ref_mma_split with grid capacity top
 * (0: the pass's largest position) and the combine kernel; occ: the kernel build (2 or 3 CTAs
 * an SM), 0: the one ds_k_attn_ref_mma_occ picks. */
static uint16_t *run_mode(const struct fix *f, const struct row *rows, int T, int mode, int top,
                          int occ)
{
	const struct ds_k_dims *d = &f->d;
	int H = d->n_head, D = d->head_dim;
	size_t qn = (size_t)T * H * D, slots = 0;
	int32_t *pos = malloc((size_t)T * 4), *seq = malloc((size_t)T * 4);
	uint16_t *q = malloc(qn * 2), *out = malloc(qn * 2);
	int maxp = 0;
	for (int t = 0; t < T; t++) {
		pos[t] = rows[t].pos;
		seq[t] = rows[t].seq;
		maxp = rows[t].pos > maxp ? rows[t].pos : maxp;
		slots += rows[t].pos < 0 ? 0 : (size_t)rows[t].pos / DS_K_ATTN_TILE + 1;
		for (int h = 0; h < H; h++)
			for (int i = 0; i < D; i++)
				q[((size_t)t * H + h) * D + i] =
				    rows[t].pos < 0 ? ds_f32_to_bf16(0.25f)
				                    : q_val(f, rows[t].seq, rows[t].pos, h, i);
	}
	size_t pn = slots * (size_t)H * (size_t)(D + 2) * sizeof(float);
	int32_t *plan = malloc(DS_K_ATTN_MMA_PLAN_INTS(T) * 4);
	int ng = mode == -2 ? ds_k_attn_ref_mma_plan(pos, seq, T, *d, plan)
	                    : ds_k_attn_ref_mma_plan_split(pos, seq, T, *d, pn / sizeof(float),
	                                                   mode, plan);
	assert_true(ng >= 1 && ng <= T && plan[0] == ng);
	if (mode == 0 || mode == 1)
		assert_int_equal(plan[1], mode);
	int32_t *dpos = to_dev(pos, (size_t)T * 4), *dseq = to_dev(seq, (size_t)T * 4);
	int32_t *dplan = to_dev(plan, DS_K_ATTN_MMA_PLAN_INTS(T) * 4);
	uint16_t *dq = to_dev(q, qn * 2), *dout = dev_alloc_guarded(qn * 2);
	float *dpart = dev_alloc_guarded(pn);
	struct ds_k_tokmeta tm = {dpos, dseq, f->dbt_off, f->dbt};
	if (!occ)
		occ = ds_k_attn_ref_mma_occ(plan, T, *d,
		                            mode == -2 ? -1
		                            : top      ? top
		                                       : maxp,
		                            f->n_sm);
	assert_true(occ == 2 || occ == 3);
	if (mode == -2)
		CK(ds_k_attn_ref_mma(dq, f->dkv, tm, dplan, T, *d, occ, dout, 0));
	else
		CK(ds_k_attn_ref_mma_split(dq, f->dkv, tm, dplan, T, *d, top ? top : maxp, occ,
		                           dpart, true, dout, 0));
	CK(cudaDeviceSynchronize());
	from_dev(out, dout, qn * 2);
	dev_check_guard(dout, qn * 2);
	dev_check_guard(dpart, pn);
	for (int t = 0; t < T; t++)
		if (rows[t].pos < 0)
			for (size_t i = 0; i < (size_t)H * D; i++)
				if (out[(size_t)t * H * D + i] != 0)
					fail_msg("padding row %d element %zu not zero", t, i);
	cudaFree(dpos);
	cudaFree(dseq);
	cudaFree(dplan);
	free(plan);
	cudaFree(dq);
	cudaFree(dout);
	cudaFree(dpart);
	free(pos);
	free(seq);
	free(q);
	return out;
}

/* The pass walked (walk-only API, the 2-CTA build), then walked on the 3-CTA build, split and
 * in auto mode on both: the same bytes (memcmp). */
static uint16_t *run_pass(const struct fix *f, const struct row *rows, int T)
{
	uint16_t *out = run_mode(f, rows, T, -2, 0, 2);
	size_t n = (size_t)T * f->d.n_head * f->d.head_dim * 2;
	struct {
		int mode, occ;
	} runs[] = {{-2, 3}, {1, 2}, {1, 3}, {-1, 2}, {-1, 3}};
	for (size_t m = 0; m < DS_ARRAY_LEN(runs); m++) {
		uint16_t *o = run_mode(f, rows, T, runs[m].mode, 0, runs[m].occ);
		if (memcmp(out, o, n) != 0)
			fail_msg(
			    "D=%d G=%d T=%d: mode %d on the %d-CTA build differs from the walk",
			    f->d.head_dim, f->d.n_head / f->d.n_kv, T, runs[m].mode, runs[m].occ);
		free(o);
	}
	return out;
}

/* out[i] = softmax(q k^T / sqrt(D)) V over positions 0..pos, in double; dev[i] = sum_j w_j
 * |v_j[i] - out[i]| (what bf16 rounding of the weights can move out[i] by, times 2^-8). */
static void ref_row(const struct fix *f, int seq, int pos, int h, double *out, double *dev)
{
	int D = f->d.head_dim, kh = h / (f->d.n_head / f->d.n_kv);
	double *s = malloc((size_t)(pos + 1) * sizeof(double)), m = -INFINITY, l = 0;
	double *qv = malloc((size_t)D * sizeof(double));
	for (int i = 0; i < D; i++)
		qv[i] = bf(q_val(f, seq, pos, h, i));
	for (int j = 0; j <= pos; j++) {
		const uint16_t *k = kv_at(f, seq, j, kh, 0);
		double a = 0;
		for (int i = 0; i < D; i++)
			a += qv[i] * bf(k[i]);
		s[j] = a / sqrt((double)D);
		m = fmax(m, s[j]);
	}
	for (int j = 0; j <= pos; j++) {
		s[j] = exp(s[j] - m);
		l += s[j];
	}
	for (int i = 0; i < D; i++) {
		out[i] = 0;
		dev[i] = 0;
	}
	for (int j = 0; j <= pos; j++) {
		const uint16_t *v = kv_at(f, seq, j, kh, 1);
		for (int i = 0; i < D; i++)
			out[i] += s[j] / l * bf(v[i]);
	}
	for (int j = 0; j <= pos; j++) {
		const uint16_t *v = kv_at(f, seq, j, kh, 1);
		for (int i = 0; i < D; i++)
			dev[i] += s[j] / l * fabs(bf(v[i]) - out[i]);
	}
	free(qv);
	free(s);
}

/* Every valid row of out against the double reference; returns the largest error / bound. */
static double check_rows(const struct fix *f, const struct row *rows, int T, const uint16_t *out)
{
	int H = f->d.n_head, D = f->d.head_dim;
	double *ref = malloc((size_t)D * sizeof(double)), *dev = malloc((size_t)D * sizeof(double));
	double worst = 0;
	for (int t = 0; t < T; t++) {
		if (rows[t].pos < 0)
			continue;
		for (int h = 0; h < H; h++) {
			ref_row(f, rows[t].seq, rows[t].pos, h, ref, dev);
			const uint16_t *g = out + ((size_t)t * H + h) * D;
			for (int i = 0; i < D; i++) {
				double bound =
				    1.02 * ldexp(dev[i], -8) + ldexp(fabs(ref[i]), -8) + 1e-4;
				double e = fabs(bf(g[i]) - ref[i]);
				if (!(e <= bound))
					fail_msg("D=%d G=%d row %d (seq %d pos %d) head %d [%d]: "
					         "%.6f vs "
					         "%.6f, error %.3g > bound %.3g",
					         D, H / f->d.n_kv, t, rows[t].seq, rows[t].pos, h,
					         i, bf(g[i]), ref[i], e, bound);
				worst = fmax(worst, e / bound);
			}
		}
	}
	free(ref);
	free(dev);
	return worst;
}

static int add_run(struct row *rows, int T, int seq, int pos0, int n)
{
	for (int i = 0; i < n; i++)
		rows[T + i] = (struct row){seq, pos0 + i};
	return T + n;
}

static const int cfgs[][3] = {
    {9, 3, 64}, {8, 2, 64}, {6, 2, 128}, {16, 4, 128}, {32, 8, 128}, {4, 4, 64},
};

/* ---- accuracy ---- */

static void test_attn_mma_accuracy(void **state)
{
	(void)state;
	for (size_t c = 0; c < DS_ARRAY_LEN(cfgs); c++) {
		struct fix f;
		fix_init(&f, cfgs[c][0], cfgs[c][1], cfgs[c][2]);
		struct row rows[MAXT];
		int T = 0;
		T = add_run(rows, T, 0, 0, 3);    /* positions 0, 1, 2 */
		T = add_run(rows, T, 1, 60, 11);  /* 60..70: 63, 64, 65 cross a tile */
		T = add_run(rows, T, 2, 1000, 1); /* a long context alone */
		rows[T++] = (struct row){0, -1};  /* padding */
		T = add_run(rows, T, 3, 500, 32); /* a verify window across 512 */
		T = add_run(rows, T, 1, 127, 3);
		T = add_run(rows, T, 2, 999, 1); /* the same sequence, not consecutive */
		T = add_run(rows, T, 0, 1, 1);
		rows[T++] = (struct row){3, -1};
		uint16_t *out = run_pass(&f, rows, T);
		double w = check_rows(&f, rows, T, out);
		printf("attn_mma n_head %d n_kv %d D %d: %d rows, worst error / bound %.3f\n",
		       f.d.n_head, f.d.n_kv, f.d.head_dim, T, w);
		free(out);
		fix_free(&f);
	}
}

/* ---- invariance ---- */

static void expect_rows_equal(const struct fix *f, const uint16_t *a, int ra, const uint16_t *b,
                              int rb, int n, const char *what)
{
	size_t w = (size_t)f->d.n_head * f->d.head_dim;
	for (int i = 0; i < n; i++)
		if (memcmp(a + (ra + i) * w, b + (rb + i) * w, w * 2) != 0)
			fail_msg("D=%d G=%d: %s: row %d differs", f->d.head_dim,
			         f->d.n_head / f->d.n_kv, what, i);
}

static void test_attn_mma_window_invariance(void **state)
{
	(void)state;
	for (size_t c = 0; c < DS_ARRAY_LEN(cfgs); c++) {
		struct fix f;
		fix_init(&f, cfgs[c][0], cfgs[c][1], cfgs[c][2]);
		int W = 32, p0 = 500;
		struct row win[32];
		add_run(win, 0, 3, p0, W);
		uint16_t *ow = run_pass(&f, win, W);
		check_rows(&f, win, W, ow);
		/* each row alone (decode, T = 1) */
		for (int i = 0; i < W; i++) {
			uint16_t *o1 = run_pass(&f, win + i, 1);
			expect_rows_equal(&f, ow, i, o1, 0, 1, "window row vs the row alone");
			free(o1);
		}
		/* inside bigger mixed passes, at other places, with other windows of the same
		 * sequence overlapping it and padding rows */
		int shifts[] = {0, 1, 5, 13};
		for (size_t s = 0; s < DS_ARRAY_LEN(shifts); s++) {
			struct row rows[MAXT];
			int T = 0;
			T = add_run(rows, T, 0, 0, 3);
			rows[T++] = (struct row){0, -1};
			T = add_run(rows, T, 1, 100, shifts[s]);
			T = add_run(rows, T, 3, p0 - shifts[s], shifts[s]); /* ends where the window
			                                                        starts: a group may
			                                                        join across */
			int at = T;
			T = add_run(rows, T, 3, p0, W);
			T = add_run(rows, T, 3, p0 + W, 7); /* continues the window */
			T = add_run(rows, T, 2, 1000, 1);
			T = add_run(rows, T, 1, 101, 3);
			uint16_t *om = run_pass(&f, rows, T);
			expect_rows_equal(&f, ow, 0, om, at, W, "window vs inside a mixed pass");
			free(om);
		}
		/* the window cut in two passes at odd places */
		int cut = 11;
		uint16_t *oa = run_pass(&f, win, cut), *ob = run_pass(&f, win + cut, W - cut);
		expect_rows_equal(&f, ow, 0, oa, 0, cut, "window vs its first part");
		expect_rows_equal(&f, ow, cut, ob, 0, W - cut, "window vs its second part");
		free(oa);
		free(ob);
		free(ow);
		fix_free(&f);
	}
}

static void test_attn_mma_prefill_chunks(void **state)
{
	(void)state;
	for (size_t c = 0; c < DS_ARRAY_LEN(cfgs); c++) {
		struct fix f;
		fix_init(&f, cfgs[c][0], cfgs[c][1], cfgs[c][2]);
		int N = 367, chunks[] = {17, 100, 250};
		struct row *rows = malloc((size_t)N * sizeof(*rows));
		add_run(rows, 0, 3, 0, N);
		uint16_t *whole = run_pass(&f, rows, N);
		/* a sample of rows against the double reference (the tile edges among them) */
		int sample[] = {0, 1, 15, 16, 63, 64, 65, 127, 128, 200, 366};
		for (size_t i = 0; i < DS_ARRAY_LEN(sample); i++) {
			size_t w = (size_t)f.d.n_head * f.d.head_dim;
			check_rows(&f, rows + sample[i], 1, whole + sample[i] * w);
		}
		int at = 0;
		for (size_t k = 0; k < DS_ARRAY_LEN(chunks); k++) {
			uint16_t *oc = run_pass(&f, rows + at, chunks[k]);
			expect_rows_equal(&f, whole, at, oc, 0, chunks[k],
			                  "prefill chunk vs whole");
			free(oc);
			at += chunks[k];
		}
		assert_int_equal(at, N);
		free(whole);
		free(rows);
		fix_free(&f);
	}
}

/* More single-row groups than the grid has CTAs per KV head for n_kv = 8 (64): CTAs take
 * several groups in turn; each row must equal the row alone. */
static void test_attn_mma_many_groups(void **state)
{
	(void)state;
	for (size_t c = 0; c < DS_ARRAY_LEN(cfgs); c++) {
		struct fix f;
		fix_init(&f, cfgs[c][0], cfgs[c][1], cfgs[c][2]);
		int N = 150;
		struct row *rows = malloc((size_t)N * sizeof(*rows));
		for (int i = 0; i < N; i++)
			rows[i] = (struct row){2 + (i % 3 == 0), 3 * i}; /* seqs 2 and 3, gaps */
		uint16_t *all = run_pass(&f, rows, N);
		size_t w = (size_t)f.d.n_head * f.d.head_dim;
		for (int i = 0; i < N; i += 7) {
			uint16_t *o1 = run_pass(&f, rows + i, 1);
			expect_rows_equal(&f, all, i, o1, 0, 1, "many groups: row vs alone");
			check_rows(&f, rows + i, 1, all + i * w);
			free(o1);
		}
		free(all);
		free(rows);
		fix_free(&f);
	}
}

/* Long context (sequence 4: 8200 positions, 129 tiles): decode rows alone and in a batch,
 * a window of 32 and a prefill chunk, each walked and split (run_pass), split also on the
 * grid of a graph captured for capacity LONG_TOP; rows equal across those passes. */
static void test_attn_mma_long_split(void **state)
{
	(void)state;
	for (size_t c = 0; c < DS_ARRAY_LEN(cfgs); c++) {
		struct fix f;
		fix_init(&f, cfgs[c][0], cfgs[c][1], cfgs[c][2]);
		size_t w = (size_t)f.d.n_head * f.d.head_dim;
		struct row dec = {4, 8191};
		uint16_t *od = run_pass(&f, &dec, 1);
		check_rows(&f, &dec, 1, od);
		struct row bat[8] = {{4, 8100}, {2, 1000}, {3, 599}, {0, -1},
		                     {4, 8191}, {1, 64},   {0, 2},   {4, 8199}};
		uint16_t *ob = run_pass(&f, bat, 8);
		expect_rows_equal(&f, od, 0, ob, 4, 1, "long decode row alone vs in a batch");
		uint16_t *oc = run_mode(&f, bat, 8, -1, LONG_TOP * 2, 0);
		expect_rows_equal(&f, ob, 0, oc, 0, 8, "decode batch vs on a graph's grid");
		free(oc);
		check_rows(&f, bat, 8, ob);
		struct row win[32];
		add_run(win, 0, 4, 8168, 32); /* 8168 .. 8199 */
		uint16_t *ow = run_pass(&f, win, 32);
		expect_rows_equal(&f, ob, 7, ow, 31, 1, "window row vs in a decode batch");
		expect_rows_equal(&f, od, 0, ow, 8191 - 8168, 1, "window row vs alone");
		check_rows(&f, win + 31, 1, ow + 31 * w);
		struct row *pre = malloc(100 * sizeof(*pre));
		add_run(pre, 0, 4, 8100, 100); /* 8100 .. 8199 */
		uint16_t *op = run_pass(&f, pre, 100);
		expect_rows_equal(&f, op, 68, ow, 0, 32, "prefill chunk vs window");
		expect_rows_equal(&f, op, 0, ob, 0, 1, "prefill chunk row vs in a decode batch");
		uint16_t *og = run_mode(&f, pre, 100, 1, LONG_TOP, 0);
		expect_rows_equal(&f, op, 0, og, 0, 100, "prefill chunk split on a graph's grid");
		free(og);
		free(pre);
		free(op);
		free(ow);
		free(ob);
		free(od);
		fix_free(&f);
	}
}

static void test_attn_mma_unsupported(void **state)
{
	(void)state;
	struct ds_k_dims d = {8, 2, 96, BS, NBLK, 1e-5f};
	assert_false(ds_k_attn_ref_mma_supported(d));
	struct ds_k_tokmeta tm = {NULL, NULL, NULL, NULL};
	int32_t plan[7] = {1, 0, 1, 0, 1, 0, 0};
	assert_int_equal(ds_k_attn_ref_mma(NULL, NULL, tm, plan, 1, d, 2, NULL, 0),
	                 cudaErrorInvalidValue);
	assert_int_equal(
	    ds_k_attn_ref_mma_split(NULL, NULL, tm, plan, 1, d, 0, 2, NULL, true, NULL, 0),
	    cudaErrorInvalidValue);
	d.head_dim = 64; /* supported, but no build for 4 CTAs an SM */
	assert_true(ds_k_attn_ref_mma_supported(d));
	assert_int_equal(ds_k_attn_ref_mma(NULL, NULL, tm, plan, 1, d, 4, NULL, 0),
	                 cudaErrorInvalidValue);
	assert_int_equal(
	    ds_k_attn_ref_mma_split(NULL, NULL, tm, plan, 1, d, 0, 4, NULL, false, NULL, 0),
	    cudaErrorInvalidValue);
	d.n_head = 7; /* not a multiple of n_kv */
	assert_false(ds_k_attn_ref_mma_supported(d));
	assert_int_equal(ds_k_attn_ref_mma_setup(d), cudaErrorInvalidValue);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_attn_mma_accuracy),
	    cmocka_unit_test(test_attn_mma_window_invariance),
	    cmocka_unit_test(test_attn_mma_prefill_chunks),
	    cmocka_unit_test(test_attn_mma_many_groups),
	    cmocka_unit_test(test_attn_mma_long_split),
	    cmocka_unit_test(test_attn_mma_unsupported),
	};
	return cmocka_run_group_tests_name("gpu_attn", tests, NULL, NULL);
}
