/* bench_gpu.c - GPU benchmarks of the CUDA backend on the llama3-8b preset (weights generated
 * on the device). Each section writes one JSON file and prints its ratio to a baseline
 * measured in the same run:
 *   copy    device-to-device copy bandwidth (the memory roofline)
 *   decode  fast/ref decode step time at batch 1..256, context 512/2048, vs the roofline
 *           (weight bytes + KV bytes over the copy bandwidth)
 *   gemm    reference GEMM vs cuBLASLt (the fast path's GEMM) at M = 1..8192 on the model's
 *           shapes, every reference variant (BENCH_GEMM_VARIANTS picks, BENCH_GEMM_POINTS
 *           limits the points to name:M pairs; DS_REF_GEMM_TABLE
 *           sets the reference path's own pick), W bandwidth at M <= 64, and row invariance
 *           (row 0 at M = 1 vs M = 2048 on the narrow shapes)
 *   attn    attention kernels' achieved bandwidth vs the roofline, both paths; fast decode variants
 *           (mma: the default, reg, pipe, old) and the fast path at forced splits
 *   attnref reference attention: CUDA-core kernel vs tensor-core kernel (verify, prefill, decode)
 *   verify  one G x W verify pass (G = 16, W = 32) vs W fast decode steps at batch 64
 *   profile one fast decode pass at batch 1/8/32 (ctx 512) run eagerly with events around each
 *           launch: time and GB/s per op class (silu_down: SiLU*mul and the down projection,
 *           fused or not, as the fast path chose); the graph-replayed step, also with PDL
 *           toggled and without the skinny GEMM; the fast path's GEMM choices
 *   mixstep the DVR verify step of the e2e at 10% deterministic on REF, against its parts (REF
 *           decode alone, the windows alone, more rows, no context) and the FAST decode step
 *   passprof prefill-carrying steps (240 decode rows + 4 prompts of 512, of 452: the e2e's
 *           2048-token step, and a prompt's second chunk with whole prompts), the prompts alone
 *           and a 256-row decode pass, op by op on FAST and on REF (eager, events around each
 *           launch), and each forward's wall time, in rounds that alternate the paths
 *           (PASSPROF_ALTERNATE=0: FAST first in every round)
 *   ablate  the captured fast decode step at batch 1..64 with op classes left out
 *   e2e     offline throughput through the scheduler's engine (scheduler/engine.h): modes fast,
 *           dvr with 0/10/50/100% deterministic requests (G = 16, and G = 64 at 10/50/100%),
 *           invariant, dvr without early verification; ratio to fast
 * Usage: bench_gpu OUTDIR [sections...] (default: all). E2E_REQUESTS, E2E_PROMPT_MIN,
 * E2E_PROMPT and E2E_OUT size the offline workload (default 256 requests, prompts of 128..256,
 * 128 out; the is 1024, 512..512, 256); E2E_CONFIGS picks configurations by name.
 * This file holds main, the shared helpers and the copy and attention sections; the GEMM section
 * is in bench_gpu_gemm.c, decode / verify / profile / mixstep / passprof / ablate in
 * bench_gpu_step.c, e2e in bench_gpu_e2e.c (bench_gpu.h). */
#include "bench_gpu.h"

#include <xxhash.h>

double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(double), cmp_d);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int event_median(cudaStream_t st, int warm, int reps, int (*run)(void *), void *arg, double *out_s)
{
	return event_median_flush(st, warm, reps, run, arg, NULL, 0, out_s);
}

int event_median_flush(cudaStream_t st, int warm, int reps, int (*run)(void *), void *arg,
                       void *flush, size_t flush_bytes, double *out_s)
{
	cudaEvent_t e[2] = {NULL, NULL};
	double *t = malloc((size_t)reps * sizeof(*t));
	cudaError_t ce = cudaEventCreate(&e[0]);
	if (ce == cudaSuccess)
		ce = cudaEventCreate(&e[1]);
	int rc = t && ce == cudaSuccess ? 0 : 1;
	for (int i = -warm; i < reps && rc == 0; i++) {
		float ms = 0.0f;
		ce = flush ? cudaMemsetAsync(flush, i & 0xff, flush_bytes, st) : cudaSuccess;
		if (ce == cudaSuccess)
			ce = cudaEventRecord(e[0], st);
		if (ce == cudaSuccess && (rc = run(arg)) != 0)
			break;
		if (ce == cudaSuccess)
			ce = cudaEventRecord(e[1], st);
		if (ce == cudaSuccess)
			ce = cudaEventSynchronize(e[1]);
		if (ce == cudaSuccess)
			ce = cudaEventElapsedTime(&ms, e[0], e[1]);
		if (ce != cudaSuccess)
			rc = 1;
		else if (i >= 0)
			t[i] = ms * 1e-3;
	}
	if (ce != cudaSuccess)
		fprintf(stderr, "bench: timing: %s\n", cudaGetErrorString(ce));
	if (rc == 0)
		*out_s = median(t, reps);
	for (int k = 0; k < 2; k++)
		if (e[k])
			cudaEventDestroy(e[k]);
	free(t);
	return rc;
}

