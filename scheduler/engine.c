/* engine.c - the engine's public API: options, request validation and submission, the
 * thread-safe inbox (submit / cancel / pause), the event queue with its eventfd, the step
 * thread, and request retirement. One iteration of scheduling lives in sched_step.c.
 *
 * Key decision: other threads never touch scheduler state. They validate and allocate a
 * request, then push a command into a mutex-protected inbox that the step drains, so the
 * step itself runs lock-free except for short inbox/event critical sections. */
#include "engine_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static const char *const mode_names[] = {"fast", "dvr", "invariant", "ref-only"};
static const char *const policy_names[] = {"auto", "merge", "split"};
static const char *const admit_names[] = {"fcfs", "det-first"};

static const char *name_of(const char *const *names, size_t n, unsigned i)
{
	return i < n ? names[i] : "?";
}

/* Index of s in names, or -1. */
static int name_find(const char *const *names, size_t n, const char *s)
{
	for (size_t i = 0; s && i < n; i++)
		if (strcmp(s, names[i]) == 0)
			return (int)i;
	return -1;
}

const char *ds_mode_name(enum ds_mode m)
{
	return name_of(mode_names, DS_ARRAY_LEN(mode_names), (unsigned)m);
}

enum ds_status ds_mode_parse(const char *s, enum ds_mode *out)
{
	int i = name_find(mode_names, DS_ARRAY_LEN(mode_names), s);
	if (i < 0)
		return DS_ERR_INVALID;
	*out = (enum ds_mode)i;
	return DS_OK;
}

const char *ds_step_policy_name(enum ds_step_policy p)
{
	return name_of(policy_names, DS_ARRAY_LEN(policy_names), (unsigned)p);
}

enum ds_status ds_step_policy_parse(const char *s, enum ds_step_policy *out)
{
	int i = name_find(policy_names, DS_ARRAY_LEN(policy_names), s);
	if (i < 0)
		return DS_ERR_INVALID;
	*out = (enum ds_step_policy)i;
	return DS_OK;
}

const char *ds_admit_policy_name(enum ds_admit_policy p)
{
	return name_of(admit_names, DS_ARRAY_LEN(admit_names), (unsigned)p);
}

enum ds_status ds_admit_policy_parse(const char *s, enum ds_admit_policy *out)
{
	int i = name_find(admit_names, DS_ARRAY_LEN(admit_names), s);
	if (i < 0)
		return DS_ERR_INVALID;
	*out = (enum ds_admit_policy)i;
	return DS_OK;
}

void ds_engine_opts_default(struct ds_engine_opts *o)
{
	*o = (struct ds_engine_opts){
	    .mode = DS_MODE_DVR,
	    .window = 32,
	    .group = 16,
	    .margin_threshold = -1.0f, /* auto: calibrated at init */
	    .inject_mismatch = 0.0,
	    .inject_seed = 0,
	    .kv_block_size = 16,
	    .kv_blocks = 1024,
	    .max_step_tokens = 512,
	    .max_running = 256,
	    .max_queue = 1024,
	    .prefix_cache = true,
	    .step_policy = DS_STEP_AUTO,
	    .ref_step_bias = 1.0,
	    .window_auto = true,
	    .admit_policy = DS_ADMIT_FCFS,
	    .admit_max_overtake = 0,
	};
}

