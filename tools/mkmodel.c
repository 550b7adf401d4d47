/* mkmodel.c - detserve-mkmodel: writes a seeded synthetic model as an HF directory.
 *
 * A thin main over ds_model_write_hf (model/hf.h), which holds all the writing logic so tests
 * and other tools produce the very same bytes. The llama3-8b preset (16 GB in bf16) is written
 * deferred by default: config.json + detserve_synth.json only, its weights generated where they
 * are used; --materialize writes the safetensors anyway. */
#include "hf.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

static void usage(FILE *fp)
{
	fprintf(fp, "usage: detserve-mkmodel --preset tiny|small|llama3-8b --out DIR [options]\n"
	            "  --seed N            generator seed (default 1; must be < 2^63)\n"
	            "  --dtype bf16|f16|f32  file dtype (default bf16)\n"
	            "  --shards K          write K shards + model.safetensors.index.json\n"
	            "  --tie               tie lm_head to the embedding\n"
	            "  --arch llama|qwen2|qwen3|mistral  (default llama)\n"
	            "  --hidden --layers --heads --kv-heads --head-dim --ffn --vocab --max-pos N\n"
	            "                      override the preset's shape\n"
	            "  --materialize       write the weights even for llama3-8b (16 GB)\n");
}

static int parse_int(const char *opt, const char *s, int *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || *end || end == s || v <= 0 || v > INT_MAX) {
		fprintf(stderr, "detserve-mkmodel: %s needs a positive integer, got '%s'\n", opt,
		        s);
		return -1;
	}
	*out = (int)v;
	return 0;
}

enum {
	OPT_HIDDEN = 256,
	OPT_LAYERS,
	OPT_HEADS,
	OPT_KV_HEADS,
	OPT_HEAD_DIM,
	OPT_FFN,
	OPT_VOCAB,
	OPT_MAX_POS,
	OPT_MATERIALIZE
};

