/* report.h - what detserve-bench records per request, and how it is summarised: the per-request
 * JSONL, the summary JSON (schema: bench/summary.schema.json) and the one-screen table.
 * Key decision: the table is printed from the summary JSON, so the two can never disagree. */
#ifndef DS_BENCH_REPORT_H
#define DS_BENCH_REPORT_H

#include "stats.h"
#include "workload.h"

#include <stdio.h>

#include <jansson.h>

struct ds_bench_dvr {
	uint64_t verify_passes, windows, rollbacks, rolled_back_tokens, recomputed_tokens;
};

/* One request's life; times are seconds since the run started. */
struct ds_bench_rec {
	const struct ds_bench_req *req;
	double t_sched, t_sent, t_first, t_last_tok, t_end; /* t_first < 0 until a token arrives */
	int32_t *tokens;                                    /* (n_tokens) */
	float *itl_ms; /* (n_tokens - 1) gap before each token after the first; 0 within a chunk */
	int n_tokens, cap;
	bool started, done, got_final;
	int code; /* enum ds_grpc_code */
	char message[200];
	int finish; /* FinishReason */
	int prompt_tokens, completion_tokens;
	uint64_t seed;
	char fingerprint[40];
	struct ds_bench_dvr dvr;
};

/* Appends the tokens of one response chunk that arrived at time t. DS_ERR_NOMEM on failure. */
enum ds_status ds_bench_rec_add_tokens(struct ds_bench_rec *r, const int32_t *ids, size_t n,
                                       double t);
void ds_bench_rec_free(struct ds_bench_rec *r);

/* Per-request latency in ms: TTFT and E2E from t_sched; TPOT = (last - first) / (tokens - 1).
 * NAN when undefined. */
double ds_bench_rec_ttft_ms(const struct ds_bench_rec *r);
double ds_bench_rec_tpot_ms(const struct ds_bench_rec *r);
double ds_bench_rec_e2e_ms(const struct ds_bench_rec *r);

/* Writes one JSON line per request. with_tokens adds "token_ids". DS_ERR_IO on write failure. */
enum ds_status ds_report_records(FILE *f, const struct ds_bench_rec *recs, int n, bool with_tokens,
                                 struct ds_err *err);

/* Builds the summary. config is stolen (a JSON object describing the run: it is stored as
 * "config"), server likewise (ServerInfo as JSON, or null). duration_s is the run's wall time.
 * Returns NULL only on allocation failure. */
json_t *ds_report_summary(const struct ds_bench_rec *recs, int n, double duration_s, json_t *config,
                          json_t *server);

/* The one-screen text table, from a summary built by ds_report_summary. */
void ds_report_table(FILE *f, const json_t *summary);

/* A JSON number, or null for NaN/inf (JSON has no NaN). */
json_t *ds_json_num(double x);

#endif