uint64_t ds_engine_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static enum ds_status check_opts(const struct ds_engine_opts *o, struct ds_err *err)
{
	if ((unsigned)o->mode > DS_MODE_REF_ONLY)
		return ds_errf(err, DS_ERR_INVALID, "engine: bad mode %d", (int)o->mode);
	if (o->window < 1 || o->window > 4096)
		return ds_errf(err, DS_ERR_INVALID, "engine: window %d outside [1, 4096]",
		               o->window);
	if (o->group < 1 || o->group > 4096)
		return ds_errf(err, DS_ERR_INVALID, "engine: group %d outside [1, 4096]", o->group);
	if (isnan(o->margin_threshold))
		return ds_errf(err, DS_ERR_INVALID,
		               "engine: margin_threshold must be a number (< 0 = auto)");
	if (!(o->inject_mismatch >= 0.0 && o->inject_mismatch <= 1.0))
		return ds_errf(err, DS_ERR_INVALID, "engine: inject_mismatch must be in [0, 1]");
	if ((unsigned)o->step_policy > DS_STEP_SPLIT)
		return ds_errf(err, DS_ERR_INVALID, "engine: bad step policy %d",
		               (int)o->step_policy);
	if ((unsigned)o->admit_policy > DS_ADMIT_DET_FIRST)
		return ds_errf(err, DS_ERR_INVALID, "engine: bad admit policy %d",
		               (int)o->admit_policy);
	if (o->admit_max_overtake < 0)
		return ds_errf(err, DS_ERR_INVALID, "engine: admit_max_overtake must be >= 0");
	if (!(o->ref_step_bias >= 0.0) || !isfinite(o->ref_step_bias))
		return ds_errf(err, DS_ERR_INVALID, "engine: ref_step_bias must be finite and >= 0");
	if (o->kv_block_size < 1 || o->kv_blocks < 1)
		return ds_errf(err, DS_ERR_INVALID,
		               "engine: kv_block_size %d and kv_blocks %d must be > 0",
		               o->kv_block_size, o->kv_blocks);
	if (o->max_step_tokens < 1 || o->max_running < 1 || o->max_queue < 1)
		return ds_errf(err, DS_ERR_INVALID,
		               "engine: max_step_tokens, max_running and max_queue must be > 0");
	return DS_OK;
}

enum ds_status ds_engine_init(struct ds_engine **out, struct ds_backend *be,
                              const struct ds_engine_opts *opts, struct ds_err *err)
{
	*out = NULL;
	enum ds_status rv = check_opts(opts, err);
	if (rv != DS_OK)
		return rv;
	if (!be || !be->iface || !be->model)
		return ds_errf(err, DS_ERR_INVALID, "engine: backend not initialised");
	struct ds_engine *e = calloc(1, sizeof(*e));
	if (!e)
		return ds_errf(err, DS_ERR_NOMEM, "engine: out of memory");
	e->be = be;
	e->model = be->model;
	e->o = *opts;
	if (e->o.mode == DS_MODE_REF_ONLY)
		e->o.max_running = 1; /* the oracle: one request at a time */
	e->efd = -1;
	e->next_id = 1;
	e->window = e->o.window;
	pthread_mutex_init(&e->mu, NULL);
	pthread_cond_init(&e->cv, NULL);
	ds_model_identity_hex(e->model, e->identity_hex);

	int mr = e->o.max_running;
	e->cap_waiting = 64;
	e->cap_running = mr;
	e->waiting = malloc((size_t)e->cap_waiting * sizeof(*e->waiting));
	e->running = malloc((size_t)mr * sizeof(*e->running));
	e->plan[0] = malloc((size_t)mr * sizeof(struct ds_plan_item));
	e->plan[1] = malloc((size_t)mr * sizeof(struct ds_plan_item));
	e->seqs = malloc((size_t)mr * sizeof(*e->seqs));
	if (!e->waiting || !e->running || !e->plan[0] || !e->plan[1] || !e->seqs) {
		rv = ds_errf(err, DS_ERR_NOMEM, "engine: out of memory for %d running slots", mr);
		goto fail;
	}
	rv = ds_kv_pool_init(&e->pool, e->o.kv_blocks, e->o.kv_block_size, err);
	if (rv != DS_OK)
		goto fail;
	rv = ds_backend_kv_init(be, e->o.kv_blocks, e->o.kv_block_size, err);
	if (rv != DS_OK)
		goto fail;
	e->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (e->efd < 0) {
		rv = ds_errf(err, DS_ERR_IO, "engine: eventfd: %s", strerror(errno));
		goto fail;
	}
	/* the early-verify threshold: explicit (>= 0), else calibrated once (DVR only) */
	e->margin_thr = e->o.margin_threshold;
	e->margin_delta = -1.0f;
	if (e->o.margin_threshold < 0.0f) {
		e->margin_thr = 0.0f;
		if (e->o.mode == DS_MODE_DVR && (rv = ds_engine_calibrate(e, err)) != DS_OK)
			goto fail;
	}
	e->st.margin_threshold = e->margin_thr;
	e->st.margin_delta = e->margin_delta;
	if (e->o.warmup && (rv = ds_engine_warmup(e, err)) != DS_OK)
		goto fail;
	/* after calibration and warm-up: engine stats count only the requests' forward calls */
	for (int p = 0; p < DS_N_PATHS; p++)
		e->calls0[p] = be->counters.calls[p];
	e->st.kv_blocks_total = e->o.kv_blocks;
	e->snap = e->st;
	*out = e;
	return DS_OK;
fail:
	ds_engine_free(e);
	return rv;
}

