/* bench.c - detserve-bench: an open-loop (Poisson or trace) or closed-loop gRPC load generator
 * for detserve, recording TTFT, every inter-token gap, E2E, status, fingerprint and DVR stats per
 * request, and writing a JSONL of requests, a summary JSON and a one-screen table.
 *
 * Key decision: one thread, one poll() loop over C connections, each multiplexing many HTTP/2
 * streams. Open-loop latency is measured from the scheduled arrival time, not the send time, so a
 * slow client or server cannot hide queueing (no coordinated omission). */
#include "report.h"
#include "detserve_client.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define EXIT_USAGE 64
#define MAX_CONNS 64
#define CONN_SLOTS (2 * MAX_CONNS) /* room for draining connections */

static volatile sig_atomic_t interrupted; /* SIGINT: stop sending, cancel, report */

static void on_sigint(int sig)
{
	(void)sig;
	interrupted = 1;
}

struct bench {
	/* flags */
	char host[256];
	int port;
	int n_conns;
	int users; /* > 0: closed loop */
	const char *trace;
	const char *records_path, *summary_path;
	bool record_tokens, quiet, no_table, ignore_eos;
	int early_verify;
	bool requests_set; /* --requests given (a trace is otherwise replayed whole) */
	int64_t timeout_ms;
	char label[128];
	char auth[300];
	struct ds_grpcc_md md[1];
	int n_md;
	struct ds_workload_opts wo;
	/* run */
	struct ds_grpcc_conn *conns[CONN_SLOTS];
	struct ds_bench_req *reqs;
	struct ds_bench_rec *recs;
	int n_reqs, next, inflight, done, n_err;
	int n_report; /* records reported: n_reqs, or fewer after Ctrl-C */
	uint64_t tokens;
	uint64_t t0_ns;
	double last_progress;
	bool nomem;
};

static double elapsed(const struct bench *b)
{
	return (double)(ds_grpcc_now_ns() - b->t0_ns) * 1e-9;
}

/* ---- call callbacks ---- */

/* Per call: the bench and the record it fills. */
struct call_ctx {
	struct bench *b;
	struct ds_bench_rec *r;
};

static int ctx_on_message(struct ds_grpcc_call *call, const uint8_t *msg, size_t len, void *ud)
{
	(void)call;
	struct call_ctx *x = ud;
	struct ds_bench_rec *r = x->r;
	double t = elapsed(x->b);
	Detserve__V1__GenerateResponse *m = detserve__v1__generate_response__unpack(NULL, len, msg);
	if (!m) {
		snprintf(r->message, sizeof(r->message), "undecodable GenerateResponse (%zu bytes)",
		         len);
		return 1;
	}
	if (ds_bench_rec_add_tokens(r, m->token_ids, m->n_token_ids, t) != DS_OK) {
		detserve__v1__generate_response__free_unpacked(m, NULL);
		x->b->nomem = true;
		return 1;
	}
	if (m->final) {
		r->finish = m->finish_reason;
		if (m->usage) {
			r->prompt_tokens = m->usage->prompt_tokens;
			r->completion_tokens = m->usage->completion_tokens;
		}
		r->seed = m->seed;
		snprintf(r->fingerprint, sizeof(r->fingerprint), "%s",
		         m->fingerprint ? m->fingerprint : "");
		if (m->dvr) {
			r->dvr.verify_passes = m->dvr->verify_passes;
			r->dvr.windows = m->dvr->windows;
			r->dvr.rollbacks = m->dvr->rollbacks;
			r->dvr.rolled_back_tokens = m->dvr->rolled_back_tokens;
			r->dvr.recomputed_tokens = m->dvr->recomputed_tokens;
		}
		r->got_final = true;
	}
	detserve__v1__generate_response__free_unpacked(m, NULL);
	return 0;
}

static void ctx_on_close(struct ds_grpcc_call *call, int code, const char *message, void *ud)
{
	(void)call;
	struct call_ctx *x = ud;
	struct bench *b = x->b;
	struct ds_bench_rec *r = x->r;
	r->done = true;
	r->t_end = elapsed(b);
	r->code = code;
	if (code != DS_GRPC_OK || !r->message[0])
		snprintf(r->message, sizeof(r->message), "%s", message);
	if (code == DS_GRPC_OK && !r->got_final) {
		r->code = DS_GRPC_INTERNAL;
		snprintf(r->message, sizeof(r->message), "stream ended without a final message");
	}
	b->inflight--;
	b->done++;
	if (r->code != DS_GRPC_OK)
		b->n_err++;
	else
		b->tokens += (uint64_t)r->n_tokens;
	free(x);
}

