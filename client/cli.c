/* cli.c - detserve-cli: generate (streaming), info and health against a detserve server.
 *
 * Tokens are printed as they arrive (text when the server sends it, unless --ids; else token
 * ids); the final message's fingerprint, finish reason, usage and DVR stats follow. A failed call prints
 * "error: <STATUS_NAME>: <message>" on stderr and exits with the gRPC code (14 when the server
 * cannot be reached, 64 for usage errors). Ctrl-C cancels the call (RST_STREAM) and exits 1. */
#include "detserve_client.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#define EXIT_USAGE 64

static volatile sig_atomic_t interrupted; /* set by SIGINT only */

static void on_sigint(int sig)
{
	(void)sig;
	interrupted = 1;
}

struct cli {
	char host[256];
	int port;
	int64_t timeout_ms;
	char auth[300];
	bool has_auth;
	/* generate */
	struct ds_client_gen_req req;
	int32_t *ids;
	bool unary;
	bool quiet_stream;
	bool print_ids; /* --ids: token ids even when the server sends text */
	/* streaming state */
	int n_tokens;
	int code;
	char message[512];
	bool done;
	Detserve__V1__GenerateResponse *final;
};

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: detserve-cli [--addr HOST:PORT] [--timeout-ms N] [--api-key KEY] COMMAND ...\n"
	    "commands:\n"
	    "  generate (--prompt TEXT | --prompt-ids 1,2,3 | --chat TEXT [--system TEXT])\n"
	    "           [--deterministic] [--max-tokens N]\n"
	    "           [--temperature T] [--top-k K] [--top-p P] [--seed S] [--logprobs]\n"
	    "           [--stop-ids 1,2] [--ignore-eos] [--no-early-verify] [--request-id ID] "
	    "[--unary] [--ids]\n"
	    "  info     print the server's model, mode and W/G\n"
	    "  health   grpc.health.v1 Check; exit 0 when SERVING\n"
	    "The address defaults to $DETSERVE_ADDR, else 127.0.0.1:50051.\n");
}

static int parse_addr(struct cli *c, const char *s)
{
	const char *colon = strrchr(s, ':');
	if (!colon || colon == s || !colon[1])
		return -1;
	size_t hl = (size_t)(colon - s);
	if (s[0] == '[' && hl >= 2 && s[hl - 1] == ']') { /* [v6]:port */
		s++;
		hl -= 2;
	}
	if (hl >= sizeof(c->host))
		return -1;
	memcpy(c->host, s, hl);
	c->host[hl] = '\0';
	char *end;
	long p = strtol(colon + 1, &end, 10);
	if (*end || p <= 0 || p > 65535)
		return -1;
	c->port = (int)p;
	return 0;
}

/* "1,2,3" -> malloc'd array. */
static int parse_ids(const char *s, int32_t **out, int *n)
{
	int cap = 16, k = 0;
	int32_t *a = malloc(sizeof(*a) * (size_t)cap);
	if (!a)
		return -1;
	while (*s) {
		char *end;
		errno = 0;
		long v = strtol(s, &end, 10);
		if (end == s || errno || v < INT32_MIN || v > INT32_MAX || (*end && *end != ',')) {
			free(a);
			return -1;
		}
		if (k == cap) {
			int32_t *b = realloc(a, sizeof(*a) * (size_t)(cap *= 2));
			if (!b) {
				free(a);
				return -1;
			}
			a = b;
		}
		a[k++] = (int32_t)v;
		s = *end ? end + 1 : end;
	}
	*out = a;
	*n = k;
	return 0;
}

static int fail_status(int code, const char *msg)
{
	fprintf(stderr, "error: %s: %s\n", ds_grpc_code_name(code), msg);
	return code == 0 ? 1 : code;
}

/* ---- generate ---- */

static void print_chunk(struct cli *c, const Detserve__V1__GenerateResponse *r)
{
	if (c->quiet_stream)
		return;
	/* a text request implies a tokenizer: a chunk without text (an EOS, or bytes of a
	 * character still incomplete) prints nothing rather than its ids */
	bool text_mode =
	    (c->req.prompt_text || c->req.chat_user) && !c->req.prompt_ids && !c->print_ids;
	if (r->text && r->text[0] && !c->req.return_logprobs && !c->print_ids) {
		fputs(r->text, stdout);
	} else if (text_mode && !c->req.return_logprobs) {
		/* nothing to show */
	} else {
		for (size_t i = 0; i < r->n_token_ids; i++) {
			printf("%s%" PRId32, c->n_tokens + (int)i ? " " : "", r->token_ids[i]);
			if (c->req.return_logprobs && i < r->n_logprobs)
				printf("(%.4f)", (double)r->logprobs[i]);
		}
	}
	fflush(stdout);
}