static void req_free(struct ds_req *r)
{
	if (!r)
		return;
	free(r->tokens);
	free(r->logprobs);
	free(r->stop_ids);
	for (int i = 0; r->stop_seqs && i < r->n_stop_seqs; i++)
		free(r->stop_seqs[i]);
	free(r->stop_seqs);
	free(r->stop_seq_lens);
	ds_fp_free(&r->fp);
	free(r->kv.blocks);
	free(r);
}

void ds_engine_free(struct ds_engine *e)
{
	if (!e)
		return;
	ds_engine_stop(e);
	if (e->pool)
		ds_sched_drop_all(e);
	for (struct ds_cmd *c = e->inbox_head, *n; c; c = n) {
		n = c->next;
		req_free(c->req);
		free(c);
	}
	for (struct ds_ev_item *v = e->ev_head, *n; v; v = n) {
		n = v->next;
		free(v);
	}
	ds_kv_pool_free(e->pool);
	if (e->efd >= 0)
		close(e->efd);
	free(e->waiting);
	free(e->running);
	free(e->plan[0]);
	free(e->plan[1]);
	free(e->seqs);
	free(e->rows);
	pthread_mutex_destroy(&e->mu);
	pthread_cond_destroy(&e->cv);
	free(e);
}

/* ---- submission ---- */

