/* test_gpu_refgemm.c - every variant of the reference GEMM (kernels/gemm_ref*.cu) against a
 * CPU reference on random data at odd shapes, with guard bytes after C, and each variant's
 * batch invariance: a row computed alone (M = 1) is bit-identical (memcmp) to the same row
 * placed anywhere in a batch of M = 7 ... 2048 random rows, and run-to-run repeatability of
 * the whole output. The split-K cluster variants (7..10, 20: S = 2, 4, 2, 4, 2) get K values whose
 * k-tiles do not divide by S (the last splits get fewer or none) and fewer k-tiles than S. The
 * 64-row variants (11..16) get M on both sides of their tile edges (63, 65, 255) and N that is not
 * a multiple of 64, the 224-column ones (17, 18) N past and at multiples of 224 (and F of 112 for
 * the fused gate/up), the 192-column one (19) N that is never a multiple of 192, and every
 * variant must give the bytes of the first variant with its S (variant 0's without split-K).
 *
 * The CPU reference (double) checks whole rows at tile edges and whole columns at tile edges,
 * and every element of C is checked to be written (no poison left), so a wrong tile, a wrong
 * swizzle, a lost stage or an unwritten edge fails without an O(M N K) host product. */
#include "gpu_util.h"
#include "kernels.h"

struct host_gemm {
	int M, N, K;
	float *A, *W; /* bf16 values as floats */
	uint16_t *Ab, *Wb;
};

static void host_gemm_init(struct host_gemm *h, int M, int N, int K, uint64_t seed)
{
	h->M = M, h->N = N, h->K = K;
	size_t na = (size_t)M * K, nw = (size_t)N * K;
	h->Ab = malloc(na * 2);
	h->Wb = malloc(nw * 2);
	h->A = malloc(na * 4);
	h->W = malloc(nw * 4);
	fill_bf16(h->Ab, na, seed, 1.0f);
	fill_bf16(h->Wb, nw, seed + 1, 1.0f);
	for (size_t i = 0; i < na; i++)
		h->A[i] = bf(h->Ab[i]);
	for (size_t i = 0; i < nw; i++)
		h->W[i] = bf(h->Wb[i]);
}

static void host_gemm_free(struct host_gemm *h)
{
	free(h->A);
	free(h->W);
	free(h->Ab);
	free(h->Wb);
}

static void check_elem(const struct host_gemm *h, const float *C, int v, int m, int n)
{
	const float *a = h->A + (size_t)m * h->K, *w = h->W + (size_t)n * h->K;
	double s = 0, sa = 0;
	for (int k = 0; k < h->K; k++) {
		double p = (double)a[k] * w[k];
		s += p;
		sa += fabs(p);
	}
	double got = C[(size_t)m * h->N + n];
	if (!(fabs(got - s) <= 4.0 * h->K * 6e-8 * sa + 1e-30))
		fail_msg("gemm variant %d (%s) %dx%dx%d at (%d,%d): %.9g vs %.9g", v,
		         ds_k_gemm_ref_variant_name(v), h->M, h->N, h->K, m, n, got, s);
}

/* Rows and columns at tile edges (0, 63, 64, 127, 128, 255, 256, ...) and the last ones. */
static int edge_list(int n, int *out)
{
	static const int cand[] = {0, 1, 63, 64, 127, 128, 129, 255, 256, 257, 383, 511, 512};
	int c = 0;
	for (size_t i = 0; i < DS_ARRAY_LEN(cand); i++)
		if (cand[i] < n)
			out[c++] = cand[i];
	int tail[3] = {n / 2, n - 2, n - 1};
	for (int i = 0; i < 3; i++)
		if (tail[i] >= 0 && (c == 0 || tail[i] > out[c - 1]))
			out[c++] = tail[i];
	return c;
}