static void print_final(const Detserve__V1__GenerateResponse *f)
{
	printf("\nfinish: %s\n", ds_client_finish_name(f->finish_reason));
	if (f->usage)
		printf("usage: prompt_tokens=%d completion_tokens=%d\n", f->usage->prompt_tokens,
		       f->usage->completion_tokens);
	printf("seed: %" PRIu64 "\n", f->seed);
	printf("deterministic: %s\n", f->deterministic ? "true" : "false");
	if (f->fingerprint && f->fingerprint[0])
		printf("fingerprint: %s\n", f->fingerprint);
	if (f->dvr)
		printf("dvr: verify_passes=%" PRIu64 " windows=%" PRIu64 " rollbacks=%" PRIu64
		       " rolled_back_tokens=%" PRIu64 " recomputed_tokens=%" PRIu64 "\n",
		       f->dvr->verify_passes, f->dvr->windows, f->dvr->rollbacks,
		       f->dvr->rolled_back_tokens, f->dvr->recomputed_tokens);
	if (f->request_id && f->request_id[0])
		printf("request_id: %s\n", f->request_id);
}

static int gen_on_message(struct ds_grpcc_call *call, const uint8_t *msg, size_t len, void *ud)
{
	(void)call;
	struct cli *c = ud;
	Detserve__V1__GenerateResponse *r = detserve__v1__generate_response__unpack(NULL, len, msg);
	if (!r) {
		fprintf(stderr, "detserve-cli: undecodable GenerateResponse (%zu bytes)\n", len);
		return 1;
	}
	print_chunk(c, r);
	c->n_tokens += (int)r->n_token_ids;
	if (r->final) {
		if (c->final)
			detserve__v1__generate_response__free_unpacked(c->final, NULL);
		c->final = r;
	} else {
		detserve__v1__generate_response__free_unpacked(r, NULL);
	}
	return 0;
}

static void gen_on_close(struct ds_grpcc_call *call, int code, const char *message, void *ud)
{
	(void)call;
	struct cli *c = ud;
	c->done = true;
	c->code = code;
	snprintf(c->message, sizeof(c->message), "%s", message);
}

static int cmd_generate(struct cli *c, struct ds_grpcc_conn *conn, const struct ds_grpcc_md *md,
                        int n_md)
{
	static const struct ds_grpcc_call_cbs cbs = {.on_message = gen_on_message,
	                                             .on_close = gen_on_close};
	struct ds_grpcc_call *call;
	struct ds_err err = {{0}};
	uint8_t *buf;
	size_t len;
	int rc = 1;

	if (ds_client_gen_req_pack(&c->req, &buf, &len, &err) != DS_OK) {
		fprintf(stderr, "detserve-cli: %s\n", err.msg);
		return EXIT_USAGE;
	}
	enum ds_status rv =
	    ds_grpcc_call_start(conn, c->unary ? DS_PATH_GENERATE_UNARY : DS_PATH_GENERATE, buf,
	                        len, c->timeout_ms, md, n_md, &cbs, c, &call, &err);
	free(buf);
	if (rv != DS_OK)
		return fail_status(DS_GRPC_UNAVAILABLE, err.msg);
	while (!c->done) {
		if (interrupted) {
			ds_grpcc_call_cancel(call);
			ds_grpcc_conn_run(conn, 0, &err); /* flush the RST_STREAM */
			break;
		}
		ds_grpcc_conn_run(conn, 100, &err);
	}
	if (c->code != DS_GRPC_OK) {
		if (c->n_tokens)
			printf("\n");
		rc = fail_status(c->code, c->message);
	} else if (!c->final) {
		rc = fail_status(DS_GRPC_INTERNAL, "the stream ended without a final message");
	} else {
		print_final(c->final);
		rc = 0;
	}
	if (c->final)
		detserve__v1__generate_response__free_unpacked(c->final, NULL);
	return rc;
}

/* ---- info, health ---- */

