/* bench_gpu_e2e.c - the e2e section: offline throughput of the scheduler's engine on the
 * CUDA backend, per mode and deterministic share (bench_gpu.h). */
#include "bench_gpu.h"

/* ---- end to end through the engine ---- */

struct e2e_cfg {
	const char *name;
	enum ds_mode mode;
	int det_pct;
	bool early; /* early verification at low-margin tokens (the engine's default) */
	int group;  /* G: windows per reference pass */
	enum ds_step_policy policy; /* DVR steps with reference work (engine.h) */
	int window; /* W; 0: the engine's default; < 0: W = -window, fixed (no window_auto) */
	bool cost_rule; /* ref_step_bias 1 (the per-step cost rule) instead of e2e_ref_bias() */
	enum ds_admit_policy admit; /* which waiting request a free slot takes (engine.h) */
};

/* The workload: n_req requests submitted at once, prompts of prompt_min..prompt_max random
 * tokens, n_out tokens each (ignore_eos). */
struct e2e_load {
	int n_req, prompt_min, prompt_max, n_out;
};

/* Rows (input tokens) a step ran on each path: how many steps ran any, their sum, and how many
 * fell in each bin of E2E_ROW_EDGES (the last bin is open), from the backend's row counters
 * (a step's forward calls on a path added up). The pass size is the GEMMs' M, so this says
 * which M the end-to-end steps exercise. */
#define E2E_ROW_BINS 5
static const int E2E_ROW_EDGES[E2E_ROW_BINS - 1] = {256, 512, 1024, 2048};

struct e2e_rows {
	uint64_t steps[DS_N_PATHS], rows[DS_N_PATHS], bins[DS_N_PATHS][E2E_ROW_BINS];
};

static void e2e_rows_add(struct e2e_rows *r, int path, uint64_t rows)
{
	if (rows == 0)
		return;
	int k = 0;
	while (k < E2E_ROW_BINS - 1 && rows > (uint64_t)E2E_ROW_EDGES[k])
		k++;
	r->steps[path]++;
	r->rows[path] += rows;
	r->bins[path][k]++;
}

/* E2E_TRACE=1: one line per step (seconds since start, step wall time, running, waiting,
 * tokens so far, whether it ran on REF, rows on each path) in DIR/e2e-trace-NAME.tsv, to see
 * where time goes (e.g. a tail of few running requests). */
static FILE *trace_open(const struct bench *b, const char *name)
{
	const char *v = getenv("E2E_TRACE");
	if (!v || strcmp(v, "1") != 0)
		return NULL;
	/* '%' in a configuration's name becomes "pct": the device tool brings back plain names */
	char path[1024], file[128];
	size_t k = 0;
	for (const char *s = name; *s && k + 4 < sizeof(file); s++) {
		if (*s == '%')
			k += (size_t)snprintf(file + k, sizeof(file) - k, "pct");
		else
			file[k++] = *s;
	}
	file[k] = '\0';
	snprintf(path, sizeof(path), "%s/e2e-trace-%s.tsv", b->out, file);
	FILE *f = fopen(path, "w");
	if (f)
		fprintf(f,
		        "t_s\tstep_ms\trunning\twaiting\ttokens\tref_step\trows_fast\trows_ref\n");
	return f;
}

/* The engine's ref_step_bias for every configuration: E2E_REF_BIAS, else 0, the server's
 * default on the CUDA backend (server/main.c). */
static double e2e_ref_bias(void)
{
	const char *v = getenv("E2E_REF_BIAS");
	return v ? atof(v) : 0.0;
}

/* The ref_step_bias a configuration runs with. */
static double e2e_cfg_bias(const struct e2e_cfg *c)
{
	return c->cost_rule ? 1.0 : e2e_ref_bias();
}

