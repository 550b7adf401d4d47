/* fuzz_grpc.c - fuzz target for the gRPC framing (grpc/grpc_wire.c, shared by the server and the
 * client) and the server's request decoding: the 5-byte message deframer fed in arbitrary chunks,
 * GenerateRequest / ServerInfoRequest / HealthCheckRequest decoding and validation (with and
 * without a tokenizer, with protobuf-c allocations failing at a chosen index), response encoding,
 * grpc-timeout parsing and grpc-message percent-encoding/decoding.
 *
 * Besides "no crash, no leak" it checks properties: chunked reassembly yields exactly the
 * messages of a one-shot feed; an accepted request satisfies every bad-input rule; an encoded
 * response decodes back to the same tokens; an encoded grpc-message is printable ASCII and decodes
 * back to the input.
 *
 * Built two ways: with clang as a libFuzzer target (-fsanitize=fuzzer, `make fuzz`), and
 * otherwise with a small deterministic driver (main below) that runs built-in seeds plus
 * seeded random mutations for a bounded time, so every CI build exercises it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "chat_template.h"
#include "detserve.pb-c.h"
#include "grpc_wire.h"
#include "rpc.h"
#include "tokenizer.h"

#define CHECK(x)                                                                                   \
	do {                                                                                       \
		if (!(x)) {                                                                        \
			fprintf(stderr, "fuzz_grpc: property failed: %s (%s:%d)\n", #x, __FILE__,  \
			        __LINE__);                                                         \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

/* ---- a protobuf-c allocator that fails the n-th allocation ---- */

struct fail_alloc {
	int left; /* allocations before the failing one; < 0 = never fail */
	int live;
};

static void *fa_alloc(void *d, size_t n)
{
	struct fail_alloc *f = d;
	if (f->left == 0)
		return NULL;
	if (f->left > 0)
		f->left--;
	void *p = malloc(n);
	if (p)
		f->live++;
	return p;
}

static void fa_free(void *d, void *p)
{
	struct fail_alloc *f = d;
	if (p)
		f->live--;
	free(p);
}

/* ---- message collection for the reassembly property ---- */

struct msgs {
	int n;
	uint8_t *data[64];
	size_t len[64];
};

/* The deframer lends each message: keep a copy (NULL when empty). */
static enum ds_status collect(void *ctx, const uint8_t *msg, size_t len, struct ds_err *err)
{
	struct msgs *m = ctx;
	if (m->n == 64)
		return ds_errf(err, DS_ERR_INVALID, "too many");
	uint8_t *copy = NULL;
	if (len > 0) {
		if (!(copy = malloc(len)))
			return ds_errf(err, DS_ERR_NOMEM, "out of memory");
		memcpy(copy, msg, len);
	}
	m->data[m->n] = copy;
	m->len[m->n++] = len;
	return DS_OK;
}

static void msgs_free(struct msgs *m)
{
	for (int i = 0; i < m->n; i++)
		free(m->data[i]);
	m->n = 0;
}

/* ---- the checks ---- */

static const struct ds_tokenizer *fuzz_tokenizer(const struct ds_model_config *cfg)
{
	static struct ds_tokenizer *tok; /* built once, immutable, shared by all inputs */
	static bool tried;
	if (!tried) {
		tried = true;
		struct ds_err e;
		if (ds_tokenizer_init_bytelevel(cfg, &tok, &e) != DS_OK)
			tok = NULL;
	}
	return tok;
}

static const struct ds_chat_template *fuzz_chat(void)
{
	static struct ds_chat_template chat; /* ChatML, built once */
	static int state;                    /* 0 untried, 1 ok, 2 failed */
	static const char tmpl[] = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
	                           "{{ m['content'] }}<|im_end|>\n{% endfor %}";
	if (state == 0) {
		struct ds_err e;
		state =
		    ds_chat_template_init(&chat, tmpl, sizeof(tmpl) - 1, NULL, &e) == DS_OK ? 1 : 2;
	}
	return state == 1 ? &chat : NULL;
}

static long n_accepted; /* driver statistics: requests that passed validation */

