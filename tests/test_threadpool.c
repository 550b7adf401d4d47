/* test_threadpool.c - the fork-join pool under stress: every task of every run runs exactly
 * once, with the function and argument of its own run, and never after the run returned.
 *
 * Key decision: the runs alternate between two task functions and between few and many tasks,
 * and every run's argument stays allocated until the end. A worker that wakes up late and mixes
 * the parameters of two runs (the race behind the rare `test_engine` exit 255: a SIGSEGV in a
 * pool worker, which CMocka turns into exit(-1) with no message) then shows up as a counted
 * error, an out-of-range task index or a task run twice, instead of a crash of the test. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "threadpool.h"
#include "rng.h"

#ifdef DS_THREADPOOL_TEST_DELAY
/* The delay build (test 'threadpool_delay') compiles common/threadpool.c with this hook at the
 * points where a late worker meets a run being published: yield the core now and then, sleep
 * briefly more rarely. The one counter is test-only state. */
void DS_THREADPOOL_TEST_DELAY(void);
void DS_THREADPOOL_TEST_DELAY(void)
{
	static atomic_uint_fast64_t ctr;
	uint64_t h = ds_hash3(0x7470ull, (uint64_t)pthread_self(), atomic_fetch_add(&ctr, 1));
	if (h % 4 == 0)
		sched_yield();
	else if (h % 64 == 1)
		nanosleep(&(struct timespec){.tv_nsec = 20000}, NULL);
}
#endif

#define MAX_TASKS 64

struct stress {
	atomic_int bad_index;  /* task index outside its run */
	atomic_int bad_fn;     /* a run's argument reached the other run's function */
	atomic_int bad_thread; /* thread index outside [0, n_threads) */
	int n_threads;
};

struct run_arg {
	struct stress *s;
	int kind; /* 0: task_a, 1: task_b */
	int n;
	atomic_int hits[MAX_TASKS];
	atomic_int finished;
};

static void task_common(struct run_arg *a, int kind, int task, int thread)
{
	if (a->kind != kind)
		atomic_fetch_add(&a->s->bad_fn, 1);
	if (thread < 0 || thread >= a->s->n_threads)
		atomic_fetch_add(&a->s->bad_thread, 1);
	if (task < 0 || task >= a->n) {
		atomic_fetch_add(&a->s->bad_index, 1);
		return;
	}
	atomic_fetch_add(&a->hits[task], 1);
	atomic_fetch_add(&a->finished, 1);
}

static void task_a(void *arg, int task, int thread)
{
	task_common(arg, 0, task, thread);
}

static void task_b(void *arg, int task, int thread)
{
	task_common(arg, 1, task, thread);
}

/* A run that never returns (its done count overshot n_tasks, so the caller sleeps forever)
 * fails with a message instead of a silent test timeout. */
struct watchdog {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done;
	int seconds, n_threads;
	atomic_int run; /* the run in progress */
	pthread_t thread;
};

static void *watchdog_main(void *p)
{
	struct watchdog *w = p;
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += w->seconds;
	pthread_mutex_lock(&w->mu);
	int rc = 0;
	while (!w->done && rc == 0)
		rc = pthread_cond_timedwait(&w->cv, &w->mu, &until);
	bool done = w->done;
	pthread_mutex_unlock(&w->mu);
	if (!done) {
		fprintf(stderr,
		        "threadpool: %d threads, run %d did not return within %d s (a task counted "
		        "twice, or a lost wake-up)\n",
		        w->n_threads, atomic_load(&w->run), w->seconds);
		abort();
	}
	return NULL;
}

static void watchdog_start(struct watchdog *w, int seconds, int n_threads)
{
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	w->done = false;
	w->seconds = seconds;
	w->n_threads = n_threads;
	atomic_init(&w->run, -1);
	assert_int_equal(pthread_create(&w->thread, NULL, watchdog_main, w), 0);
}

static void watchdog_stop(struct watchdog *w)
{
	pthread_mutex_lock(&w->mu);
	w->done = true;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->thread, NULL);
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
}

