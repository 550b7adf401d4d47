/* fake_engine.c - a stand-in for scheduler/engine.c, the CPU backend and the model loader,
 * used ONLY to build `detserve-fake` for transport tests while those modules are still
 * being written on other branches. It honours engine.h's threaded contract (event fd,
 * submit/cancel/pause, one final event per request, queue limit) and emits one token per
 * request per 2 ms step: token = hash(seed, prompt, position) % vocab, so replies are
 * reproducible but carry no model meaning. Removed once branch `sched` lands. */
#include "engine.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "rng.h"

static const char *const mode_names[] = {"fast", "dvr", "invariant", "ref-only"};

const char *ds_mode_name(enum ds_mode m)
{
	return (unsigned)m < 4 ? mode_names[m] : "?";
}

enum ds_status ds_mode_parse(const char *s, enum ds_mode *out)
{
	for (int i = 0; i < 4; i++)
		if (!strcmp(s, mode_names[i])) {
			*out = (enum ds_mode)i;
			return DS_OK;
		}
	return DS_ERR_INVALID;
}

void ds_engine_opts_default(struct ds_engine_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->mode = DS_MODE_DVR;
	o->window = 32;
	o->group = 16;
	o->margin_threshold = 0.5f;
	o->kv_block_size = 16;
	o->kv_blocks = 1024;
	o->max_step_tokens = 512;
	o->max_running = 256;
	o->max_queue = 1024;
	o->prefix_cache = true;
}

struct freq {
	uint64_t id, tag, seed, t_submit, t_first;
	uint64_t prompt_hash;
	int n_prompt, max_tokens, n_out;
	int32_t *out;
	bool det, cancelled, paused, lp;
	struct freq *next;
};

struct evq {
	struct ds_event *ev;
	struct evq *next;
};

