/* engine_test_util.c - fixture, backend makers and engine set-up shared by the CPU scheduler
 * tests (see engine_test_util.h). Failures go through CMocka (fail_msg, assert_*), which
 * long-jumps out of the running test, so a helper frees what it made before failing. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine_test_util.h"
#include "test_engine_mockbe.h"

int etu_setup(void **state, float noise)
{
	struct etu_fixture *f = calloc(1, sizeof(*f));
	struct ds_model_config cfg;
	struct ds_err err = {0};
	if (!f || ds_model_preset("tiny", &cfg) != DS_OK ||
	    ds_model_synth(&cfg, 1234, &f->tiny, &err) != DS_OK) {
		fprintf(stderr, "setup: tiny model: %s\n", f ? err.msg : "out of memory");
		free(f);
		return -1;
	}
	f->noise = noise;
	*state = f;
	return 0;
}

int etu_teardown(void **state)
{
	struct etu_fixture *f = *state;
	ds_model_free(f->tiny);
	free(f);
	return 0;
}

enum ds_status etu_mk_cpu1(struct ds_backend *be, void *arg, bool oracle, struct ds_err *err)
{
	struct etu_fixture *f = arg;
	(void)oracle;
	return ds_backend_cpu_init(be, f->tiny, 1, err);
}

enum ds_status etu_mk_mock(struct ds_backend *be, void *arg, bool oracle, struct ds_err *err)
{
	struct etu_fixture *f = arg;
	(void)oracle;
	struct mockbe_opts o = {
	    .fast_noise = f->noise, .logit_scale = 4.0f, .bad_reads = &f->bad_reads};
	return mockbe_init(be, f->tiny, &o, err);
}

void etu_engine_init(scen_backend_fn mk, void *arg, const struct ds_engine_opts *o,
                     struct ds_backend *be, struct ds_engine **e)
{
	struct ds_err err = {0};
	enum ds_status rv = mk(be, arg, false, &err);
	if (rv != DS_OK)
		fail_msg("backend: status %d: %s", (int)rv, err.msg);
	rv = ds_engine_init(e, be, o, &err);
	if (rv != DS_OK) {
		ds_backend_free(be);
		fail_msg("engine init: status %d: %s", (int)rv, err.msg);
	}
}

void etu_engine_free(struct ds_engine *e, struct ds_backend *be)
{
	ds_engine_free(e);
	ds_backend_free(be);
}

void etu_engine_check_free(struct ds_engine *e, struct ds_backend *be)
{
	struct ds_err err = {0};
	if (ds_engine_kv_check(e, &err) != DS_OK) {
		etu_engine_free(e, be);
		fail_msg("kv check: %s", err.msg);
	}
	etu_engine_free(e, be);
}
