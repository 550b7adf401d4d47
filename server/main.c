/* main.c - the detserve binary: parse flags / config file, load or synthesise the model,
 * start the backend and the engine thread, then serve gRPC until SIGTERM/SIGINT has
 * drained. The only place that calls exit codes: 0 after a graceful stop, 1 on startup
 * errors, 2 on bad flags. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "config.h"
#include "engine.h"
#include "model.h"
#include "server.h"
#include "chat_template.h"
#include "tokenizer.h"

#define LOG(lvl, ...) ds_log(cfg.log_level, (lvl), __VA_ARGS__)

static enum ds_status model_open(const struct ds_server_config *cfg, struct ds_model **out,
                                 struct ds_err *err)
{
	enum ds_status rv;
	if (cfg->model[0]) {
		ds_log(cfg->log_level, DS_LOG_INFO, "loading model %s", cfg->model);
		enum ds_dtype wtype;
		if ((rv = ds_dtype_parse(cfg->precision, &wtype, err)) != DS_OK)
			return rv;
		return ds_model_load_as(cfg->model, wtype, out, err);
	}
	struct ds_model_config mc;
	if (ds_model_preset(cfg->preset, &mc) != DS_OK)
		return ds_errf(err, DS_ERR_NOT_FOUND, "--preset '%s' is not tiny|small|llama3-8b",
		               cfg->preset);
	ds_log(cfg->log_level, DS_LOG_INFO, "synthesising model preset=%s seed=%llu", cfg->preset,
	       (unsigned long long)cfg->seed);
	if ((rv = ds_model_synth(&mc, cfg->seed, out, err)) != DS_OK)
		return rv;
	if (strcmp(cfg->backend, "cpu") == 0 && (*out)->deferred) {
		ds_log(cfg->log_level, DS_LOG_INFO, "materialising synthetic weights on the host");
		return ds_model_materialize(*out, err);
	}
	return DS_OK;
}

/* --tokenizer: auto uses the model's own (tokenizer.json or GGUF metadata); synthetic presets
 * and model directories without one serve token ids only unless --tokenizer bytelevel. */
static enum ds_status tokenizer_open(const struct ds_server_config *cfg, const struct ds_model *m,
                                     struct ds_tokenizer **out, struct ds_err *err)
{
	const char *t = cfg->tokenizer;
	*out = NULL;
	if (!strcmp(t, "none") || (!strcmp(t, "auto") && !cfg->model[0]))
		return DS_OK;
	if (!strcmp(t, "bytelevel"))
		return ds_tokenizer_init_bytelevel(&m->cfg, out, err);
	enum ds_status rv = ds_tokenizer_load(strcmp(t, "auto") ? t : cfg->model, out, err);
	if (rv == DS_ERR_IO && !strcmp(t, "auto")) {
		ds_log(cfg->log_level, DS_LOG_INFO, "no tokenizer with %s (%s): token ids only",
		       cfg->model, err->msg);
		return DS_OK;
	}
	int tv = rv == DS_OK ? ds_tokenizer_vocab_size(*out) : 0;
	if (tv > m->cfg.vocab_size) {
		ds_tokenizer_free(*out);
		*out = NULL;
		return ds_errf(err, DS_ERR_INVALID,
		               "tokenizer has %d ids but the model's vocab is %d", tv,
		               m->cfg.vocab_size);
	}
	return rv;
}

