/* test_engine_smollm2.c - oracle equality on the real SmolLM2-135M-Instruct (issue 8: the
 * realistic CI subset). Twenty seeded scenarios from the shared harness run on the CPU backend
 * with the GGUF model; every deterministic request is replayed alone through a ref-only engine
 * and must match bit for bit (tokens, logprobs, finish reason, fingerprint).
 *
 * Key decision: the harness draws the scenario (W, G, injection, KV pool, arrivals, sampling,
 * cancels, clones, follow-up turns), then this file swaps its random token prompts for real
 * text encoded with the model's own tokenizer, so top-1/top-2 margins (what makes the fast
 * path disagree with the reference) are those of real use. Prompt structure is kept: prompts
 * from one harness family share a system prompt (prefix-cache hits), clones stay clones, and a
 * follow-up turn is the earlier conversation plus the tokens that open a new turn. Outputs are
 * short and batches small so the whole test stays well under 90 s on 2 shared cores.
 *
 * The GGUF comes from $DS_SMOLLM2_GGUF or tools/fetch-smollm2.sh; the test exits 77 (skip)
 * only when that download is impossible. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"
#include "model.h"
#include "test_engine_harness.h"
#include "tokenizer.h"

#ifndef DS_SOURCE_ROOT
#define DS_SOURCE_ROOT "."
#endif

#define N_SCENARIOS 20
#define MAX_OUT 8    /* max_tokens cap: short outputs keep the oracle replays cheap */
#define MAX_REQ 6    /* requests per scenario */
#define N_SYS 3
#define N_USER 8
#define N_PROSE 4

static const char *const sys_prompts[N_SYS] = {
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
    "You are a patient teacher. Answer in two short sentences and avoid jargon.",
    "You are a travel agent who writes friendly, concise replies to customers.",
};
static const char *const user_msgs[N_USER] = {
    "What is the capital of France?",
    "Explain why the sky is blue.",
    "Write a haiku about the sea.",
    "How many legs does a spider have?",
    "Give me three tips for learning to cook.",
    "What is 12 times 7?",
    "Summarize the plot of Romeo and Juliet.",
    "Which planet is closest to the sun?",
};
static const char *const prose[N_PROSE] = {
    "The history of the printing press begins in the fifteenth century, when Johannes "
    "Gutenberg combined movable metal type with an oil-based ink and a wooden press. Within a "
    "few decades, printing shops had spread across Europe, and the price of books fell",
    "Photosynthesis is the process by which green plants use sunlight to turn water and "
    "carbon dioxide into sugar and oxygen. It takes place mainly in the leaves, inside small "
    "structures called chloroplasts, which contain the pigment",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    a, b = 0, 1\n"
    "    for _ in range(n):\n        a, b = b, a + b\n    return",
    "Once upon a time, in a small village at the edge of a great forest, there lived an old "
    "clockmaker who had never left his workshop. One winter morning, a stranger knocked on",
};

struct text {
	int32_t *ids;
	int n;
};

