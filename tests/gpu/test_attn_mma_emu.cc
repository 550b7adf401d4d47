/* test_attn_mma_emu.cc - runs kernels/attn_mma.cu's kernel source on the CPU through the
 * emulated primitives of attn_mma_emu.h (no GPU needed): accuracy against a double reference
 * within the bound the algorithm allows (bf16 P: 2^-8 * sum_j w_j |v_j - out|, plus the bf16
 * output rounding), padding rows zero, nothing written outside the output, and the bit
 * invariance the reference path needs: a verify window equals each of its rows alone and the
 * same rows inside a mixed pass; a prefill equals its chunks. The gpu suite's test_gpu_attn.c
 * checks the same on the real hardware. Sizes are small: every thread is a fiber. */
#define DS_ATTN_MMA_EMU 1
#include "attn_mma_emu.h"

#include "../../kernels/attn_mma.cu"

#include <cstdio>
#include <cstdlib>

#define BS 16
#define NSEQ 4
#define NBLK 83 /* block i of the fixture lives in physical block (7 i + 3) % 83 */

static const int seq_len[NSEQ] = {3, 200, 150, 576};
struct fix {
	ds_k_dims d;
	std::vector<uint16_t> kv;
	int32_t bt_off[NSEQ], bt[NBLK];
};

struct row {
	int seq, pos;
};

static float rnd(uint64_t seed, uint64_t i, float a)
{
	float u = ds_hash_unit_pm1(ds_hash3(seed, 0x5eed, i));
	return a * (u == 0.0f ? 0.5f : u);
}

static uint16_t q_val(const fix &f, int seq, int pos, int h, int i)
{
	uint64_t k = (((uint64_t)seq * 4096 + (uint64_t)pos) * (uint64_t)f.d.n_head + (uint64_t)h) *
	                 (uint64_t)f.d.head_dim +
	             (uint64_t)i;
	return ds_f32_to_bf16(rnd(77, k, 3.0f));
}

static const uint16_t *kv_at(const fix &f, int seq, int pos, int kh, int v)
{
	int blk = f.bt[f.bt_off[seq] + pos / BS];
	return f.kv.data() +
	       (((size_t)blk * 2 + (size_t)v) * f.d.n_kv + (size_t)kh) * BS * f.d.head_dim +
	       (size_t)(pos % BS) * f.d.head_dim;
}

static fix fix_make(int n_head, int n_kv, int D)
{
	fix f;
	f.d = ds_k_dims{n_head, n_kv, D, BS, NBLK, 1e-5f};
	int nb = 0;
	for (int s = 0; s < NSEQ; s++) {
		f.bt_off[s] = nb;
		for (int i = 0; i < (seq_len[s] + BS - 1) / BS; i++, nb++)
			f.bt[nb] = (nb * 7 + 3) % NBLK;
	}
	if (nb > NBLK)
		abort();
	f.kv.resize((size_t)NBLK * 2 * n_kv * BS * D);
	for (size_t i = 0; i < f.kv.size(); i++)
		f.kv[i] = ds_f32_to_bf16(rnd(91, i, 1.0f));
	return f;
}

static const int GUARD = 64;

/* One launch of the kernel over a pass: mode -2 the walk-only API (ds_k_attn_ref_mma_plan,
 * grid mt_grid_x), else ds_k_attn_ref_mma_plan_split with that mode (0 walk, 1 split, -1
 * auto) and the grids of ds_k_attn_ref_mma_split, then the combine kernel (it exits when the
 * plan walks); grid_x != 0 replaces the attention grid. want_mode >= 0: the plan's mode must
 * be that. Checks the guards after the output and the partials. */