static void variant_case(int M, int N, int K)
{
	struct host_gemm h;
	host_gemm_init(&h, M, N, K, 1000 + (uint64_t)M * 7 + (uint64_t)N * 13 + (uint64_t)K);
	size_t nc = (size_t)M * N;
	uint16_t *dA = to_dev(h.Ab, (size_t)M * K * 2), *dW = to_dev(h.Wb, (size_t)N * K * 2);
	float *C = malloc(nc * 4);
	int rows[20], cols[20];
	int nr = edge_list(M, rows), ncl = edge_list(N, cols);
	for (int v = 0; v < DS_K_GEMM_REF_N_VARIANTS; v++) {
		float *dC = dev_alloc_guarded(nc * 4);
		CK(ds_k_gemm_ref_variant(v, dA, dW, dC, M, N, K, 0));
		CK(cudaDeviceSynchronize());
		from_dev(C, dC, nc * 4);
		dev_check_guard(dC, nc * 4);
		for (size_t i = 0; i < nc; i++)
			if (!(fabsf(C[i]) < 1e30f)) /* the 0x7f poison is 3.4e38 */
				fail_msg("gemm variant %d (%s) %dx%dx%d: C[%zu] = %g not written",
				         v, ds_k_gemm_ref_variant_name(v), M, N, K, i, C[i]);
		for (int i = 0; i < nr; i++)
			for (int n = 0; n < N; n++)
				check_elem(&h, C, v, rows[i], n);
		for (int j = 0; j < ncl; j++)
			for (int m = 0; m < M; m++)
				check_elem(&h, C, v, m, cols[j]);
		CK(cudaFree(dC));
	}
	CK(cudaFree(dA));
	CK(cudaFree(dW));
	free(C);
	host_gemm_free(&h);
}

static void test_variants_vs_cpu(void **state)
{
	(void)state;
	CK(ds_k_gemm_ref_setup());
	variant_case(1, 1000, 64);
	variant_case(7, 4097, 4160);
	variant_case(129, 1000, 4160);
	variant_case(600, 4097, 64);
	variant_case(600, 1000, 4160);
	variant_case(3, 72, 40);     /* K not a multiple of the 64-wide k-tile, tiny N */
	variant_case(257, 264, 136); /* N just past a 256 tile */
	variant_case(130, 520, 4096);
	variant_case(1100, 8200, 136); /* more tiles than SMs: persistent blocks walk several */
	/* split-K: 5 k-tiles (S = 4: 2, 2, 1, 0; S = 2: 3, 2), a K tail inside the last one */
	variant_case(65, 300, 312);
	variant_case(200, 134, 1000); /* 16 k-tiles, the last 40 wide; N % 4 == 2 */
	variant_case(1, 520, 14336);  /* down_proj's K at M = 1: 224 k-tiles, 56 per split */
	variant_case(2, 6, 16);       /* one short k-tile: S - 1 splits have none */
	/* 64-row tiles: M at their edges, N past a 64-column tile */
	variant_case(63, 1000, 4160);
	variant_case(65, 200, 1000);
	variant_case(255, 4097, 520);
	/* 224-column tiles (17, 18): N one past two of them, M past one 128-row tile */
	variant_case(129, 449, 1000);
}

/* The whole output twice at M = 1000 (more clusters than fit at once): bit-identical. */
static void test_variants_repeatable(void **state)
{
	(void)state;
	CK(ds_k_gemm_ref_setup());
	const int M = 1000, N = 4100, K = 4104;
	uint16_t *A = malloc((size_t)M * K * 2), *W = malloc((size_t)N * K * 2);
	fill_bf16(A, (size_t)M * K, 41, 1.0f);
	fill_bf16(W, (size_t)N * K, 42, 1.0f);
	uint16_t *dA = to_dev(A, (size_t)M * K * 2), *dW = to_dev(W, (size_t)N * K * 2);
	size_t nc = (size_t)M * N;
	float *dC = dev_alloc_guarded(nc * 4), *c1 = malloc(nc * 4), *c2 = malloc(nc * 4);
	for (int v = 0; v < DS_K_GEMM_REF_N_VARIANTS; v++) {
		CK(ds_k_gemm_ref_variant(v, dA, dW, dC, M, N, K, 0));
		CK(cudaDeviceSynchronize());
		from_dev(c1, dC, nc * 4);
		CK(cudaMemset(dC, 0x7f, nc * 4));
		CK(ds_k_gemm_ref_variant(v, dA, dW, dC, M, N, K, 0));
		CK(cudaDeviceSynchronize());
		from_dev(c2, dC, nc * 4);
		if (memcmp(c1, c2, nc * 4) != 0)
			fail_msg("gemm variant %d (%s): two runs of %dx%dx%d differ", v,
			         ds_k_gemm_ref_variant_name(v), M, N, K);
	}
	dev_check_guard(dC, nc * 4);
	CK(cudaFree(dA));
	CK(cudaFree(dW));
	CK(cudaFree(dC));
	free(A);
	free(W);
	free(c1);
	free(c2);
}