static enum ds_status validate(struct ds_engine *e, const struct ds_request_params *p,
                               struct ds_err *err)
{
	const struct ds_model_config *c = &e->model->cfg;
	if (!p->prompt || p->n_prompt <= 0)
		return ds_errf(err, DS_ERR_INVALID, "request: empty prompt");
	for (int i = 0; i < p->n_prompt; i++)
		if (p->prompt[i] < 0 || p->prompt[i] >= c->vocab_size)
			return ds_errf(err, DS_ERR_INVALID,
			               "request: prompt[%d] = %d outside vocab %d", i, p->prompt[i],
			               c->vocab_size);
	if (p->max_tokens <= 0)
		return ds_errf(err, DS_ERR_INVALID, "request: max_tokens %d must be > 0",
		               p->max_tokens);
	const struct ds_sample_params *s = &p->sampling;
	if (!(s->temperature >= 0.0f) || isinf(s->temperature))
		return ds_errf(err, DS_ERR_INVALID, "request: temperature must be finite and >= 0");
	if (!(s->top_p > 0.0f && s->top_p <= 1.0f))
		return ds_errf(err, DS_ERR_INVALID, "request: top_p must be in (0, 1]");
	if (s->top_k < 0)
		return ds_errf(err, DS_ERR_INVALID, "request: top_k must be >= 0");
	if (p->n_prompt > c->max_pos)
		return ds_errf(err, DS_ERR_INVALID,
		               "request: prompt of %d tokens exceeds the context %d", p->n_prompt,
		               c->max_pos);
	if (p->n_stop_ids < 0 || (p->n_stop_ids && !p->stop_ids) || p->n_stop_seqs < 0 ||
	    (p->n_stop_seqs && (!p->stop_seqs || !p->stop_seq_lens)))
		return ds_errf(err, DS_ERR_INVALID, "request: bad stop arrays");
	for (int i = 0; i < p->n_stop_ids; i++)
		if (p->stop_ids[i] < 0 || p->stop_ids[i] >= c->vocab_size)
			return ds_errf(err, DS_ERR_INVALID, "request: stop id %d outside vocab",
			               p->stop_ids[i]);
	for (int i = 0; i < p->n_stop_seqs; i++) {
		if (p->stop_seq_lens[i] <= 0 || !p->stop_seqs[i])
			return ds_errf(err, DS_ERR_INVALID, "request: stop sequence %d is empty",
			               i);
		for (int j = 0; j < p->stop_seq_lens[i]; j++)
			if (p->stop_seqs[i][j] < 0 || p->stop_seqs[i][j] >= c->vocab_size)
				return ds_errf(err, DS_ERR_INVALID,
				               "request: stop sequence %d outside vocab", i);
	}
	if (p->deterministic && e->o.mode == DS_MODE_FAST)
		return ds_errf(
		    err, DS_ERR_PRECONDITION,
		    "request: deterministic requests need --mode dvr, invariant or ref-only");
	int64_t total = (int64_t)p->n_prompt + p->max_tokens;
	if (total > c->max_pos)
		return ds_errf(err, DS_ERR_TOO_LONG,
		               "request: prompt %d + max_tokens %d exceeds the context %d",
		               p->n_prompt, p->max_tokens, c->max_pos);
	int64_t bs = e->o.kv_block_size;
	if ((total + bs - 1) / bs > e->o.kv_blocks)
		return ds_errf(
		    err, DS_ERR_TOO_LONG,
		    "request: prompt %d + max_tokens %d needs %lld KV blocks; the pool has %d",
		    p->n_prompt, p->max_tokens, (long long)((total + bs - 1) / bs), e->o.kv_blocks);
	return DS_OK;
}

static void *dup_mem(const void *src, size_t n, bool *ok)
{
	if (n == 0)
		return NULL;
	void *d = malloc(n);
	if (!d)
		*ok = false;
	else
		memcpy(d, src, n);
	return d;
}

