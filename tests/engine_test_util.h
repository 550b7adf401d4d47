/* engine_test_util.h - the set-up the CPU scheduler tests (test_engine.c, test_engine_cadence.c)
 * share: the tiny synthetic model as a CMocka group fixture, the backend makers the scenario
 * harness calls (the real CPU backend on one thread, the strict mock), and a rig that holds an
 * engine under test with its options, backend and error buffer. Design: the helpers assert
 * through CMocka themselves (a failed start fails the test with the engine's message), so each
 * test keeps only the checks that are its own. Include after <cmocka.h>. */
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

/* An engine under test over a backend of its own: a test sets o, starts the rig, drives r.e
 * (reporting into r.err) and stops it. */
struct etu_rig {
	struct etu_fixture *f;   /* the group fixture: the backend makers' argument */
	struct ds_engine_opts o; /* ds_engine_opts_default until the test sets them */
	struct ds_backend be;
	struct ds_engine *e; /* NULL until etu_rig_start */
	struct ds_err err;   /* the test's own engine calls report here */
};

/* Sets the fixture and the default options; makes nothing yet. */
void etu_rig_init(struct etu_rig *r, struct etu_fixture *f);
/* Makes the backend with mk (engine side, oracle = false) and the engine over it with r->o;
 * fails the test (freeing what it made) when either returns an error. */
void etu_rig_start(struct etu_rig *r, scen_backend_fn mk);
/* Frees the engine, then its backend. */
void etu_rig_stop(struct etu_rig *r);
/* Asserts that every KV block is accounted for (ds_engine_kv_check), then stops as above. */
void etu_rig_check_stop(struct etu_rig *r);

#endif
