/* cuda_ref.c - the CUDA reference path: our own invariant GEMM and fixed-tile attention.
 *
 * Nothing here looks at the batch to choose how to reduce.
 *  - GEMM: every variant (kernels/gemm_ref*.cu) computes a row the same way for any M: one
 *    fixed tile, each output element accumulating its K slices in order, and a fixed number
 *    S of K splits combined in one fixed order. S is part of the reference path's definition
 *    and comes from the weight's (N, K) only (refpath/ref_gemm_table.h). Variants with the
 *    same S differ only in tiling, pipelining and loads, so they give the same bytes; a
 *    self-check at init verifies that (bytes compared on a random problem with an uneven K)
 *    and only variants that passed may stand in for the table's variant. Among those, the
 *    fastest is picked per (M bucket, N, K) by timing on first use: that choice
 *    may follow M precisely because it cannot change a bit (DS_REF_GEMM_AUTOTUNE=0: never).
 *  - Attention uses 64-position tiles aligned to absolute positions; whether the tiles are
 *    spread over blocks (then merged by a combine kernel) or walked by one block depends only
 *    on whether the partials fit the workspace, and both give the same bits because the merge
 *    order and formula are the same (kernels/attn.cu).
 * Passes of up to 512 rows (verify windows, decode in invariant mode) are padded to a bucket
 * (cuda_internal.h: powers of two to 256, then every 64 rows) and replayed from per-bucket CUDA
 * graphs; padding rows are per-row work only, so they change nothing for the real rows. */
#include "cuda_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- GEMM variants ---- */

#define CHECK_M 67
#define CHECK_N 264
#define CHECK_K 1088 /* 17 tiles of 64: uneven for S = 2 and 4 */

/* Each variant's fused gate/up epilogue against its plain output followed by ds_k_silu_mul
 * on the self-check problem (W's CHECK_N rows taken as gate and up halves: F = CHECK_N / 2,
 * not a multiple of any tile's half, so the last tile has gate rows past F): r->silu_ok. */
static enum ds_status ref_gemm_selfcheck_silu(struct ds_cuda_ctx *c, const uint16_t *A,
                                              const uint16_t *W, float *C, struct ds_err *err)
{
	struct ds_cuda_ref *r = &c->ref;
	int F = CHECK_N / 2;
	size_t nh = (size_t)CHECK_M * F;
	uint16_t *H = NULL, *want = malloc(nh * 2), *got = malloc(nh * 2);
	enum ds_status rv = DS_OK;
	if (!want || !got) {
		rv = ds_errf(err, DS_ERR_NOMEM, "cuda ref: out of memory for the GEMM self-check");
		goto fail;
	}
	DS_CUDA_GOTO(cudaMalloc((void **)&H, nh * 2), err, rv);
	for (int v = 0; v < DS_K_GEMM_REF_N_VARIANTS; v++) {
		r->silu_ok[v] = false;
		if (ds_k_gemm_ref_variant(v, A, W, C, CHECK_M, CHECK_N, CHECK_K, c->stream) !=
		        cudaSuccess ||
		    ds_k_silu_mul(C, CHECK_M, F, H, c->stream) != cudaSuccess) {
			cudaGetLastError();
			continue;
		}
		DS_CUDA_GOTO(cudaMemcpyAsync(want, H, nh * 2, cudaMemcpyDeviceToHost, c->stream),
		             err, rv);
		DS_CUDA_GOTO(cudaMemsetAsync(H, 0xff, nh * 2, c->stream), err, rv);
		if (ds_k_gemm_ref_silu_variant(v, A, W, H, CHECK_M, F, CHECK_K, c->stream) !=
		    cudaSuccess) {
			cudaGetLastError(); /* split-K, or refused on this device */
			continue;
		}
		DS_CUDA_GOTO(cudaMemcpyAsync(got, H, nh * 2, cudaMemcpyDeviceToHost, c->stream),
		             err, rv);
		DS_CUDA_GOTO(cudaStreamSynchronize(c->stream), err, rv);
		r->silu_ok[v] = memcmp(want, got, nh * 2) == 0;
	}
fail:
	if (H)
		cudaFree(H);
	free(want);
	free(got);
	return rv;
}

/* Runs every variant on one random problem and records which give the same bytes as the
 * first variant with the same split count; then checks the fused gate/up epilogues. */
