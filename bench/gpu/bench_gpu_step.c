/* bench_gpu_step.c - whole decode steps: the decode section (fast and reference step time vs
 * the memory roofline), the verify pass, and the per-op decode profile (bench_gpu.h). */
#include "bench_gpu.h"

size_t decode_weight_bytes(const struct ds_model_config *c, int B)
{
	size_t h = (size_t)c->hidden, qd = (size_t)ds_model_q_dim(c);
	size_t kvd = (size_t)ds_model_kv_dim(c), f = (size_t)c->ffn;
	size_t layer = (qd + 2 * kvd) * h + h * qd + 3 * f * h + 2 * h;
	return 2 * (layer * c->n_layer + (size_t)c->vocab_size * h + h + (size_t)B * h);
}

size_t kv_bytes(const struct ds_model_config *c, int B, int ctx)
{
	return (size_t)B * ctx * c->n_layer * 2 * ds_model_kv_dim(c) * 2;
}

/* A prompt chunk of a forward: len tokens from position pos0 (pos0 > 0: the prompt's earlier
 * positions are in the KV already, as in a chunked prefill). */
struct chunk {
	int pos0, len;
};

/* Times one forward on `path` (median of reps after warm warm-ups) of n_dec decode rows at ctx
 * positions of KV (random values) and n_ch windows: prompt chunks ch[i] (prompts: only their
 * last row out, a prefill-carrying step) or verification windows after ctx positions (every row
 * out), all sampled at temperature temp. */
static int pass_time_ch(struct bench *b, enum ds_path path, int n_dec, int ctx,
                        const struct chunk *ch, int n_ch, bool prompts, float temp, int warm,
                        int reps, double *out_s)
{
	int n_seq = n_dec + n_ch, nb = 0, n_tok = n_dec;
	for (int i = 0; i < n_seq; i++) {
		int end = i < n_dec ? ctx + 1 : ch[i - n_dec].pos0 + ch[i - n_dec].len;
		nb = DS_MAX(nb, (end + BS - 1) / BS);
		n_tok += i < n_dec ? 0 : ch[i - n_dec].len;
	}
	struct ds_fwd_seq *ss = calloc((size_t)n_seq, sizeof(*ss));
	int32_t *blocks = malloc((size_t)n_seq * nb * 4), *tok = malloc((size_t)n_tok * 4);
	struct ds_fwd_row *rows = malloc((size_t)n_tok * sizeof(*rows));
	double *t = malloc((size_t)reps * sizeof(double));
	int rc = 0;
	if (!ss || !blocks || !tok || !rows || !t)
		rc = 1;
	for (int i = 0, at = 0; rc == 0 && i < n_seq; i++) {
		int n = i < n_dec ? 1 : ch[i - n_dec].len;
		for (int j = 0; j < nb; j++)
			blocks[i * nb + j] = (i * nb + j) % b->be.n_blocks;
		for (int j = 0; j < n; j++)
			tok[at + j] =
			    (int32_t)(ds_hash3(i, j, 11) % (uint64_t)b->m->cfg.vocab_size);
		ss[i] = (struct ds_fwd_seq){.tokens = tok + at,
		                            .n_tokens = n,
		                            .pos0 = i < n_dec ? ctx : ch[i - n_dec].pos0,
		                            .blocks = blocks + (size_t)i * nb,
		                            .n_blocks = nb,
		                            .all_rows = i >= n_dec && !prompts,
		                            .sp = {temp, 0, 1.0f, 1}};
		at += n;
	}
	struct ds_fwd_batch fb = {path, ss, n_seq, rows, NULL};
	struct ds_err err;
	for (int i = -warm; i < reps && rc == 0; i++) {
		double t0 = now_s();
		if (ds_backend_forward(&b->be, &fb, &err) != DS_OK) {
			fprintf(stderr, "forward of %d decode rows + %d chunks, ctx %d: %s\n",
			        n_dec, n_ch, ctx, err.msg);
			rc = 1;
		}
		if (i >= 0)
			t[i] = now_s() - t0;
	}
	if (rc == 0)
		*out_s = median(t, reps);
	free(t);
	free(ss);
	free(blocks);
	free(tok);
	free(rows);
	return rc;
}

/* pass_time_ch with n_win windows of wrows rows: prompts from position 0, or verification
 * windows after ctx positions. */
static int pass_time_w(struct bench *b, enum ds_path path, int n_dec, int n_win, int wrows, int ctx,
                       bool prompts, float temp, int warm, int reps, double *out_s)
{
	struct chunk *ch = calloc((size_t)DS_MAX(n_win, 1), sizeof(*ch));
	if (!ch)
		return 1;
	for (int i = 0; i < n_win; i++)
		ch[i] = (struct chunk){prompts ? 0 : ctx, wrows};
	int rc = pass_time_ch(b, path, n_dec, ctx, ch, n_win, prompts, temp, warm, reps, out_s);
	free(ch);
	return rc;
}

/* pass_time_w after 3 warm-ups */
static int pass_time(struct bench *b, enum ds_path path, int n_dec, int n_win, int wrows, int ctx,
                     bool prompts, float temp, int reps, double *out_s)
{
	return pass_time_w(b, path, n_dec, n_win, wrows, ctx, prompts, temp, 3, reps, out_s);
}

/* Times one forward of B decode rows at position ctx (KV holds random values). */
int decode_time(struct bench *b, enum ds_path path, int B, int ctx, int reps, double *out_s)
{
	return pass_time(b, path, B, 0, 1, ctx, false, 0.0f, reps, out_s);
}

int bench_decode(struct bench *b)
{
	const struct ds_model_config *c = &b->m->cfg;
	int batches[] = {1, 8, 32, 64, 128, 256}, ctxs[] = {512, 2048};
	FILE *f = json_open(b->out, "decode");
	if (!f)
		return 1;
	fprintf(
	    f,
	    "{\"bench\": \"decode\", \"model\": \"llama3-8b (synthetic, generated on device)\", "
	    "\"device\": \"%s\", \"copy_bandwidth_GBps\": %.1f, \"points\": [\n",
	    b->dev, b->copy_bw / 1e9);
	printf("decode step, llama3-8b (fast = cuBLASLt + flash-decoding + graphs; ref = "
	       "invariant)\n");
	printf("%6s %6s %10s %10s %10s %8s %8s %4s\n", "batch", "ctx", "roof_ms", "fast_ms",
	       "ref_ms", "fast/roof", "ref/fast", "cfg");
	int first = 1;
	for (size_t ci = 0; ci < DS_ARRAY_LEN(ctxs); ci++)
		for (size_t bi = 0; bi < DS_ARRAY_LEN(batches); bi++) {
			int B = batches[bi], ctx = ctxs[ci];
			double tf = 0, tr = 0;
			if (!point_picked("DECODE_POINTS", B, ctx))
				continue;
			if (decode_time(b, DS_PATH_FAST, B, ctx, 15, &tf) ||
			    decode_time(b, DS_PATH_REF, B, ctx, 7, &tr))
				return 1;
			double bytes =
			    (double)decode_weight_bytes(c, B) + (double)kv_bytes(c, B, ctx + 1);
			double roof = bytes / b->copy_bw;
			/* the bucket's kept step configuration (-1: untuned) */
			int gb = ds_cuda_fast_bucket(B);
			int kept = gb < DS_CUDA_N_BUCKETS ? b->c->fast.graph_cfg[gb] : -1;
			printf("%6d %6d %10.3f %10.3f %10.3f %7.1f%% %8.2f %4d\n", B, ctx,
			       roof * 1e3, tf * 1e3, tr * 1e3, 100.0 * roof / tf, tr / tf, kept);
			fprintf(f,
			        "%s  {\"batch\": %d, \"ctx\": %d, \"bytes\": %.0f, "
			        "\"roofline_ms\": %.4f, "
			        "\"fast_ms\": %.4f, \"ref_ms\": %.4f, "
			        "\"fast_fraction_of_roofline\": %.4f, "
			        "\"ref_over_fast\": %.3f, \"fast_tokens_per_s\": %.1f, "
			        "\"graph_cfg\": %d}",
			        first ? "" : ",\n", B, ctx, bytes, roof * 1e3, tf * 1e3, tr * 1e3,
			        roof / tf, tr / tf, B / tf, kept);
			first = 0;
			fflush(stdout);
		}
	fprintf(f, "\n]}\n");
	fclose(f);
	return 0;
}