static enum ds_status req_create(struct ds_engine *e, const struct ds_request_params *p,
                                 struct ds_req **out, struct ds_err *err)
{
	bool ok = true;
	struct ds_req *r = calloc(1, sizeof(*r));
	if (!r)
		return ds_errf(err, DS_ERR_NOMEM, "request: out of memory");
	r->n_prompt = p->n_prompt;
	r->cap = p->n_prompt + p->max_tokens + 1;
	r->C = r->L = p->n_prompt;
	r->max_tokens = p->max_tokens;
	r->sp = p->sampling;
	r->ignore_eos = p->ignore_eos;
	r->det = p->deterministic;
	r->dvr = r->det && e->o.mode == DS_MODE_DVR;
	r->early_verify = p->early_verify;
	r->return_logprobs = p->return_logprobs;
	r->user_tag = p->user_tag;
	r->tokens = malloc((size_t)r->cap * sizeof(int32_t));
	r->logprobs = malloc((size_t)p->max_tokens * sizeof(float));
	if (!r->tokens || !r->logprobs)
		ok = false;
	else
		memcpy(r->tokens, p->prompt, (size_t)p->n_prompt * sizeof(int32_t));
	r->n_stop_ids = p->n_stop_ids;
	r->stop_ids = dup_mem(p->stop_ids, (size_t)p->n_stop_ids * sizeof(int32_t), &ok);
	if (p->n_stop_seqs > 0) {
		r->stop_seqs = calloc((size_t)p->n_stop_seqs, sizeof(*r->stop_seqs));
		r->stop_seq_lens =
		    dup_mem(p->stop_seq_lens, (size_t)p->n_stop_seqs * sizeof(int), &ok);
		if (!r->stop_seqs)
			ok = false;
		else {
			r->n_stop_seqs = p->n_stop_seqs;
			for (int i = 0; i < p->n_stop_seqs; i++)
				r->stop_seqs[i] =
				    dup_mem(p->stop_seqs[i],
				            (size_t)p->stop_seq_lens[i] * sizeof(int32_t), &ok);
		}
	}
	if (!p->has_seed) {
		uint64_t s = 0;
		if (getrandom(&s, sizeof(s), 0) != (ssize_t)sizeof(s))
			s = ds_mix64(ds_engine_now_ns() ^ (uint64_t)(uintptr_t)r);
		r->sp.seed = s;
	}
	if (ok && r->det) {
		struct ds_fp_params fpp = {
		    .sampling = r->sp,
		    .max_tokens = p->max_tokens,
		    .stop_ids = p->stop_ids,
		    .n_stop_ids = p->n_stop_ids,
		    .stop_seqs = p->stop_seqs,
		    .stop_seq_lens = p->stop_seq_lens,
		    .n_stop_seqs = p->n_stop_seqs,
		    .ignore_eos = p->ignore_eos,
		};
		if (ds_fp_init(&r->fp, e->model->identity, p->prompt, p->n_prompt, &fpp,
		               e->model->cfg.vocab_size) != DS_OK)
			ok = false;
	}
	if (!ok) {
		req_free(r);
		return ds_errf(err, DS_ERR_NOMEM, "request: out of memory");
	}
	r->t_submit_ns = ds_engine_now_ns();
	*out = r;
	return DS_OK;
}

static void inbox_push(struct ds_engine *e, struct ds_cmd *c)
{
	c->next = NULL;
	if (e->inbox_tail)
		e->inbox_tail->next = c;
	else
		e->inbox_head = c;
	e->inbox_tail = c;
	pthread_cond_signal(&e->cv);
}

enum ds_status ds_engine_submit(struct ds_engine *e, const struct ds_request_params *p,
                                uint64_t *id, struct ds_err *err)
{
	enum ds_status rv = validate(e, p, err);
	if (rv != DS_OK)
		return rv;
	struct ds_req *r = NULL;
	rv = req_create(e, p, &r, err);
	if (rv != DS_OK)
		return rv;
	struct ds_cmd *c = calloc(1, sizeof(*c));
	if (!c) {
		req_free(r);
		return ds_errf(err, DS_ERR_NOMEM, "request: out of memory");
	}
	pthread_mutex_lock(&e->mu);
	if (e->n_queued >= e->o.max_queue) {
		pthread_mutex_unlock(&e->mu);
		req_free(r);
		free(c);
		return ds_errf(err, DS_ERR_FULL, "engine: %d requests already waiting",
		               e->o.max_queue);
	}
	uint64_t rid = e->next_id++;
	r->id = rid;
	r->arrival = e->next_arrival++;
	e->n_queued++;
	e->n_active++;
	c->kind = CMD_SUBMIT;
	c->req = r;
	c->id = rid;
	inbox_push(e, c);
	pthread_mutex_unlock(&e->mu);
	/* not r->id: once pushed, the engine thread may run, finish and free r */
	if (id)
		*id = rid;
	return DS_OK;
}

static void push_cmd(struct ds_engine *e, enum cmd_kind kind, uint64_t id, bool flag)
{
	struct ds_cmd *c = calloc(1, sizeof(*c));
	if (!c)
		DS_ABORT("engine: out of memory for a control command");
	c->kind = kind;
	c->id = id;
	c->flag = flag;
	pthread_mutex_lock(&e->mu);
	inbox_push(e, c);
	pthread_mutex_unlock(&e->mu);
}