static std::vector<uint16_t> launch(const fix &f, const std::vector<int32_t> &pos,
                                    const std::vector<int32_t> &seq,
                                    const std::vector<uint16_t> &q, int T, int mode,
                                    unsigned grid_x, int want_mode, size_t part_floats)
{
	int H = f.d.n_head, D = f.d.head_dim, top = 0;
	for (int t = 0; t < T; t++)
		top = std::max(top, pos[(size_t)t]);
	std::vector<uint16_t> out((size_t)T * H * D + GUARD, 0x7f7f);
	ds_k_tokmeta tm = {pos.data(), seq.data(), f.bt_off, f.bt};
	float scale_log2 = (float)(1.4426950408889634 / sqrt((double)D));
	const uint16_t *qp = q.data(), *kvp = f.kv.data();
	uint16_t *op = out.data();
	ds_k_dims d = f.d;
	std::vector<int32_t> plan(DS_K_ATTN_MMA_PLAN_INTS(T));
	int ng = mode == -2 ? ds_k_attn_ref_mma_plan(pos.data(), seq.data(), T, d, plan.data())
	                    : ds_k_attn_ref_mma_plan_split(pos.data(), seq.data(), T, d,
	                                                   part_floats, mode, plan.data());
	CHECK(ng >= 1 && ng <= T && plan[0] == ng, "plan of %d rows: %d groups", T, ng);
	CHECK(want_mode < 0 || plan[1] == want_mode, "plan of %d rows, mode %d: got mode %d", T,
	      mode, plan[1]);
	/* the partials' size: every row's tiles (padding rows none) */
	size_t slots = 0;
	for (int t = 0; t < T; t++)
		slots += pos[(size_t)t] < 0 ? 0 : (size_t)pos[(size_t)t] / DS_K_ATTN_TILE + 1;
	size_t np = slots * (size_t)H * (size_t)(D + 2);
	std::vector<float> part(np + GUARD, -7.0f);
	float *pp = mode == -2 ? NULL : part.data();
	const int32_t *pl = plan.data();
	unsigned gx = grid_x ? grid_x : mode == -2 ? mt_grid_x(T, d) : mt_split_grid_x(T, top, d);
	if (D == 64)
		emu_launch(gx, (unsigned)d.n_kv, [&] {
			attn_mma_kernel<64, 2>(qp, kvp, tm, pl, T, d, scale_log2, pp, op);
		});
	else
		emu_launch(gx, (unsigned)d.n_kv, [&] {
			attn_mma_kernel<128, 2>(qp, kvp, tm, pl, T, d, scale_log2, pp, op);
		});
	if (mode != -2) {
		/* any grid (a grid-stride loop over the (row, head) pairs); 3 blocks: quick */
		const int32_t *posp = pos.data();
		if (D == 64)
			emu_launch(std::min(3u, mt_combine_grid(T, d)), 1, [&] {
				mt_combine_kernel<64>(pp, posp, pl, T, H, op);
			});
		else
			emu_launch(std::min(3u, mt_combine_grid(T, d)), 1, [&] {
				mt_combine_kernel<128>(pp, posp, pl, T, H, op);
			});
	}
	for (int i = 0; i < GUARD; i++) {
		CHECK(out[(size_t)T * H * D + (size_t)i] == 0x7f7f, "guard %d overwritten", i);
		CHECK(part[np + (size_t)i] == -7.0f, "partials' guard %d overwritten", i);
	}
	out.resize((size_t)T * H * D);
	return out;
}

/* The kernel over a pass; returns (T, n_head, D) bf16. Runs it walking and split (on 3 CTAs
 * per KV head: item ranges cut inside groups) and checks that both give the same bytes; all:
 * split on the API's grid instead, and also walking through the split API and split on a
 * one-CTA grid per KV head. */