/* ---- reference GEMM vs cuBLASLt ---- */

int bench_verify(struct bench *b)
{
	int G = 16, W = 32, ctx = 512;
	double tv = 0, td = 0;
	if (pass_time(b, DS_PATH_REF, 0, G, W, ctx, false, 0.0f, 10, &tv))
		return 1;
	if (decode_time(b, DS_PATH_FAST, 64, ctx, 15, &td))
		return 1;
	printf("verify pass G=%d x W=%d (ref path, ctx %d): %.3f ms; %d fast decode steps at batch "
	       "64: "
	       "%.3f ms; ratio %.3f\n",
	       G, W, ctx, tv * 1e3, W, W * td * 1e3, tv / (W * td));
	FILE *f = json_open(b->out, "verify");
	if (f) {
		fprintf(f,
		        "{\"bench\": \"verify\", \"device\": \"%s\", \"G\": %d, \"W\": %d, "
		        "\"ctx\": %d, "
		        "\"verify_ms\": %.4f, \"decode_step_b64_ms\": %.4f, \"W_decode_steps_ms\": "
		        "%.4f, "
		        "\"verify_over_W_steps\": %.4f, \"graph_captured\": %s}\n",
		        b->dev, G, W, ctx, tv * 1e3, td * 1e3, W * td * 1e3, tv / (W * td),
		        b->c->ref_graphs ? "true" : "false");
		fclose(f);
	}
	return 0;
}

/* ---- decode profile: where one decode step's time goes ---- */

enum prof_op {
	PROF_EMBED,
	PROF_RMSNORM,
	PROF_QKV,
	PROF_ROPE,
	PROF_ATTN,
	PROF_O,
	PROF_GU,
	PROF_SILU,
	PROF_DOWN,
	PROF_LM_HEAD,
	PROF_SAMPLE,
	PROF_N_OPS
};
static const char *const prof_names[PROF_N_OPS] = {
    "embed",        "rmsnorm",  "gemm_qkv",  "qkv_rope", "attention", "gemm_o",
    "gemm_gate_up", "silu_mul", "silu_down", "lm_head",  "sample"};

#define PROF_MAX_LAUNCH 1024

struct prof {
	cudaEvent_t ev[2 * PROF_MAX_LAUNCH];
	int op[PROF_MAX_LAUNCH];
	int n;
	double bytes[PROF_N_OPS]; /* bytes each op class reads + writes in one pass */
};

#define PROF_OP(pr, which, call)                                                                   \
	do {                                                                                       \
		if ((pr)->n >= PROF_MAX_LAUNCH)                                                    \
			return 1;                                                                  \
		CK(cudaEventRecord((pr)->ev[2 * (pr)->n], st));                                    \
		call;                                                                              \
		CK(cudaEventRecord((pr)->ev[2 * (pr)->n + 1], st));                                \
		(pr)->op[(pr)->n++] = (which);                                                     \
	} while (0)

#define PROF_CK_RV(expr)                                                                           \
	do {                                                                                       \
		if ((expr) != DS_OK) {                                                             \
			fprintf(stderr, "profile: %s\n", err.msg);                                 \
			return 1;                                                                  \
		}                                                                                  \
	} while (0)

/* A profile with its events created (NULL when that fails); prof_free destroys them. */
static struct prof *prof_new(void)
{
	struct prof *pr = calloc(1, sizeof(*pr));
	for (int i = 0; pr && i < 2 * PROF_MAX_LAUNCH; i++)
		if (cudaEventCreate(&pr->ev[i]) != cudaSuccess) {
			fprintf(stderr, "profile: cudaEventCreate failed\n");
			while (i-- > 0)
				cudaEventDestroy(pr->ev[i]);
			free(pr);
			return NULL;
		}
	return pr;
}

static void prof_free(struct prof *pr)
{
	for (int i = 0; i < 2 * PROF_MAX_LAUNCH; i++)
		cudaEventDestroy(pr->ev[i]);
	free(pr);
}

static double gemm_bytes(int M, int N, int K)
{
	return 2.0 * N * K + 2.0 * M * K + 4.0 * M * N;
}

/* Pass p on a path's ops run eagerly, the same launches as ds_cuda_pass_run (without the fused
 * decode kernels), with an event pair around each launch; the device metadata is the last
 * forward call's, which must have been this pass. The REF path has no fused SiLU*mul: its
 * silu_mul and down projection are timed apart. */
