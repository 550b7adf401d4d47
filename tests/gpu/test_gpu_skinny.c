/* test_gpu_skinny.c - the fast path's tensor-core skinny GEMM (kernels/skinny.cu): every variant
 * against a CPU double reference on random data (never zeros) at M = 1..64 (odd M included),
 * odd N and K not a multiple of the 32-wide chunk, and the llama3-8b projection shapes; guard
 * bytes after C and a poisoned C (every element must be written). Also: bad arguments are
 * rejected, runs are bit-reproducible, and a programmatic-dependent launch after a kernel that
 * writes A sees the new A, eagerly and inside a captured CUDA graph; and the CUDA backend's
 * fast decode with the whole chain under PDL (DS_CUDA_PDL=1) gives the same bits as without.
 * The K-split variants (thread-block clusters) run through all of the above. The fused SiLU*mul
 * variants (ds_k_skinny_silu) must give the bits of ds_k_silu_mul then ds_k_skinny with the same
 * variant, eagerly, under PDL and replayed from a graph, and the backend's fast decode with the
 * down projection forced fused must give the bits of the same decode forced unfused. RMSNorm
 * (rows.cu, whose loads were batched) must give the bits of its arithmetic emulated on the CPU. */
#include "gpu_util.h"
#include "gpu_test_util.h"
#include "gpu_model.h"
#include "cuda_internal.h"
#include "kernels.h"
#include "synth.h"

static const int ms[] = {1, 2, 3, 5, 8, 13, 16, 31, 32, 33, 64};

/* One (N, K) case of a decode GEMM kernel: A and W random (seeds seed + K, seed + 1 + N), and
 * for each M of m_list the CPU double reference and a guarded C, which run(x) fills through the
 * kernel's variants on a non-blocking stream (as the backend launches), checking each launch
 * with case_check. */
struct gemm_case_ctx {
	struct gt_gemm_case g;
	float *C0, *dC;
	size_t nc;
	bool all;
	cudaStream_t st;
	int M;
};

/* The launch just queued on x->st: synchronized, C's guard bytes intact, every element written
 * and near the reference; its bits kept when first, else equal to the kept ones when same. */
static void case_check(struct gemm_case_ctx *x, const char *name, bool first, bool same)
{
	size_t cb = x->nc * 4;
	CK(cudaStreamSynchronize(x->st));
	from_dev(x->g.C, x->dC, cb);
	dev_check_guard(x->dC, cb);
	gt_gemm_check(x->g.C, x->g.ref, x->g.sabs, x->M, x->g.N, x->g.K, x->all, name);
	if (first)
		memcpy(x->C0, x->g.C, cb);
	else if (same)
		assert_memory_equal(x->C0, x->g.C, cb);
}

static void gemm_case(int N, int K, const int *m_list, int n_m, uint64_t seed,
                      void (*run)(struct gemm_case_ctx *))
{
	int Mmax = 0;
	for (int i = 0; i < n_m; i++)
		Mmax = DS_MAX(Mmax, m_list[i]);
	struct gemm_case_ctx x;
	memset(&x, 0, sizeof(x));
	x.all = (size_t)N * K <= ((size_t)4 << 20);
	gt_gemm_case_init(&x.g, Mmax, N, K, seed + K, seed + 1 + N);
	x.C0 = malloc((size_t)Mmax * N * 4);
	CK(cudaStreamCreateWithFlags(&x.st, cudaStreamNonBlocking));
	for (int i = 0; i < n_m; i++) {
		x.M = m_list[i];
		x.nc = (size_t)x.M * N;
		gt_gemm_reference(x.g.A, x.g.W, x.M, N, K, x.all, x.g.ref, x.g.sabs);
		x.dC = dev_alloc_guarded(x.nc * 4);
		CK(cudaDeviceSynchronize());
		run(&x);
		cudaFree(x.dC);
	}
	CK(cudaStreamDestroy(x.st));
	free(x.C0);
	gt_gemm_case_free(&x.g);
}

/* Every skinny variant: plain, PDL, and weights staged in shared memory (1 and the most
 * iterations, with and without PDL); one variant gives the same bits every way. */
static void skinny_run(struct gemm_case_ctx *x)
{
	static const int runs[][2] = {
	    {0, 0}, {1, 0}, {1, 1}, {0, DS_K_SKINNY_MAX_STAGE}, {1, DS_K_SKINNY_MAX_STAGE}};
	for (int v = 0; v < DS_K_SKINNY_VARIANTS; v++) {
		char name[64];
		assert_true(ds_k_skinny_describe(x->M, v, name, sizeof(name)) > 0);
		for (size_t ri = 0; ri < DS_ARRAY_LEN(runs); ri++) {
			CK(cudaMemsetAsync(x->dC, 0x7f, x->nc * 4, x->st));
			CK(ds_k_skinny(x->g.dA, x->g.dW, x->dC, x->M, x->g.N, x->g.K, v,
			               runs[ri][0], runs[ri][1], x->st));
			case_check(x, name, ri == 0, true);
		}
	}
}