static enum ds_status ref_gemm_selfcheck(struct ds_cuda_ctx *c, struct ds_err *err)
{
	struct ds_cuda_ref *r = &c->ref;
	size_t na = (size_t)CHECK_M * CHECK_K, nw = (size_t)CHECK_N * CHECK_K;
	size_t nc = (size_t)CHECK_M * CHECK_N;
	uint16_t *A = NULL, *W = NULL;
	float *C = NULL;
	float *base = malloc(nc * sizeof(float)), *got = malloc(nc * sizeof(float));
	enum ds_status rv = DS_OK;
	if (!base || !got) {
		rv = ds_errf(err, DS_ERR_NOMEM, "cuda ref: out of memory for the GEMM self-check");
		goto fail;
	}
	DS_CUDA_GOTO(cudaMalloc((void **)&A, na * sizeof(uint16_t)), err, rv);
	DS_CUDA_GOTO(cudaMalloc((void **)&W, nw * sizeof(uint16_t)), err, rv);
	DS_CUDA_GOTO(cudaMalloc((void **)&C, nc * sizeof(float)), err, rv);
	DS_CUDA_GOTO(ds_k_synth_fill(A, na, 0, 0x73656c66ull, 1, 1.0f, 0.0f, c->stream), err, rv);
	DS_CUDA_GOTO(ds_k_synth_fill(W, nw, 0, 0x73656c66ull, 2, 0.05f, 0.0f, c->stream), err, rv);
	for (int rep = 0; rep < DS_K_GEMM_REF_N_VARIANTS; rep++) {
		int s = ds_k_gemm_ref_variant_splits(rep);
		bool first = true;
		for (int v = 0; v < rep; v++)
			first = first && ds_k_gemm_ref_variant_splits(v) != s;
		if (!first)
			continue;
		/* rep is the first variant with S = s: the family's yardstick */
		DS_CUDA_GOTO(ds_k_gemm_ref_variant(rep, A, W, C, CHECK_M, CHECK_N, CHECK_K, c->stream),
		             err, rv);
		DS_CUDA_GOTO(cudaMemcpyAsync(base, C, nc * sizeof(float), cudaMemcpyDeviceToHost,
		                             c->stream),
		             err, rv);
		DS_CUDA_GOTO(cudaStreamSynchronize(c->stream), err, rv);
		r->same_bits[rep] = true;
		for (int v = rep + 1; v < DS_K_GEMM_REF_N_VARIANTS; v++) {
			if (ds_k_gemm_ref_variant_splits(v) != s)
				continue;
			DS_CUDA_GOTO(cudaMemsetAsync(C, 0xff, nc * sizeof(float), c->stream), err, rv);
			if (ds_k_gemm_ref_variant(v, A, W, C, CHECK_M, CHECK_N, CHECK_K, c->stream) !=
			    cudaSuccess) {
				cudaGetLastError(); /* refused on this device: never a stand-in */
				continue;
			}
			DS_CUDA_GOTO(cudaMemcpyAsync(got, C, nc * sizeof(float),
			                             cudaMemcpyDeviceToHost, c->stream),
			             err, rv);
			DS_CUDA_GOTO(cudaStreamSynchronize(c->stream), err, rv);
			r->same_bits[v] = memcmp(base, got, nc * sizeof(float)) == 0;
		}
	}
	rv = ref_gemm_selfcheck_silu(c, A, W, C, err);
fail:
	if (A)
		cudaFree(A);
	if (W)
		cudaFree(W);
	if (C)
		cudaFree(C);
	free(base);
	free(got);
	return rv;
}

enum ds_status ds_cuda_ref_init(struct ds_cuda_ctx *c, struct ds_err *err)
{
	struct ds_cuda_ref *r = &c->ref;
	enum ds_status rv = ds_ref_gemm_table_init(&r->table, getenv(DS_REF_GEMM_TABLE_ENV),
	                                           DS_K_GEMM_REF_N_VARIANTS, err);
	if (rv != DS_OK)
		return rv;
	const char *a = getenv("DS_REF_GEMM_AUTOTUNE");
	r->autotune = !(a && strcmp(a, "0") == 0);
	const char *lg = getenv("DS_REF_GEMM_LOG");
	r->log = lg && strcmp(lg, "1") == 0;
	const char *bk = getenv("DS_REF_GRAPH_BUCKETS"), *mx = getenv("DS_REF_GRAPH_MAX");
	bool pow2 = bk && strcmp(bk, "pow2") == 0;
	int top = mx ? atoi(mx) : DS_CUDA_REF_GRAPH_MAX;
	r->n_buckets = 0;
	for (int n = DS_CUDA_REF_GRAPH_MIN; n <= DS_MIN(top, DS_CUDA_REF_GRAPH_MAX);
	     n = n < DS_CUDA_REF_GRAPH_FINE || pow2 ? 2 * n : n + DS_CUDA_REF_GRAPH_STEP) {
		DS_ASSERT(r->n_buckets < DS_CUDA_REF_BUCKETS);
		r->bucket_rows[r->n_buckets++] = n;
	}
	return ref_gemm_selfcheck(c, err);
}

int ds_cuda_ref_bucket(const struct ds_cuda_ctx *c, int n)
{
	for (int i = 0; i < c->ref.n_buckets; i++)
		if (n <= c->ref.bucket_rows[i])
			return i;
	return -1;
}