static int prof_ops(struct bench *b, const struct ds_cuda_path_ops *ops,
                    const struct ds_cuda_pass *p, int n_split, struct prof *pr)
{
	struct ds_cuda_ctx *c = b->c;
	const struct ds_model_config *cfg = &c->cfg;
	int H = cfg->hidden, qd = ds_model_q_dim(cfg), kvd = ds_model_kv_dim(cfg), F = cfg->ffn;
	int V = cfg->vocab_size, nl = cfg->n_layer, B = p->T;
	cudaStream_t st = c->stream;
	struct ds_k_tokmeta tm = ds_cuda_tokmeta(c);
	struct ds_k_dims d = ds_cuda_dims(c);
	struct ds_err err;
	pr->n = 0;
	PROF_OP(pr, PROF_EMBED, CK(ds_k_embed(c->tok_embd, c->dm.ids, B, H, c->x, st)));
	c->dlt_parts = 1;
	for (int l = 0; l < nl; l++) {
		const struct ds_cuda_layer *L = &c->layers[l];
		uint16_t *kv = c->kv + (size_t)l * c->kv_layer_elems;
		PROF_OP(pr, PROF_RMSNORM,
		        CK(ds_k_rmsnorm_parts_pdl(c->x, l ? c->dlt : NULL, l ? c->dlt_parts : 1,
		                                  c->dlt_pstride, NULL, L->attn_norm, B, H,
		                                  cfg->rms_eps, c->h, 0, st)));
		PROF_OP(pr, PROF_QKV,
		        PROF_CK_RV(ops->gemm(c, c->h, L->wqkv, c->big, B, qd + 2 * kvd, H, &err)));
		PROF_OP(pr, PROF_ROPE,
		        CK(ds_k_qkv_rope(c->big, L->bqkv, L->q_norm, L->k_norm, c->rope_cs, tm, B,
		                         d, c->q, kv, st)));
		PROF_OP(pr, PROF_ATTN, PROF_CK_RV(ops->attention(c, p, kv, n_split, &err)));
		c->dlt_parts = 1; /* as pass_layers: the GEMM may leave split-K partials */
		PROF_OP(pr, PROF_O,
		        PROF_CK_RV(ops->gemm(c, c->att, L->wo, c->dlt, B, H, qd, &err)));
		PROF_OP(pr, PROF_RMSNORM,
		        CK(ds_k_rmsnorm_parts_pdl(c->x, c->dlt, c->dlt_parts, c->dlt_pstride, NULL,
		                                  L->ffn_norm, B, H, cfg->rms_eps, c->h, 0, st)));
		/* the activation as pass_layers forms it (gate/up with SiLU*mul fused, else
		 * gate/up, then SiLU*mul alone or fused into the down projection) */
		bool gu_done = false;
		uint16_t *act = (uint16_t *)c->big;
		c->dlt_parts = 1;
		if (ops->gemm_gu_silu)
			PROF_OP(pr, PROF_GU,
			        PROF_CK_RV(ops->gemm_gu_silu(c, c->h, L->w_gu, act, B, F, H,
			                                     &gu_done, &err)));
		if (!gu_done) {
			PROF_OP(pr, PROF_GU,
			        PROF_CK_RV(ops->gemm(c, c->h, L->w_gu, c->big, B, 2 * F, H, &err)));
			if (ops->gemm_silu) { /* SiLU*mul and the down projection in one op */
				PROF_OP(pr, PROF_DOWN,
				        PROF_CK_RV(ops->gemm_silu(c, c->big, c->h, L->w_down,
				                                  c->dlt, B, H, F, &err)));
				continue;
			}
			PROF_OP(pr, PROF_SILU, CK(ds_k_silu_mul(c->big, B, F, c->h, st)));
			act = c->h;
		}
		PROF_OP(pr, PROF_DOWN,
		        PROF_CK_RV(ops->gemm(c, act, L->w_down, c->dlt, B, H, F, &err)));
	}
	PROF_OP(pr, PROF_RMSNORM,
	        CK(ds_k_rmsnorm_parts_pdl(c->x, c->dlt, c->dlt_parts, c->dlt_pstride, c->dm.out_tok,
	                                  c->out_norm, p->R, H, cfg->rms_eps, c->h, 0, st)));
	PROF_OP(pr, PROF_LM_HEAD,
	        PROF_CK_RV(ops->gemm(c, c->h, c->lm_head, c->logits, p->R, V, H, &err)));
	PROF_OP(pr, PROF_SAMPLE, CK(ds_cuda_sample(c, ops == &ds_cuda_fast_ops, p->R, 0)));
	CK(cudaStreamSynchronize(st));
	return 0;
}

/* Per-op milliseconds (ms) and launch counts (n, optional) of pass p (prof_ops), from the
 * repetition of reps with the least total (*total, optional). */
static int prof_best(struct bench *b, const struct ds_cuda_path_ops *ops,
                     const struct ds_cuda_pass *p, int n_split, int reps, struct prof *pr,
                     double ms[PROF_N_OPS], int n[PROF_N_OPS], double *total)
{
	double best = INFINITY;
	for (int rep = 0; rep < reps; rep++) {
		if (prof_ops(b, ops, p, n_split, pr))
			return 1;
		double m[PROF_N_OPS] = {0}, sum = 0;
		int k[PROF_N_OPS] = {0};
		for (int i = 0; i < pr->n; i++) {
			float e;
			CK(cudaEventElapsedTime(&e, pr->ev[2 * i], pr->ev[2 * i + 1]));
			m[pr->op[i]] += e;
			k[pr->op[i]]++;
			sum += e;
		}
		if (sum < best) {
			best = sum;
			memcpy(ms, m, sizeof(m));
			if (n)
				memcpy(n, k, sizeof(k));
		}
	}
	if (total)
		*total = best;
	return 0;
}

/* The bytes each op class of a fast decode pass of B rows at context ctx reads and writes. */
static void prof_decode_bytes(const struct ds_model_config *cfg, int B, int ctx,
                              double bytes[PROF_N_OPS])
{
	int H = cfg->hidden, qd = ds_model_q_dim(cfg), kvd = ds_model_kv_dim(cfg), F = cfg->ffn;
	int V = cfg->vocab_size, nl = cfg->n_layer;
	memset(bytes, 0, PROF_N_OPS * sizeof(double));
	bytes[PROF_EMBED] = (2.0 + 4.0) * B * H;
	bytes[PROF_RMSNORM] = (2.0 * nl + 1) * (2.0 * H + B * (4.0 * 3 * H + 2.0 * H));
	bytes[PROF_QKV] = nl * gemm_bytes(B, qd + 2 * kvd, H);
	bytes[PROF_ROPE] = nl * (double)B * (4.0 * (qd + 2 * kvd) + 2.0 * (qd + 2 * kvd));
	bytes[PROF_ATTN] = nl * ((double)B * (ctx + 1) * kvd * 2 * 2 + 4.0 * B * qd);
	bytes[PROF_O] = nl * gemm_bytes(B, H, qd);
	bytes[PROF_GU] = nl * gemm_bytes(B, 2 * F, H);
	bytes[PROF_SILU] = 0; /* counted in silu_down */
	bytes[PROF_DOWN] = nl * (gemm_bytes(B, H, F) + (double)B * 4.0 * 2 * F);
	bytes[PROF_LM_HEAD] = gemm_bytes(B, V, H);
	bytes[PROF_SAMPLE] = 4.0 * B * V;
}

struct graph_run {
	struct ds_cuda_ctx *c;
	cudaGraphExec_t ge;
};

static int graph_run(void *arg)
{
	struct graph_run *r = arg;
	CK(cudaGraphLaunch(r->ge, r->c->stream));
	return 0;
}

/* Median of 20 replays of graph ge on c's stream, after 3 untimed (ms). */
static int graph_replay_ms(struct ds_cuda_ctx *c, cudaGraphExec_t ge, double *ms_out)
{
	struct graph_run r = {c, ge};
	double s = 0;
	int rc = event_median(c->stream, 3, 20, graph_run, &r, &s);
	*ms_out = s * 1e3;
	return rc;
}