/* Every M of ms (or the first n_m of them) and every variant on one (N, K). */
static void shape_case(int N, int K, const int *m_list, int n_m)
{
	gemm_case(N, K, m_list, n_m, 101, skinny_run);
}

static void test_skinny_odd_shapes(void **state)
{
	(void)state;
	int shapes[][2] = {{1000, 136}, {4097, 264}, {77, 4104}, {1, 32}, {17, 8}, {130, 2056}};
	for (size_t s = 0; s < DS_ARRAY_LEN(shapes); s++)
		shape_case(shapes[s][0], shapes[s][1], ms, (int)DS_ARRAY_LEN(ms));
}

static void test_skinny_model_shapes(void **state)
{
	(void)state;
	/* llama3-8b: qkv, o_proj, gate_up, down (lm_head has the K of these and a larger N) */
	int shapes[][2] = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
	int m_model[] = {1, 3, 8, 13, 32, 64};
	for (size_t s = 0; s < DS_ARRAY_LEN(shapes); s++)
		shape_case(shapes[s][0], shapes[s][1], m_model, (int)DS_ARRAY_LEN(m_model));
}

/* After a rejects test's no-op launches: C (cb bytes, guarded) still holds its poison; the
 * test's three buffers are freed. */
static void expect_untouched_free(void *in, void *w, float *C, size_t cb)
{
	CK(cudaDeviceSynchronize());
	uint32_t word;
	from_dev(&word, C, 4);
	assert_int_equal(word, 0x7f7f7f7fu);
	dev_check_guard(C, cb);
	cudaFree(in);
	cudaFree(w);
	cudaFree(C);
}

static void test_skinny_rejects(void **state)
{
	(void)state;
	int N = 64, K = 128;
	uint16_t *dA = dev_alloc_guarded((size_t)65 * K * 2),
	         *dW = dev_alloc_guarded((size_t)N * K * 2);
	float *dC = dev_alloc_guarded((size_t)65 * N * 4);
	assert_int_equal(ds_k_skinny(dA, dW, dC, 2, N, 100, 0, 0, 0, 0), cudaErrorInvalidValue);
	assert_int_equal(ds_k_skinny(dA, dW, dC, 65, N, K, 0, 0, 0, 0), cudaErrorInvalidValue);
	assert_int_equal(ds_k_skinny(dA, dW, dC, 2, N, K, DS_K_SKINNY_VARIANTS, 0, 0, 0),
	                 cudaErrorInvalidValue);
	assert_int_equal(ds_k_skinny(dA, dW, dC, 2, N, K, -1, 0, 0, 0), cudaErrorInvalidValue);
	assert_int_equal(ds_k_skinny(dA, dW, dC, 2, N, K, 0, 0, -1, 0), cudaErrorInvalidValue);
	assert_int_equal(ds_k_skinny(dA, dW, dC, 2, N, K, 0, 0, DS_K_SKINNY_MAX_STAGE + 1, 0),
	                 cudaErrorInvalidValue);
	assert_int_equal(ds_k_skinny(dA + 1, dW, dC, 2, N, K, 0, 0, 0, 0), cudaErrorInvalidValue);
	assert_int_equal(ds_k_skinny(dA, dW, dC, 2, N, 0, 0, 0, 0, 0), cudaErrorInvalidValue);
	char name[64];
	assert_int_equal(ds_k_skinny_describe(0, 0, name, sizeof(name)), -1);
	assert_int_equal(ds_k_skinny_describe(65, 0, name, sizeof(name)), -1);
	/* empty shapes are no-ops: C keeps its poison */
	CK(ds_k_skinny(dA, dW, dC, 0, N, K, 0, 0, 0, 0));
	CK(ds_k_skinny(dA, dW, dC, 3, 0, K, 0, 0, 0, 0));
	expect_untouched_free(dA, dW, dC, (size_t)65 * N * 4);
}

/* A kernel writes A, then the skinny GEMM (launched with PDL) reads it: the GEMM must wait for
 * the writer. Eagerly and replayed from a captured graph, on a non-blocking stream. */