static void check_generate(const struct ds_model_config *cfg, bool with_tok, int fail_at,
                           enum ds_mode mode, const uint8_t *p, size_t n)
{
	struct fail_alloc fa = {.left = fail_at, .live = 0};
	ProtobufCAllocator alloc = {.alloc = fa_alloc, .free = fa_free, .allocator_data = &fa};
	struct ds_rpc_env env = {.cfg = cfg,
	                         .mode = mode,
	                         .tok = with_tok ? fuzz_tokenizer(cfg) : NULL,
	                         .chat = with_tok ? fuzz_chat() : NULL,
	                         .alloc = &alloc};
	struct ds_rpc_gen g;
	char err[512];
	enum ds_grpc_code c = ds_rpc_gen_decode(&env, p, n, &g, err, sizeof(err));
	CHECK(fa.live == 0); /* the unpacked request is always released */
	if (c != DS_GRPC_OK) {
		CHECK(c == DS_GRPC_INVALID_ARGUMENT || c == DS_GRPC_FAILED_PRECONDITION ||
		      c == DS_GRPC_RESOURCE_EXHAUSTED);
		CHECK(err[0] != '\0');
		ds_rpc_gen_free(&g);
		return;
	}
	const struct ds_request_params *rp = &g.params;
	n_accepted++;
	CHECK(rp->n_prompt >= 1 && rp->n_prompt <= cfg->max_pos);
	for (int i = 0; i < rp->n_prompt; i++)
		CHECK(rp->prompt[i] >= 0 && rp->prompt[i] < cfg->vocab_size);
	CHECK(rp->max_tokens > 0);
	CHECK(rp->sampling.temperature >= 0.0f && isfinite(rp->sampling.temperature));
	CHECK(rp->sampling.top_p > 0.0f && rp->sampling.top_p <= 1.0f);
	CHECK(rp->sampling.top_k >= 0);
	CHECK(!(rp->deterministic && mode == DS_MODE_FAST));
	for (int i = 0; i < rp->n_stop_ids; i++)
		CHECK(rp->stop_ids[i] >= 0 && rp->stop_ids[i] < cfg->vocab_size);
	for (int i = 0; i < rp->n_stop_seqs; i++)
		CHECK(rp->stop_seq_lens[i] > 0);

	/* encode the prompt back as a response and decode it: same tokens */
	struct ds_event fin;
	memset(&fin, 0, sizeof(fin));
	fin.final = true;
	fin.finish = DS_FINISH_LENGTH;
	fin.deterministic = rp->deterministic;
	snprintf(fin.fingerprint, sizeof(fin.fingerprint), "00112233445566778899aabbccddeeff");
	struct ds_rpc_buf out = {0};
	CHECK(ds_rpc_gen_encode(rp->prompt, NULL, rp->n_prompt, "txt", &fin, g.request_id, &out) ==
	      DS_OK);
	CHECK(out.len >= 5 && out.data[0] == 0);
	uint32_t blen = (uint32_t)out.data[1] << 24 | (uint32_t)out.data[2] << 16 |
	                (uint32_t)out.data[3] << 8 | out.data[4];
	CHECK(blen == out.len - 5);
	Detserve__V1__GenerateResponse *r =
	    detserve__v1__generate_response__unpack(NULL, out.len - 5, out.data + 5);
	CHECK(r != NULL);
	CHECK(r->n_token_ids == (size_t)rp->n_prompt);
	CHECK(memcmp(r->token_ids, rp->prompt, (size_t)rp->n_prompt * sizeof(int32_t)) == 0);
	CHECK(r->final && strcmp(r->request_id, g.request_id) == 0);
	detserve__v1__generate_response__free_unpacked(r, NULL);
	free(out.data);
	ds_rpc_gen_free(&g);
}

static void check_reader(const struct ds_model_config *cfg, uint8_t sel, uint8_t chunk_seed,
                         const uint8_t *p, size_t n)
{
	size_t max_len = (sel & 0x40) ? 64 : 1 << 16;
	struct msgs whole = {0}, parts = {0};
	struct ds_grpc_deframer a, b;
	struct ds_err err;
	ds_grpc_deframer_init(&a, max_len);
	ds_grpc_deframer_init(&b, max_len);
	enum ds_status ca = ds_grpc_deframer_feed(&a, p, n, collect, &whole, &err);
	enum ds_status cb = DS_OK;
	uint32_t x = chunk_seed * 2654435761u + 1;
	for (size_t off = 0; off < n && cb == DS_OK;) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		size_t take = DS_MIN(n - off, (size_t)(x % 9)); /* includes empty chunks */
		cb = ds_grpc_deframer_feed(&b, p + off, take, collect, &parts, &err);
		off += take;
	}
	CHECK(ca == cb);
	CHECK(whole.n == parts.n);
	for (int i = 0; i < whole.n; i++) {
		CHECK(whole.len[i] == parts.len[i]);
		CHECK(whole.len[i] <= max_len);
		CHECK(whole.len[i] == 0 || memcmp(whole.data[i], parts.data[i], whole.len[i]) == 0);
	}
	if (ca == DS_OK)
		CHECK(ds_grpc_deframer_idle(&a) == ds_grpc_deframer_idle(&b));
	/* each complete message is a request for one of the methods */
	for (int i = 0; i < whole.n && i < 4; i++) {
		struct ds_rpc_buf out = {0};
		char e2[256];
		check_generate(cfg, sel & 1, -1, (sel & 2) ? DS_MODE_FAST : DS_MODE_DVR,
		               whole.data[i], whole.len[i]);
		struct ds_rpc_info info = {.cfg = cfg, .mode = DS_MODE_DVR};
		if (ds_rpc_info_reply(&info, whole.data[i], whole.len[i], &out, e2, sizeof(e2)) ==
		    DS_GRPC_OK)
			free(out.data);
		out.data = NULL;
		if (ds_rpc_health_reply(true, whole.data[i], whole.len[i], &out, e2, sizeof(e2)) ==
		    DS_GRPC_OK)
			free(out.data);
	}
	msgs_free(&whole);
	msgs_free(&parts);
	ds_grpc_deframer_free(&a);
	ds_grpc_deframer_free(&b);
}