/* Median time of replaying bucket bi's captured decode graph (ms; -1: none). */
static int prof_graph_ms(struct bench *b, int bi, double *ms_out)
{
	*ms_out = -1;
	return b->c->fast.graph[bi] ? graph_replay_ms(b->c, b->c->fast.graph[bi], ms_out) : 0;
}

/* Re-captures the decode graphs with the fast path's current switches and times bucket bi. */
static int prof_graph_recapture(struct bench *b, int B, int bi, int ctx, double *ms_out)
{
	double tf;
	ds_cuda_fast_graphs_reset(b->c);
	if (decode_time(b, DS_PATH_FAST, B, ctx, 3, &tf))
		return 1;
	return prof_graph_ms(b, bi, ms_out);
}

static void json_ms(FILE *f, const char *key, double ms)
{
	if (isfinite(ms) && ms >= 0)
		fprintf(f, "\"%s\": %.5f", key, ms);
	else
		fprintf(f, "\"%s\": null", key);
}

int bench_profile(struct bench *b)
{
	struct ds_cuda_ctx *c = b->c;
	const struct ds_model_config *cfg = &b->m->cfg;
	int batches[] = {1, 8, 32}, ctx = 512;
	struct prof *pr = prof_new();
	if (!pr)
		return 1;
	FILE *f = json_open(b->out, "profile");
	if (!f)
		return 1;
	bool pdl0 = c->fast.pdl, skinny0 = c->fast.skinny;
	fprintf(
	    f,
	    "{\"bench\": \"profile\", \"model\": \"llama3-8b (synthetic, generated on device)\", "
	    "\"device\": \"%s\", \"copy_bandwidth_GBps\": %.1f, \"ctx\": %d, \"pdl\": %s, "
	    "\"skinny\": %s, \"points\": [\n",
	    b->dev, b->copy_bw / 1e9, ctx, pdl0 ? "true" : "false", skinny0 ? "true" : "false");
	printf("decode profile, llama3-8b, ctx %d (eager, events around each launch; fast path "
	       "pdl=%d skinny=%d)\n",
	       ctx, (int)pdl0, (int)skinny0);
	for (size_t bi_ = 0; bi_ < DS_ARRAY_LEN(batches); bi_++) {
		int B = batches[bi_], bi = ds_cuda_fast_bucket(B);
		double tf;
		/* warms the GEMM choices, captures the bucket's graph, leaves this B's metadata */
		if (decode_time(b, DS_PATH_FAST, B, ctx, 5, &tf))
			return 1;
		double graph_ms, op_ms[PROF_N_OPS], best_sum;
		int op_n[PROF_N_OPS];
		if (prof_graph_ms(b, bi, &graph_ms))
			return 1;
		/* the step configuration the graph tuning kept, and every configuration's replay */
		int kept = c->fast.graph_cfg[bi];
		printf(
		    "batch %d: graph tuned to configuration %d; replay ms by configuration "
		    "(skinny, pdl, fused qkv, staged iterations, fused layers, attention merge):",
		    B, kept);
		for (int i = 0; i < DS_CUDA_N_STEP_CFGS; i++)
			printf(" (%d,%d,%d,%d,%d,%d) %.3f", (int)ds_cuda_fast_step_cfgs[i].skinny,
			       (int)ds_cuda_fast_step_cfgs[i].pdl,
			       (int)ds_cuda_fast_step_cfgs[i].fuse, ds_cuda_fast_step_cfgs[i].stage,
			       (int)ds_cuda_fast_step_cfgs[i].mega,
			       (int)ds_cuda_fast_step_cfgs[i].merge, c->fast.graph_ms[bi][i]);
		printf("\n");
		/* the eager pass (the device metadata is the last decode pass's, same B) */
		struct ds_cuda_pass p = {B, B, 0, B, ctx, true};
		if (prof_best(b, &ds_cuda_fast_ops, &p, ds_cuda_fast_split(c, B, cfg->max_pos), 5,
		              pr, op_ms, op_n, &best_sum))
			return 1;
		prof_decode_bytes(cfg, B, ctx, pr->bytes);
		double roof =
		    ((double)decode_weight_bytes(cfg, B) + (double)kv_bytes(cfg, B, ctx + 1)) /
		    b->copy_bw * 1e3;
		/* the same step with PDL toggled, and without the skinny GEMM (the old
		 * GEMV/cuBLASLt choice): baselines measured in this run */
		double g_pdl = -1, g_old = -1;
		c->fast.pdl = !pdl0;
		if (prof_graph_recapture(b, B, bi, ctx, &g_pdl))
			return 1;
		c->fast.pdl = pdl0;
		c->fast.skinny = false;
		if (prof_graph_recapture(b, B, bi, ctx, &g_old))
			return 1;
		c->fast.skinny = skinny0;
		if (prof_graph_recapture(b, B, bi, ctx, &graph_ms))
			return 1;
		printf(
		    "batch %d: graph step %.3f ms (roofline %.3f ms, %.1f%%); eager sum %.3f ms; "
		    "pdl=%d: %.3f ms; no skinny: %.3f ms (skinny speed-up %.3fx)\n",
		    B, graph_ms, roof, 100.0 * roof / graph_ms, best_sum, (int)!pdl0, g_pdl, g_old,
		    g_old / graph_ms);
		printf("  %-14s %6s %10s %8s %10s\n", "op", "count", "ms", "share", "GB/s");
		fprintf(f, "%s  {\"batch\": %d, ", bi_ ? ",\n" : "", B);
		json_ms(f, "graph_ms", graph_ms);
		fprintf(f, ", ");
		json_ms(f, pdl0 ? "graph_ms_pdl_off" : "graph_ms_pdl_on", g_pdl);
		fprintf(f, ", ");
		json_ms(f, "graph_ms_no_skinny", g_old);
		fprintf(f, ", \"roofline_ms\": %.5f, \"graph_fraction_of_roofline\": %.4f, ", roof,
		        roof / graph_ms);
		json_ms(f, "eager_sum_ms", best_sum);
		fprintf(f, ", \"ops\": [");
		for (int o = 0; o < PROF_N_OPS; o++) {
			double gbps = op_ms[o] > 0 ? pr->bytes[o] / (op_ms[o] * 1e-3) / 1e9 : 0;
			printf("  %-14s %6d %10.4f %7.1f%% %10.0f\n", prof_names[o], op_n[o],
			       op_ms[o], 100.0 * op_ms[o] / best_sum, gbps);
			fprintf(f,
			        "%s{\"op\": \"%s\", \"count\": %d, \"ms\": %.5f, \"bytes\": %.0f, "
			        "\"GBps\": %.1f}",
			        o ? ", " : "", prof_names[o], op_n[o], op_ms[o], pr->bytes[o],
			        gbps);
		}
		fprintf(f, "]}");
		fflush(stdout);
	}
	/* the fast path's GEMM choices (timed on first use, L2 flushed) */
	fprintf(f, "\n], \"gemm_picks\": [\n");
	printf(
	    "fast-path GEMM choices (ms at the timed M, L2 flushed; inf = not a candidate; "
	    "silu rows: the down projection, skinny = best fused variant, split = silu_mul + "
	    "the plain choice; gate/up rows (winner plain+silu_mul or ref_*_gu_silu): skinny = "
	    "best reference variant with SiLU*mul fused, split = the plain choice + silu_mul)\n");
	printf("  %4s %4s %4s %7s %6s %-30s %9s %9s %9s %9s %8s %3s\n", "silu", "Mb", "M", "N", "K",
	       "winner", "skinny", "gemv", "cublasLt", "split", "GB/s", "rej");
	for (int i = 0; i < c->fast.n_picks; i++) {
		const struct ds_cuda_pick *pk = &c->fast.picks[i];
		char name[64] = "cublasLt";
		if (pk->kind == DS_CUDA_GEMM_GEMV)
			snprintf(name, sizeof(name), "gemv");
		else if (pk->kind == DS_CUDA_GEMM_SPLIT)
			snprintf(name, sizeof(name), pk->gu ? "plain+silu_mul" : "silu_mul+plain");
		else if (pk->kind == DS_CUDA_GEMM_REF_SILU)
			snprintf(name, sizeof(name), "ref_%s_gu_silu",
			         ds_k_gemm_ref_variant_name(pk->variant));
		else if (pk->kind == DS_CUDA_GEMM_SKINNY || pk->kind == DS_CUDA_GEMM_SKINNY_SILU)
			ds_k_skinny_describe(pk->M_timed, pk->variant, name, sizeof(name));
		if (pk->kind == DS_CUDA_GEMM_SKINNY_SILU)
			strncat(name, "_silu", sizeof(name) - strlen(name) - 1);
		double gbps = gemm_bytes(pk->M_timed, pk->N, pk->K) / (pk->ms_best * 1e-3) / 1e9;
		printf("  %4d %4d %4d %7d %6d %-30s %9.4f %9.4f %9.4f %9.4f %8.0f %3d\n",
		       (int)pk->silu, pk->mb, pk->M_timed, pk->N, pk->K, name, pk->ms_skinny,
		       pk->ms_gemv, pk->ms_lt, pk->ms_split, gbps, pk->n_rejected);
		fprintf(f,
		        "%s  {\"silu\": %s, \"gate_up\": %s, \"m_bucket\": %d, \"M\": %d, "
		        "\"N\": %d, \"K\": %d, \"winner\": \"%s\", ",
		        i ? ",\n" : "", pk->silu ? "true" : "false", pk->gu ? "true" : "false",
		        pk->mb, pk->M_timed, pk->N, pk->K, name);
		json_ms(f, "skinny_ms", pk->ms_skinny);
		fprintf(f, ", ");
		json_ms(f, "gemv_ms", pk->ms_gemv);
		fprintf(f, ", ");
		json_ms(f, "cublaslt_ms", pk->ms_lt);
		fprintf(f, ", ");
		json_ms(f, "split_ms", pk->ms_split);
		fprintf(f, ", \"rejected\": %d, \"best_GBps\": %.1f, \"skinny_variants\": [",
		        pk->n_rejected, gbps);
		for (int v = 0; v < DS_K_SKINNY_VARIANTS; v++) {
			char vn[64];
			ds_k_skinny_describe(pk->M_timed, v, vn, sizeof(vn));
			fprintf(f, "%s{\"name\": \"%s\", ", v ? ", " : "", vn);
			json_ms(f, "ms", pk->ms_variant[v]);
			fprintf(f, "}");
		}
		fprintf(f, "]}");
	}
	fprintf(f, "\n]}\n");
	fclose(f);
	prof_free(pr);
	return 0;
}