/* Variants with the same split count S stand in for each other at any M in the reference
 * path (refpath/cuda_ref.c autotunes among them per M bucket), which is sound only if they
 * give the same bytes: memcmp of each against the first variant with its S, whole outputs. */
static void families_case(int M, int N, int K)
{
	uint16_t *A = malloc((size_t)M * K * 2), *W = malloc((size_t)N * K * 2);
	fill_bf16(A, (size_t)M * K, 61 + (uint64_t)M, 1.0f);
	fill_bf16(W, (size_t)N * K, 62 + (uint64_t)N, 1.0f);
	uint16_t *dA = to_dev(A, (size_t)M * K * 2), *dW = to_dev(W, (size_t)N * K * 2);
	size_t nc = (size_t)M * N;
	float *dC = dev_alloc_guarded(nc * 4);
	float *out[DS_K_GEMM_REF_N_VARIANTS];
	for (int v = 0; v < DS_K_GEMM_REF_N_VARIANTS; v++) {
		out[v] = malloc(nc * 4);
		CK(cudaMemset(dC, 0x7f, nc * 4));
		CK(ds_k_gemm_ref_variant(v, dA, dW, dC, M, N, K, 0));
		CK(cudaDeviceSynchronize());
		from_dev(out[v], dC, nc * 4);
		int first = v;
		for (int u = v - 1; u >= 0; u--)
			if (ds_k_gemm_ref_variant_splits(u) == ds_k_gemm_ref_variant_splits(v))
				first = u;
		if (first != v && memcmp(out[first], out[v], nc * 4) != 0)
			fail_msg("gemm variants %d (%s) and %d (%s), both S = %d, differ in bits at "
			         "%dx%dx%d",
			         first, ds_k_gemm_ref_variant_name(first), v,
			         ds_k_gemm_ref_variant_name(v), ds_k_gemm_ref_variant_splits(v), M, N, K);
	}
	dev_check_guard(dC, nc * 4);
	for (int v = 0; v < DS_K_GEMM_REF_N_VARIANTS; v++)
		free(out[v]);
	CK(cudaFree(dA));
	CK(cudaFree(dW));
	CK(cudaFree(dC));
	free(A);
	free(W);
}

static void test_variant_families_same_bits(void **state)
{
	(void)state;
	CK(ds_k_gemm_ref_setup());
	families_case(1, 1000, 4160);
	families_case(7, 264, 1088); /* the reference path's self-check shape, at M = 7 */
	families_case(63, 4097, 4160);
	families_case(65, 200, 1000);
	families_case(255, 1000, 4104);
	families_case(129, 4097, 4160);
	families_case(600, 1000, 1000);
	families_case(300, 520, 14336);
	families_case(1100, 8200, 136);
}

/* The fused gate/up epilogue (ds_k_gemm_ref_silu_variant) of every variant without split-K
 * against that variant's plain output (M, 2F) followed by ds_k_silu_mul: memcmp, and the
 * guard after H. Split-K variants refuse with cudaErrorNotSupported. */