static int cmd_info(struct cli *c, struct ds_grpcc_conn *conn, const struct ds_grpcc_md *md,
                    int n_md)
{
	Detserve__V1__ServerInfoResponse *r;
	struct ds_client_status st;
	struct ds_err err = {{0}};
	if (ds_client_server_info(conn, c->timeout_ms, md, n_md, &r, &st, &err) != DS_OK)
		return fail_status(DS_GRPC_UNAVAILABLE, err.msg);
	if (st.code != DS_GRPC_OK)
		return fail_status(st.code, st.message);
	printf("version: %s\nbackend: %s\nmode: %s\nwindow: %d\ngroup: %d\nkv_blocks: "
	       "%d\nkv_block_size: %d\nstep_policy: %s\nadmit_policy: %s\n",
	       r->version, r->backend, r->mode, r->window, r->group, r->kv_blocks, r->kv_block_size,
	       r->step_policy, r->admit_policy);
	if (r->model) {
		const Detserve__V1__ModelInfo *m = r->model;
		printf("model.architecture: %s\nmodel.source: %s\nmodel.identity: "
		       "%s\nmodel.vocab_size: %d\n"
		       "model.hidden_size: %d\nmodel.num_layers: %d\nmodel.num_heads: "
		       "%d\nmodel.num_kv_heads: %d\n"
		       "model.head_dim: %d\nmodel.intermediate_size: %d\nmodel.context_length: %d\n"
		       "model.has_tokenizer: %s\n",
		       m->architecture, m->source, m->identity, m->vocab_size, m->hidden_size,
		       m->num_layers, m->num_heads, m->num_kv_heads, m->head_dim,
		       m->intermediate_size, m->context_length,
		       m->has_tokenizer ? "true" : "false");
	}
	detserve__v1__server_info_response__free_unpacked(r, NULL);
	return 0;
}

static int cmd_health(struct cli *c, struct ds_grpcc_conn *conn)
{
	struct ds_client_status st;
	struct ds_err err = {{0}};
	int serving;
	if (ds_client_health(conn, "", c->timeout_ms, &serving, &st, &err) != DS_OK)
		return fail_status(DS_GRPC_UNAVAILABLE, err.msg);
	if (st.code != DS_GRPC_OK)
		return fail_status(st.code, st.message);
	printf("%s\n", ds_client_serving_name(serving));
	return serving == 1 ? 0 : 1;
}

/* ---- main ---- */

static int parse_gen(struct cli *c, int argc, char **argv)
{
	enum {
		O_PROMPT = 1,
		O_IDS,
		O_DET,
		O_MAX,
		O_TEMP,
		O_TOPK,
		O_TOPP,
		O_SEED,
		O_LP,
		O_STOP,
		O_NOEOS,
		O_NOEV,
		O_RID,
		O_UNARY,
		O_QUIET,
		O_PRINT_IDS,
		O_CHAT,
		O_SYSTEM
	};
	static const struct option opts[] = {
	    {"prompt", required_argument, NULL, O_PROMPT},
	    {"prompt-ids", required_argument, NULL, O_IDS},
	    {"deterministic", no_argument, NULL, O_DET},
	    {"max-tokens", required_argument, NULL, O_MAX},
	    {"temperature", required_argument, NULL, O_TEMP},
	    {"top-k", required_argument, NULL, O_TOPK},
	    {"top-p", required_argument, NULL, O_TOPP},
	    {"seed", required_argument, NULL, O_SEED},
	    {"logprobs", no_argument, NULL, O_LP},
	    {"stop-ids", required_argument, NULL, O_STOP},
	    {"ignore-eos", no_argument, NULL, O_NOEOS},
	    {"no-early-verify", no_argument, NULL, O_NOEV},
	    {"request-id", required_argument, NULL, O_RID},
	    {"unary", no_argument, NULL, O_UNARY},
	    {"quiet", no_argument, NULL, O_QUIET},
	    {"ids", no_argument, NULL, O_PRINT_IDS},
	    {"chat", required_argument, NULL, O_CHAT},
	    {"system", required_argument, NULL, O_SYSTEM},
	    {NULL, 0, NULL, 0},
	};
	struct ds_client_gen_req *r = &c->req;
	int32_t *stop = NULL;
	int o;
	r->max_tokens = 16;
	r->early_verify = -1;
	optind = 1;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		char *end = NULL;
		switch (o) {
		case O_PROMPT:
			r->prompt_text = optarg;
			break;
		case O_IDS:
			free(c->ids);
			c->ids = NULL;
			if (parse_ids(optarg, &c->ids, &r->n_prompt) != 0 || r->n_prompt == 0) {
				fprintf(stderr,
				        "detserve-cli: bad --prompt-ids '%s' (want 1,2,3)\n",
				        optarg);
				goto fail;
			}
			r->prompt_ids = c->ids;
			break;
		case O_DET:
			r->deterministic = true;
			break;
		case O_MAX:
			r->max_tokens = (int)strtol(optarg, &end, 10);
			break;
		case O_TEMP:
			r->temperature = strtof(optarg, &end);
			break;
		case O_TOPK:
			r->top_k = (int)strtol(optarg, &end, 10);
			break;
		case O_TOPP:
			r->has_top_p = true;
			r->top_p = strtof(optarg, &end);
			break;
		case O_SEED:
			r->has_seed = true;
			r->seed = strtoull(optarg, &end, 10);
			break;
		case O_LP:
			r->return_logprobs = true;
			break;
		case O_STOP:
			free(stop);
			stop = NULL;
			if (parse_ids(optarg, &stop, &r->n_stop_ids) != 0) {
				fprintf(stderr, "detserve-cli: bad --stop-ids '%s'\n", optarg);
				goto fail;
			}
			r->stop_ids = stop;
			break;
		case O_NOEOS:
			r->ignore_eos = true;
			break;
		case O_NOEV:
			r->early_verify = 0;
			break;
		case O_RID:
			r->request_id = optarg;
			break;
		case O_UNARY:
			c->unary = true;
			break;
		case O_QUIET:
			c->quiet_stream = true;
			break;
		case O_PRINT_IDS:
			c->print_ids = true;
			break;
		case O_CHAT:
			r->chat_user = optarg;
			break;
		case O_SYSTEM:
			r->chat_system = optarg;
			break;
		default:
			goto fail;
		}
		if (end && *end) {
			fprintf(stderr, "detserve-cli: bad number '%s'\n", optarg);
			goto fail;
		}
	}
	if (optind != argc || (!r->prompt_ids && !r->prompt_text && !r->chat_user)) {
		fprintf(stderr, "detserve-cli generate: need --prompt, --prompt-ids or --chat\n");
		goto fail;
	}
	return 0;
