/* offline.c - bench_offline: the price of determinism, offline. N seeded requests run to
 * completion on one engine per configuration: fast, dvr with 0/10/50/100% deterministic
 * requests, and invariant (everything on the reference path). For each it prints generated
 * tokens per second and the ratio to the fast run measured in the same process, plus the
 * rollback rate per window and per 1000 deterministic tokens and the recompute ratio (reference
 * rows spent on verification and re-prefill per committed deterministic token).
 *
 * The box is shared and noisy: compare ratios, not absolute numbers; --repeat R runs the
 * configurations R times, interleaved, and keeps each one's fastest run. Besides wall time it
 * measures process CPU time, which other tenants of a shared box disturb far less; with
 * --threads 1 (no spinning workers) tokens per CPU-second is the steadiest measure of cost. */
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cli_common.h"
#include "engine.h"
#include "stats.h"

struct cfg {
	const char *name;
	enum ds_mode mode;
	int det_pct;
};

struct result {
	double secs, tok_s, cpu_secs, tok_cpu_s;
	float margin_thr, margin_delta; /* early-verify threshold in use, calibration delta */
	uint64_t tokens, det_tokens, windows, rollbacks, rolled_back, recomputed, preempt;
	uint64_t ref_calls, fast_calls, steps, verify_passes;
	uint64_t ref_steps, ref_why[4]; /* REF steps; by reason: window, early, catch-up, cost */
	/* scheduling latency in engine steps, by class ([0] non-deterministic, [1] deterministic):
	 * the step that brought a request's first token, and its last (NaN: none) */
	struct ds_dist first[2], done[2];
};

/* Fills res's step statistics from per-request steps (first[i], done[i]; det[i] the class). */
static enum ds_status step_stats(const int *first, const int *done, const bool *det, int n,
                                 struct result *res, struct ds_err *err)
{
	enum ds_status rv = DS_OK;
	for (int k = 0; k < 2 && rv == DS_OK; k++) {
		struct ds_samples a, b;
		ds_samples_init(&a);
		ds_samples_init(&b);
		for (int i = 0; i < n && rv == DS_OK; i++)
			if (det[i] == (k == 1) && (rv = ds_samples_add(&a, first[i])) == DS_OK)
				rv = ds_samples_add(&b, done[i]);
		ds_samples_dist(&a, &res->first[k]);
		ds_samples_dist(&b, &res->done[k]);
		ds_samples_free(&a);
		ds_samples_free(&b);
	}
	return rv == DS_OK ? DS_OK : ds_errf(err, rv, "bench: out of memory");
}

/* A statistic for the table and the JSON: -1 for a class with no requests (NaN). */
static double stat_or_none(double x)
{
	return isnan(x) ? -1.0 : x;
}

struct bench_opts {
	int n_req, prompt_max, max_tokens, threads, window, group, kv_blocks;
	float temperature, margin;
	double inject;
	uint64_t seed;
	enum ds_step_policy policy;
	enum ds_admit_policy admit;
	double ref_bias; /* ref_step_bias; < 0: the engine's default */
	int max_step_tokens, max_running; /* 0: the engine's defaults */
};