static void test_skinny_pdl_chain(void **state)
{
	(void)state;
	int M = 8, N = 4096, K = 14336;
	size_t na = (size_t)M * K, nw = (size_t)N * K, nc = (size_t)M * N;
	uint16_t *A = malloc(na * 2), *W = malloc(nw * 2);
	ds_synth_fill(A, na, 0, 5, 6, 1.0f, 0.0f);
	fill_bf16(W, nw, 77, 1.0f);
	uint16_t *stale = malloc(na * 2);
	fill_bf16(stale, na, 78, 1.0f);
	double *ref = malloc(nc * sizeof(double)), *sabs = malloc(nc * sizeof(double));
	gt_gemm_reference(A, W, M, N, K, false, ref, sabs);
	uint16_t *dA = to_dev(stale, na * 2), *dW = to_dev(W, nw * 2);
	float *dC = dev_alloc_guarded(nc * 4), *C = malloc(nc * 4);
	cudaStream_t st;
	CK(cudaDeviceSynchronize());
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	for (int v = 0; v < DS_K_SKINNY_VARIANTS; v++) {
		/* eager */
		CK(cudaMemcpyAsync(dA, stale, na * 2, cudaMemcpyHostToDevice, st));
		CK(cudaMemsetAsync(dC, 0x7f, nc * 4, st));
		CK(ds_k_synth_fill(dA, na, 0, 5, 6, 1.0f, 0.0f, st));
		CK(ds_k_skinny(dA, dW, dC, M, N, K, v, 1, 0, st));
		CK(cudaStreamSynchronize(st));
		from_dev(C, dC, nc * 4);
		gt_gemm_check(C, ref, sabs, M, N, K, false, "pdl eager");
		/* captured */
		cudaGraph_t g;
		cudaGraphExec_t ge;
		CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
		CK(ds_k_synth_fill(dA, na, 0, 5, 6, 1.0f, 0.0f, st));
		CK(ds_k_skinny(dA, dW, dC, M, N, K, v, 1, 0, st));
		CK(cudaStreamEndCapture(st, &g));
		CK(cudaGraphInstantiate(&ge, g, 0));
		for (int rep = 0; rep < 3; rep++) {
			CK(cudaMemcpyAsync(dA, stale, na * 2, cudaMemcpyHostToDevice, st));
			CK(cudaMemsetAsync(dC, 0x7f, nc * 4, st));
			CK(cudaGraphLaunch(ge, st));
			CK(cudaStreamSynchronize(st));
			from_dev(C, dC, nc * 4);
			gt_gemm_check(C, ref, sabs, M, N, K, false, "pdl graph");
		}
		dev_check_guard(dC, nc * 4);
		CK(cudaGraphExecDestroy(ge));
		CK(cudaGraphDestroy(g));
	}
	CK(cudaStreamDestroy(st));
	cudaFree(dA);
	cudaFree(dW);
	cudaFree(dC);
	free(A);
	free(W);
	free(stale);
	free(ref);
	free(sabs);
	free(C);
}

/* ---- fused SiLU*mul (ds_k_skinny_silu) ---- */

/* Every variant at M = 1..8 on (N, K): the fused GEMM on gu (M, 2K) fp32 equals ds_k_silu_mul
 * into h then ds_k_skinny on h, bit for bit (eager, PDL, graph replay), and h's product is
 * right against the CPU reference; C poisoned and guarded. */
static void silu_case(int N, int K)
{
	int m_list[] = {1, 2, 3, 5, 8};
	int Mmax = DS_K_SKINNY_SILU_MAX_M;
	size_t ngu = (size_t)Mmax * 2 * K, nh = (size_t)Mmax * K, nw = (size_t)N * K;
	float *gu = malloc(ngu * 4);
	uint16_t *W = malloc(nw * 2), *h = malloc(nh * 2);
	fill_f32(gu, ngu, 201 + K, 4.0f);
	fill_bf16(W, nw, 202 + N, 1.0f);
	float *dgu = to_dev(gu, ngu * 4);
	uint16_t *dW = to_dev(W, nw * 2), *dh = dev_alloc_guarded(nh * 2);
	bool all = (size_t)N * K <= ((size_t)4 << 20);
	size_t ncmax = (size_t)Mmax * N;
	double *ref = malloc(ncmax * sizeof(double)), *sabs = malloc(ncmax * sizeof(double));
	float *C = malloc(ncmax * 4), *C0 = malloc(ncmax * 4);
	cudaStream_t st;
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	CK(ds_k_silu_mul(dgu, Mmax, K, dh, st));
	CK(cudaStreamSynchronize(st));
	from_dev(h, dh, nh * 2);
	dev_check_guard(dh, nh * 2);
	for (size_t mi = 0; mi < DS_ARRAY_LEN(m_list); mi++) {
		int M = m_list[mi];
		size_t nc = (size_t)M * N;
		gt_gemm_reference(h, W, M, N, K, all, ref, sabs);
		float *dC = dev_alloc_guarded(nc * 4);
		CK(cudaDeviceSynchronize());
		for (int v = 0; v < DS_K_SKINNY_VARIANTS; v++) {
			char name[64];
			assert_true(ds_k_skinny_describe(M, v, name, sizeof(name)) > 0);
			CK(cudaMemsetAsync(dC, 0x7f, nc * 4, st));
			CK(ds_k_skinny(dh, dW, dC, M, N, K, v, 0, 0, st));
			CK(cudaStreamSynchronize(st));
			from_dev(C0, dC, nc * 4);
			gt_gemm_check(C0, ref, sabs, M, N, K, all, name);
			for (int run = 0; run < 3; run++) { /* plain, PDL, PDL + staged weights */
				int pdl = run > 0, stage = run == 2 ? DS_K_SKINNY_MAX_STAGE : 0;
				CK(cudaMemsetAsync(dC, 0x7f, nc * 4, st));
				CK(ds_k_skinny_silu(dgu, dW, dC, M, N, K, v, pdl, stage, st));
				CK(cudaStreamSynchronize(st));
				from_dev(C, dC, nc * 4);
				dev_check_guard(dC, nc * 4);
				if (memcmp(C0, C, nc * 4) != 0)
					fail_msg(
					    "%s silu pdl=%d stage=%d M=%d N=%d K=%d: fused bits "
					    "differ from silu_mul + skinny",
					    name, pdl, stage, M, N, K);
			}
			/* captured and replayed */
			cudaGraph_t g;
			cudaGraphExec_t ge;
			CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
			CK(ds_k_skinny_silu(dgu, dW, dC, M, N, K, v, 0, 0, st));
			CK(cudaStreamEndCapture(st, &g));
			CK(cudaGraphInstantiate(&ge, g, 0));
			for (int rep = 0; rep < 2; rep++) {
				CK(cudaMemsetAsync(dC, 0x7f, nc * 4, st));
				CK(cudaGraphLaunch(ge, st));
				CK(cudaStreamSynchronize(st));
				from_dev(C, dC, nc * 4);
				assert_memory_equal(C0, C, nc * 4);
			}
			CK(cudaGraphExecDestroy(ge));
			CK(cudaGraphDestroy(g));
			dev_check_guard(dC, nc * 4);
		}
		cudaFree(dC);
	}
	CK(cudaStreamDestroy(st));
	cudaFree(dgu);
	cudaFree(dW);
	cudaFree(dh);
	free(gu);
	free(W);
	free(h);
	free(ref);
	free(sabs);
	free(C);
	free(C0);
}

