/* cpu_fast.c - the CPU fast path's kernels: shape-tuned and deliberately batch-variant.
 *
 * Key decision: like an autotuned GPU stack, the partitioning follows the shape, and with it
 * the reduction order:
 *  - matmul: with few rows (decode) there is too little work per column tile to feed every
 *    thread, so K is split into FAST_SPLITS partial sums that are reduced afterwards; with many
 *    rows the work is tiled over rows and columns and each dot product runs in one piece.
 *  - attention: flash-decoding style. The KV range of each (row, kv head) is cut into a number
 *    of splits chosen from the batch (more splits when there are few rows), each split runs an
 *    online softmax, and the splits are merged.
 * f32 weights or KV (an f32 model) skip the widening to f32 and change nothing else.
 * So the same sequence gets different bits in different batches; the reference path
 * (refpath/cpu_ref.c) is the one that is invariant. */
#include "cpu_internal.h"

#include <math.h>

/* The fast path may fuse multiply-adds (FMA where the CPU has it), like cuBLAS. */
#if defined(__clang__)
#pragma clang fp contract(fast)
#else
#pragma GCC optimize("fp-contract=fast")
#endif

#define FAST_LANES 16
#define FAST_NT 16 /* output columns per task */
#define FAST_MR 4  /* more rows than this convert the weight tile to f32 first */
#define FAST_MB 64 /* rows per task when the row count is large */
#define FAST_KB 32 /* keys per attention block */

/* Like a GPU library picking the kernel for the device: each task body is compiled for
 * AVX-512+FMA, AVX2+FMA and baseline x86-64 (DS_CPU_VARIANTS) and the context's level picks
 * one. Results may differ between machines; this path promises nothing. */
#define FAST_TARGET_AVX512 "avx512f,avx512vl,avx2,fma"
#define FAST_TARGET_AVX2 "avx2,fma"
#define FAST_VARIANTS(fn) DS_CPU_VARIANTS(fn, FAST_TARGET_AVX512, FAST_TARGET_AVX2)

/* adjacent-pairs tree over 16 lanes held as lo (0-7) and hi (8-15); the reference path
 * folds halves instead */
static inline DS_CPU_INLINE float fast_sum16(ds_v8f lo, ds_v8f hi)
{
	float s4[4];
	for (int l = 0; l < 2; l++) {
		s4[l] = (lo[4 * l] + lo[4 * l + 1]) + (lo[4 * l + 2] + lo[4 * l + 3]);
		s4[l + 2] = (hi[4 * l] + hi[4 * l + 1]) + (hi[4 * l + 2] + hi[4 * l + 3]);
	}
	return (s4[0] + s4[1]) + (s4[2] + s4[3]);
}

static inline DS_CPU_INLINE float fast_dot(const float *x, const float *w, int n)
{
	ds_v8f lo = {0}, hi = {0};
	int k = 0;
	for (; k + FAST_LANES <= n; k += FAST_LANES) {
		lo += ds_v8_load(x + k) * ds_v8_load(w + k);
		hi += ds_v8_load(x + k + 8) * ds_v8_load(w + k + 8);
	}
	float s = fast_sum16(lo, hi);
	for (; k < n; k++)
		s += x[k] * w[k];
	return s;
}

/* out[r*ldo + c] = dot(x row r, weight column c), nr rows x nc columns (constants at the call
 * site), weights bf16 converted inline or f32. */
static inline DS_CPU_INLINE void fast_block(const float *x, size_t ldx, const int nr, const int nc,
                                            const uint16_t *w_bf16, const float *w_f32, size_t ldw,
                                            int n, float *out, size_t ldo)
{
	ds_v8f acc[4][4][2];
	for (int r = 0; r < nr; r++)
		for (int c = 0; c < nc; c++)
			acc[r][c][0] = acc[r][c][1] = (ds_v8f){0};
	int k = 0;
	for (; k + FAST_LANES <= n; k += FAST_LANES) {
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
			float s = fast_sum16(acc[r][c][0], acc[r][c][1]);
			for (int kk = k; kk < n; kk++)
				s +=
				    x[r * ldx + kk] * (w_bf16 ? ds_bf16_to_f32(w_bf16[c * ldw + kk])
				                              : w_f32[c * ldw + kk]);
			out[r * ldo + c] = s;
		}
}

