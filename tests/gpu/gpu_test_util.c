/* gpu_test_util.c - the gpu suite's shared kernel checks (gpu_test_util.h): GEMM operands, the
 * GEMM reference and its bound, and one RMSNorm launch on host data.
 *
 * Key decision: the reference is plain double loops over the checked columns only, so the large
 * model shapes stay affordable on the host while small shapes are checked in full. */
#include "gpu_test_util.h"
#include "gpu_util.h"
#include "kernels.h"

void gt_gemm_case_init(struct gt_gemm_case *g, int M, int N, int K, uint64_t seed_a,
                       uint64_t seed_w)
{
	size_t na = (size_t)M * K, nw = (size_t)N * K, nc = (size_t)M * N;
	g->M = M;
	g->N = N;
	g->K = K;
	g->A = malloc((na + nw) * 2); /* one host block: A, then W */
	g->C = malloc(nc * 4);
	g->ref = malloc(2 * nc * sizeof(double)); /* ref, then sabs */
	assert_true(g->A && g->C && g->ref);
	g->W = g->A + na;
	g->sabs = g->ref + nc;
	fill_bf16(g->A, na, seed_a, 1.0f);
	fill_bf16(g->W, nw, seed_w, 1.0f);
	g->dA = to_dev(g->A, na * 2); /* separate device buffers: each 256-byte aligned */
	g->dW = to_dev(g->W, nw * 2);
}

void gt_gemm_case_free(struct gt_gemm_case *g)
{
	cudaFree(g->dA);
	cudaFree(g->dW);
	free(g->A);
	free(g->C);
	free(g->ref);
}

bool gt_gemm_col_checked(int n, int N, bool all)
{
	return all || n < 64 || n >= N - 64 || n % 61 == 7;
}

void gt_gemm_reference(const uint16_t *A, const uint16_t *W, int M, int N, int K, bool all,
                       double *ref, double *sabs)
{
	for (int n = 0; n < N; n++) {
		if (!gt_gemm_col_checked(n, N, all))
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

void gt_gemm_check(const float *C, const double *ref, const double *sabs, int M, int N, int K,
                   bool all, const char *what)
{
	for (int m = 0; m < M; m++)
		for (int n = 0; n < N; n++) {
			float got = C[(size_t)m * N + n];
			/* the poison (0x7f7f7f7f, 3.4e38) marks an element never written */
			if (!isfinite(got) || fabsf(got) > 1e30f)
				fail_msg("%s M=%d N=%d K=%d: C(%d,%d) = %g not written", what, M, N,
				         K, m, n, got);
			if (!gt_gemm_col_checked(n, N, all))
				continue;
			double r = ref[(size_t)m * N + n], sa = sabs[(size_t)m * N + n];
			if (!(fabs(got - r) <= 4.0 * K * 6e-8 * sa + 1e-30))
				fail_msg("%s M=%d N=%d K=%d at (%d,%d): %.9g vs %.9g (sum|aw| %g)",
				         what, M, N, K, m, n, got, r, sa);
		}
}

static float butterfly32(float *v)
{
	for (int o = 16; o > 0; o >>= 1) {
		float nv[32];
		for (int l = 0; l < 32; l++)
			nv[l] = v[l] + v[l ^ o];
		memcpy(v, nv, sizeof(nv));
	}
	return v[0];
}

void gt_rmsnorm_emulate(const float *x, const uint16_t *w, int hidden, float eps, int nt,
                        uint16_t *out)
{
	float th[32], ws[32] = {0};
	for (int wi = 0; wi < nt / 32; wi++) {
		for (int j = 0; j < 32; j++) {
			float s = 0.0f;
			for (int i = wi * 32 + j; i < hidden; i += nt)
				s = fmaf(x[i], x[i], s);
			th[j] = s;
		}
		ws[wi] = butterfly32(th);
	}
	float ss = butterfly32(ws);
	float inv = 1.0f / sqrtf(ss / (float)hidden + eps);
	for (int i = 0; i < hidden; i++)
		out[i] = ds_f32_to_bf16((x[i] * inv) * bf(w[i]));
}

void gt_rmsnorm_run(const float *x, const float *dl, const int32_t *rows, const uint16_t *w,
                    int n_x, int n_rows, int hidden, float eps, uint16_t *out, float *xg)
{
	gt_rmsnorm_parts_run(x, dl, 1, rows, w, n_x, n_rows, hidden, eps, out, xg);
}

void gt_rmsnorm_parts_run(const float *x, const float *dl, int parts, const int32_t *rows,
                          const uint16_t *w, int n_x, int n_rows, int hidden, float eps,
                          uint16_t *out, float *xg)
{
	size_t nx = (size_t)n_x * hidden, on = (size_t)n_rows * hidden * 2;
	float *dx = to_dev(x, nx * 4), *dd = dl ? to_dev(dl, nx * parts * 4) : NULL;
	uint16_t *dw = to_dev(w, (size_t)hidden * 2);
	int32_t *drows = rows ? to_dev(rows, (size_t)n_rows * 4) : NULL;
	uint16_t *dout = dev_alloc_guarded(on);
	if (parts == 1)
		CK(ds_k_rmsnorm(dx, dd, drows, dw, n_rows, hidden, eps, dout, 0));
	else
		CK(ds_k_rmsnorm_parts_pdl(dx, dd, parts, nx, drows, dw, n_rows, hidden, eps, dout,
		                          0, 0));
	CK(cudaDeviceSynchronize());
	from_dev(out, dout, on);
	from_dev(xg, dx, nx * 4);
	dev_check_guard(dout, on);
	cudaFree(dx);
	cudaFree(dd);
	cudaFree(dw);
	cudaFree(drows);
	cudaFree(dout);
}