/* ---- decode ablation: what each op class costs inside the captured step ---- */

enum abl_bit {
	ABL_NORM = 1 << 0,
	ABL_QKV = 1 << 1,
	ABL_ROPE = 1 << 2,
	ABL_ATTN = 1 << 3,
	ABL_O = 1 << 4,
	ABL_GU = 1 << 5,
	ABL_DOWN = 1 << 6,
	ABL_HEAD = 1 << 7, /* final norm, lm_head, sample */
	ABL_ALL = (1 << 8) - 1,
	ABL_FUSE = 1 << 8, /* rope + attention through attention_qkv (fused when it qualifies) */
	ABL_GEMMS = ABL_QKV | ABL_O | ABL_GU | ABL_DOWN,
};

/* The launches of ds_cuda_pass_run for B decode rows (fast path, PDL as configured), only the
 * classes in mask; the values are meaningless once a class is left out, the times are not. */
static int abl_launch(struct bench *b, int B, int mask)
{
	struct ds_cuda_ctx *c = b->c;
	const struct ds_model_config *cfg = &c->cfg;
	int H = cfg->hidden, qd = ds_model_q_dim(cfg), kvd = ds_model_kv_dim(cfg), F = cfg->ffn;
	cudaStream_t st = c->stream;
	struct ds_k_tokmeta tm = ds_cuda_tokmeta(c);
	struct ds_k_dims d = ds_cuda_dims(c);
	struct ds_cuda_pass p = {B, B, 0, B, 0, true};
	int n_split = ds_cuda_fast_split(c, B, cfg->max_pos), pdl = c->fast.pdl;
	struct ds_err err;
	CK(ds_k_embed(c->tok_embd, c->dm.ids, B, H, c->x, st));
	c->dlt_parts = 1;
	for (int l = 0; l < cfg->n_layer; l++) {
		const struct ds_cuda_layer *L = &c->layers[l];
		uint16_t *kv = c->kv + (size_t)l * c->kv_layer_elems;
		if (mask & ABL_NORM)
			CK(ds_k_rmsnorm_parts_pdl(c->x, l ? c->dlt : NULL, l ? c->dlt_parts : 1,
			                          c->dlt_pstride, NULL, L->attn_norm, B, H,
			                          cfg->rms_eps, c->h, pdl, st));
		if ((mask & ABL_QKV) &&
		    ds_cuda_fast_ops.gemm(c, c->h, L->wqkv, c->big, B, qd + 2 * kvd, H, &err) != DS_OK)
			return 1;
		bool fused = false;
		if ((mask & ABL_FUSE) &&
		    ds_cuda_fast_ops.attention_qkv(c, &p, L, kv, n_split, &fused, &err) != DS_OK)
			return 1;
		if ((mask & ABL_ROPE) && !fused)
			CK(ds_k_qkv_rope_pdl(c->big, L->bqkv, L->q_norm, L->k_norm, c->rope_cs, tm, B,
			                     d, c->q, kv, pdl, st));
		if ((mask & ABL_ATTN) && !fused &&
		    ds_cuda_fast_ops.attention(c, &p, kv, n_split, &err) != DS_OK)
			return 1;
		c->dlt_parts = 1; /* as pass_layers: the GEMM may leave split-K partials */
		if ((mask & ABL_O) &&
		    ds_cuda_fast_ops.gemm(c, c->att, L->wo, c->dlt, B, H, qd, &err) != DS_OK)
			return 1;
		if (mask & ABL_NORM)
			CK(ds_k_rmsnorm_parts_pdl(c->x, c->dlt, c->dlt_parts, c->dlt_pstride, NULL,
			                          L->ffn_norm, B, H, cfg->rms_eps, c->h, pdl, st));
		c->dlt_parts = 1;
		if ((mask & ABL_GU) &&
		    ds_cuda_fast_ops.gemm(c, c->h, L->w_gu, c->big, B, 2 * F, H, &err) != DS_OK)
			return 1;
		if ((mask & ABL_DOWN) && ds_cuda_fast_ops.gemm_silu(c, c->big, c->h, L->w_down, c->dlt,
		                                                     B, H, F, &err) != DS_OK)
			return 1;
	}
	if (mask & ABL_HEAD) {
		CK(ds_k_rmsnorm_parts_pdl(c->x, c->dlt, c->dlt_parts, c->dlt_pstride, c->dm.out_tok,
		                          c->out_norm, B, H, cfg->rms_eps, c->h, pdl, st));
		if (ds_cuda_fast_ops.gemm(c, c->h, c->lm_head, c->logits, B, cfg->vocab_size, H,
		                          &err) != DS_OK)
			return 1;
		CK(ds_cuda_sample(c, true, B, pdl));
	}
	return 0;
}