static void silu_case(int M, int F, int K)
{
	int N = 2 * F;
	uint16_t *A = malloc((size_t)M * K * 2), *W = malloc((size_t)N * K * 2);
	fill_bf16(A, (size_t)M * K, 71 + (uint64_t)M, 1.0f);
	fill_bf16(W, (size_t)N * K, 72 + (uint64_t)F, 0.25f);
	uint16_t *dA = to_dev(A, (size_t)M * K * 2), *dW = to_dev(W, (size_t)N * K * 2);
	size_t nh = (size_t)M * F;
	float *dC = dev_alloc_guarded((size_t)M * N * 4);
	uint16_t *dH = dev_alloc_guarded(nh * 2), *want = malloc(nh * 2), *got = malloc(nh * 2);
	int fused = 0;
	for (int v = 0; v < DS_K_GEMM_REF_N_VARIANTS; v++) {
		if (ds_k_gemm_ref_variant_splits(v) != 1) {
			assert_int_equal(ds_k_gemm_ref_silu_variant(v, dA, dW, dH, M, F, K, 0),
			                 cudaErrorNotSupported);
			continue;
		}
		CK(ds_k_gemm_ref_variant(v, dA, dW, dC, M, N, K, 0));
		CK(ds_k_silu_mul(dC, M, F, dH, 0));
		CK(cudaDeviceSynchronize());
		from_dev(want, dH, nh * 2);
		CK(cudaMemset(dH, 0x7f, nh * 2));
		CK(ds_k_gemm_ref_silu_variant(v, dA, dW, dH, M, F, K, 0));
		CK(cudaDeviceSynchronize());
		from_dev(got, dH, nh * 2);
		if (memcmp(want, got, nh * 2) != 0) {
			size_t i = 0;
			while (want[i] == got[i])
				i++;
			fail_msg("gemm variant %d (%s) fused SiLU*mul differs at %dx%dx%d, row %zu "
			         "column %zu: %04x vs %04x",
			         v, ds_k_gemm_ref_variant_name(v), M, F, K, i / F, i % F, got[i],
			         want[i]);
		}
		fused++;
	}
	assert_int_equal(fused, 16); /* 0..6, 11..19 */
	dev_check_guard(dH, nh * 2);
	dev_check_guard(dC, (size_t)M * N * 4);
	free(want);
	free(got);
	CK(cudaFree(dA));
	CK(cudaFree(dW));
	CK(cudaFree(dC));
	CK(cudaFree(dH));
	free(A);
	free(W);
}

static void test_silu_fused(void **state)
{
	(void)state;
	CK(ds_k_gemm_ref_setup());
	silu_case(1, 132, 1088); /* the reference path's self-check shape, at M = 1 */
	silu_case(7, 132, 1088);
	silu_case(65, 1000, 512); /* F not a multiple of any half tile */
	silu_case(129, 448, 4160);
	silu_case(300, 1536, 512);
	silu_case(600, 97, 1000); /* odd F: element stores */
	silu_case(2048, 512, 256);
}

/* Row x (K) alone, then at several places of batches of M random rows: memcmp per variant. */
static void test_variants_invariant(void **state)
{
	(void)state;
	CK(ds_k_gemm_ref_setup());
	const int N = 4200, K = 4104, Mmax = 2048; /* > 132 tiles; K ends mid k-tile */
	uint16_t *W = malloc((size_t)N * K * 2), *B = malloc((size_t)Mmax * K * 2);
	uint16_t *x = malloc((size_t)K * 2);
	fill_bf16(W, (size_t)N * K, 77, 1.0f);
	uint16_t *dW = to_dev(W, (size_t)N * K * 2), *dA;
	CK(cudaMalloc((void **)&dA, (size_t)Mmax * K * 2));
	float *dC = dev_alloc_guarded((size_t)Mmax * N * 4);
	float *row1 = malloc((size_t)N * 4), *got = malloc((size_t)N * 4);
	const int Ms[] = {7, 63, 65, 129, 255, 600, 2048};
	for (int v = 0; v < DS_K_GEMM_REF_N_VARIANTS; v++)
		for (int probe = 0; probe < 2; probe++) {
			fill_bf16(x, (size_t)K, 500 + (uint64_t)probe, 1.0f);
			CK(cudaMemcpy(dA, x, (size_t)K * 2, cudaMemcpyHostToDevice));
			CK(ds_k_gemm_ref_variant(v, dA, dW, dC, 1, N, K, 0));
			CK(cudaDeviceSynchronize());
			from_dev(row1, dC, (size_t)N * 4);
			for (size_t mi = 0; mi < DS_ARRAY_LEN(Ms); mi++) {
				size_t M = (size_t)Ms[mi];
				/* rows at 64- and 128-row tile edges too */
				size_t pos[7] = {0, 1, 63, 64, M / 2 + 3, 128, M - 1};
				/* the other rows random, different per batch, variant and probe */
				fill_bf16(B, M * K,
				          900 + M + 31 * (uint64_t)v + 7 * (uint64_t)probe, 1.0f);
				for (int p = 0; p < 7; p++)
					if (pos[p] < M)
						memcpy(B + pos[p] * K, x, (size_t)K * 2);
				CK(cudaMemcpy(dA, B, M * K * 2, cudaMemcpyHostToDevice));
				CK(ds_k_gemm_ref_variant(v, dA, dW, dC, (int)M, N, K, 0));
				CK(cudaDeviceSynchronize());
				for (int p = 0; p < 7; p++) {
					if (pos[p] >= M)
						continue;
					from_dev(got, dC + pos[p] * N, (size_t)N * 4);
					if (memcmp(got, row1, (size_t)N * 4) != 0)
						fail_msg("gemm variant %d (%s): the row at %zu of "
						         "M=%zu differs "
						         "from the same row at M=1",
						         v, ds_k_gemm_ref_variant_name(v), pos[p],
						         M);
				}
			}
		}
	dev_check_guard(dC, (size_t)Mmax * N * 4);
	CK(cudaFree(dA));
	CK(cudaFree(dW));
	CK(cudaFree(dC));
	free(W);
	free(B);
	free(x);
	free(row1);
	free(got);
}

