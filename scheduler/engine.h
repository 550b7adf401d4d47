/* engine.h - the scheduler's public API: continuous batching over a paged KV cache, with
 * decode-verify-rollback (DVR) for deterministic requests (DESIGN.md sections 2-5).
 *
 * Two ways to drive it:
 *  - manual: the caller calls ds_engine_step() (tests, offline benchmarks); events are
 *    read with ds_engine_poll() after each step;
 *  - threaded: ds_engine_start() runs steps on the engine's own thread; the server watches
 *    ds_engine_event_fd() from its event loop and drains ds_engine_poll().
 * Submit, cancel and pause are thread-safe in both. Events per request arrive in order and end
 * with exactly one final event. */
#ifndef DS_ENGINE_H
#define DS_ENGINE_H

#include "ds_common.h"
#include "backend.h"

enum ds_mode {
	DS_MODE_FAST = 0,  /* fast path only; deterministic requests are rejected */
	DS_MODE_DVR,       /* default: fast for all, DVR for deterministic requests */
	DS_MODE_INVARIANT, /* everything on the reference path, batched */
	DS_MODE_REF_ONLY,  /* one request at a time, one token at a time, reference path: the oracle */
};

/* How a DVR step that has reference work (a verification due, a deterministic prefill) is run.
 * The policy only decides which pass computes what; committed tokens never depend on it. */
enum ds_step_policy {
	DS_STEP_AUTO = 0, /* merge, and also run a step entirely on the reference path when its
	                   * measured cost is no more than the fast step's plus the verification
	                   * it would commit to (step_cost.h): at compute-bound batches DVR
	                   * requests then decode straight on REF; default */
	DS_STEP_MERGE,    /* the whole step runs as one REF pass (every DVR request verifies what
	                   * it holds or decodes on REF; other requests run there too) */
	DS_STEP_SPLIT,    /* REF passes only for the windows (G per pass) and deterministic
	                   * prefill, plus one FAST pass for everything else */
};

const char *ds_step_policy_name(enum ds_step_policy p);
/* Parses "auto", "merge", "split"; DS_ERR_INVALID otherwise. */
enum ds_status ds_step_policy_parse(const char *s, enum ds_step_policy *out);

/* Which waiting request a free slot admits (DVR mode; the others admit in arrival order).
 * Admission order never changes what is committed, only when and on which pass. */
enum ds_admit_policy {
	DS_ADMIT_FCFS = 0,  /* arrival order (default) */
	DS_ADMIT_DET_FIRST, /* deterministic requests ahead of the others, so that they share
	                     * steps: with the auto policy every step that holds one runs on REF,
	                     * so spreading a 10% share over every step makes every step a REF
	                     * step. They are admitted first and, once running, come first for
	                     * the step's token budget (prefill chunks) and last for preemption.
	                     * For backlogs (offline batches); a waiting request is overtaken at
	                     * most admit_max_overtake times, then admitted in its turn */
};

const char *ds_admit_policy_name(enum ds_admit_policy p);
/* Parses "fcfs", "det-first"; DS_ERR_INVALID otherwise. */
enum ds_status ds_admit_policy_parse(const char *s, enum ds_admit_policy *out);

const char *ds_mode_name(enum ds_mode m);
/* Parses "fast", "dvr", "invariant", "ref-only"; DS_ERR_INVALID otherwise. */
enum ds_status ds_mode_parse(const char *s, enum ds_mode *out);

