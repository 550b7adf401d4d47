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
 * So the same sequence gets different bits in different batches; the reference path
 * (refpath/cpu_ref.c) is the one that is invariant. */
#include "cpu_internal.h"

#include <math.h>

#define FAST_LANES 8
#define FAST_NT 16  /* output columns per task */
#define FAST_MR 4   /* rows per register block */
#define FAST_MB 64  /* rows per task when the row count is large */

static inline float fast_tree8(const float *a)
{
	return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

static inline float fast_dot(const float *x, const float *w, int n)
{
	float acc[FAST_LANES] = {0};
	int k = 0;
	for (; k + FAST_LANES <= n; k += FAST_LANES)
		for (int l = 0; l < FAST_LANES; l++)
			acc[l] += x[k + l] * w[k + l];
	float s = fast_tree8(acc);
	for (; k < n; k++)
		s += x[k] * w[k];
	return s;
}

static inline void fast_dot_mr(const float *x, size_t ldx, const float *w, int n, float *out)
{
	float acc[FAST_MR][FAST_LANES] = {{0}};
	int k = 0;
	for (; k + FAST_LANES <= n; k += FAST_LANES)
		for (int r = 0; r < FAST_MR; r++)
			for (int l = 0; l < FAST_LANES; l++)
				acc[r][l] += x[(size_t)r * ldx + k + l] * w[k + l];
	for (int r = 0; r < FAST_MR; r++) {
		float s = fast_tree8(acc[r]);
		for (int kk = k; kk < n; kk++)
			s += x[(size_t)r * ldx + kk] * w[kk];
		out[r] = s;
	}
}

/* ---- matmul ---- */

struct fast_mm {
	struct ds_cpu_ctx *c;
	const float *x;
	const uint16_t *w;
	float *y;     /* (M, N) when splits == 1 */
	float *part;  /* (splits, M, N) partial sums otherwise */
	int M, N, K;
	int splits, n_tiles, row_blocks;
};

static void fast_mm_task(void *arg, int task, int thread)
{
	struct fast_mm *a = arg;
	int tile = task % a->n_tiles, rest = task / a->n_tiles;
	int split = rest % a->splits, rb = rest / a->splits;
	int n0 = tile * FAST_NT, nt = DS_MIN(FAST_NT, a->N - n0);
	int k0 = (int)((int64_t)a->K * split / a->splits);
	int k1 = (int)((int64_t)a->K * (split + 1) / a->splits), kl = k1 - k0;
	int m0 = rb * FAST_MB, m1 = a->row_blocks > 1 ? DS_MIN(a->M, m0 + FAST_MB) : a->M;
	float *y = a->splits > 1 ? a->part + (size_t)split * a->M * a->N : a->y;

	float *wt = ds_cpu_thread_buf(a->c, thread); /* (nt, kl) */
	for (int j = 0; j < nt; j++) {
		const uint16_t *src = a->w + (size_t)(n0 + j) * a->K + k0;
		float *dst = wt + (size_t)j * kl;
		for (int k = 0; k < kl; k++)
			dst[k] = ds_bf16_to_f32(src[k]);
	}
	int m = m0;
	float out[FAST_MR];
	for (; m + FAST_MR <= m1; m += FAST_MR) {
		const float *xm = a->x + (size_t)m * a->K + k0;
		for (int j = 0; j < nt; j++) {
			fast_dot_mr(xm, (size_t)a->K, wt + (size_t)j * kl, kl, out);
			for (int r = 0; r < FAST_MR; r++)
				y[(size_t)(m + r) * a->N + n0 + j] = out[r];
		}
	}
	for (; m < m1; m++)
		for (int j = 0; j < nt; j++)
			y[(size_t)m * a->N + n0 + j] =
				fast_dot(a->x + (size_t)m * a->K + k0, wt + (size_t)j * kl, kl);
}

struct fast_reduce {
	const float *part;
	float *y;
	size_t n;  /* M * N */
	int splits;
};

static void fast_reduce_task(void *arg, int task, int thread)
{
	(void)thread;
	struct fast_reduce *a = arg;
	size_t chunk = 4096, i0 = (size_t)task * chunk, i1 = DS_MIN(a->n, i0 + chunk);
	for (size_t i = i0; i < i1; i++) {
		float s = a->part[i];
		for (int sp = 1; sp < a->splits; sp++)
			s += a->part[(size_t)sp * a->n + i];
		a->y[i] = s;
	}
}

static enum ds_status fast_matmul(struct ds_cpu_ctx *c, const float *x, const uint16_t *w,
				  float *y, int M, int N, int K)
{
	int n_tiles = (N + FAST_NT - 1) / FAST_NT;
	/* split K when the column tiles alone would leave threads idle or the tiles too thin */
	int splits = 1;
	if (M <= 4)
		splits = DS_MAX(4, c->n_threads);
	else if (M <= 16)
		splits = 2;
	while (splits > 1 && K / splits < 64)
		splits--;
	int row_blocks = M > 2 * FAST_MB ? (M + FAST_MB - 1) / FAST_MB : 1;
	struct fast_mm a = {.c = c, .x = x, .w = w, .y = y, .M = M, .N = N, .K = K,
			    .splits = splits, .n_tiles = n_tiles, .row_blocks = row_blocks};
	if (splits > 1) {
		a.part = ds_cpu_ws_get(c, DS_WS_PART, (size_t)splits * M * N * sizeof(float));
		if (!a.part)
			return DS_ERR_NOMEM;
	}
	ds_threadpool_run(c->tp, n_tiles * splits * row_blocks, fast_mm_task, &a);
	if (splits > 1) {
		struct fast_reduce r = {.part = a.part, .y = y, .n = (size_t)M * N, .splits = splits};
		ds_threadpool_run(c->tp, (int)((r.n + 4095) / 4096), fast_reduce_task, &r);
	}
	return DS_OK;
}

/* ---- rmsnorm ---- */

static enum ds_status fast_rmsnorm(struct ds_cpu_ctx *c, const float *x, const uint16_t *w,
				   float *y, int M, int n, float eps)
{
	(void)c;
	for (int m = 0; m < M; m++) {
		const float *xr = x + (size_t)m * n;
		float *yr = y + (size_t)m * n;
		float inv = 1.0f / sqrtf(fast_dot(xr, xr, n) / (float)n + eps);
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

static void fast_attn_task(void *arg, int task, int thread)
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
	float *kv = ds_cpu_thread_buf(c, thread); /* (2, hd) */

	for (int g = 0; g < G; g++) {
		int h = kvh * G + g;
		float *pt = a->part + (((size_t)m * cfg->n_head + h) * ns + split) * (hd + 2);
		for (int d = 0; d < hd; d++)
			pt[d] = 0.0f;
		pt[hd] = -INFINITY;
		pt[hd + 1] = 0.0f;
	}
	for (int j = j0; j < j1; j++) {
		const uint16_t *kr = ds_cpu_kv_at(c, c->kv_k, a->l, blocks, j) + kvh * hd;
		const uint16_t *vr = ds_cpu_kv_at(c, c->kv_v, a->l, blocks, j) + kvh * hd;
		for (int d = 0; d < hd; d++) {
			kv[d] = ds_bf16_to_f32(kr[d]);
			kv[hd + d] = ds_bf16_to_f32(vr[d]);
		}
		for (int g = 0; g < G; g++) {
			int h = kvh * G + g;
			float *pt = a->part + (((size_t)m * cfg->n_head + h) * ns + split) * (hd + 2);
			float s = fast_dot(a->q + (size_t)m * qd + (size_t)h * hd, kv, hd) * scale;
			float mx = pt[hd];
			if (s > mx) { /* rescale the running sums to the new max */
				float f = expf(mx - s);
				for (int d = 0; d < hd; d++)
					pt[d] *= f;
				pt[hd + 1] *= f;
				pt[hd] = mx = s;
			}
			float e = expf(s - mx);
			pt[hd + 1] += e;
			for (int d = 0; d < hd; d++)
				pt[d] += e * kv[hd + d];
		}
	}
}

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
	ds_threadpool_run(c->tp, items * splits, fast_attn_task, &a);
	ds_threadpool_run(c->tp, p->M * cfg->n_head, fast_attn_merge, &a);
	return DS_OK;
}

size_t ds_cpu_fast_thread_floats(const struct ds_model_config *cfg)
{
	size_t kmax = (size_t)DS_MAX(DS_MAX(cfg->hidden, ds_model_q_dim(cfg)), cfg->ffn);
	return DS_MAX((size_t)FAST_NT * kmax, 2 * (size_t)cfg->head_dim);
}

const struct ds_cpu_kernels ds_cpu_fast_kernels = {
	.matmul = fast_matmul,
	.rmsnorm = fast_rmsnorm,
	.attention = fast_attention,
};