/* ---- matmul ---- */

struct fast_mm {
	struct ds_cpu_ctx *c;
	const float *x;
	const uint16_t *w;
	float *y;    /* (M, N) when splits == 1 */
	float *part; /* (splits, M, N) partial sums otherwise */
	int M, N, K;
	int splits, n_tiles, row_blocks;
};

/* a fused matmul: the tasks of every weight form one task space */
struct fast_mm_multi {
	struct fast_mm mm[DS_CPU_MAX_MM];
	int task0[DS_CPU_MAX_MM + 1]; /* first task of each weight */
	int n_mm;
};

static inline DS_CPU_INLINE void fast_mm_task(void *arg, int task, int thread, const int mr,
                                              const int mc)
{
	struct fast_mm_multi *mu = arg;
	int i = 0;
	while (task >= mu->task0[i + 1])
		i++;
	const struct fast_mm *a = &mu->mm[i];
	task -= mu->task0[i];
	int tile = task % a->n_tiles, rest = task / a->n_tiles;
	int split = rest % a->splits, rb = rest / a->splits;
	int n0 = tile * FAST_NT, nt = DS_MIN(FAST_NT, a->N - n0);
	int k0 = (int)((int64_t)a->K * split / a->splits);
	int k1 = (int)((int64_t)a->K * (split + 1) / a->splits), kl = k1 - k0;
	int m0 = rb * FAST_MB, m1 = a->row_blocks > 1 ? DS_MIN(a->M, m0 + FAST_MB) : a->M;
	float *y = a->splits > 1 ? a->part + (size_t)split * a->M * a->N : a->y;

	const float *wt = NULL;
	size_t ldwt = (size_t)kl;          /* stride of wt */
	if (a->c->wtype == DS_DTYPE_F32) { /* already f32: the tile in place */
		wt = ds_model_w_f32(a->w) + (size_t)n0 * a->K + k0;
		ldwt = (size_t)a->K;
	} else if (m1 - m0 > FAST_MR) { /* enough rows to pay for converting the tile once */
		float *buf = ds_cpu_thread_buf(a->c, thread); /* (nt, kl) */
		for (int j = 0; j < nt; j++) {
			const uint16_t *src = a->w + (size_t)(n0 + j) * a->K + k0;
			for (int k = 0; k < kl; k++)
				buf[(size_t)j * kl + k] = ds_bf16_to_f32(src[k]);
		}
		wt = buf;
	}
	size_t K = (size_t)a->K, N = (size_t)a->N, ldw = wt ? ldwt : K;
	const uint16_t *wb = wt ? NULL : a->w + (size_t)n0 * K + k0;
	for (int m = m0; m < m1; m += mr) {
		const float *x = a->x + (size_t)m * K + k0;
		float *o = y + (size_t)m * N + n0;
		for (int j = 0; j < nt;) {
			int nc = nt - j >= mc ? mc : 1;
			const uint16_t *wbj = wb ? wb + j * ldw : NULL;
			const float *wtj = wt ? wt + j * ldw : NULL;
#define FAST_BLOCK(nr)                                                                             \
	(nc == mc ? fast_block(x, K, DS_MIN(nr, mr), mc, wbj, wtj, ldw, kl, o + j, N)              \
	          : fast_block(x, K, DS_MIN(nr, mr), 1, wbj, wtj, ldw, kl, o + j, N))
			switch (DS_MIN(mr, m1 - m)) {
			case 1:
				FAST_BLOCK(1);
				break;
			case 2:
				FAST_BLOCK(2);
				break;
			case 3:
				FAST_BLOCK(3);
				break;
			default:
				FAST_BLOCK(4);
				break;
			}
#undef FAST_BLOCK
			j += nc;
		}
	}
}