static void test_skinny_silu(void **state)
{
	(void)state;
	/* odd N, K not a multiple of 32, K of one 8-wide group; llama3-8b's down projection */
	int shapes[][2] = {{1000, 136}, {77, 4104}, {17, 8}, {130, 2056}, {4096, 14336}};
	for (size_t s = 0; s < DS_ARRAY_LEN(shapes); s++)
		silu_case(shapes[s][0], shapes[s][1]);
	/* bad arguments */
	int N = 64, K = 128;
	float *dgu = dev_alloc_guarded((size_t)9 * 2 * K * 4);
	uint16_t *dW = dev_alloc_guarded((size_t)N * K * 2);
	float *dC = dev_alloc_guarded((size_t)9 * N * 4);
	assert_int_equal(
	    ds_k_skinny_silu(dgu, dW, dC, DS_K_SKINNY_SILU_MAX_M + 1, N, K, 0, 0, 0, 0),
	    cudaErrorInvalidValue);
	assert_int_equal(ds_k_skinny_silu(dgu, dW, dC, 2, N, 100, 0, 0, 0, 0),
	                 cudaErrorInvalidValue);
	assert_int_equal(ds_k_skinny_silu(dgu + 1, dW, dC, 2, N, K, 0, 0, 0, 0),
	                 cudaErrorInvalidValue);
	assert_int_equal(ds_k_skinny_silu(dgu, dW, dC, 2, N, K, DS_K_SKINNY_VARIANTS, 0, 0, 0),
	                 cudaErrorInvalidValue);
	CK(ds_k_skinny_silu(dgu, dW, dC, 0, N, K, 0, 0, 0, 0));
	expect_untouched_free(dgu, dW, dC, (size_t)9 * N * 4);
}

/* ---- the backend's decode chain with and without programmatic dependent launch ---- */

#include "decode_fix.h"

/* Decode graphs tuned over the step configurations: the first (tuning) call and the replays give
 * the same bits, every allowed configuration was timed, the kept one is the fastest, and its
 * output equals an untuned run with that configuration's switches (eager, then graph), also with
 * the attention's split merge switched (attn_merge: the same bits either way). With
 * DS_CUDA_SKINNY=0 semantics (skinny off) only the skinny-free configurations are tried. */
