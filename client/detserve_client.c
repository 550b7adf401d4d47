/* detserve_client.c - packing detserve.v1 requests with protoc-c, a blocking unary helper built
 * from the callback API, and a hand-rolled codec for the two grpc.health.v1 messages (so the
 * client does not need health.proto compiled in). */
#include "detserve_client.h"

#include <stdio.h>
#include <stdlib.h>

enum ds_status ds_client_gen_req_pack(const struct ds_client_gen_req *r, uint8_t **out, size_t *len,
                                      struct ds_err *err)
{
	Detserve__V1__GenerateRequest req = DETSERVE__V1__GENERATE_REQUEST__INIT;
	Detserve__V1__TokenIds ids = DETSERVE__V1__TOKEN_IDS__INIT;
	Detserve__V1__SamplingParams sp = DETSERVE__V1__SAMPLING_PARAMS__INIT;
	Detserve__V1__ChatMessages chat = DETSERVE__V1__CHAT_MESSAGES__INIT;
	Detserve__V1__ChatMessage msg[2] = {DETSERVE__V1__CHAT_MESSAGE__INIT,
	                                    DETSERVE__V1__CHAT_MESSAGE__INIT};
	Detserve__V1__ChatMessage *msgp[2];

	*out = NULL;
	*len = 0;
	if (r->n_prompt < 0 || r->n_stop_ids < 0 || (r->n_prompt > 0 && !r->prompt_ids) ||
	    (r->n_stop_ids > 0 && !r->stop_ids))
		return ds_errf(err, DS_ERR_INVALID, "generate request: negative or missing array");
	if (r->prompt_ids) {
		ids.n_ids = (size_t)r->n_prompt;
		ids.ids = (int32_t *)r->prompt_ids;
		req.prompt_case = DETSERVE__V1__GENERATE_REQUEST__PROMPT_PROMPT_IDS;
		req.prompt_ids = &ids;
	} else if (r->prompt_text) {
		req.prompt_case = DETSERVE__V1__GENERATE_REQUEST__PROMPT_PROMPT_TEXT;
		req.prompt_text = (char *)r->prompt_text;
	} else if (r->chat_user) {
		size_t n = 0;
		if (r->chat_system) {
			msg[n].role = "system";
			msg[n].content = (char *)r->chat_system;
			msgp[n] = &msg[n];
			n++;
		}
		msg[n].role = "user";
		msg[n].content = (char *)r->chat_user;
		msgp[n] = &msg[n];
		n++;
		chat.n_messages = n;
		chat.messages = msgp;
		req.prompt_case = DETSERVE__V1__GENERATE_REQUEST__PROMPT_MESSAGES;
		req.messages = &chat;
	} else {
		return ds_errf(err, DS_ERR_INVALID, "generate request: no prompt (ids or text)");
	}
	req.max_tokens = r->max_tokens;
	sp.temperature = r->temperature;
	sp.top_k = r->top_k;
	if (r->has_top_p) {
		sp.top_p_opt_case = DETSERVE__V1__SAMPLING_PARAMS__TOP_P_OPT_TOP_P;
		sp.top_p = r->top_p;
	}
	if (r->has_seed) {
		sp.seed_opt_case = DETSERVE__V1__SAMPLING_PARAMS__SEED_OPT_SEED;
		sp.seed = r->seed;
	}
	req.sampling = &sp;
	req.n_stop_token_ids = (size_t)r->n_stop_ids;
	req.stop_token_ids = (int32_t *)r->stop_ids;
	req.deterministic = r->deterministic;
	req.return_logprobs = r->return_logprobs;
	req.ignore_eos = r->ignore_eos;
	if (r->request_id)
		req.request_id = (char *)r->request_id;
	if (r->early_verify >= 0) {
		req.early_verify_opt_case =
		    DETSERVE__V1__GENERATE_REQUEST__EARLY_VERIFY_OPT_EARLY_VERIFY;
		req.early_verify = r->early_verify != 0;
	}
	size_t n = detserve__v1__generate_request__get_packed_size(&req);
	uint8_t *buf = malloc(n ? n : 1);
	if (!buf)
		return ds_errf(err, DS_ERR_NOMEM, "generate request: no memory for %zu bytes", n);
	detserve__v1__generate_request__pack(&req, buf);
	*out = buf;
	*len = n;
	return DS_OK;
}

