/* rpc.c - method table, GenerateRequest validation and mapping to ds_request_params, and
 * response encoding for detserve.v1 and grpc.health.v1 (see rpc.h). */
#include "rpc.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "detserve.pb-c.h"
#include "health.pb-c.h"
#include "chat_template.h"
#include "tokenizer.h"

static const struct {
	const char *path;
	enum ds_rpc_method m;
} methods[] = {
    {"/detserve.v1.Detserve/Generate", DS_RPC_GENERATE},
    {"/detserve.v1.Detserve/GenerateUnary", DS_RPC_GENERATE_UNARY},
    {"/detserve.v1.Detserve/ServerInfo", DS_RPC_SERVER_INFO},
    {"/grpc.health.v1.Health/Check", DS_RPC_HEALTH_CHECK},
};

enum ds_rpc_method ds_rpc_method_lookup(const char *path, size_t len)
{
	for (size_t i = 0; i < DS_ARRAY_LEN(methods); i++)
		if (strlen(methods[i].path) == len && memcmp(methods[i].path, path, len) == 0)
			return methods[i].m;
	return DS_RPC_UNKNOWN;
}

const char *ds_rpc_method_name(enum ds_rpc_method m)
{
	switch (m) {
	case DS_RPC_GENERATE:
		return "Generate";
	case DS_RPC_GENERATE_UNARY:
		return "GenerateUnary";
	case DS_RPC_SERVER_INFO:
		return "ServerInfo";
	case DS_RPC_HEALTH_CHECK:
		return "Health.Check";
	default:
		return "unknown";
	}
}

enum ds_grpc_code ds_rpc_code_from_status(enum ds_status s)
{
	switch (s) {
	case DS_OK:
		return DS_GRPC_OK;
	case DS_ERR_INVALID:
		return DS_GRPC_INVALID_ARGUMENT;
	case DS_ERR_TOO_LONG:
		return DS_GRPC_INVALID_ARGUMENT;
	case DS_ERR_FULL:
		return DS_GRPC_RESOURCE_EXHAUSTED;
	case DS_ERR_NOMEM:
		return DS_GRPC_RESOURCE_EXHAUSTED;
	case DS_ERR_PRECONDITION:
		return DS_GRPC_FAILED_PRECONDITION;
	case DS_ERR_UNSUPPORTED:
		return DS_GRPC_UNIMPLEMENTED;
	case DS_ERR_NOT_FOUND:
		return DS_GRPC_NOT_FOUND;
	case DS_ERR_CANCELLED:
		return DS_GRPC_CANCELLED;
	case DS_ERR_FORMAT:
		return DS_GRPC_INVALID_ARGUMENT;
	default:
		return DS_GRPC_INTERNAL;
	}
}

__attribute__((format(printf, 4, 5))) static enum ds_grpc_code
fail(enum ds_grpc_code c, char *errbuf, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(errbuf, errlen, fmt, ap);
	va_end(ap);
	return c;
}

void ds_rpc_gen_free(struct ds_rpc_gen *g)
{
	free(g->prompt);
	free(g->stop_ids);
	for (int i = 0; g->stop_seqs && i < g->params.n_stop_seqs; i++)
		free(g->stop_seqs[i]);
	free(g->stop_seqs);
	free(g->stop_seq_lens);
	memset(g, 0, sizeof(*g));
}

/* Encodes text with the tokenizer; FAILED_PRECONDITION without one. add_special adds what
 * the tokenizer's post-processor asks for (BOS) to prompts, not to stop strings. */
static enum ds_grpc_code encode_text(const struct ds_rpc_env *env, const char *what,
                                     const char *text, bool add_special, int32_t **ids, int *n,
                                     char *errbuf, size_t errlen)
{
	struct ds_err e = {{0}};
	size_t nn = 0;
	if (!env->tok)
		return fail(DS_GRPC_FAILED_PRECONDITION, errbuf, errlen,
		            "%s needs a tokenizer and this model has none: send token ids", what);
	if (ds_tokenizer_encode(env->tok, text, strlen(text), add_special, ids, &nn, &e) != DS_OK)
		return fail(DS_GRPC_INVALID_ARGUMENT, errbuf, errlen, "%s: %s", what, e.msg);
	if (nn > (size_t)INT32_MAX)
		return fail(DS_GRPC_INVALID_ARGUMENT, errbuf, errlen, "%s: too many tokens", what);
	*n = (int)nn;
	return DS_GRPC_OK;
}