int main(int argc, char **argv)
{
	static const struct option long_opts[] = {
	    {"preset", required_argument, NULL, 'p'},
	    {"seed", required_argument, NULL, 's'},
	    {"out", required_argument, NULL, 'o'},
	    {"dtype", required_argument, NULL, 'd'},
	    {"shards", required_argument, NULL, 'k'},
	    {"tie", no_argument, NULL, 't'},
	    {"arch", required_argument, NULL, 'a'},
	    {"help", no_argument, NULL, 'h'},
	    {"hidden", required_argument, NULL, OPT_HIDDEN},
	    {"layers", required_argument, NULL, OPT_LAYERS},
	    {"heads", required_argument, NULL, OPT_HEADS},
	    {"kv-heads", required_argument, NULL, OPT_KV_HEADS},
	    {"head-dim", required_argument, NULL, OPT_HEAD_DIM},
	    {"ffn", required_argument, NULL, OPT_FFN},
	    {"vocab", required_argument, NULL, OPT_VOCAB},
	    {"max-pos", required_argument, NULL, OPT_MAX_POS},
	    {"materialize", no_argument, NULL, OPT_MATERIALIZE},
	    {NULL, 0, NULL, 0},
	};
	const char *preset = NULL, *out = NULL, *arch = "llama";
	uint64_t seed = 1;
	bool tie = false, materialize = false;
	struct ds_hf_write_opts opts = {.dtype = DS_HF_BF16, .n_shards = 1};
	/* overrides, applied after the preset; 0 = keep */
	int hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, vocab = 0,
	    max_pos = 0;
	int c, bad = 0;
	while ((c = getopt_long(argc, argv, "", long_opts, NULL)) != -1) {
		switch (c) {
		case 'p':
			preset = optarg;
			break;
		case 'o':
			out = optarg;
			break;
		case 'a':
			arch = optarg;
			break;
		case 't':
			tie = true;
			break;
		case OPT_MATERIALIZE:
			materialize = true;
			break;
		case 's': {
			char *end;
			errno = 0;
			unsigned long long v = strtoull(optarg, &end, 10);
			if (errno || *end || end == optarg || optarg[0] == '-' || v > INT64_MAX) {
				fprintf(stderr,
				        "detserve-mkmodel: --seed needs an integer in [0, 2^63)\n");
				bad = 1;
			}
			seed = v;
			break;
		}
		case 'd':
			if (strcmp(optarg, "bf16") == 0)
				opts.dtype = DS_HF_BF16;
			else if (strcmp(optarg, "f16") == 0)
				opts.dtype = DS_HF_F16;
			else if (strcmp(optarg, "f32") == 0)
				opts.dtype = DS_HF_F32;
			else {
				fprintf(stderr, "detserve-mkmodel: unknown --dtype %s\n", optarg);
				bad = 1;
			}
			break;
		case 'k':
			bad |= parse_int("--shards", optarg, &opts.n_shards) != 0;
			break;
		case OPT_HIDDEN:
			bad |= parse_int("--hidden", optarg, &hidden) != 0;
			break;
		case OPT_LAYERS:
			bad |= parse_int("--layers", optarg, &layers) != 0;
			break;
		case OPT_HEADS:
			bad |= parse_int("--heads", optarg, &heads) != 0;
			break;
		case OPT_KV_HEADS:
			bad |= parse_int("--kv-heads", optarg, &kv_heads) != 0;
			break;
		case OPT_HEAD_DIM:
			bad |= parse_int("--head-dim", optarg, &head_dim) != 0;
			break;
		case OPT_FFN:
			bad |= parse_int("--ffn", optarg, &ffn) != 0;
			break;
		case OPT_VOCAB:
			bad |= parse_int("--vocab", optarg, &vocab) != 0;
			break;
		case OPT_MAX_POS:
			bad |= parse_int("--max-pos", optarg, &max_pos) != 0;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			bad = 1;
		}
	}
	if (bad || !preset || !out || optind != argc) {
		usage(stderr);
		return 2;
	}
	struct ds_model_config cfg;
	if (ds_model_preset(preset, &cfg) != DS_OK) {
		fprintf(stderr, "detserve-mkmodel: unknown preset %s (tiny, small, llama3-8b)\n",
		        preset);
		return 2;
	}
	if (ds_hf_config_set_arch(&cfg, arch) != DS_OK) {
		fprintf(stderr,
		        "detserve-mkmodel: unknown --arch %s (llama, qwen2, qwen3, mistral)\n",
		        arch);
		return 2;
	}
	cfg.tie_embeddings = tie;
	if (hidden)
		cfg.hidden = hidden;
	if (layers)
		cfg.n_layer = layers;
	if (heads)
		cfg.n_head = heads;
	if (kv_heads)
		cfg.n_kv_head = kv_heads;
	if (head_dim)
		cfg.head_dim = head_dim;
	else if (hidden || heads) /* keep head_dim = hidden / heads unless told otherwise */
		cfg.head_dim = cfg.n_head > 0 ? cfg.hidden / cfg.n_head : 0;
	if (ffn)
		cfg.ffn = ffn;
	if (vocab)
		cfg.vocab_size = vocab;
	if (max_pos)
		cfg.max_pos = max_pos;
	if (cfg.rope_scaling == DS_ROPE_LLAMA3 && cfg.rope_orig_max_pos > cfg.max_pos)
		cfg.rope_orig_max_pos = cfg.max_pos;
	opts.deferred = strcmp(preset, "llama3-8b") == 0 && !materialize;

	struct ds_err err = {{0}};
	enum ds_status rv = ds_model_write_hf(&cfg, seed, out, &opts, &err);
	if (rv != DS_OK) {
		fprintf(stderr, "detserve-mkmodel: %s (%s)\n", err.msg, ds_status_str(rv));
		return 1;
	}

	/* ---- tokenizer.json: the tokenizer's writer call goes here (tokenizer owner) ----
	 * The model directory is complete at this point; write the tokenizer files into `out`
	 * for cfg.vocab_size / cfg.bos_id / cfg.eos_ids and return 1 on failure. */

	printf("detserve-mkmodel: wrote %s (%s, seed %" PRIu64 ", %s%s)\n", out, cfg.arch, seed,
	       opts.deferred ? "deferred weights" : "weights",
	       opts.deferred ? "" : (opts.n_shards > 1 ? ", sharded" : ""));
	return 0;
}
