/* test_cpu_kernels.c - the CPU kernels one by one, and the thread pool under them.
 *
 * The reference kernels are pinned bit for bit to a plain scalar rendition of their documented
 * order (refpath/cpu_ref.c): this catches a compiler or ISA variant that fuses or re-associates
 * (the backend test only compares the kernels with themselves). The fast kernels are checked
 * for closeness, and guard floats after each output catch out-of-bounds writes. The
 * reference kernels must give the same bits with f32 weights holding bf16-exact values (an f32
 * model). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu_internal.h"
#include "rng.h"

#define GUARD 8
#define GUARD_VAL 12345.0f

/* ---- thread pool ---- */

struct tp_count {
	atomic_int *hits;
	atomic_int bad_thread;
	int n_threads;
};

static void tp_count_task(void *arg, int task, int thread)
{
	struct tp_count *a = arg;
	atomic_fetch_add(&a->hits[task], 1);
	if (thread < 0 || thread >= a->n_threads)
		atomic_fetch_add(&a->bad_thread, 1);
}

static void test_threadpool_runs_each_task_once(void **state)
{
	(void)state;
	for (int nt = 1; nt <= 4; nt++) {
		struct ds_threadpool *tp;
		struct ds_err err;
		assert_int_equal(ds_threadpool_init(&tp, nt, &err), DS_OK);
		assert_int_equal(ds_threadpool_size(tp), nt);
		atomic_int hits[257];
		for (int rep = 0; rep < 300; rep++) {
			int n = (rep * 37) % 258; /* includes 0 and 1 */
			for (int i = 0; i < 257; i++)
				atomic_init(&hits[i], 0);
			struct tp_count a = {.hits = hits, .n_threads = nt};
			atomic_init(&a.bad_thread, 0);
			ds_threadpool_run(tp, n, tp_count_task, &a);
			for (int i = 0; i < 257; i++)
				assert_int_equal(atomic_load(&hits[i]), i < n ? 1 : 0);
			assert_int_equal(atomic_load(&a.bad_thread), 0);
		}
		ds_threadpool_free(tp);
	}
	struct ds_threadpool *tp;
	struct ds_err err;
	assert_int_equal(ds_threadpool_init(&tp, 0, &err), DS_ERR_INVALID);
	ds_threadpool_free(NULL);
}

/* ---- kernels ---- */

static struct ds_model *kmodel;
static struct ds_backend kbe;

static int kernels_setup(void **state)
{
	(void)state;
	struct ds_model_config c;
	assert_int_equal(ds_model_preset("tiny", &c), DS_OK);
	c.ffn = 2200; /* thread scratch sized for K up to 2200 */
	struct ds_err err;
	if (ds_model_synth(&c, 1, &kmodel, &err) != DS_OK ||
	    ds_backend_cpu_init(&kbe, kmodel, 3, &err) != DS_OK)
		return -1;
	return 0;
}

static int kernels_teardown(void **state)
{
	(void)state;
	ds_backend_free(&kbe);
	ds_model_free(kmodel);
	return 0;
}

