/* report.c - per-request JSONL records, the summary JSON and the text table of detserve-bench.
 * Latency percentiles are over successful (OK) requests only and split deterministic / not;
 * errors are counted by gRPC status name. */
#include "report.h"

#include "grpc_wire.h"
#include "detserve_client.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>

#include <xxhash.h>

json_t *ds_json_num(double x)
{
	return isfinite(x) ? json_real(x) : json_null();
}

enum ds_status ds_bench_rec_add_tokens(struct ds_bench_rec *r, const int32_t *ids, size_t n,
                                       double t)
{
	if (n == 0)
		return DS_OK;
	if ((size_t)r->n_tokens + n > (size_t)r->cap) {
		size_t cap = r->cap ? (size_t)r->cap : 32;
		while (cap < (size_t)r->n_tokens + n)
			cap *= 2;
		int32_t *tk = realloc(r->tokens, cap * sizeof(*tk));
		if (!tk)
			return DS_ERR_NOMEM;
		r->tokens = tk;
		float *g = realloc(r->itl_ms, cap * sizeof(*g));
		if (!g)
			return DS_ERR_NOMEM;
		r->itl_ms = g;
		r->cap = (int)cap;
	}
	for (size_t i = 0; i < n; i++) {
		if (r->n_tokens == 0) {
			r->t_first = t;
		} else {
			/* the gap belongs to the first token of the chunk; the rest came with it */
			r->itl_ms[r->n_tokens - 1] =
			    i == 0 ? (float)((t - r->t_last_tok) * 1e3) : 0.0f;
		}
		r->tokens[r->n_tokens++] = ids[i];
	}
	r->t_last_tok = t;
	return DS_OK;
}

void ds_bench_rec_free(struct ds_bench_rec *r)
{
	free(r->tokens);
	free(r->itl_ms);
	r->tokens = NULL;
	r->itl_ms = NULL;
	r->n_tokens = r->cap = 0;
}

double ds_bench_rec_ttft_ms(const struct ds_bench_rec *r)
{
	return r->n_tokens > 0 ? (r->t_first - r->t_sched) * 1e3 : NAN;
}

double ds_bench_rec_tpot_ms(const struct ds_bench_rec *r)
{
	return r->n_tokens > 1 ? (r->t_last_tok - r->t_first) * 1e3 / (r->n_tokens - 1) : NAN;
}

double ds_bench_rec_e2e_ms(const struct ds_bench_rec *r)
{
	return r->done ? (r->t_end - r->t_sched) * 1e3 : NAN;
}

/* ---- records ---- */

static json_t *dvr_json(const struct ds_bench_dvr *d)
{
	return json_pack("{s:I,s:I,s:I,s:I,s:I}", "verify_passes", (json_int_t)d->verify_passes,
	                 "windows", (json_int_t)d->windows, "rollbacks", (json_int_t)d->rollbacks,
	                 "rolled_back_tokens", (json_int_t)d->rolled_back_tokens,
	                 "recomputed_tokens", (json_int_t)d->recomputed_tokens);
}