static void check_headers(const uint8_t *p, size_t n)
{
	char s[64], enc[256], dec[64];
	size_t k = DS_MIN(n, sizeof(s) - 1);
	memcpy(s, p, k);
	s[k] = '\0';
	uint64_t ns;
	if (ds_grpc_timeout_parse(s, k, &ns) == DS_OK)
		CHECK(k >= 2 && k <= 9);
	size_t e = ds_grpc_percent_encode(enc, sizeof(enc), s); /* 63 bytes fit escaped */
	CHECK(e == strlen(enc));
	for (const char *c = enc; *c; c++)
		CHECK(*c >= 0x20 && *c <= 0x7e);
	CHECK(ds_grpc_percent_decode(dec, sizeof(dec), enc, e) == strlen(s));
	CHECK(strcmp(dec, s) == 0);
	ds_grpc_percent_encode(enc, 7, s); /* truncation keeps whole escapes */
	CHECK(strlen(enc) < 7);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct ds_model_config cfg;
	if (cfg.vocab_size == 0)
		DS_ASSERT(ds_model_preset("tiny", &cfg) == DS_OK);
	if (size < 3)
		return 0;
	uint8_t sel = data[0], chunk = data[1], fail = data[2];
	const uint8_t *p = data + 3;
	size_t n = size - 3;
	switch (sel % 4) {
	case 0:
	case 1:
		check_reader(&cfg, sel >> 2, chunk, p, n);
		break;
	case 2:
		check_generate(&cfg, sel & 4, fail < 64 ? fail : -1,
		               (sel & 8) ? DS_MODE_FAST : DS_MODE_DVR, p, n);
		break;
	default:
		check_headers(p, n);
		break;
	}
	return 0;
}

#ifndef DS_LIBFUZZER
/* ---- the deterministic driver for non-clang builds ---- */