/* the documented reference order, written as plainly as possible */
static float scalar_ref_dot(const float *x, const float *w, int n)
{
	float acc[16] = {0};
	for (int k = 0; k < n; k++)
		acc[k % 16] += x[k] * w[k];
	float s8[8], s4[4];
	for (int l = 0; l < 8; l++)
		s8[l] = acc[l] + acc[l + 8];
	for (int l = 0; l < 4; l++)
		s4[l] = s8[l] + s8[l + 4];
	return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

static void fill(float *x, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		x[i] = ds_hash_unit_pm1(ds_hash3(seed, 1, i)) * 2.0f;
}

static void check_matmul(int M, int N, int K, uint64_t seed)
{
	struct ds_cpu_ctx *c = kbe.ctx;
	float *x = malloc((size_t)M * K * sizeof(float)),
	      *wf = malloc((size_t)N * K * sizeof(float));
	uint16_t *w = malloc((size_t)N * K * sizeof(uint16_t));
	float *y[2];
	for (int p = 0; p < 2; p++)
		y[p] = malloc(((size_t)M * N + GUARD) * sizeof(float));
	fill(x, (size_t)M * K, seed);
	fill(wf, (size_t)N * K, seed + 1);
	for (size_t i = 0; i < (size_t)N * K; i++) {
		w[i] = ds_f32_to_bf16(wf[i]);
		wf[i] = ds_bf16_to_f32(w[i]);
	}
	const struct ds_cpu_kernels *kn[2] = {&ds_cpu_fast_kernels, &ds_cpu_ref_kernels};
	for (int p = 0; p < 2; p++) {
		for (int g = 0; g < GUARD; g++)
			y[p][(size_t)M * N + g] = GUARD_VAL;
		/* fused with a second weight (the first N/3 rows of w) into a side buffer */
		int N2 = DS_MAX(1, N / 3);
		float *y2 = malloc(((size_t)M * N2 + GUARD) * sizeof(float));
		for (int g = 0; g < GUARD; g++)
			y2[(size_t)M * N2 + g] = GUARD_VAL;
		const struct ds_cpu_mm mm[2] = {{w, y[p], N}, {w, y2, N2}};
		assert_int_equal(kn[p]->matmul(c, x, M, K, mm, 2), DS_OK);
		for (int m = 0; m < M; m++)
			assert_memory_equal(y2 + (size_t)m * N2, y[p] + (size_t)m * N,
			                    (size_t)N2 * sizeof(float));
		for (int g = 0; g < GUARD; g++)
			assert_true(y2[(size_t)M * N2 + g] == GUARD_VAL);
		free(y2);
		for (int g = 0; g < GUARD; g++)
			assert_true(y[p][(size_t)M * N + g] == GUARD_VAL);
	}
	/* f32 weights (an f32 model) holding the same bf16-exact values: the reference kernel
	 * gives the bits it gave with bf16 weights, whether it widened a tile first or not (M).
	 * The fast kernel may contract a*b+c differently in the two loops: close is enough. */
	c->wtype = DS_DTYPE_F32;
	float *y32[2];
	for (int p = 0; p < 2; p++) {
		y32[p] = malloc(((size_t)M * N + GUARD) * sizeof(float));
		for (int g = 0; g < GUARD; g++)
			y32[p][(size_t)M * N + g] = GUARD_VAL;
		const struct ds_cpu_mm mm32 = {(const uint16_t *)(const void *)wf, y32[p], N};
		assert_int_equal(kn[p]->matmul(c, x, M, K, &mm32, 1), DS_OK);
		for (int g = 0; g < GUARD; g++)
			assert_true(y32[p][(size_t)M * N + g] == GUARD_VAL);
	}
	c->wtype = DS_DTYPE_BF16;
	if (memcmp(y32[1], y[1], (size_t)M * N * sizeof(float)) != 0)
		fail_msg("ref matmul M=%d N=%d K=%d: f32 weights give other bits than bf16", M, N,
		         K);
	for (int m = 0; m < M; m++)
		for (int n = 0; n < N; n++) {
			float want = scalar_ref_dot(x + (size_t)m * K, wf + (size_t)n * K, K);
			float ref = y[1][(size_t)m * N + n], fast = y[0][(size_t)m * N + n];
			if (memcmp(&want, &ref, sizeof(float)) != 0)
				fail_msg("ref matmul M=%d N=%d K=%d (%d,%d): %.9g, documented "
				         "order %.9g",
				         M, N, K, m, n, ref, want);
			double mag = 0;
			for (int k = 0; k < K; k++)
				mag += fabs((double)x[(size_t)m * K + k] * wf[(size_t)n * K + k]);
			assert_true(fabs((double)fast - want) <= 1e-5 * mag + 1e-30);
			float fast32 = y32[0][(size_t)m * N + n];
			assert_true(fabs((double)fast32 - want) <= 1e-5 * mag + 1e-30);
		}
	free(x), free(wf), free(w), free(y[0]), free(y[1]), free(y32[0]), free(y32[1]);
}

/* Every kernel variant this CPU can run (baseline, AVX2, AVX-512) must meet the same
 * contract; runs body once per level with the context forced to it. */
#define FOR_EACH_ISA(body)                                                                         \
	do {                                                                                       \
		struct ds_cpu_ctx *c_ = kbe.ctx;                                                   \
		enum ds_cpu_isa best_ = ds_cpu_isa_detect();                                       \
		for (int isa_ = DS_CPU_ISA_BASE; isa_ <= (int)best_; isa_++) {                     \
			c_->isa = (enum ds_cpu_isa)isa_;                                           \
			body;                                                                      \
		}                                                                                  \
		c_->isa = best_;                                                                   \
	} while (0)

static void test_matmul_shapes(void **state)
{
	(void)state;
	const int Ms[] = {1, 2, 3, 4, 5, 7, 9, 17, 130};
	const int Ns[] = {1, 3, 16, 17, 33};
	const int Ks[] = {1, 15, 16, 17, 40, 100, 515, 1100};
	uint64_t seed = 1;
	print_message("    isa levels tested: 0..%d\n", (int)ds_cpu_isa_detect());
	FOR_EACH_ISA(for (size_t a = 0; a < DS_ARRAY_LEN(Ms);
	                  a++) for (size_t b = 0; b < DS_ARRAY_LEN(Ns);
	                            b++) for (size_t k = 0; k < DS_ARRAY_LEN(Ks); k++)
	                 check_matmul(Ms[a], Ns[b], Ks[k], seed++));
}

/* split-K of the fast path, which only kicks in for small M and long K */
static void test_matmul_split_k(void **state)
{
	(void)state;
	FOR_EACH_ISA(check_matmul(1, 20, 2100, 91));  /* 4 splits */
	FOR_EACH_ISA(check_matmul(3, 37, 2100, 92));  /* 4 splits */
	FOR_EACH_ISA(check_matmul(10, 20, 2047, 93)); /* 2 splits */
}

static void check_rmsnorm(void)
{
	struct ds_cpu_ctx *c = kbe.ctx;
	const int ns[] = {1, 7, 16, 33, 64, 100};
	for (size_t t = 0; t < DS_ARRAY_LEN(ns); t++) {
		int n = ns[t], M = 70;
		float *x = malloc((size_t)M * n * sizeof(float)),
		      *y = malloc(((size_t)M * n + GUARD) * 4);
		uint16_t *w = malloc((size_t)n * 2);
		fill(x, (size_t)M * n, 50 + t);
		for (int i = 0; i < n; i++)
			w[i] = ds_f32_to_bf16(1.0f + 0.1f * (float)(i % 5));
		for (int p = 0; p < 2; p++) {
			const struct ds_cpu_kernels *kn =
			    p ? &ds_cpu_ref_kernels : &ds_cpu_fast_kernels;
			for (int g = 0; g < GUARD; g++)
				y[(size_t)M * n + g] = GUARD_VAL;
			assert_int_equal(kn->rmsnorm(c, x, w, y, M, n, 1e-5f), DS_OK);
			for (int g = 0; g < GUARD; g++)
				assert_true(y[(size_t)M * n + g] == GUARD_VAL);
			/* the same weights as f32 (an f32 model): the same bits */
			float *w32 = malloc((size_t)n * sizeof(float)),
			      *y32 = malloc(((size_t)M * n + GUARD) * sizeof(float));
			for (int i = 0; i < n; i++)
				w32[i] = ds_bf16_to_f32(w[i]);
			for (int g = 0; g < GUARD; g++)
				y32[(size_t)M * n + g] = GUARD_VAL;
			c->wtype = DS_DTYPE_F32;
			assert_int_equal(kn->rmsnorm(c, x, (const uint16_t *)(const void *)w32, y32,
			                             M, n, 1e-5f),
			                 DS_OK);
			c->wtype = DS_DTYPE_BF16;
			assert_memory_equal(y32, y, ((size_t)M * n + GUARD) * sizeof(float));
			free(w32), free(y32);
			for (int m = 0; m < M; m++) {
				const float *xr = x + (size_t)m * n;
				float inv =
				    1.0f / sqrtf(scalar_ref_dot(xr, xr, n) / (float)n + 1e-5f);
				for (int i = 0; i < n; i++) {
					float want = (xr[i] * inv) * ds_bf16_to_f32(w[i]);
					float got = y[(size_t)m * n + i];
					if (p)
						assert_memory_equal(&got, &want, sizeof(float));
					else
						assert_true(fabsf(got - want) <=
						            1e-5f * (fabsf(want) + 1e-3f));
				}
			}
		}
		free(x), free(y), free(w);
	}
}

static void test_rmsnorm(void **state)
{
	(void)state;
	FOR_EACH_ISA(check_rmsnorm());
}

/* A whole reference forward (attention included) gives the same bits at every ISA level. */
static void test_ref_forward_every_isa(void **state)
{
	(void)state;
	struct ds_err err;
	assert_int_equal(ds_backend_kv_init(&kbe, 16, 16, &err), DS_OK);
	const int V = kmodel->cfg.vocab_size;
	int32_t tok[2][70],
	    blocks[2][8] = {{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}};
	for (int i = 0; i < 70; i++)
		tok[0][i] = (i * 7 + 3) % V, tok[1][i] = (i * 13 + 1) % V;
	struct ds_fwd_seq seqs[2] = {
	    {.tokens = tok[0],
	     .n_tokens = 70,
	     .pos0 = 0,
	     .blocks = blocks[0],
	     .n_blocks = 8,
	     .all_rows = true,
	     .sp = {.top_p = 1.0f}},
	    {.tokens = tok[1],
	     .n_tokens = 45,
	     .pos0 = 0,
	     .blocks = blocks[1],
	     .n_blocks = 8,
	     .all_rows = true,
	     .sp = {.top_p = 1.0f}},
	};
	int n_out = 115;
	float *want = malloc((size_t)n_out * V * sizeof(float));
	float *got = malloc((size_t)n_out * V * sizeof(float));
	struct ds_fwd_row *rows = calloc((size_t)n_out, sizeof(*rows));
	struct ds_fwd_batch b = {
	    .path = DS_PATH_REF, .seqs = seqs, .n_seqs = 2, .rows = rows, .logits = want};
	struct ds_cpu_ctx *c = kbe.ctx;
	enum ds_cpu_isa best = ds_cpu_isa_detect();
	c->isa = DS_CPU_ISA_BASE;
	assert_int_equal(ds_backend_forward(&kbe, &b, &err), DS_OK);
	b.logits = got;
	for (int isa = DS_CPU_ISA_BASE + 1; isa <= (int)best; isa++) {
		c->isa = (enum ds_cpu_isa)isa;
		assert_int_equal(ds_backend_forward(&kbe, &b, &err), DS_OK);
		if (memcmp(got, want, (size_t)n_out * V * sizeof(float)) != 0)
			fail_msg("reference forward differs between isa level 0 and %d", isa);
	}
	c->isa = best;
	free(want), free(got), free(rows);
}

int main(void)
{
	const struct CMUnitTest pool[] = {
	    cmocka_unit_test(test_threadpool_runs_each_task_once),
	};
	const struct CMUnitTest kernels[] = {
	    cmocka_unit_test(test_matmul_shapes),
	    cmocka_unit_test(test_matmul_split_k),
	    cmocka_unit_test(test_rmsnorm),
	    cmocka_unit_test(test_ref_forward_every_isa),
	};
	int rc = cmocka_run_group_tests_name("threadpool", pool, NULL, NULL);
	rc |= cmocka_run_group_tests_name("cpu_kernels", kernels, kernels_setup, kernels_teardown);
	return rc;
}
