/* engine_test_util.h - the set-up the CPU scheduler tests (test_engine.c, test_engine_cadence.c)
 * share: the tiny synthetic model as a CMocka group fixture, the backend makers the scenario
 * harness calls (the real CPU backend on one thread, the strict mock), and an engine over a fresh
 * backend. Design: the helpers assert through CMocka themselves (a failed init fails the test
 * with the engine's message), so each test keeps only the checks that are its own. Include after
 * <cmocka.h>. */
#ifndef ENGINE_TEST_UTIL_H
#define ENGINE_TEST_UTIL_H

#include "engine.h"
#include "test_engine_harness.h"

struct etu_fixture {
	struct ds_model *tiny; /* the "tiny" preset, synthetic weights of seed 1234 */
	uint64_t bad_reads;    /* the strict mock's wrong or fast-written KV reads (must stay 0) */
	float noise;           /* the strict mock's batch-keyed fast-path perturbation */
};

/* CMocka group set-up: *state = a fixture with the tiny model and the given mock noise. */
int etu_setup(void **state, float noise);
/* CMocka group teardown: frees what etu_setup made. */
int etu_teardown(void **state);

/* scen_backend_fn makers; arg is a struct etu_fixture. The CPU backend on one thread for both
 * the engine under test and the oracle. */
enum ds_status etu_mk_cpu1(struct ds_backend *be, void *arg, bool oracle, struct ds_err *err);
/* The strict mock: fast_noise = f->noise, logits in [-4, 4), bad reads counted in f->bad_reads. */
enum ds_status etu_mk_mock(struct ds_backend *be, void *arg, bool oracle, struct ds_err *err);

/* Makes a backend with mk (engine side, oracle = false) and an engine over it with options o;
 * fails the test (freeing what it made) when either returns an error. */
void etu_engine_init(scen_backend_fn mk, void *arg, const struct ds_engine_opts *o,
                     struct ds_backend *be, struct ds_engine **e);
/* Frees the engine, then its backend. */
void etu_engine_free(struct ds_engine *e, struct ds_backend *be);
/* Asserts that every KV block is accounted for (ds_engine_kv_check), then frees as above. */
void etu_engine_check_free(struct ds_engine *e, struct ds_backend *be);

#endif
