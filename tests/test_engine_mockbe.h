/* test_engine_mockbe.h - a strict mock backend for scheduler tests.
 *
 * Each KV slot holds a hash of the token prefix up to its position and the path that wrote
 * it. A row's logits are a hash of the prefix hash read back through the block table, so a
 * wrong block table, a stale or missing slot, or a reference row that reads fast-written KV
 * (the DVR invariant) all change the output. The fast path adds a small perturbation keyed by
 * the batch shape, so it really is batch-variant and produces mismatches. */
#ifndef TEST_ENGINE_MOCKBE_H
#define TEST_ENGINE_MOCKBE_H

#include "backend.h"

struct mockbe_opts {
	float fast_noise;    /* amplitude of the batch-keyed fast-path perturbation */
	float logit_scale;   /* logits are in [-scale, scale) */
	uint64_t *bad_reads; /* optional: counts tainted + unwritten reads across instances */
	int fail_path;       /* with fail_every > 0: every fail_every-th call on this path fails */
	int fail_every;
	const int *ref_warm_sizes; /* optional: the REF sizes the mock names to the warm-up */
	int n_ref_warm_sizes;
};

/* The model is used for its config (vocab, context) only; it may have no weights. */
enum ds_status mockbe_init(struct ds_backend *be, const struct ds_model *m,
                           const struct mockbe_opts *o, struct ds_err *err);
/* Reference reads of fast-written KV seen so far (must stay 0). */
uint64_t mockbe_tainted_reads(const struct ds_backend *be);

/* Reads of KV slots no forward ever wrote (must stay 0). */
uint64_t mockbe_unwritten_reads(const struct ds_backend *be);

#endif
