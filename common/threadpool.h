/* threadpool.h - a small fork-join pthread pool for the CPU backend.
 *
 * ds_threadpool_run(tp, n_tasks, fn, arg) calls fn(arg, task, thread) once for every task in
 * [0, n_tasks) and returns when all have finished. The calling thread works too, so a pool of
 * n threads starts n-1 workers. Tasks are handed out dynamically; callers that need
 * reproducible results must make each task's arithmetic independent of which thread runs it
 * (the reference path does; `thread` is only for picking per-thread scratch). Not reentrant:
 * one run at a time per pool, and fn must not call back into the same pool. */
#ifndef DS_THREADPOOL_H
#define DS_THREADPOOL_H

#include "ds_common.h"

struct ds_threadpool;

typedef void (*ds_task_fn)(void *arg, int task, int thread);

/* Starts n_threads-1 workers (n_threads >= 1). DS_ERR_NOMEM / DS_ERR_INTERNAL on failure. */
enum ds_status ds_threadpool_init(struct ds_threadpool **out, int n_threads, struct ds_err *err);

/* Joins the workers. NULL is a no-op. */
void ds_threadpool_free(struct ds_threadpool *tp);

/* Number of threads that run tasks, the caller included. */
int ds_threadpool_size(const struct ds_threadpool *tp);

/* Runs every task and waits for all of them. n_tasks <= 0 returns at once. */
void ds_threadpool_run(struct ds_threadpool *tp, int n_tasks, ds_task_fn fn, void *arg);

#endif
