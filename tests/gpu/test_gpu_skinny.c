/* test_gpu_skinny.c - the fast path's tensor-core skinny GEMM (kernels/skinny.cu): every variant
 * against a CPU double reference on random data (never zeros) at M = 1..64 (odd M included),
 * odd N and K not a multiple of the 32-wide chunk, and the llama3-8b projection shapes; guard
 * bytes after C and a poisoned C (every element must be written). Also: bad arguments are
 * rejected, runs are bit-reproducible, and a programmatic-dependent launch after a kernel that
 * writes A sees the new A, eagerly and inside a captured CUDA graph; and the CUDA backend's
 * fast decode with the whole chain under PDL (DS_CUDA_PDL=1) gives the same bits as without. */
#include "gpu_util.h"
#include "gpu_model.h"
#include "cuda_internal.h"
#include "kernels.h"
#include "synth.h"

static const int ms[] = {1, 2, 3, 5, 8, 13, 16, 31, 32, 33, 64};

/* Column n is checked against the reference (all of them for small N). */
static bool col_checked(int n, int N, bool all)
{
	return all || n < 64 || n >= N - 64 || n % 61 == 7;
}

/* ref[m * N + n] and sum |a * w| for the checked columns. */
static void reference(const uint16_t *A, const uint16_t *W, int M, int N, int K, bool all,
                      double *ref, double *sabs)
{
	for (int n = 0; n < N; n++) {
		if (!col_checked(n, N, all))
			continue;
		const uint16_t *w = W + (size_t)n * K;
		for (int m = 0; m < M; m++) {
			const uint16_t *a = A + (size_t)m * K;
			double s = 0, sa = 0;
			for (int k = 0; k < K; k++) {
				double p = (double)bf(a[k]) * bf(w[k]);
				s += p;
				sa += fabs(p);
			}
			ref[(size_t)m * N + n] = s;
			sabs[(size_t)m * N + n] = sa;
		}
	}
}

static void check_c(const float *C, const double *ref, const double *sabs, int M, int N, int K,
                    bool all, const char *what)
{
	for (int m = 0; m < M; m++)
		for (int n = 0; n < N; n++) {
			float got = C[(size_t)m * N + n];
			/* the poison (0x7f7f7f7f, 3.4e38) marks an element never written */
			if (!isfinite(got) || fabsf(got) > 1e30f)
				fail_msg("%s M=%d N=%d K=%d: C(%d,%d) = %g not written", what, M, N,
				         K, m, n, got);
			if (!col_checked(n, N, all))
				continue;
			double r = ref[(size_t)m * N + n], sa = sabs[(size_t)m * N + n];
			if (!(fabs(got - r) <= 4.0 * K * 6e-8 * sa + 1e-30))
				fail_msg("%s M=%d N=%d K=%d at (%d,%d): %.9g vs %.9g (sum|aw| %g)",
				         what, M, N, K, m, n, got, r, sa);
		}
}