static size_t seed_request(uint8_t *buf, size_t cap, int variant)
{
	Detserve__V1__GenerateRequest rq = DETSERVE__V1__GENERATE_REQUEST__INIT;
	Detserve__V1__TokenIds ids = DETSERVE__V1__TOKEN_IDS__INIT;
	Detserve__V1__SamplingParams sp = DETSERVE__V1__SAMPLING_PARAMS__INIT;
	int32_t prompt[] = {1, 2, 300, 4, 255};
	int32_t stops[] = {257};
	char *stop_s[] = {"ab"};
	ids.n_ids = variant == 1 ? 5 : 4;
	ids.ids = prompt;
	rq.prompt_case = DETSERVE__V1__GENERATE_REQUEST__PROMPT_PROMPT_IDS;
	rq.prompt_ids = &ids;
	Detserve__V1__ChatMessage m0 = DETSERVE__V1__CHAT_MESSAGE__INIT;
	Detserve__V1__ChatMessage *mp[1] = {&m0};
	Detserve__V1__ChatMessages msgs = DETSERVE__V1__CHAT_MESSAGES__INIT;
	if (variant == 5) {
		m0.role = "user";
		m0.content = "hi";
		msgs.n_messages = 1;
		msgs.messages = mp;
		rq.prompt_case = DETSERVE__V1__GENERATE_REQUEST__PROMPT_MESSAGES;
		rq.messages = &msgs;
	}
	if (variant == 2) {
		rq.prompt_case = DETSERVE__V1__GENERATE_REQUEST__PROMPT_PROMPT_TEXT;
		rq.prompt_text = "hello";
		rq.n_stop = 1;
		rq.stop = stop_s;
	}
	rq.max_tokens = variant == 3 ? 0 : 16;
	sp.temperature = 0.7f;
	sp.top_p_opt_case = DETSERVE__V1__SAMPLING_PARAMS__TOP_P_OPT_TOP_P;
	sp.top_p = 0.9f;
	sp.seed_opt_case = DETSERVE__V1__SAMPLING_PARAMS__SEED_OPT_SEED;
	sp.seed = 42;
	rq.sampling = &sp;
	rq.deterministic = variant != 4;
	rq.n_stop_token_ids = 1;
	rq.stop_token_ids = stops;
	rq.request_id = "seed";
	size_t n = detserve__v1__generate_request__get_packed_size(&rq);
	DS_ASSERT(n + 8 <= cap);
	return detserve__v1__generate_request__pack(&rq, buf);
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 10.0;
	uint64_t x = argc > 2 ? strtoull(argv[2], NULL, 0) : 0x9e3779b97f4a7c15ull;
	enum { CAP = 4096 };
	static uint8_t seeds[16][CAP];
	static size_t seed_len[16];
	int n_seeds = 0;
	/* framed and raw valid requests, two messages in one buffer, headers */
	for (int v = 0; v < 6; v++) {
		uint8_t msg[512];
		size_t m = seed_request(msg, sizeof(msg), v);
		uint8_t *s = seeds[n_seeds];
		s[0] = (uint8_t)(4 * v); /* reader mode */
		s[1] = (uint8_t)(7 * v + 1);
		s[2] = 255;
		ds_grpc_frame_prefix(s + 3, (uint32_t)m);
		memcpy(s + 8, msg, m);
		memcpy(s + 8 + m, s + 3, m + 5); /* a second copy in the same buffer */
		seed_len[n_seeds++] = 3 + 2 * (m + 5);
		s = seeds[n_seeds];
		s[0] = 2 | (uint8_t)(4 * (v & 1));
		s[1] = 0;
		s[2] = (uint8_t)(v * 3);
		memcpy(s + 3, msg, m);
		seed_len[n_seeds++] = 3 + m;
	}
	memcpy(seeds[n_seeds],
	       "\x03\x00\x00"
	       "150m",
	       7);
	seed_len[n_seeds++] = 7;
	memcpy(seeds[n_seeds],
	       "\x03\x00\x00"
	       "caf\xc3\xa9 %\n",
	       11);
	seed_len[n_seeds++] = 11;

	uint8_t buf[CAP];
	long iters = 0;
	struct timespec ts0, ts1;
	clock_gettime(CLOCK_MONOTONIC, &ts0); /* wall time: bounded even on a loaded box */
	for (int i = 0; i < n_seeds; i++)
		LLVMFuzzerTestOneInput(seeds[i], seed_len[i]);
	/* every allocation of protobuf-c's unpack fails once, for each seed request (STYLE.md:
	 * the injected allocator): no crash, no leak, a clean error */
	{
		struct ds_model_config cfg;
		DS_ASSERT(ds_model_preset("tiny", &cfg) == DS_OK);
		for (int v = 0; v < 6; v++) {
			uint8_t msg[512];
			size_t m = seed_request(msg, sizeof(msg), v);
			for (int at = 0; at < 32; at++) {
				check_generate(&cfg, true, at, DS_MODE_DVR, msg, m);
				check_generate(&cfg, false, at, DS_MODE_FAST, msg, m);
			}
		}
	}
	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &ts1);
		if ((double)(ts1.tv_sec - ts0.tv_sec) + (ts1.tv_nsec - ts0.tv_nsec) / 1e9 >=
		    seconds)
			break;
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		int s = (int)(x % (uint64_t)n_seeds);
		size_t n = seed_len[s];
		memcpy(buf, seeds[s], n);
		int muts = 1 + (int)((x >> 8) % 8);
		for (int k = 0; k < muts; k++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			size_t at = (size_t)(x >> 16) % (n ? n : 1);
			switch ((x >> 4) % 5) {
			case 0:
				buf[at] ^= (uint8_t)(1u << ((x >> 40) % 8));
				break;
			case 1:
				buf[at] = (uint8_t)(x >> 32);
				break;
			case 2:
				if (n > 4)
					n -= 1 + (size_t)((x >> 24) % DS_MIN(n - 3, 16));
				break;
			case 3:
				if (n + 8 < CAP) {
					memmove(buf + at + 4, buf + at, n - at);
					memcpy(buf + at, &x, 4);
					n += 4;
				}
				break;
			default:
				buf[at] = (uint8_t) "\x00\x01\x7f\x80\xff"[(x >> 50) % 5];
				break;
			}
		}
		LLVMFuzzerTestOneInput(buf, n);
		iters++;
	}
	printf("fuzz_grpc: %ld mutated inputs + %d seeds in %.1f s, %ld valid requests, "
	       "no property failed\n",
	       iters, n_seeds, seconds, n_accepted);
	return n_accepted > 0 ? 0 : 1;
}
#endif