/* Captures abl_launch(mask) and returns the median of 20 replays (ms). */
static int abl_time(struct bench *b, int B, int mask, double *ms_out)
{
	struct ds_cuda_ctx *c = b->c;
	cudaGraph_t g = NULL;
	cudaGraphExec_t ge = NULL;
	CK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
	int rc = abl_launch(b, B, mask);
	cudaError_t e = cudaStreamEndCapture(c->stream, &g);
	if (rc || e != cudaSuccess) {
		if (g)
			cudaGraphDestroy(g);
		fprintf(stderr, "ablate: capture of mask %#x failed (%s)\n", mask,
		        cudaGetErrorString(e));
		return 1;
	}
	e = cudaGraphInstantiate(&ge, g, 0);
	cudaGraphDestroy(g);
	CK(e);
	int rv = graph_replay_ms(c, ge, ms_out);
	cudaGraphExecDestroy(ge);
	return rv;
}

int bench_ablate(struct bench *b)
{
	struct ds_cuda_ctx *c = b->c;
	const struct ds_model_config *cfg = &b->m->cfg;
	int H = cfg->hidden, qd = ds_model_q_dim(cfg), kvd = ds_model_kv_dim(cfg), F = cfg->ffn;
	int nl = cfg->n_layer, batches[] = {1, 2, 4, 8, 16, 32, 64}, ctx = 512;
	static const struct {
		const char *name;
		int mask;
		const char *attn; /* DS_FAST_ATTN for the capture (NULL: unset) */
		int stage;        /* skinny GEMMs' staged weight iterations */
	} cfgs[] = {
	    {"all", ABL_ALL, NULL, 0},
	    {"all_fused_qkv", ABL_ALL | ABL_FUSE, NULL, 0},
	    {"all_fused_stage1", ABL_ALL | ABL_FUSE, NULL, 1},
	    {"all_fused_stage2", ABL_ALL | ABL_FUSE, NULL, 2},
	    {"all_fused_stage3", ABL_ALL | ABL_FUSE, NULL, 3},
	    {"gemms_stage2", ABL_GEMMS, NULL, 2},
	    {"attn_fused_qkv", ABL_ATTN | ABL_ROPE | ABL_FUSE, NULL, 0},
	    {"attn_rope", ABL_ATTN | ABL_ROPE, NULL, 0},
	    {"all_attn_pipe", ABL_ALL, "pipe", 0},
	    {"attn_pipe", ABL_ATTN, "pipe", 0},
	    {"no_norm", ABL_ALL & ~ABL_NORM, NULL, 0},
	    {"no_rope", ABL_ALL & ~ABL_ROPE, NULL, 0},
	    {"no_attn", ABL_ALL & ~ABL_ATTN, NULL, 0},
	    {"no_norm_rope_attn", ABL_ALL & ~(ABL_NORM | ABL_ROPE | ABL_ATTN), NULL, 0},
	    {"gemms", ABL_GEMMS, NULL, 0},
	    {"qkv", ABL_QKV, NULL, 0},
	    {"o", ABL_O, NULL, 0},
	    {"gate_up", ABL_GU, NULL, 0},
	    {"down", ABL_DOWN, NULL, 0},
	    {"head", ABL_HEAD, NULL, 0},
	    {"norm", ABL_NORM, NULL, 0},
	    {"rope", ABL_ROPE, NULL, 0},
	    {"attn", ABL_ATTN, NULL, 0},
	    {"empty", 0, NULL, 0},
	};
	int stage0 = c->fast.skinny_stage;
	FILE *f = json_open(b->out, "ablate");
	if (!f)
		return 1;
	fprintf(f,
	        "{\"bench\": \"ablate\", \"model\": \"llama3-8b (synthetic, generated on device)\", "
	        "\"device\": \"%s\", \"copy_bandwidth_GBps\": %.1f, \"ctx\": %d, \"pdl\": %s, "
	        "\"points\": [\n",
	        b->dev, b->copy_bw / 1e9, ctx, c->fast.pdl ? "true" : "false");
	printf("decode ablation, llama3-8b, ctx %d: captured steps with op classes left out "
	       "(median of 20 replays; GB/s = weight bytes of the GEMMs run / time)\n",
	       ctx);
	for (size_t bi = 0; bi < DS_ARRAY_LEN(batches); bi++) {
		int B = batches[bi];
		double tf;
		/* warms the GEMM choices and leaves this B's decode metadata on the device */
		if (decode_time(b, DS_PATH_FAST, B, ctx, 3, &tf))
			return 1;
		fprintf(f, "%s  {\"batch\": %d, \"configs\": [", bi ? ",\n" : "", B);
		for (size_t i = 0; i < DS_ARRAY_LEN(cfgs); i++) {
			double ms;
			c->fast.skinny_stage = cfgs[i].stage;
			int rc = (cfgs[i].attn ? setenv("DS_FAST_ATTN", cfgs[i].attn, 1)
			                       : unsetenv("DS_FAST_ATTN")) != 0 ||
			         abl_time(b, B, cfgs[i].mask, &ms);
			c->fast.skinny_stage = stage0;
			if (rc)
				return 1;
			int m = cfgs[i].mask;
			double wb = 2.0 * nl *
			            (((m & ABL_QKV) ? (double)(qd + 2 * kvd) * H : 0) +
			             ((m & ABL_O) ? (double)H * qd : 0) +
			             ((m & ABL_GU) ? 2.0 * F * H : 0) + ((m & ABL_DOWN) ? (double)F * H : 0)) +
			            ((m & ABL_HEAD) ? 2.0 * cfg->vocab_size * H : 0);
			double gbps = wb > 0 ? wb / (ms * 1e-3) / 1e9 : 0;
			printf("  batch %3d %-18s %8.4f ms %8.0f GB/s (%.3f of copy)\n", B,
			       cfgs[i].name, ms, gbps, gbps * 1e9 / b->copy_bw);
			fprintf(f, "%s{\"name\": \"%s\", \"ms\": %.5f, \"weight_bytes\": %.0f, "
			        "\"GBps\": %.1f}",
			        i ? ", " : "", cfgs[i].name, ms, wb, gbps);
		}
		fprintf(f, "]}");
		fflush(stdout);
	}
	fprintf(f, "\n]}\n");
	fclose(f);
	return 0;
}