static int e2e_run(struct bench *b, const struct e2e_cfg *cfg, const struct e2e_load *ld,
                   double *secs, uint64_t *tokens, struct ds_engine_stats *st,
                   struct e2e_rows *rows)
{
	int n_req = ld->n_req, prompt_max = ld->prompt_max, n_out = ld->n_out;
	struct ds_backend be;
	struct ds_engine *e = NULL;
	struct ds_err err;
	int rc = 1;
	if (ds_backend_cuda_init(&be, b->m, 0, &err) != DS_OK) {
		fprintf(stderr, "e2e: %s\n", err.msg);
		return 1;
	}
	struct ds_engine_opts o;
	ds_engine_opts_default(&o);
	o.mode = cfg->mode;
	o.group = cfg->group;
	o.step_policy = cfg->policy;
	o.admit_policy = cfg->admit;
	o.warmup = true; /* graphs and autotuning at init, as the server does on the GPU */
	o.ref_step_bias = e2e_cfg_bias(cfg);
	if (cfg->window != 0)
		o.window = abs(cfg->window);
	if (cfg->window < 0)
		o.window_auto = false;
	o.kv_blocks = 256 * ((prompt_max + n_out) / 16 + 2) + 256;
	o.max_step_tokens = 2048;
	o.max_queue = n_req + 16;
	if (ds_engine_init(&e, &be, &o, &err) != DS_OK) {
		fprintf(stderr, "e2e: %s\n", err.msg);
		goto out;
	}
	int32_t *prompt = malloc((size_t)prompt_max * sizeof(int32_t));
	uint64_t h = 12345;
	for (int i = 0; i < n_req; i++) {
		int n = ld->prompt_min +
		        (int)((h = ds_mix64(h)) % (uint64_t)(prompt_max - ld->prompt_min + 1));
		for (int k = 0; k < n; k++)
			prompt[k] = (int32_t)((h = ds_mix64(h)) % (uint64_t)b->m->cfg.vocab_size);
		bool det = cfg->mode != DS_MODE_FAST &&
		           (int)(ds_mix64(777 ^ (uint64_t)i) % 100) < cfg->det_pct;
		struct ds_request_params p = {
		    .prompt = prompt,
		    .n_prompt = n,
		    .max_tokens = n_out,
		    .sampling = {.temperature = 0.7f, .top_p = 1.0f, .seed = ds_mix64((uint64_t)i)},
		    .has_seed = true,
		    .ignore_eos = true,
		    .deterministic = det,
		    .early_verify = cfg->early,
		};
		uint64_t id;
		if (ds_engine_submit(e, &p, &id, &err) != DS_OK) {
			fprintf(stderr, "e2e submit: %s\n", err.msg);
			free(prompt);
			goto out;
		}
	}
	free(prompt);
	FILE *tr = trace_open(b, cfg->name);
	double t0 = now_s();
	memset(rows, 0, sizeof(*rows));
	while (!ds_engine_idle(e)) {
		double ts = now_s();
		uint64_t r0[DS_N_PATHS];
		memcpy(r0, be.counters.rows, sizeof(r0));
		if (ds_engine_step(e, &err) != DS_OK) {
			fprintf(stderr, "e2e step: %s\n", err.msg);
			if (tr)
				fclose(tr);
			goto out;
		}
		uint64_t dr[DS_N_PATHS];
		for (int p = 0; p < DS_N_PATHS; p++) {
			dr[p] = be.counters.rows[p] - r0[p];
			e2e_rows_add(rows, p, dr[p]);
		}
		if (tr) {
			double te = now_s();
			uint64_t refs = st->ref_steps;
			ds_engine_get_stats(e, st);
			fprintf(tr, "%.4f\t%.3f\t%d\t%d\t%llu\t%d\t%llu\t%llu\n", te - t0,
			        (te - ts) * 1e3, st->running, st->waiting,
			        (unsigned long long)(st->tokens[0] + st->tokens[1]),
			        st->ref_steps > refs, (unsigned long long)dr[DS_PATH_FAST],
			        (unsigned long long)dr[DS_PATH_REF]);
		}
		struct ds_event *ev;
		while ((ev = ds_engine_poll(e)) != NULL) {
			if (ev->final && ev->finish == DS_FINISH_ERROR) {
				fprintf(stderr, "e2e request failed: %s\n", ev->error);
				ds_event_free(ev);
				goto out;
			}
			ds_event_free(ev);
		}
	}
	*secs = now_s() - t0;
	if (tr)
		fclose(tr);
	ds_engine_get_stats(e, st);
	*tokens = st->tokens[0] + st->tokens[1];
	rc = 0;
out:
	ds_engine_free(e);
	ds_backend_free(&be);
	return rc;
}