/* ---- connections ---- */

/* The least loaded usable connection. A connection that got GOAWAY keeps its slot until its
 * in-flight calls finish (graceful drain), and a fresh one takes its place meanwhile. */
static struct ds_grpcc_conn *pick_conn(struct bench *b)
{
	struct ds_grpcc_conn *best = NULL;
	int usable = 0;
	for (int i = 0; i < CONN_SLOTS; i++) {
		struct ds_grpcc_conn *c = b->conns[i];
		if (c && !ds_grpcc_conn_usable(c) && ds_grpcc_conn_active(c) == 0) {
			ds_grpcc_conn_free(c);
			b->conns[i] = c = NULL;
		}
		if (c && ds_grpcc_conn_usable(c)) {
			usable++;
			if (!best || ds_grpcc_conn_active(c) < ds_grpcc_conn_active(best))
				best = c;
		}
	}
	for (int i = 0; i < CONN_SLOTS && usable < b->n_conns; i++) {
		struct ds_err err;
		if (b->conns[i])
			continue;
		if (ds_grpcc_conn_connect(&b->conns[i], b->host, b->port, NULL, &err) != DS_OK)
			break;
		usable++;
		best = b->conns[i]; /* idle: the least loaded */
	}
	return best;
}

static void start_request(struct bench *b, int i)
{
	struct ds_bench_rec *r = &b->recs[i];
	const struct ds_bench_req *q = &b->reqs[i];
	struct ds_client_gen_req g = {
	    .prompt_ids = q->prompt,
	    .n_prompt = q->n_prompt,
	    .prompt_text = q->prompt_text,
	    .max_tokens = q->max_tokens,
	    .deterministic = q->deterministic,
	    .temperature = q->temperature,
	    .top_k = q->top_k,
	    .has_top_p = q->top_p < 1.0f,
	    .top_p = q->top_p,
	    .has_seed = true,
	    .seed = q->seed,
	    .ignore_eos = b->ignore_eos,
	    .early_verify = b->early_verify,
	};
	struct ds_err err = {{0}};
	uint8_t *buf = NULL;
	size_t len;
	r->req = q;
	r->t_first = -1;
	r->started = true;
	r->t_sent = elapsed(b);
	r->t_sched = b->users > 0 ? r->t_sent : q->arrival_s;
	b->inflight++;
	struct call_ctx *x = malloc(sizeof(*x));
	static const struct ds_grpcc_call_cbs cbs = {.on_message = ctx_on_message,
	                                             .on_close = ctx_on_close};
	int code = DS_GRPC_INTERNAL;
	if (!x || ds_client_gen_req_pack(&g, &buf, &len, &err) != DS_OK) {
		snprintf(err.msg, sizeof(err.msg), "no memory");
		goto fail;
	}
	x->b = b;
	x->r = r;
	struct ds_grpcc_conn *c = pick_conn(b);
	if (!c) {
		code = DS_GRPC_UNAVAILABLE;
		snprintf(err.msg, sizeof(err.msg), "cannot connect to %s:%d", b->host, b->port);
		goto fail;
	}
	if (ds_grpcc_call_start(c, DS_PATH_GENERATE, buf, len, b->timeout_ms, b->md, b->n_md, &cbs,
	                        x, NULL, &err) != DS_OK) {
		code = DS_GRPC_UNAVAILABLE;
		goto fail;
	}
	free(buf);
	return;
fail:
	free(buf);
	if (x) {
		x->b = b;
		x->r = r;
		ctx_on_close(NULL, code, err.msg, x);
	} else {
		r->done = true;
		r->code = code;
		b->inflight--;
		b->done++;
		b->n_err++;
	}
}

/* ---- progress ---- */

static void progress(struct bench *b, bool final)
{
	double t = elapsed(b);
	bool tty = isatty(2);
	if (b->quiet || (!final && t - b->last_progress < (tty ? 0.25 : 2.0)))
		return;
	b->last_progress = t;
	fprintf(stderr,
	        "%s[detserve-bench] %6.1fs sent %d/%d done %d inflight %d errors %d  %.1f tok/s%s",
	        tty ? "\r" : "", t, b->next, b->n_reqs, b->done, b->inflight, b->n_err,
	        t > 0 ? (double)b->tokens / t : 0.0, tty && !final ? "   " : "\n");
}