fail:
	free(stop);
	r->stop_ids = NULL;
	return -1;
}

int main(int argc, char **argv)
{
	struct cli c = {.timeout_ms = 0};
	struct ds_grpcc_conn *conn = NULL;
	struct ds_err err = {{0}};
	struct ds_grpcc_md md[1];
	int n_md = 0, i = 1, rc;
	const char *env = getenv("DETSERVE_ADDR");

	if (parse_addr(&c, env && *env ? env : "127.0.0.1:50051") != 0) {
		fprintf(stderr, "detserve-cli: bad DETSERVE_ADDR '%s'\n", env);
		return EXIT_USAGE;
	}
	for (; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		}
		if (i + 1 >= argc) {
			usage(stderr);
			return EXIT_USAGE;
		}
		if (!strcmp(argv[i], "--addr")) {
			if (parse_addr(&c, argv[++i]) != 0) {
				fprintf(stderr, "detserve-cli: bad --addr '%s' (want HOST:PORT)\n",
				        argv[i]);
				return EXIT_USAGE;
			}
		} else if (!strcmp(argv[i], "--timeout-ms")) {
			c.timeout_ms = strtoll(argv[++i], NULL, 10);
		} else if (!strcmp(argv[i], "--api-key")) {
			snprintf(c.auth, sizeof(c.auth), "Bearer %s", argv[++i]);
			c.has_auth = true;
		} else {
			fprintf(stderr, "detserve-cli: unknown option '%s'\n", argv[i]);
			usage(stderr);
			return EXIT_USAGE;
		}
	}
	if (i >= argc) {
		usage(stderr);
		return EXIT_USAGE;
	}
	const char *cmd = argv[i];
	if (strcmp(cmd, "generate") && strcmp(cmd, "info") && strcmp(cmd, "health")) {
		fprintf(stderr, "detserve-cli: unknown command '%s'\n", cmd);
		usage(stderr);
		return EXIT_USAGE;
	}
	if (!strcmp(cmd, "generate") && parse_gen(&c, argc - i, argv + i) != 0) {
		free(c.ids);
		return EXIT_USAGE;
	}
	if (c.has_auth) {
		md[0].name = "authorization";
		md[0].value = c.auth;
		n_md = 1;
	}
	signal(SIGINT, on_sigint);
	signal(SIGPIPE, SIG_IGN);
	if (ds_grpcc_conn_connect(&conn, c.host, c.port, NULL, &err) != DS_OK) {
		rc = fail_status(DS_GRPC_UNAVAILABLE, err.msg);
		goto out;
	}
	if (!strcmp(cmd, "generate"))
		rc = cmd_generate(&c, conn, md, n_md);
	else if (!strcmp(cmd, "info"))
		rc = cmd_info(&c, conn, md, n_md);
	else
		rc = cmd_health(&c, conn);
	if (interrupted)
		rc = 1;
out:
	ds_grpcc_conn_free(conn);
	free(c.ids);
	free((void *)c.req.stop_ids);
	return rc;
}
