/* engine_internal.h - private state shared by engine.c (API, inbox, events, thread) and
 * sched_step.c (one scheduler iteration: plan, forward, commit / rollback).
 *
 * Threading: everything below "step-thread state" is touched only by the thread that runs
 * steps; "shared state" is guarded by mu. Requests move inbox -> waiting -> running -> freed. */
#ifndef DS_ENGINE_INTERNAL_H
#define DS_ENGINE_INTERNAL_H

#include <pthread.h>

#include "engine.h"
#include "fingerprint.h"
#include "kv_blocks.h"
#include "step_cost.h"

struct ds_req {
	uint64_t id, user_tag, arrival;
	/* tokens[0, n_prompt) prompt; [n_prompt, C) committed output; [C, L) candidates (DVR) */
	int32_t *tokens; /* (cap) */
	int cap, n_prompt, C, L;
	int n_kv;  /* KV written for positions [0, n_kv) */
	int kv_hi; /* highest n_kv ever reached: prefill below it is recompute */
	int max_tokens;
	struct ds_sample_params sp;
	int32_t *stop_ids;
	int n_stop_ids;
	int32_t **stop_seqs;
	int *stop_seq_lens;
	int n_stop_seqs;
	bool ignore_eos, det, dvr, early_verify, return_logprobs;
	bool paused, verify_now;
	bool low_margin; /* a candidate of the open window has a low margin (early verification) */
	bool vsel; /* planning: selected for this step's verification */
	int overtaken; /* det-first admission: later arrivals admitted ahead of it while waiting */
	float *logprobs; /* (max_tokens) of committed output tokens */
	struct ds_kv_seq kv;
	struct ds_fp fp;
	struct ds_dvr_stats st;
	int n_emitted; /* output tokens already sent */
	enum ds_finish finish;
	enum ds_status status;
	char error[256];
	uint64_t t_submit_ns, t_first_ns;
};

enum cmd_kind { CMD_SUBMIT, CMD_CANCEL, CMD_PAUSE };

struct ds_cmd {
	enum cmd_kind kind;
	uint64_t id;
	bool flag;
	struct ds_req *req;
	struct ds_cmd *next;
};

/* An event and its token/logprob arrays in one allocation; ds_event_free is free(). */
struct ds_ev_item {
	struct ds_event ev; /* first: the public pointer is this item */
	struct ds_ev_item *next;
};

enum plan_kind { PLAN_COMPUTE, PLAN_VERIFY };

struct ds_plan_item {
	struct ds_req *r;
	enum plan_kind kind;
	int pos0, n;
	int row0; /* first output row */
	int pass; /* REF pass index within the step (verify groups of at most G) */
};

struct ds_engine {
	struct ds_backend *be;
	const struct ds_model *model;
	struct ds_engine_opts o;
	char identity_hex[33];

	/* ---- step-thread state ---- */
	struct ds_kv_pool *pool;
	struct ds_req **waiting; /* sorted by arrival */
	int n_waiting, cap_waiting;
	struct ds_req **running; /* sorted by arrival */
	int n_running, cap_running;
	struct ds_engine_stats st;
	uint64_t calls0[DS_N_PATHS];
	struct ds_plan_item *plan[DS_N_PATHS]; /* (max_running) */
	int n_plan[DS_N_PATHS];
	struct ds_fwd_seq *seqs; /* (max_running) */
	struct ds_fwd_row *rows; /* (cap_rows) */
	int cap_rows;
	bool did_work;
	int ready_rows_left; /* planning: rows of ready windows not yet planned this step */
	bool step_ref;       /* planning: this DVR step runs as one REF pass (step policy) */
	int step_ref_why;    /* planning: why (enum ds_ref_why, sched_step.c) */
	bool ev_on;          /* planning: low-margin windows count as ready (early verification) */
	int window;          /* planning: the window in use this step (window_auto) */
	double cand_seen, cand_rolled; /* decayed counts: verified candidates, rollbacks */
	struct ds_step_cost cost; /* measured pass costs (auto step policy) */
	float margin_thr;   /* early-verify threshold in use (explicit or calibrated) */
	float margin_delta; /* calibration: max |fast - ref| logit, -1 when not run */

	/* ---- shared state, under mu ---- */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct ds_cmd *inbox_head, *inbox_tail;
	struct ds_ev_item *ev_head, *ev_tail;
	int efd;
	uint64_t next_id, next_arrival;
	int n_queued; /* submitted, not yet admitted */
	int n_active; /* submitted, not yet finished */
	struct ds_engine_stats snap;
	bool thread_on, stop;
	pthread_t thread;
};

/* engine.c */
uint64_t ds_engine_now_ns(void);
/* Emits the request's new output tokens (and the final event when finish is set). */
void ds_engine_emit(struct ds_engine *e, struct ds_req *r);
/* Final event, KV release, stats, free. r must already be out of waiting/running. */
void ds_engine_retire(struct ds_engine *e, struct ds_req *r);

/* calibrate.c: a greedy sequence of n tokens from position 0 on a scratch KV table (the
 * calibration's and the warm-up's passes). */
struct ds_fwd_seq ds_engine_scratch_seq(const int32_t *tokens, int n, const struct ds_kv_seq *kv,
                                        bool all_rows);
/* calibrate.c: sets margin_thr / margin_delta from one FAST and one REF pass with logits. */
enum ds_status ds_engine_calibrate(struct ds_engine *e, struct ds_err *err);

/* warmup.c: forward passes of every size class on the mode's paths (opts.warmup). */
enum ds_status ds_engine_warmup(struct ds_engine *e, struct ds_err *err);

/* sched_step.c */
enum ds_status ds_sched_step(struct ds_engine *e, struct ds_err *err);
/* Fails and retires every request still waiting or running (engine shutdown). */
void ds_sched_drop_all(struct ds_engine *e);

#endif