/* ---- blocking unary ---- */

struct unary_state {
	bool done;
	int n_msgs;
	uint8_t *resp;
	size_t resp_len;
	bool nomem;
	struct ds_client_status *st;
};

static int unary_on_message(struct ds_grpcc_call *call, const uint8_t *msg, size_t len, void *ud)
{
	(void)call;
	struct unary_state *u = ud;
	if (++u->n_msgs > 1)
		return 0; /* reported as DS_ERR_FORMAT below */
	u->resp = malloc(len ? len : 1);
	if (!u->resp) {
		u->nomem = true;
		return 1;
	}
	memcpy(u->resp, msg, len);
	u->resp_len = len;
	return 0;
}

static void unary_on_close(struct ds_grpcc_call *call, int code, const char *message, void *ud)
{
	(void)call;
	struct unary_state *u = ud;
	u->done = true;
	u->st->code = code;
	snprintf(u->st->message, sizeof(u->st->message), "%s", message);
}

enum ds_status ds_client_unary(struct ds_grpcc_conn *c, const char *path, const uint8_t *req,
                               size_t len, int64_t timeout_ms, const struct ds_grpcc_md *md,
                               int n_md, uint8_t **resp, size_t *resp_len,
                               struct ds_client_status *st, struct ds_err *err)
{
	struct unary_state u = {.st = st};
	static const struct ds_grpcc_call_cbs cbs = {.on_message = unary_on_message,
	                                             .on_close = unary_on_close};
	enum ds_status rv;

	*resp = NULL;
	*resp_len = 0;
	st->code = DS_GRPC_UNKNOWN;
	st->message[0] = '\0';
	rv = ds_grpcc_call_start(c, path, req, len, timeout_ms, md, n_md, &cbs, &u, NULL, err);
	if (rv != DS_OK)
		return rv;
	while (!u.done) {
		rv = ds_grpcc_conn_run(c, -1, err);
		if (rv != DS_OK && !u.done)
			goto fail;
	}
	if (u.nomem) {
		rv = ds_errf(err, DS_ERR_NOMEM, "%s: no memory for the reply", path);
		goto fail;
	}
	if (u.n_msgs > 1) {
		rv = ds_errf(err, DS_ERR_FORMAT, "%s: %d replies to a unary call", path, u.n_msgs);
		goto fail;
	}
	if (st->code != DS_GRPC_OK) {
		free(u.resp);
		return DS_OK;
	}
	if (u.n_msgs == 0) {
		st->code = DS_GRPC_INTERNAL;
		snprintf(st->message, sizeof(st->message), "%s: OK status without a reply", path);
		return DS_OK;
	}
	*resp = u.resp;
	*resp_len = u.resp_len;
	return DS_OK;
fail:
	free(u.resp);
	return rv;
}

enum ds_status ds_client_server_info(struct ds_grpcc_conn *c, int64_t timeout_ms,
                                     const struct ds_grpcc_md *md, int n_md,
                                     Detserve__V1__ServerInfoResponse **out,
                                     struct ds_client_status *st, struct ds_err *err)
{
	uint8_t *resp;
	size_t n;
	*out = NULL;
	/* ServerInfoRequest is empty: zero bytes */
	enum ds_status rv = ds_client_unary(c, DS_PATH_SERVER_INFO, NULL, 0, timeout_ms, md, n_md,
	                                    &resp, &n, st, err);
	if (rv != DS_OK || st->code != DS_GRPC_OK)
		return rv;
	*out = detserve__v1__server_info_response__unpack(NULL, n, resp);
	free(resp);
	if (!*out)
		return ds_errf(err, DS_ERR_FORMAT, "ServerInfo: undecodable reply of %zu bytes", n);
	return DS_OK;
}

