/* test_gpu_mega.c - the fast path's fused decode layers (kernels/mega.cu, ds_k_mega_decode) on
 * the GPU: against the kernel-per-op step and the reference path on the same KV, eager, captured
 * and replayed; and other kernels run right after it in the same process still compute right
 * (nothing the persistent kernel leaves behind, in shared memory or elsewhere, leaks into them). */
#include "gpu_util.h"
#include "gpu_test_util.h"
#include "decode_fix.h"
#include "kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The fused decode layers (ds_k_mega_decode) against the kernel-per-op step on the same KV:
 * batches of 1, 2, 3 (padded to 4), 4, 6 (padded to 8) and 8 rows (8: the tensor-core GEMVs,
 * with partial row tiles and empty units), on "small" (head_dim 64, GQA 2, K of 512 and
 * 1536: segments of 512) and llama3-8b (head_dim 128, GQA 4, 32 layers: 159 grid barriers a pass):
 * logits within the fast path's tolerance of each other (a wrong row, rotation or K/V write
 * moves them by the logits' own scale; greedy agreement is printed, not asserted: two close
 * logits may swap), and eager, captured and
 * replayed runs of the fused kernel give the same bits. Prompts of L tokens; at L = 600 a 2-row
 * pass's attention items span 2 iterations and an 8-row pass's 5 (llama3-8b: 300 positions in
 * 64s), of which only the first is loaded before the q/k/v -> attention barrier; at L = 1024 the
 * last items hold one position past their iterations. Every timing setting of the fused kernel
 * gives the same bits (mega_settings_same_bits). */
/* The fused kernel's timing settings (struct ds_k_mega: the weights' L2 policy, the producer's
 * attention gate off or opening late) change when copies are issued, never the arithmetic: each
 * gives the default run's bits (lgm) for batch B of fixture f. */
static void mega_settings_same_bits(struct decode_fix *f, int B, const float *lgm)
{
	struct ds_cuda_fast *fast = &f->c->fast;
	bool wef0 = fast->mega_wef, late0 = fast->mega_gate_late;
	int gate0 = fast->mega_gate;
	const struct {
		bool wef, late;
		int gate;
	} alt[] = {{false, false, gate0}, {wef0, false, -1}, {wef0, true, 16}, {wef0, false, 0}};
	for (size_t i = 0; i < DS_ARRAY_LEN(alt); i++) {
		fast->mega_wef = alt[i].wef;
		fast->mega_gate_late = alt[i].late;
		fast->mega_gate = alt[i].gate;
		ds_cuda_fast_graphs_reset(f->c);
		fwd_ok(&f->be, DS_PATH_FAST, f->ss, B, f->lg, f->rows);
		assert_memory_equal(lgm, f->lg, (size_t)B * f->rowb);
	}
	fast->mega_wef = wef0;
	fast->mega_gate_late = late0;
	fast->mega_gate = gate0;
	ds_cuda_fast_graphs_reset(f->c);
}

