/* detserve_client.h - the detserve.v1 API on top of grpc_client: request packing, blocking unary
 * helpers (ServerInfo, GenerateUnary, grpc.health.v1 Check) and method paths.
 *
 * Key decision: streaming Generate stays callback-driven (grpcc.h) so callers can timestamp
 * every message; only the one-reply RPCs get a blocking wrapper. Responses are the protoc-c
 * structs from detserve.pb-c.h, freed with their __free_unpacked function. */
#ifndef DS_DETSERVE_CLIENT_H
#define DS_DETSERVE_CLIENT_H

#include "grpcc.h"
#include "detserve.pb-c.h"

#define DS_PATH_GENERATE "/detserve.v1.Detserve/Generate"
#define DS_PATH_GENERATE_UNARY "/detserve.v1.Detserve/GenerateUnary"
#define DS_PATH_SERVER_INFO "/detserve.v1.Detserve/ServerInfo"
#define DS_PATH_HEALTH_CHECK "/grpc.health.v1.Health/Check"

/* A Generate request in plain C terms; zero-initialise, then set what you need. */
struct ds_client_gen_req {
	const int32_t *prompt_ids; /* (n_prompt) token ids, or NULL to send prompt_text */
	int n_prompt;
	const char *prompt_text;
	const char *chat_user;   /* when set (and no ids/text): a chat request, messages = */
	const char *chat_system; /* [system (optional), user], rendered by the model's template */
	int max_tokens;
	bool deterministic;
	float temperature; /* 0 = greedy */
	int top_k;
	bool has_top_p;
	float top_p;
	bool has_seed;
	uint64_t seed;
	const int32_t *stop_ids; /* (n_stop_ids) */
	int n_stop_ids;
	bool return_logprobs;
	bool ignore_eos;
	int early_verify;       /* -1 = server default, 0 = off, 1 = on */
	const char *request_id; /* NULL = none */
};

/* Serialises r into a malloc'd buffer (*out, *len; caller frees). Errors: DS_ERR_INVALID (no
 * prompt, negative counts), DS_ERR_NOMEM. */
enum ds_status ds_client_gen_req_pack(const struct ds_client_gen_req *r, uint8_t **out, size_t *len,
                                      struct ds_err *err);

/* The outcome of a finished call. */
struct ds_client_status {
	int code; /* enum ds_grpc_code */
	char message[512];
};

/* Runs one unary call to completion on c (other calls on c keep progressing meanwhile).
 * *resp / *resp_len receive the single response message (malloc'd; NULL/0 when the status is not
 * OK or no message came). Returns DS_OK when the call completed, whatever its gRPC status (see
 * st); DS_ERR_IO when the connection failed, DS_ERR_NOMEM, DS_ERR_FORMAT for more than one reply.
 */
enum ds_status ds_client_unary(struct ds_grpcc_conn *c, const char *path, const uint8_t *req,
                               size_t len, int64_t timeout_ms, const struct ds_grpcc_md *md,
                               int n_md, uint8_t **resp, size_t *resp_len,
                               struct ds_client_status *st, struct ds_err *err);

/* ServerInfo. *out is unpacked on OK (free with detserve__v1__server_info_response__free_unpacked
 * (*out, NULL)). Errors as ds_client_unary, plus DS_ERR_FORMAT for an undecodable reply. */
enum ds_status ds_client_server_info(struct ds_grpcc_conn *c, int64_t timeout_ms,
                                     const struct ds_grpcc_md *md, int n_md,
                                     Detserve__V1__ServerInfoResponse **out,
                                     struct ds_client_status *st, struct ds_err *err);

/* grpc.health.v1.Health/Check for service ("" = the whole server). *serving gets the
 * ServingStatus (1 = SERVING, 2 = NOT_SERVING, 0 = UNKNOWN, 3 = SERVICE_UNKNOWN). */
enum ds_status ds_client_health(struct ds_grpcc_conn *c, const char *service, int64_t timeout_ms,
                                int *serving, struct ds_client_status *st, struct ds_err *err);
/* "UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN". */
const char *ds_client_serving_name(int serving);

/* Encodes / decodes the two tiny grpc.health.v1 messages by hand (no health.proto needed).
 * encode: out needs strlen(service) + 12 bytes; returns the length. decode: DS_ERR_FORMAT if
 * malformed. Exposed for tests. */
size_t ds_client_health_req_encode(const char *service, uint8_t *out);
enum ds_status ds_client_health_resp_decode(const uint8_t *msg, size_t len, int *serving);

/* "LENGTH", "STOP", "STOP_SEQUENCE", "CANCELLED", "UNSPECIFIED". */
const char *ds_client_finish_name(int finish_reason);

#endif
