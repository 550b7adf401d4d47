/* threadpool.c - fork-join pool (see threadpool.h).
 *
 * Key decision: a run completes when its tasks are done, not when every worker has checked in.
 * On a loaded machine a descheduled worker would otherwise stall every one of the dozens of
 * runs in a forward pass. Tasks are claimed with a CAS on one 64-bit word holding (run
 * generation, next task index), so a worker that wakes up late can never claim a task of a run
 * other than the one whose parameters it read. That needs the publish order below: the claim
 * word moves to the new generation, CLOSED, before fn/arg/n_tasks change (release stores), and
 * a worker reads fn/arg/n_tasks (acquire loads) before the claim word. A worker that saw any new
 * parameter then also sees the new generation and its CAS fails; without the CLOSED step a
 * late worker could pair the new n_tasks with the old word, claim task n_old "of the old run",
 * run it with stale fn/arg (the rare SIGSEGV in a worker that CMocka reports as exit 255 with
 * no message) and count it into the new run's `done` (so runs returned early or hung).
 * Workers spin briefly before sleeping on a condition variable, since runs are short and
 * frequent. */
#include "threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define DS_TP_SPIN 20000
#define TP_CLOSED 0xffffffffu /* task index of a claim word being published: >= any n_tasks */

/* Test builds (tests/test_threadpool.c) define DS_THREADPOOL_TEST_DELAY to a function that
 * stalls the calling thread at random, to widen the windows between the steps below. */
#ifdef DS_THREADPOOL_TEST_DELAY
void DS_THREADPOOL_TEST_DELAY(void);
#define TP_DELAY() DS_THREADPOOL_TEST_DELAY()
#else
#define TP_DELAY() ((void)0)
#endif

struct ds_threadpool {
	int n_threads;
	pthread_t *workers; /* (n_threads - 1) */
	pthread_mutex_t mu;
	pthread_cond_t cv_start;
	pthread_cond_t cv_done;
	/* the current run: written only while `next` holds (new generation, TP_CLOSED) */
	_Atomic(ds_task_fn) fn;
	_Atomic(void *) arg;
	atomic_int n_tasks;
	_Atomic uint64_t next; /* (generation << 32) | next task index */
	atomic_int done;       /* tasks of the current run finished */
	atomic_uint generation;
	bool stop; /* under mu */
};

struct ds_tp_worker_arg {
	struct ds_threadpool *tp;
	int index;
};

/* Claims and runs tasks of run `gen` until none are left (or the run is over). */
static void tp_work(struct ds_threadpool *tp, unsigned gen, int thread)
{
	/* acquire, pairing with the release stores in ds_threadpool_run: if any of these loads
	 * sees a later run's value, the claim word read below is that run's (CLOSED or later) */
	ds_task_fn fn = atomic_load_explicit(&tp->fn, memory_order_acquire);
	void *arg = atomic_load_explicit(&tp->arg, memory_order_acquire);
	TP_DELAY();
	unsigned n = (unsigned)atomic_load_explicit(&tp->n_tasks, memory_order_acquire);
	TP_DELAY();
	uint64_t cur = atomic_load_explicit(&tp->next, memory_order_relaxed);
	for (;;) {
		if ((unsigned)(cur >> 32) != gen || (uint32_t)cur >= n)
			return;
		/* success: the word was (gen, i < n) after the loads above, so no later run had
		 * started publishing and fn/arg/n are run gen's */
		if (!atomic_compare_exchange_weak_explicit(
		        &tp->next, &cur, cur + 1, memory_order_acquire, memory_order_relaxed))
			continue;
		fn(arg, (int)(uint32_t)cur, thread);
		if ((unsigned)atomic_fetch_add_explicit(&tp->done, 1, memory_order_acq_rel) + 1 ==
		    n) {
			pthread_mutex_lock(&tp->mu);
			pthread_cond_signal(&tp->cv_done);
			pthread_mutex_unlock(&tp->mu);
			return;
		}
		cur = atomic_load_explicit(&tp->next, memory_order_relaxed);
	}
}

static void *tp_main(void *p)
{
	struct ds_tp_worker_arg *wa = p;
	struct ds_threadpool *tp = wa->tp;
	int thread = wa->index;
	free(wa);
	unsigned seen = 0;
	for (;;) {
		unsigned g = atomic_load_explicit(&tp->generation, memory_order_acquire);
		for (int i = 0; g == seen && i < DS_TP_SPIN; i++)
			g = atomic_load_explicit(&tp->generation, memory_order_acquire);
		if (g == seen) {
			pthread_mutex_lock(&tp->mu);
			while (!tp->stop && (g = atomic_load_explicit(
			                         &tp->generation, memory_order_acquire)) == seen)
				pthread_cond_wait(&tp->cv_start, &tp->mu);
			bool stop = tp->stop;
			pthread_mutex_unlock(&tp->mu);
			if (stop)
				return NULL;
		}
		seen = g;
		tp_work(tp, g, thread);
	}
}