/* Bad arguments are refused without a launch; M = 0 or N = 0 is a no-op. */
static void test_variant_args(void **state)
{
	(void)state;
	CK(ds_k_gemm_ref_setup());
	uint16_t *dA, *dW;
	CK(cudaMalloc((void **)&dA, 4096));
	CK(cudaMalloc((void **)&dW, 4096));
	float *dC = dev_alloc_guarded(64);
	assert_int_equal(ds_k_gemm_ref_variant(-1, dA, dW, dC, 1, 1, 64, 0), cudaErrorInvalidValue);
	assert_int_equal(ds_k_gemm_ref_variant(DS_K_GEMM_REF_N_VARIANTS, dA, dW, dC, 1, 1, 64, 0),
	                 cudaErrorInvalidValue);
	assert_string_equal(ds_k_gemm_ref_variant_name(DS_K_GEMM_REF_N_VARIANTS), "?");
	assert_int_equal(ds_k_gemm_ref_variant_splits(-1), 0);
	assert_int_equal(ds_k_gemm_ref_variant_splits(0), 1);
	assert_int_equal(ds_k_gemm_ref_variant_splits(7), 2);
	assert_int_equal(ds_k_gemm_ref_variant_splits(8), 4);
	assert_int_equal(ds_k_gemm_ref_variant_splits(9), 2);
	assert_int_equal(ds_k_gemm_ref_variant_splits(10), 4);
	for (int v = 11; v < 20; v++)
		assert_int_equal(ds_k_gemm_ref_variant_splits(v), 1);
	assert_int_equal(ds_k_gemm_ref_variant_splits(20), 2);
	int dev, sms;
	CK(cudaGetDevice(&dev));
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
	for (int v = 0; v < DS_K_GEMM_REF_N_VARIANTS; v++) {
		int ctas = 0; /* every variant fits on the device (a cluster in a GPC) */
		CK(ds_k_gemm_ref_variant_resident(v, &ctas));
		if (ctas < ds_k_gemm_ref_variant_splits(v))
			fail_msg("gemm variant %d (%s): %d CTAs resident at once", v,
			         ds_k_gemm_ref_variant_name(v), ctas);
		/* the 64-row variants 11..14 are sized for two blocks per SM */
		if (v >= 11 && v <= 14 && ctas < 2 * sms)
			fail_msg("gemm variant %d (%s): %d CTAs resident on %d SMs, not 2 per SM",
			         v, ds_k_gemm_ref_variant_name(v), ctas, sms);
		/* misaligned A for the TMA variants */
		if (v >= 3)
			assert_int_equal(ds_k_gemm_ref_variant(v, dA + 1, dW, dC, 1, 1, 64, 0),
			                 cudaErrorInvalidValue);
		assert_int_equal(ds_k_gemm_ref_variant(v, dA, dW, dC, 1, 1, 12, 0),
		                 cudaErrorInvalidValue);
		CK(ds_k_gemm_ref_variant(v, dA, dW, dC, 0, 16, 64, 0));
		CK(ds_k_gemm_ref_variant(v, dA, dW, dC, 1, 0, 64, 0));
	}
	CK(cudaDeviceSynchronize());
	dev_check_guard(dC, 64);
	CK(cudaFree(dA));
	CK(cudaFree(dW));
	CK(cudaFree(dC));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_variant_args),
	    cmocka_unit_test(test_variants_vs_cpu),
	    cmocka_unit_test(test_variants_invariant),
	    cmocka_unit_test(test_variants_repeatable),
	    cmocka_unit_test(test_variant_families_same_bits),
	    cmocka_unit_test(test_silu_fused),
	};
	return cmocka_run_group_tests_name("gpu_refgemm", tests, NULL, NULL);
}