/* Renders chat messages with the model's template (plus the assistant header) and tokenizes
 * the text; the template writes any BOS itself, so no specials are added. */
static enum ds_grpc_code chat_prompt(const struct ds_rpc_env *env,
                                     const Detserve__V1__ChatMessages *cm, struct ds_rpc_gen *g,
                                     char *errbuf, size_t errlen)
{
	struct ds_err e = {{0}};
	char *text = NULL;
	if (!env->chat || !env->tok)
		return fail(
		    DS_GRPC_FAILED_PRECONDITION, errbuf, errlen,
		    "messages: this model has no chat template; send prompt_ids or prompt_text");
	if (!cm || cm->n_messages == 0)
		return fail(DS_GRPC_INVALID_ARGUMENT, errbuf, errlen, "messages is empty");
	if (cm->n_messages > 4096)
		return fail(DS_GRPC_INVALID_ARGUMENT, errbuf, errlen, "messages: more than 4096");
	struct ds_chat_msg *msgs = calloc(cm->n_messages, sizeof(*msgs));
	if (!msgs)
		return fail(DS_GRPC_RESOURCE_EXHAUSTED, errbuf, errlen, "out of memory");
	for (size_t i = 0; i < cm->n_messages; i++) {
		msgs[i].role = cm->messages[i]->role;
		msgs[i].content = cm->messages[i]->content;
	}
	enum ds_status rv =
	    ds_chat_render(env->chat, msgs, (int)cm->n_messages, true, &text, NULL, &e);
	free(msgs);
	if (rv != DS_OK)
		return fail(ds_rpc_code_from_status(rv), errbuf, errlen, "messages: %s", e.msg);
	enum ds_grpc_code c = encode_text(env, "messages", text, false, &g->prompt,
	                                  &g->params.n_prompt, errbuf, errlen);
	free(text);
	if (c == DS_GRPC_OK && g->params.n_prompt > env->cfg->max_pos)
		c = fail(DS_GRPC_INVALID_ARGUMENT, errbuf, errlen,
		         "messages: prompt of %d tokens is longer than the context (%d)",
		         g->params.n_prompt, env->cfg->max_pos);
	return c;
}

