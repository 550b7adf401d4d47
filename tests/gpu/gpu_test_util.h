/* gpu_test_util.h - checks shared by the kernel tests of the gpu suite (test_gpu_kernels.c,
 * test_gpu_skinny.c): random GEMM operands on host and device, a double-precision CPU reference
 * for C = A . W^T with its error bound, and one RMSNorm launch on host data (upload, run,
 * download, guard check).
 *
 * Key decision: the helpers fail the running cmocka test themselves (fail_msg, CK), so that a
 * caller reads as the case it sets up and the property it asserts; buffers stay the caller's. */
#ifndef DS_GPU_TEST_UTIL_H
#define DS_GPU_TEST_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A GEMM case: A (M, K) and W (N, K) bf16 drawn by fill_bf16 (seeds seed_a, seed_w, range 1)
 * on the host and copied to the device, with host room for a result and its reference. */
struct gt_gemm_case {
	int M, N, K;
	uint16_t *A, *W;    /* host */
	uint16_t *dA, *dW;  /* device copies */
	float *C;           /* (M, N) a result downloaded */
	double *ref, *sabs; /* (M, N) for gt_gemm_reference */
};
void gt_gemm_case_init(struct gt_gemm_case *g, int M, int N, int K, uint64_t seed_a,
                       uint64_t seed_w);
void gt_gemm_case_free(struct gt_gemm_case *g);

/* Column n of an (M, N) product is compared with the reference: every column when all, else
 * the first and last 64 and every 61st (large shapes). */
bool gt_gemm_col_checked(int n, int N, bool all);

/* ref[m * N + n] = sum_k a[m][k] w[n][k] and sabs[m * N + n] = sum_k |a[m][k] w[n][k]| in
 * double, for the checked columns; A (M, K) and W (N, K) bf16. */
void gt_gemm_reference(const uint16_t *A, const uint16_t *W, int M, int N, int K, bool all,
                       double *ref, double *sabs);

/* Fails the test unless every element of C (M, N) fp32 was written (not the 0x7f poison of
 * dev_alloc_guarded, not NaN or inf) and each checked one lies within 4 K 6e-8 sabs of ref
 * (fp32 accumulation of bf16 products); what names the kernel in the message. */
void gt_gemm_check(const float *C, const double *ref, const double *sabs, int M, int N, int K,
                   bool all, const char *what);

/* ds_k_rmsnorm on the device copy of x (n_x, hidden) fp32, plus dl (n_x, hidden) when dl is
 * not NULL, rows (n_rows) gathered when rows is not NULL (else rows 0 .. n_rows - 1), w
 * (hidden) bf16, eps: out (n_rows, hidden) bf16 and xg (n_x, hidden), x after the residual add,
 * downloaded; fails the test on a CUDA error or a write past out. */
void gt_rmsnorm_run(const float *x, const float *dl, const int32_t *rows, const uint16_t *w,
                    int n_x, int n_rows, int hidden, float eps, uint16_t *out, float *xg);
/* RMSNorm's exact arithmetic on the CPU (kernels/rows.cu), for one row x (its residual add
 * already applied): nt threads (256, or 1024 for the kernel's partial deltas), thread t adds
 * x[i]^2 for i = t, t + nt, ... with fmaf in that order; each warp's 32 sums meet in the xor
 * butterfly (offsets 16 down to 1), then the warp sums (zeros up to 32) the same way;
 * inv = 1 / sqrt(ss / hidden + eps); out = bf16((x * inv) * w). */
void gt_rmsnorm_emulate(const float *x, const uint16_t *w, int hidden, float eps, int nt,
                        uint16_t *out);
/* The same with dl as `parts` partial deltas of (n_x, hidden), one after another
 * (ds_k_rmsnorm_parts_pdl; parts 1: ds_k_rmsnorm). */
void gt_rmsnorm_parts_run(const float *x, const float *dl, int parts, const int32_t *rows,
                          const uint16_t *w, int n_x, int n_rows, int hidden, float eps,
                          uint16_t *out, float *xg);

#endif