static void test_graph_tune(void **state)
{
	(void)state;
	struct decode_fix f;
	decode_fix_init(&f, "small", 12, 5, 6, 8, 37);
	struct ds_cuda_ctx *c = f.c;
	int sizes[] = {1, 3, 8};
	for (size_t si = 0; si < DS_ARRAY_LEN(sizes); si++) {
		int B = sizes[si], bi = ds_cuda_fast_bucket(B);
		decode_fix_step(&f, B);
		for (int allow_skinny = 1; allow_skinny >= 0; allow_skinny--) {
			ds_cuda_fast_graphs_reset(c);
			c->fast.graph_tune = true;
			c->fast.skinny = allow_skinny;
			c->fast.pdl = true;
			c->fast.fuse_qkv = true;
			c->fast.stage_tune = true;
			c->fast.skinny_stage = 0;
			c->fast.mega = false;
			c->fast.stream = false;
			c->fast.stream_tune = true;
			fwd_ok(&f.be, DS_PATH_FAST, f.ss, B, f.lg0, f.rows);
			decode_fix_expect_lg0(&f, B, 2);
			int kept = c->fast.graph_cfg[bi];
			assert_true(kept >= 0 && kept < DS_CUDA_N_STEP_CFGS);
			for (int i = 0; i < DS_CUDA_N_STEP_CFGS; i++) {
				float ms = c->fast.graph_ms[bi][i];
				const struct ds_cuda_step_cfg *sc = &ds_cuda_fast_step_cfgs[i];
				/* fused layers: only in buckets of 1, 2, 4 or 8 rows ("small"
				 * qualifies) */
				bool allowed = (allow_skinny || !sc->skinny) &&
				               (!sc->mega || (1 << bi) <= DS_K_MEGA_MAX_T) &&
				               (!sc->stream || (1 << bi) <= DS_K_STREAM_MAX_M);
				assert_true(allowed ? isfinite(ms) && ms > 0 : !isfinite(ms));
				assert_true(!allowed || c->fast.graph_ms[bi][kept] <= ms);
			}
			assert_true(allow_skinny || !ds_cuda_fast_step_cfgs[kept].skinny);
			print_message(
			    "B=%d skinny allowed %d: kept configuration %d (skinny %d pdl %d "
			    "fuse %d stage %d merge %d stream %d) %.3f ms\n",
			    B, allow_skinny, kept, (int)ds_cuda_fast_step_cfgs[kept].skinny,
			    (int)ds_cuda_fast_step_cfgs[kept].pdl,
			    (int)ds_cuda_fast_step_cfgs[kept].fuse,
			    ds_cuda_fast_step_cfgs[kept].stage,
			    (int)ds_cuda_fast_step_cfgs[kept].merge,
			    (int)ds_cuda_fast_step_cfgs[kept].stream, c->fast.graph_ms[bi][kept]);
			/* the same switches untuned: eager, then captured */
			ds_cuda_fast_graphs_reset(c);
			c->fast.graph_tune = false;
			c->fast.skinny = ds_cuda_fast_step_cfgs[kept].skinny;
			c->fast.pdl = ds_cuda_fast_step_cfgs[kept].pdl;
			c->fast.fuse_qkv = ds_cuda_fast_step_cfgs[kept].fuse;
			c->fast.skinny_stage = ds_cuda_fast_step_cfgs[kept].stage;
			c->fast.mega = ds_cuda_fast_step_cfgs[kept].mega;
			c->fast.attn_merge = ds_cuda_fast_step_cfgs[kept].merge;
			c->fast.stream = ds_cuda_fast_step_cfgs[kept].stream;
			decode_fix_expect_lg0(&f, B, 3);
			assert_non_null(c->fast.graph[bi]);
			/* staged weights change no bit (the most stages, eager then captured) */
			ds_cuda_fast_graphs_reset(c);
			c->fast.skinny_stage = DS_K_SKINNY_MAX_STAGE;
			decode_fix_expect_lg0(&f, B, 3);
			/* the attention merging its own splits gives the combine kernel's bits */
			ds_cuda_fast_graphs_reset(c);
			c->fast.skinny_stage = ds_cuda_fast_step_cfgs[kept].stage;
			c->fast.attn_merge = !ds_cuda_fast_step_cfgs[kept].merge;
			decode_fix_expect_lg0(&f, B, 3);
			c->fast.attn_merge = false;
			c->fast.skinny_stage = 0;
			c->fast.mega = false;
			/* the streaming GEMMs under PDL: eager, captured, replayed, the same bits
			 */
			if (B <= DS_K_STREAM_MAX_M) {
				ds_cuda_fast_graphs_reset(c);
				c->fast.stream = true;
				c->fast.pdl = true;
				fwd_ok(&f.be, DS_PATH_FAST, f.ss, B, f.lg0, f.rows);
				decode_fix_expect_lg0(&f, B, 3);
			}
			c->fast.stream = false;
		}
	}
	decode_fix_free(&f);
}

/* The q/k/v epilogue fused into the tensor-core attention (fuse_qkv) gives the bits of
 * ds_k_qkv_rope followed by that kernel, eager, captured and replayed, in one backend (the GEMM
 * choices, timed once, are shared); an all-rows prefill on the fast path (several rows of one
 * sequence: not fused, attention without PDL) gives the same bits with it on or off. */
static void test_fused_qkv_bits(void **state)
{
	(void)state;
	struct decode_fix f;
	decode_fix_init(&f, "small", 13, 7, 8, 8, 29);
	struct ds_cuda_ctx *c = f.c;
	c->fast.graph_tune = false;
	int sizes[] = {1, 3, 8};
	for (size_t si = 0; si < DS_ARRAY_LEN(sizes); si++) {
		int B = sizes[si];
		decode_fix_step(&f, B);
		for (int fuse = 0; fuse < 2; fuse++) {
			ds_cuda_fast_graphs_reset(c);
			c->fast.fuse_qkv = fuse;
			for (int k = 0; k < 3; k++) { /* eager, capture, replay */
				fwd_ok(&f.be, DS_PATH_FAST, f.ss, B, fuse || k ? f.lg : f.lg0,
				       f.rows);
				if (fuse || k)
					assert_memory_equal(f.lg0, f.lg, (size_t)B * f.rowb);
			}
		}
	}
	/* all rows of a 29-token prompt on the fast path, fused switch on and off */
	int L = f.L;
	float *all0 = malloc((size_t)L * f.rowb), *all1 = malloc((size_t)L * f.rowb);
	for (int fuse = 0; fuse < 2; fuse++) {
		c->fast.fuse_qkv = fuse;
		struct ds_fwd_seq s = {f.tok, L, 0, f.blk, f.nb, true, {0.0f, 0, 1.0f, 1}, false};
		fwd_ok(&f.be, DS_PATH_FAST, &s, 1, fuse ? all1 : all0, f.rows);
	}
	assert_memory_equal(all0, all1, (size_t)L * f.rowb);
	free(all0);
	free(all1);
	c->fast.fuse_qkv = true;
	ds_cuda_fast_graphs_reset(c);
	decode_fix_free(&f);
}