/* ---- the loop ---- */

static void run(struct bench *b)
{
	struct pollfd pfds[CONN_SLOTS];
	struct ds_err err;
	b->t0_ns = ds_grpcc_now_ns();
	while (b->done < b->n_reqs && !(interrupted && b->n_report < b->n_reqs)) {
		double now = elapsed(b);
		if (interrupted) {
			for (int i = 0; i < CONN_SLOTS; i++)
				ds_grpcc_conn_free(b->conns[i]),
				    b->conns[i] = NULL; /* closes open calls: UNAVAILABLE */
			b->n_report = b->next; /* never sent: leave them out of the stats */
			break;
		}
		if (b->users > 0) {
			while (b->inflight < b->users && b->next < b->n_reqs)
				start_request(b, b->next++);
		} else {
			while (b->next < b->n_reqs && b->reqs[b->next].arrival_s <= now)
				start_request(b, b->next++);
		}
		if (b->done >= b->n_reqs)
			break;
		int timeout = 250;
		if (b->users == 0 && b->next < b->n_reqs) {
			double dt = (b->reqs[b->next].arrival_s - elapsed(b)) * 1e3;
			timeout = dt <= 0 ? 0 : (int)DS_MIN(dt + 0.999, 250.0);
		}
		int np = 0;
		for (int i = 0; i < CONN_SLOTS; i++) {
			if (!b->conns[i])
				continue;
			int dl = ds_grpcc_conn_next_timeout_ms(b->conns[i]);
			if (dl >= 0 && dl < timeout)
				timeout = dl;
			ds_grpcc_conn_pollfd(b->conns[i], &pfds[i]);
			np++;
		}
		for (int i = 0; i < CONN_SLOTS; i++)
			if (!b->conns[i])
				pfds[i] = (struct pollfd){.fd = -1};
		if (np == 0 && b->inflight == 0 && b->next < b->n_reqs && timeout > 0)
			usleep((useconds_t)timeout * 1000);
		else if (poll(pfds, (nfds_t)CONN_SLOTS, timeout) < 0 && errno != EINTR)
			break;
		for (int i = 0; i < CONN_SLOTS; i++)
			if (b->conns[i])
				ds_grpcc_conn_io(b->conns[i], pfds[i].revents,
				                 &err); /* dead conns closed their calls */
		progress(b, false);
	}
	progress(b, true);
}

/* ---- set-up ---- */

static json_t *server_json(const Detserve__V1__ServerInfoResponse *s)
{
	json_t *m = json_null();
	if (s->model)
		m = json_pack("{s:s,s:i,s:i,s:i,s:i,s:s,s:s,s:b}", "architecture",
		              s->model->architecture, "vocab_size", s->model->vocab_size,
		              "hidden_size", s->model->hidden_size, "num_layers",
		              s->model->num_layers, "context_length", s->model->context_length,
		              "identity", s->model->identity, "source", s->model->source,
		              "has_tokenizer", s->model->has_tokenizer);
	return json_pack("{s:s,s:i,s:i,s:s,s:s,s:i,s:i,s:o}", "mode", s->mode, "window", s->window,
	                 "group", s->group, "backend", s->backend, "version", s->version,
	                 "kv_blocks", s->kv_blocks, "kv_block_size", s->kv_block_size, "model", m);
}