static json_t *record_json(const struct ds_bench_rec *r, int idx, bool with_tokens)
{
	const struct ds_bench_req *q = r->req;
	char hash[17];
	snprintf(hash, sizeof(hash), "%016llx",
	         (unsigned long long)XXH64(r->tokens, sizeof(int32_t) * (size_t)r->n_tokens, 0));
	json_t *itl = json_array();
	for (int i = 0; i + 1 < r->n_tokens; i++)
		json_array_append_new(itl, json_real(round(r->itl_ms[i] * 1000.0) / 1000.0));
	json_t *j = json_pack(
	    "{s:i,s:s,s:b,s:o,s:o,s:i,s:i,s:s,s:s,s:o,s:o,s:o,s:i,s:o,s:s,s:s,s:I,s:s}", "i", idx,
	    "tag", q->tag, "deterministic", q->deterministic, "arrival_s", ds_json_num(r->t_sched),
	    "sent_s", ds_json_num(r->t_sent), "prompt_tokens",
	    q->prompt ? q->n_prompt : r->prompt_tokens, "max_tokens", q->max_tokens, "status",
	    ds_grpc_code_name(r->code), "message", r->message, "ttft_ms",
	    ds_json_num(ds_bench_rec_ttft_ms(r)), "tpot_ms", ds_json_num(ds_bench_rec_tpot_ms(r)),
	    "e2e_ms", ds_json_num(ds_bench_rec_e2e_ms(r)), "tokens", r->n_tokens, "itl_ms", itl,
	    "finish", ds_client_finish_name(r->finish), "fingerprint", r->fingerprint, "seed",
	    (json_int_t)(r->seed & 0x7fffffffffffffffull), "output_hash", hash);
	if (!j)
		return NULL;
	json_object_set_new(j, "dvr", dvr_json(&r->dvr));
	if (with_tokens) {
		json_t *a = json_array();
		for (int i = 0; i < r->n_tokens; i++)
			json_array_append_new(a, json_integer(r->tokens[i]));
		json_object_set_new(j, "token_ids", a);
	}
	return j;
}

enum ds_status ds_report_records(FILE *f, const struct ds_bench_rec *recs, int n, bool with_tokens,
                                 struct ds_err *err)
{
	for (int i = 0; i < n; i++) {
		json_t *j = record_json(&recs[i], i, with_tokens);
		if (!j)
			return ds_errf(err, DS_ERR_NOMEM, "records: no memory");
		int rc = json_dumpf(j, f, JSON_COMPACT | JSON_REAL_PRECISION(10));
		json_decref(j);
		if (rc != 0 || fputc('\n', f) == EOF)
			return ds_errf(err, DS_ERR_IO, "records: write failed");
	}
	return fflush(f) == 0 ? DS_OK : ds_errf(err, DS_ERR_IO, "records: write failed");
}

/* ---- summary ---- */

static json_t *dist_json(struct ds_samples *s)
{
	struct ds_dist d;
	ds_samples_dist(s, &d);
	return json_pack("{s:I,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "n", (json_int_t)d.n, "mean",
	                 ds_json_num(d.mean), "min", ds_json_num(d.min), "max", ds_json_num(d.max),
	                 "p50", ds_json_num(d.p50), "p90", ds_json_num(d.p90), "p99",
	                 ds_json_num(d.p99), "p99.9", ds_json_num(d.p999));
}

/* class: 0 = non-deterministic, 1 = deterministic, 2 = all */
static json_t *latency_json(const struct ds_bench_rec *recs, int n, int cls)
{
	struct ds_samples ttft, tpot, e2e, itl;
	ds_samples_init(&ttft);
	ds_samples_init(&tpot);
	ds_samples_init(&e2e);
	ds_samples_init(&itl);
	int nreq = 0;
	for (int i = 0; i < n; i++) {
		const struct ds_bench_rec *r = &recs[i];
		if (!r->done || r->code != 0 || (cls < 2 && r->req->deterministic != (cls == 1)))
			continue;
		nreq++;
		double x;
		if (isfinite(x = ds_bench_rec_ttft_ms(r)))
			ds_samples_add(&ttft, x);
		if (isfinite(x = ds_bench_rec_tpot_ms(r)))
			ds_samples_add(&tpot, x);
		if (isfinite(x = ds_bench_rec_e2e_ms(r)))
			ds_samples_add(&e2e, x);
		for (int k = 0; k + 1 < r->n_tokens; k++)
			ds_samples_add(&itl, r->itl_ms[k]);
	}
	json_t *j = json_pack("{s:i,s:o,s:o,s:o,s:o}", "requests", nreq, "ttft_ms",
	                      dist_json(&ttft), "tpot_ms", dist_json(&tpot), "e2e_ms",
	                      dist_json(&e2e), "itl_ms", dist_json(&itl));
	ds_samples_free(&ttft);
	ds_samples_free(&tpot);
	ds_samples_free(&e2e);
	ds_samples_free(&itl);
	return j;
}

static double ratio(double a, double b)
{
	return b > 0 ? a / b : NAN;
}