FILE *json_open(const char *dir, const char *name)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/gpu-%s.json", dir, name);
	FILE *f = fopen(path, "w");
	if (!f)
		fprintf(stderr, "bench: cannot write %s\n", path);
	return f;
}

/* ---- copy roofline ---- */

struct copy_run {
	void *dst, *src;
	size_t n;
};

static int copy_run(void *arg)
{
	struct copy_run *r = arg;
	CK(cudaMemcpyAsync(r->dst, r->src, r->n, cudaMemcpyDeviceToDevice, 0));
	return 0;
}

int bench_copy(struct bench *b)
{
	size_t n = (size_t)2 << 30;
	void *src, *dst;
	CK(cudaMalloc(&src, n));
	CK(cudaMalloc(&dst, n));
	CK(cudaMemset(src, 1, n));
	struct copy_run r = {dst, src, n};
	double s = 0;
	if (event_median(0, 3, 20, copy_run, &r, &s) != 0)
		return 1;
	b->copy_bw = 2.0 * (double)n / s;
	printf("copy: %.2f GB moved in %.3f ms: %.0f GB/s (read + write)\n", 2.0 * n / 1e9, s * 1e3,
	       b->copy_bw / 1e9);
	FILE *f = json_open(b->out, "copy");
	if (f) {
		fprintf(f,
		        "{\"bench\": \"copy\", \"device\": \"%s\", \"bytes_moved\": %.0f, "
		        "\"median_s\": %.6g, \"bandwidth_GBps\": %.1f}\n",
		        b->dev, 2.0 * n, s, b->copy_bw / 1e9);
		fclose(f);
	}
	cudaFree(src);
	cudaFree(dst);
	return 0;
}

/* ---- decode step ---- */

double json_num(double x)
{
	return isfinite(x) ? x : -1.0;
}

int env_int(const char *k, int def)
{
	const char *v = getenv(k);
	return v && *v ? atoi(v) : def;
}

/* ---- attention bandwidth ---- */

/* One decode attention of pass p for event_median: path 0, the fast path's (diag >= 0: the
 * decode kernel's variant diag at split, ds_k_attn_decode_v); 1, the reference path's; 2,
 * attn.cu's older fast kernel. */
struct attn_run {
	struct ds_cuda_ctx *c;
	const struct ds_cuda_pass *p;
	int path, split, diag;
};

static int attn_run(void *arg)
{
	struct attn_run *r = arg;
	struct ds_cuda_ctx *c = r->c;
	struct ds_err err;
	enum ds_status rv = DS_OK;
	if (r->path == 2)
		CK(ds_k_attn_fast(c->q, c->kv, ds_cuda_tokmeta(c), r->p->T, ds_cuda_dims(c),
		                  r->split, c->part, c->att, c->stream));
	else if (r->path == 1)
		rv = ds_cuda_ref_ops.attention(c, r->p, c->kv, 0, &err);
	else if (r->diag >= 0)
		CK(ds_k_attn_decode_v(c->q, c->kv, ds_cuda_tokmeta(c), r->p->T, ds_cuda_dims(c),
		                      r->split, c->part, c->att, NULL, r->diag, 0, c->stream));
	else
		rv = ds_cuda_fast_ops.attention(c, r->p, c->kv, r->split, &err);
	if (rv != DS_OK) {
		fprintf(stderr, "attn: %s\n", err.msg);
		return 1;
	}
	return 0;
}

/* Median seconds of 20 fast-path attentions of pass p (after 2 warm-ups); 1 on error. With
 * diag >= 0, the decode kernel's variant diag (ds_k_attn_decode_v, e.g. the copy-only
 * diagnostic, which the backend never runs) at split instead. */
static int attn_time_fast(struct ds_cuda_ctx *c, const struct ds_cuda_pass *p, int split, int diag,
                          double *sec)
{
	if (diag >= 0) /* the partial buffer's cap, as the fast path applies it */
		split = ds_cuda_split_cap(c, p->T, split);
	struct attn_run r = {c, p, 0, split, diag};
	return event_median(c->stream, 2, 20, attn_run, &r, sec);
}

/* Whether the comma-separated list in environment variable var (unset or empty: every name)
 * holds name. */