int main(int argc, char **argv)
{
	struct ds_server_config cfg;
	struct ds_err err = {{0}};
	struct ds_model *model = NULL;
	struct ds_backend be;
	bool be_ok = false;
	struct ds_engine *engine = NULL;
	struct event_base *base = NULL;
	struct ds_server *srv = NULL;
	struct ds_tokenizer *tok = NULL;
	struct ds_chat_template chat;
	bool have_chat = false;
	bool help, version;
	int code = 1;

	ds_server_config_default(&cfg);
	if (ds_server_config_parse(&cfg, argc - 1, argv + 1, &help, &version, &err) != DS_OK) {
		fprintf(stderr, "detserve: %s\n", err.msg);
		return 2;
	}
	if (help) {
		fputs(ds_server_config_usage(), stdout);
		return 0;
	}
	if (version) {
		printf("detserve %s\n", DS_VERSION);
		return 0;
	}
	enum ds_mode mode;
	if (ds_mode_parse(cfg.mode, &mode) != DS_OK) {
		fprintf(stderr, "detserve: --mode '%s' is not fast|dvr|invariant|ref-only\n",
		        cfg.mode);
		return 2;
	}
	enum ds_step_policy step_policy;
	if (ds_step_policy_parse(cfg.step_policy, &step_policy) != DS_OK) {
		fprintf(stderr, "detserve: --step-policy '%s' is not auto|merge|split\n",
		        cfg.step_policy);
		return 2;
	}
	enum ds_admit_policy admit;
	if (ds_admit_policy_parse(cfg.admit, &admit) != DS_OK) {
		fprintf(stderr, "detserve: --admit '%s' is not fcfs|det-first\n", cfg.admit);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);

	uint64_t t0 = 0;
	{
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		t0 = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
	}
	if (model_open(&cfg, &model, &err) != DS_OK) {
		LOG(DS_LOG_ERROR, "model: %s", err.msg);
		goto out;
	}
	if (tokenizer_open(&cfg, model, &tok, &err) != DS_OK) {
		LOG(DS_LOG_ERROR, "tokenizer: %s", err.msg);
		goto out;
	}
	if (tok && cfg.model[0]) {
		struct ds_err cerr = {{0}};
		have_chat = ds_chat_template_load(&chat, cfg.model, &cerr) == DS_OK;
		if (!have_chat)
			LOG(DS_LOG_INFO, "no chat template (%s): messages requests are refused",
			    cerr.msg);
	}
	memset(&be, 0, sizeof(be));
	enum ds_status rv;
	if (strcmp(cfg.backend, "cuda") == 0) {
		/* DS_ERR_UNSUPPORTED from the stub in builds without CUDA */
		rv = ds_backend_cuda_init(&be, model, cfg.device, &err);
	} else {
		rv = ds_backend_cpu_init(&be, model, cfg.threads, &err);
	}
	if (rv != DS_OK) {
		LOG(DS_LOG_ERROR, "backend %s: %s", cfg.backend, err.msg);
		goto out;
	}
	be_ok = true;

	struct ds_engine_opts eo;
	ds_engine_opts_default(&eo);
	eo.mode = mode;
	eo.window = cfg.window;
	eo.group = cfg.group;
	eo.margin_threshold = (float)cfg.margin;
	eo.inject_mismatch = cfg.inject_mismatch;
	eo.kv_block_size = cfg.kv_block_size;
	eo.kv_blocks = cfg.kv_blocks;
	eo.max_step_tokens = cfg.max_step_tokens;
	eo.max_running = cfg.max_running;
	eo.max_queue = cfg.max_queue;
	eo.prefix_cache = !cfg.no_prefix_cache;
	eo.step_policy = step_policy;
	eo.admit_policy = admit;
	/* On the CUDA backend the auto policy runs every step that holds a deterministic request
	 * on REF unless told otherwise: on the H200 (llama3-8b, 1024 x 512 in / 256 out) that
	 * measured 0.950 / 0.947 / 0.944 of fast at 10 / 50 / 100% deterministic, against
	 * 0.942-0.954 / 0.883-0.929 / 0.895 with the per-step cost rule (bias 1), whose FAST
	 * steps pay for windows, rollbacks and the steps they add, which it does not see
	 * (bench/results/gpu-20261130-1f3893d-bias0, gpu-20261130-b390086-wait,
	 * gpu-20261130-d858f75-narrow) */
	eo.ref_step_bias = cfg.ref_step_bias >= 0.0           ? cfg.ref_step_bias
	                   : strcmp(cfg.backend, "cuda") == 0 ? 0.0
	                                                      : 1.0;
	eo.window_auto = !cfg.no_window_auto;
	/* graphs and GEMM autotuning at start-up, not on the first requests */
	eo.warmup = strcmp(cfg.backend, "cuda") == 0;
	if (ds_engine_init(&engine, &be, &eo, &err) != DS_OK) {
		LOG(DS_LOG_ERROR, "engine: %s", err.msg);
		goto out;
	}
	if (ds_engine_start(engine, &err) != DS_OK) {
		LOG(DS_LOG_ERROR, "engine: %s", err.msg);
		goto out;
	}

	struct ds_rpc_info info;
	memset(&info, 0, sizeof(info));
	info.cfg = &model->cfg;
	ds_model_identity_hex(model, info.identity);
	snprintf(info.source, sizeof(info.source), "%s", model->source);
	info.mode = mode;
	info.window = cfg.window;
	info.group = cfg.group;
	info.kv_blocks = cfg.kv_blocks;
	info.kv_block_size = cfg.kv_block_size;
	info.step_policy = step_policy;
	info.admit_policy = admit;
	ds_backend_describe(&be, info.backend, sizeof(info.backend));

	if (!(base = event_base_new())) {
		LOG(DS_LOG_ERROR, "cannot create the event loop");
		goto out;
	}
	if (ds_server_init(&srv, base, &cfg, engine, &info, tok, have_chat ? &chat : NULL, &err) !=
	    DS_OK) {
		LOG(DS_LOG_ERROR, "server: %s", err.msg);
		goto out;
	}
	{
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		uint64_t t1 = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
		LOG(DS_LOG_INFO,
		    "ready in %llu ms: model=%s identity=%s backend=%s mode=%s W=%d G=%d "
		    "tokenizer=%s",
		    (unsigned long long)(t1 - t0), info.source, info.identity, info.backend,
		    ds_mode_name(mode), cfg.window, cfg.group,
		    tok ? (have_chat ? "yes+chat" : "yes") : "none");
	}
	if (ds_server_run(srv, &err) != DS_OK) {
		LOG(DS_LOG_ERROR, "server: %s", err.msg);
		goto out;
	}
	code = 0;
	LOG(DS_LOG_INFO, "stopped");
out:
	ds_server_free(srv);
	if (engine) {
		ds_engine_stop(engine);
		ds_engine_free(engine);
	}
	if (base)
		event_base_free(base);
	if (be_ok)
		ds_backend_free(&be);
	ds_tokenizer_free(tok);
	ds_model_free(model);
	return code;
}