struct fixture {
	struct ds_model *m;
	struct text chat[N_SYS][N_USER]; /* ChatML: system + user + assistant opening */
	struct text prose[N_PROSE];
	struct text turn; /* "<|im_end|>\n<|im_start|>user\n": opens a follow-up turn */
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t hash_ids(const int32_t *p, int n)
{
	uint64_t h = 0x51ed270b27ab2f0dull;
	for (int i = 0; i < n; i++)
		h = ds_mix64(h ^ (uint64_t)(uint32_t)p[i]);
	return h;
}

static bool encode(const struct ds_tokenizer *t, const char *s, struct text *out, char *msg,
                   size_t len)
{
	struct ds_err err;
	size_t n = 0;
	if (ds_tokenizer_encode(t, s, strlen(s), false, &out->ids, &n, &err) != DS_OK) {
		snprintf(msg, len, "encode: %.400s", err.msg);
		return false;
	}
	out->n = (int)n;
	return true;
}

static bool fixture_texts(struct fixture *f, const char *path, char *msg, size_t len)
{
	struct ds_tokenizer *t = NULL;
	struct ds_err err;
	if (ds_tokenizer_load(path, &t, &err) != DS_OK) {
		snprintf(msg, len, "tokenizer: %.400s", err.msg);
		return false;
	}
	bool ok = true;
	char buf[512];
	for (int s = 0; ok && s < N_SYS; s++)
		for (int u = 0; ok && u < N_USER; u++) {
			snprintf(buf, sizeof(buf),
			         "<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\n%s<|im_end|>\n"
			         "<|im_start|>assistant\n",
			         sys_prompts[s], user_msgs[u]);
			ok = encode(t, buf, &f->chat[s][u], msg, len);
		}
	for (int p = 0; ok && p < N_PROSE; p++)
		ok = encode(t, prose[p], &f->prose[p], msg, len);
	if (ok)
		ok = encode(t, "<|im_end|>\n<|im_start|>user\n", &f->turn, msg, len);
	ds_tokenizer_free(t);
	return ok;
}

static void fixture_free(struct fixture *f)
{
	for (int s = 0; s < N_SYS; s++)
		for (int u = 0; u < N_USER; u++)
			free(f->chat[s][u].ids);
	for (int p = 0; p < N_PROSE; p++)
		free(f->prose[p].ids);
	free(f->turn.ids);
	ds_model_free(f->m);
}

/* Replaces the harness's random prompts with real text, keeping the scenario's structure. */
static void realistic_prompts(struct scenario *s, const struct fixture *f)
{
	int n = s->n_req;
	struct scen_req *orig = malloc((size_t)n * sizeof(*orig));
	DS_ASSERT(orig);
	memcpy(orig, s->req, (size_t)n * sizeof(*orig));
	int bs = s->opts.kv_block_size, old_need = 1, need = 1;
	for (int i = 0; i < n; i++) {
		const struct scen_req *o = &orig[i];
		struct scen_req *q = &s->req[i];
		old_need = DS_MAX(old_need, (o->n_prompt + o->max_tokens + bs - 1) / bs);
		q->max_tokens = 1 + (int)(ds_mix64(s->seed * 977 + (uint64_t)i) % MAX_OUT);
		if (o->follow >= 0) {
			/* the earlier conversation, then the opening of the next user turn */
			q->n_extra = DS_MIN(o->n_extra, f->turn.n);
			memcpy(q->extra, f->turn.ids, (size_t)q->n_extra * sizeof(int32_t));
			const struct scen_req *src = &s->req[o->follow];
			q->n_prompt = src->n_prompt + src->max_tokens + q->n_extra;
			need = DS_MAX(need, (q->n_prompt + q->max_tokens + bs - 1) / bs);
			continue;
		}
		int clone = -1;
		for (int j = 0; j < i && clone < 0; j++)
			if (orig[j].follow < 0 && orig[j].n_prompt == o->n_prompt &&
			    !memcmp(orig[j].prompt, o->prompt, (size_t)o->n_prompt * sizeof(int32_t)))
				clone = j;
		if (clone >= 0) {
			memcpy(q->prompt, s->req[clone].prompt,
			       (size_t)s->req[clone].n_prompt * sizeof(int32_t));
			q->n_prompt = s->req[clone].n_prompt;
			if (o->max_tokens == orig[clone].max_tokens)
				q->max_tokens = s->req[clone].max_tokens;
		} else {
			/* a family (same first token) shares a system prompt; the question and the
			 * choice between chat and raw prose follow the whole original prompt */
			uint64_t hf = ds_mix64((uint64_t)(uint32_t)o->prompt[0] + 17);
			uint64_t hp = hash_ids(o->prompt, o->n_prompt);
			const struct text *t;
			int cut;
			if (o->n_prompt >= 12 || (hp & 3) != 0) {
				t = &f->chat[hf % N_SYS][hp % N_USER];
				cut = t->n;
			} else { /* a raw text fragment, cut mid-sentence */
				t = &f->prose[hp % N_PROSE];
				cut = DS_MIN(t->n, 12 + (int)((hp >> 32) % 40));
			}
			memcpy(q->prompt, t->ids, (size_t)cut * sizeof(int32_t));
			q->n_prompt = cut;
		}
		DS_ASSERT(q->n_prompt + MAX_OUT + 3 <= SCEN_MAX_PROMPT);
		need = DS_MAX(need, (q->n_prompt + q->max_tokens + bs - 1) / bs);
	}
	/* keep the harness's slack ratio: a pool small enough that concurrency preempts */
	int slack = s->opts.kv_blocks - old_need;
	s->opts.kv_blocks = need + (int)((int64_t)slack * need / old_need);
	/* bring arrivals closer so the short requests overlap */
	for (int i = 0; i < n; i++) {
		struct scen_req *q = &s->req[i];
		if (q->arrive_step > 0)
			q->arrive_step /= 6;
		if (q->cancel_step >= 0)
			q->cancel_step = DS_MAX(q->arrive_step, q->cancel_step / 6);
	}
	free(orig);
}

static enum ds_status mk_cpu(struct ds_backend *be, void *arg, bool oracle, struct ds_err *err)
{
	struct fixture *f = arg;
	/* the oracle on one thread, the engine under test on two: the reference path must not
	 * care about the thread count */
	return ds_backend_cpu_init(be, f->m, oracle ? 1 : 2, err);
}

/* The GGUF's path: $DS_SMOLLM2_GGUF, else tools/fetch-smollm2.sh. NULL when impossible. */
static bool smollm2_path(char *out, size_t len)
{
	const char *env = getenv("DS_SMOLLM2_GGUF");
	if (env && *env) {
		snprintf(out, len, "%s", env);
		return true;
	}
	FILE *p = popen(DS_SOURCE_ROOT "/tools/fetch-smollm2.sh", "r");
	if (!p)
		return false;
	char line[1024] = {0};
	char *r = fgets(line, sizeof(line), p);
	int rc = pclose(p);
	if (!r || rc != 0)
		return false;
	line[strcspn(line, "\n")] = 0;
	snprintf(out, len, "%s", line);
	return line[0] != 0;
}

int main(void)
{
	char path[1024], msg[512];
	if (!smollm2_path(path, sizeof(path))) {
		printf("SKIP: SmolLM2 GGUF unavailable: tools/fetch-smollm2.sh failed (see its "
		       "message above; offline?)\n");
		return 77;
	}
	double t0 = now_s();
	struct fixture f = {0};
	struct ds_err err;
	if (ds_model_load(path, &f.m, &err) != DS_OK) {
		printf("FAIL: loading %s: %s\n", path, err.msg);
		return 1;
	}
	if (!fixture_texts(&f, path, msg, sizeof(msg))) {
		printf("FAIL: %s\n", msg);
		fixture_free(&f);
		return 1;
	}
	printf("loaded %s in %.1f s\n", path, now_s() - t0);

	static const int windows[] = {1, 4, 8, 16, 32};
	struct scen_gen_opts g = {.n_req_max = MAX_REQ,
	                          .windows = windows,
	                          .n_windows = 5,
	                          .invariant_share = 0.1,
	                          .det_share = 0.6,
	                          .inject = -1};
	uint64_t seed0 = 8100;
	const char *env = getenv("DS_SMOLLM2_SEED0");
	if (env && *env)
		seed0 = strtoull(env, NULL, 10);
	struct {
		uint64_t det, nondet, greedy, sampled, windows, rollbacks, natural_rb, preempt,
		    prefix_hits, cancelled, follow, max_conc, tokens, inject;
	} t = {0};
	int failed = 0;
	/* fewer only for debugging (an ASan build runs ~10x slower); CI runs the 20 */
	int n_scen = N_SCENARIOS;
	env = getenv("DS_SMOLLM2_SCENARIOS");
	if (env && *env)
		n_scen = DS_MAX(1, atoi(env));
	uint64_t seed = seed0;
	for (int k = 0; k < n_scen; k++, seed++) {
		struct scenario s;
		/* several concurrent requests, at least one deterministic: skip seeds without */
		for (;; seed++) {
			scen_generate(&s, seed, &f.m->cfg, &g);
			int n_det = 0;
			for (int i = 0; i < s.n_req; i++)
				n_det += s.req[i].det;
			if (s.n_req >= 3 && n_det > 0)
				break;
			scen_free(&s);
		}
		realistic_prompts(&s, &f);
		double ts = now_s();
		struct ds_engine_stats st = {0};
		bool ok = scen_run(&s, mk_cpu, &f, &st, msg, sizeof(msg));
		double tr = now_s();
		if (ok)
			ok = scen_check_oracle(&s, mk_cpu, &f, msg, sizeof(msg));
		int n_det = 0, conc = 0;
		for (int i = 0; i < s.n_req; i++) {
			const struct scen_req *q = &s.req[i];
			n_det += q->det;
			t.det += q->det;
			t.nondet += !q->det;
			t.greedy += q->sp.temperature == 0.0f;
			t.sampled += q->sp.temperature != 0.0f;
			t.cancelled += q->finish == DS_FINISH_CANCELLED;
			t.follow += q->follow >= 0;
			t.tokens += (uint64_t)q->n_out;
			conc += q->arrive_step >= 0 && q->arrive_step <= 1;
		}
		t.max_conc = DS_MAX(t.max_conc, (uint64_t)conc);
		t.windows += st.windows;
		t.rollbacks += st.rollbacks;
		if (s.opts.inject_mismatch == 0.0)
			t.natural_rb += st.rollbacks;
		else
			t.inject++;
		t.preempt += st.preemptions;
		t.prefix_hits += st.prefix_hit_tokens;
		printf("%s seed %llu: mode=%s W=%d G=%d inject=%.1f kv_blocks=%d bs=%d: %d requests "
		       "(%d det), %llu windows, %llu rollbacks, %llu preemptions, %llu prefix-hit "
		       "tokens; run %.1f s, oracle %.1f s%s%s\n",
		       ok ? "ok  " : "FAIL", (unsigned long long)seed, ds_mode_name(s.opts.mode),
		       s.opts.window, s.opts.group, s.opts.inject_mismatch, s.opts.kv_blocks,
		       s.opts.kv_block_size, s.n_req, n_det, (unsigned long long)st.windows,
		       (unsigned long long)st.rollbacks, (unsigned long long)st.preemptions,
		       (unsigned long long)st.prefix_hit_tokens, tr - ts, now_s() - tr,
		       ok ? "" : ": ", ok ? "" : msg);
		fflush(stdout);
		failed += !ok;
		scen_free(&s);
	}
	printf("total: %d scenarios (%llu with injection 0.2), %llu det + %llu non-det requests "
	       "(%llu greedy, %llu sampled, %llu follow-ups, %llu cancelled, up to %llu arriving "
	       "in the first two steps), %llu tokens, %llu windows, %llu rollbacks (%llu natural: fast path vs "
	       "reference without injection), %llu preemptions, %llu prefix-hit tokens; %.1f s\n",
	       n_scen, (unsigned long long)t.inject, (unsigned long long)t.det,
	       (unsigned long long)t.nondet, (unsigned long long)t.greedy,
	       (unsigned long long)t.sampled, (unsigned long long)t.follow,
	       (unsigned long long)t.cancelled, (unsigned long long)t.max_conc,
	       (unsigned long long)t.tokens, (unsigned long long)t.windows,
	       (unsigned long long)t.rollbacks, (unsigned long long)t.natural_rb,
	       (unsigned long long)t.preempt, (unsigned long long)t.prefix_hits, now_s() - t0);
	/* the full set's mix exercised what it claims to */
	if (!failed && n_scen >= N_SCENARIOS &&
	    (t.rollbacks == 0 || t.preempt == 0 || t.prefix_hits == 0 || t.det == 0 ||
	                t.nondet == 0 || t.greedy == 0 || t.sampled == 0)) {
		printf("FAIL: the scenario mix missed rollbacks, preemptions, prefix hits or a "
		       "request kind (see the totals)\n");
		failed = 1;
	}
	fixture_free(&f);
	return failed ? 1 : 0;
}
