/* detserve-gen.c - one generation from the command line: loads a model (HF directory, GGUF or
 * a synthetic preset), runs the engine in manual mode, and prints the tokens, the finish
 * reason, the seed, the fingerprint and the DVR statistics.
 *
 * --background N adds N non-deterministic requests of random traffic next to the one being
 * printed, so running it twice with different N shows that a deterministic output (and its
 * fingerprint) does not depend on what else is in the batch. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli_common.h"
#include "engine.h"

static void usage(FILE *fp)
{
	fprintf(
	    fp,
	    "usage: detserve-gen (--model DIR|FILE.gguf | --preset tiny|small|llama3-8b)\n"
	    "                    --prompt-ids 1,2,3 [options]\n"
	    "  --model-seed N        synthetic weights seed for --preset (default 1, as mkmodel)\n"
	    "  --seed S              sampling seed (default: drawn by the engine, then printed)\n"
	    "  --deterministic       decode-verify-rollback against the reference path\n"
	    "  --mode M              fast | dvr | invariant | ref-only (default dvr)\n"
	    "  --max-tokens N        (default 32)\n"
	    "  --temperature T --top-k K --top-p P   sampling (default greedy)\n"
	    "  --ignore-eos          keep going past EOS\n"
	    "  --window W --group G --margin M       DVR knobs (defaults 32, 16, 0.5)\n"
	    "  --no-early-verify     verify only full windows\n"
	    "  --inject-mismatch P   force a rollback in a fraction P of windows\n"
	    "  --kv-blocks N --block-size B          KV pool (defaults 1024, 16)\n"
	    "  --background N        N extra non-deterministic requests of random traffic\n"
	    "  --threads T           CPU backend threads (default: all cores)\n"
	    "  --precision P         bf16 | f32: weights and KV (default bf16; f32 needs "
	    "--model)\n");
}

static int parse_ids(const char *s, int32_t **out)
{
	int n = 0, cap = 16;
	int32_t *v = malloc((size_t)cap * sizeof(*v));
	while (v && *s) {
		char *end;
		errno = 0;
		long x = strtol(s, &end, 10);
		if (errno || end == s || x < 0 || x > INT32_MAX || (*end && *end != ','))
			break;
		if (n == cap) {
			cap *= 2;
			int32_t *nv = realloc(v, (size_t)cap * sizeof(*v));
			if (!nv)
				break;
			v = nv;
		}
		v[n++] = (int32_t)x;
		s = *end ? end + 1 : end;
	}
	if (!v || *s || n == 0) {
		free(v);
		return -1;
	}
	*out = v;
	return n;
}

static const char *finish_name(enum ds_finish f)
{
	static const char *const names[] = {"none", "length", "eos", "stop", "cancelled", "error"};
	return (unsigned)f < DS_ARRAY_LEN(names) ? names[f] : "?";
}

enum {
	O_MODEL = 256,
	O_PRESET,
	O_MSEED,
	O_SEED,
	O_DET,
	O_MODE,
	O_MAXTOK,
	O_TEMP,
	O_TOPK,
	O_TOPP,
	O_IGNEOS,
	O_WIN,
	O_GROUP,
	O_MARGIN,
	O_NOEARLY,
	O_INJECT,
	O_KVB,
	O_BS,
	O_BG,
	O_THREADS,
	O_PRECISION,
	O_PROMPT,
	O_HELP
};

int main(int argc, char **argv)
{
	static const struct option lo[] = {
	    {"model", required_argument, NULL, O_MODEL},
	    {"preset", required_argument, NULL, O_PRESET},
	    {"model-seed", required_argument, NULL, O_MSEED},
	    {"seed", required_argument, NULL, O_SEED},
	    {"deterministic", no_argument, NULL, O_DET},
	    {"mode", required_argument, NULL, O_MODE},
	    {"max-tokens", required_argument, NULL, O_MAXTOK},
	    {"temperature", required_argument, NULL, O_TEMP},
	    {"top-k", required_argument, NULL, O_TOPK},
	    {"top-p", required_argument, NULL, O_TOPP},
	    {"ignore-eos", no_argument, NULL, O_IGNEOS},
	    {"window", required_argument, NULL, O_WIN},
	    {"group", required_argument, NULL, O_GROUP},
	    {"margin", required_argument, NULL, O_MARGIN},
	    {"no-early-verify", no_argument, NULL, O_NOEARLY},
	    {"inject-mismatch", required_argument, NULL, O_INJECT},
	    {"kv-blocks", required_argument, NULL, O_KVB},
	    {"block-size", required_argument, NULL, O_BS},
	    {"background", required_argument, NULL, O_BG},
	    {"threads", required_argument, NULL, O_THREADS},
	    {"precision", required_argument, NULL, O_PRECISION},
	    {"prompt-ids", required_argument, NULL, O_PROMPT},
	    {"help", no_argument, NULL, O_HELP},
	    {NULL, 0, NULL, 0},
	};
	const char *model_path = NULL, *preset = NULL, *prompt_s = NULL;
	long long mseed = 1, seed = 0, v;
	bool has_seed = false, det = false, ignore_eos = false, early = true;
	int max_tokens = 32, threads = 0, background = 0;
	enum ds_dtype precision = DS_DTYPE_BF16;
	struct ds_sample_params sp = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f};
	struct ds_engine_opts eo;
	ds_engine_opts_default(&eo);
	int c, bad = 0;
	float f;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case O_MODEL:
			model_path = optarg;
			break;
		case O_PRESET:
			preset = optarg;
			break;
		case O_PROMPT:
			prompt_s = optarg;
			break;
		case O_DET:
			det = true;
			break;
		case O_IGNEOS:
			ignore_eos = true;
			break;
		case O_NOEARLY:
			early = false;
			break;
		case O_MSEED:
			bad |= !ds_cli_parse_long(optarg, 0, INT64_MAX, &mseed);
			break;
		case O_SEED:
			bad |= !ds_cli_parse_long(optarg, 0, INT64_MAX, &seed);
			has_seed = true;
			break;
		case O_MODE:
			bad |= ds_mode_parse(optarg, &eo.mode) != DS_OK;
			break;
		case O_MAXTOK:
			bad |= !ds_cli_parse_long(optarg, 1, INT_MAX, &v);
			max_tokens = (int)v;
			break;
		case O_TOPK:
			bad |= !ds_cli_parse_long(optarg, 0, INT_MAX, &v);
			sp.top_k = (int)v;
			break;
		case O_WIN:
			bad |= !ds_cli_parse_long(optarg, 1, 4096, &v);
			eo.window = (int)v;
			break;
		case O_GROUP:
			bad |= !ds_cli_parse_long(optarg, 1, 4096, &v);
			eo.group = (int)v;
			break;
		case O_KVB:
			bad |= !ds_cli_parse_long(optarg, 1, 1 << 24, &v);
			eo.kv_blocks = (int)v;
			break;
		case O_BS:
			bad |= !ds_cli_parse_long(optarg, 1, 1 << 16, &v);
			eo.kv_block_size = (int)v;
			break;
		case O_BG:
			bad |= !ds_cli_parse_long(optarg, 0, 4096, &v);
			background = (int)v;
			break;
		case O_THREADS:
			bad |= !ds_cli_parse_long(optarg, 0, 1024, &v);
			threads = (int)v;
			break;
		case O_PRECISION:
			bad |= ds_dtype_parse(optarg, &precision, NULL) != DS_OK;
			break;
		case O_TEMP:
			bad |= !ds_cli_parse_float(optarg, &sp.temperature);
			break;
		case O_TOPP:
			bad |= !ds_cli_parse_float(optarg, &sp.top_p);
			break;
		case O_MARGIN:
			bad |= !ds_cli_parse_float(optarg, &eo.margin_threshold);
			break;
		case O_INJECT:
			bad |= !ds_cli_parse_float(optarg, &f);
			eo.inject_mismatch = f;
			break;
		case O_HELP:
			usage(stdout);
			return 0;
		default:
			bad = 1;
		}
		if (bad) {
			fprintf(stderr, "detserve-gen: bad value for --%s\n", lo[c - O_MODEL].name);
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc || !prompt_s || (!model_path == !preset)) {
		usage(stderr);
		return 2;
	}
	int32_t *prompt = NULL;
	int n_prompt = parse_ids(prompt_s, &prompt);
	if (n_prompt < 0) {
		fprintf(stderr, "detserve-gen: --prompt-ids wants comma-separated token ids\n");
		return 2;
	}

	struct ds_err err = {{0}};
	struct ds_model *m = NULL;
	struct ds_backend be = {0};
	struct ds_engine *e = NULL;
	int rc = 1;
	enum ds_status rv;
	if (preset) {
		struct ds_model_config cfg;
		if (ds_model_preset(preset, &cfg) != DS_OK) {
			fprintf(stderr, "detserve-gen: unknown preset '%s'\n", preset);
			goto out;
		}
		if (precision != DS_DTYPE_BF16) {
			fprintf(stderr,
			        "detserve-gen: --precision %s needs --model (synthetic "
			        "presets are bf16)\n",
			        ds_dtype_name(precision));
			goto out;
		}
		rv = ds_model_synth(&cfg, (uint64_t)mseed, &m, &err);
	} else {
		rv = ds_model_load_as(model_path, precision, &m, &err);
	}
	/* the CPU backend needs host weights (a deferred synthetic model has none yet) */
	if (rv == DS_OK)
		rv = ds_model_materialize(m, &err);
	if (rv == DS_OK)
		rv = ds_backend_cpu_init(&be, m, threads, &err);
	if (rv == DS_OK)
		rv = ds_engine_init(&e, &be, &eo, &err);
	if (rv != DS_OK) {
		fprintf(stderr, "detserve-gen: %s: %s\n", ds_status_str(rv), err.msg);
		goto out;
	}
	sp.seed = (uint64_t)seed;
	struct ds_request_params p = {
	    .prompt = prompt,
	    .n_prompt = n_prompt,
	    .max_tokens = max_tokens,
	    .sampling = sp,
	    .has_seed = has_seed,
	    .ignore_eos = ignore_eos,
	    .deterministic = det,
	    .early_verify = early,
	    .return_logprobs = true,
	};
	uint64_t id;
	if ((rv = ds_engine_submit(e, &p, &id, &err)) != DS_OK) {
		fprintf(stderr, "detserve-gen: %s: %s\n", ds_status_str(rv), err.msg);
		goto out;
	}
	/* background traffic: random prompts, sampled, not deterministic */
	uint64_t h = ds_mix64((uint64_t)background * 7919u + 1);
	int vocab = m->cfg.vocab_size;
	for (int i = 0; i < background; i++) {
		int32_t bp[32];
		int bn = 1 + (int)((h = ds_mix64(h)) % 32);
		for (int k = 0; k < bn; k++)
			bp[k] = (int32_t)((h = ds_mix64(h)) % (uint64_t)vocab);
		struct ds_request_params q = {
		    .prompt = bp,
		    .n_prompt = bn,
		    .max_tokens = 1 + (int)((h = ds_mix64(h)) % 64),
		    .sampling = {.temperature = 0.8f, .top_p = 1.0f, .seed = h},
		    .has_seed = true,
		    .ignore_eos = true,
		};
		uint64_t bid;
		if (ds_engine_submit(e, &q, &bid, &err) != DS_OK)
			break; /* the pool or queue is full: enough traffic */
	}
	printf("tokens:");
	fflush(stdout);
	bool done = false;
	while (!done) {
		if ((rv = ds_engine_step(e, &err)) != DS_OK) {
			fprintf(stderr, "\ndetserve-gen: step: %s: %s\n", ds_status_str(rv),
			        err.msg);
			goto out;
		}
		struct ds_event *ev;
		while ((ev = ds_engine_poll(e)) != NULL) {
			if (ev->req_id == id) {
				for (int i = 0; i < ev->n_tokens; i++)
					printf(" %d", ev->tokens[i]);
				fflush(stdout);
				if (ev->final) {
					done = true;
					printf("\nfinish: %s%s%s\n", finish_name(ev->finish),
					       ev->error[0] ? " " : "", ev->error);
					printf("prompt_tokens: %d completion_tokens: %d\n",
					       ev->prompt_tokens, ev->completion_tokens);
					printf("seed: %" PRIu64 "\n", ev->seed);
					printf("deterministic: %s  mode: %s\n",
					       ev->deterministic ? "yes" : "no",
					       ds_mode_name(eo.mode));
					printf("fingerprint: %s\n",
					       ev->fingerprint[0] ? ev->fingerprint : "-");
					const struct ds_dvr_stats *d = &ev->dvr;
					printf("dvr: verify_passes=%" PRIu64 " windows=%" PRIu64
					       " rollbacks=%" PRIu64 " rolled_back=%" PRIu64
					       " recomputed=%" PRIu64 " committed=%" PRIu64
					       " recompute_ratio=%.3f\n",
					       d->verify_passes, d->windows, d->rollbacks,
					       d->rolled_back, d->recomputed, d->committed,
					       d->committed
					           ? (double)d->recomputed / (double)d->committed
					           : 0.0);
					rc = ev->finish == DS_FINISH_ERROR ? 1 : 0;
				}
			}
			ds_event_free(ev);
		}
	}
	/* let the background finish so the engine statistics are complete */
	while (!ds_engine_idle(e) && ds_engine_step(e, &err) == DS_OK)
		while (ds_engine_poll(e) != NULL) {
		}
	struct ds_engine_stats st;
	ds_engine_get_stats(e, &st);
	printf("engine: steps=%" PRIu64 " ref_forward_calls=%" PRIu64 " fast_forward_calls=%" PRIu64
	       " preemptions=%" PRIu64 " prefix_hit_tokens=%" PRIu64 "\n",
	       st.steps, st.ref_forward_calls, st.fast_forward_calls, st.preemptions,
	       st.prefix_hit_tokens);
out:
	ds_engine_free(e);
	ds_backend_free(&be);
	ds_model_free(m);
	free(prompt);
	return rc;
}
