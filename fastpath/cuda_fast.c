/* cuda_fast.c - the CUDA fast path: per-shape autotuned GEMMs (tensor-core skinny GEMM, CUDA-core
 * GEMV and cuBLASLt), flash-decoding with an occupancy-chosen split, and one CUDA graph per
 * decode batch-size bucket.
 *
 * Everything here is free to depend on the batch: the GEMM for up to 64 rows is whichever of the
 * skinny GEMM's variants, the GEMV (M <= 4) and cuBLASLt's top heuristics ran fastest on first
 * use of its (M bucket, N, K) (timed outside graph capture, L2 flushed before each run, so
 * weights stream from HBM as they do in a decode step); larger GEMMs use cuBLASLt, autotuned
 * per M up to 256. A candidate is only picked if its result matches cuBLASLt's on that first
 * call (a safety net for kernels new to a device). For up to 8 rows the down projection may
 * take a skinny variant with SiLU*mul fused into its loads (gemm_silu), if that beats the
 * silu_mul kernel plus the plain choice. The attention split count follows the number of
 * rows. That is the point of the fast path (DESIGN.md section 1); the reference path
 * (refpath/cuda_ref.c) is the one that must not. Decode batches run as CUDA graphs per bucket,
 * tuned on the whole step (fastpath/cuda_fast_graphs.c). */
#include "cuda_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define WORKSPACE_BYTES ((size_t)64 << 20)

#define LT_TRY(expr, err)                                                                          \
	do {                                                                                       \
		cublasStatus_t ds_lt_s_ = (expr);                                                  \
		if (ds_lt_s_ != CUBLAS_STATUS_SUCCESS)                                             \
			return ds_errf((err), DS_ERR_DEVICE, "cublasLt: %s: status %d (%s:%d)",    \
			               #expr, (int)ds_lt_s_, __FILE__, __LINE__);                  \
	} while (0)

/* Cached per-shape descriptors and algorithm. */
struct lt_plan {
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t a, b, cd;
};

/* The cache lives in the algo slots of struct ds_cuda_fast; plans beside them. */
static struct lt_plan *plan_of(struct ds_cuda_ctx *c, int i);

static void plan_destroy(struct lt_plan *p)
{
	if (p->op)
		cublasLtMatmulDescDestroy(p->op);
	if (p->a)
		cublasLtMatrixLayoutDestroy(p->a);
	if (p->b)
		cublasLtMatrixLayoutDestroy(p->b);
	if (p->cd)
		cublasLtMatrixLayoutDestroy(p->cd);
	memset(p, 0, sizeof(*p));
}

/* Row-major C (M, N) = A (M, K) . W (N, K)^T is column-major C^T (N, M) = W^T' . A^T: W is a
 * column-major (K, N) matrix used transposed, A a column-major (K, M) matrix; both with leading
 * dimension ld (K, or more for a K slice of wider operands). */
static enum ds_status plan_make_ld(struct lt_plan *p, int M, int N, int K, int ld,
                                   struct ds_err *err)
{
	cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
	LT_TRY(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), err);
	LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)),
	       err);
	LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)),
	       err);
	LT_TRY(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, (uint64_t)K, (uint64_t)N, ld), err);
	LT_TRY(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, (uint64_t)K, (uint64_t)M, ld), err);
	LT_TRY(cublasLtMatrixLayoutCreate(&p->cd, CUDA_R_32F, (uint64_t)N, (uint64_t)M, N), err);
	return DS_OK;
}

static enum ds_status plan_make(struct lt_plan *p, int M, int N, int K, struct ds_err *err)
{
	return plan_make_ld(p, M, N, K, K, err);
}

/* The split-K partials form: s GEMMs of K / s each (slice j: columns j * K / s.. of W and A)
 * as one strided batch, partial j into C + j * M * N. */
