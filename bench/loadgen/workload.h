/* workload.h - the request stream of detserve-bench: Poisson arrivals with a traffic mix, or a
 * JSONL trace. Key decision: the whole stream is generated up front from one seed (prompts,
 * lengths, deterministic flags, sampling seeds, arrival times), so the same flags give the same
 * requests, and generation costs nothing while the clock runs. */
#ifndef DS_BENCH_WORKLOAD_H
#define DS_BENCH_WORKLOAD_H

#include "ds_common.h"

/* Small seeded generator (splitmix64). */
struct ds_bench_rng {
	uint64_t s;
};
uint64_t ds_bench_rng_next(struct ds_bench_rng *r);
/* Uniform in [0, 1). */
double ds_bench_rng_uniform(struct ds_bench_rng *r);

enum ds_len_kind { DS_LEN_FIXED = 0, DS_LEN_UNIFORM };

struct ds_len_dist {
	enum ds_len_kind kind;
	int a, b; /* fixed: a; uniform: [a, b] inclusive */
};

/* Parses "N", "fixed:N" or "uniform:A:B" (1 <= A <= B). DS_ERR_INVALID with a message naming what.
 */
enum ds_status ds_len_dist_parse(const char *what, const char *s, struct ds_len_dist *out,
                                 struct ds_err *err);
int ds_len_dist_draw(const struct ds_len_dist *d, struct ds_bench_rng *r);
/* "fixed:N" / "uniform:A:B" into buf. */
void ds_len_dist_format(const struct ds_len_dist *d, char *buf, size_t cap);

struct ds_bench_req {
	double arrival_s; /* offset from the start (open loop); ignored in closed loop */
	int32_t *prompt;  /* (n_prompt) token ids, or NULL when prompt_text is set */
	int n_prompt;
	char *prompt_text;
	int max_tokens;
	bool deterministic;
	uint64_t seed;
	float temperature;
	int top_k;
	float top_p;  /* 1 = off */
	char tag[32]; /* free label from the trace, echoed in the records */
};

struct ds_workload_opts {
	uint64_t seed;
	double rate;         /* requests/s; <= 0: all arrive at t = 0 */
	int n_requests;      /* cap on the number of requests (> 0) */
	double duration_s;   /* cap on the last arrival time; <= 0: none */
	double det_fraction; /* in [0, 1] */
	struct ds_len_dist prompt_len, output_len;
	int vocab;               /* prompt ids are drawn from [0, vocab) */
	const char *prompt_text; /* when set, every request uses this text prompt */
	float temperature;
	int top_k;
	float top_p;
};

void ds_workload_opts_default(struct ds_workload_opts *o);

/* Generates the Poisson stream. Errors: DS_ERR_INVALID (bad opts), DS_ERR_NOMEM. */
enum ds_status ds_workload_poisson(const struct ds_workload_opts *o, struct ds_bench_req **out,
                                   int *n, struct ds_err *err);
/* Reads a JSONL trace: one object per line with "arrival_s" (number >= 0, non-decreasing not
 * required), a prompt as "prompt_ids" (array of ints), "prompt" (text) or "prompt_len" (random
 * ids), and optional "max_tokens", "deterministic", "seed", "temperature", "top_k", "top_p",
 * "tag". Missing fields come from o (max_tokens from o->output_len, deterministic false). The
 * result is sorted by arrival. Errors name the file and line: DS_ERR_IO, DS_ERR_FORMAT,
 * DS_ERR_NOMEM. */
enum ds_status ds_workload_trace(const char *path, const struct ds_workload_opts *o,
                                 struct ds_bench_req **out, int *n, struct ds_err *err);
void ds_workload_free(struct ds_bench_req *reqs, int n);

#endif