/* Is name in the comma-separated list (NULL or empty: everything)? */
static bool e2e_selected(const char *list, const char *name)
{
	if (!list || !*list)
		return true;
	size_t n = strlen(name);
	for (const char *p = list; *p;) {
		const char *q = strchr(p, ',');
		size_t len = q ? (size_t)(q - p) : strlen(p);
		if (len == n && strncmp(p, name, n) == 0)
			return true;
		if (!q)
			break;
		p = q + 1;
	}
	return false;
}

#define E2E_MAX_REPEAT 8

/* A configuration's fastest run of E2E_REPEAT, and every run's seconds. */
struct e2e_best {
	double secs, all_secs[E2E_MAX_REPEAT];
	uint64_t tokens;
	struct ds_engine_stats st;
	struct e2e_rows rows;
};

/* The rows-a-step line of one path (stdout) and its JSON object (f). */
static void e2e_rows_report(FILE *f, const struct e2e_rows *r, int p, const char *name)
{
	double mean = r->steps[p] ? (double)r->rows[p] / (double)r->steps[p] : 0.0;
	printf("  rows a step on %s: %llu steps, mean %.0f;", name, (unsigned long long)r->steps[p],
	       mean);
	fprintf(f, "\"%s\": {\"steps\": %llu, \"rows\": %llu, \"bins\": [", name,
	        (unsigned long long)r->steps[p], (unsigned long long)r->rows[p]);
	for (int k = 0; k < E2E_ROW_BINS; k++) {
		unsigned long long n = (unsigned long long)r->bins[p][k];
		if (k < E2E_ROW_BINS - 1)
			printf(" <= %d: %llu,", E2E_ROW_EDGES[k], n);
		else
			printf(" more: %llu\n", n);
		fprintf(f, "%s%llu", k ? ", " : "", n);
	}
	fprintf(f, "]}");
}

/* One configuration's table row (stdout) and JSON object (f; sep: a comma before it). */
static void e2e_report(FILE *f, const struct e2e_cfg *c, const struct e2e_best *r, int repeat,
                       double fast_tps, bool sep)
{
	const struct ds_engine_stats *st = &r->st;
	double tps = (double)r->tokens / r->secs;
	printf("%-27s %8.2f %10.0f %8.3f %8llu %9llu %10llu %6llu %6llu %7llu %8llu %9.3g\n",
	       c->name, r->secs, tps, tps / fast_tps, (unsigned long long)st->windows,
	       (unsigned long long)st->rollbacks, (unsigned long long)st->recomputed,
	       (unsigned long long)st->steps, (unsigned long long)st->ref_forward_calls,
	       (unsigned long long)st->ref_steps, (unsigned long long)st->ref_decoded,
	       (double)st->margin_threshold);
	if (st->ref_steps && c->mode == DS_MODE_DVR)
		printf("  REF steps by first reason: window %llu, early %llu, catch-up %llu, "
		       "cost %llu\n",
		       (unsigned long long)st->ref_steps_window,
		       (unsigned long long)st->ref_steps_early,
		       (unsigned long long)st->ref_steps_catchup,
		       (unsigned long long)st->ref_steps_cost);
	fprintf(f,
	        "%s  {\"mode\": \"%s\", \"deterministic_pct\": %d, \"early_verify\": %s, "
	        "\"secs\": %.3f, \"runs_secs\": [",
	        sep ? ",\n" : "", c->name, c->det_pct, c->early ? "true" : "false", r->secs);
	for (int i = 0; i < repeat; i++)
		fprintf(f, "%s%.3f", i ? ", " : "", r->all_secs[i]);
	fprintf(f,
	        "], \"tokens\": %llu, \"tokens_per_s\": %.1f, \"ratio_to_fast\": %.4f, "
	        "\"windows\": %llu, \"rollbacks\": %llu, \"rolled_back\": %llu, "
	        "\"recomputed\": %llu, \"preemptions\": %llu, \"ref_calls\": %llu, "
	        "\"fast_calls\": %llu, \"G\": %d, \"steps\": %llu, \"verify_passes\": %llu, "
	        "\"margin_threshold\": %.6g, \"margin_delta\": %.6g, \"step_policy\": \"%s\", "
	        "\"W\": %d, \"window_auto\": %s, \"window_final\": %d, "
	        "\"ref_steps\": %llu, \"ref_decoded\": %llu, \"ref_steps_window\": %llu, "
	        "\"ref_steps_early\": %llu, \"ref_steps_catchup\": %llu, "
	        "\"ref_steps_cost\": %llu, \"ref_step_bias\": %g, \"admit_policy\": \"%s\"",
	        (unsigned long long)r->tokens, tps, tps / fast_tps, (unsigned long long)st->windows,
	        (unsigned long long)st->rollbacks, (unsigned long long)st->rolled_back,
	        (unsigned long long)st->recomputed, (unsigned long long)st->preemptions,
	        (unsigned long long)st->ref_forward_calls,
	        (unsigned long long)st->fast_forward_calls, c->group, (unsigned long long)st->steps,
	        (unsigned long long)st->verify_passes, (double)st->margin_threshold,
	        (double)st->margin_delta, ds_step_policy_name(c->policy),
	        c->window ? abs(c->window) : 32, c->window < 0 ? "false" : "true", st->window,
	        (unsigned long long)st->ref_steps, (unsigned long long)st->ref_decoded,
	        (unsigned long long)st->ref_steps_window, (unsigned long long)st->ref_steps_early,
	        (unsigned long long)st->ref_steps_catchup, (unsigned long long)st->ref_steps_cost,
	        e2e_cfg_bias(c), ds_admit_policy_name(c->admit));
	fprintf(f, ", \"rows_a_step\": {\"bin_upper\": [");
	for (int k = 0; k < E2E_ROW_BINS - 1; k++)
		fprintf(f, "%d, ", E2E_ROW_EDGES[k]);
	fprintf(f, "null], ");
	e2e_rows_report(f, &r->rows, DS_PATH_FAST, "fast");
	fprintf(f, ", ");
	e2e_rows_report(f, &r->rows, DS_PATH_REF, "ref");
	fprintf(f, "}}");
	fflush(stdout);
	fflush(f);
}