/* One reference GEMM launch of a given variant, for the autotuning timer. */
struct ref_gemm_call {
	int v, M, N, K;
	const uint16_t *A, *W;
	void *C;   /* fp32 C, or for silu the bf16 H (M, N / 2) */
	bool silu; /* ds_k_gemm_ref_silu_variant with F = N / 2 */
};

static cudaError_t ref_gemm_call_launch(struct ds_cuda_ctx *c, void *arg)
{
	const struct ref_gemm_call *x = arg;
	if (x->silu)
		return ds_k_gemm_ref_silu_variant(x->v, x->A, x->W, x->C, x->M, x->N / 2, x->K,
		                                  c->stream);
	return ds_k_gemm_ref_variant(x->v, x->A, x->W, x->C, x->M, x->N, x->K, c->stream);
}

/* Milliseconds of one launch of call x with variant v on the call's own buffers (best of four
 * after a warm-up, each after the fast path's L2 flush as in its own GEMM timing, since a pass
 * never finds a layer's weights in L2; INFINITY when it is refused). The real call overwrites C
 * afterwards. With best of two and no flush, the 256-row decode pass's down projection took
 * 1.99 ms in one H200 call and 2.17 in another (bench/results/gpu-20261130-e2b8d82-fastgu,
 * gpu-20261130-0a7150f-bn224; the second picked tma64x128s9g, the first's picks were not
 * printed): a timer this short leaves the pick to chance where variants are close. */
static float ref_gemm_time(struct ds_cuda_ctx *c, int v, struct ref_gemm_call x)
{
	x.v = v;
	return ds_cuda_time_best(c, ref_gemm_call_launch, &x, 5, c->fast.workspace,
	                         c->fast.ws_bytes);
}

/* Whether variant v may stand in for base: v itself, or a variant the self-check found
 * bit-identical with the same split count; for the fused call, v's fused epilogue must also
 * have passed its check. */
static bool ref_gemm_stands_in(const struct ds_cuda_ref *r, int base, int v, bool silu)
{
	if (silu && !r->silu_ok[v])
		return false;
	return v == base || (r->same_bits[base] && r->same_bits[v] &&
	                     ds_k_gemm_ref_variant_splits(v) == ds_k_gemm_ref_variant_splits(base));
}

/* The variant for call x: the table's for (N, K), or the fastest of its bit-identical family
 * for this M bucket (timed on first use outside graph capture, then cached). For the fused
 * gate/up call (x.silu), only variants whose fused epilogue passed the self-check: the first
 * such stand-in while not timed, -1 when there is none (the caller runs the plain GEMM). */
static int ref_gemm_variant(struct ds_cuda_ctx *c, struct ref_gemm_call x)
{
	struct ds_cuda_ref *r = &c->ref;
	int M = x.M, N = x.N, K = x.K;
	int base = ds_ref_gemm_table_variant(&r->table, N, K);
	if (x.silu) {
		int first = -1;
		for (int v = 0; v < DS_K_GEMM_REF_N_VARIANTS && first < 0; v++)
			if (ref_gemm_stands_in(r, base, v, true))
				first = v;
		if (first < 0 || !r->autotune)
			return first;
		base = first; /* the untimed choice and the timing's yardstick */
	}
	if (!r->autotune || !r->same_bits[base])
		return base;
	/* the M bucket: the graph bucket's rows (so a padded pass is timed at its own M: a
	 * 64-row tile may win at 448 rows where a 128-row one won at 512), else a power of two */
	int bi = ds_cuda_ref_bucket(c, M);
	int mb = bi >= 0 ? r->bucket_rows[bi] : 1;
	while (bi < 0 && mb < M)
		mb *= 2;
	for (int i = 0; i < r->n_picks; i++)
		if (r->picks[i].mb == mb && r->picks[i].n == N && r->picks[i].k == K &&
		    r->picks[i].silu == x.silu)
			return r->picks[i].variant;
	enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
	cudaStreamIsCapturing(c->stream, &cap);
	if (cap != cudaStreamCaptureStatusNone)
		return base;
	int best = base;
	float bt = ref_gemm_time(c, base, x);
	for (int v = 0; v < DS_K_GEMM_REF_N_VARIANTS; v++) {
		if (v == base || !ref_gemm_stands_in(r, base, v, x.silu))
			continue;
		float t = ref_gemm_time(c, v, x);
		if (t < bt) {
			bt = t;
			best = v;
		}
	}
	if (r->log)
		fprintf(stderr, "ref gemm pick: M bucket %d N=%d K=%d%s: v%d %.4f ms (table v%d)\n",
		        mb, N, K, x.silu ? " silu" : "", best, (double)bt, base);
	int i = r->n_picks < DS_CUDA_REF_PICKS ? r->n_picks++ : r->next_evict;
	if (i == r->next_evict && r->n_picks == DS_CUDA_REF_PICKS)
		r->next_evict = (r->next_evict + 1) % DS_CUDA_REF_PICKS;
	r->picks[i] = (struct ds_cuda_ref_pick){mb, N, K, best, x.silu};
	return best;
}

