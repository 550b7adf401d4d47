/* cpu_ref.c - the CPU reference path's kernels: batch-invariant by construction (DESIGN.md 3).
 *
 * Key decision: every reduced value has exactly one arithmetic definition, and threads only
 * partition outputs, never a reduction.
 *  - matmul: y[m][n] = tree16(acc), acc[l] = sum over k = l (mod 16) of x[m][k]*w[n][k] in
 *    increasing k, then a fixed pairwise tree. Threads take column tiles; rows are processed
 *    in register blocks sized per ISA, which all execute the same per-element ops.
 *  - rmsnorm: one row per task, the same 16-lane sum and tree.
 *  - attention: KV in chunks of DS_CPU_REF_KV_CHUNK aligned to absolute positions; per chunk a
 *    max / sum / weighted-V pass in position order; chunks merged in increasing order. The same
 *    code runs for one query row or many, and for cached or freshly written KV.
 * f32 weights or KV (model.h wtype, the backend's KV type) only skip the widening to f32, so
 * each value is reduced in the same order in every precision.
 * We build with -std=c11 (no FP contraction) and without -ffast-math, so the compiler may
 * vectorise across lanes and rows but cannot re-associate a sum. */
#include "cpu_internal.h"

/* GCC with -std=c11 never contracts a*b+c into an FMA; clang does by default (within an
 * expression), which would change the documented order, so switch it off explicitly. */
#if defined(__clang__)
#pragma clang fp contract(off)
#endif

#include <math.h>

#define REF_LANES 16
#define REF_NT 16 /* output columns per task (weight tile converted to f32 once) */
#define REF_MR 4  /* most rows per register block; fewer rows skip the tile conversion */

/* Hot task bodies are compiled for AVX-512, AVX2 and baseline x86-64 (DS_CPU_VARIANTS). All
 * run the same IEEE single-precision ops per lane: no FMA (-std=c11 turns contraction off and
 * the targets below do not enable it), and tests/test_cpu_kernels.c checks every level against
 * a scalar rendition, so they give the same bits; wider vectors only run more lanes at once. */
#define REF_TARGET_AVX512 "avx512f,avx512vl,avx2"
#define REF_TARGET_AVX2 "avx2"
#define REF_VARIANTS(fn) DS_CPU_VARIANTS(fn, REF_TARGET_AVX512, REF_TARGET_AVX2)

/* ---- fixed-order reductions ---- */

/* The fixed tree over 16 lanes held as lo (0-7) and hi (8-15): s8[l] = a[l] + a[l+8], then
 * s4[l] = s8[l] + s8[l+4], then (s4[0] + s4[2]) + (s4[1] + s4[3]). */