struct ds_engine {
	struct ds_engine_opts o;
	int vocab, max_pos;
	pthread_mutex_t mu;
	pthread_t th;
	bool running, stop;
	int efd;
	struct freq *reqs;
	int n_reqs;
	uint64_t next_id;
	struct evq *head, *tail;
	struct ds_engine_stats st;
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void ds_event_free(struct ds_event *ev)
{
	if (!ev)
		return;
	free(ev->tokens);
	free(ev->logprobs);
	free(ev);
}

enum ds_status ds_engine_init(struct ds_engine **out, struct ds_backend *be,
			      const struct ds_engine_opts *opts, struct ds_err *err)
{
	struct ds_engine *e = calloc(1, sizeof(*e));
	if (!e)
		return ds_errf(err, DS_ERR_NOMEM, "engine: out of memory");
	e->o = *opts;
	e->vocab = be->model->cfg.vocab_size;
	e->max_pos = be->model->cfg.max_pos;
	pthread_mutex_init(&e->mu, NULL);
	e->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	e->st.kv_blocks_total = opts->kv_blocks;
	*out = e;
	return DS_OK;
}

static void push_event(struct ds_engine *e, struct ds_event *ev)
{
	struct evq *q = calloc(1, sizeof(*q));
	DS_ASSERT(q);
	q->ev = ev;
	if (e->tail)
		e->tail->next = q;
	else
		e->head = q;
	e->tail = q;
	uint64_t one = 1;
	ssize_t w = write(e->efd, &one, sizeof(one));
	(void)w;
}

static struct ds_event *new_event(struct freq *r, const int32_t *toks, int n)
{
	struct ds_event *ev = calloc(1, sizeof(*ev));
	DS_ASSERT(ev);
	ev->req_id = r->id;
	ev->user_tag = r->tag;
	ev->n_tokens = n;
	if (n) {
		ev->tokens = malloc((size_t)n * sizeof(int32_t));
		memcpy(ev->tokens, toks, (size_t)n * sizeof(int32_t));
		if (r->lp) {
			ev->logprobs = malloc((size_t)n * sizeof(float));
			for (int i = 0; i < n; i++)
				ev->logprobs[i] = -1.0f - (float)(toks[i] % 7);
		}
	}
	return ev;
}

static void finish(struct ds_engine *e, struct freq *r, enum ds_finish f)
{
	struct ds_event *ev = new_event(r, NULL, 0);
	ev->final = true;
	ev->finish = f;
	ev->prompt_tokens = r->n_prompt;
	ev->completion_tokens = r->n_out;
	ev->seed = r->seed;
	ev->deterministic = r->det;
	if (r->det) {
		XXH3_state_t *st = XXH3_createState();
		XXH3_128bits_reset(st);
		XXH3_128bits_update(st, &r->prompt_hash, sizeof(r->prompt_hash));
		XXH3_128bits_update(st, &r->seed, sizeof(r->seed));
		XXH3_128bits_update(st, r->out, (size_t)r->n_out * sizeof(int32_t));
		XXH128_hash_t h = XXH3_128bits_digest(st);
		XXH3_freeState(st);
		snprintf(ev->fingerprint, sizeof(ev->fingerprint), "%016llx%016llx",
			 (unsigned long long)h.high64, (unsigned long long)h.low64);
		ev->dvr.committed = (uint64_t)r->n_out;
		ev->dvr.verify_passes = (uint64_t)(r->n_out + e->o.window - 1) / (uint64_t)e->o.window;
		ev->dvr.windows = ev->dvr.verify_passes;
	}
	ev->t_submit_ns = r->t_submit;
	ev->t_first_ns = r->t_first ? r->t_first : now_ns();
	ev->t_final_ns = now_ns();
	e->st.requests[r->det]++;
	e->st.tokens[r->det] += (uint64_t)r->n_out;
	push_event(e, ev);
}

static void *engine_main(void *arg)
{
	struct ds_engine *e = arg;
	for (;;) {
		pthread_mutex_lock(&e->mu);
		if (e->stop) {
			pthread_mutex_unlock(&e->mu);
			break;
		}
		int running = 0;
		e->st.steps++;
		for (struct freq **pp = &e->reqs; *pp;) {
			struct freq *r = *pp;
			if (r->cancelled || running >= e->o.max_running || r->paused) {
				if (r->cancelled) {
					finish(e, r, DS_FINISH_CANCELLED);
					*pp = r->next;
					e->n_reqs--;
					free(r->out);
					free(r);
					continue;
				}
				pp = &r->next;
				continue;
			}
			running++;
			int32_t t = (int32_t)(ds_hash3(r->seed, r->prompt_hash, (uint64_t)r->n_out) %
					      (uint64_t)e->vocab);
			r->out[r->n_out++] = t;
			if (!r->t_first)
				r->t_first = now_ns();
			push_event(e, new_event(r, &t, 1));
			if (r->n_out >= r->max_tokens) {
				finish(e, r, DS_FINISH_LENGTH);
				*pp = r->next;
				e->n_reqs--;
				free(r->out);
				free(r);
				continue;
			}
			pp = &r->next;
		}
		e->st.running = running;
		e->st.waiting = e->n_reqs - running;
		e->st.kv_blocks_used = DS_MIN(running, e->o.kv_blocks);
		pthread_mutex_unlock(&e->mu);
		usleep(2000);
	}
	return NULL;
}

enum ds_status ds_engine_submit(struct ds_engine *e, const struct ds_request_params *p,
				uint64_t *id, struct ds_err *err)
{
	if (p->n_prompt <= 0 || p->max_tokens <= 0)
		return ds_errf(err, DS_ERR_INVALID, "empty prompt or max_tokens <= 0");
	if (p->n_prompt > e->max_pos)
		return ds_errf(err, DS_ERR_INVALID, "prompt longer than the context");
	if (p->deterministic && e->o.mode == DS_MODE_FAST)
		return ds_errf(err, DS_ERR_PRECONDITION, "deterministic in fast mode");
	struct freq *r = calloc(1, sizeof(*r));
	if (!r || !(r->out = malloc((size_t)p->max_tokens * sizeof(int32_t)))) {
		free(r);
		return ds_errf(err, DS_ERR_NOMEM, "out of memory");
	}
	r->prompt_hash = XXH3_64bits(p->prompt, (size_t)p->n_prompt * sizeof(int32_t));
	r->n_prompt = p->n_prompt;
	r->max_tokens = p->max_tokens;
	r->tag = p->user_tag;
	r->det = p->deterministic;
	r->lp = p->return_logprobs;
	r->t_submit = now_ns();
	pthread_mutex_lock(&e->mu);
	if (e->n_reqs - e->o.max_running >= e->o.max_queue) {
		pthread_mutex_unlock(&e->mu);
		free(r->out);
		free(r);
		return ds_errf(err, DS_ERR_FULL, "queue full (%d waiting)", e->o.max_queue);
	}
	r->id = ++e->next_id;
	r->seed = p->has_seed ? p->sampling.seed : ds_hash3(r->id, 77, 0);
	struct freq **pp = &e->reqs;
	while (*pp)
		pp = &(*pp)->next;
	*pp = r;
	e->n_reqs++;
	*id = r->id;
	pthread_mutex_unlock(&e->mu);
	return DS_OK;
}

static void set_flag(struct ds_engine *e, uint64_t id, int which, bool v)
{
	pthread_mutex_lock(&e->mu);
	for (struct freq *r = e->reqs; r; r = r->next)
		if (r->id == id) {
			if (which == 0)
				r->cancelled = true;
			else
				r->paused = v;
		}
	pthread_mutex_unlock(&e->mu);
}

void ds_engine_cancel(struct ds_engine *e, uint64_t id) { set_flag(e, id, 0, true); }
void ds_engine_pause(struct ds_engine *e, uint64_t id, bool paused) { set_flag(e, id, 1, paused); }

enum ds_status ds_engine_start(struct ds_engine *e, struct ds_err *err)
{
	if (pthread_create(&e->th, NULL, engine_main, e) != 0)
		return ds_errf(err, DS_ERR_INTERNAL, "engine: cannot start thread");
	e->running = true;
	return DS_OK;
}

void ds_engine_stop(struct ds_engine *e)
{
	if (!e->running)
		return;
	pthread_mutex_lock(&e->mu);
	e->stop = true;
	pthread_mutex_unlock(&e->mu);
	pthread_join(e->th, NULL);
	e->running = false;
}

void ds_engine_free(struct ds_engine *e)
{
	if (!e)
		return;
	ds_engine_stop(e);
	while (e->reqs) {
		struct freq *r = e->reqs;
		e->reqs = r->next;
		free(r->out);
		free(r);
	}
	while (e->head) {
		struct evq *q = e->head;
		e->head = q->next;
		ds_event_free(q->ev);
		free(q);
	}
	close(e->efd);
	pthread_mutex_destroy(&e->mu);
	free(e);
}

int ds_engine_event_fd(struct ds_engine *e) { return e->efd; }

struct ds_event *ds_engine_poll(struct ds_engine *e)
{
	pthread_mutex_lock(&e->mu);
	uint64_t v;
	ssize_t rd = read(e->efd, &v, sizeof(v));
	(void)rd;
	struct evq *q = e->head;
	struct ds_event *ev = NULL;
	if (q) {
		e->head = q->next;
		if (!e->head)
			e->tail = NULL;
		ev = q->ev;
		free(q);
	}
	pthread_mutex_unlock(&e->mu);
	return ev;
}

void ds_engine_get_stats(struct ds_engine *e, struct ds_engine_stats *out)
{
	pthread_mutex_lock(&e->mu);
	*out = e->st;
	pthread_mutex_unlock(&e->mu);
}

const struct ds_engine_opts *ds_engine_get_opts(const struct ds_engine *e) { return &e->o; }

/* ---- the backend and loader symbols main.c needs, until their branches land ---- */

static void fake_free(void *ctx) { (void)ctx; }
static const struct ds_backend_i fake_iface = {.name = "fake", .free = fake_free};

enum ds_status ds_backend_cpu_init(struct ds_backend *be, const struct ds_model *m,
				   int n_threads, struct ds_err *err)
{
	(void)n_threads;
	(void)err;
	memset(be, 0, sizeof(*be));
	be->iface = &fake_iface;
	be->model = m;
	return DS_OK;
}

enum ds_status ds_backend_cuda_init(struct ds_backend *be, const struct ds_model *m, int device,
				    struct ds_err *err)
{
	(void)be;
	(void)m;
	(void)device;
	return ds_errf(err, DS_ERR_UNSUPPORTED, "fake build: no CUDA backend");
}

enum ds_status ds_model_load(const char *path, struct ds_model **out, struct ds_err *err)
{
	(void)out;
	return ds_errf(err, DS_ERR_UNSUPPORTED, "fake build: cannot load %s", path);
}

enum ds_status ds_model_materialize(struct ds_model *m, struct ds_err *err)
{
	(void)m;
	(void)err;
	return DS_OK;
}