static enum ds_grpc_code gen_fill(const struct ds_rpc_env *env,
                                  const Detserve__V1__GenerateRequest *rq, struct ds_rpc_gen *g,
                                  char *errbuf, size_t errlen)
{
	const struct ds_model_config *cfg = env->cfg;
	struct ds_request_params *p = &g->params;
	enum ds_grpc_code c;

	/* prompt */
	switch (rq->prompt_case) {
	case DETSERVE__V1__GENERATE_REQUEST__PROMPT_PROMPT_IDS: {
		size_t n = rq->prompt_ids->n_ids;
		if (n == 0)
			break;
		if (n > (size_t)cfg->max_pos)
			return fail(
			    DS_GRPC_INVALID_ARGUMENT, errbuf, errlen,
			    "prompt_ids: prompt of %zu tokens is longer than the context (%d)", n,
			    cfg->max_pos);
		if (!(g->prompt = malloc(n * sizeof(int32_t))))
			return fail(DS_GRPC_RESOURCE_EXHAUSTED, errbuf, errlen, "out of memory");
		memcpy(g->prompt, rq->prompt_ids->ids, n * sizeof(int32_t));
		p->n_prompt = (int)n;
		break;
	}
	case DETSERVE__V1__GENERATE_REQUEST__PROMPT_PROMPT_TEXT:
		if (!rq->prompt_text[0])
			break;
		c = encode_text(env, "prompt_text", rq->prompt_text, true, &g->prompt, &p->n_prompt,
		                errbuf, errlen);
		if (c != DS_GRPC_OK)
			return c;
		if (p->n_prompt > cfg->max_pos)
			return fail(
			    DS_GRPC_INVALID_ARGUMENT, errbuf, errlen,
			    "prompt_text: prompt of %d tokens is longer than the context (%d)",
			    p->n_prompt, cfg->max_pos);
		break;
	case DETSERVE__V1__GENERATE_REQUEST__PROMPT_MESSAGES:
		c = chat_prompt(env, rq->messages, g, errbuf, errlen);
		if (c != DS_GRPC_OK)
			return c;
		break;
	default:
		break;
	}
	if (p->n_prompt == 0)
		return fail(DS_GRPC_INVALID_ARGUMENT, errbuf, errlen,
		            "prompt is empty: set prompt_ids (or prompt_text with a tokenizer)");
	for (int i = 0; i < p->n_prompt; i++)
		if (g->prompt[i] < 0 || g->prompt[i] >= cfg->vocab_size)
			return fail(DS_GRPC_INVALID_ARGUMENT, errbuf, errlen,
			            "prompt_ids[%d] = %d is outside the vocabulary [0, %d)", i,
			            (int)g->prompt[i], cfg->vocab_size);
	p->prompt = g->prompt;

	if (rq->max_tokens <= 0)
		return fail(DS_GRPC_INVALID_ARGUMENT, errbuf, errlen,
		            "max_tokens must be > 0 (got %d)", (int)rq->max_tokens);
	p->max_tokens = rq->max_tokens;

	/* sampling */
	p->sampling.temperature = 0.0f;
	p->sampling.top_k = 0;
	p->sampling.top_p = 1.0f;
	const Detserve__V1__SamplingParams *sp = rq->sampling;
	if (sp) {
		if (!(sp->temperature >= 0.0f) || isinf(sp->temperature))
			return fail(DS_GRPC_INVALID_ARGUMENT, errbuf, errlen,
			            "sampling.temperature must be a finite number >= 0 (got %g)",
			            (double)sp->temperature);
		if (sp->top_k < 0)
			return fail(DS_GRPC_INVALID_ARGUMENT, errbuf, errlen,
			            "sampling.top_k must be >= 0 (got %d)", (int)sp->top_k);
		p->sampling.temperature = sp->temperature;
		p->sampling.top_k = sp->top_k;
		if (sp->top_p_opt_case == DETSERVE__V1__SAMPLING_PARAMS__TOP_P_OPT_TOP_P) {
			if (!(sp->top_p > 0.0f && sp->top_p <= 1.0f))
				return fail(DS_GRPC_INVALID_ARGUMENT, errbuf, errlen,
				            "sampling.top_p must be in (0, 1] (got %g)",
				            (double)sp->top_p);
			p->sampling.top_p = sp->top_p;
		}
		if (sp->seed_opt_case == DETSERVE__V1__SAMPLING_PARAMS__SEED_OPT_SEED) {
			p->sampling.seed = sp->seed;
			p->has_seed = true;
		}
	}

	/* stop conditions */
	if (rq->n_stop_token_ids > 0) {
		if (!(g->stop_ids = malloc(rq->n_stop_token_ids * sizeof(int32_t))))
			return fail(DS_GRPC_RESOURCE_EXHAUSTED, errbuf, errlen, "out of memory");
		for (size_t i = 0; i < rq->n_stop_token_ids; i++) {
			int32_t id = rq->stop_token_ids[i];
			if (id < 0 || id >= cfg->vocab_size)
				return fail(
				    DS_GRPC_INVALID_ARGUMENT, errbuf, errlen,
				    "stop_token_ids[%zu] = %d is outside the vocabulary [0, %d)", i,
				    (int)id, cfg->vocab_size);
			g->stop_ids[i] = id;
		}
		p->stop_ids = g->stop_ids;
		p->n_stop_ids = (int)rq->n_stop_token_ids;
	}
	if (rq->n_stop > 0) {
		if (!env->tok)
			return fail(DS_GRPC_FAILED_PRECONDITION, errbuf, errlen,
			            "stop strings need a tokenizer and this model has none: use "
			            "stop_token_ids");
		g->stop_seqs = calloc(rq->n_stop, sizeof(*g->stop_seqs));
		g->stop_seq_lens = calloc(rq->n_stop, sizeof(int));
		if (!g->stop_seqs || !g->stop_seq_lens)
			return fail(DS_GRPC_RESOURCE_EXHAUSTED, errbuf, errlen, "out of memory");
		for (size_t i = 0; i < rq->n_stop; i++) {
			if (!rq->stop[i][0])
				return fail(DS_GRPC_INVALID_ARGUMENT, errbuf, errlen,
				            "stop[%zu] is empty", i);
			c = encode_text(env, "stop", rq->stop[i], false, &g->stop_seqs[i],
			                &g->stop_seq_lens[i], errbuf, errlen);
			p->n_stop_seqs = (int)i + 1; /* so ds_rpc_gen_free frees what exists */
			if (c != DS_GRPC_OK)
				return c;
			if (g->stop_seq_lens[i] == 0)
				return fail(DS_GRPC_INVALID_ARGUMENT, errbuf, errlen,
				            "stop[%zu] encodes to no tokens", i);
		}
		p->stop_seqs = (const int32_t *const *)g->stop_seqs;
		p->stop_seq_lens = g->stop_seq_lens;
	}

	if (rq->deterministic && env->mode == DS_MODE_FAST)
		return fail(DS_GRPC_FAILED_PRECONDITION, errbuf, errlen,
		            "deterministic requests are not served in fast mode (start the server "
		            "with --mode dvr)");
	p->deterministic = rq->deterministic;
	p->early_verify = rq->early_verify_opt_case ==
	                          DETSERVE__V1__GENERATE_REQUEST__EARLY_VERIFY_OPT_EARLY_VERIFY
	                      ? rq->early_verify
	                      : true;
	p->return_logprobs = rq->return_logprobs;
	p->ignore_eos = rq->ignore_eos;
	if (strlen(rq->request_id) >= sizeof(g->request_id))
		return fail(DS_GRPC_INVALID_ARGUMENT, errbuf, errlen,
		            "request_id is longer than %zu bytes", sizeof(g->request_id) - 1);
	snprintf(g->request_id, sizeof(g->request_id), "%s", rq->request_id);
	return DS_GRPC_OK;
}

