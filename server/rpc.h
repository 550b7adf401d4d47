/* rpc.h - the detserve.v1 and grpc.health.v1 methods as bytes in, bytes out: method lookup,
 * request decoding and validation into engine parameters, and response encoding.
 *
 * Key decision: every row of the bad-input table that does not need the engine's state is
 * decided here, against the model config and the mode, with a message naming the field. The
 * engine re-checks at submit; the two must agree, and the transport never has to guess.
 * Text goes through the model's tokenizer when there is one (env->tok); without one, text
 * prompts and stop strings get FAILED_PRECONDITION. */
#ifndef DS_RPC_H
#define DS_RPC_H

#include <protobuf-c/protobuf-c.h>

#include "engine.h"
#include "grpc_wire.h"

enum ds_rpc_method {
	DS_RPC_UNKNOWN = 0,
	DS_RPC_GENERATE,
	DS_RPC_GENERATE_UNARY,
	DS_RPC_SERVER_INFO,
	DS_RPC_HEALTH_CHECK,
	DS_RPC_N_METHODS,
};

/* The gRPC status a request-path enum ds_status maps to on the wire (server side). */
enum ds_grpc_code ds_rpc_code_from_status(enum ds_status s);

/* Maps an HTTP/2 :path to a method (DS_RPC_UNKNOWN when not served). */
enum ds_rpc_method ds_rpc_method_lookup(const char *path, size_t len);
const char *ds_rpc_method_name(enum ds_rpc_method m);

struct ds_tokenizer;
struct ds_chat_template;

/* What validation needs to know about the server. */
struct ds_rpc_env {
	const struct ds_model_config *cfg;
	enum ds_mode mode;
	const struct ds_tokenizer *tok;      /* NULL: token ids only */
	const struct ds_chat_template *chat; /* NULL: no chat messages (needs tok too) */
	ProtobufCAllocator *alloc;           /* NULL: malloc */
};

/* A decoded, validated Generate request; params points into the owned arrays. */
struct ds_rpc_gen {
	struct ds_request_params params;
	int32_t *prompt;     /* (params.n_prompt) */
	int32_t *stop_ids;   /* (params.n_stop_ids) */
	int32_t **stop_seqs; /* (params.n_stop_seqs) each (stop_seq_lens[i]) */
	int *stop_seq_lens;
	char request_id[128];
};

/* Decodes and validates a GenerateRequest. Returns DS_GRPC_OK and fills *out, or
 * INVALID_ARGUMENT (malformed protobuf, empty prompt, token id >= vocab, max_tokens <= 0,
 * temperature < 0 or NaN, top_k < 0, top_p outside (0, 1], prompt longer than the context,
 * negative stop id), FAILED_PRECONDITION (deterministic in fast mode; text without a
 * tokenizer), with the reason in errbuf. *out is always safe to pass to ds_rpc_gen_free. */
enum ds_grpc_code ds_rpc_gen_decode(const struct ds_rpc_env *env, const uint8_t *msg, size_t len,
                                    struct ds_rpc_gen *out, char *errbuf, size_t errlen);
void ds_rpc_gen_free(struct ds_rpc_gen *g);

/* A framed message (5-byte prefix + protobuf) in a malloc'd buffer. */
struct ds_rpc_buf {
	uint8_t *data;
	size_t len;
};

/* Encodes one GenerateResponse. tokens/logprobs may be NULL when n == 0; text (may be NULL)
 * is the decoded text of this chunk; fin (may be NULL) is the final event, whose fields fill
 * the final message. Returns DS_ERR_NOMEM on failure. */
enum ds_status ds_rpc_gen_encode(const int32_t *tokens, const float *logprobs, int n,
                                 const char *text, const struct ds_event *fin,
                                 const char *request_id, struct ds_rpc_buf *out);

/* Server description for ServerInfo. */
struct ds_rpc_info {
	const struct ds_model_config *cfg;
	char identity[33];
	char source[256];
	bool has_tokenizer;
	enum ds_mode mode;
	enum ds_step_policy step_policy;
	enum ds_admit_policy admit_policy;
	int window, group, kv_blocks, kv_block_size;
	char backend[128];
};

/* Decodes a ServerInfoRequest (INVALID_ARGUMENT when malformed) and encodes the reply. */
enum ds_grpc_code ds_rpc_info_reply(const struct ds_rpc_info *info, const uint8_t *msg, size_t len,
                                    struct ds_rpc_buf *out, char *errbuf, size_t errlen);

/* Health/Check: service "" and "detserve.v1.Detserve" report SERVING (or NOT_SERVING while
 * draining); other names get NOT_FOUND, per the health protocol. */
enum ds_grpc_code ds_rpc_health_reply(bool serving, const uint8_t *msg, size_t len,
                                      struct ds_rpc_buf *out, char *errbuf, size_t errlen);

#endif