static void test_pdl_decode_bits(void **state)
{
	(void)state;
	struct decode_fix f;
	decode_fix_init(&f, "small", 11, 3, 4, 32, 45);
	struct ds_cuda_ctx *c = f.c;
	c->fast.graph_tune = false; /* one configuration per graph: PDL's bits alone */
	int sizes[] = {1, 8, 32};
	for (size_t si = 0; si < DS_ARRAY_LEN(sizes); si++) {
		int B = sizes[si];
		decode_fix_step(&f, B);
		for (int pdl = 0; pdl < 2; pdl++) {
			ds_cuda_fast_graphs_reset(c);
			c->fast.pdl = pdl;
			/* eager (the GEMM choices are timed here on first use), capture, replays */
			for (int k = 0; k < 4; k++) {
				fwd_ok(&f.be, DS_PATH_FAST, f.ss, B, pdl || k ? f.lg : f.lg0,
				       f.rows);
				if (pdl || k)
					assert_memory_equal(f.lg0, f.lg, (size_t)B * f.rowb);
			}
		}
		double sd = 0;
		for (int i = 0; i < f.V; i++)
			sd += (double)f.lg0[i] * f.lg0[i];
		assert_true(sd > 0 && isfinite(sd));
	}
	c->fast.pdl = false;
	/* every candidate timed on the way agreed with cuBLASLt (or the unfused pair) */
	for (int i = 0; i < c->fast.n_picks; i++)
		if (c->fast.picks[i].n_rejected)
			fail_msg("pick M=%d N=%d K=%d silu=%d: %d candidates rejected",
			         c->fast.picks[i].M_timed, c->fast.picks[i].N, c->fast.picks[i].K,
			         (int)c->fast.picks[i].silu, c->fast.picks[i].n_rejected);
	decode_fix_free(&f);
}

/* The streaming GEMM against a CPU double reference on random data: every variant on every SM
 * without and with PDL (twice each: the same bits) and on 5 blocks (several tile groups a
 * block), guard bytes after C. */
static void stream_run(struct gemm_case_ctx *x)
{
	int n_sm = 0;
	CK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, 0));
	const int runs[][2] = {{n_sm, 0}, {n_sm, 1}, {5, 1}};
	for (int v = 0; v < DS_K_STREAM_VARIANTS; v++)
		for (size_t ri = 0; ri < DS_ARRAY_LEN(runs); ri++) {
			char name[64];
			snprintf(name, sizeof(name), "stream v%d grid %d pdl %d", v, runs[ri][0],
			         runs[ri][1]);
			for (int rep = 0; rep < 2; rep++) {
				CK(cudaMemsetAsync(x->dC, 0x7f, x->nc * 4, x->st));
				CK(ds_k_stream_gemm(x->g.dA, x->g.dW, x->dC, x->M, x->g.N, x->g.K,
				                    v, runs[ri][0], runs[ri][1], x->st));
				case_check(x, name, ri == 0 && rep == 0, ri < 2);
			}
		}
}

/* M = 1..8 at odd shapes (a partial last tile, a partial last K segment, K of one segment) and
 * llama3-8b's. */
static void test_stream_gemm(void **state)
{
	(void)state;
	int m_all[] = {1, 2, 3, 4, 5, 6, 7, 8}, m_model[] = {1, 3, 8};
	int odd[][2] = {{1000, 144}, {77, 2448}, {4097, 2048}, {17, 16}, {130, 4112}};
	for (size_t s = 0; s < DS_ARRAY_LEN(odd); s++)
		gemm_case(odd[s][0], odd[s][1], m_all, (int)DS_ARRAY_LEN(m_all), 201, stream_run);
	int model[][2] = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
	for (size_t s = 0; s < DS_ARRAY_LEN(model); s++)
		gemm_case(model[s][0], model[s][1], m_model, (int)DS_ARRAY_LEN(m_model), 201,
		          stream_run);
}