/* Every M of ms (or the first n_m of them) and every variant on one (N, K). */
static void shape_case(int N, int K, const int *m_list, int n_m)
{
	int Mmax = 0;
	for (int i = 0; i < n_m; i++)
		Mmax = DS_MAX(Mmax, m_list[i]);
	bool all = (size_t)N * K <= ((size_t)4 << 20);
	size_t na = (size_t)Mmax * K, nw = (size_t)N * K;
	uint16_t *A = malloc(na * 2), *W = malloc(nw * 2);
	fill_bf16(A, na, 101 + K, 1.0f);
	fill_bf16(W, nw, 102 + N, 1.0f);
	uint16_t *dA = to_dev(A, na * 2), *dW = to_dev(W, nw * 2);
	size_t ncmax = (size_t)Mmax * N;
	double *ref = malloc(ncmax * sizeof(double)), *sabs = malloc(ncmax * sizeof(double));
	float *C = malloc(ncmax * 4), *C0 = malloc(ncmax * 4);
	cudaStream_t st;
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	for (int i = 0; i < n_m; i++) {
		int M = m_list[i];
		size_t nc = (size_t)M * N;
		reference(A, W, M, N, K, all, ref, sabs);
		float *dC = dev_alloc_guarded(nc * 4);
		CK(cudaDeviceSynchronize());
		for (int v = 0; v < DS_K_SKINNY_VARIANTS; v++) {
			char name[64];
			assert_true(ds_k_skinny_describe(M, v, name, sizeof(name)) > 0);
			for (int pdl = 0; pdl < 2; pdl++) {
				/* on a non-blocking stream, as the backend launches */
				CK(cudaMemsetAsync(dC, 0x7f, nc * 4, st));
				CK(ds_k_skinny(dA, dW, dC, M, N, K, v, pdl, st));
				CK(cudaStreamSynchronize(st));
				from_dev(C, dC, nc * 4);
				dev_check_guard(dC, nc * 4);
				check_c(C, ref, sabs, M, N, K, all, name);
				if (pdl == 0)
					memcpy(C0, C, nc * 4);
				else /* same variant, same shape: the same bits */
					assert_memory_equal(C0, C, nc * 4);
			}
		}
		cudaFree(dC);
	}
	CK(cudaStreamDestroy(st));
	cudaFree(dA);
	cudaFree(dW);
	free(A);
	free(W);
	free(ref);
	free(sabs);
	free(C);
	free(C0);
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

static void test_skinny_rejects(void **state)
{
	(void)state;
	int N = 64, K = 128;
	uint16_t *dA = dev_alloc_guarded((size_t)65 * K * 2),
	         *dW = dev_alloc_guarded((size_t)N * K * 2);
	float *dC = dev_alloc_guarded((size_t)65 * N * 4);
	assert_int_equal(ds_k_skinny(dA, dW, dC, 2, N, 100, 0, 0, 0), cudaErrorInvalidValue);
	assert_int_equal(ds_k_skinny(dA, dW, dC, 65, N, K, 0, 0, 0), cudaErrorInvalidValue);
	assert_int_equal(ds_k_skinny(dA, dW, dC, 2, N, K, DS_K_SKINNY_VARIANTS, 0, 0),
	                 cudaErrorInvalidValue);
	assert_int_equal(ds_k_skinny(dA, dW, dC, 2, N, K, -1, 0, 0), cudaErrorInvalidValue);
	assert_int_equal(ds_k_skinny(dA + 1, dW, dC, 2, N, K, 0, 0, 0), cudaErrorInvalidValue);
	assert_int_equal(ds_k_skinny(dA, dW, dC, 2, N, 0, 0, 0, 0), cudaErrorInvalidValue);
	char name[64];
	assert_int_equal(ds_k_skinny_describe(0, 0, name, sizeof(name)), -1);
	assert_int_equal(ds_k_skinny_describe(65, 0, name, sizeof(name)), -1);
	/* empty shapes are no-ops: C keeps its poison */
	CK(ds_k_skinny(dA, dW, dC, 0, N, K, 0, 0, 0));
	CK(ds_k_skinny(dA, dW, dC, 3, 0, K, 0, 0, 0));
	CK(cudaDeviceSynchronize());
	uint32_t word;
	from_dev(&word, dC, 4);
	assert_int_equal(word, 0x7f7f7f7fu);
	dev_check_guard(dC, (size_t)65 * N * 4);
	cudaFree(dA);
	cudaFree(dW);
	cudaFree(dC);
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
	reference(A, W, M, N, K, false, ref, sabs);
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
		CK(ds_k_skinny(dA, dW, dC, M, N, K, v, 1, st));
		CK(cudaStreamSynchronize(st));
		from_dev(C, dC, nc * 4);
		check_c(C, ref, sabs, M, N, K, false, "pdl eager");
		/* captured */
		cudaGraph_t g;
		cudaGraphExec_t ge;
		CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
		CK(ds_k_synth_fill(dA, na, 0, 5, 6, 1.0f, 0.0f, st));
		CK(ds_k_skinny(dA, dW, dC, M, N, K, v, 1, st));
		CK(cudaStreamEndCapture(st, &g));
		CK(cudaGraphInstantiate(&ge, g, 0));
		for (int rep = 0; rep < 3; rep++) {
			CK(cudaMemcpyAsync(dA, stale, na * 2, cudaMemcpyHostToDevice, st));
			CK(cudaMemsetAsync(dC, 0x7f, nc * 4, st));
			CK(cudaGraphLaunch(ge, st));
			CK(cudaStreamSynchronize(st));
			from_dev(C, dC, nc * 4);
			check_c(C, ref, sabs, M, N, K, false, "pdl graph");
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

/* ---- the backend's decode chain with and without programmatic dependent launch ---- */

#define BS 16

static void fwd_ok(struct ds_backend *be, enum ds_path path, struct ds_fwd_seq *s, int n,
                   float *logits, struct ds_fwd_row *rows)
{
	struct ds_fwd_batch b = {path, s, n, rows, logits};
	struct ds_err err;
	if (ds_backend_forward(be, &b, &err) != DS_OK)
		fail_msg("forward: %s", err.msg);
}

static void test_pdl_decode_bits(void **state)
{
	(void)state;
	struct ds_model *m = model_deferred("small", 11);
	assert_non_null(m);
	struct ds_backend be;
	struct ds_err err;
	int B_max = 32, L = 45, nb = (L + 1 + BS - 1) / BS;
	if (ds_backend_cuda_init(&be, m, 0, &err) != DS_OK)
		fail_msg("cuda init: %s", err.msg);
	if (ds_backend_kv_init(&be, B_max * nb, BS, &err) != DS_OK)
		fail_msg("kv init: %s", err.msg);
	struct ds_cuda_ctx *c = be.ctx;
	int V = m->cfg.vocab_size;
	int32_t *tok = malloc((size_t)B_max * (L + 1) * 4), *blk = malloc((size_t)B_max * nb * 4);
	for (int i = 0; i < B_max * (L + 1); i++)
		tok[i] = (int32_t)(ds_hash3(3, 4, (uint64_t)i) % (uint64_t)V);
	for (int i = 0; i < B_max * nb; i++)
		blk[i] = i;
	struct ds_fwd_seq *ss = calloc((size_t)B_max, sizeof(*ss));
	struct ds_fwd_row *rows = malloc((size_t)B_max * L * sizeof(*rows));
	/* prompts of L tokens through the reference path fill the KV */
	for (int i = 0; i < B_max; i++)
		ss[i] = (struct ds_fwd_seq){tok + (size_t)i * (L + 1), L,  0,
		                            blk + (size_t)i * nb,      nb, false,
		                            {0.0f, 0, 1.0f, 1}};
	fwd_ok(&be, DS_PATH_REF, ss, B_max, NULL, rows);
	size_t rowb = (size_t)V * 4;
	float *lg0 = malloc((size_t)B_max * rowb), *lg = malloc((size_t)B_max * rowb);
	int sizes[] = {1, 8, 32};
	for (size_t si = 0; si < DS_ARRAY_LEN(sizes); si++) {
		int B = sizes[si];
		for (int i = 0; i < B; i++)
			ss[i] = (struct ds_fwd_seq){tok + (size_t)i * (L + 1) + L,
			                            1,
			                            L,
			                            blk + (size_t)i * nb,
			                            nb,
			                            false,
			                            {0.0f, 0, 1.0f, 1}};
		for (int pdl = 0; pdl < 2; pdl++) {
			ds_cuda_fast_graphs_reset(c);
			c->fast.pdl = pdl;
			/* eager (the GEMM choices are timed here on first use), capture, replays */
			for (int k = 0; k < 4; k++) {
				fwd_ok(&be, DS_PATH_FAST, ss, B, pdl || k ? lg : lg0, rows);
				if (pdl || k)
					assert_memory_equal(lg0, lg, (size_t)B * rowb);
			}
		}
		double sd = 0;
		for (int i = 0; i < V; i++)
			sd += (double)lg0[i] * lg0[i];
		assert_true(sd > 0 && isfinite(sd));
	}
	c->fast.pdl = false;
	free(tok);
	free(blk);
	free(ss);
	free(rows);
	free(lg0);
	free(lg);
	ds_backend_free(&be);
	ds_model_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_skinny_rejects),   cmocka_unit_test(test_skinny_odd_shapes),
	    cmocka_unit_test(test_skinny_pdl_chain), cmocka_unit_test(test_skinny_model_shapes),
	    cmocka_unit_test(test_pdl_decode_bits),
	};
	return cmocka_run_group_tests_name("gpu_skinny", tests, NULL, NULL);
}
