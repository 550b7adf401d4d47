/* test_engine_harness.h - randomized scenarios for the scheduler and the ref-only oracle.
 *
 * A scenario is a seeded mix of requests (deterministic or not, shared prompt prefixes,
 * random arrival steps, cancellations) and engine options (W, G, injection, a small KV pool,
 * a small step budget). The runner steps an engine by hand and records every event; the
 * checker replays each deterministic request alone through a ref-only engine and demands
 * bit-identical tokens, logprobs, finish reason and fingerprint. */
#ifndef TEST_ENGINE_HARNESS_H
#define TEST_ENGINE_HARNESS_H

#include "engine.h"

#define SCEN_MAX_PROMPT 96
#define SCEN_MAX_OUT 48

struct scen_req {
	/* input */
	int32_t prompt[SCEN_MAX_PROMPT];
	int n_prompt, max_tokens;
	struct ds_sample_params sp;
	bool has_seed, det, early_verify, ignore_eos;
	int32_t stop_ids[2];
	int n_stop_ids;
	int32_t stop_seq[2];
	int stop_seq_len;
	int arrive_step, cancel_step; /* cancel_step < 0: never */
	/* a follow-up turn (follow >= 0): arrives once request `follow` has streamed follow_min
	 * tokens; its prompt is that request's prompt, everything it committed so far, and
	 * n_extra tokens of its own, so it hits blocks of generated tokens in the prefix cache */
	int follow, follow_min, n_extra;
	int32_t extra[3];
	/* observed */
	uint64_t id;
	bool submitted;
	int32_t out[SCEN_MAX_OUT + 1];
	float lp[SCEN_MAX_OUT + 1];
	int n_out, n_final;
	enum ds_finish finish;
	char fp[33];
	uint64_t seed;
	struct ds_dvr_stats dvr;
	int first_step; /* the step after which its first output token had arrived (-1: none) */
};

struct scenario {
	uint64_t seed;
	struct ds_engine_opts opts;
	int n_req;
	struct scen_req *req; /* (n_req) */
};

/* Makes a backend for a model: the engine under test (oracle = false) or the oracle. */
typedef enum ds_status (*scen_backend_fn)(struct ds_backend *be, void *arg, bool oracle,
                                          struct ds_err *err);

struct scen_gen_opts {
	int n_req_max;      /* 1..64 */
	const int *windows; /* choices for W */
	int n_windows;
	double invariant_share; /* fraction of scenarios run in invariant mode (else dvr) */
	double det_share;       /* fraction of deterministic requests */
	double inject;          /* < 0: pick 0 or 0.2 at random */
	bool windowed;          /* step policy split or merge only (deterministic requests propose
	                         * on FAST between verifications, so windows and rollbacks happen);
	                         * else drawn among split, merge, auto, auto with REF whenever a
	                         * deterministic request runs */
};

/* Fills s (s->req is allocated; free with scen_free). */
void scen_generate(struct scenario *s, uint64_t seed, const struct ds_model_config *cfg,
                   const struct scen_gen_opts *g);
void scen_free(struct scenario *s);

/* Runs the scenario on a fresh engine over a fresh backend. On failure returns false with a
 * reason in msg. stats (optional) receives the engine's final counters. */
bool scen_run(struct scenario *s, scen_backend_fn mk, void *arg, struct ds_engine_stats *stats,
              char *msg, size_t len);
/* Replays each deterministic request alone on a ref-only engine and compares. */
bool scen_check_oracle(const struct scenario *s, scen_backend_fn mk, void *arg, char *msg,
                       size_t len);
/* Runs a single request to completion on engine e (manual stepping); false on error. */
bool scen_run_one(struct ds_engine *e, struct scen_req *q, char *msg, size_t len);

#endif