static json_t *config_json(const struct bench *b)
{
	char pl[64], ol[64];
	ds_len_dist_format(&b->wo.prompt_len, pl, sizeof(pl));
	ds_len_dist_format(&b->wo.output_len, ol, sizeof(ol));
	return json_pack(
	    "{s:s,s:s,s:i,s:s,s:o,s:i,s:i,s:o,s:f,s:s,s:s,s:I,s:i,s:f,s:i,s:f,s:b,s:i,s:s?}",
	    "label", b->label, "addr_host", b->host, "addr_port", b->port, "arrival",
	    b->trace ? "trace" : (b->users > 0 ? "closed" : "poisson"), "rate",
	    b->users > 0 || b->trace ? json_null() : ds_json_num(b->wo.rate), "users", b->users,
	    "requests", b->n_reqs, "duration_limit_s", ds_json_num(b->wo.duration_s),
	    "det_fraction", b->wo.det_fraction, "prompt_len", pl, "output_len", ol, "seed",
	    (json_int_t)b->wo.seed, "vocab", b->wo.vocab, "temperature", (double)b->wo.temperature,
	    "top_k", b->wo.top_k, "top_p", (double)b->wo.top_p, "ignore_eos", b->ignore_eos,
	    "connections", b->n_conns, "trace", b->trace);
}

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: detserve-bench [options]\n"
	    "  --addr HOST:PORT       server (default $DETSERVE_ADDR or 127.0.0.1:50051)\n"
	    "  --connections C        HTTP/2 connections (default 1), streams spread over them\n"
	    "arrivals (pick one):\n"
	    "  --rate R               open loop, Poisson at R req/s (default 10; 0 = all at t=0)\n"
	    "  --trace FILE.jsonl     open loop, replay a trace (arrival_s, "
	    "prompt_ids|prompt|prompt_len,\n"
	    "                         max_tokens, deterministic, seed, temperature, top_k, top_p, "
	    "tag)\n"
	    "  --users U              closed loop, U users back to back\n"
	    "  --requests N           number of requests (default 100; a trace: all its lines)\n"
	    "  --duration S           stop generating arrivals after S seconds\n"
	    "traffic mix:\n"
	    "  --det-fraction F       fraction of deterministic requests (default 0)\n"
	    "  --prompt-len D         N | fixed:N | uniform:A:B prompt tokens (default 32)\n"
	    "  --output-len D         same, for max_tokens (default 32)\n"
	    "  --prompt TEXT          send this text instead of random token ids\n"
	    "  --vocab V              token ids in [0, V) (default: ServerInfo's vocab)\n"
	    "  --seed S               request stream seed (default 1)\n"
	    "  --temperature T --top-k K --top-p P   sampling (default greedy)\n"
	    "  --no-ignore-eos        let EOS end requests early (default: ignore EOS)\n"
	    "  --early-verify on|off  per-request early verification (default: server's)\n"
	    "  --timeout-ms MS        per-request deadline (grpc-timeout)\n"
	    "  --api-key KEY          send authorization: Bearer KEY\n"
	    "output:\n"
	    "  --records FILE         per-request JSONL\n"
	    "  --record-tokens        include token ids in the records\n"
	    "  --summary FILE         summary JSON (schema bench/summary.schema.json)\n"
	    "  --label TEXT           free text stored in the summary\n"
	    "  --quiet                no progress line; --no-table: no table on stdout\n");
}

