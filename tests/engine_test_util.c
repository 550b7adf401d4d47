/* engine_test_util.c - fixture, backend makers and the engine rig shared by the CPU scheduler
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

void etu_rig_init(struct etu_rig *r, struct etu_fixture *f)
{
	*r = (struct etu_rig){.f = f};
	ds_engine_opts_default(&r->o);
}

void etu_rig_start(struct etu_rig *r, scen_backend_fn mk)
{
	enum ds_status rv = mk(&r->be, r->f, false, &r->err);
	if (rv != DS_OK)
		fail_msg("backend: status %d: %s", (int)rv, r->err.msg);
	rv = ds_engine_init(&r->e, &r->be, &r->o, &r->err);
	if (rv != DS_OK) {
		ds_backend_free(&r->be);
		fail_msg("engine init: status %d: %s", (int)rv, r->err.msg);
	}
}

void etu_rig_stop(struct etu_rig *r)
{
	ds_engine_free(r->e);
	ds_backend_free(&r->be);
	r->e = NULL;
}

void etu_rig_check_stop(struct etu_rig *r)
{
	enum ds_status rv = ds_engine_kv_check(r->e, &r->err);
	etu_rig_stop(r);
	if (rv != DS_OK)
		fail_msg("kv check: status %d: %s", (int)rv, r->err.msg);
}