/* ---- grpc.health.v1 by hand ---- */

size_t ds_client_health_req_encode(const char *service, uint8_t *out)
{
	size_t sl = strlen(service), o = 0;
	if (sl == 0)
		return 0;
	out[o++] = 0x0a; /* field 1, length-delimited */
	for (size_t v = sl;; v >>= 7) {
		out[o++] = (uint8_t)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
		if (v < 0x80)
			break;
	}
	memcpy(out + o, service, sl);
	return o + sl;
}

static enum ds_status read_varint(const uint8_t *p, size_t len, size_t *i, uint64_t *v)
{
	*v = 0;
	for (int shift = 0; shift < 64; shift += 7) {
		if (*i >= len)
			return DS_ERR_FORMAT;
		uint8_t b = p[(*i)++];
		*v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80))
			return DS_OK;
	}
	return DS_ERR_FORMAT;
}

enum ds_status ds_client_health_resp_decode(const uint8_t *msg, size_t len, int *serving)
{
	size_t i = 0;
	*serving = 0;
	while (i < len) {
		uint64_t key, v;
		if (read_varint(msg, len, &i, &key) != DS_OK)
			return DS_ERR_FORMAT;
		switch (key & 7) {
		case 0:
			if (read_varint(msg, len, &i, &v) != DS_OK)
				return DS_ERR_FORMAT;
			if ((key >> 3) == 1)
				*serving = (int)v;
			break;
		case 1:
			if (len - i < 8)
				return DS_ERR_FORMAT;
			i += 8;
			break;
		case 5:
			if (len - i < 4)
				return DS_ERR_FORMAT;
			i += 4;
			break;
		case 2:
			if (read_varint(msg, len, &i, &v) != DS_OK || v > len - i)
				return DS_ERR_FORMAT;
			i += v;
			break;
		default:
			return DS_ERR_FORMAT;
		}
	}
	return DS_OK;
}

enum ds_status ds_client_health(struct ds_grpcc_conn *c, const char *service, int64_t timeout_ms,
                                int *serving, struct ds_client_status *st, struct ds_err *err)
{
	size_t sl = strlen(service);
	uint8_t *req = malloc(sl + 12), *resp;
	size_t n;
	if (!req)
		return ds_errf(err, DS_ERR_NOMEM, "health: no memory");
	size_t rl = ds_client_health_req_encode(service, req);
	enum ds_status rv = ds_client_unary(c, DS_PATH_HEALTH_CHECK, req, rl, timeout_ms, NULL, 0,
	                                    &resp, &n, st, err);
	free(req);
	*serving = 0;
	if (rv != DS_OK || st->code != DS_GRPC_OK)
		return rv;
	rv = ds_client_health_resp_decode(resp, n, serving);
	free(resp);
	if (rv != DS_OK)
		return ds_errf(err, rv, "health: undecodable reply of %zu bytes", n);
	return DS_OK;
}

const char *ds_client_serving_name(int serving)
{
	static const char *const names[] = {"UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"};
	return serving >= 0 && serving < 4 ? names[serving] : "UNKNOWN";
}

const char *ds_client_finish_name(int fr)
{
	switch (fr) {
	case DETSERVE__V1__FINISH_REASON__FINISH_REASON_LENGTH:
		return "LENGTH";
	case DETSERVE__V1__FINISH_REASON__FINISH_REASON_STOP:
		return "STOP";
	case DETSERVE__V1__FINISH_REASON__FINISH_REASON_STOP_SEQUENCE:
		return "STOP_SEQUENCE";
	case DETSERVE__V1__FINISH_REASON__FINISH_REASON_CANCELLED:
		return "CANCELLED";
	default:
		return "UNSPECIFIED";
	}
}