static enum ds_status run_one(const struct ds_model *m, const struct bench_opts *bo,
                              const struct cfg *c, struct result *res, struct ds_err *err)
{
	struct ds_backend be;
	struct ds_engine *e = NULL;
	enum ds_status rv = ds_backend_cpu_init(&be, m, bo->threads, err);
	if (rv != DS_OK)
		return rv;
	struct ds_engine_opts o;
	ds_engine_opts_default(&o);
	o.mode = c->mode;
	o.window = bo->window;
	o.group = bo->group;
	o.inject_mismatch = bo->inject;
	o.margin_threshold = bo->margin;
	o.kv_blocks = bo->kv_blocks;
	o.step_policy = bo->policy;
	o.admit_policy = bo->admit;
	if (bo->ref_bias >= 0.0)
		o.ref_step_bias = bo->ref_bias;
	if (bo->max_step_tokens > 0)
		o.max_step_tokens = bo->max_step_tokens;
	if (bo->max_running > 0)
		o.max_running = bo->max_running;
	int *first = NULL, *done = NULL;
	bool *is_det = NULL;
	if ((rv = ds_engine_init(&e, &be, &o, err)) != DS_OK)
		goto out;
	uint64_t h = bo->seed;
	int vocab = m->cfg.vocab_size;
	int32_t *prompt = malloc((size_t)bo->prompt_max * sizeof(int32_t));
	first = malloc((size_t)bo->n_req * sizeof(int));
	done = malloc((size_t)bo->n_req * sizeof(int));
	is_det = calloc((size_t)bo->n_req, sizeof(bool));
	if (!prompt || !first || !done || !is_det) {
		free(prompt);
		rv = ds_errf(err, DS_ERR_NOMEM, "bench: out of memory");
		goto out;
	}
	uint64_t t0 = 0;
	for (int i = 0; i < bo->n_req; i++) {
		int n = bo->prompt_max / 2 +
		        (int)((h = ds_mix64(h)) % (uint64_t)(bo->prompt_max / 2 + 1));
		n = DS_MAX(n, 1);
		for (int k = 0; k < n; k++)
			prompt[k] = (int32_t)((h = ds_mix64(h)) % (uint64_t)vocab);
		/* the same requests in every configuration; only who is deterministic changes */
		bool det = c->mode != DS_MODE_FAST &&
		           (int)(ds_mix64(bo->seed ^ (uint64_t)i) % 100) < c->det_pct;
		is_det[i] = det;
		first[i] = done[i] = -1;
		struct ds_request_params p = {
		    .prompt = prompt,
		    .n_prompt = n,
		    .max_tokens = bo->max_tokens,
		    .sampling = {.temperature = bo->temperature,
		                 .top_p = 1.0f,
		                 .seed = ds_mix64(bo->seed + (uint64_t)i)},
		    .has_seed = true,
		    .ignore_eos = true,
		    .deterministic = det,
		    .early_verify = true,
		};
		uint64_t id;
		if ((rv = ds_engine_submit(e, &p, &id, err)) != DS_OK)
			break;
	}
	free(prompt);
	if (rv != DS_OK)
		goto out;
	struct timespec ts, cs;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	t0 = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cs);
	uint64_t c0 = (uint64_t)cs.tv_sec * 1000000000ull + (uint64_t)cs.tv_nsec;
	memset(res, 0, sizeof(*res));
	for (int step = 0; !ds_engine_idle(e); step++) {
		if ((rv = ds_engine_step(e, err)) != DS_OK)
			goto out;
		struct ds_event *ev;
		while ((ev = ds_engine_poll(e)) != NULL) {
			/* ids are 1..n_req in submission order (one engine per run) */
			uint64_t k = ev->req_id - 1;
			if (k < (uint64_t)bo->n_req) {
				if (ev->n_tokens > 0 && first[k] < 0)
					first[k] = step;
				if (ev->final)
					done[k] = step;
			}
			if (ev->final && ev->finish == DS_FINISH_ERROR) {
				rv = ds_errf(err, ev->status, "bench: request failed: %s",
				             ev->error);
				ds_event_free(ev);
				goto out;
			}
			ds_event_free(ev);
		}
	}
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cs);
	res->cpu_secs =
	    (double)((uint64_t)cs.tv_sec * 1000000000ull + (uint64_t)cs.tv_nsec - c0) * 1e-9;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	res->secs =
	    (double)((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec - t0) * 1e-9;
	struct ds_engine_stats st;
	ds_engine_get_stats(e, &st);
	res->tokens = st.tokens[0] + st.tokens[1];
	res->det_tokens = st.tokens[1];
	res->tok_s = (double)res->tokens / res->secs;
	res->tok_cpu_s = (double)res->tokens / res->cpu_secs;
	res->windows = st.windows;
	res->rollbacks = st.rollbacks;
	res->rolled_back = st.rolled_back;
	res->recomputed = st.recomputed;
	res->preempt = st.preemptions;
	res->ref_calls = st.ref_forward_calls;
	res->fast_calls = st.fast_forward_calls;
	res->steps = st.steps;
	res->verify_passes = st.verify_passes;
	res->ref_steps = st.ref_steps;
	res->ref_why[0] = st.ref_steps_window;
	res->ref_why[1] = st.ref_steps_early;
	res->ref_why[2] = st.ref_steps_catchup;
	res->ref_why[3] = st.ref_steps_cost;
	res->margin_thr = st.margin_threshold;
	rv = step_stats(first, done, is_det, bo->n_req, res, err);
	res->margin_delta = st.margin_delta;
out:
	free(first);
	free(done);
	free(is_det);
	ds_engine_free(e);
	ds_backend_free(&be);
	return rv;
}