enum ds_status ds_threadpool_init(struct ds_threadpool **out, int n_threads, struct ds_err *err)
{
	*out = NULL;
	if (n_threads < 1)
		return ds_errf(err, DS_ERR_INVALID, "threadpool: n_threads %d must be >= 1",
		               n_threads);
	struct ds_threadpool *tp = calloc(1, sizeof(*tp));
	if (!tp)
		return ds_errf(err, DS_ERR_NOMEM, "threadpool: out of memory");
	tp->n_threads = n_threads;
	tp->workers = calloc((size_t)n_threads, sizeof(*tp->workers));
	if (!tp->workers) {
		free(tp);
		return ds_errf(err, DS_ERR_NOMEM, "threadpool: out of memory");
	}
	pthread_mutex_init(&tp->mu, NULL);
	pthread_cond_init(&tp->cv_start, NULL);
	pthread_cond_init(&tp->cv_done, NULL);
	atomic_init(&tp->fn, NULL);
	atomic_init(&tp->arg, NULL);
	atomic_init(&tp->n_tasks, 0);
	atomic_init(&tp->next, 0);
	atomic_init(&tp->done, 0);
	atomic_init(&tp->generation, 0);
	for (int i = 1; i < n_threads; i++) {
		struct ds_tp_worker_arg *wa = malloc(sizeof(*wa));
		if (wa) {
			wa->tp = tp;
			wa->index = i;
		}
		int rc = wa ? pthread_create(&tp->workers[i - 1], NULL, tp_main, wa) : -1;
		if (rc != 0) {
			free(wa);
			tp->n_threads = i; /* join the ones that started */
			ds_threadpool_free(tp);
			return ds_errf(err, DS_ERR_INTERNAL, "threadpool: cannot start thread %d",
			               i);
		}
	}
	*out = tp;
	return DS_OK;
}

void ds_threadpool_free(struct ds_threadpool *tp)
{
	if (!tp)
		return;
	pthread_mutex_lock(&tp->mu);
	tp->stop = true;
	pthread_cond_broadcast(&tp->cv_start);
	pthread_mutex_unlock(&tp->mu);
	for (int i = 1; i < tp->n_threads; i++)
		pthread_join(tp->workers[i - 1], NULL);
	pthread_mutex_destroy(&tp->mu);
	pthread_cond_destroy(&tp->cv_start);
	pthread_cond_destroy(&tp->cv_done);
	free(tp->workers);
	free(tp);
}

int ds_threadpool_size(const struct ds_threadpool *tp)
{
	return tp->n_threads;
}

void ds_threadpool_run(struct ds_threadpool *tp, int n_tasks, ds_task_fn fn, void *arg)
{
	if (n_tasks <= 0)
		return;
	if (tp->n_threads == 1 || n_tasks == 1) {
		for (int t = 0; t < n_tasks; t++)
			fn(arg, t, 0);
		return;
	}
	pthread_mutex_lock(&tp->mu);
	unsigned gen = atomic_load_explicit(&tp->generation, memory_order_relaxed) + 1;
	/* close: from here on no CAS that expects an older claim word can succeed */
	atomic_store_explicit(&tp->next, (uint64_t)gen << 32 | TP_CLOSED, memory_order_relaxed);
	atomic_store_explicit(&tp->fn, fn, memory_order_release);
	atomic_store_explicit(&tp->arg, arg, memory_order_release);
	atomic_store_explicit(&tp->n_tasks, n_tasks, memory_order_release);
	atomic_store_explicit(&tp->done, 0, memory_order_relaxed);
	TP_DELAY();
	/* open: a CAS that reads this word sees the parameters above */
	atomic_store_explicit(&tp->next, (uint64_t)gen << 32, memory_order_release);
	atomic_store_explicit(&tp->generation, gen, memory_order_release);
	pthread_cond_broadcast(&tp->cv_start);
	pthread_mutex_unlock(&tp->mu);

	tp_work(tp, gen, 0);

	/* wait for the tasks other threads claimed: spin first, then sleep */
	for (int i = 0; i < DS_TP_SPIN; i++)
		if (atomic_load_explicit(&tp->done, memory_order_acquire) == n_tasks)
			return;
	pthread_mutex_lock(&tp->mu);
	while (atomic_load_explicit(&tp->done, memory_order_acquire) != n_tasks)
		pthread_cond_wait(&tp->cv_done, &tp->mu);
	pthread_mutex_unlock(&tp->mu);
}