static void test_stream_rejects(void **state)
{
	(void)state;
	int N = 64, K = 128;
	uint16_t *dA = dev_alloc_guarded((size_t)9 * K * 2),
	         *dW = dev_alloc_guarded((size_t)N * K * 2);
	float *dC = dev_alloc_guarded((size_t)9 * N * 4);
	assert_int_equal(ds_k_stream_gemm(dA, dW, dC, DS_K_STREAM_MAX_M + 1, N, K, 0, 8, 0, 0),
	                 cudaErrorInvalidValue);
	assert_int_equal(ds_k_stream_gemm(dA, dW, dC, 2, N, 120, 0, 8, 0, 0),
	                 cudaErrorInvalidValue);
	assert_int_equal(ds_k_stream_gemm(dA, dW, dC, 2, N, 0, 0, 8, 0, 0), cudaErrorInvalidValue);
	assert_int_equal(ds_k_stream_gemm(dA, dW, dC, 2, 0, K, 0, 8, 0, 0), cudaErrorInvalidValue);
	assert_int_equal(ds_k_stream_gemm(dA, dW, dC, 2, N, K, 0, 0, 0, 0), cudaErrorInvalidValue);
	assert_int_equal(ds_k_stream_gemm(dA, dW, dC, 2, N, K, -1, 8, 0, 0), cudaErrorInvalidValue);
	assert_int_equal(ds_k_stream_gemm(dA, dW, dC, 2, N, K, DS_K_STREAM_VARIANTS, 8, 0, 0),
	                 cudaErrorInvalidValue);
	assert_int_equal(ds_k_stream_gemm(dA + 1, dW, dC, 2, N, K, 0, 8, 0, 0),
	                 cudaErrorInvalidValue);
	assert_int_equal(ds_k_stream_gemm(dA, dW + 4, dC, 2, N, K, 0, 8, 0, 0),
	                 cudaErrorInvalidValue);
	CK(ds_k_stream_gemm(dA, dW, dC, 0, N, K, 0, 8, 0, 0)); /* no rows: C keeps its poison */
	expect_untouched_free(dA, dW, dC, (size_t)9 * N * 4);
}

/* Whether graph g holds a programmatic edge. */
static bool graph_has_programmatic_edge(cudaGraph_t g)
{
	size_t n = 0;
	CK(cudaGraphGetEdges(g, NULL, NULL, NULL, &n));
	if (n == 0)
		return false;
	cudaGraphNode_t *from = malloc(n * sizeof(*from)), *to = malloc(n * sizeof(*to));
	cudaGraphEdgeData *ed = malloc(n * sizeof(*ed));
	CK(cudaGraphGetEdges(g, from, to, ed, &n));
	bool any = false;
	for (size_t i = 0; i < n; i++)
		any |= ed[i].type == cudaGraphDependencyTypeProgrammatic;
	free(from);
	free(to);
	free(ed);
	return any;
}

/* Under PDL the streaming GEMM copies weights before its wait but reads A only after it: behind a
 * producer that writes A 40 us past its own wait (a programmatic edge between them in the
 * captured graph), over an A of zeros, every replay gives the eager GEMM's bits. */
static void test_stream_pdl_wait(void **state)
{
	(void)state;
	int n_sm = 0;
	CK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, 0));
	const int M = 8, N = 4096, K = 4096;
	struct gt_gemm_case g;
	gt_gemm_case_init(&g, M, N, K, 211, 213);
	size_t ab = (size_t)M * K * 2, cb = (size_t)M * N * 4;
	uint16_t *dA = dev_alloc_guarded(ab);
	float *dC = dev_alloc_guarded(cb), *C0 = malloc(cb), *C1 = malloc(cb);
	cudaStream_t st;
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	CK(ds_k_stream_gemm(g.dA, g.dW, dC, M, N, K, 0, n_sm, 0, st));
	CK(cudaStreamSynchronize(st));
	from_dev(C0, dC, cb);
	cudaGraph_t gr;
	CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
	CK(ds_k_delayed_copy(dA, g.dA, ab, 40000, 1, st));
	CK(ds_k_stream_gemm(dA, g.dW, dC, M, N, K, 0, n_sm, 1, st));
	CK(cudaStreamEndCapture(st, &gr));
	assert_true(graph_has_programmatic_edge(gr));
	cudaGraphExec_t ex;
	CK(cudaGraphInstantiate(&ex, gr, 0));
	for (int k = 0; k < 5; k++) {
		CK(cudaMemsetAsync(dA, 0, ab, st));
		CK(cudaMemsetAsync(dC, 0x7f, cb, st));
		CK(cudaGraphLaunch(ex, st));
		CK(cudaStreamSynchronize(st));
		from_dev(C1, dC, cb);
		assert_memory_equal(C0, C1, cb);
	}
	dev_check_guard(dA, ab);
	dev_check_guard(dC, cb);
	CK(cudaGraphExecDestroy(ex));
	CK(cudaGraphDestroy(gr));
	CK(cudaStreamDestroy(st));
	cudaFree(dA);
	cudaFree(dC);
	free(C0);
	free(C1);
	gt_gemm_case_free(&g);
}

/* The picks for the down projection of a decode step of B rows: the fused one (silu) and the
 * plain one of the same shape. */
static void down_picks(struct ds_cuda_ctx *c, int B, struct ds_cuda_pick **fused,
                       struct ds_cuda_pick **plain)
{
	int N = c->cfg.hidden, K = c->cfg.ffn;
	*fused = *plain = NULL;
	for (int i = 0; i < c->fast.n_picks; i++) {
		struct ds_cuda_pick *pk = &c->fast.picks[i];
		if (pk->ok && pk->M_timed == B && pk->N == N && pk->K == K)
			*(pk->silu ? fused : plain) = pk;
	}
	assert_non_null(*fused);
	assert_non_null(*plain);
	assert_int_equal((*fused)->n_rejected, 0);
	assert_int_equal((*plain)->n_rejected, 0);
}

/* The fast decode with the down projection forced to fused variant v gives the bits of the same
 * decode forced to ds_k_silu_mul + skinny variant v (eager, then captured and replayed). */