/* register blocks (rows x columns) sized so the accumulators fit each ISA's register file */
DS_CPU_VARIANTS_CALLS(fast_mm_task, FAST_TARGET_AVX512, fast_mm_task(arg, task, thread, 4, 3),
                      FAST_TARGET_AVX2, fast_mm_task(arg, task, thread, 2, 2),
                      fast_mm_task(arg, task, thread, 2, 1))

#define FAST_REDUCE_CHUNK 4096

/* sums the split partials of weight i; tasks numbered like fast_mm_multi but by chunk */
static void fast_reduce_task(void *arg, int task, int thread)
{
	(void)thread;
	struct fast_mm_multi *mu = arg;
	int i = 0;
	while (task >= mu->task0[i + 1])
		i++;
	const struct fast_mm *a = &mu->mm[i];
	size_t n = (size_t)a->M * a->N;
	size_t i0 = (size_t)(task - mu->task0[i]) * FAST_REDUCE_CHUNK;
	size_t i1 = DS_MIN(n, i0 + FAST_REDUCE_CHUNK);
	for (size_t e = i0; e < i1; e++) {
		float s = a->part[e];
		for (int sp = 1; sp < a->splits; sp++)
			s += a->part[(size_t)sp * n + e];
		a->y[e] = s;
	}
}

static enum ds_status fast_matmul(struct ds_cpu_ctx *c, const float *x, int M, int K,
                                  const struct ds_cpu_mm *mm, int n_mm)
{
	DS_ASSERT((size_t)FAST_NT * (size_t)K <= c->thread_buf_len);
	DS_ASSERT(n_mm >= 1 && n_mm <= DS_CPU_MAX_MM);
	/* split K when there are few rows (the GEMV regime), as long as slices stay long */
	int splits = M <= 4 ? 4 : M <= 16 ? 2 : 1;
	while (splits > 1 && K / splits < 512) /* short K slices defeat the prefetcher */
		splits /= 2;
	int row_blocks = M > 2 * FAST_MB ? (M + FAST_MB - 1) / FAST_MB : 1;
	size_t sum_n = 0;
	for (int i = 0; i < n_mm; i++)
		sum_n += (size_t)mm[i].N;
	float *part = NULL;
	if (splits > 1) {
		part = ds_cpu_ws_get(c, DS_WS_PART, (size_t)splits * M * sum_n * sizeof(float));
		if (!part)
			return DS_ERR_NOMEM;
	}
	struct fast_mm_multi mu = {.n_mm = n_mm};
	for (int i = 0; i < n_mm; i++) {
		int n_tiles = (mm[i].N + FAST_NT - 1) / FAST_NT;
		mu.mm[i] = (struct fast_mm){.c = c,
		                            .x = x,
		                            .w = mm[i].w,
		                            .y = mm[i].y,
		                            .M = M,
		                            .N = mm[i].N,
		                            .K = K,
		                            .splits = splits,
		                            .n_tiles = n_tiles,
		                            .row_blocks = row_blocks,
		                            .part = part};
		if (part)
			part += (size_t)splits * M * mm[i].N;
		mu.task0[i + 1] = mu.task0[i] + n_tiles * splits * row_blocks;
	}
	ds_threadpool_run(c->tp, mu.task0[n_mm], fast_mm_task_pick(c), &mu);
	if (splits > 1) {
		for (int i = 0; i < n_mm; i++) {
			size_t n = (size_t)M * mm[i].N;
			mu.task0[i + 1] =
			    mu.task0[i] + (int)((n + FAST_REDUCE_CHUNK - 1) / FAST_REDUCE_CHUNK);
		}
		ds_threadpool_run(c->tp, mu.task0[n_mm], fast_reduce_task, &mu);
	}
	return DS_OK;
}

