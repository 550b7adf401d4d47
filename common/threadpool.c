/* threadpool.c - fork-join pool (see threadpool.h).
 *
 * Workers sleep on a condition variable between runs and pick tasks with an atomic counter.
 * A run spins briefly before sleeping: a forward pass issues dozens of short runs per layer,
 * and a futex wake-up per run would dominate small decode steps. */
#include "threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define DS_TP_SPIN 20000

struct ds_threadpool {
	int n_threads;
	pthread_t *workers; /* (n_threads - 1) */
	pthread_mutex_t mu;
	pthread_cond_t cv_start;
	pthread_cond_t cv_done;
	/* the current run; written under mu before generation is bumped */
	ds_task_fn fn;
	void *arg;
	int n_tasks;
	atomic_int next;    /* next task to hand out */
	atomic_int pending; /* workers still inside the current run */
	atomic_uint generation;
	bool stop;
};

struct ds_tp_worker_arg {
	struct ds_threadpool *tp;
	int index;
};

static void tp_work(struct ds_threadpool *tp, int thread)
{
	for (;;) {
		int t = atomic_fetch_add_explicit(&tp->next, 1, memory_order_relaxed);
		if (t >= tp->n_tasks)
			break;
		tp->fn(tp->arg, t, thread);
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
		tp_work(tp, thread);
		if (atomic_fetch_sub_explicit(&tp->pending, 1, memory_order_acq_rel) == 1) {
			pthread_mutex_lock(&tp->mu);
			pthread_cond_signal(&tp->cv_done);
			pthread_mutex_unlock(&tp->mu);
		}
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
	atomic_init(&tp->next, 0);
	atomic_init(&tp->pending, 0);
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
	int n_workers = tp->n_threads - 1;
	pthread_mutex_lock(&tp->mu);
	tp->fn = fn;
	tp->arg = arg;
	tp->n_tasks = n_tasks;
	atomic_store_explicit(&tp->next, 0, memory_order_relaxed);
	atomic_store_explicit(&tp->pending, n_workers, memory_order_relaxed);
	atomic_fetch_add_explicit(&tp->generation, 1, memory_order_release);
	pthread_cond_broadcast(&tp->cv_start);
	pthread_mutex_unlock(&tp->mu);

	tp_work(tp, 0);

	/* wait for the workers: spin first, then sleep */
	for (int i = 0; i < DS_TP_SPIN; i++)
		if (atomic_load_explicit(&tp->pending, memory_order_acquire) == 0)
			return;
	pthread_mutex_lock(&tp->mu);
	while (atomic_load_explicit(&tp->pending, memory_order_acquire) != 0)
		pthread_cond_wait(&tp->cv_done, &tp->mu);
	pthread_mutex_unlock(&tp->mu);
}