json_t *ds_report_summary(const struct ds_bench_rec *recs, int n, double duration_s, json_t *config,
                          json_t *server)
{
	int ok = 0, ok_det = 0, errors[DS_GRPC_N_CODES] = {0}, n_det = 0;
	uint64_t tok = 0, tok_det = 0;
	struct ds_bench_dvr d = {0};
	for (int i = 0; i < n; i++) {
		const struct ds_bench_rec *r = &recs[i];
		n_det += r->req->deterministic;
		if (r->code != 0) {
			errors[r->code >= 0 && r->code < DS_GRPC_N_CODES ? r->code
			                                                 : DS_GRPC_UNKNOWN]++;
			continue;
		}
		ok++;
		tok += (uint64_t)r->n_tokens;
		if (r->req->deterministic) {
			ok_det++;
			tok_det += (uint64_t)r->n_tokens;
			d.verify_passes += r->dvr.verify_passes;
			d.windows += r->dvr.windows;
			d.rollbacks += r->dvr.rollbacks;
			d.rolled_back_tokens += r->dvr.rolled_back_tokens;
			d.recomputed_tokens += r->dvr.recomputed_tokens;
		}
	}
	json_t *errs = json_object();
	for (int c = 1; c < DS_GRPC_N_CODES; c++)
		if (errors[c])
			json_object_set_new(errs, ds_grpc_code_name(c), json_integer(errors[c]));
	json_t *dvr = json_pack(
	    "{s:i,s:I,s:I,s:I,s:I,s:I,s:I,s:o,s:o,s:o,s:o}", "requests", ok_det, "tokens",
	    (json_int_t)tok_det, "verify_passes", (json_int_t)d.verify_passes, "windows",
	    (json_int_t)d.windows, "rollbacks", (json_int_t)d.rollbacks, "rolled_back_tokens",
	    (json_int_t)d.rolled_back_tokens, "recomputed_tokens", (json_int_t)d.recomputed_tokens,
	    "rollback_rate_per_window", ds_json_num(ratio((double)d.rollbacks, (double)d.windows)),
	    "rollbacks_per_1k_tokens",
	    ds_json_num(ratio(1000.0 * (double)d.rollbacks, (double)tok_det)), "recompute_ratio",
	    ds_json_num(ratio((double)d.recomputed_tokens, (double)tok_det)), "rolled_back_ratio",
	    ds_json_num(ratio((double)d.rolled_back_tokens, (double)tok_det)));
	json_t *thr =
	    json_pack("{s:o,s:o,s:o,s:o}", "req_per_s", ds_json_num(ratio(ok, duration_s)),
	              "tok_per_s", ds_json_num(ratio((double)tok, duration_s)), "det_tok_per_s",
	              ds_json_num(ratio((double)tok_det, duration_s)), "nondet_tok_per_s",
	              ds_json_num(ratio((double)(tok - tok_det), duration_s)));
	json_t *lat = json_pack("{s:o,s:o,s:o}", "det", latency_json(recs, n, 1), "nondet",
	                        latency_json(recs, n, 0), "all", latency_json(recs, n, 2));
	json_t *reqs = json_pack("{s:i,s:i,s:i,s:i,s:I}", "total", n, "deterministic", n_det, "ok",
	                         ok, "errors", n - ok, "tokens", (json_int_t)tok);
	return json_pack("{s:s,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "schema",
	                 "detserve-bench-summary/1", "config", config ? config : json_object(),
	                 "server", server ? server : json_null(), "duration_s",
	                 ds_json_num(duration_s), "requests", reqs, "errors_by_status", errs,
	                 "throughput", thr, "latency", lat, "dvr", dvr);
}

/* ---- table ---- */

/* The number at root[k1][k2]..., NULL-terminated keys; NAN when absent. */
static double num(const json_t *root, ...)
{
	va_list ap;
	const json_t *j = root;
	va_start(ap, root);
	for (const char *k = va_arg(ap, const char *); k && j; k = va_arg(ap, const char *))
		j = json_object_get(j, k);
	va_end(ap);
	return json_is_number(j) ? json_number_value(j) : NAN;
}