static std::vector<uint16_t> run_pass(const fix &f, const row *rows, int T, unsigned grid_x = 0,
                                      bool all = false)
{
	int H = f.d.n_head, D = f.d.head_dim;
	std::vector<int32_t> pos((size_t)T), seq((size_t)T);
	std::vector<uint16_t> q((size_t)T * H * D);
	for (int t = 0; t < T; t++) {
		pos[(size_t)t] = rows[t].pos;
		seq[(size_t)t] = rows[t].seq;
		for (int h = 0; h < H; h++)
			for (int i = 0; i < D; i++)
				q[((size_t)t * H + h) * D + (size_t)i] =
				    rows[t].pos < 0 ? ds_f32_to_bf16(0.25f)
				                    : q_val(f, rows[t].seq, rows[t].pos, h, i);
	}
	std::vector<uint16_t> out = launch(f, pos, seq, q, T, -2, grid_x, 0, 0);
	for (int t = 0; t < T; t++)
		if (rows[t].pos < 0)
			for (int i = 0; i < H * D; i++)
				CHECK(out[(size_t)t * H * D + (size_t)i] == 0,
				      "padding row %d not zero", t);
	size_t big = (size_t)1 << 30;
	size_t n = (size_t)T * H * D * 2;
	std::vector<uint16_t> sp = launch(f, pos, seq, q, T, 1, all ? 0 : 3, 1, big);
	CHECK(memcmp(out.data(), sp.data(), n) == 0, "D=%d T=%d: split vs walk", D, T);
	if (all) {
		std::vector<uint16_t> w = launch(f, pos, seq, q, T, 0, 0, 0, big);
		std::vector<uint16_t> s1 = launch(f, pos, seq, q, T, 1, 1, 1, big);
		CHECK(memcmp(out.data(), w.data(), n) == 0, "D=%d T=%d: walk (split API) vs walk",
		      D, T);
		CHECK(memcmp(out.data(), s1.data(), n) == 0, "D=%d T=%d: split on one CTA vs walk",
		      D, T);
	}
	return out;
}

static double check_rows(const fix &f, const row *rows, int T, const uint16_t *out)
{
	int H = f.d.n_head, D = f.d.head_dim, G = H / f.d.n_kv;
	double worst = 0;
	for (int t = 0; t < T; t++) {
		if (rows[t].pos < 0)
			continue;
		int p = rows[t].pos;
		for (int h = 0; h < H; h++) {
			std::vector<double> s((size_t)p + 1), qv((size_t)D), ref((size_t)D, 0.0),
			    dev((size_t)D, 0.0);
			for (int i = 0; i < D; i++)
				qv[(size_t)i] = ds_bf16_to_f32(q_val(f, rows[t].seq, p, h, i));
			double m = -INFINITY, l = 0;
			for (int j = 0; j <= p; j++) {
				const uint16_t *k = kv_at(f, rows[t].seq, j, h / G, 0);
				double a = 0;
				for (int i = 0; i < D; i++)
					a += qv[(size_t)i] * ds_bf16_to_f32(k[i]);
				s[(size_t)j] = a / sqrt((double)D);
				m = std::max(m, s[(size_t)j]);
			}
			for (int j = 0; j <= p; j++)
				l += (s[(size_t)j] = exp(s[(size_t)j] - m));
			for (int j = 0; j <= p; j++) {
				const uint16_t *v = kv_at(f, rows[t].seq, j, h / G, 1);
				for (int i = 0; i < D; i++)
					ref[(size_t)i] += s[(size_t)j] / l * ds_bf16_to_f32(v[i]);
			}
			for (int j = 0; j <= p; j++) {
				const uint16_t *v = kv_at(f, rows[t].seq, j, h / G, 1);
				for (int i = 0; i < D; i++)
					dev[(size_t)i] +=
					    s[(size_t)j] / l *
					    fabs(ds_bf16_to_f32(v[i]) - ref[(size_t)i]);
			}
			const uint16_t *g = out + ((size_t)t * H + h) * D;
			for (int i = 0; i < D; i++) {
				double bound = 1.01 * ldexp(dev[(size_t)i], -8) +
				               ldexp(fabs(ref[(size_t)i]), -8) + 2e-5;
				double e = fabs(ds_bf16_to_f32(g[i]) - ref[(size_t)i]);
				CHECK(e <= bound,
				      "D=%d G=%d row %d (seq %d pos %d) head %d [%d]: %.6f vs %.6f "
				      "(bound "
				      "%.3g)",
				      D, G, t, rows[t].seq, p, h, i, ds_bf16_to_f32(g[i]),
				      ref[(size_t)i], bound);
				worst = std::max(worst, e / bound);
			}
		}
	}
	return worst;
}