void ds_engine_cancel(struct ds_engine *e, uint64_t id)
{
	push_cmd(e, CMD_CANCEL, id, true);
}
void ds_engine_pause(struct ds_engine *e, uint64_t id, bool paused)
{
	push_cmd(e, CMD_PAUSE, id, paused);
}

/* ---- events ---- */

void ds_event_free(struct ds_event *ev)
{
	free(ev);
}

void ds_engine_emit(struct ds_engine *e, struct ds_req *r)
{
	int n_out = r->C - r->n_prompt;
	int n = n_out - r->n_emitted;
	bool final = r->finish != DS_FINISH_NONE;
	if (n <= 0 && !final)
		return;
	if (n < 0)
		n = 0;
	bool lp = r->return_logprobs;
	size_t sz = sizeof(struct ds_ev_item) + (size_t)n * sizeof(int32_t) +
	            (lp ? (size_t)n * sizeof(float) : 0);
	struct ds_ev_item *it = calloc(1, sz);
	if (!it)
		DS_ABORT("engine: out of memory for an event");
	struct ds_event *ev = &it->ev;
	ev->req_id = r->id;
	ev->user_tag = r->user_tag;
	ev->n_tokens = n;
	ev->tokens = (int32_t *)(it + 1);
	memcpy(ev->tokens, r->tokens + r->n_prompt + r->n_emitted, (size_t)n * sizeof(int32_t));
	if (lp) {
		ev->logprobs = (float *)(ev->tokens + n);
		memcpy(ev->logprobs, r->logprobs + r->n_emitted, (size_t)n * sizeof(float));
	}
	uint64_t now = ds_engine_now_ns();
	if (n > 0 && !r->t_first_ns)
		r->t_first_ns = now;
	r->n_emitted = n_out;
	ev->final = final;
	ev->seed = r->sp.seed;
	ev->deterministic = r->det;
	ev->t_submit_ns = r->t_submit_ns;
	ev->t_first_ns = r->t_first_ns;
	if (final) {
		ev->finish = r->finish;
		ev->status = r->status;
		snprintf(ev->error, sizeof(ev->error), "%s", r->error);
		ev->prompt_tokens = r->n_prompt;
		ev->completion_tokens = n_out;
		if (r->det)
			ds_fp_hex(&r->fp, ev->fingerprint);
		ev->dvr = r->st;
		ev->t_final_ns = now;
	}
	pthread_mutex_lock(&e->mu);
	if (e->ev_tail)
		e->ev_tail->next = it;
	else
		e->ev_head = it;
	e->ev_tail = it;
	pthread_mutex_unlock(&e->mu);
	uint64_t one = 1;
	ssize_t w = write(e->efd, &one, sizeof(one));
	(void)w; /* EAGAIN only when the counter is saturated: it is readable anyway */
}

void ds_engine_retire(struct ds_engine *e, struct ds_req *r)
{
	if (r->finish == DS_FINISH_NONE)
		r->finish = DS_FINISH_ERROR;
	r->C = DS_MAX(r->C, r->n_prompt);
	ds_engine_emit(e, r);
	ds_kv_seq_release(e->pool, &r->kv);
	if (r->finish != DS_FINISH_CANCELLED && r->finish != DS_FINISH_ERROR) {
		e->st.requests[r->det]++;
	}
	e->st.tokens[r->det] += (uint64_t)(r->C - r->n_prompt);
	pthread_mutex_lock(&e->mu);
	e->n_active--;
	pthread_mutex_unlock(&e->mu);
	req_free(r);
}

struct ds_event *ds_engine_poll(struct ds_engine *e)
{
	pthread_mutex_lock(&e->mu);
	struct ds_ev_item *it = e->ev_head;
	if (it) {
		e->ev_head = it->next;
		if (!e->ev_head)
			e->ev_tail = NULL;
	}
	if (!e->ev_head) {
		uint64_t v;
		ssize_t rd = read(e->efd, &v, sizeof(v));
		(void)rd; /* EAGAIN when already clear */
	}
	pthread_mutex_unlock(&e->mu);
	return it ? &it->ev : NULL;
}