static enum ds_status ref_gemm(struct ds_cuda_ctx *c, const uint16_t *A, const uint16_t *W,
                               float *C, int M, int N, int K, struct ds_err *err)
{
	if (M <= 0)
		return DS_OK;
	int v = ref_gemm_variant(c, (struct ref_gemm_call){0, M, N, K, A, W, C, false});
	DS_CUDA_TRY(ds_k_gemm_ref_variant(v, A, W, C, M, N, K, c->stream), err);
	return DS_OK;
}

/* The gate/up GEMM with SiLU*mul in its epilogue (the bytes of ref_gemm, then ds_k_silu_mul:
 * the SiLU kernel and the fp32 gate/up buffer's write and read are saved). */
static enum ds_status ref_gemm_gu_silu(struct ds_cuda_ctx *c, const uint16_t *A, const uint16_t *W,
                                       uint16_t *H, int M, int F, int K, bool *done,
                                       struct ds_err *err)
{
	*done = false;
	if (M <= 0)
		return DS_OK;
	struct ref_gemm_call x = {0, M, 2 * F, K, A, W, H, true};
	int v = ref_gemm_variant(c, x);
	if (v < 0)
		return DS_OK;
	DS_CUDA_TRY(ds_k_gemm_ref_silu_variant(v, A, W, H, M, F, K, c->stream), err);
	*done = true;
	return DS_OK;
}

/* The tensor-core kernel (ds_cuda_attn_mma) when c->ref_attn_mma (head_dim 64 or 128 and
 * not DS_REF_ATTN=old; fixed at init, never by the pass). Else the CUDA-core kernel: its
 * tiles are spread over blocks when the partials fit the workspace, else one block walks them
 * all (same bits). n_split < 0 (graph capture, where the grid may not depend on the
 * positions): plan for the longest context. */
static enum ds_status ref_attention(struct ds_cuda_ctx *c, const struct ds_cuda_pass *p,
                                    const uint16_t *kv, int n_split, struct ds_err *err)
{
	if (c->ref_attn_mma)
		return ds_cuda_attn_mma(c, p, kv, n_split, err);
	int top = n_split < 0 ? c->cfg.max_pos - 1 : p->max_pos;
	int chunks = top / DS_K_ATTN_TILE + 1;
	size_t need = (size_t)p->T * c->cfg.n_head * chunks * (c->cfg.head_dim + 2);
	int split = need <= c->part_floats ? chunks : 0;
	DS_CUDA_TRY(ds_k_attn_ref(c->q, kv, ds_cuda_tokmeta(c), p->T, ds_cuda_dims(c), split,
	                          c->part, c->att, c->stream),
	            err);
	return DS_OK;
}

const struct ds_cuda_path_ops ds_cuda_ref_ops = {
    .gemm = ref_gemm,
    .attention = ref_attention,
    .gemm_gu_silu = ref_gemm_gu_silu,
};

/* ---- graphs of padded reference passes ---- */

enum ds_status ds_cuda_ref_graphed(struct ds_cuda_ctx *c, struct ds_cuda_pass *p,
                                   struct ds_err *err)
{
	struct ds_cuda_ref *r = &c->ref;
	int bi = ds_cuda_ref_bucket(c, DS_MAX(p->T, p->R));
	DS_ASSERT(bi >= 0);
	int B = r->bucket_rows[bi];
	DS_ASSERT(B <= c->cap_tokens && B <= c->cap_rows);
	for (int t = p->T; t < B; t++) {
		c->hm.ids[t] = 0;
		c->hm.pos[t] = -1;
		c->hm.seq[t] = 0;
	}
	for (int o = p->R; o < B; o++) {
		c->hm.out_tok[o] = -1;
		memset(&c->hm.sp[o], 0, sizeof(c->hm.sp[o]));
		c->hm.sp[o].top_p = 1.0f;
	}
	struct ds_cuda_pass pb = *p;
	pb.T = pb.R = B;
	return ds_cuda_pass_graphed(c, &ds_cuda_ref_ops, &pb, -1, true, &r->graph[bi], &r->warm[bi],
	                            err);
}

void ds_cuda_ref_free(struct ds_cuda_ctx *c)
{
	for (int i = 0; i < DS_CUDA_REF_BUCKETS; i++)
		if (c->ref.graph[i])
			cudaGraphExecDestroy(c->ref.graph[i]);
	memset(&c->ref, 0, sizeof(c->ref));
}