static enum ds_status plan_make_parts(struct lt_plan *p, int M, int N, int K, int s,
                                      struct ds_err *err)
{
	int32_t n = s;
	int64_t kc = K / s, mn = (int64_t)M * N;
	enum ds_status rv = plan_make_ld(p, M, N, K / s, K, err);
	if (rv != DS_OK)
		return rv;
	cublasLtMatrixLayout_t ab[2] = {p->a, p->b};
	for (int i = 0; i < 2; i++) {
		LT_TRY(cublasLtMatrixLayoutSetAttribute(ab[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
		                                        &n, sizeof(n)),
		       err);
		LT_TRY(cublasLtMatrixLayoutSetAttribute(
		           ab[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &kc, sizeof(kc)),
		       err);
	}
	LT_TRY(cublasLtMatrixLayoutSetAttribute(p->cd, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &n,
	                                        sizeof(n)),
	       err);
	LT_TRY(cublasLtMatrixLayoutSetAttribute(p->cd, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
	                                        &mn, sizeof(mn)),
	       err);
	return DS_OK;
}

/* Plans are kept in a table parallel to fast.cache (same index), and the split-K partials
 * plans parallel to fast.parts. */
struct ds_cuda_fast_plans {
	struct lt_plan p[DS_CUDA_ALGO_CACHE];
	struct lt_plan pp[DS_CUDA_PARTS_CACHE];
};

#define AUTOTUNE_MAX_M 256 /* decode-sized GEMMs are timed; larger ones take heuristic #1 */
#define AUTOTUNE_CANDIDATES 8

/* Timed runs clear the cuBLASLt workspace first: it is larger than L2, so that evicts the
 * weights and a candidate is timed streaming from HBM as in a real decode step. */

/* One cuBLASLt call with a given algorithm, for the autotuning timer. */
struct lt_call {
	struct lt_plan *p;
	const cublasLtMatmulAlgo_t *algo;
	const uint16_t *A, *W;
	float *C;
};

/* C = A . W^T through plan p and algorithm a on the fast path's stream and workspace. */
static cublasStatus_t lt_matmul(struct ds_cuda_ctx *c, const struct lt_plan *p,
                                const cublasLtMatmulAlgo_t *a, const uint16_t *A, const uint16_t *W,
                                float *C)
{
	const float alpha = 1.0f, beta = 0.0f;
	return cublasLtMatmul(c->fast.lt, p->op, &alpha, W, p->a, A, p->b, &beta, C, p->cd, C,
	                      p->cd, a, c->fast.workspace, c->fast.ws_bytes, c->stream);
}

static cudaError_t lt_call_launch(struct ds_cuda_ctx *c, void *arg)
{
	const struct lt_call *x = arg;
	return lt_matmul(c, x->p, x->algo, x->A, x->W, x->C) == CUBLAS_STATUS_SUCCESS
	           ? cudaSuccess
	           : cudaErrorUnknown;
}

/* Times algorithm a on the call's own buffers (the real call overwrites C afterwards): best of
 * 3 after a warm-up, each after an L2 flush. */
static float lt_time(struct ds_cuda_ctx *c, struct lt_plan *p, const cublasLtMatmulAlgo_t *a,
                     const uint16_t *A, const uint16_t *W, float *C)
{
	struct lt_call x = {p, a, A, W, C};
	return ds_cuda_time_best(c, lt_call_launch, &x, 4, c->fast.workspace, c->fast.ws_bytes);
}

/* The band of row counts that share one cuBLASLt algorithm: 32 rows up to AUTOTUNE_MAX_M, 128
 * above; none (-1) at decode sizes the skinny kernels and the GEMV compete for. */
static int lt_band(int M)
{
	if (M <= DS_K_SKINNY_MAX_M)
		return -1;
	return M <= AUTOTUNE_MAX_M ? (M - 1) / 32 : AUTOTUNE_MAX_M + (M - 1) / 128;
}

/* Slot i (its plan p made for M, N, K) takes the algorithm of a cached shape (N, K) in M's band
 * when cuBLASLt's check accepts it for M within the workspace; false otherwise. */
static bool lt_reuse_band(struct ds_cuda_ctx *c, struct lt_plan *p, int i, int M, int N, int K)
{
	struct ds_cuda_fast *f = &c->fast;
	int band = lt_band(M);
	for (int j = 0; j < f->n_cache && band >= 0; j++) {
		const struct ds_cuda_algo *e = &f->cache[j];
		if (j == i || !e->ok || e->N != N || e->K != K || lt_band(e->M) != band)
			continue;
		cublasLtMatmulHeuristicResult_t r;
		memset(&r, 0, sizeof(r));
		if (cublasLtMatmulAlgoCheck(f->lt, p->op, p->a, p->b, p->cd, p->cd, &e->algo, &r) !=
		        CUBLAS_STATUS_SUCCESS ||
		    r.workspaceSize > f->ws_bytes)
			continue;
		f->cache[i] = (struct ds_cuda_algo){M, N, K, true, e->algo};
		return true;
	}
	return false;
}

/* Up to `want` heuristic results for plan p within the workspace (n_out of them). An in-place
 * split-K reduction (CUBLASLT_REDUCTION_SCHEME_INPLACE, no separate reduce kernel) was tried on
 * the H200: cuBLASLt 13 accepts it on its nvjet split-K algorithms but they time the same as
 * with their own reduce kernel, and the step's timeline still shows that kernel
 * (bench/results/gpu-20261201-c799696-ltinplace). */
static cublasStatus_t lt_heuristic(struct ds_cuda_fast *f, struct lt_plan *p, int want,
                                   cublasLtMatmulHeuristicResult_t *res, int *n_out)
{
	*n_out = 0;
	cublasLtMatmulPreference_t pref;
	cublasStatus_t s = cublasLtMatmulPreferenceCreate(&pref);
	if (s != CUBLAS_STATUS_SUCCESS)
		return s;
	size_t ws = f->ws_bytes;
	s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
	                                         &ws, sizeof(ws));
	if (s == CUBLAS_STATUS_SUCCESS)
		s = cublasLtMatmulAlgoGetHeuristic(f->lt, p->op, p->a, p->b, p->cd, p->cd, pref,
		                                   want, res, n_out);
	cublasLtMatmulPreferenceDestroy(pref);
	return s;
}

static uint32_t lt_algo_u32(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoConfigAttributes_t at)
{
	uint32_t v = 0;
	size_t got = 0;
	if (cublasLtMatmulAlgoConfigGetAttribute(a, at, &v, sizeof(v), &got) !=
	    CUBLAS_STATUS_SUCCESS)
		return UINT32_MAX;
	return v;
}

/* DS_FAST_LT_LOG=1: one line per timed cuBLASLt candidate (stderr), for the benches' notes. */
static void lt_log_candidate(int M, int N, int K, int r, const cublasLtMatmulAlgo_t *a, float ms)
{
	fprintf(stderr,
	        "cublasLt M=%d N=%d K=%d cand %d: id %u splitK %u scheme %u tile %u: %.4f ms\n", M,
	        N, K, r, lt_algo_u32(a, CUBLASLT_ALGO_CONFIG_ID),
	        lt_algo_u32(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
	        lt_algo_u32(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
	        lt_algo_u32(a, CUBLASLT_ALGO_CONFIG_TILE_ID), (double)ms);
}

/* Finds (or makes) the cache slot for a shape. Decode-sized shapes are autotuned over the
 * heuristic's top candidates, unless the stream is being captured; larger ones reuse their
 * band's algorithm (lt_reuse_band) or take the heuristic's first. */
static enum ds_status lt_lookup(struct ds_cuda_ctx *c, int M, int N, int K, const uint16_t *A,
                                const uint16_t *W, float *C, int *slot, struct ds_err *err)
{
	struct ds_cuda_fast *f = &c->fast;
	for (int i = 0; i < f->n_cache; i++)
		if (f->cache[i].ok && f->cache[i].M == M && f->cache[i].N == N &&
		    f->cache[i].K == K) {
			*slot = i;
			return DS_OK;
		}
	int i;
	if (f->n_cache < DS_CUDA_ALGO_CACHE) {
		i = f->n_cache++;
	} else {
		i = f->next_evict;
		f->next_evict = (f->next_evict + 1) % DS_CUDA_ALGO_CACHE;
	}
	struct lt_plan *p = plan_of(c, i);
	plan_destroy(p);
	f->cache[i].ok = false;
	enum ds_status rv = plan_make(p, M, N, K, err);
	if (rv != DS_OK) {
		plan_destroy(p);
		return rv;
	}
	/* Row counts change from step to step outside the graphed decode buckets (prefill chunks
	 * next to a varying number of decode rows, and their output rows at the LM head): a new
	 * plan takes the algorithm already chosen for its band (lt_band) when cuBLASLt accepts it
	 * for this M, instead of timing candidates or asking the heuristic again. Both cost
	 * 15-25 ms per new row count on the H200 (bench mixstep: a 4 x 512 prefill step at a row
	 * count not seen before ran 84-96 ms against 69-72 ms warm;
	 * bench/results/gpu-20261130-0544d52-churn). */
	if (lt_reuse_band(c, p, i, M, N, K)) {
		*slot = i;
		return DS_OK;
	}
	enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
	cudaStreamIsCapturing(c->stream, &cap);
	int want =
	    (M <= AUTOTUNE_MAX_M && cap == cudaStreamCaptureStatusNone) ? AUTOTUNE_CANDIDATES : 1;
	cublasLtMatmulHeuristicResult_t res[AUTOTUNE_CANDIDATES];
	int n_res = 0;
	cublasStatus_t s = lt_heuristic(f, p, want, res, &n_res);
	if (s != CUBLAS_STATUS_SUCCESS || n_res == 0) {
		plan_destroy(p);
		return ds_errf(err, DS_ERR_DEVICE,
		               "cublasLt: no algorithm for M=%d N=%d K=%d (status %d)", M, N, K,
		               (int)s);
	}
	int best = 0;
	if (n_res > 1) {
		float bt = INFINITY;
		for (int r = 0; r < n_res; r++) {
			float t = lt_time(c, p, &res[r].algo, A, W, C);
			if (f->lt_log)
				lt_log_candidate(M, N, K, r, &res[r].algo, t);
			if (t < bt) {
				bt = t;
				best = r;
			}
		}
	}
	f->cache[i].M = M;
	f->cache[i].N = N;
	f->cache[i].K = K;
	f->cache[i].algo = res[best].algo;
	f->cache[i].ok = true;
	*slot = i;
	return DS_OK;
}

/* ---- GEMM choice: skinny variants vs GEMV vs cuBLASLt ---- */

static int m_bucket(int M)
{
	if (M <= DS_K_GEMV_MAX_M)
		return M;
	int b = 8;
	while (b < M)
		b *= 2;
	return b;
}

/* One GEMM candidate on concrete buffers. kind SPLIT runs ds_k_silu_mul (gu -> h) and then the
 * plain pick `plain` on h (cuBLASLt through lt_gemm, whose algorithm cache is warm by then). */
struct cand {
	int kind, v;
	const uint16_t *A, *W;
	const float *gu; /* SKINNY_SILU, SPLIT */
	uint16_t *h;     /* SPLIT */
	float *C;
	int M, N, K;
	const struct ds_cuda_pick *plain; /* SPLIT */
	int stage; /* skinny kinds: staged weight iterations (0 while timing candidates) */
};

static enum ds_status lt_gemm(struct ds_cuda_ctx *c, const uint16_t *A, const uint16_t *W, float *C,
                              int M, int N, int K, struct ds_err *err);

static cudaError_t cand_launch(struct ds_cuda_ctx *c, const struct cand *x)
{
	int kind = x->kind, v = x->v;
	if (kind == DS_CUDA_GEMM_SKINNY_SILU)
		return ds_k_skinny_silu(x->gu, x->W, x->C, x->M, x->N, x->K, v, c->fast.pdl,
		                        x->stage, c->stream);
	if (kind == DS_CUDA_GEMM_SPLIT) {
		cudaError_t e = ds_k_silu_mul_pdl(x->gu, x->M, x->K, x->h, c->fast.pdl, c->stream);
		if (e != cudaSuccess)
			return e;
		kind = x->plain->kind;
		v = x->plain->variant;
	}
	const uint16_t *A = kind == x->kind ? x->A : x->h;
	/* a SPLIT candidate whose plain pick is LT_PARTS is timed (and checked) on the plain
	 * cuBLASLt form below: C must hold the product itself */
	if (kind == DS_CUDA_GEMM_GEMV)
		return ds_k_gemv(A, x->W, x->C, x->M, x->N, x->K, c->stream);
	if (kind == DS_CUDA_GEMM_SKINNY)
		return ds_k_skinny(A, x->W, x->C, x->M, x->N, x->K, v, c->fast.pdl, x->stage,
		                   c->stream);
	struct ds_err err;
	return lt_gemm(c, A, x->W, x->C, x->M, x->N, x->K, &err) == DS_OK ? cudaSuccess
	                                                                  : cudaErrorUnknown;
}

static cudaError_t cand_launch_fn(struct ds_cuda_ctx *c, void *arg)
{
	return cand_launch(c, arg);
}

/* Best of 3 runs after a warm-up, each after an L2 flush (ms); INFINITY if it fails. */
static float cand_time(struct ds_cuda_ctx *c, const struct cand *x)
{
	return ds_cuda_time_best(c, cand_launch_fn, (void *)x, 4, c->fast.workspace,
	                         c->fast.ws_bytes);
}

/* A candidate is only picked if its C agrees with a trusted result of the same call (cuBLASLt,
 * or for silu picks the plain pick on ds_k_silu_mul's output) to 1% of that result's largest
 * magnitude: summation order moves the fp32 sums by orders of magnitude less, a wrong tile,
 * K slice or cluster reduction by about the values themselves. A safety net for variants that
 * are new on a device, at tuning time only (one copy of C per candidate). */
struct cand_check {
	float *ref, *got; /* host (M * N); ref NULL: nothing to check against */
	size_t n;
	float tol;
};

static void check_free(struct cand_check *k)
{
	free(k->ref);
	free(k->got);
	memset(k, 0, sizeof(*k));
}

/* Takes the current contents of the device C (M * N) as the trusted result. */
static void check_init(struct ds_cuda_ctx *c, struct cand_check *k, const float *C, size_t n)
{
	memset(k, 0, sizeof(*k));
	k->ref = malloc(n * sizeof(float));
	k->got = malloc(n * sizeof(float));
	k->n = n;
	if (!k->ref || !k->got ||
	    cudaMemcpyAsync(k->ref, C, n * sizeof(float), cudaMemcpyDeviceToHost, c->stream) !=
	        cudaSuccess ||
	    cudaStreamSynchronize(c->stream) != cudaSuccess) {
		cudaGetLastError();
		check_free(k);
		return;
	}
	float mx = 0.0f;
	for (size_t i = 0; i < n; i++) {
		if (!isfinite(k->ref[i])) { /* nothing sane to compare against */
			check_free(k);
			return;
		}
		mx = fmaxf(mx, fabsf(k->ref[i]));
	}
	k->tol = 1e-2f * mx + 1e-30f;
}

static bool check_ok(struct ds_cuda_ctx *c, struct cand_check *k, const float *C)
{
	if (!k->ref)
		return true;
	if (cudaMemcpyAsync(k->got, C, k->n * sizeof(float), cudaMemcpyDeviceToHost, c->stream) !=
	        cudaSuccess ||
	    cudaStreamSynchronize(c->stream) != cudaSuccess) {
		cudaGetLastError();
		return false;
	}
	for (size_t i = 0; i < k->n; i++)
		if (!(fabsf(k->got[i] - k->ref[i]) <= k->tol))
			return false;
	return true;
}

/* Times candidate x; INFINITY (and a note on stderr) if its result fails the check. */
static float cand_time_checked(struct ds_cuda_ctx *c, const struct cand *x, struct cand_check *k,
                               int *n_rejected)
{
	float t = cand_time(c, x);
	if (isfinite(t) && !check_ok(c, k, x->C)) {
		char name[64] = "gemv";
		if (x->kind == DS_CUDA_GEMM_SKINNY || x->kind == DS_CUDA_GEMM_SKINNY_SILU)
			ds_k_skinny_describe(x->M, x->v, name, sizeof(name));
		fprintf(stderr,
		        "cuda fast path: %s%s at M=%d N=%d K=%d disagrees with the reference "
		        "result; not used\n",
		        name, x->kind == DS_CUDA_GEMM_SKINNY_SILU ? " (silu)" : "", x->M, x->N,
		        x->K);
		(*n_rejected)++;
		t = INFINITY;
	}
	return t;
}

static struct ds_cuda_pick *pick_find(struct ds_cuda_fast *f, int mb, int N, int K, bool silu,
                                      bool gu, bool sums)
{
	for (int i = 0; i < f->n_picks; i++)
		if (f->picks[i].ok && f->picks[i].mb == mb && f->picks[i].N == N &&
		    f->picks[i].K == K && f->picks[i].silu == silu && f->picks[i].gu == gu &&
		    f->picks[i].sums == sums)
			return &f->picks[i];
	return NULL;
}

static const struct ds_cuda_pick *pick_store(struct ds_cuda_fast *f, const struct ds_cuda_pick *pk)
{
	int i;
	if (f->n_picks < DS_CUDA_PICK_CACHE) {
		i = f->n_picks++;
	} else {
		i = f->next_pick_evict;
		f->next_pick_evict = (f->next_pick_evict + 1) % DS_CUDA_PICK_CACHE;
	}
	f->picks[i] = *pk;
	return &f->picks[i];
}

static struct ds_cuda_pick pick_new(int M, int N, int K, bool silu)
{
	struct ds_cuda_pick pk = {.mb = m_bucket(M),
	                          .N = N,
	                          .K = K,
	                          .silu = silu,
	                          .parts = 1,
	                          .ok = true,
	                          .kind = DS_CUDA_GEMM_LT,
	                          .M_timed = M,
	                          .ms_lt = INFINITY,
	                          .ms_gemv = INFINITY,
	                          .ms_skinny = INFINITY,
	                          .ms_split = INFINITY,
	                          .ms_parts = INFINITY,
	                          .ms_best = INFINITY};
	for (int v = 0; v < DS_K_SKINNY_VARIANTS; v++)
		pk.ms_variant[v] = INFINITY;
	return pk;
}

/* The cached pick for (bucket of M, N, K, silu) in *out. *miss: none is cached and the stream
 * is not capturing, so the caller times the candidates now; on a miss during capture *out
 * stays NULL and *miss false (the caller then uses the untimed default). */
static enum ds_status pick_cached(struct ds_cuda_ctx *c, int M, int N, int K, bool silu, bool gu,
                                  bool sums, const struct ds_cuda_pick **out, bool *miss,
                                  struct ds_err *err)
{
	*miss = false;
	*out = pick_find(&c->fast, m_bucket(M), N, K, silu, gu, sums);
	if (*out)
		return DS_OK;
	enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
	DS_CUDA_TRY(cudaStreamIsCapturing(c->stream, &cap), err);
	*miss = cap == cudaStreamCaptureStatusNone;
	return DS_OK;
}

/* Times every skinny variant of x's kind (x->v is set to each in turn), each checked against
 * chk: pk->ms_variant, and the fastest as pk->ms_skinny / skinny_best (pk->ms_skinny starts at
 * INFINITY, pick_new). */
static void pick_time_variants(struct ds_cuda_ctx *c, struct cand *x, struct cand_check *chk,
                               struct ds_cuda_pick *pk)
{
	for (int v = 0; v < DS_K_SKINNY_VARIANTS; v++) {
		x->v = v;
		float t = cand_time_checked(c, x, chk, &pk->n_rejected);
		pk->ms_variant[v] = t;
		if (t < pk->ms_skinny) {
			pk->ms_skinny = t;
			pk->skinny_best = v;
		}
	}
}

/* pk takes its fastest skinny variant, as kind, where it beats pk->ms_best. */
static void pick_prefer_skinny(struct ds_cuda_pick *pk, int kind)
{
	if (pk->ms_skinny < pk->ms_best) {
		pk->ms_best = pk->ms_skinny;
		pk->kind = kind;
		pk->variant = pk->skinny_best;
	}
}

/* ---- split-K partials that the next RMSNorm sums ---- */

/* Whether a GEMM of M rows into C may leave split-K partials there: C is the RMSNorm's delta
 * and holds 8 partials of M rows. */
static bool gemm_sums(const struct ds_cuda_ctx *c, const float *C, int M)
{
	return c->fast.lt_parts && C == c->dlt && (size_t)8 * M <= (size_t)c->cap_tokens;
}

static struct lt_plan *parts_plan_of(struct ds_cuda_ctx *c, int i)
{
	return &c->fast.plans->pp[i];
}

/* Whether the s partials of M * N floats in device C add up (in order, as the RMSNorm adds
 * them) to chk's trusted result within its tolerance; true when there is none. */
static bool parts_check_ok(struct ds_cuda_ctx *c, const struct cand_check *chk, const float *C,
                           int s)
{
	if (!chk->ref)
		return true;
	float *h = malloc(chk->n * (size_t)s * sizeof(float));
	bool ok = h &&
	          cudaMemcpyAsync(h, C, chk->n * (size_t)s * sizeof(float), cudaMemcpyDeviceToHost,
	                          c->stream) == cudaSuccess &&
	          cudaStreamSynchronize(c->stream) == cudaSuccess;
	if (!ok)
		cudaGetLastError();
	for (size_t i = 0; ok && i < chk->n; i++) {
		float v = h[i];
		for (int j = 1; j < s; j++)
			v += h[(size_t)j * chk->n + i];
		ok = fabsf(v - chk->ref[i]) <= chk->tol;
	}
	free(h);
	return ok;
}

/* Tunes the partials form of (M, N, K) in s slices into *p (made here): cuBLASLt's candidates
 * for the strided batch, each timed like the plain ones (L2 flushed) on the call's buffers (C
 * holds s * M * N floats) and checked against chk; the fastest in *algo, its time returned
 * (INFINITY, *p destroyed: cuBLASLt has none, or none agrees). */
static float parts_tune(struct ds_cuda_ctx *c, struct lt_plan *p, int M, int N, int K, int s,
                        const uint16_t *A, const uint16_t *W, float *C,
                        const struct cand_check *chk, cublasLtMatmulAlgo_t *algo)
{
	struct ds_cuda_fast *f = &c->fast;
	struct ds_err err;
	float best = INFINITY;
	cublasLtMatmulHeuristicResult_t res[AUTOTUNE_CANDIDATES];
	int n_res = 0;
	if (plan_make_parts(p, M, N, K, s, &err) == DS_OK &&
	    lt_heuristic(f, p, AUTOTUNE_CANDIDATES, res, &n_res) == CUBLAS_STATUS_SUCCESS) {
		for (int r = 0; r < n_res; r++) {
			float t = lt_time(c, p, &res[r].algo, A, W, C);
			if (f->lt_log)
				lt_log_candidate(M, N, K / s, r, &res[r].algo, t);
			if (t < best && parts_check_ok(c, chk, C, s)) {
				best = t;
				*algo = res[r].algo;
			}
		}
	}
	if (!isfinite(best))
		plan_destroy(p);
	return best;
}

/* pk (a pick into the RMSNorm's delta) takes the split-K partials form where it beats the
 * candidates timed so far: 2, 4 and 8 slices of K (each a multiple of 64) are tuned, the fastest
 * kept in a parts slot (none when the cache is full). */
static void pick_time_parts(struct ds_cuda_ctx *c, const uint16_t *A, const uint16_t *W, float *C,
                            const struct cand_check *chk, struct ds_cuda_pick *pk)
{
	struct ds_cuda_fast *f = &c->fast;
	int M = pk->M_timed, N = pk->N, K = pk->K;
	if (f->n_parts >= DS_CUDA_PARTS_CACHE)
		return;
	struct lt_plan best = {0}, p;
	cublasLtMatmulAlgo_t best_algo, algo;
	memset(&best_algo, 0, sizeof(best_algo));
	for (int s = 2; s <= 8; s *= 2) {
		if (K % s != 0 || (K / s) % 64 != 0)
			continue;
		memset(&p, 0, sizeof(p));
		float t = parts_tune(c, &p, M, N, K, s, A, W, C, chk, &algo);
		if (!(t < pk->ms_parts)) {
			plan_destroy(&p);
			continue;
		}
		plan_destroy(&best);
		best = p;
		best_algo = algo;
		pk->ms_parts = t;
		pk->parts = s;
	}
	if (!(pk->ms_parts < pk->ms_best)) {
		plan_destroy(&best);
		pk->parts = 1;
		return;
	}
	int i = f->n_parts++;
	*parts_plan_of(c, i) = best;
	f->parts[i] = (struct ds_cuda_parts_algo){M, N, K, pk->parts, true, best_algo};
	pk->ms_best = pk->ms_parts;
	pk->kind = DS_CUDA_GEMM_LT_PARTS;
	pk->variant = i;
}

/* The cached choice for (bucket of M, N, K); on a miss outside capture, times every candidate
 * on the call's own buffers (the real call overwrites C afterwards) and caches the fastest.
 * sums: C is the RMSNorm's delta, so split-K partials are candidates too. *out is NULL on a
 * miss during capture (the caller then uses the untimed default). */
static enum ds_status pick_lookup(struct ds_cuda_ctx *c, const uint16_t *A, const uint16_t *W,
                                  float *C, int M, int N, int K, bool sums,
                                  const struct ds_cuda_pick **out, struct ds_err *err)
{
	struct ds_cuda_fast *f = &c->fast;
	bool miss = false;
	enum ds_status rv = pick_cached(c, M, N, K, false, false, sums, out, &miss, err);
	if (rv != DS_OK || !miss)
		return rv;
	struct ds_cuda_pick pk = pick_new(M, N, K, false);
	pk.sums = sums;
	/* cuBLASLt first: its result is what the others are checked against */
	int slot = 0;
	struct ds_err lt_err = {0};
	struct cand_check chk = {0};
	if (lt_lookup(c, M, N, K, A, W, C, &slot, &lt_err) == DS_OK) {
		pk.ms_lt = lt_time(c, plan_of(c, slot), &f->cache[slot].algo, A, W, C);
		if (isfinite(pk.ms_lt))
			check_init(c, &chk, C, (size_t)M * N);
	}
	struct cand x = {
	    .kind = DS_CUDA_GEMM_SKINNY, .A = A, .W = W, .C = C, .M = M, .N = N, .K = K};
	pick_time_variants(c, &x, &chk, &pk);
	if (M <= DS_K_GEMV_MAX_M) {
		x.kind = DS_CUDA_GEMM_GEMV;
		x.v = 0;
		pk.ms_gemv = cand_time_checked(c, &x, &chk, &pk.n_rejected);
	}
	pk.ms_best = pk.ms_lt;
	if (pk.ms_gemv < pk.ms_best) {
		pk.ms_best = pk.ms_gemv;
		pk.kind = DS_CUDA_GEMM_GEMV;
	}
	pick_prefer_skinny(&pk, DS_CUDA_GEMM_SKINNY);
	if (sums)
		pick_time_parts(c, A, W, C, &chk, &pk);
	check_free(&chk);
	if (!isfinite(pk.ms_best))
		return ds_errf(err, DS_ERR_DEVICE,
		               "cuda: no GEMM candidate ran for M=%d N=%d K=%d (cublasLt: %s)", M,
		               N, K, lt_err.msg);
	*out = pick_store(f, &pk);
	return DS_OK;
}

static enum ds_status lt_gemm(struct ds_cuda_ctx *c, const uint16_t *A, const uint16_t *W, float *C,
                              int M, int N, int K, struct ds_err *err)
{
	int i = 0;
	enum ds_status rv = lt_lookup(c, M, N, K, A, W, C, &i, err);
	if (rv != DS_OK)
		return rv;
	LT_TRY(lt_matmul(c, plan_of(c, i), &c->fast.cache[i].algo, A, W, C), err);
	return DS_OK;
}

/* Runs the partials GEMM of parts slot i if it was tuned for exactly this (M, N, K) (*ran; a
 * bucket's pick serves other M outside the graphs), and records the partials for the RMSNorm. */
static enum ds_status parts_gemm(struct ds_cuda_ctx *c, int i, const uint16_t *A, const uint16_t *W,
                                 float *C, int M, int N, int K, bool *ran, struct ds_err *err)
{
	const struct ds_cuda_parts_algo *pa = &c->fast.parts[i];
	*ran = pa->ok && pa->M == M && pa->N == N && pa->K == K;
	if (!*ran)
		return DS_OK;
	LT_TRY(lt_matmul(c, parts_plan_of(c, i), &pa->algo, A, W, C), err);
	c->dlt_parts = pa->s;
	c->dlt_pstride = (size_t)M * N;
	return DS_OK;
}

/* Whether the streaming GEMM runs C = A . W^T (M rows, K columns): when switched on, for the
 * shapes it takes, and not for the LM head, where behind the final RMSNorm its early weight
 * stream slowed that norm and the sampler after it (the 8-row step's tail 0.37 against 0.26
 * ms, bench/results/gpu-20261201-ed7daec-trace). */
static bool stream_takes(const struct ds_cuda_ctx *c, const uint16_t *W, int M, int K)
{
	return c->fast.stream && M <= DS_K_STREAM_MAX_M && K % 16 == 0 && W != c->lm_head;
}

static enum ds_status fast_gemm(struct ds_cuda_ctx *c, const uint16_t *A, const uint16_t *W,
                                float *C, int M, int N, int K, struct ds_err *err)
{
	if (M <= 0)
		return DS_OK;
	if (stream_takes(c, W, M, K)) {
		DS_CUDA_TRY(ds_k_stream_gemm(A, W, C, M, N, K, c->fast.stream_variant, c->n_sm,
		                             c->fast.pdl, c->stream),
		            err);
		return DS_OK;
	}
	/* untimed default: the GEMV for 1..4 rows, cuBLASLt above */
	int kind = M <= DS_K_GEMV_MAX_M ? DS_CUDA_GEMM_GEMV : DS_CUDA_GEMM_LT, v = 0;
	if (c->fast.skinny && M <= DS_K_SKINNY_MAX_M) {
		const struct ds_cuda_pick *pk = NULL;
		enum ds_status rv = pick_lookup(c, A, W, C, M, N, K, gemm_sums(c, C, M), &pk, err);
		if (rv != DS_OK)
			return rv;
		if (pk) {
			kind = pk->kind;
			v = pk->variant;
		}
	}
	if (kind == DS_CUDA_GEMM_LT_PARTS) {
		bool ran = false;
		enum ds_status rv = parts_gemm(c, v, A, W, C, M, N, K, &ran, err);
		if (rv != DS_OK || ran)
			return rv;
		kind = DS_CUDA_GEMM_LT; /* not tuned at this M: the plain form */
	}
	if (kind == DS_CUDA_GEMM_LT)
		return lt_gemm(c, A, W, C, M, N, K, err);
	struct cand x = {.kind = kind, .v = v, .A = A, .W = W, .C = C, .M = M, .N = N, .K = K};
	x.stage = c->fast.skinny_stage;
	DS_CUDA_TRY(cand_launch(c, &x), err);
	return DS_OK;
}

/* The down projection's choice: the best fused skinny variant (SiLU*mul in its activation
 * load) against ds_k_silu_mul followed by the plain pick, each pair timed as one unit after an
 * L2 flush. On a miss outside capture h is filled first, so the plain pick and the check see
 * the real activations. */
static enum ds_status silu_pick_lookup(struct ds_cuda_ctx *c, const float *gu, uint16_t *h,
                                       const uint16_t *W, float *C, int M, int N, int K,
                                       const struct ds_cuda_pick **out, struct ds_err *err)
{
	struct ds_cuda_fast *f = &c->fast;
	bool miss = false;
	enum ds_status rv = pick_cached(c, M, N, K, true, false, false, out, &miss, err);
	if (rv != DS_OK || !miss)
		return rv;
	DS_CUDA_TRY(ds_k_silu_mul_pdl(gu, M, K, h, c->fast.pdl, c->stream), err);
	const struct ds_cuda_pick *plain = NULL;
	rv = pick_lookup(c, h, W, C, M, N, K, gemm_sums(c, C, M), &plain, err);
	if (rv != DS_OK)
		return rv;
	DS_ASSERT(plain);
	struct ds_cuda_pick pk = pick_new(M, N, K, true), plain_copy = *plain;
	struct cand x = {.kind = DS_CUDA_GEMM_SPLIT,
	                 .A = h,
	                 .W = W,
	                 .gu = gu,
	                 .h = h,
	                 .C = C,
	                 .M = M,
	                 .N = N,
	                 .K = K,
	                 .plain = &plain_copy};
	pk.ms_split = cand_time(c, &x); /* leaves the trusted result in C */
	struct cand_check chk = {0};
	if (isfinite(pk.ms_split))
		check_init(c, &chk, C, (size_t)M * N);
	x.kind = DS_CUDA_GEMM_SKINNY_SILU;
	pick_time_variants(c, &x, &chk, &pk);
	check_free(&chk);
	pk.kind = DS_CUDA_GEMM_SPLIT;
	pk.ms_best = pk.ms_split;
	pick_prefer_skinny(&pk, DS_CUDA_GEMM_SKINNY_SILU);
	if (!isfinite(pk.ms_best))
		return ds_errf(
		    err, DS_ERR_DEVICE,
		    "cuda: neither silu_mul + GEMM nor a fused variant ran for M=%d N=%d "
		    "K=%d",
		    M, N, K);
	*out = pick_store(f, &pk);
	return DS_OK;
}

static enum ds_status fast_gemm_silu(struct ds_cuda_ctx *c, const float *gu, uint16_t *h,
                                     const uint16_t *W, float *C, int M, int N, int K,
                                     struct ds_err *err)
{
	if (M <= 0)
		return DS_OK;
	if (c->fast.skinny && M <= DS_K_SKINNY_SILU_MAX_M && !stream_takes(c, W, M, K)) {
		const struct ds_cuda_pick *pk = NULL;
		enum ds_status rv = silu_pick_lookup(c, gu, h, W, C, M, N, K, &pk, err);
		if (rv != DS_OK)
			return rv;
		if (pk && pk->kind == DS_CUDA_GEMM_SKINNY_SILU) {
			DS_CUDA_TRY(ds_k_skinny_silu(gu, W, C, M, N, K, pk->variant, c->fast.pdl,
			                             c->fast.skinny_stage, c->stream),
			            err);
			return DS_OK;
		}
	}
	DS_CUDA_TRY(ds_k_silu_mul_pdl(gu, M, K, h, c->fast.pdl, c->stream), err);
	return fast_gemm(c, h, W, C, M, N, K, err);
}

/* ---- the gate/up GEMM: its plain pick then SiLU*mul, or the reference kernel with SiLU*mul
 * fused into its epilogue ---- */

/* One gate/up candidate: H (M, F) bf16 from A (M, K) and Wgu (2F, K). v < 0: the plain pick
 * into the fp32 buffer big, then ds_k_silu_mul into h; else reference variant v writing H
 * into big's memory (as the pass reads it). */
struct gu_cand {
	int v;
	const uint16_t *A, *W;
	float *big;
	uint16_t *h;
	int M, F, K;
	const struct ds_cuda_pick *plain;
};

static cudaError_t gu_cand_launch(struct ds_cuda_ctx *c, void *arg)
{
	const struct gu_cand *x = arg;
	if (x->v >= 0)
		return ds_k_gemm_ref_silu_variant(x->v, x->A, x->W, (uint16_t *)x->big, x->M, x->F,
		                                  x->K, c->stream);
	struct cand y = {.kind = x->plain->kind,
	                 .v = x->plain->variant,
	                 .A = x->A,
	                 .W = x->W,
	                 .C = x->big,
	                 .M = x->M,
	                 .N = 2 * x->F,
	                 .K = x->K};
	cudaError_t e = cand_launch(c, &y);
	if (e != cudaSuccess)
		return e;
	return ds_k_silu_mul_pdl(x->big, x->M, x->F, x->h, c->fast.pdl, c->stream);
}

/* Room for n bytes of timing scratch (c->fast.gu_scratch). */
static enum ds_status gu_scratch(struct ds_cuda_ctx *c, size_t n, struct ds_err *err)
{
	struct ds_cuda_fast *f = &c->fast;
	if (f->gu_scratch_bytes >= n)
		return DS_OK;
	if (f->gu_scratch)
		cudaFree(f->gu_scratch);
	f->gu_scratch = NULL;
	f->gu_scratch_bytes = 0;
	DS_CUDA_TRY(cudaMalloc((void **)&f->gu_scratch, n), err);
	f->gu_scratch_bytes = n;
	return DS_OK;
}

/* The gate/up choice for (bucket of M, 2F, K), timed on a miss outside capture: the plain
 * pick followed by ds_k_silu_mul (into scratch, not over A) against every reference variant
 * whose fused epilogue passed the start-up self-check (c->ref.silu_ok), each after an L2
 * flush. The reference kernels are batch-invariant, which the fast path does not need; it
 * takes one only where it is faster. *out NULL on a miss during capture (then: plain). */
static enum ds_status gu_pick_lookup(struct ds_cuda_ctx *c, const uint16_t *A, const uint16_t *W,
                                     float *big, int M, int F, int K,
                                     const struct ds_cuda_pick **out, struct ds_err *err)
{
	bool miss = false;
	enum ds_status rv = pick_cached(c, M, 2 * F, K, false, true, false, out, &miss, err);
	if (rv != DS_OK || !miss)
		return rv;
	/* the plain GEMM as fast_gemm runs it: timed picks up to DS_K_SKINNY_MAX_M rows, else
	 * cuBLASLt */
	struct ds_cuda_pick lt = pick_new(M, 2 * F, K, false), plain_copy;
	const struct ds_cuda_pick *plain = &lt;
	if (M <= DS_K_SKINNY_MAX_M &&
	    (rv = pick_lookup(c, A, W, big, M, 2 * F, K, false, &plain, err)) != DS_OK)
		return rv;
	struct ds_cuda_pick pk = pick_new(M, 2 * F, K, false);
	pk.gu = true;
	struct gu_cand x = {-1, A, W, big, NULL, M, F, K, NULL};
	if (plain) {
		if ((rv = gu_scratch(c, (size_t)M * F * 2, err)) != DS_OK)
			return rv;
		plain_copy = *plain;
		x.plain = &plain_copy;
		x.h = c->fast.gu_scratch;
		pk.ms_split = ds_cuda_time_best(c, gu_cand_launch, &x, 4, c->fast.workspace,
		                                c->fast.ws_bytes);
	}
	for (int v = 0; v < DS_K_GEMM_REF_N_VARIANTS; v++) {
		if (!c->ref.silu_ok[v])
			continue;
		x.v = v;
		float t = ds_cuda_time_best(c, gu_cand_launch, &x, 4, c->fast.workspace,
		                            c->fast.ws_bytes);
		if (t < pk.ms_skinny) {
			pk.ms_skinny = t;
			pk.skinny_best = v;
		}
	}
	pk.kind = DS_CUDA_GEMM_SPLIT;
	pk.ms_best = pk.ms_split;
	pick_prefer_skinny(&pk, DS_CUDA_GEMM_REF_SILU);
	*out = pick_store(&c->fast, &pk);
	return DS_OK;
}

/* H (M, F) = SiLU*mul of the gate/up GEMM in one reference kernel when the gate/up choice
 * says so (*done); else the caller runs the plain GEMM and the down projection's choice
 * (which at decode sizes fuses SiLU*mul into the down GEMM: then this one is not asked). */
static enum ds_status fast_gemm_gu_silu(struct ds_cuda_ctx *c, const uint16_t *A, const uint16_t *W,
                                        uint16_t *H, int M, int F, int K, bool *done,
                                        struct ds_err *err)
{
	*done = false;
	if (M <= 0 || !c->fast.skinny || M <= DS_K_SKINNY_SILU_MAX_M)
		return DS_OK;
	const struct ds_cuda_pick *pk = NULL;
	enum ds_status rv = gu_pick_lookup(c, A, W, c->big, M, F, K, &pk, err);
	if (rv != DS_OK || !pk || pk->kind != DS_CUDA_GEMM_REF_SILU)
		return rv;
	DS_CUDA_TRY(ds_k_gemm_ref_silu_variant(pk->variant, A, W, H, M, F, K, c->stream), err);
	*done = true;
	return DS_OK;
}

/* The decode kernel's grid split for T rows, from the batch and the kernel's occupancy: the
 * split s minimising waves(s) * (1 / s + 1 / 16), where waves(s) = ceil(T * n_kv * s / resident
 * blocks) and 1/16 stands for a block's fixed cost (latency chain, merges) against streaming a
 * whole row. So batch 1 fills the GPU with one wave of splits and large batches get one block per
 * (row, KV head). Rows shorter than s block iterations use fewer splits (chosen on the device). It
 * depends only on T, so a bucket's graph stays valid as positions grow. DS_FAST_ATTN_SPLIT=n
 * forces n (for tuning). */
static enum ds_status fast_decode_split(const struct ds_cuda_ctx *c, int T, struct ds_k_dims d,
                                        int variant, int *split, struct ds_err *err)
{
	/* the query is not a stream operation; relaxed mode keeps it legal inside a capture */
	enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
	int bps = 0;
	DS_CUDA_TRY(cudaThreadExchangeStreamCaptureMode(&mode), err);
	cudaError_t e = ds_k_attn_decode_occupancy_v(d, variant, &bps);
	DS_CUDA_TRY(cudaThreadExchangeStreamCaptureMode(&mode), err);
	DS_CUDA_TRY(e, err);
	bps = DS_MAX(bps, 1);
	double slots = (double)bps * c->n_sm, rows = (double)T * c->cfg.n_kv_head, best = INFINITY;
	int s = 1;
	for (int k = 1; k <= DS_K_ATTN_DECODE_MAX_SPLIT; k++) {
		double cost = ceil(rows * k / slots) * (1.0 / k + 1.0 / 16);
		if (cost < best - 1e-12) {
			best = cost;
			s = k;
		}
	}
	const char *fs = getenv("DS_FAST_ATTN_SPLIT");
	if (fs && atoi(fs) > 0)
		s = atoi(fs);
	s = DS_MIN(s, (c->cfg.max_pos + 31) / 32);
	s = DS_MIN(s, DS_K_ATTN_DECODE_MAX_SPLIT);
	s = DS_MAX(s, 1);
	*split = ds_cuda_split_cap(c, T, s);
	return DS_OK;
}

/* True when every row of the pass is its sequence's only query (a decode pass, padded to its
 * graph bucket or not): then no row reads K/V that another row of the pass writes, so the
 * attention may read earlier positions before its PDL wait and may write the rows' own K/V
 * itself (the fused epilogue). */
static bool pass_one_row_per_seq(const struct ds_cuda_pass *p)
{
	return p->T == p->R && (p->n_seq == p->T || p->one_row_per_seq);
}

/* The decode attention's merge counters when it merges its own splits (attn_merge), else NULL
 * (the combine kernel). */
static unsigned *attn_counters(const struct ds_cuda_ctx *c, const struct ds_cuda_pass *p)
{
	return c->fast.attn_merge && p->T <= c->cap_rows ? c->fast.attn_cnt : NULL;
}

/* The decode kernel's variant DS_FAST_ATTN names: unset or "mma" (also for unknown names),
 * "mma_block" (its stages copied by the whole block), "mma_bulk" (its stages brought in by bulk
 * async copies), "reg", "pipe"; -1 for "old" (the tiled
 * CUDA-core kernel for every pass). (The copy-only diagnostic is the bench's alone: its output is
 * meaningless.) */
static int fast_decode_variant(const char *sel)
{
	static const struct {
		const char *name;
		int variant;
	} names[] = {
	    {"reg", DS_K_ATTN_DECODE_REG},
	    {"pipe", DS_K_ATTN_DECODE_PIPE},
	    {"mma_block", DS_K_ATTN_DECODE_MMA_BLOCK},
	    {"mma_bulk", DS_K_ATTN_DECODE_MMA_BULK},
	    {"old", -1},
	};
	for (size_t i = 0; sel && i < DS_ARRAY_LEN(names); i++)
		if (strcmp(sel, names[i].name) == 0)
			return names[i].variant;
	return DS_K_ATTN_DECODE_MMA;
}

/* Passes whose rows are all output rows (decode: one query per sequence) use the flash-decoding
 * kernel (kernels/attn_decode.cu) with its own split: DS_FAST_ATTN unset or "mma" = the
 * tensor-core variant (the default since the H200 run of 9ee059f: the captured llama3-8b step
 * at context 512 was 0.2-4.5% faster with it than with "pipe" at batch 1, 2, 4, 16, 32 and 64,
 * and 0.2% slower at 8; bench/results/gpu-20261129-9ee059f), "pipe" = the cp.async-pipelined
 * CUDA-core one, "reg" = the register-streamed one (round 1). Prefill, unsupported
 * head shapes and DS_FAST_ATTN=old use the tiled kernel (kernels/attn.cu) with n_split. */
static enum ds_status fast_attention(struct ds_cuda_ctx *c, const struct ds_cuda_pass *p,
                                     const uint16_t *kv, int n_split, struct ds_err *err)
{
	struct ds_k_dims d = ds_cuda_dims(c);
	int variant = fast_decode_variant(getenv("DS_FAST_ATTN"));
	bool decode = p->T == p->R && variant >= 0;
	if (decode && ds_k_attn_decode_supported(d)) {
		int split = 1;
		enum ds_status rv = fast_decode_split(c, p->T, d, variant, &split, err);
		if (rv != DS_OK)
			return rv;
		/* partials merged by the combine kernel, or with attn_merge by the attention's last
		 * block per row and KV head (a counter buffer): that made the captured llama3-8b
		 * step slower on the H200 at batch 1, attention 0.38 vs 0.26 ms per step and the
		 * step 4.71 vs 4.47 ms (bench/results/gpu-20261129-da0db27, ablate all_fused_qkv vs
		 * all_fused_combine), so the graph tuning decides per bucket; with several rows of
		 * one sequence (all_rows passes) the mma variant's reads before its PDL wait would
		 * race the epilogue's K/V writes: launched without PDL */
		int pdl = c->fast.pdl && pass_one_row_per_seq(p);
		DS_CUDA_TRY(ds_k_attn_decode_v(c->q, kv, ds_cuda_tokmeta(c), p->T, d, split,
		                               c->part, c->att, attn_counters(c, p), variant, pdl,
		                               c->stream),
		            err);
		return DS_OK;
	}
	/* Prefill chunks (and mixed passes): the reference path's tensor-core kernel, when the
	 * backend uses it (c->ref_attn_mma: its row-group plan is uploaded with every pass). It is
	 * batch-invariant, which the fast path does not need, but it is also the fastest we have
	 * for many query rows per sequence: on the H200, invariant mode (reference path only)
	 * outran fast mode by 1.2x on 512-token prompts while fast prefill used the per-row
	 * CUDA-core kernel (bench/results/gpu-20261129-590b977-e2e). DS_FAST_ATTN=old: the
	 * CUDA-core kernel. The uploaded plan is the reference path's, which may split a few long
	 * groups' tiles over CTAs: ds_cuda_attn_mma then merges them with the combine kernel (the
	 * walk-only launcher would have each CTA write its share's partial result as the row's
	 * output). */
	if (!decode && c->ref_attn_mma && variant >= 0)
		return ds_cuda_attn_mma(c, p, kv, n_split, err);
	DS_CUDA_TRY(ds_k_attn_fast_pdl(c->q, kv, ds_cuda_tokmeta(c), p->T, d,
	                               n_split < 1 ? 1 : n_split, c->part, c->att, c->fast.pdl,
	                               c->stream),
	            err);
	return DS_OK;
}

/* Decode passes on the tensor-core variant: the q/k/v epilogue runs inside the attention kernel
 * (ds_k_attn_decode_qkv: the same bits as ds_k_qkv_rope followed by that variant, one kernel
 * boundary fewer per layer). */
static enum ds_status fast_attention_qkv(struct ds_cuda_ctx *c, const struct ds_cuda_pass *p,
                                         const struct ds_cuda_layer *L, uint16_t *kv,
                                         int n_split, bool *done, struct ds_err *err)
{
	(void)n_split;
	struct ds_k_dims d = ds_cuda_dims(c);
	int variant = fast_decode_variant(getenv("DS_FAST_ATTN"));
	*done = false;
	if (!c->fast.fuse_qkv || !pass_one_row_per_seq(p) || !ds_k_attn_decode_supported(d) ||
	    (variant != DS_K_ATTN_DECODE_MMA && variant != DS_K_ATTN_DECODE_MMA_BLOCK &&
	     variant != DS_K_ATTN_DECODE_MMA_BULK))
		return DS_OK;
	int split = 1;
	enum ds_status rv = fast_decode_split(c, p->T, d, variant, &split, err);
	if (rv != DS_OK)
		return rv;
	struct ds_k_qkv_epi e = {c->big,
	                         L->bqkv,
	                         L->q_norm,
	                         L->k_norm,
	                         c->rope_cs,
	                         c->fast.attn_trace,
	                         c->fast.attn_early};
	DS_CUDA_TRY(ds_k_attn_decode_qkv(&e, kv, ds_cuda_tokmeta(c), p->T, d, split, c->part,
	                                 c->att, attn_counters(c, p), variant, c->fast.pdl,
	                                 c->stream),
	            err);
	*done = true;
	return DS_OK;
}

const struct ds_cuda_path_ops ds_cuda_fast_ops = {
    .gemm = fast_gemm,
    .attention = fast_attention,
    .gemm_silu = fast_gemm_silu,
    .gemm_gu_silu = fast_gemm_gu_silu,
    .attention_qkv = fast_attention_qkv,
};

int ds_cuda_fast_split(const struct ds_cuda_ctx *c, int T, int max_len)
{
	/* about 8 blocks per SM, and no block walking more than 8 tiles; the kernel itself never
	 * makes a range shorter than 2 tiles, so short rows use fewer of the splits */
	int blocks = T * c->cfg.n_kv_head;
	int s = (8 * c->n_sm + blocks - 1) / blocks;
	s = DS_MAX(s, (max_len + 8 * DS_K_ATTN_TILE - 1) / (8 * DS_K_ATTN_TILE));
	s = DS_MIN(s, (max_len + DS_K_ATTN_TILE - 1) / DS_K_ATTN_TILE);
	s = DS_MIN(s, 32);
	s = DS_MAX(s, 1);
	return ds_cuda_split_cap(c, T, s);
}

int ds_cuda_split_cap(const struct ds_cuda_ctx *c, int T, int s)
{
	size_t row = (size_t)c->cfg.n_head * (c->cfg.head_dim + 2);
	while (s > 1 && (size_t)T * row * s > c->part_floats)
		s--;
	return s;
}

/* ---- fused decode layers (kernels/mega.cu) ---- */

/* The producer's attention gate by default (slot items of o weights a block's producer issues
 * before the block's attention dot products are done): on the H200, 16 ran 0.1-1.6% faster than
 * none at 1 and 8 rows, ctx 512 and 2048, and within 0.2% of it at 2 and 4 rows; 0, 8, 32 and 48
 * items did no better (bench mega: bench/results/gpu-20261129-a1001e8-gate,
 * gpu-20261130-baa634c, gpu-20261130-6452140-late). The weights' evict-first policy is on by
 * default: without it the step ran 1-2% slower at 1 row, ctx 512, 4-5% at 1 row, ctx 2048, and
 * 5-11% at 2-8 rows (gpu-20261129-5ccb93c-ab-ef and the calls above). */
#define DS_FAST_MEGA_GATE 16

/* The fused kernel's layer table and barrier words, when the model qualifies: no q/k/v bias,
 * no q/k norm, dims ds_k_mega_supported takes. */
static enum ds_status mega_init(struct ds_cuda_ctx *c, struct ds_err *err)
{
	struct ds_cuda_fast *f = &c->fast;
	const struct ds_model_config *cfg = &c->cfg;
	const char *mg = getenv("DS_FAST_MEGA");
	f->mega = mg && strcmp(mg, "1") == 0;
	f->mega_tune = !(mg && strcmp(mg, "0") == 0);
	f->mega_ok = ds_k_mega_supported(ds_cuda_dims(c), cfg->hidden, cfg->ffn);
	const char *ef = getenv("DS_FAST_MEGA_WEF");
	f->mega_wef = !(ef && strcmp(ef, "0") == 0);
	const char *nz = getenv("DS_FAST_MEGA_NZ");
	f->mega_nz = nz ? DS_MAX(DS_MIN(atoi(nz), DS_K_ATTN_DECODE_MAX_SPLIT), 0) : 0;
	const char *gate = getenv("DS_FAST_MEGA_GATE");
	f->mega_gate = gate ? DS_MAX(atoi(gate), -1) : DS_FAST_MEGA_GATE;
	const char *gl = getenv("DS_FAST_MEGA_GATE_LATE");
	f->mega_gate_late = gl && strcmp(gl, "1") == 0;
	const char *dg = getenv("DS_FAST_MEGA_DIAG");
	f->mega_diag = dg ? atoi(dg) : 0;
	const char *sl = getenv("DS_FAST_MEGA_SLOTS");
	f->mega_slots = sl ? DS_MAX(atoi(sl), 0) : 0;
	for (int l = 0; l < cfg->n_layer && f->mega_ok; l++) {
		const struct ds_cuda_layer *L = &c->layers[l];
		f->mega_ok = !L->bqkv && !L->q_norm && !L->k_norm;
	}
	if (!f->mega_ok)
		return DS_OK;
	size_t n = (size_t)cfg->n_layer;
	struct ds_k_mega_layer *hl = calloc(n, sizeof(*hl));
	if (!hl)
		return ds_errf(err, DS_ERR_NOMEM, "cuda: out of memory");
	for (size_t l = 0; l < n; l++) {
		const struct ds_cuda_layer *L = &c->layers[l];
		struct ds_k_mega_layer ml = {L->attn_norm, L->wqkv, L->wo,
		                             L->ffn_norm,  L->w_gu, L->w_down};
		hl[l] = ml;
	}
	cudaError_t e = cudaMalloc((void **)&f->mega_layers, n * sizeof(*hl));
	if (e == cudaSuccess)
		e = cudaMemcpy(f->mega_layers, hl, n * sizeof(*hl), cudaMemcpyHostToDevice);
	free(hl);
	size_t n_cnt = (size_t)DS_K_MEGA_MAX_T * cfg->n_kv_head;
	if (e == cudaSuccess)
		e = cudaMalloc((void **)&f->mega_bar, sizeof(*f->mega_bar));
	if (e == cudaSuccess)
		e = cudaMemset(f->mega_bar, 0, sizeof(*f->mega_bar));
	if (e == cudaSuccess)
		e = cudaMalloc((void **)&f->mega_cnt, n_cnt * sizeof(unsigned));
	if (e == cudaSuccess)
		e = cudaMemset(f->mega_cnt, 0, n_cnt * sizeof(unsigned));
	DS_CUDA_TRY(e, err);
	return DS_OK;
}

bool ds_cuda_fast_mega_fits(const struct ds_cuda_ctx *c, const struct ds_cuda_pass *p)
{
	/* the kernel addresses a layer's cache in 32-bit counts of 16-byte units */
	return c->fast.mega_ok && pass_one_row_per_seq(p) &&
	       (p->T == 1 || p->T == 2 || p->T == 4 || p->T == 8) &&
	       c->kv_layer_elems / 8 < UINT32_MAX;
}

/* The fused kernel's arguments for the context's buffers and settings. */
static struct ds_k_mega mega_args(const struct ds_cuda_ctx *c)
{
	const struct ds_cuda_fast *f = &c->fast;
	const struct ds_model_config *cfg = &c->cfg;
	struct ds_k_mega a = {
	    .layers = f->mega_layers,
	    .n_layer = cfg->n_layer,
	    .hidden = cfg->hidden,
	    .ffn = cfg->ffn,
	    .rms_eps = cfg->rms_eps,
	    .d = ds_cuda_dims(c),
	    .tm = ds_cuda_tokmeta(c),
	    .rope_cs = c->rope_cs,
	    .kv = c->kv,
	    .kv_layer_elems = c->kv_layer_elems,
	    .x = c->x,
	    .q = c->q,
	    .att = c->att,
	    .act = c->h,
	    .part = c->part,
	    .part_floats = c->part_floats,
	    .bar = f->mega_bar,
	    .cnt = f->mega_cnt,
	    .out_norm = c->out_norm,
	    .lm_head = c->lm_head,
	    .vocab = cfg->vocab_size,
	    .logits = c->logits,
	    .trace = f->mega_trace,
	    .weights_evict_first = f->mega_wef,
	    .attn_splits = f->mega_nz,
	    .att_gate = f->mega_gate,
	    .att_gate_late = f->mega_gate_late,
	    .diag = f->mega_diag,
	    .max_slots = f->mega_slots,
	};
	return a;
}

enum ds_status ds_cuda_fast_mega(struct ds_cuda_ctx *c, const struct ds_cuda_pass *p, bool *done,
                                 struct ds_err *err)
{
	*done = false;
	if (!c->fast.mega || !ds_cuda_fast_mega_fits(c, p))
		return DS_OK;
	struct ds_k_mega a = mega_args(c);
	DS_CUDA_TRY(ds_k_mega_decode(&a, p->T, c->n_sm, c->stream), err);
	*done = true;
	return DS_OK;
}

int ds_cuda_fast_mega_slots(const struct ds_cuda_ctx *c, int T)
{
	struct ds_k_mega a = mega_args(c);
	int n = 0;
	return c->fast.mega_ok && ds_k_mega_ring_slots(&a, T, c->n_sm, &n) == cudaSuccess ? n : -1;
}

/* ---- lifetime ---- */

static struct lt_plan *plan_of(struct ds_cuda_ctx *c, int i)
{
	struct ds_cuda_fast_plans *pl = c->fast.plans;
	return &pl->p[i];
}

enum ds_status ds_cuda_fast_init(struct ds_cuda_ctx *c, struct ds_err *err)
{
	struct ds_cuda_fast *f = &c->fast;
	f->plans = calloc(1, sizeof(struct ds_cuda_fast_plans));
	if (!f->plans)
		return ds_errf(err, DS_ERR_NOMEM, "cuda: out of memory");
	LT_TRY(cublasLtCreate(&f->lt), err);
	f->ws_bytes = WORKSPACE_BYTES;
	DS_CUDA_TRY(cudaMalloc(&f->workspace, f->ws_bytes), err);
	const char *g = getenv("DS_CUDA_GRAPHS");
	f->use_graphs = !(g && strcmp(g, "0") == 0);
	const char *sk = getenv("DS_CUDA_SKINNY");
	f->skinny = !(sk && strcmp(sk, "0") == 0);
	/* PDL on by default since the H200 run of 469c75e: the graph-replayed decode step was
	 * 2-3% faster with it at batch 1, 8 and 32 (bench/results/gpu-20261129-469c75e), and the
	 * gpu suite checks that it gives the same bits (DS_CUDA_PDL=0: off) */
	const char *pdl = getenv("DS_CUDA_PDL");
	f->pdl = !(pdl && strcmp(pdl, "0") == 0);
	/* the streaming GEMM ran 5-8% slower than the kept step configuration at batch 8 in
	 * every H200 call that timed it (bench/results/gpu-20261201-b11d21b-final), so the
	 * graph tuning tries it only when asked */
	const char *sg = getenv("DS_FAST_STREAM");
	f->stream = sg && strcmp(sg, "1") == 0;
	f->stream_tune = sg && strcmp(sg, "tune") == 0;
	const char *sv = getenv("DS_FAST_STREAM_VARIANT");
	f->stream_variant = sv ? DS_MAX(DS_MIN(atoi(sv), DS_K_STREAM_VARIANTS - 1), 0) : 0;
	const char *fq = getenv("DS_FAST_FUSE_QKV");
	f->fuse_qkv = !(fq && strcmp(fq, "0") == 0);
	/* staged weights off by default outside the graph tuning, which measures them */
	const char *ss = getenv("DS_FAST_SKINNY_STAGE");
	f->skinny_stage = ss ? DS_MAX(DS_MIN(atoi(ss), DS_K_SKINNY_MAX_STAGE), 0) : 0;
	f->stage_tune = !(ss && strcmp(ss, "0") == 0);
	const char *ae = getenv("DS_FAST_ATTN_EARLY");
	f->attn_early = !(ae && strcmp(ae, "0") == 0);
	const char *am = getenv("DS_FAST_ATTN_MERGE");
	f->attn_merge = am && strcmp(am, "1") == 0;
	f->merge_tune = !(am && strcmp(am, "0") == 0);
	size_t n_cnt = (size_t)c->cap_rows * c->cfg.n_kv_head;
	DS_CUDA_TRY(cudaMalloc((void **)&f->attn_cnt, n_cnt * sizeof(unsigned)), err);
	DS_CUDA_TRY(cudaMemset(f->attn_cnt, 0, n_cnt * sizeof(unsigned)), err);
	const char *ll = getenv("DS_FAST_LT_LOG");
	f->lt_log = ll && strcmp(ll, "1") == 0;
	const char *lp = getenv("DS_FAST_LT_PARTS");
	f->lt_parts = !(lp && strcmp(lp, "0") == 0);
	const char *gt = getenv("DS_FAST_GRAPH_TUNE");
	f->graph_tune = !(gt && strcmp(gt, "0") == 0);
	for (int i = 0; i < DS_CUDA_N_BUCKETS; i++)
		f->graph_cfg[i] = -1;
	return mega_init(c, err);
}

void ds_cuda_fast_free(struct ds_cuda_ctx *c)
{
	struct ds_cuda_fast *f = &c->fast;
	for (int i = 0; i < DS_CUDA_N_BUCKETS; i++)
		if (f->graph[i])
			cudaGraphExecDestroy(f->graph[i]);
	if (f->plans) {
		for (int i = 0; i < DS_CUDA_ALGO_CACHE; i++)
			plan_destroy(plan_of(c, i));
		for (int i = 0; i < DS_CUDA_PARTS_CACHE; i++)
			plan_destroy(parts_plan_of(c, i));
	}
	free(f->plans);
	if (f->workspace)
		cudaFree(f->workspace);
	if (f->gu_scratch)
		cudaFree(f->gu_scratch);
	if (f->mega_layers)
		cudaFree(f->mega_layers);
	if (f->mega_bar)
		cudaFree(f->mega_bar);
	if (f->mega_cnt)
		cudaFree(f->mega_cnt);
	if (f->attn_cnt)
		cudaFree(f->attn_cnt);
	if (f->lt)
		cublasLtDestroy(f->lt);
	memset(f, 0, sizeof(*f));
}