static int parse_args(struct bench *b, int argc, char **argv)
{
	enum {
		O_ADDR = 1,
		O_CONNS,
		O_RATE,
		O_TRACE,
		O_USERS,
		O_REQS,
		O_DUR,
		O_DET,
		O_PL,
		O_OL,
		O_PROMPT,
		O_VOCAB,
		O_SEED,
		O_TEMP,
		O_TOPK,
		O_TOPP,
		O_NOEOS,
		O_EV,
		O_TMO,
		O_KEY,
		O_REC,
		O_RECTOK,
		O_SUM,
		O_LABEL,
		O_QUIET,
		O_NOTABLE,
		O_HELP
	};
	static const struct option opts[] = {
	    {"addr", 1, NULL, O_ADDR},           {"connections", 1, NULL, O_CONNS},
	    {"rate", 1, NULL, O_RATE},           {"trace", 1, NULL, O_TRACE},
	    {"users", 1, NULL, O_USERS},         {"requests", 1, NULL, O_REQS},
	    {"duration", 1, NULL, O_DUR},        {"det-fraction", 1, NULL, O_DET},
	    {"prompt-len", 1, NULL, O_PL},       {"output-len", 1, NULL, O_OL},
	    {"prompt", 1, NULL, O_PROMPT},       {"vocab", 1, NULL, O_VOCAB},
	    {"seed", 1, NULL, O_SEED},           {"temperature", 1, NULL, O_TEMP},
	    {"top-k", 1, NULL, O_TOPK},          {"top-p", 1, NULL, O_TOPP},
	    {"no-ignore-eos", 0, NULL, O_NOEOS}, {"early-verify", 1, NULL, O_EV},
	    {"timeout-ms", 1, NULL, O_TMO},      {"api-key", 1, NULL, O_KEY},
	    {"records", 1, NULL, O_REC},         {"record-tokens", 0, NULL, O_RECTOK},
	    {"summary", 1, NULL, O_SUM},         {"label", 1, NULL, O_LABEL},
	    {"quiet", 0, NULL, O_QUIET},         {"no-table", 0, NULL, O_NOTABLE},
	    {"help", 0, NULL, O_HELP},           {NULL, 0, NULL, 0},
	};
	struct ds_err err;
	const char *addr = getenv("DETSERVE_ADDR");
	int o;
	if (!addr || !*addr)
		addr = "127.0.0.1:50051";
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		char *end = NULL;
		switch (o) {
		case O_ADDR:
			addr = optarg;
			break;
		case O_CONNS:
			b->n_conns = (int)strtol(optarg, &end, 10);
			break;
		case O_RATE:
			b->wo.rate = strtod(optarg, &end);
			break;
		case O_TRACE:
			b->trace = optarg;
			break;
		case O_USERS:
			b->users = (int)strtol(optarg, &end, 10);
			break;
		case O_REQS:
			b->wo.n_requests = (int)strtol(optarg, &end, 10);
			b->requests_set = true;
			break;
		case O_DUR:
			b->wo.duration_s = strtod(optarg, &end);
			break;
		case O_DET:
			b->wo.det_fraction = strtod(optarg, &end);
			break;
		case O_PL:
		case O_OL:
			if (ds_len_dist_parse(o == O_PL ? "--prompt-len" : "--output-len", optarg,
			                      o == O_PL ? &b->wo.prompt_len : &b->wo.output_len,
			                      &err) != DS_OK) {
				fprintf(stderr, "detserve-bench: %s\n", err.msg);
				return -1;
			}
			break;
		case O_PROMPT:
			b->wo.prompt_text = optarg;
			break;
		case O_VOCAB:
			b->wo.vocab = (int)strtol(optarg, &end, 10);
			break;
		case O_SEED:
			b->wo.seed = strtoull(optarg, &end, 10);
			break;
		case O_TEMP:
			b->wo.temperature = strtof(optarg, &end);
			break;
		case O_TOPK:
			b->wo.top_k = (int)strtol(optarg, &end, 10);
			break;
		case O_TOPP:
			b->wo.top_p = strtof(optarg, &end);
			break;
		case O_NOEOS:
			b->ignore_eos = false;
			break;
		case O_EV:
			if (strcmp(optarg, "on") && strcmp(optarg, "off")) {
				fprintf(stderr, "detserve-bench: --early-verify takes on or off\n");
				return -1;
			}
			b->early_verify = !strcmp(optarg, "on");
			break;
		case O_TMO:
			b->timeout_ms = strtoll(optarg, &end, 10);
			break;
		case O_KEY:
			snprintf(b->auth, sizeof(b->auth), "Bearer %s", optarg);
			b->md[0] = (struct ds_grpcc_md){"authorization", b->auth};
			b->n_md = 1;
			break;
		case O_REC:
			b->records_path = optarg;
			break;
		case O_RECTOK:
			b->record_tokens = true;
			break;
		case O_SUM:
			b->summary_path = optarg;
			break;
		case O_LABEL:
			snprintf(b->label, sizeof(b->label), "%s", optarg);
			break;
		case O_QUIET:
			b->quiet = true;
			break;
		case O_NOTABLE:
			b->no_table = true;
			break;
		case O_HELP:
			usage(stdout);
			return 1;
		default:
			usage(stderr);
			return -1;
		}
		if (end && *end) {
			fprintf(stderr, "detserve-bench: bad number '%s'\n", optarg);
			return -1;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "detserve-bench: unexpected argument '%s'\n", argv[optind]);
		return -1;
	}
	const char *colon = strrchr(addr, ':');
	if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof(b->host) ||
	    atoi(colon + 1) <= 0) {
		fprintf(stderr, "detserve-bench: bad address '%s' (want HOST:PORT)\n", addr);
		return -1;
	}
	memcpy(b->host, addr, (size_t)(colon - addr));
	b->host[colon - addr] = '\0';
	b->port = atoi(colon + 1);
	if (b->n_conns < 1 || b->n_conns > MAX_CONNS || b->users < 0 || b->wo.n_requests < 1 ||
	    !(b->wo.det_fraction >= 0 && b->wo.det_fraction <= 1)) {
		fprintf(stderr,
		        "detserve-bench: need 1 <= connections <= %d, users >= 0, requests >= 1, "
		        "det-fraction in [0, 1]\n",
		        MAX_CONNS);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct bench b = {.n_conns = 1, .ignore_eos = true, .early_verify = -1};
	struct ds_err err = {{0}};
	Detserve__V1__ServerInfoResponse *info = NULL;
	struct ds_client_status st;
	json_t *server = NULL, *summary = NULL;
	int rc = 1, vocab_flag;

	ds_workload_opts_default(&b.wo);
	b.wo.vocab = 0;
	rc = parse_args(&b, argc, argv);
	if (rc != 0)
		return rc > 0 ? 0 : EXIT_USAGE;
	rc = 1;
	vocab_flag = b.wo.vocab;
	if (b.trace && !b.requests_set)
		b.wo.n_requests = 0; /* the whole trace */
	signal(SIGPIPE, SIG_IGN);
	signal(SIGINT, on_sigint);

	if (ds_grpcc_conn_connect(&b.conns[0], b.host, b.port, NULL, &err) != DS_OK) {
		fprintf(stderr, "detserve-bench: error: UNAVAILABLE: %s\n", err.msg);
		return DS_GRPC_UNAVAILABLE;
	}
	if (ds_client_server_info(b.conns[0], 10000, b.md, b.n_md, &info, &st, &err) != DS_OK ||
	    st.code != DS_GRPC_OK) {
		fprintf(stderr, "detserve-bench: error: ServerInfo: %s: %s\n",
		        ds_grpc_code_name(st.code), err.msg[0] ? err.msg : st.message);
		rc = st.code ? st.code : DS_GRPC_UNAVAILABLE;
		goto out;
	}
	server = server_json(info);
	if (!vocab_flag)
		b.wo.vocab =
		    info->model && info->model->vocab_size > 0 ? info->model->vocab_size : 256;
	if ((b.trace ? ds_workload_trace(b.trace, &b.wo, &b.reqs, &b.n_reqs, &err)
	             : ds_workload_poisson(&b.wo, &b.reqs, &b.n_reqs, &err)) != DS_OK) {
		fprintf(stderr, "detserve-bench: %s\n", err.msg);
		rc = EXIT_USAGE;
		goto out;
	}
	b.recs = calloc((size_t)b.n_reqs, sizeof(*b.recs));
	if (!b.recs) {
		fprintf(stderr, "detserve-bench: no memory for %d records\n", b.n_reqs);
		goto out;
	}
	for (int i = 1; i < b.n_conns; i++)
		if (ds_grpcc_conn_connect(&b.conns[i], b.host, b.port, NULL, &err) != DS_OK) {
			fprintf(stderr, "detserve-bench: error: UNAVAILABLE: %s\n", err.msg);
			rc = DS_GRPC_UNAVAILABLE;
			goto out;
		}

	b.n_report = b.n_reqs;
	run(&b);
	if (b.nomem)
		fprintf(stderr, "detserve-bench: warning: out of memory recording tokens; some "
		                "calls were cancelled\n");
	double duration = 0;
	for (int i = 0; i < b.n_report; i++)
		if (b.recs[i].done && b.recs[i].t_end > duration)
			duration = b.recs[i].t_end;

	if (b.records_path) {
		FILE *f = fopen(b.records_path, "w");
		if (!f ||
		    ds_report_records(f, b.recs, b.n_report, b.record_tokens, &err) != DS_OK) {
			fprintf(stderr, "detserve-bench: %s: %s\n", b.records_path,
			        f ? err.msg : strerror(errno));
			if (f)
				fclose(f);
			goto out;
		}
		fclose(f);
	}
	summary =
	    ds_report_summary(b.recs, b.n_report, duration, config_json(&b), json_incref(server));
	if (!summary) {
		fprintf(stderr, "detserve-bench: no memory for the summary\n");
		goto out;
	}
	if (b.summary_path &&
	    json_dump_file(summary, b.summary_path, JSON_INDENT(2) | JSON_REAL_PRECISION(8)) != 0) {
		fprintf(stderr, "detserve-bench: cannot write %s\n", b.summary_path);
		goto out;
	}
	if (!b.no_table)
		ds_report_table(stdout, summary);
	rc = interrupted ? 1 : 0;
out:
	json_decref(summary);
	json_decref(server);
	if (info)
		detserve__v1__server_info_response__free_unpacked(info, NULL);
	for (int i = 0; i < CONN_SLOTS; i++)
		ds_grpcc_conn_free(b.conns[i]);
	for (int i = 0; b.recs && i < b.n_reqs; i++)
		ds_bench_rec_free(&b.recs[i]);
	free(b.recs);
	ds_workload_free(b.reqs, b.n_reqs);
	return rc;
}