static inline DS_CPU_INLINE float ref_tree16(ds_v8f lo, ds_v8f hi)
{
	ds_v8f s8 = lo + hi;
	float s4[4];
	for (int l = 0; l < 4; l++)
		s4[l] = s8[l] + s8[l + 4];
	return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

/* dot(x, w) over n in the reference order; w already f32. */
static inline DS_CPU_INLINE float ref_dot(const float *x, const float *w, int n)
{
	ds_v8f lo = {0}, hi = {0};
	int k = 0;
	for (; k + REF_LANES <= n; k += REF_LANES) {
		lo += ds_v8_load(x + k) * ds_v8_load(w + k);
		hi += ds_v8_load(x + k + 8) * ds_v8_load(w + k + 8);
	}
	for (int l = 0; k + l < n; l++) {
		if (l < 8)
			lo[l] += x[k + l] * w[k + l];
		else
			hi[l - 8] += x[k + l] * w[k + l];
	}
	return ref_tree16(lo, hi);
}

/* out[r*ldo + c] = dot(x row r, weight column c) for nr rows (stride ldx) and nc columns;
 * w_bf16 (nc rows, stride ldw) is converted on the fly, or w_f32 (stride ldw) is used. Call
 * with constant nr/nc so the accumulators live in registers. Every element gets exactly the
 * ops of ref_dot, whatever nr, nc or the weight format (bf16 -> f32 is exact). The main loop
 * mirrors cpu_fast.c's fast_block on purpose: each file sets its own FP contraction (off here,
 * fast there) with pragmas after its includes, which a helper shared through a header would
 * escape. */
static inline DS_CPU_INLINE void ref_block(const float *x, size_t ldx, const int nr, const int nc,
                                           const uint16_t *w_bf16, const float *w_f32, size_t ldw,
                                           int n, float *out, size_t ldo)
{
	ds_v8f acc[4][4][2];
	for (int r = 0; r < nr; r++)
		for (int c = 0; c < nc; c++)
			acc[r][c][0] = acc[r][c][1] = (ds_v8f){0};
	int k = 0;
	for (; k + REF_LANES <= n; k += REF_LANES) {
		ds_v8f wv[4][2];
		for (int c = 0; c < nc; c++)
			for (int h = 0; h < 2; h++)
				wv[c][h] = w_bf16 ? ds_v8_load_bf16(w_bf16 + c * ldw + k + 8 * h)
				                  : ds_v8_load(w_f32 + c * ldw + k + 8 * h);
		for (int r = 0; r < nr; r++)
			for (int h = 0; h < 2; h++) {
				ds_v8f xv = ds_v8_load(x + r * ldx + k + 8 * h);
				for (int c = 0; c < nc; c++)
					acc[r][c][h] += xv * wv[c][h];
			}
	}
	for (int r = 0; r < nr; r++)
		for (int c = 0; c < nc; c++) {
			for (int l = 0; k + l < n; l++) {
				float wl = w_bf16 ? ds_bf16_to_f32(w_bf16[c * ldw + k + l])
				                  : w_f32[c * ldw + k + l];
				acc[r][c][l / 8][l % 8] += x[r * ldx + k + l] * wl;
			}
			out[r * ldo + c] = ref_tree16(acc[r][c][0], acc[r][c][1]);
		}
}

static inline DS_CPU_INLINE void ref_bf16_row(float *dst, const uint16_t *src, int n)
{
	for (int i = 0; i < n; i++)
		dst[i] = ds_bf16_to_f32(src[i]);
}

/* ---- matmul ---- */

struct ref_mm {
	struct ds_cpu_ctx *c;
	const float *x;
	const uint16_t *w;
	float *y;
	int M, N, K;
};

/* a fused matmul: column tiles of every weight form one task space */
struct ref_mm_multi {
	struct ref_mm mm[DS_CPU_MAX_MM];
	int tile0[DS_CPU_MAX_MM + 1]; /* first task of each weight */
	int n_mm;
};

/* rows [m, m+nr) of one column tile, nc columns at a time (constants at the call site) */
static inline DS_CPU_INLINE void ref_mm_rows(const struct ref_mm *a, int m, const int nr,
                                             const int nc, int n0, int nt, const float *wt)
{
	size_t K = (size_t)a->K, N = (size_t)a->N;
	const float *x = a->x + (size_t)m * K;
	float *y = a->y + (size_t)m * N + n0;
	const uint16_t *wb = wt ? NULL : a->w + (size_t)n0 * K;
	int j = 0;
	for (; j + nc <= nt; j += nc)
		ref_block(x, K, nr, nc, wb ? wb + j * K : NULL, wt ? wt + j * K : NULL, K, a->K,
		          y + j, N);
	for (; j < nt; j++)
		ref_block(x, K, nr, 1, wb ? wb + j * K : NULL, wt ? wt + j * K : NULL, K, a->K,
		          y + j, N);
}

/* One column tile for all rows, in register blocks of mr rows x nc columns (mr, nc <= 4,
 * chosen per ISA so the accumulators fit the register file). */
static inline DS_CPU_INLINE void ref_mm_task(void *arg, int task, int thread, const int mr,
                                             const int nc)
{
	struct ref_mm_multi *mu = arg;
	int i = 0;
	while (task >= mu->tile0[i + 1])
		i++;
	const struct ref_mm *a = &mu->mm[i];
	int K = a->K, n0 = (task - mu->tile0[i]) * REF_NT, nt = DS_MIN(REF_NT, a->N - n0);
	const float *wt = NULL;
	if (a->c->wtype == DS_DTYPE_F32) { /* already f32: the tile as it is (stride K) */
		wt = ds_model_w_f32(a->w) + (size_t)n0 * K;
	} else if (a->M >= REF_MR) { /* enough rows to pay for converting the tile once */
		float *buf = ds_cpu_thread_buf(a->c, thread); /* (nt, K) */
		for (int j = 0; j < nt; j++)
			ref_bf16_row(buf + (size_t)j * K, a->w + (size_t)(n0 + j) * K, K);
		wt = buf;
	}
	for (int m = 0; m < a->M; m += mr) {
		switch (DS_MIN(mr, a->M - m)) {
		case 1:
			ref_mm_rows(a, m, 1, nc, n0, nt, wt);
			break;
		case 2:
			ref_mm_rows(a, m, DS_MIN(2, mr), nc, n0, nt, wt);
			break;
		case 3:
			ref_mm_rows(a, m, DS_MIN(3, mr), nc, n0, nt, wt);
			break;
		default:
			ref_mm_rows(a, m, DS_MIN(4, mr), nc, n0, nt, wt);
			break;
		}
	}
}

DS_CPU_VARIANTS_CALLS(ref_mm_task, REF_TARGET_AVX512, ref_mm_task(arg, task, thread, 4, 3),
                      REF_TARGET_AVX2, ref_mm_task(arg, task, thread, 2, 2),
                      ref_mm_task(arg, task, thread, 2, 1))

static enum ds_status ref_matmul(struct ds_cpu_ctx *c, const float *x, int M, int K,
                                 const struct ds_cpu_mm *mm, int n_mm)
{
	DS_ASSERT((size_t)REF_NT * (size_t)K <= c->thread_buf_len);
	DS_ASSERT(n_mm >= 1 && n_mm <= DS_CPU_MAX_MM);
	struct ref_mm_multi mu = {.n_mm = n_mm};
	for (int i = 0; i < n_mm; i++) {
		mu.mm[i] = (struct ref_mm){
		    .c = c, .x = x, .w = mm[i].w, .y = mm[i].y, .M = M, .N = mm[i].N, .K = K};
		mu.tile0[i + 1] = mu.tile0[i] + (mm[i].N + REF_NT - 1) / REF_NT;
	}
	ds_threadpool_run(c->tp, mu.tile0[n_mm], ref_mm_task_pick(c), &mu);
	return DS_OK;
}

/* ---- rmsnorm ---- */

struct ref_norm {
	const float *x;
	const uint16_t *w; /* of wt */
	enum ds_dtype wt;
	float *y;
	int n;
	float eps;
};

static inline DS_CPU_INLINE void ref_norm_task(void *arg, int row, int thread)
{
	(void)thread;
	struct ref_norm *a = arg;
	const float *x = a->x + (size_t)row * a->n;
	float *y = a->y + (size_t)row * a->n;
	float inv = 1.0f / sqrtf(ref_dot(x, x, a->n) / (float)a->n + a->eps);
	if (a->wt == DS_DTYPE_F32) {
		const float *w = ds_model_w_f32(a->w);
		for (int i = 0; i < a->n; i++)
			y[i] = (x[i] * inv) * w[i];
	} else {
		for (int i = 0; i < a->n; i++)
			y[i] = (x[i] * inv) * ds_bf16_to_f32(a->w[i]);
	}
}

REF_VARIANTS(ref_norm_task)

static enum ds_status ref_rmsnorm(struct ds_cpu_ctx *c, const float *x, const uint16_t *w, float *y,
                                  int M, int n, float eps)
{
	struct ref_norm a = {.x = x, .w = w, .wt = c->wtype, .y = y, .n = n, .eps = eps};
	if (M * n < 4096) { /* too small to be worth waking threads; same per-row ops */
		ds_task_fn fn = ref_norm_task_pick(c);
		for (int m = 0; m < M; m++)
			fn(&a, m, 0);
		return DS_OK;
	}
	ds_threadpool_run(c->tp, M, ref_norm_task_pick(c), &a);
	return DS_OK;
}

/* ---- attention ---- */

struct ref_attn {
	struct ds_cpu_ctx *c;
	const struct ds_cpu_pass *p;
	int l;
	const float *q;
	float *out;
};

/* One (row, kv head) task: the G query heads that share the kv head. */
static inline DS_CPU_INLINE void ref_attn_task(void *arg, int task, int thread)
{
	struct ref_attn *a = arg;
	struct ds_cpu_ctx *c = a->c;
	const struct ds_model_config *cfg = &c->cfg;
	const int S = DS_CPU_REF_KV_CHUNK, hd = cfg->head_dim, nkv = cfg->n_kv_head;
	const int G = cfg->n_head / nkv, qd = cfg->n_head * hd;
	int m = task / nkv, kvh = task % nkv;
	int pos = a->p->row_pos[m];
	const int32_t *blocks = a->p->b->seqs[a->p->row_seq[m]].blocks;
	const float scale = 1.0f / sqrtf((float)hd);

	float *kc = ds_cpu_thread_buf(c, thread); /* (S, hd) chunk keys */
	float *vc = kc + (size_t)S * hd;          /* (S, hd) chunk values */
	float *sc = vc + (size_t)S * hd;          /* (S) scores */
	float *oc = sc + S;                       /* (hd) chunk output */
	float *acc_o = oc + hd;                   /* (G, hd) running output */
	float *acc_m = acc_o + (size_t)G * hd;    /* (G) running max */
	float *acc_l = acc_m + G;                 /* (G) running sum */

	for (int c0 = 0; c0 <= pos; c0 += S) {
		int n = DS_MIN(S, pos + 1 - c0);
		for (int j = 0; j < n; j++) {
			ds_cpu_row_f32(kc + (size_t)j * hd, c->kvtype,
			               ds_cpu_kv_at(c, c->kv_k, a->l, blocks, c0 + j),
			               (size_t)kvh * hd, hd);
			ds_cpu_row_f32(vc + (size_t)j * hd, c->kvtype,
			               ds_cpu_kv_at(c, c->kv_v, a->l, blocks, c0 + j),
			               (size_t)kvh * hd, hd);
		}
		for (int g = 0; g < G; g++) {
			const float *q = a->q + (size_t)m * qd + (size_t)(kvh * G + g) * hd;
			float mx = -INFINITY;
			for (int j = 0; j < n; j++) {
				sc[j] = ref_dot(q, kc + (size_t)j * hd, hd) * scale;
				mx = sc[j] > mx ? sc[j] : mx;
			}
			float sum = 0.0f;
			for (int d = 0; d < hd; d++)
				oc[d] = 0.0f;
			for (int j = 0; j < n; j++) {
				float e = expf(sc[j] - mx);
				sum += e;
				const float *v = vc + (size_t)j * hd;
				for (int d = 0; d < hd; d++)
					oc[d] += e * v[d];
			}
			float *o = acc_o + (size_t)g * hd;
			if (c0 == 0) {
				acc_m[g] = mx;
				acc_l[g] = sum;
				for (int d = 0; d < hd; d++)
					o[d] = oc[d];
			} else {
				float mn = mx > acc_m[g] ? mx : acc_m[g];
				float fa = expf(acc_m[g] - mn), fb = expf(mx - mn);
				acc_m[g] = mn;
				acc_l[g] = acc_l[g] * fa + sum * fb;
				for (int d = 0; d < hd; d++)
					o[d] = o[d] * fa + oc[d] * fb;
			}
		}
	}
	for (int g = 0; g < G; g++) {
		float *dst = a->out + (size_t)m * qd + (size_t)(kvh * G + g) * hd;
		const float *o = acc_o + (size_t)g * hd;
		for (int d = 0; d < hd; d++)
			dst[d] = o[d] / acc_l[g];
	}
}

REF_VARIANTS(ref_attn_task)

static enum ds_status ref_attention(struct ds_cpu_ctx *c, const struct ds_cpu_pass *p, int l,
                                    const float *q, float *out)
{
	struct ref_attn a = {.c = c, .p = p, .l = l, .q = q, .out = out};
	ds_threadpool_run(c->tp, p->M * c->cfg.n_kv_head, ref_attn_task_pick(c), &a);
	return DS_OK;
}

size_t ds_cpu_ref_thread_floats(const struct ds_model_config *cfg)
{
	size_t kmax = (size_t)DS_MAX(DS_MAX(cfg->hidden, ds_model_q_dim(cfg)), cfg->ffn);
	size_t hd = (size_t)cfg->head_dim, S = DS_CPU_REF_KV_CHUNK;
	size_t G = (size_t)(cfg->n_head / cfg->n_kv_head);
	size_t attn = 2 * S * hd + S + hd + G * hd + 2 * G;
	return DS_MAX((size_t)REF_NT * kmax, attn);
}

const struct ds_cpu_kernels ds_cpu_ref_kernels = {
    .matmul = ref_matmul,
    .rmsnorm = ref_rmsnorm,
    .attention = ref_attention,
};