/* ---- rmsnorm ---- */

static enum ds_status fast_rmsnorm(struct ds_cpu_ctx *c, const float *x, const uint16_t *w,
                                   float *y, int M, int n, float eps)
{
	for (int m = 0; m < M; m++) {
		const float *xr = x + (size_t)m * n;
		float *yr = y + (size_t)m * n;
		float acc[8] = {0}, ss = 0.0f;
		int i = 0;
		for (; i + 8 <= n; i += 8)
			for (int l = 0; l < 8; l++)
				acc[l] += xr[i + l] * xr[i + l];
		for (int l = 0; l < 8; l++)
			ss += acc[l];
		for (; i < n; i++)
			ss += xr[i] * xr[i];
		float inv = 1.0f / sqrtf(ss / (float)n + eps);
		if (c->wtype == DS_DTYPE_F32)
			for (int i = 0; i < n; i++)
				yr[i] = (xr[i] * inv) * ds_model_w_f32(w)[i];
		else
			for (int i = 0; i < n; i++)
				yr[i] = (xr[i] * inv) * ds_bf16_to_f32(w[i]);
	}
	return DS_OK;
}

/* ---- attention (flash-decoding with a batch-chosen split count) ---- */

struct fast_attn {
	struct ds_cpu_ctx *c;
	const struct ds_cpu_pass *p;
	int l;
	const float *q;
	float *out;
	float *part; /* (M, n_head, splits, head_dim + 2): o[hd], max, sum */
	int splits;
};

static inline DS_CPU_INLINE void fast_attn_task(void *arg, int task, int thread)
{
	struct fast_attn *a = arg;
	struct ds_cpu_ctx *c = a->c;
	const struct ds_model_config *cfg = &c->cfg;
	const int hd = cfg->head_dim, nkv = cfg->n_kv_head, G = cfg->n_head / nkv;
	const int qd = cfg->n_head * hd, ns = a->splits;
	int split = task % ns, rest = task / ns;
	int kvh = rest % nkv, m = rest / nkv;
	int len = a->p->row_pos[m] + 1;
	int j0 = (int)((int64_t)len * split / ns), j1 = (int)((int64_t)len * (split + 1) / ns);
	const int32_t *blocks = a->p->b->seqs[a->p->row_seq[m]].blocks;
	const float scale = 1.0f / sqrtf((float)hd);
	float *kc = ds_cpu_thread_buf(c, thread); /* (FAST_KB, hd) block keys */
	float *vc = kc + (size_t)FAST_KB * hd;    /* (FAST_KB, hd) block values */
	float *sc = vc + (size_t)FAST_KB * hd;    /* (FAST_KB) scores */

	for (int g = 0; g < G; g++) {
		int h = kvh * G + g;
		float *pt = a->part + (((size_t)m * cfg->n_head + h) * ns + split) * (hd + 2);
		for (int d = 0; d < hd; d++)
			pt[d] = 0.0f;
		pt[hd] = -INFINITY;
		pt[hd + 1] = 0.0f;
	}
	/* blocks of FAST_KB keys from the split's own start: one rescale per block */
	for (int b0 = j0; b0 < j1; b0 += FAST_KB) {
		int n = DS_MIN(FAST_KB, j1 - b0);
		for (int j = 0; j < n; j++) {
			ds_cpu_row_f32(kc + (size_t)j * hd, c->kvtype,
			               ds_cpu_kv_at(c, c->kv_k, a->l, blocks, b0 + j),
			               (size_t)kvh * hd, hd);
			ds_cpu_row_f32(vc + (size_t)j * hd, c->kvtype,
			               ds_cpu_kv_at(c, c->kv_v, a->l, blocks, b0 + j),
			               (size_t)kvh * hd, hd);
		}
		for (int g = 0; g < G; g++) {
			int h = kvh * G + g;
			float *pt =
			    a->part + (((size_t)m * cfg->n_head + h) * ns + split) * (hd + 2);
			const float *q = a->q + (size_t)m * qd + (size_t)h * hd;
			float bm = pt[hd];
			for (int j = 0; j < n; j++) {
				sc[j] = fast_dot(q, kc + (size_t)j * hd, hd) * scale;
				bm = sc[j] > bm ? sc[j] : bm;
			}
			if (bm > pt[hd]) { /* rescale the running sums to the new max */
				float f = expf(pt[hd] - bm);
				for (int d = 0; d < hd; d++)
					pt[d] *= f;
				pt[hd + 1] *= f;
				pt[hd] = bm;
			}
			float sum = pt[hd + 1];
			for (int j = 0; j < n; j++) {
				float e = expf(sc[j] - bm);
				sum += e;
				const float *v = vc + (size_t)j * hd;
				for (int d = 0; d < hd; d++)
					pt[d] += e * v[d];
			}
			pt[hd + 1] = sum;
		}
	}
}