enum ds_grpc_code ds_rpc_gen_decode(const struct ds_rpc_env *env, const uint8_t *msg, size_t len,
                                    struct ds_rpc_gen *out, char *errbuf, size_t errlen)
{
	memset(out, 0, sizeof(*out));
	Detserve__V1__GenerateRequest *rq =
	    detserve__v1__generate_request__unpack(env->alloc, len, msg);
	if (!rq)
		return fail(DS_GRPC_INVALID_ARGUMENT, errbuf, errlen,
		            "malformed GenerateRequest (%zu bytes): protobuf decoding failed", len);
	enum ds_grpc_code c = gen_fill(env, rq, out, errbuf, errlen);
	detserve__v1__generate_request__free_unpacked(rq, env->alloc);
	if (c != DS_GRPC_OK)
		ds_rpc_gen_free(out);
	return c;
}

/* ---- encoding ---- */

static enum ds_status pack_framed(const ProtobufCMessage *m, struct ds_rpc_buf *out)
{
	size_t n = protobuf_c_message_get_packed_size(m);
	out->len = 0;
	if (n > UINT32_MAX || !(out->data = malloc(n + 5)))
		return DS_ERR_NOMEM;
	ds_grpc_frame_prefix(out->data, (uint32_t)n);
	protobuf_c_message_pack(m, out->data + 5);
	out->len = n + 5;
	return DS_OK;
}

static Detserve__V1__FinishReason finish_reason(enum ds_finish f)
{
	switch (f) {
	case DS_FINISH_LENGTH:
		return DETSERVE__V1__FINISH_REASON__FINISH_REASON_LENGTH;
	case DS_FINISH_EOS:
		return DETSERVE__V1__FINISH_REASON__FINISH_REASON_STOP;
	case DS_FINISH_STOP_SEQ:
		return DETSERVE__V1__FINISH_REASON__FINISH_REASON_STOP_SEQUENCE;
	case DS_FINISH_CANCELLED:
		return DETSERVE__V1__FINISH_REASON__FINISH_REASON_CANCELLED;
	default:
		return DETSERVE__V1__FINISH_REASON__FINISH_REASON_UNSPECIFIED;
	}
}

