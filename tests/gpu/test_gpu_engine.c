/* test_gpu_engine.c - the scheduler's oracle on the CUDA backend: randomized scenarios (the
 * scheduler's harness: deterministic and normal requests, shared prefixes, arrivals,
 * cancellations, injected rollbacks, small KV pools, W in {1, 4, 16, 32, 64}) run in `dvr`
 * (and some in `invariant`) mode on the CUDA backend, and every deterministic request must
 * equal its replay alone through a `ref-only` engine on a fresh CUDA backend: tokens,
 * logprobs, finish reason and fingerprint, bit for bit. Presets tiny, small and llama3-8b
 * (weights generated on the device; fewer, smaller scenarios: every replay builds a backend). */
#include "gpu_util.h"
#include "gpu_model.h"
#include "test_engine_harness.h"

#include <time.h>

static const int all_windows[] = {1, 4, 16, 32, 64};

static enum ds_status mk_cuda(struct ds_backend *be, void *arg, bool oracle, struct ds_err *err)
{
	(void)oracle;
	return ds_backend_cuda_init(be, arg, 0, err);
}

/* inject: the fraction of windows forced to roll back (< 0: 0 or 0.2 per scenario at random) */
static void oracle_case(const char *preset, int n, int n_req_max, double inject, uint64_t seed0)
{
	struct ds_model *m = model_deferred(preset, 77);
	assert_non_null(m);
	struct scen_gen_opts g = {.n_req_max = n_req_max,
	                          .windows = all_windows,
	                          .n_windows = 5,
	                          .invariant_share = 0.1,
	                          .det_share = 0.5,
	                          .inject = inject};
	uint64_t windows = 0, rollbacks = 0, det = 0, prefix = 0, preempt = 0;
	char msg[512];
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < n; i++) {
		struct scenario s;
		uint64_t seed = seed0 + (uint64_t)i;
		scen_generate(&s, seed, &m->cfg, &g);
		struct ds_engine_stats st;
		if (!scen_run(&s, mk_cuda, m, &st, msg, sizeof(msg)))
			fail_msg("%s scenario %llu (W=%d G=%d mode=%s): run: %s", preset,
			         (unsigned long long)seed, s.opts.window, s.opts.group,
			         ds_mode_name(s.opts.mode), msg);
		if (!scen_check_oracle(&s, mk_cuda, m, msg, sizeof(msg)))
			fail_msg("%s scenario %llu (W=%d G=%d mode=%s): oracle: %s", preset,
			         (unsigned long long)seed, s.opts.window, s.opts.group,
			         ds_mode_name(s.opts.mode), msg);
		windows += st.windows;
		rollbacks += st.rollbacks;
		prefix += st.prefix_hit_tokens;
		preempt += st.preemptions;
		for (int r = 0; r < s.n_req; r++)
			det += s.req[r].det;
		scen_free(&s);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	print_message("oracle/cuda %s: %d scenarios, %llu deterministic requests, %llu windows, "
	              "%llu rollbacks, %llu preemptions, %llu prefix-hit tokens, %.1f s\n",
	              preset, n, (unsigned long long)det, (unsigned long long)windows,
	              (unsigned long long)rollbacks, (unsigned long long)preempt,
	              (unsigned long long)prefix,
	              (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
	assert_true(det > 0 && windows > 0 && rollbacks > 0);
	ds_model_free(m);
}

static void test_oracle_cuda_tiny(void **state)
{
	(void)state;
	oracle_case("tiny", 40, 64, -1, 1000);
}

static void test_oracle_cuda_small(void **state)
{
	(void)state;
	oracle_case("small", 8, 64, -1, 2000);
}

static void test_oracle_cuda_llama3_8b(void **state)
{
	(void)state;
	/* few scenarios: injection in every one, so that rollbacks are exercised (one H200 run
	 * drew none with random injection: bench/results/gpu-20261129-356b16d/tests.log) */
	oracle_case("llama3-8b", 3, 12, 0.2, 3000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_oracle_cuda_tiny),
	    cmocka_unit_test(test_oracle_cuda_small),
	    cmocka_unit_test(test_oracle_cuda_llama3_8b),
	};
	return cmocka_run_group_tests_name("gpu_engine", tests, NULL, NULL);
}