int ds_engine_event_fd(struct ds_engine *e)
{
	return e->efd;
}

/* ---- stepping ---- */

enum ds_status ds_engine_step(struct ds_engine *e, struct ds_err *err)
{
	pthread_mutex_lock(&e->mu);
	bool on = e->thread_on;
	pthread_mutex_unlock(&e->mu);
	if (on)
		return ds_errf(err, DS_ERR_PRECONDITION,
		               "engine: step called while the thread runs");
	return ds_sched_step(e, err);
}

bool ds_engine_idle(struct ds_engine *e)
{
	pthread_mutex_lock(&e->mu);
	bool idle = e->n_active == 0;
	pthread_mutex_unlock(&e->mu);
	return idle;
}

static void *engine_thread(void *arg)
{
	struct ds_engine *e = arg;
	for (;;) {
		pthread_mutex_lock(&e->mu);
		while (!e->stop && !e->inbox_head && (e->n_active == 0 || !e->did_work)) {
			if (e->n_active == 0) {
				pthread_cond_wait(&e->cv, &e->mu);
			} else {
				/* only paused work: poll slowly until a command arrives */
				struct timespec ts;
				clock_gettime(CLOCK_REALTIME, &ts);
				ts.tv_nsec += 2000000;
				if (ts.tv_nsec >= 1000000000) {
					ts.tv_sec++;
					ts.tv_nsec -= 1000000000;
				}
				pthread_cond_timedwait(&e->cv, &e->mu, &ts);
				break;
			}
		}
		bool stop = e->stop;
		pthread_mutex_unlock(&e->mu);
		if (stop)
			break;
		struct ds_err err;
		ds_sched_step(e, &err); /* failures cost the requests involved, not the thread */
	}
	return NULL;
}

enum ds_status ds_engine_start(struct ds_engine *e, struct ds_err *err)
{
	pthread_mutex_lock(&e->mu);
	if (e->thread_on) {
		pthread_mutex_unlock(&e->mu);
		return DS_OK;
	}
	e->stop = false;
	e->did_work = true;
	int rc = pthread_create(&e->thread, NULL, engine_thread, e);
	if (rc == 0)
		e->thread_on = true;
	pthread_mutex_unlock(&e->mu);
	if (rc != 0)
		return ds_errf(err, DS_ERR_INTERNAL, "engine: pthread_create: %s", strerror(rc));
	return DS_OK;
}

void ds_engine_stop(struct ds_engine *e)
{
	pthread_mutex_lock(&e->mu);
	if (!e->thread_on) {
		pthread_mutex_unlock(&e->mu);
		return;
	}
	e->stop = true;
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
	pthread_join(e->thread, NULL);
	pthread_mutex_lock(&e->mu);
	e->thread_on = false;
	pthread_mutex_unlock(&e->mu);
}

void ds_engine_get_stats(struct ds_engine *e, struct ds_engine_stats *out)
{
	pthread_mutex_lock(&e->mu);
	*out = e->snap;
	pthread_mutex_unlock(&e->mu);
}

const struct ds_engine_opts *ds_engine_get_opts(const struct ds_engine *e)
{
	return &e->o;
}

enum ds_status ds_engine_kv_check(struct ds_engine *e, struct ds_err *err)
{
	enum ds_status rv = ds_kv_pool_check(e->pool, err);
	if (rv != DS_OK)
		return rv;
	if (ds_engine_idle(e) && ds_kv_pool_n_used(e->pool) != 0)
		return ds_errf(err, DS_ERR_INTERNAL,
		               "kv: engine idle but %d blocks still referenced",
		               ds_kv_pool_n_used(e->pool));
	return DS_OK;
}