bool name_picked(const char *var, const char *name)
{
	const char *v = getenv(var);
	size_t n = strlen(name);
	if (!v || !*v)
		return true;
	for (const char *p = v; (p = strstr(p, name)) != NULL; p += n)
		if ((p == v || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
			return true;
	return false;
}

/* Whether environment variable var (e.g. "8:2048,32:512"; unset: every point) names batch B
 * at context ctx, so a profiler run can time one shape. */
bool point_picked(const char *var, int B, int ctx)
{
	char name[32];
	snprintf(name, sizeof(name), "%d:%d", B, ctx);
	return name_picked(var, name);
}

int bench_attn(struct bench *b)
{
	struct ds_cuda_ctx *c = b->c;
	const struct ds_model_config *cfg = &b->m->cfg;
	struct {
		int B, ctx;
	} pts[] = {{1, 8192}, {8, 2048}, {64, 2048}, {256, 2048}, {64, 512},
	           {1, 512},  {8, 512},  {32, 512},  {256, 640}}; /* 256 x 640: the e2e's decode */
	FILE *f = json_open(b->out, "attn");
	if (!f)
		return 1;
	fprintf(f,
	        "{\"bench\": \"attn\", \"device\": \"%s\", \"copy_bandwidth_GBps\": %.1f, "
	        "\"points\": [\n",
	        b->dev, b->copy_bw / 1e9);
	printf("decode attention, one layer (KV bytes read / time vs copy bandwidth); fast = the\n"
	       "fast path's choice (attn_decode.cu's mma variant unless DS_FAST_ATTN says\n"
	       "otherwise), reg = attn_decode.cu's register variant (DS_FAST_ATTN=reg), pipe = its\n"
	       "cp.async CUDA-core variant (DS_FAST_ATTN=pipe), old = attn.cu's fast kernel at `split`\n");
	printf("%5s %6s %6s %10s %10s %10s %10s %10s %8s %8s %8s %8s %8s\n", "batch", "ctx", "split",
	       "fast_GB/s", "reg_GB/s", "pipe_GB/s", "old_GB/s", "ref_GB/s", "fast/roof", "pipe/roof",
	       "ref/roof", "old/fast", "fast/pipe");
	const char *sel0 = getenv("DS_FAST_ATTN"), *fs0 = getenv("DS_FAST_ATTN_SPLIT");
	char *sel = sel0 ? strdup(sel0) : NULL, *fs = fs0 ? strdup(fs0) : NULL;
	/* the fast path at forced decode splits (DS_FAST_ATTN_SPLIT; the partial buffer may cap
	 * it), to check the split model */
	static const int sweep[] = {1, 2, 4, 8, 16, 32, 64};
	int written = 0;
	for (size_t pi = 0; pi < DS_ARRAY_LEN(pts); pi++) {
		int B = pts[pi].B, ctx = pts[pi].ctx, nb = (ctx + 1 + BS - 1) / BS;
		if (!point_picked("ATTN_POINTS", B, ctx))
			continue;
		for (int i = 0; i < B; i++) {
			c->hm.ids[i] = 1;
			c->hm.pos[i] = ctx;
			c->hm.seq[i] = i;
			c->hm.bt_off[i] = i * nb;
			c->hm.out_tok[i] = i;
			for (int j = 0; j < nb; j++)
				c->hm.bt[i * nb + j] = (i * nb + j) % c->n_blocks;
		}
		struct ds_cuda_pass p = {B, B, B * nb, B, ctx, true};
		struct ds_err err;
		if (ds_cuda_meta_upload(c, &p, &err) != DS_OK) {
			fprintf(stderr, "attn: %s\n", err.msg);
			return 1;
		}
		CK(ds_k_synth_fill(c->q, (size_t)B * ds_model_q_dim(cfg), 0, 5, 6, 1.0f, 0.0f,
		                   c->stream));
		/* fast, ref, old, reg, pipe; fast and ref again after an L2 flush */
		double tt[5], cold[2];
		int split = ds_cuda_fast_split(c, B, ctx + 1);
		for (int ref = 0; ref < 5; ref++) {
			/* 3, 4: the fast path with the register / CUDA-core pipelined variant */
			const char *force = ref == 3 ? "reg" : ref == 4 ? "pipe" : NULL;
			if (force && setenv("DS_FAST_ATTN", force, 1) != 0)
				return 1;
			struct attn_run r = {c, &p, ref <= 2 ? ref : 0, split, -1};
			if (event_median(c->stream, 2, 20, attn_run, &r, &tt[ref]) != 0)
				return 1;
			if (force && (sel ? setenv("DS_FAST_ATTN", sel, 1) : unsetenv("DS_FAST_ATTN")))
				return 1;
			/* the runs above repeat on K/V that L2 may still hold (50 MB on the H200);
			 * a decode step reads it after the weights have gone through: cold too */
			if (ref <= 1 &&
			    event_median_flush(c->stream, 2, 20, attn_run, &r, c->fast.workspace,
			                       c->fast.ws_bytes, &cold[ref]) != 0)
				return 1;
		}
		double bytes = (double)B * (ctx + 1) * 2 * ds_model_kv_dim(cfg) * 2;
		printf("%5d %6d %6d %10.0f %10.0f %10.0f %10.0f %10.0f %7.1f%% %7.1f%% %7.1f%% %8.2f "
		       "%8.2f\n",
		       B, ctx, split, bytes / tt[0] / 1e9, bytes / tt[3] / 1e9, bytes / tt[4] / 1e9,
		       bytes / tt[2] / 1e9, bytes / tt[1] / 1e9, 100 * bytes / tt[0] / b->copy_bw,
		       100 * bytes / tt[4] / b->copy_bw, 100 * bytes / tt[1] / b->copy_bw,
		       tt[2] / tt[0], tt[0] / tt[4]);
		printf("      L2 flushed before each run: fast %.0f GB/s (%.1f%%), ref %.0f GB/s "
		       "(%.1f%%)\n",
		       bytes / cold[0] / 1e9, 100 * bytes / cold[0] / b->copy_bw,
		       bytes / cold[1] / 1e9, 100 * bytes / cold[1] / b->copy_bw);
		fprintf(f,
		        "%s  {\"batch\": %d, \"ctx\": %d, \"fast_split\": %d, \"kv_bytes\": %.0f, "
		        "\"fast_us\": %.2f, \"ref_us\": %.2f, \"fast_fraction_of_roofline\": %.4f, "
		        "\"ref_fraction_of_roofline\": %.4f, \"old_us\": %.2f, "
		        "\"old_fraction_of_roofline\": %.4f, \"reg_us\": %.2f, "
		        "\"reg_fraction_of_roofline\": %.4f, \"pipe_us\": %.2f, "
		        "\"pipe_fraction_of_roofline\": %.4f, \"fast_cold_us\": %.2f, "
		        "\"ref_cold_us\": %.2f, \"fast_cold_fraction_of_roofline\": %.4f",
		        written++ ? ",\n" : "", B, ctx, split, bytes, tt[0] * 1e6, tt[1] * 1e6,
		        bytes / tt[0] / b->copy_bw, bytes / tt[1] / b->copy_bw, tt[2] * 1e6,
		        bytes / tt[2] / b->copy_bw, tt[3] * 1e6, bytes / tt[3] / b->copy_bw,
		        tt[4] * 1e6, bytes / tt[4] / b->copy_bw, cold[0] * 1e6, cold[1] * 1e6,
		        bytes / cold[0] / b->copy_bw);
		/* the split sweep for the default variant, then for the CUDA-core pipelined one and
		 * the mma variant's bulk-copy form (through DS_FAST_ATTN), then for the copy-only
		 * diagnostics (the mma variant's copies without its arithmetic, cp.async or bulk,
		 * launched directly) */
		static const struct {
			const char *name, *env;
			int diag;
		} sweeps[] = {{"fast", NULL, -1},
		              {"pipe", "pipe", -1},
		              {"bulk", "mma_bulk", -1},
		              {"copyonly", NULL, DS_K_ATTN_DECODE_MMA_COPYONLY},
		              {"bulkcopyonly", NULL, DS_K_ATTN_DECODE_MMA_BULK_COPYONLY}};
		for (size_t vm = 0; vm < DS_ARRAY_LEN(sweeps); vm++) {
			const char *vn = sweeps[vm].name, *env = sweeps[vm].env;
			int diag = sweeps[vm].diag;
			if (env && setenv("DS_FAST_ATTN", env, 1) != 0)
				return 1;
			printf("      %s us at forced split:", vn);
			fprintf(f, ", \"%s_us_by_forced_split\": {", vn);
			for (size_t k = 0; k < DS_ARRAY_LEN(sweep); k++) {
				char v[16];
				double ts = 0;
				snprintf(v, sizeof(v), "%d", sweep[k]);
				if (setenv("DS_FAST_ATTN_SPLIT", v, 1) != 0 ||
				    attn_time_fast(c, &p, diag >= 0 ? sweep[k] : split, diag,
				                   &ts) != 0)
					return 1;
				printf(" %s:%.1f", v, ts * 1e6);
				fprintf(f, "%s\"%s\": %.2f", k ? ", " : "", v, ts * 1e6);
			}
			printf("\n");
			fprintf(f, "}");
			if (env &&
			    (sel ? setenv("DS_FAST_ATTN", sel, 1) : unsetenv("DS_FAST_ATTN")))
				return 1;
		}
		fprintf(f, "}");
		if (fs ? setenv("DS_FAST_ATTN_SPLIT", fs, 1) : unsetenv("DS_FAST_ATTN_SPLIT"))
			return 1;
	}
	free(sel);
	free(fs);
	fprintf(f, "\n]}\n");
	fclose(f);
	return 0;
}

/* ---- reference attention: CUDA-core kernel (attn.cu) vs tensor-core kernel (attn_mma.cu) ---- */

/* One reference attention of T rows for event_median: mode 0, attn.cu's kernel at split; 1,
 * attn_mma.cu's walk on the plan in c->dm.aplan; else its split launch (top, occ, and whether
 * the plan splits). */
struct attnref_run {
	struct ds_cuda_ctx *c;
	struct ds_k_dims d;
	int T, mode, split, top, occ;
	bool splits;
};

static int attnref_run(void *arg)
{
	struct attnref_run *r = arg;
	struct ds_cuda_ctx *c = r->c;
	if (r->mode == 0)
		CK(ds_k_attn_ref(c->q, c->kv, ds_cuda_tokmeta(c), r->T, r->d, r->split, c->part,
		                 c->att, c->stream));
	else if (r->mode == 1)
		CK(ds_k_attn_ref_mma(c->q, c->kv, ds_cuda_tokmeta(c), c->dm.aplan, r->T, r->d,
		                     r->occ, c->att, c->stream));
	else
		CK(ds_k_attn_ref_mma_split(c->q, c->kv, ds_cuda_tokmeta(c), c->dm.aplan, r->T, r->d,
		                           r->top, r->occ, c->part, r->splits, c->att, c->stream));
	return 0;
}

/* ---- attntrace: where the fused decode attention's time goes inside a decode step ---- */

/* One traced decode step of B rows at ctx (the fast path's current switches, fused q/k/v
 * epilogue on, one graph captured without tuning): each block's stamps (DS_K_DATTN_STAMPS) of the
 * last layer's attention, summarised as phase means and maxima over the blocks that ran. */
static int attntrace_point(struct bench *b, FILE *f, int B, int ctx, bool pdl, bool *first,
                           unsigned long long *dtr, unsigned long long *tr, size_t n_stamps)
{
	struct ds_cuda_ctx *c = b->c;
	struct ds_cuda_fast *fa = &c->fast;
	bool tune0 = fa->graph_tune, pdl0 = fa->pdl, fuse0 = fa->fuse_qkv, mega0 = fa->mega;
	fa->graph_tune = false;
	fa->pdl = pdl;
	fa->fuse_qkv = true;
	fa->mega = false;
	fa->attn_trace = dtr;
	ds_cuda_fast_graphs_reset(c);
	double ts = 0;
	int rc = cudaMemset(dtr, 0, n_stamps * sizeof(*dtr)) != cudaSuccess;
	if (rc == 0)
		rc = decode_time(b, DS_PATH_FAST, B, ctx, 5, &ts);
	fa->attn_trace = NULL;
	ds_cuda_fast_graphs_reset(c);
	fa->graph_tune = tune0;
	fa->pdl = pdl0;
	fa->fuse_qkv = fuse0;
	fa->mega = mega0;
	if (rc != 0 ||
	    cudaMemcpy(tr, dtr, n_stamps * sizeof(*tr), cudaMemcpyDeviceToHost) != cudaSuccess)
		return 1;
	enum { NP = DS_K_DATTN_STAMPS - 1 };
	static const char *ph[NP] = {"table",       "issue", "pdl_wait", "epilogue",
	                             "first_stage", "loop",  "merge"};
	double sum[NP] = {0}, mx[NP] = {0}, start_max = 0, end_max = 0;
	unsigned long long t0 = ~0ull;
	size_t nblk = n_stamps / DS_K_DATTN_STAMPS, ran = 0, seen = 0;
	for (size_t i = 0; i < nblk; i++)
		if (tr[i * DS_K_DATTN_STAMPS] && tr[i * DS_K_DATTN_STAMPS] < t0)
			t0 = tr[i * DS_K_DATTN_STAMPS];
	int hist[16] = {0}; /* block starts by microsecond after the first */
	for (size_t i = 0; i < nblk; i++) {
		const unsigned long long *s = tr + i * DS_K_DATTN_STAMPS;
		if (!s[0])
			continue;
		seen++;
		double st = (s[0] - t0) * 1e-3;
		start_max = st > start_max ? st : start_max;
		hist[st < 15 ? (int)st : 15]++;
		if (!s[7])
			continue;
		ran++;
		end_max = (s[7] - t0) * 1e-3 > end_max ? (s[7] - t0) * 1e-3 : end_max;
		for (int k = 0; k < NP; k++) {
			double d = (s[k + 1] - s[k]) * 1e-3;
			sum[k] += d;
			mx[k] = d > mx[k] ? d : mx[k];
		}
	}
	printf("batch %d, ctx %d, pdl %d: step %.3f ms; %zu blocks started, %zu ran to the end; "
	       "last start %.2f us, last end %.2f us after the first start\n",
	       B, ctx, (int)pdl, ts * 1e3, seen, ran, start_max, end_max);
	printf("  starts by us:");
	for (int k = 0; k < 16; k++)
		printf(" %d", hist[k]);
	printf("\n  phase (us)      mean      max\n");
	for (int k = 0; k < NP; k++)
		printf("  %-12s %8.2f %8.2f\n", ph[k], ran ? sum[k] / ran : 0.0, mx[k]);
	fprintf(f,
	        "%s  {\"batch\": %d, \"ctx\": %d, \"pdl\": %s, \"step_ms\": %.4f, "
	        "\"blocks_started\": %zu, \"blocks_ran\": %zu, \"last_start_us\": %.3f, "
	        "\"last_end_us\": %.3f, \"phases\": [",
	        *first ? "" : ",\n", B, ctx, pdl ? "true" : "false", ts * 1e3, seen, ran, start_max,
	        end_max);
	for (int k = 0; k < NP; k++)
		fprintf(f, "%s{\"name\": \"%s\", \"mean_us\": %.3f, \"max_us\": %.3f}",
		        k ? ", " : "", ph[k], ran ? sum[k] / ran : 0.0, mx[k]);
	fprintf(f, "]}");
	*first = false;
	return 0;
}

int bench_attntrace(struct bench *b)
{
	static const struct {
		int B, ctx;
	} pts[] = {{1, 512}, {8, 512}, {32, 512}, {8, 2048}, {32, 2048}};
	size_t n_stamps = (size_t)64 * 8 * DS_K_ATTN_DECODE_MAX_SPLIT * DS_K_DATTN_STAMPS;
	unsigned long long *dtr = NULL, *tr = malloc(n_stamps * sizeof(*tr));
	if (!tr || cudaMalloc((void **)&dtr, n_stamps * sizeof(*dtr)) != cudaSuccess) {
		free(tr);
		return 1;
	}
	FILE *f = json_open(b->out, "attntrace");
	int rc = f ? 0 : 1;
	if (f)
		fprintf(f, "{\"bench\": \"attntrace\", \"device\": \"%s\", \"points\": [\n",
		        b->dev);
	printf("fused decode attention inside a decode step (last layer; per-block phases from "
	       "globaltimer stamps)\n");
	bool first = true;
	for (size_t i = 0; i < DS_ARRAY_LEN(pts) && rc == 0; i++) {
		if (!point_picked("ATTN_POINTS", pts[i].B, pts[i].ctx))
			continue;
		for (int pdl = 0; pdl < 2 && rc == 0; pdl++)
			rc = attntrace_point(b, f, pts[i].B, pts[i].ctx, pdl, &first, dtr, tr,
			                     n_stamps);
	}
	if (f) {
		fprintf(f, "\n]}\n");
		fclose(f);
	}
	cudaFree(dtr);
	free(tr);
	return rc;
}

/* Section "attnref": one layer's reference attention on the llama3-8b shapes, as:
 *  old   ds_k_attn_ref (CUDA cores, split as refpath/cuda_ref.c picked it before the mma kernel),
 *  walk  ds_k_attn_ref_mma with a walk plan (round 1: one CTA walks each row group's tiles),
 *  new   ds_k_attn_ref_mma_split in auto mode (what the reference path runs eagerly: tiles
 *        spread over CTAs when few groups have long contexts, else the walk),
 *  split the same forced to split, graph: auto on the grid of a graph captured for max_pos.
 * Points: a verify pass of 16 windows x 32 rows at context 512, 2048 and 2055 (unaligned
 * windows: three row groups each instead of two), a 2048-row prefill chunk (positions
 * 0..2047), decode at batch 64 (context 512), and few-row passes: decode at batch 1 and 8 at
 * context 512, 2048 and 8192, one window of 32 at context 2048 and the e2e's decode (256 rows
 * at context 640). ATTNREF_POINTS=name,... keeps the named points only. Also: KV GB/s of new (each
 * sequence's KV read once), whether walk, new, split and graph gave the same bytes (they
 * must), and the largest |old - new| (the kernels round differently; a large value means a
 * broken kernel). */
int bench_attn_ref(struct bench *b)
{
	struct ds_cuda_ctx *c = b->c;
	const struct ds_model_config *cfg = &b->m->cfg;
	struct ds_k_dims d = ds_cuda_dims(c);
	struct {
		const char *name;
		int n_seq, rows, pos0; /* n_seq sequences of rows rows at positions pos0.. */
	} pts[] = {{"verify_g16_w32_ctx512", 16, 32, 512},
	           {"verify_g16_w32_ctx2048", 16, 32, 2048},
	           {"verify_g16_w32_ctx2055", 16, 32, 2055}, /* windows off the 16-row grid */
	           {"prefill_2048", 1, 2048, 0},
	           {"decode_b64_ctx512", 64, 1, 512},
	           {"decode_b1_ctx512", 1, 1, 511},
	           {"decode_b8_ctx512", 8, 1, 511},
	           {"decode_b1_ctx2048", 1, 1, 2047},
	           {"decode_b8_ctx2048", 8, 1, 2047},
	           {"decode_b1_ctx8192", 1, 1, 8191},
	           {"decode_b8_ctx8192", 8, 1, 8191},
	           {"verify_g1_w32_ctx2048", 1, 32, 2016},
	           {"decode_b256_ctx640", 256, 1, 640}}; /* the e2e's decode */
	if (!ds_k_attn_ref_mma_supported(d)) {
		fprintf(stderr, "attnref: head_dim %d not supported by the mma kernel\n",
		        d.head_dim);
		return 1;
	}
	CK(ds_k_attn_ref_mma_setup(d));
	FILE *f = json_open(b->out, "attnref");
	if (!f)
		return 1;
	fprintf(f, "{\"bench\": \"attnref\", \"device\": \"%s\", \"points\": [\n", b->dev);
	printf("reference attention, one layer: old (CUDA cores), walk (mma, round 1), new (mma, "
	       "auto walk/split), split, graph (auto on a max_pos grid); occ: new's build (CTAs an "
	       "SM), other: new on the other build\n");
	printf("%-24s %5s %9s %9s %9s %9s %9s %3s %9s %8s %8s %6s %5s %10s %16s\n", "point", "rows",
	       "old_us", "walk_us", "new_us", "split_us", "graph_us", "occ", "other_us", "new/old",
	       "new/walk", "newGBs", "same", "max|o-n|", "xxh3(walk)");
	size_t qd = (size_t)ds_model_q_dim(cfg);
	enum { NK = 6 }; /* old, walk, new, split, graph, new on the other build (occ) */
	uint16_t *o[NK];
	for (int k = 0; k < NK; k++)
		o[k] = malloc((size_t)c->cap_tokens * qd * 2);
	int32_t *plans[3];
	for (int k = 0; k < 3; k++)
		plans[k] = malloc(DS_K_ATTN_MMA_PLAN_INTS(c->cap_tokens) * 4);
	int rc = 0, written = 0;
	for (size_t pi = 0; pi < DS_ARRAY_LEN(pts) && rc == 0; pi++) {
		if (!name_picked("ATTNREF_POINTS", pts[pi].name))
			continue;
		int S = pts[pi].n_seq, W = pts[pi].rows, T = S * W, maxp = pts[pi].pos0 + W - 1;
		int nb = (maxp + 1 + BS - 1) / BS;
		double flops = 0, kv_bytes = 0;
		for (int s = 0; s < S; s++) {
			c->hm.bt_off[s] = s * nb;
			for (int j = 0; j < nb; j++)
				c->hm.bt[s * nb + j] = (s * nb + j) % c->n_blocks;
			for (int i = 0; i < W; i++) {
				int t = s * W + i;
				c->hm.ids[t] = 1;
				c->hm.pos[t] = pts[pi].pos0 + i;
				c->hm.seq[t] = s;
				flops += 4.0 * cfg->n_head * cfg->head_dim * (pts[pi].pos0 + i + 1);
			}
			kv_bytes += 4.0 * (maxp + 1) * cfg->n_kv_head * cfg->head_dim;
		}
		struct ds_cuda_pass p = {T, S, S * nb, 0, maxp, false};
		struct ds_err err;
		if (ds_cuda_meta_upload(c, &p, &err) != DS_OK) {
			fprintf(stderr, "attnref: %s\n", err.msg);
			rc = 1;
			break;
		}
		/* the plans: walk-only, auto, split (device copies taken in turn from dm.aplan) */
		ds_k_attn_ref_mma_plan(c->hm.pos, c->hm.seq, T, d, plans[0]);
		ds_k_attn_ref_mma_plan_split(c->hm.pos, c->hm.seq, T, d, c->part_floats, -1,
		                             plans[1]);
		ds_k_attn_ref_mma_plan_split(c->hm.pos, c->hm.seq, T, d, c->part_floats, 1,
		                             plans[2]);
		CK(ds_k_synth_fill(c->q, (size_t)T * qd, 0, 5, 6, 1.0f, 0.0f, c->stream));
		int chunks = maxp / DS_K_ATTN_TILE + 1;
		size_t need = (size_t)T * cfg->n_head * chunks * (cfg->head_dim + 2);
		int split = need <= c->part_floats ? chunks : 0;
		double tt[NK];
		int occ_new = 2;
		for (int k = 0; k < NK; k++) {
			const int32_t *hp = k == 1 ? plans[0] : k == 3 ? plans[2] : plans[1];
			int top = k == 4 ? cfg->max_pos - 1 : maxp;
			int occ = ds_k_attn_ref_mma_occ(hp, T, d, k == 1 ? -1 : top, c->n_sm);
			if (k == 2)
				occ_new = occ;
			if (k == 5)
				occ = 5 - occ_new;
			CK(cudaMemcpyAsync(c->dm.aplan, hp, DS_K_ATTN_MMA_PLAN_INTS(T) * 4,
			                   cudaMemcpyHostToDevice, c->stream));
			struct attnref_run r = {c, d, T, k, split, top, occ, k == 4 || hp[1] != 0};
			if (event_median(c->stream, 2, 20, attnref_run, &r, &tt[k]) != 0)
				return 1;
			CK(cudaMemcpy(o[k], c->att, (size_t)T * qd * 2, cudaMemcpyDeviceToHost));
		}
		bool same = true;
		for (int k = 2; k < NK; k++)
			same = same && memcmp(o[1], o[k], (size_t)T * qd * 2) == 0;
		if (!same)
			rc = 1; /* the modes must agree: the run fails loudly */
		double maxd = 0;
		for (size_t i = 0; i < (size_t)T * qd; i++) {
			double x = fabs((double)ds_bf16_to_f32(o[0][i]) - ds_bf16_to_f32(o[2][i]));
			if (!(x <= maxd))
				maxd = x; /* NaN sticks */
		}
		/* the bytes' hash, to compare builds or kernel settings across runs */
		unsigned long long h = XXH3_64bits(o[1], (size_t)T * qd * 2);
		printf("%-24s %5d %9.1f %9.1f %9.1f %9.1f %9.1f %3d %9.1f %8.3f %8.3f %6.0f %5s "
		       "%10.4g %016llx\n",
		       pts[pi].name, T, tt[0] * 1e6, tt[1] * 1e6, tt[2] * 1e6, tt[3] * 1e6,
		       tt[4] * 1e6, occ_new, tt[5] * 1e6, tt[2] / tt[0], tt[2] / tt[1],
		       kv_bytes / tt[2] / 1e9, same ? "yes" : "NO", maxd, h);
		fprintf(f,
		        "%s  {\"point\": \"%s\", \"rows\": %d, \"sequences\": %d, \"pos0\": %d, "
		        "\"old_split\": %d, \"new_mode\": %d, \"old_us\": %.2f, \"walk_us\": %.2f, "
		        "\"new_us\": %.2f, \"split_us\": %.2f, \"graph_us\": %.2f, "
		        "\"new_occ\": %d, \"other_occ_us\": %.2f, "
		        "\"new_over_old\": %.4f, \"new_over_walk\": %.4f, \"new_kv_gbs\": %.1f, "
		        "\"new_tflops\": %.2f, \"modes_same_bytes\": %s, "
		        "\"max_abs_diff_old_new\": %.6g, \"xxh3\": \"%016llx\"}",
		        written++ ? ",\n" : "", pts[pi].name, T, S, pts[pi].pos0, split,
		        plans[1][1], tt[0] * 1e6, tt[1] * 1e6, tt[2] * 1e6, tt[3] * 1e6,
		        tt[4] * 1e6, occ_new, tt[5] * 1e6, tt[2] / tt[0], tt[2] / tt[1],
		        kv_bytes / tt[2] / 1e9, flops / tt[2] / 1e12, same ? "true" : "false", maxd,
		        h);
		if (!same)
			fprintf(stderr, "attnref: %s: walk and split modes differ in bytes\n",
			        pts[pi].name);
	}
	fprintf(f, "\n]}\n");
	fclose(f);
	for (int k = 0; k < NK; k++)
		free(o[k]);
	for (int k = 0; k < 3; k++)
		free(plans[k]);
	return rc;
}

/* ---- verify pass vs W decode steps ---- */

static bool want(int argc, char **argv, const char *s)
{
	if (argc <= 2)
		return true;
	for (int i = 2; i < argc; i++)
		if (strcmp(argv[i], s) == 0)
			return true;
	return false;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: bench_gpu OUTDIR [gemm attn attnref decode verify profile "
		                "mixstep passprof ablate mega l2pf stream attntrace sample e2e]\n");
		return 2;
	}
	/* line-buffered even into a pipe: a run stopped by a timeout keeps the lines it printed
	 * (two e2e runs in bench/results/gpu-20261130-58222ea-final lost theirs) */
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct bench b;
	memset(&b, 0, sizeof(b));
	b.out = argv[1];
	struct ds_model_config cfg;
	struct ds_err err;
	ds_model_preset("llama3-8b", &cfg);
	if (ds_model_new(&cfg, &b.m, &err) != DS_OK)
		return 1;
	b.m->synthetic = b.m->deferred = true;
	b.m->synth_seed = 42;
	double t0 = now_s();
	if (ds_backend_cuda_init(&b.be, b.m, 0, &err) != DS_OK) {
		fprintf(stderr, "bench: %s\n", err.msg);
		return 1;
	}
	printf("llama3-8b weights generated on the device in %.2f s\n", now_s() - t0);
	/* KV for batch 256 at context 2048 (+ the verify pass) */
	int n_blocks = 256 * ((2048 + 1 + BS - 1) / BS) + 64;
	if (ds_backend_kv_init(&b.be, n_blocks, BS, &err) != DS_OK) {
		fprintf(stderr, "bench: %s\n", err.msg);
		return 1;
	}
	b.c = b.be.ctx;
	snprintf(b.dev, sizeof(b.dev), "%s", b.c->dev_name);
	/* random KV everywhere (decode time does not depend on the values, but no zeros) */
	size_t kv_elems = b.c->kv_layer_elems * (size_t)cfg.n_layer;
	CK(ds_k_synth_fill(b.c->kv, kv_elems, 0, 7, 8, 1.0f, 0.0f, b.c->stream));
	CK(cudaStreamSynchronize(b.c->stream));
	int rc = bench_copy(&b);
	if (!rc && want(argc, argv, "gemm"))
		rc = bench_gemm(&b);
	if (!rc && want(argc, argv, "attn"))
		rc = bench_attn(&b);
	if (!rc && want(argc, argv, "attnref"))
		rc = bench_attn_ref(&b);
	if (!rc && want(argc, argv, "decode"))
		rc = bench_decode(&b);
	if (!rc && want(argc, argv, "verify"))
		rc = bench_verify(&b);
	if (!rc && want(argc, argv, "profile"))
		rc = bench_profile(&b);
	if (!rc && want(argc, argv, "mixstep"))
		rc = bench_mixstep(&b);
	if (!rc && want(argc, argv, "passprof"))
		rc = bench_passprof(&b);
	if (!rc && want(argc, argv, "ablate"))
		rc = bench_ablate(&b);
	if (!rc && want(argc, argv, "mega"))
		rc = bench_mega(&b);
	if (!rc && argc > 2 && want(argc, argv, "attntrace"))
		rc = bench_attntrace(&b);
	if (!rc && argc > 2 && want(argc, argv, "l2pf"))
		rc = bench_l2pf(&b);
	if (!rc && argc > 2 && want(argc, argv, "stream"))
		rc = bench_stream(&b);
	if (!rc && want(argc, argv, "sample"))
		rc = bench_sample(&b);
	ds_backend_free(&b.be);
	if (!rc && want(argc, argv, "e2e"))
		rc = bench_e2e(&b);
	ds_model_free(b.m);
	return rc;
}