struct ds_engine_opts {
	enum ds_mode mode;
	int window;              /* W: candidate tokens per verify window (default 32); with
	                          * window_auto the cap of the window the engine picks */
	int group;               /* G: windows per reference pass (default 16) */
	float margin_threshold;  /* early verification when top1-top2 < this; < 0 = auto (the
	                          * default): 1.5x the largest error of the gap between the fast
	                          * top-1 and top-2..8 logits, measured against the reference path
	                          * on a small calibration batch at init (DVR mode), clamped to
	                          * [1e-3, 0.5]; the stats report the value in use */
	double inject_mismatch;  /* P: fraction of windows forced to roll back (studies) */
	uint64_t inject_seed;
	int kv_block_size;       /* positions per block (default 16) */
	int kv_blocks;           /* pool size in blocks */
	int max_step_tokens;     /* token budget per step, chunked prefill (default 512) */
	int max_running;         /* max sequences in the running batch (default 256) */
	int max_queue;           /* waiting requests before DS_ERR_FULL (default 1024) */
	bool prefix_cache;       /* default true */
	/* added with the step policy: */
	enum ds_step_policy step_policy; /* DVR mode only (default auto) */
	double ref_step_bias;    /* auto: the measured REF cost is multiplied by this before the
	                          * comparison (default 1; 0: every step with a deterministic
	                          * request runs on REF; large: never unless a verification is due) */
	bool window_auto;        /* merge/auto: pick the window in [4, W] each step as
	                          * sqrt(2 p / r), p the measured premium of a REF step over a
	                          * FAST one, r the measured rollback rate per candidate
	                          * (default true; split keeps W) */
	bool warmup;             /* run every pass size once or twice at init (autotuning, CUDA
	                          * graphs) so that no request pays for them (default false; the
	                          * server turns it on for the CUDA backend) */
	/* added with det-first admission: */
	enum ds_admit_policy admit_policy; /* default fcfs */
	int admit_max_overtake; /* det-first: how many later deterministic arrivals may be
	                         * admitted ahead of a waiting request (default 0: max_running) */
};

/* Fills opts with the defaults listed above (kv_blocks = 1024, margin_threshold = -1: auto). */
void ds_engine_opts_default(struct ds_engine_opts *o);

struct ds_request_params {
	const int32_t *prompt; /* (n_prompt) copied at submit */
	int n_prompt;
	int max_tokens;
	struct ds_sample_params sampling; /* sampling.seed is used only when has_seed */
	bool has_seed;                    /* else the engine draws one and reports it */
	const int32_t *stop_ids;          /* extra stop token ids (EOS ids always stop) */
	int n_stop_ids;
	const int32_t *const *stop_seqs;  /* token sequences that stop generation */
	const int *stop_seq_lens;
	int n_stop_seqs;
	bool ignore_eos;
	bool deterministic;
	bool early_verify;   /* verify at the first low-margin candidate; callers (the server) default it to true */
	bool return_logprobs;
	uint64_t user_tag;   /* opaque, echoed in events */
};

enum ds_finish {
	DS_FINISH_NONE = 0,   /* not final */
	DS_FINISH_LENGTH,     /* max_tokens reached */
	DS_FINISH_EOS,        /* an EOS / stop id was produced (included in the output) */
	DS_FINISH_STOP_SEQ,   /* a stop sequence matched (included in the output) */
	DS_FINISH_CANCELLED,
	DS_FINISH_ERROR,
};

struct ds_dvr_stats {
	uint64_t verify_passes;   /* reference passes this request took part in */
	uint64_t windows;         /* windows verified */
	uint64_t rollbacks;       /* windows with a mismatch */
	uint64_t rolled_back;     /* candidate tokens discarded */
	uint64_t recomputed;      /* tokens the reference path recomputed (verify rows + re-prefill) */
	uint64_t committed;       /* tokens committed */
};

struct ds_event {
	uint64_t req_id;
	uint64_t user_tag;
	int n_tokens;          /* newly committed / decoded tokens in this event */
	int32_t *tokens;       /* (n_tokens) */
	float *logprobs;       /* (n_tokens) or NULL */
	bool final;
	/* valid when final: */
	enum ds_finish finish;
	enum ds_status status; /* DS_OK unless finish == DS_FINISH_ERROR */
	char error[256];
	int prompt_tokens;
	int completion_tokens;
	uint64_t seed;         /* the seed used */
	bool deterministic;
	char fingerprint[33];  /* hex XXH3-128; empty unless deterministic */
	struct ds_dvr_stats dvr;
	/* timing, nanoseconds on CLOCK_MONOTONIC */
	uint64_t t_submit_ns, t_first_ns, t_final_ns;
};

void ds_event_free(struct ds_event *ev);