static int env_int(const char *name, int dflt)
{
	const char *v = getenv(name);
	return v && *v ? atoi(v) : dflt;
}

/* n tasks of run r: mostly 2 (the caller often finishes both before a worker wakes, leaving
 * that worker late), then a larger run, so a late worker that read the new task count next to
 * the old claim word would find an unclaimed-looking index */
static int run_tasks(int r)
{
	static const int pattern[] = {2, 2, 3, 2, MAX_TASKS, 2, 17, 2, 5, 33};
	return pattern[r % (int)DS_ARRAY_LEN(pattern)];
}

static void stress(int n_threads, int n_runs)
{
	struct stress s = {.n_threads = n_threads};
	atomic_init(&s.bad_index, 0);
	atomic_init(&s.bad_fn, 0);
	atomic_init(&s.bad_thread, 0);
	struct run_arg *runs = calloc((size_t)n_runs, sizeof(*runs));
	assert_non_null(runs);
	struct ds_threadpool *tp;
	struct ds_err err;
	assert_int_equal(ds_threadpool_init(&tp, n_threads, &err), DS_OK);
	struct watchdog w;
	watchdog_start(&w, 10, n_threads);
	for (int r = 0; r < n_runs; r++) {
		struct run_arg *a = &runs[r];
		atomic_store(&w.run, r);
		a->s = &s;
		a->kind = r & 1;
		a->n = run_tasks(r);
		for (int i = 0; i < MAX_TASKS; i++)
			atomic_init(&a->hits[i], 0);
		atomic_init(&a->finished, 0);
		ds_threadpool_run(tp, a->n, a->kind ? task_b : task_a, a);
		/* complete on return: every task ran and finished */
		if (atomic_load(&a->finished) != a->n)
			fail_msg("%d threads, run %d: %d of %d tasks finished at return", n_threads,
			         r, atomic_load(&a->finished), a->n);
	}
	ds_threadpool_free(tp); /* joins: nothing runs after this */
	watchdog_stop(&w);
	for (int r = 0; r < n_runs; r++)
		for (int i = 0; i < MAX_TASKS; i++) {
			int h = atomic_load(&runs[r].hits[i]);
			if (h != (i < runs[r].n ? 1 : 0))
				fail_msg("%d threads, run %d (%d tasks): task %d ran %d times",
				         n_threads, r, runs[r].n, i, h);
		}
	assert_int_equal(atomic_load(&s.bad_index), 0);
	assert_int_equal(atomic_load(&s.bad_fn), 0);
	assert_int_equal(atomic_load(&s.bad_thread), 0);
	free(runs);
}

static void test_pool_stress(void **state)
{
	(void)state;
	int n_runs = env_int("DS_TP_RUNS", 20000);
	for (int nt = 2; nt <= 4; nt++)
		stress(nt, n_runs);
}

/* many short-lived pools: free right after a run, while workers may still be waking up */
static void test_pool_init_run_free(void **state)
{
	(void)state;
	struct stress s = {.n_threads = 3};
	atomic_init(&s.bad_index, 0);
	atomic_init(&s.bad_fn, 0);
	atomic_init(&s.bad_thread, 0);
	for (int i = 0; i < env_int("DS_TP_POOLS", 200); i++) {
		struct ds_threadpool *tp;
		struct ds_err err;
		assert_int_equal(ds_threadpool_init(&tp, 3, &err), DS_OK);
		struct run_arg a = {.s = &s, .kind = 0, .n = 1 + i % 8};
		for (int k = 0; k < MAX_TASKS; k++)
			atomic_init(&a.hits[k], 0);
		atomic_init(&a.finished, 0);
		if (i % 3)
			ds_threadpool_run(tp, a.n, task_a, &a);
		ds_threadpool_free(tp);
		assert_int_equal(atomic_load(&a.finished), i % 3 ? a.n : 0);
	}
	assert_int_equal(atomic_load(&s.bad_index), 0);
	assert_int_equal(atomic_load(&s.bad_fn), 0);
	assert_int_equal(atomic_load(&s.bad_thread), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_pool_stress),
	    cmocka_unit_test(test_pool_init_run_free),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