static void usage(FILE *fp)
{
	fprintf(fp,
	        "usage: bench_offline [--preset small] [--requests N] [--prompt-max N]\n"
	        "  [--max-tokens N] [--threads T] [--window W] [--group G] [--kv-blocks N]\n"
	        "  [--temperature T] [--margin M] [--inject P] [--seed S] [--only NAME]\n"
	        "  [--repeat R] [--json FILE] [--step-policy auto|merge|split]\n"
	        "  [--admit fcfs|det-first] [--ref-step-bias X] [--max-step-tokens N]\n"
	        "  [--max-running N]\n"
	        "  --margin M: early-verify threshold in logits; < 0 = auto (default): the engine\n"
	        "  calibrates it (the table's margin column shows the value in use)\n");
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
	    {"preset", required_argument, NULL, 'p'},
	    {"requests", required_argument, NULL, 'n'},
	    {"prompt-max", required_argument, NULL, 'l'},
	    {"max-tokens", required_argument, NULL, 'm'},
	    {"threads", required_argument, NULL, 't'},
	    {"window", required_argument, NULL, 'w'},
	    {"group", required_argument, NULL, 'g'},
	    {"kv-blocks", required_argument, NULL, 'k'},
	    {"temperature", required_argument, NULL, 'T'},
	    {"margin", required_argument, NULL, 'M'},
	    {"inject", required_argument, NULL, 'i'},
	    {"step-policy", required_argument, NULL, 'P'},
	    {"admit", required_argument, NULL, 'A'},
	    {"ref-step-bias", required_argument, NULL, 'B'},
	    {"max-step-tokens", required_argument, NULL, 'S'},
	    {"max-running", required_argument, NULL, 'R'},
	    {"seed", required_argument, NULL, 's'},
	    {"only", required_argument, NULL, 'o'},
	    {"repeat", required_argument, NULL, 'r'},
	    {"json", required_argument, NULL, 'j'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct bench_opts bo = {.n_req = 32,
	                        .prompt_max = 48,
	                        .max_tokens = 32,
	                        .threads = 0,
	                        .window = 32,
	                        .group = 16,
	                        .kv_blocks = 1024,
	                        .temperature = 0.7f,
	                        .margin = -1.0f, /* auto (calibrated by the engine) */
	                        .inject = 0.0,
	                        .seed = 42,
	                        .ref_bias = -1.0};
	const char *preset = "small", *only = NULL, *json = NULL;
	int repeat = 1;
	long long v;
	int c;
	bool ok = true;
	while (ok && (c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'p':
			preset = optarg;
			break;
		case 'o':
			only = optarg;
			break;
		case 'j':
			json = optarg;
			break;
		case 'r':
			ok = ds_cli_parse_long(optarg, 1, 100, &v);
			repeat = (int)v;
			break;
		case 'n':
			ok = ds_cli_parse_long(optarg, 1, 100000, &v);
			bo.n_req = (int)v;
			break;
		case 'l':
			ok = ds_cli_parse_long(optarg, 2, 100000, &v);
			bo.prompt_max = (int)v;
			break;
		case 'm':
			ok = ds_cli_parse_long(optarg, 1, 100000, &v);
			bo.max_tokens = (int)v;
			break;
		case 't':
			ok = ds_cli_parse_long(optarg, 0, 1024, &v);
			bo.threads = (int)v;
			break;
		case 'w':
			ok = ds_cli_parse_long(optarg, 1, 4096, &v);
			bo.window = (int)v;
			break;
		case 'g':
			ok = ds_cli_parse_long(optarg, 1, 4096, &v);
			bo.group = (int)v;
			break;
		case 'k':
			ok = ds_cli_parse_long(optarg, 1, 1 << 24, &v);
			bo.kv_blocks = (int)v;
			break;
		case 's':
			ok = ds_cli_parse_long(optarg, 0, LLONG_MAX, &v);
			bo.seed = (uint64_t)v;
			break;
		case 'T':
			bo.temperature = strtof(optarg, NULL);
			break;
		case 'M':
			bo.margin = strtof(optarg, NULL);
			break;
		case 'P':
			ok = ds_step_policy_parse(optarg, &bo.policy) == DS_OK;
			break;
		case 'A':
			ok = ds_admit_policy_parse(optarg, &bo.admit) == DS_OK;
			break;
		case 'S':
			ok = ds_cli_parse_long(optarg, 1, 1 << 20, &v);
			bo.max_step_tokens = (int)v;
			break;
		case 'R':
			ok = ds_cli_parse_long(optarg, 1, 1 << 16, &v);
			bo.max_running = (int)v;
			break;
		case 'B':
			bo.ref_bias = strtod(optarg, NULL);
			ok = bo.ref_bias >= 0.0;
			break;
		case 'i':
			bo.inject = strtod(optarg, NULL);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			ok = false;
		}
	}
	if (!ok || optind != argc) {
		usage(stderr);
		return 2;
	}
	struct ds_model_config mc;
	struct ds_model *m = NULL;
	struct ds_err err = {{0}};
	if (ds_model_preset(preset, &mc) != DS_OK) {
		fprintf(stderr, "bench_offline: unknown preset %s\n", preset);
		return 2;
	}
	enum ds_status rv = ds_model_synth(&mc, 1, &m, &err);
	if (rv != DS_OK) {
		fprintf(stderr, "bench_offline: %s\n", err.msg);
		return 1;
	}
	static const struct cfg cfgs[] = {
	    {"fast", DS_MODE_FAST, 0},      {"dvr-0%", DS_MODE_DVR, 0},
	    {"dvr-10%", DS_MODE_DVR, 10},   {"dvr-50%", DS_MODE_DVR, 50},
	    {"dvr-100%", DS_MODE_DVR, 100}, {"invariant", DS_MODE_INVARIANT, 100},
	};
	printf("bench_offline: preset %s, %d requests, prompts %d..%d, %d new tokens each, T=%.2f, "
	       "W=%d G=%d margin=%.2f inject=%.2f\n",
	       preset, bo.n_req, bo.prompt_max / 2, bo.prompt_max, bo.max_tokens, bo.temperature,
	       bo.window, bo.group, bo.margin, bo.inject);
	printf("%-10s %7s %8s %7s %8s %9s %8s %8s %9s %9s %9s %7s %7s %6s %8s %8s\n", "config",
	       "wall_s", "tok/s", "x fast", "cpu_s", "tok/cpu-s", "x fast", "windows", "rollbacks",
	       "rb/window", "rb/1k det", "recomp", "refcall", "steps", "ref/step", "margin");
	enum { NC = DS_ARRAY_LEN(cfgs) };
	struct result best[NC];
	bool have[NC] = {false};
	int rc = 0;
	for (int rep = 0; rep < repeat && rc == 0; rep++) {
		for (size_t i = 0; i < NC; i++) {
			if (only && strcmp(only, cfgs[i].name) != 0 &&
			    strcmp(cfgs[i].name, "fast") != 0)
				continue;
			struct result r;
			rv = run_one(m, &bo, &cfgs[i], &r, &err);
			if (rv != DS_OK) {
				fprintf(stderr, "bench_offline: %s: %s\n", cfgs[i].name, err.msg);
				rc = 1;
				break;
			}
			if (!have[i] || r.cpu_secs < best[i].cpu_secs) {
				double w = have[i] ? DS_MIN(best[i].secs, r.secs) : r.secs;
				best[i] = r;
				best[i].secs = w;
				best[i].tok_s = (double)r.tokens / w;
			} else if (r.secs < best[i].secs) {
				best[i].secs = r.secs;
				best[i].tok_s = (double)r.tokens / r.secs;
			}
			have[i] = true;
		}
	}
	double fast_tps = have[0] ? best[0].tok_s : 0;
	double fast_cpu = have[0] ? best[0].tok_cpu_s : 0;
	FILE *jf = NULL;
	if (json && rc == 0 && !(jf = fopen(json, "w"))) {
		fprintf(stderr, "bench_offline: cannot write %s\n", json);
		rc = 1;
	}
	if (jf)
		fprintf(
		    jf,
		    "{\"bench\": \"offline\", \"preset\": \"%s\", \"requests\": %d, "
		    "\"prompt_tokens\": \"%d..%d\", \"output_tokens\": %d, \"temperature\": %.2f, "
		    "\"W\": %d, \"G\": %d, \"margin\": %.4f, \"inject\": %.3f, \"threads\": %d, "
		    "\"repeat\": %d, \"runs\": [",
		    preset, bo.n_req, bo.prompt_max / 2, bo.prompt_max, bo.max_tokens,
		    bo.temperature, bo.window, bo.group, bo.margin, bo.inject, bo.threads, repeat);
	for (size_t i = 0, nj = 0; i < NC && rc == 0; i++) {
		if (!have[i])
			continue;
		const struct result *r = &best[i];
		if (jf)
			fprintf(
			    jf,
			    "%s\n  {\"config\": \"%s\", \"det_pct\": %d, \"secs\": %.3f, "
			    "\"tokens_per_s\": %.1f, \"ratio_to_fast\": %.4f, \"cpu_secs\": %.3f, "
			    "\"tokens_per_cpu_s\": %.1f, \"cpu_ratio_to_fast\": %.4f, "
			    "\"tokens\": %" PRIu64 ", \"det_tokens\": %" PRIu64
			    ", \"steps\": %" PRIu64 ", \"ref_calls\": %" PRIu64
			    ", \"fast_calls\": %" PRIu64 ", \"verify_passes\": %" PRIu64
			    ", \"windows\": %" PRIu64 ", \"rollbacks\": %" PRIu64
			    ", \"rolled_back\": %" PRIu64 ", \"recomputed\": %" PRIu64
			    ", \"preemptions\": %" PRIu64
			    ", \"margin_threshold\": %.6g, \"margin_delta\": %.6g"
			    ", \"ref_steps\": %" PRIu64 ", \"ref_steps_window\": %" PRIu64
			    ", \"ref_steps_early\": %" PRIu64 ", \"ref_steps_catchup\": %" PRIu64
			    ", \"ref_steps_cost\": %" PRIu64 ", \"first_token_step\": {\"mean\": "
			    "[%.1f, %.1f], \"p50\": [%.1f, %.1f], "
			    "\"p99\": [%.1f, %.1f]}"
			    ", \"done_step\": {\"mean\": [%.1f, %.1f], \"p50\": [%.1f, %.1f], "
			    "\"p99\": [%.1f, %.1f]}}",
			    nj++ ? "," : "", cfgs[i].name, cfgs[i].det_pct, r->secs, r->tok_s,
			    fast_tps > 0 ? r->tok_s / fast_tps : 0.0, r->cpu_secs, r->tok_cpu_s,
			    fast_cpu > 0 ? r->tok_cpu_s / fast_cpu : 0.0, r->tokens, r->det_tokens,
			    r->steps, r->ref_calls, r->fast_calls, r->verify_passes, r->windows,
			    r->rollbacks, r->rolled_back, r->recomputed, r->preempt,
			    (double)r->margin_thr, (double)r->margin_delta, r->ref_steps,
			    r->ref_why[0], r->ref_why[1], r->ref_why[2], r->ref_why[3],
			    stat_or_none(r->first[0].mean), stat_or_none(r->first[1].mean),
			    stat_or_none(r->first[0].p50), stat_or_none(r->first[1].p50),
			    stat_or_none(r->first[0].p99), stat_or_none(r->first[1].p99),
			    stat_or_none(r->done[0].mean), stat_or_none(r->done[1].mean),
			    stat_or_none(r->done[0].p50), stat_or_none(r->done[1].p50),
			    stat_or_none(r->done[0].p99), stat_or_none(r->done[1].p99));
		printf("%-10s %7.2f %8.1f %7.3f %8.2f %9.1f %8.3f %8" PRIu64 " %9" PRIu64
		       " %9.4f %9.3f"
		       " %7.3f %7" PRIu64 " %6" PRIu64 " %8.3f %8.3g\n",
		       cfgs[i].name, r->secs, r->tok_s, fast_tps > 0 ? r->tok_s / fast_tps : 0.0,
		       r->cpu_secs, r->tok_cpu_s, fast_cpu > 0 ? r->tok_cpu_s / fast_cpu : 0.0,
		       r->windows, r->rollbacks,
		       r->windows ? (double)r->rollbacks / (double)r->windows : 0.0,
		       r->det_tokens ? 1000.0 * (double)r->rollbacks / (double)r->det_tokens : 0.0,
		       r->det_tokens ? (double)r->recomputed / (double)r->det_tokens : 0.0,
		       r->ref_calls, r->steps,
		       r->steps ? (double)r->ref_calls / (double)r->steps : 0.0,
		       (double)r->margin_thr);
		printf("  steps to the first token, mean / p50 / p99: non-det %.1f / %.1f / %.1f, "
		       "det %.1f / %.1f / %.1f; to the last: non-det %.1f / %.1f / %.1f, "
		       "det %.1f / %.1f / %.1f (-1: none)\n",
		       stat_or_none(r->first[0].mean), stat_or_none(r->first[0].p50),
		       stat_or_none(r->first[0].p99), stat_or_none(r->first[1].mean),
		       stat_or_none(r->first[1].p50), stat_or_none(r->first[1].p99),
		       stat_or_none(r->done[0].mean), stat_or_none(r->done[0].p50),
		       stat_or_none(r->done[0].p99), stat_or_none(r->done[1].mean),
		       stat_or_none(r->done[1].p50), stat_or_none(r->done[1].p99));
		if (r->ref_steps)
			printf("  %" PRIu64 " REF steps by first reason: window %" PRIu64
			       ", early %" PRIu64 ", catch-up %" PRIu64 ", cost %" PRIu64 "\n",
			       r->ref_steps, r->ref_why[0], r->ref_why[1], r->ref_why[2],
			       r->ref_why[3]);
	}
	if (jf) {
		fprintf(jf, "\n]}\n");
		if (fclose(jf) != 0) {
			fprintf(stderr, "bench_offline: error writing %s\n", json);
			rc = 1;
		}
	}
	ds_model_free(m);
	return rc;
}