static int add_run(row *rows, int T, int seq, int pos0, int n)
{
	for (int i = 0; i < n; i++)
		rows[T + i] = row{seq, pos0 + i};
	return T + n;
}

static void rows_equal(const fix &f, const std::vector<uint16_t> &a, int ra,
                       const std::vector<uint16_t> &b, int rb, int n, const char *what)
{
	size_t w = (size_t)f.d.n_head * f.d.head_dim;
	for (int i = 0; i < n; i++)
		CHECK(memcmp(a.data() + (size_t)(ra + i) * w, b.data() + (size_t)(rb + i) * w,
		             w * 2) == 0,
		      "D=%d G=%d: %s: row %d differs", f.d.head_dim, f.d.n_head / f.d.n_kv, what,
		      i);
}

/* Long context (sequence 3, 576 positions: 9 tiles): a decode row alone, a decode batch, a
 * window of 32 and a prefill chunk; run_pass proves walk == split for each, and the
 * window's rows equal the same rows alone and in the batch; then the plan's choices.
 * Returns the worst error / bound. */
static double run_long(const fix &f)
{
	int n_head = f.d.n_head, D = f.d.head_dim;
	double w = 0;
	row dec[] = {{3, 575}};
	std::vector<uint16_t> od = run_pass(f, dec, 1, 0, true);
	w = std::max(w, check_rows(f, dec, 1, od.data()));
	row bat[] = {{1, 199}, {3, 530}, {0, -1}, {2, 149}};
	std::vector<uint16_t> ob = run_pass(f, bat, 4);
	w = std::max(w, check_rows(f, bat, 4, ob.data()));
	row win[32];
	add_run(win, 0, 3, 520, 32);
	std::vector<uint16_t> ow = run_pass(f, win, 32);
	rows_equal(f, ow, 10, ob, 1, 1, "long window row vs the same row in a decode batch");
	row one[] = {win[31]};
	std::vector<uint16_t> o1 = run_pass(f, one, 1);
	rows_equal(f, ow, 31, o1, 0, 1, "long window row vs alone");
	row chunk[24];
	add_run(chunk, 0, 3, 512, 24);
	std::vector<uint16_t> oc = run_pass(f, chunk, 24);
	rows_equal(f, oc, 8, ow, 0, 16, "prefill chunk vs window");
	/* the plan's choice: auto splits few long groups, walks when the partials do not fit */
	{
		std::vector<int32_t> pos = {575}, seq = {3}, pos2 = {10}, seq2 = {3};
		std::vector<int32_t> plan(DS_K_ATTN_MMA_PLAN_INTS(1));
		ds_k_attn_ref_mma_plan_split(pos.data(), seq.data(), 1, f.d, 1u << 30, -1,
		                             plan.data());
		CHECK(plan[1] == 1 && plan[2] == 9, "auto: one row at 575 splits 9 tiles (%d %d)",
		      plan[1], plan[2]);
		size_t need = (size_t)9 * n_head * (D + 2);
		ds_k_attn_ref_mma_plan_split(pos.data(), seq.data(), 1, f.d, need, 1, plan.data());
		CHECK(plan[1] == 1, "split: partials fit exactly");
		ds_k_attn_ref_mma_plan_split(pos.data(), seq.data(), 1, f.d, need - 1, 1,
		                             plan.data());
		CHECK(plan[1] == 0, "split: partials one float too big: walk");
		ds_k_attn_ref_mma_plan_split(pos2.data(), seq2.data(), 1, f.d, 1u << 30, -1,
		                             plan.data());
		CHECK(plan[1] == 0, "auto: one tile walks");
		/* 130 single-row groups (more than 128 / n_kv CTAs' worth): auto walks */
		std::vector<int32_t> pm(130), sm(130, 3), plm(DS_K_ATTN_MMA_PLAN_INTS(130));
		for (int i = 0; i < 130; i++)
			pm[(size_t)i] = 4 * i + 2;
		int ng = ds_k_attn_ref_mma_plan_split(pm.data(), sm.data(), 130, f.d, 1u << 30, -1,
		                                      plm.data());
		CHECK(ng == 130 && plm[1] == 0, "auto: %d groups x %d KV heads walk (mode %d)", ng,
		      f.d.n_kv, plm[1]);
	}
	return w;
}