/* Every configuration builds its own backend and engine (weights generated again, cuBLASLt
 * autotuned again), and the engine warms up at init (opts.warmup: every pass-size bucket on
 * the mode's paths, so GEMM autotuning and CUDA graph captures happen before the clock
 * starts, as they do at a server's start-up; without it a DVR run paid ~1 s more of captures
 * and autotuning than fast inside the timed region, most of it in the final tail). A short
 * untimed warm-up run of the fast path and of the reference path comes first, so that the
 * process-wide one-time costs (CUDA's lazy module loading) do not land on whichever mode runs
 * first. E2E_REQUESTS / E2E_PROMPT_MIN / E2E_PROMPT / E2E_OUT set the workload, E2E_CONFIGS
 * (comma-separated names) picks the configurations, E2E_TRACE=1 writes per-step traces,
 * E2E_REPEAT=R runs each configuration R times and reports its fastest, E2E_REF_BIAS=x sets the
 * engine's ref_step_bias (the auto policy's weight on the measured REF cost; 0, the default
 * here as in the server on the GPU: a step with deterministic proposals always runs on REF;
 * the *-cost configurations use 1, the per-step cost rule). */
int bench_e2e(struct bench *b)
{
	struct e2e_load ld;
	ld.n_req = env_int("E2E_REQUESTS", 256);
	ld.prompt_max = env_int("E2E_PROMPT", 256);
	ld.prompt_min = env_int("E2E_PROMPT_MIN", ld.prompt_max / 2);
	ld.n_out = env_int("E2E_OUT", 128);
	if (ld.n_req < 1 || ld.prompt_min < 1 || ld.prompt_max < ld.prompt_min || ld.n_out < 1) {
		fprintf(stderr, "e2e: bad workload %d requests, prompts %d..%d, %d out\n", ld.n_req,
		        ld.prompt_min, ld.prompt_max, ld.n_out);
		return 1;
	}
	const char *pick = getenv("E2E_CONFIGS");
	const struct e2e_cfg cfgs[] = {
	    {"fast", DS_MODE_FAST, 0, true, 16, DS_STEP_AUTO, 0, false, DS_ADMIT_FCFS},
	    {"dvr-0%", DS_MODE_DVR, 0, true, 16, DS_STEP_AUTO, 0, false, DS_ADMIT_FCFS},
	    {"dvr-10%", DS_MODE_DVR, 10, true, 16, DS_STEP_AUTO, 0, false, DS_ADMIT_FCFS},
	    {"dvr-50%", DS_MODE_DVR, 50, true, 16, DS_STEP_AUTO, 0, false, DS_ADMIT_FCFS},
	    {"dvr-100%", DS_MODE_DVR, 100, true, 16, DS_STEP_AUTO, 0, false, DS_ADMIT_FCFS},
	    {"invariant", DS_MODE_INVARIANT, 100, true, 16, DS_STEP_AUTO, 0, false, DS_ADMIT_FCFS},
	    {"dvr-10%-full-windows", DS_MODE_DVR, 10, false, 16, DS_STEP_AUTO, 0, false,
	     DS_ADMIT_FCFS},
	    {"dvr-50%-full-windows", DS_MODE_DVR, 50, false, 16, DS_STEP_AUTO, 0, false,
	     DS_ADMIT_FCFS},
	    {"dvr-10%-merge", DS_MODE_DVR, 10, true, 16, DS_STEP_MERGE, 0, false, DS_ADMIT_FCFS},
	    {"dvr-50%-merge", DS_MODE_DVR, 50, true, 16, DS_STEP_MERGE, 0, false, DS_ADMIT_FCFS},
	    {"dvr-10%-merge-full-windows", DS_MODE_DVR, 10, false, 16, DS_STEP_MERGE, 0, false,
	     DS_ADMIT_FCFS},
	    {"dvr-50%-merge-full-windows", DS_MODE_DVR, 50, false, 16, DS_STEP_MERGE, 0, false,
	     DS_ADMIT_FCFS},
	    {"dvr-10%-split", DS_MODE_DVR, 10, true, 16, DS_STEP_SPLIT, 0, false, DS_ADMIT_FCFS},
	    {"dvr-50%-split", DS_MODE_DVR, 50, true, 16, DS_STEP_SPLIT, 0, false, DS_ADMIT_FCFS},
	    {"dvr-10%-split-full-windows", DS_MODE_DVR, 10, false, 16, DS_STEP_SPLIT, 0, false,
	     DS_ADMIT_FCFS},
	    {"dvr-50%-split-full-windows", DS_MODE_DVR, 50, false, 16, DS_STEP_SPLIT, 0, false,
	     DS_ADMIT_FCFS},
	    {"dvr-10%-split-G64", DS_MODE_DVR, 10, true, 64, DS_STEP_SPLIT, 0, false,
	     DS_ADMIT_FCFS},
	    {"dvr-50%-split-G64", DS_MODE_DVR, 50, true, 64, DS_STEP_SPLIT, 0, false,
	     DS_ADMIT_FCFS},
	    {"dvr-10%-W16", DS_MODE_DVR, 10, true, 16, DS_STEP_AUTO, 16, false, DS_ADMIT_FCFS},
	    {"dvr-50%-W16", DS_MODE_DVR, 50, true, 16, DS_STEP_AUTO, 16, false, DS_ADMIT_FCFS},
	    {"dvr-10%-W8", DS_MODE_DVR, 10, true, 16, DS_STEP_AUTO, 8, false, DS_ADMIT_FCFS},
	    {"dvr-50%-W8", DS_MODE_DVR, 50, true, 16, DS_STEP_AUTO, 8, false, DS_ADMIT_FCFS},
	    {"dvr-10%-W8-fixed", DS_MODE_DVR, 10, true, 16, DS_STEP_AUTO, -8, false, DS_ADMIT_FCFS},
	    {"dvr-50%-W8-fixed", DS_MODE_DVR, 50, true, 16, DS_STEP_AUTO, -8, false, DS_ADMIT_FCFS},
	    {"dvr-10%-cost", DS_MODE_DVR, 10, true, 16, DS_STEP_AUTO, 0, true, DS_ADMIT_FCFS},
	    {"dvr-50%-cost", DS_MODE_DVR, 50, true, 16, DS_STEP_AUTO, 0, true, DS_ADMIT_FCFS},
	    {"dvr-100%-cost", DS_MODE_DVR, 100, true, 16, DS_STEP_AUTO, 0, true, DS_ADMIT_FCFS},
	    {"dvr-10%-det-first", DS_MODE_DVR, 10, true, 16, DS_STEP_AUTO, 0, false,
	     DS_ADMIT_DET_FIRST},
	    {"dvr-50%-det-first", DS_MODE_DVR, 50, true, 16, DS_STEP_AUTO, 0, false,
	     DS_ADMIT_DET_FIRST},
	};
	/* warm-up: untimed, small */
	const struct e2e_cfg warm[] = {
	    {"warm-fast", DS_MODE_FAST, 0, true, 16, DS_STEP_SPLIT, 0, false, DS_ADMIT_FCFS},
	    {"warm-dvr", DS_MODE_DVR, 100, true, 16, DS_STEP_SPLIT, 0, false, DS_ADMIT_FCFS}};
	struct e2e_load wl = {32, ld.prompt_min, ld.prompt_max, 16};
	for (size_t i = 0; i < DS_ARRAY_LEN(warm); i++) {
		double secs = 0;
		uint64_t tok = 0;
		struct ds_engine_stats st;
		memset(&st, 0, sizeof(st));
		struct e2e_rows rows;
		if (e2e_run(b, &warm[i], &wl, &secs, &tok, &st, &rows))
			return 1;
		printf("warm-up %s: %.2f s (not recorded)\n", warm[i].name, secs);
	}
	/* E2E_REPEAT=R: every selected configuration runs R times, the rounds interleaved (fast,
	 * then the others, then again), and the fastest run of each is the one reported (a trace
	 * is the last round's): one slow run of the baseline alone would move every ratio */
	int repeat = DS_MAX(1, DS_MIN(env_int("E2E_REPEAT", 1), E2E_MAX_REPEAT));
	FILE *f = json_open(b->out, "e2e");
	if (!f)
		return 1;
	fprintf(f,
	        "{\"bench\": \"e2e\", \"device\": \"%s\", \"model\": \"llama3-8b (synthetic)\", "
	        "\"requests\": %d, \"prompt_tokens\": \"%d..%d\", \"output_tokens\": %d, "
	        "\"temperature\": 0.7, \"W\": 32, \"max_step_tokens\": 2048, \"max_running\": 256, "
	        "\"warmed_up\": true, \"repeat\": %d, \"ref_step_bias\": %g, \"runs\": [\n",
	        b->dev, ld.n_req, ld.prompt_min, ld.prompt_max, ld.n_out, repeat, e2e_ref_bias());
	printf(
	    "end to end, llama3-8b, %d requests, prompts %d..%d, %d out (engine, manual steps)\n",
	    ld.n_req, ld.prompt_min, ld.prompt_max, ld.n_out);
	printf("%-27s %8s %10s %8s %8s %9s %10s %6s %6s %7s %8s %9s\n", "mode", "secs", "tok/s",
	       "vs fast", "windows", "rollbacks", "recomputed", "steps", "refcal", "refstep",
	       "refdec", "margin");
	size_t sel[DS_ARRAY_LEN(cfgs)];
	struct e2e_best best[DS_ARRAY_LEN(cfgs)];
	size_t n_sel = 0;
	for (size_t i = 0; i < DS_ARRAY_LEN(cfgs); i++)
		if (i == 0 || e2e_selected(pick, cfgs[i].name)) /* fast always runs: the baseline */
			sel[n_sel++] = i;
	memset(best, 0, sizeof(best));
	for (int r = 0; r < repeat; r++) {
		for (size_t k = 0; k < n_sel; k++) {
			double secs = 0;
			uint64_t tok = 0;
			struct ds_engine_stats st;
			struct e2e_rows rows;
			memset(&st, 0, sizeof(st));
			if (e2e_run(b, &cfgs[sel[k]], &ld, &secs, &tok, &st, &rows)) {
				fclose(f);
				return 1;
			}
			best[k].all_secs[r] = secs;
			if (r == 0 || secs < best[k].secs) {
				best[k].secs = secs;
				best[k].tokens = tok;
				best[k].st = st;
				best[k].rows = rows;
			}
			/* as each run ends, so a run stopped by a timeout still shows the
			 * finished ones */
			printf("  round %d %-20s %8.2f s, %.0f tok/s\n", r + 1, cfgs[sel[k]].name,
			       secs, (double)tok / secs);
			fflush(stdout);
		}
	}
	double fast_tps = (double)best[0].tokens / best[0].secs;
	for (size_t k = 0; k < n_sel; k++)
		e2e_report(f, &cfgs[sel[k]], &best[k], repeat, fast_tps, k > 0);
	fprintf(f, "\n]}\n");
	fclose(f);
	return 0;
}