static void mega_case(const char *preset, uint64_t seed, int L, const int *batches, size_t nbatch)
{
	struct decode_fix f;
	decode_fix_init(&f, preset, seed, 21, 22, 8, L);
	struct ds_cuda_ctx *c = f.c;
	assert_true(c->fast.mega_ok);
	c->fast.graph_tune = false;
	float *lgm = malloc((size_t)f.B_max * f.rowb);
	int32_t tok0[8];
	for (size_t bi = 0; bi < nbatch; bi++) {
		int B = batches[bi];
		decode_fix_step(&f, B);
		ds_cuda_fast_graphs_reset(c);
		c->fast.mega = false;
		fwd_ok(&f.be, DS_PATH_FAST, f.ss, B, f.lg0, f.rows);
		for (int i = 0; i < B; i++)
			tok0[i] = f.rows[i].token;
		ds_cuda_fast_graphs_reset(c);
		c->fast.mega = true;
		fwd_ok(&f.be, DS_PATH_FAST, f.ss, B, lgm, f.rows);
		double maxd = 0, sd = 0;
		for (size_t i = 0; i < (size_t)B * f.V; i++) {
			maxd = fmax(maxd, fabs((double)lgm[i] - f.lg0[i]));
			sd += (double)f.lg0[i] * f.lg0[i];
		}
		sd = sqrt(sd / ((double)B * f.V));
		int agree = 0;
		for (int i = 0; i < B; i++)
			agree += f.rows[i].token == tok0[i];
		print_message("%s L %d batch %d: fused layers vs kernel per op: max |dlogit| %.5f (logit "
		              "sd %.3f), greedy tokens agree %d/%d\n",
		              preset, L, B, maxd, sd, agree, B);
		assert_true(sd > 0 && isfinite(sd));
		assert_true(maxd < 0.05 * sd + 0.05); /* the twin tests' bound */
		/* and against the reference path on the same step */
		fwd_ok(&f.be, DS_PATH_REF, f.ss, B, f.lg, f.rows);
		double maxr = 0;
		for (size_t i = 0; i < (size_t)B * f.V; i++)
			maxr = fmax(maxr, fabs((double)lgm[i] - f.lg[i]));
		print_message("%s L %d batch %d: fused layers vs reference path: max |dlogit| %.5f\n",
		              preset, L, B, maxr);
		assert_true(maxr < 0.05 * sd + 0.05);
		/* captured, then replayed: the eager run's bits */
		for (int k = 0; k < 2; k++) {
			fwd_ok(&f.be, DS_PATH_FAST, f.ss, B, f.lg, f.rows);
			assert_memory_equal(lgm, f.lg, (size_t)B * f.rowb);
		}
		assert_non_null(c->fast.graph[B <= 1 ? 0 : B <= 2 ? 1 : B <= 4 ? 2 : 3]);
		mega_settings_same_bits(&f, B, lgm);
	}
	c->fast.mega = false;
	free(lgm);
	decode_fix_free(&f);
}

static void test_mega_decode(void **state)
{
	(void)state;
	const int all[] = {1, 2, 3, 4, 6, 8}, some[] = {1, 2, 8};
	mega_case("small", 15, 45, all, DS_ARRAY_LEN(all));
	mega_case("llama3-8b", 16, 45, all, DS_ARRAY_LEN(all));
	mega_case("small", 18, 600, some, DS_ARRAY_LEN(some));
	mega_case("llama3-8b", 19, 600, some, DS_ARRAY_LEN(some));
	/* 1024 earlier positions: a 1- or 2-row pass splits them alone and its last item takes the
	 * new position in one more step of its first warp (8 rows: 2 splits, the last of 513) */
	mega_case("llama3-8b", 20, 1024, some, DS_ARRAY_LEN(some));
}

/* A skinny GEMM (M = 1, odd N, K not a multiple of 32) checked against the CPU reference after
 * each of several fused decode passes on "small": the first kernels after the persistent one
 * find shared memory it filled with weights, -inf maxima and mbarriers, and memory it freed. */
static void test_kernels_after_mega(void **state)
{
	(void)state;
	struct gt_gemm_case g;
	gt_gemm_case_init(&g, 1, 1000, 136, 41, 42);
	gt_gemm_reference(g.A, g.W, g.M, g.N, g.K, true, g.ref, g.sabs);
	float *dC = dev_alloc_guarded((size_t)g.N * 4);
	for (int rep = 0; rep < 4; rep++) {
		struct decode_fix f;
		decode_fix_init(&f, "small", 17 + rep, 23, 24, 2, 40);
		f.c->fast.graph_tune = false;
		f.c->fast.mega = true;
		decode_fix_step(&f, 2);
		for (int k = 0; k < 3; k++) /* eager, captured, replayed */
			fwd_ok(&f.be, DS_PATH_FAST, f.ss, 2, f.lg, f.rows);
		decode_fix_free(&f);
		for (int v = 0; v < DS_K_SKINNY_VARIANTS; v++) {
			char name[64];
			assert_true(ds_k_skinny_describe(1, v, name, sizeof(name)) > 0);
			CK(cudaMemset(dC, 0x7f, (size_t)g.N * 4));
			CK(ds_k_skinny(g.dA, g.dW, dC, 1, g.N, g.K, v, 0, 0, 0));
			CK(cudaDeviceSynchronize());
			from_dev(g.C, dC, (size_t)g.N * 4);
			gt_gemm_check(g.C, g.ref, g.sabs, 1, g.N, g.K, true, name);
		}
	}
	dev_check_guard(dC, (size_t)g.N * 4);
	cudaFree(dC);
	gt_gemm_case_free(&g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_mega_decode),
	    cmocka_unit_test(test_kernels_after_mega),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