enum ds_status ds_rpc_gen_encode(const int32_t *tokens, const float *logprobs, int n,
                                 const char *text, const struct ds_event *fin,
                                 const char *request_id, struct ds_rpc_buf *out)
{
	Detserve__V1__GenerateResponse r = DETSERVE__V1__GENERATE_RESPONSE__INIT;
	Detserve__V1__Usage usage = DETSERVE__V1__USAGE__INIT;
	Detserve__V1__DvrStats dvr = DETSERVE__V1__DVR_STATS__INIT;
	char fp[33];

	r.n_token_ids = (size_t)n;
	r.token_ids = (int32_t *)tokens;
	if (logprobs) {
		r.n_logprobs = (size_t)n;
		r.logprobs = (float *)logprobs;
	}
	if (text)
		r.text = (char *)text;
	if (request_id)
		r.request_id = (char *)request_id;
	if (fin) {
		r.final = true;
		r.finish_reason = finish_reason(fin->finish);
		usage.prompt_tokens = fin->prompt_tokens;
		usage.completion_tokens = fin->completion_tokens;
		r.usage = &usage;
		r.seed = fin->seed;
		r.deterministic = fin->deterministic;
		if (fin->deterministic) {
			snprintf(fp, sizeof(fp), "%s", fin->fingerprint);
			r.fingerprint = fp;
			dvr.verify_passes = fin->dvr.verify_passes;
			dvr.windows = fin->dvr.windows;
			dvr.rollbacks = fin->dvr.rollbacks;
			dvr.rolled_back_tokens = fin->dvr.rolled_back;
			dvr.recomputed_tokens = fin->dvr.recomputed;
			r.dvr = &dvr;
		}
	}
	return pack_framed(&r.base, out);
}

enum ds_grpc_code ds_rpc_info_reply(const struct ds_rpc_info *info, const uint8_t *msg, size_t len,
                                    struct ds_rpc_buf *out, char *errbuf, size_t errlen)
{
	Detserve__V1__ServerInfoRequest *rq =
	    detserve__v1__server_info_request__unpack(NULL, len, msg);
	if (!rq)
		return fail(DS_GRPC_INVALID_ARGUMENT, errbuf, errlen,
		            "malformed ServerInfoRequest");
	detserve__v1__server_info_request__free_unpacked(rq, NULL);

	const struct ds_model_config *c = info->cfg;
	Detserve__V1__ModelInfo mi = DETSERVE__V1__MODEL_INFO__INIT;
	mi.architecture = (char *)c->arch;
	mi.vocab_size = c->vocab_size;
	mi.hidden_size = c->hidden;
	mi.num_layers = c->n_layer;
	mi.num_heads = c->n_head;
	mi.num_kv_heads = c->n_kv_head;
	mi.head_dim = c->head_dim;
	mi.intermediate_size = c->ffn;
	mi.context_length = c->max_pos;
	mi.identity = (char *)info->identity;
	mi.source = (char *)info->source;
	mi.has_tokenizer = info->has_tokenizer;

	Detserve__V1__ServerInfoResponse r = DETSERVE__V1__SERVER_INFO_RESPONSE__INIT;
	r.model = &mi;
	r.mode = (char *)ds_mode_name(info->mode);
	r.window = info->window;
	r.group = info->group;
	r.backend = (char *)info->backend;
	r.version = (char *)DS_VERSION;
	r.kv_blocks = info->kv_blocks;
	r.kv_block_size = info->kv_block_size;
	r.step_policy = (char *)ds_step_policy_name(info->step_policy);
	r.admit_policy = (char *)ds_admit_policy_name(info->admit_policy);
	if (pack_framed(&r.base, out) != DS_OK)
		return fail(DS_GRPC_RESOURCE_EXHAUSTED, errbuf, errlen, "out of memory");
	return DS_GRPC_OK;
}

enum ds_grpc_code ds_rpc_health_reply(bool serving, const uint8_t *msg, size_t len,
                                      struct ds_rpc_buf *out, char *errbuf, size_t errlen)
{
	Grpc__Health__V1__HealthCheckRequest *rq =
	    grpc__health__v1__health_check_request__unpack(NULL, len, msg);
	if (!rq)
		return fail(DS_GRPC_INVALID_ARGUMENT, errbuf, errlen,
		            "malformed HealthCheckRequest");
	bool known = !rq->service[0] || strcmp(rq->service, "detserve.v1.Detserve") == 0;
	enum ds_grpc_code c = DS_GRPC_OK;
	if (!known)
		c = fail(DS_GRPC_NOT_FOUND, errbuf, errlen, "unknown service '%.100s'",
		         rq->service);
	grpc__health__v1__health_check_request__free_unpacked(rq, NULL);
	if (c != DS_GRPC_OK)
		return c;
	Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
	r.status = serving ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
	                   : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
	if (pack_framed(&r.base, out) != DS_OK)
		return fail(DS_GRPC_RESOURCE_EXHAUSTED, errbuf, errlen, "out of memory");
	return DS_GRPC_OK;
}