/* ---- the prefill-carrying step, op by op on each path ---- */

#define PASSPROF_ROUNDS 6 /* forwards and eager profiles per path and point */

/* A prefill-carrying step (240 decode rows at context 640 + 4 prompts of 512), its prompts
 * alone and a decode step of 256 rows, FAST against REF, op by op (eager, events around each
 * launch; the decode step's real passes are graph replays with fused kernels, so its sums are
 * not its step time): where the reference step's premium goes. */
int bench_passprof(struct bench *b)
{
	struct ds_cuda_ctx *c = b->c;
	/* The e2e's prompt-carrying steps fill its 2048-token step budget (bench_gpu_e2e.c counts
	 * their rows: 1025-2048), so the second point has that shape; the first, 240 rows past
	 * the budget, is the one earlier sessions measured. */
	const struct {
		const char *what;
		int n_dec, n_ch;
		struct chunk ch[4];
	} pts[] = {
	    {"240 decode + 4 prompts x 512", 240, 4, {{0, 512}, {0, 512}, {0, 512}, {0, 512}}},
	    {"240 decode + 4 prompts x 452 (the e2e's 2048-token step)",
	     240,
	     4,
	     {{0, 452}, {0, 452}, {0, 452}, {0, 452}}},
	    /* as the e2e's steps once decode rows share the budget: a prompt's second
	     * chunk, two whole prompts and a first chunk */
	    {"240 decode + chunks 300 from 212, 512, 512, 484",
	     240,
	     4,
	     {{212, 300}, {0, 512}, {0, 512}, {0, 484}}},
	    {"4 prompts x 512 alone", 0, 4, {{0, 512}, {0, 512}, {0, 512}, {0, 512}}},
	    {"256 decode (ctx 640)", 256, 0, {{0, 0}}}};
	struct prof *pr = prof_new();
	if (!pr)
		return 1;
	FILE *f = json_open(b->out, "passprof");
	if (!f)
		return 1;
	/* PASSPROF_ALTERNATE=0: FAST first in every round (for comparison) */
	const char *alt = getenv("PASSPROF_ALTERNATE");
	bool alternate = !alt || strcmp(alt, "0") != 0;
	fprintf(f,
	        "{\"bench\": \"passprof\", \"device\": \"%s\", \"rounds\": %d, \"alternate\": %s, "
	        "\"points\": [\n",
	        b->dev, PASSPROF_ROUNDS, alternate ? "true" : "false");
	printf("prefill-carrying step op by op (llama3-8b, eager, events around each launch, best "
	       "of %d; ms) and the whole forward's wall time (median of %d, host work included); "
	       "%s\n",
	       PASSPROF_ROUNDS, PASSPROF_ROUNDS,
	       alternate ? "FAST and REF alternate, each first in every other round"
	                 : "FAST first in every round (PASSPROF_ALTERNATE=0)");
	for (size_t k = 0; k < DS_ARRAY_LEN(pts); k++) {
		int n = pts[k].n_dec, nc = pts[k].n_ch, T = n, max_pos = n ? 640 : 0;
		for (int i = 0; i < nc; i++) {
			T += pts[k].ch[i].len;
			max_pos = DS_MAX(max_pos, pts[k].ch[i].pos0 + pts[k].ch[i].len - 1);
		}
		struct ds_cuda_pass p = {T, n + nc, 0, n + nc, max_pos, nc == 0};
		double ms[2][PROF_N_OPS], tot[2] = {INFINITY, INFINITY}, wall[2];
		double walls[2][PASSPROF_ROUNDS];
		/* warms both paths' GEMM choices (timed on first use); the time is not kept */
		for (int ph = 0; ph < 2; ph++) {
			double warm_s;
			if (pass_time_ch(b, ph ? DS_PATH_REF : DS_PATH_FAST, n, 640, pts[k].ch, nc,
			                 true, 0.7f, 3, 1, &warm_s))
				return 1;
		}
		/* rounds of one forward and one eager profile per path, the paths alternating and
		 * each first in every other round, so that both share whatever the clock does over
		 * the burst: the H200 runs this at its power cap (with FAST always first the
		 * premium read the same, bench/results/NOTES-gpu-2026-11-30-session22.md) */
		for (int r = 0; r < PASSPROF_ROUNDS; r++)
			for (int q = 0; q < 2; q++) {
				int ph = alternate && (r & 1) ? 1 - q : q;
				enum ds_path path = ph ? DS_PATH_REF : DS_PATH_FAST;
				const struct ds_cuda_path_ops *ops =
				    ph ? &ds_cuda_ref_ops : &ds_cuda_fast_ops;
				double m[PROF_N_OPS], t;
				/* the forward leaves this pass's metadata for the profile */
				if (pass_time_ch(b, path, n, 640, pts[k].ch, nc, true, 0.7f, 0, 1,
				                 &walls[ph][r]) ||
				    prof_best(b, ops, &p,
				              ph ? 0 : ds_cuda_fast_split(c, T, p.max_pos + 1), 1,
				              pr, m, NULL, &t))
					return 1;
				if (t < tot[ph]) {
					tot[ph] = t;
					memcpy(ms[ph], m, sizeof(m));
				}
			}
		for (int ph = 0; ph < 2; ph++)
			wall[ph] = median(walls[ph], PASSPROF_ROUNDS);
		printf(
		    "%s (%d rows): FAST %.3f ms, REF %.3f ms (eager sums); forward wall FAST %.3f "
		    "ms, REF %.3f ms\n",
		    pts[k].what, T, tot[0], tot[1], wall[0] * 1e3, wall[1] * 1e3);
		printf("  %-14s %10s %10s %10s\n", "op", "FAST", "REF", "REF-FAST");
		fprintf(f,
		        "%s  {\"what\": \"%s\", \"rows\": %d, \"fast_wall_ms\": %.4f, "
		        "\"ref_wall_ms\": %.4f, \"ops\": [",
		        k ? ",\n" : "", pts[k].what, T, wall[0] * 1e3, wall[1] * 1e3);
		for (int o = 0; o < PROF_N_OPS; o++) {
			printf("  %-14s %10.3f %10.3f %10.3f\n", prof_names[o], ms[0][o], ms[1][o],
			       ms[1][o] - ms[0][o]);
			fprintf(f, "%s{\"op\": \"%s\", \"fast_ms\": %.4f, \"ref_ms\": %.4f}",
			        o ? ", " : "", prof_names[o], ms[0][o], ms[1][o]);
		}
		fprintf(f, "]}");
		fflush(stdout);
	}
	/* the reference path's GEMM choices (each timed on first use among its bit-identical
	 * family, refpath/cuda_ref.c): which tile each shape and M bucket took */
	const struct ds_cuda_ref *r = &c->ref;
	printf("reference-path GEMM choices (M bucket, N, K; gu_silu: the gate/up GEMM with "
	       "SiLU*mul fused)\n");
	fprintf(f, "\n], \"ref_gemm_picks\": [");
	for (int i = 0; i < r->n_picks; i++) {
		const struct ds_cuda_ref_pick *rp = &r->picks[i];
		const char *name = ds_k_gemm_ref_variant_name(rp->variant);
		printf("  Mb %5d  N %6d  K %6d  %-18s%s\n", rp->mb, rp->n, rp->k, name,
		       rp->silu ? " gu_silu" : "");
		fprintf(f,
		        "%s{\"m_bucket\": %d, \"N\": %d, \"K\": %d, \"variant\": \"%s\", "
		        "\"gu_silu\": %s}",
		        i ? ", " : "", rp->mb, rp->n, rp->k, name, rp->silu ? "true" : "false");
	}
	fprintf(f, "]}\n");
	fclose(f);
	prof_free(pr);
	return 0;
}