struct ds_engine_stats {
	uint64_t requests[2];      /* finished requests: [0] normal, [1] deterministic */
	uint64_t tokens[2];        /* generated tokens */
	uint64_t verify_passes;
	uint64_t windows;
	uint64_t rollbacks;
	uint64_t rolled_back;
	uint64_t recomputed;
	uint64_t preemptions;
	uint64_t prefix_hit_tokens;
	uint64_t steps;
	uint64_t ref_forward_calls; /* backend forward calls on the reference path */
	uint64_t fast_forward_calls;
	int waiting, running;      /* now */
	int kv_blocks_used, kv_blocks_total;
	/* added with the calibrated threshold: the early-verify margin in use, and the measured
	 * largest fast-vs-reference error of a top-1/top-k gap it came from (-1 when not
	 * calibrated) */
	float margin_threshold;
	float margin_delta;
	/* added with the step policy: steps run entirely on the reference path in DVR mode, and
	 * deterministic tokens decoded there directly (no fast candidate; counted apart from
	 * windows) */
	uint64_t ref_steps;
	uint64_t ref_decoded;
	int window; /* the window in use now (window_auto), else W */
	/* added with the REF-step breakdown: ref_steps by the first reason that held, in this
	 * order (they sum to ref_steps) */
	uint64_t ref_steps_window;  /* a deterministic request's window was full */
	uint64_t ref_steps_early;   /* only early verification (low margin, stop token) was due */
	uint64_t ref_steps_catchup; /* a deterministic request had to catch up (prefill, resume) */
	uint64_t ref_steps_cost;    /* auto: the measured costs chose REF */
};

struct ds_engine;

/* Creates an engine over an initialised backend (not owned; its KV pool is sized here from
 * opts). Errors: DS_ERR_INVALID for bad opts, DS_ERR_NOMEM. */
enum ds_status ds_engine_init(struct ds_engine **out, struct ds_backend *be,
			      const struct ds_engine_opts *opts, struct ds_err *err);
/* Stops the thread if running, fails outstanding requests, frees everything. */
void ds_engine_free(struct ds_engine *e);

/* Queues a request. Returns its id in *id. Errors (nothing is queued):
 * DS_ERR_INVALID (empty prompt, id >= vocab, max_tokens <= 0, temperature < 0 or NaN,
 *   top_p outside (0, 1], prompt longer than the context),
 * DS_ERR_TOO_LONG (prompt + max_tokens can never fit the pool or the context),
 * DS_ERR_PRECONDITION (deterministic in fast mode), DS_ERR_FULL (queue full). */
enum ds_status ds_engine_submit(struct ds_engine *e, const struct ds_request_params *p,
				uint64_t *id, struct ds_err *err);
/* Cancels a request; its KV is freed within one step and a final CANCELLED event follows.
 * Unknown or finished ids are ignored. */
void ds_engine_cancel(struct ds_engine *e, uint64_t id);
/* Backpressure: a paused request is not scheduled for decode until resumed. */
void ds_engine_pause(struct ds_engine *e, uint64_t id, bool paused);

/* Manual mode: runs one scheduler iteration. Returns DS_OK also when idle. */
enum ds_status ds_engine_step(struct ds_engine *e, struct ds_err *err);
/* True when no request is waiting or running. */
bool ds_engine_idle(struct ds_engine *e);

/* Threaded mode. */
enum ds_status ds_engine_start(struct ds_engine *e, struct ds_err *err);
void ds_engine_stop(struct ds_engine *e);

/* A file descriptor that becomes readable when events are queued (eventfd/pipe). */
int ds_engine_event_fd(struct ds_engine *e);
/* Pops the next event or returns NULL; free it with ds_event_free. Also clears the fd. */
struct ds_event *ds_engine_poll(struct ds_engine *e);

void ds_engine_get_stats(struct ds_engine *e, struct ds_engine_stats *out);
const struct ds_engine_opts *ds_engine_get_opts(const struct ds_engine *e);

/* Checks the KV block manager's internal invariants and, when the engine is idle, that no
 * block is still referenced (cached blocks may stay). Call from the stepping thread (or with
 * the engine thread stopped). DS_ERR_INTERNAL with detail when broken. (added by the scheduler) */
enum ds_status ds_engine_kv_check(struct ds_engine *e, struct ds_err *err);

#endif