static const char *str(const json_t *obj, const char *key)
{
	const char *v = json_string_value(json_object_get(obj, key));
	return v ? v : "?";
}

static void cell(FILE *f, double x)
{
	if (isfinite(x))
		fprintf(f, " %8.1f", x);
	else
		fprintf(f, " %8s", "-");
}

void ds_report_table(FILE *f, const json_t *s)
{
	const json_t *srv = json_object_get(s, "server");
	const json_t *cfg = json_object_get(s, "config");
	fprintf(f, "detserve-bench: %s  mode=%s W=%d G=%d backend=%s model=%s\n", str(cfg, "label"),
	        str(srv, "mode"), (int)num(srv, "window", NULL), (int)num(srv, "group", NULL),
	        str(srv, "backend"), str(json_object_get(srv, "model"), "source"));
	fprintf(f,
	        "requests %d (det %d)  ok %d  errors %d  in %.2f s:  %.2f req/s  %.1f tok/s (det "
	        "%.1f, non-det %.1f)\n",
	        (int)num(s, "requests", "total", NULL),
	        (int)num(s, "requests", "deterministic", NULL), (int)num(s, "requests", "ok", NULL),
	        (int)num(s, "requests", "errors", NULL), num(s, "duration_s", NULL),
	        num(s, "throughput", "req_per_s", NULL), num(s, "throughput", "tok_per_s", NULL),
	        num(s, "throughput", "det_tok_per_s", NULL),
	        num(s, "throughput", "nondet_tok_per_s", NULL));
	fprintf(f, "%-8s %5s |%-35s |%-35s |%-26s\n", "ms", "n",
	        "  TTFT p50      p90      p99    p99.9", "  TPOT p50      p90      p99    p99.9",
	        "   E2E p50      p99    p99.9");
	static const char *const cls[] = {"det", "nondet", "all"};
	static const char *const lbl[] = {"det", "non-det", "all"};
	static const char *const q4[] = {"p50", "p90", "p99", "p99.9"};
	static const char *const q3[] = {"p50", "p99", "p99.9"};
	for (int c = 0; c < 3; c++) {
		const json_t *l = json_object_get(json_object_get(s, "latency"), cls[c]);
		fprintf(f, "%-8s %5d |", lbl[c], (int)num(l, "requests", NULL));
		for (int i = 0; i < 4; i++)
			cell(f, num(l, "ttft_ms", q4[i], NULL));
		fprintf(f, " |");
		for (int i = 0; i < 4; i++)
			cell(f, num(l, "tpot_ms", q4[i], NULL));
		fprintf(f, " |");
		for (int i = 0; i < 3; i++)
			cell(f, num(l, "e2e_ms", q3[i], NULL));
		fprintf(f, "\n");
	}
	const json_t *d = json_object_get(s, "dvr");
	if (num(d, "requests", NULL) > 0)
		fprintf(
		    f,
		    "DVR: %d det requests, %d tokens; windows %d, rollbacks %d (%.2f%% of windows, "
		    "%.2f per 1k tokens); recompute ratio %.3f; rolled back %.2f%% of tokens\n",
		    (int)num(d, "requests", NULL), (int)num(d, "tokens", NULL),
		    (int)num(d, "windows", NULL), (int)num(d, "rollbacks", NULL),
		    100.0 * num(d, "rollback_rate_per_window", NULL),
		    num(d, "rollbacks_per_1k_tokens", NULL), num(d, "recompute_ratio", NULL),
		    100.0 * num(d, "rolled_back_ratio", NULL));
	else
		fprintf(f, "DVR: no successful deterministic requests\n");
	const json_t *errs = json_object_get(s, "errors_by_status");
	if (json_object_size(errs)) {
		const char *k;
		json_t *v;
		fprintf(f, "errors:");
		json_object_foreach((json_t *)errs, k, v)
		    fprintf(f, " %s=%d", k, (int)json_integer_value(v));
		fprintf(f, "\n");
	}
}