static void run_cfg(int n_head, int n_kv, int D, bool long_ctx)
{
	fix f = fix_make(n_head, n_kv, D);
	if (!ds_k_attn_ref_mma_supported(f.d)) {
		CHECK(false, "dims not supported");
		return;
	}
	/* accuracy over a mixed pass */
	row rows[64];
	int T = 0;
	T = add_run(rows, T, 0, 0, 3);   /* positions 0, 1, 2 */
	T = add_run(rows, T, 1, 61, 6);  /* 61..66 across the tile edge at 64 */
	rows[T++] = row{0, -1};          /* padding */
	T = add_run(rows, T, 2, 140, 1); /* alone */
	T = add_run(rows, T, 1, 130, 20);
	T = add_run(rows, T, 1, 199, 1);
	std::vector<uint16_t> out = run_pass(f, rows, T);
	double w = check_rows(f, rows, T, out.data());
	/* one CTA per KV head taking every group in turn (the grid is capped for long passes) */
	std::vector<uint16_t> og = run_pass(f, rows, T, 1);
	rows_equal(f, out, 0, og, 0, T, "pass vs the same pass on a one-CTA grid");
	/* the window 130..149 of sequence 1 (rows 11..30 of that pass) vs alone, vs in another
	 * mixed pass at another place with neighbours joining its groups, vs chunked */
	int at0 = 11, W = 20;
	for (int i = 0; i < W; i += 6) {
		std::vector<uint16_t> o1 = run_pass(f, rows + at0 + i, 1);
		rows_equal(f, out, at0 + i, o1, 0, 1, "window row vs alone");
	}
	row mix[64];
	int M = 0;
	M = add_run(mix, M, 2, 10, 2);
	M = add_run(mix, M, 1, 127, 3); /* joins the group of 128.. */
	int at1 = M;
	M = add_run(mix, M, 1, 130, W);
	M = add_run(mix, M, 1, 150, 5);
	mix[M++] = row{1, -1};
	std::vector<uint16_t> om = run_pass(f, mix, M);
	rows_equal(f, out, at0, om, at1, W, "window vs inside another mixed pass");
	check_rows(f, mix, M, om.data());
	/* prefill 0..79 whole vs 7 + 40 + 33 */
	row pre[80];
	add_run(pre, 0, 2, 0, 80);
	std::vector<uint16_t> whole = run_pass(f, pre, 80);
	int cuts[] = {7, 40, 33}, at = 0;
	for (int c : cuts) {
		std::vector<uint16_t> oc = run_pass(f, pre + at, c);
		rows_equal(f, whole, at, oc, 0, c, "prefill chunk vs whole");
		at += c;
	}
	row smp[] = {pre[0], pre[15], pre[16], pre[63], pre[64], pre[79]};
	size_t rw = (size_t)n_head * D;
	for (int i = 0; i < 6; i++)
		check_rows(f, &smp[i], 1, whole.data() + (size_t)smp[i].pos * rw);
	if (long_ctx)
		w = std::max(w, run_long(f));
	printf("attn_mma emulated: n_head %d n_kv %d D %d: worst error / bound %.3f\n", n_head,
	       n_kv, D, w);
}

int main(void)
{
	try {
		run_cfg(9, 3, 64, true);
		run_cfg(8, 2, 128, true);
		run_cfg(4, 4, 64, false);
	} catch (const check_failed &) {
		printf("%ld fiber switches; FAILED\n", emu.switches);
		return 1;
	}
	printf("%ld fiber switches; ok\n", emu.switches);
	return 0;
}