FAST_VARIANTS(fast_attn_task)

static void fast_attn_merge(void *arg, int task, int thread)
{
	(void)thread;
	struct fast_attn *a = arg;
	const int hd = a->c->cfg.head_dim, ns = a->splits;
	const float *pt = a->part + (size_t)task * ns * (hd + 2);
	float *o = a->out + (size_t)task * hd; /* task = m * n_head + h */
	float mx = -INFINITY;
	for (int s = 0; s < ns; s++)
		mx = pt[(size_t)s * (hd + 2) + hd] > mx ? pt[(size_t)s * (hd + 2) + hd] : mx;
	float sum = 0.0f;
	for (int d = 0; d < hd; d++)
		o[d] = 0.0f;
	for (int s = 0; s < ns; s++) {
		const float *ps = pt + (size_t)s * (hd + 2);
		if (ps[hd + 1] == 0.0f)
			continue; /* empty split */
		float f = expf(ps[hd] - mx);
		sum += ps[hd + 1] * f;
		for (int d = 0; d < hd; d++)
			o[d] += ps[d] * f;
	}
	for (int d = 0; d < hd; d++)
		o[d] /= sum;
}

static enum ds_status fast_attention(struct ds_cpu_ctx *c, const struct ds_cpu_pass *p, int l,
                                     const float *q, float *out)
{
	const struct ds_model_config *cfg = &c->cfg;
	/* enough (row, kv head, split) work items for about 4 per thread, at most 16 splits */
	int items = p->M * cfg->n_kv_head;
	int splits = DS_MIN(16, DS_MAX(1, (4 * DS_MAX(c->n_threads, 2) + items - 1) / items));
	struct fast_attn a = {.c = c, .p = p, .l = l, .q = q, .out = out, .splits = splits};
	size_t n = (size_t)p->M * cfg->n_head * splits * (cfg->head_dim + 2);
	a.part = ds_cpu_ws_get(c, DS_WS_PART, n * sizeof(float));
	if (!a.part)
		return DS_ERR_NOMEM;
	ds_threadpool_run(c->tp, items * splits, fast_attn_task_pick(c), &a);
	ds_threadpool_run(c->tp, p->M * cfg->n_head, fast_attn_merge, &a);
	return DS_OK;
}

size_t ds_cpu_fast_thread_floats(const struct ds_model_config *cfg)
{
	size_t kmax = (size_t)DS_MAX(DS_MAX(cfg->hidden, ds_model_q_dim(cfg)), cfg->ffn);
	return DS_MAX((size_t)FAST_NT * kmax, (2 * (size_t)cfg->head_dim + 1) * FAST_KB);
}

const struct ds_cpu_kernels ds_cpu_fast_kernels = {
    .matmul = fast_matmul,
    .rmsnorm = fast_rmsnorm,
    .attention = fast_attention,
};