static void test_silu_decode_bits(void **state)
{
	(void)state;
	struct decode_fix f;
	decode_fix_init(&f, "small", 12, 5, 6, 8, 21);
	struct ds_cuda_ctx *c = f.c;
	c->fast.graph_tune = false; /* the forced picks in every graph */
	int sizes[] = {1, 8}, vs[] = {0, 5, 6, 7, 8, 11, 12, 13};
	for (size_t si = 0; si < DS_ARRAY_LEN(sizes); si++) {
		int B = sizes[si];
		decode_fix_step(&f, B);
		ds_cuda_fast_graphs_reset(c);
		fwd_ok(&f.be, DS_PATH_FAST, f.ss, B, f.lg0, f.rows); /* times the choices */
		struct ds_cuda_pick *fused, *plain;
		down_picks(c, B, &fused, &plain);
		struct ds_cuda_pick f0 = *fused, p0 = *plain;
		for (size_t vi = 0; vi < DS_ARRAY_LEN(vs); vi++) {
			for (int mode = 0; mode < 2; mode++) {
				if (mode == 0) {
					fused->kind = DS_CUDA_GEMM_SKINNY_SILU;
					fused->variant = vs[vi];
				} else {
					fused->kind = DS_CUDA_GEMM_SPLIT;
					plain->kind = DS_CUDA_GEMM_SKINNY;
					plain->variant = vs[vi];
				}
				ds_cuda_fast_graphs_reset(c);
				/* eager, capture, replay */
				for (int k = 0; k < 3; k++) {
					fwd_ok(&f.be, DS_PATH_FAST, f.ss, B,
					       mode || k ? f.lg : f.lg0, f.rows);
					if (mode || k)
						assert_memory_equal(f.lg0, f.lg,
						                    (size_t)B * f.rowb);
				}
			}
			*fused = f0;
			*plain = p0;
		}
	}
	ds_cuda_fast_graphs_reset(c);
	decode_fix_free(&f);
}

/* ---- RMSNorm bits (kernels/rows.cu batches its loads; the arithmetic must not move) ---- */

static void test_rmsnorm_bits(void **state)
{
	(void)state;
	/* llama3-8b's hidden, odd sizes, 8192 / 8193, the FFN width */
	int hiddens[] = {4096, 4097, 1000, 64, 8192, 8193, 14336};
	for (size_t hi = 0; hi < DS_ARRAY_LEN(hiddens); hi++) {
		int hidden = hiddens[hi], n_x = 5;
		for (int mode = 0; mode < 3; mode++) { /* plain, residual add, gathered rows */
			size_t nx = (size_t)n_x * hidden;
			float *x = malloc(nx * 4), *dl = malloc(nx * 4), *xg = malloc(nx * 4);
			uint16_t *w = malloc((size_t)hidden * 2);
			fill_f32(x, nx, 31 + hidden, 3.0f);
			fill_f32(dl, nx, 32 + hidden, 1.0f);
			fill_bf16(w, hidden, 33, 1.5f);
			int32_t rows[3] = {4, 1, 2};
			int n_rows = mode == 2 ? 3 : n_x;
			uint16_t *out = malloc((size_t)n_rows * hidden * 2),
			         *ref = malloc((size_t)hidden * 2);
			gt_rmsnorm_run(x, mode ? dl : NULL, mode == 2 ? rows : NULL, w, n_x, n_rows,
			               hidden, 1e-5f, out, xg);
			for (int r = 0; r < n_rows; r++) {
				int src = mode == 2 ? rows[r] : r;
				float *xr = x + (size_t)src * hidden;
				if (mode)
					for (int i = 0; i < hidden; i++)
						xr[i] = xr[i] + dl[(size_t)src * hidden + i];
				gt_rmsnorm_emulate(xr, w, hidden, 1e-5f, 256, ref);
				if (memcmp(ref, out + (size_t)r * hidden, (size_t)hidden * 2) != 0)
					fail_msg(
					    "rmsnorm hidden=%d mode=%d row %d: bits differ from "
					    "the kernel's arithmetic emulated on the CPU",
					    hidden, mode, r);
			}
			assert_memory_equal(x, xg, nx * 4);
			free(x);
			free(dl);
			free(xg);
			free(w);
			free(out);
			free(ref);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_skinny_rejects),   cmocka_unit_test(test_skinny_odd_shapes),
	    cmocka_unit_test(test_skinny_pdl_chain), cmocka_unit_test(test_skinny_model_shapes),
	    cmocka_unit_test(test_pdl_decode_bits),  cmocka_unit_test(test_stream_gemm),
	    cmocka_unit_test(test_stream_rejects),   cmocka_unit_test(test_stream_pdl_wait),
	    cmocka_unit_test(test_graph_tune),       cmocka_unit_test(test_fused_qkv_bits),
	    cmocka_unit_test(test_skinny_silu),      cmocka_unit_test(test_silu_decode_bits),
	    cmocka_unit_test(test_rmsnorm_bits),
	};
	return cmocka_run_group_tests_name("gpu_skinny", tests, NULL, NULL);
}