/* ---- the DVR verify step's shape, taken apart ---- */

/* The e2e's verify step at 10% deterministic (about 230 other requests decoding and 26
 * windows of 7 rows, context about 640) on REF, against its parts and neighbours: where the
 * step's premium over a FAST decode step of the batch goes. */
int bench_mixstep(struct bench *b)
{
	const struct {
		const char *what;
		enum ds_path path;
		int n_dec, n_win, wrows, ctx;
		bool prompts;
	} pts[] = {
	    {"REF 230 decode + 26 windows x 7 (the verify step)", DS_PATH_REF, 230, 26, 7, 640,
	     false},
	    {"REF 256 decode", DS_PATH_REF, 256, 0, 1, 640, false},
	    {"FAST 256 decode (the step it replaces)", DS_PATH_FAST, 256, 0, 1, 640, false},
	    {"REF 412 decode", DS_PATH_REF, 412, 0, 1, 640, false},
	    {"REF 412 decode, ctx 16", DS_PATH_REF, 412, 0, 1, 16, false},
	    {"REF 256 decode, ctx 16", DS_PATH_REF, 256, 0, 1, 16, false},
	    {"FAST 256 decode, ctx 16", DS_PATH_FAST, 256, 0, 1, 16, false},
	    {"FAST 412 decode, ctx 16", DS_PATH_FAST, 412, 0, 1, 16, false},
	    {"REF 26 windows x 7 alone", DS_PATH_REF, 0, 26, 7, 640, false},
	    {"FAST 230 decode", DS_PATH_FAST, 230, 0, 1, 640, false},
	    {"FAST 230 decode + 26 windows x 7", DS_PATH_FAST, 230, 26, 7, 640, false},
	    {"REF 230 decode + 26 windows x 4", DS_PATH_REF, 230, 26, 4, 640, false},
	    {"REF 230 decode + 26 windows x 11", DS_PATH_REF, 230, 26, 11, 640, false},
	    /* the e2e's prefill-carrying steps: 4 prompts of 512 next to the decode rows */
	    {"FAST 240 decode + 4 prompts x 512", DS_PATH_FAST, 240, 4, 512, 640, true},
	    {"REF 240 decode + 4 prompts x 512", DS_PATH_REF, 240, 4, 512, 640, true},
	    {"FAST 4 prompts x 512 alone", DS_PATH_FAST, 0, 4, 512, 640, true},
	    {"REF 4 prompts x 512 alone", DS_PATH_REF, 0, 4, 512, 640, true},
	};
	FILE *f = json_open(b->out, "mixstep");
	if (!f)
		return 1;
	fprintf(f, "{\"bench\": \"mixstep\", \"device\": \"%s\", \"points\": [\n", b->dev);
	printf("DVR verify step taken apart (llama3-8b, median of 7 after 3 warm-ups; ms)\n");
	double base = 0;
	for (size_t i = 0; i < DS_ARRAY_LEN(pts); i++) {
		double s = 0;
		if (pass_time(b, pts[i].path, pts[i].n_dec, pts[i].n_win, pts[i].wrows, pts[i].ctx,
		              pts[i].prompts, 0.7f, 7, &s)) {
			fclose(f);
			return 1;
		}
		if (i == 2)
			base = s;
		printf("  %-52s %8.3f ms\n", pts[i].what, s * 1e3);
		fprintf(f,
		        "%s  {\"what\": \"%s\", \"path\": \"%s\", \"decode_rows\": %d, "
		        "\"windows\": %d, "
		        "\"window_rows\": %d, \"ctx\": %d, \"prompts\": %s, \"ms\": %.4f}",
		        i ? ",\n" : "", pts[i].what, pts[i].path == DS_PATH_REF ? "ref" : "fast",
		        pts[i].n_dec, pts[i].n_win, pts[i].wrows, pts[i].ctx,
		        pts[i].prompts ? "true" : "false", s * 1e3);
		fflush(stdout);
	}
	printf("  (FAST 256 decode: %.3f ms is the step a verify step replaces)\n", base * 1e3);
	/* prefill-carrying steps at row counts not seen before (as in the e2e, where the decode
	 * rows change every step): the first call at each count, then the median of 3 more */
	printf(
	    "4 prompts x 512 + n decode rows (ctx 640): first call at that row count, then warm\n");
	for (int k = 0; k < 6; k++) {
		int n = 233 + 3 * k;
		double tc[2] = {0, 0}, tw[2] = {0, 0};
		for (int ph = 0; ph < 2; ph++) {
			enum ds_path path = ph ? DS_PATH_REF : DS_PATH_FAST;
			if (pass_time_w(b, path, n, 4, 512, 640, true, 0.7f, 0, 1, &tc[ph]) ||
			    pass_time_w(b, path, n, 4, 512, 640, true, 0.7f, 0, 3, &tw[ph])) {
				fclose(f);
				return 1;
			}
		}
		printf(
		    "  n %3d (M %4d): FAST first %7.3f warm %7.3f ms; REF first %7.3f warm %7.3f "
		    "ms\n",
		    n, n + 2048, tc[0] * 1e3, tw[0] * 1e3, tc[1] * 1e3, tw[1] * 1e3);
		fprintf(f,
		        ",\n  {\"what\": \"4 prompts x 512 + decode rows, first call\", "
		        "\"decode_rows\": %d, \"fast_first_ms\": %.4f, \"fast_warm_ms\": %.4f, "
		        "\"ref_first_ms\": %.4f, \"ref_warm_ms\": %.4f}",
		        n, tc[0] * 1e3, tw[0] * 1e3, tc[1] * 1e3, tw[1] * 1e3);
	}
	fprintf(f, "\n]}\n");
	fclose(f);
	return 0;
}
