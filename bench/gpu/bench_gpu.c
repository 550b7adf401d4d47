/* bench_gpu.c - GPU benchmarks of the CUDA backend on the llama3-8b preset (weights generated
 * on the device). Each section writes one JSON file and prints its ratio to a baseline
 * measured in the same run:
 *   copy    device-to-device copy bandwidth (the memory roofline)
 *   decode  fast/ref decode step time at batch 1..256, context 512/2048, vs the roofline
 *           (weight bytes + KV bytes over the copy bandwidth)
 *   gemm    reference GEMM vs cuBLASLt (the fast path's GEMM) at M = 1..8192 on the model's
 *           shapes, every reference variant (BENCH_GEMM_VARIANTS picks; DS_REF_GEMM_TABLE
 *           sets the reference path's own pick), W bandwidth at M <= 64, and row invariance
 *           (row 0 at M = 1 vs M = 2048 on the narrow shapes)
 *   attn    attention kernels' achieved bandwidth vs the roofline, both paths
 *   attnref reference attention: CUDA-core kernel vs tensor-core kernel (verify, prefill, decode)
 *   verify  one G x W verify pass (G = 16, W = 32) vs W fast decode steps at batch 64
 *   profile one fast decode pass at batch 1/8/32 (ctx 512) run eagerly with events around each
 *           launch: time and GB/s per op class; the graph-replayed step, also with PDL toggled
 *           and without the skinny GEMM; the fast path's GEMM choices
 *   e2e     offline throughput through the scheduler's engine (scheduler/engine.h): modes fast,
 *           dvr with 0/10/50/100% deterministic requests (G = 16, and G = 64 at 10/50/100%),
 *           invariant, dvr without early verification; ratio to fast
 * Usage: bench_gpu OUTDIR [sections...] (default: all). E2E_REQUESTS, E2E_PROMPT_MIN,
 * E2E_PROMPT and E2E_OUT size the offline workload (default 256 requests, prompts of 128..256,
 * 128 out; the is 1024, 512..512, 256); E2E_CONFIGS picks configurations by name. */
#include "cuda_internal.h"
#include "engine.h"
#include "model_internal.h"
#include "ref_gemm_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x)                                                                                      \
	do {                                                                                       \
		cudaError_t e_ = (x);                                                              \
		if (e_ != cudaSuccess) {                                                           \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,                 \
			        cudaGetErrorString(e_));                                           \
			return 1;                                                                  \
		}                                                                                  \
	} while (0)

#define BS 16

static double now_s(void)
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

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(double), cmp_d);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static FILE *json_open(const char *dir, const char *name)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/gpu-%s.json", dir, name);
	FILE *f = fopen(path, "w");
	if (!f)
		fprintf(stderr, "bench: cannot write %s\n", path);
	return f;
}

struct bench {
	const char *out;
	struct ds_model *m;
	struct ds_backend be;
	struct ds_cuda_ctx *c;
	double copy_bw; /* bytes/s, read + write */
	char dev[128];
	int next_block;
};

/* ---- copy roofline ---- */

static int bench_copy(struct bench *b)
{
	size_t n = (size_t)2 << 30;
	void *src, *dst;
	CK(cudaMalloc(&src, n));
	CK(cudaMalloc(&dst, n));
	CK(cudaMemset(src, 1, n));
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	double t[20];
	for (int i = -3; i < 20; i++) {
		CK(cudaEventRecord(e0, 0));
		CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, 0));
		CK(cudaEventRecord(e1, 0));
		CK(cudaEventSynchronize(e1));
		float ms;
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (i >= 0)
			t[i] = ms * 1e-3;
	}
	double s = median(t, 20);
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
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	return 0;
}

/* ---- decode step ---- */

static size_t decode_weight_bytes(const struct ds_model_config *c, int B)
{
	size_t h = (size_t)c->hidden, qd = (size_t)ds_model_q_dim(c);
	size_t kvd = (size_t)ds_model_kv_dim(c), f = (size_t)c->ffn;
	size_t layer = (qd + 2 * kvd) * h + h * qd + 3 * f * h + 2 * h;
	return 2 * (layer * c->n_layer + (size_t)c->vocab_size * h + h + (size_t)B * h);
}

static size_t kv_bytes(const struct ds_model_config *c, int B, int ctx)
{
	return (size_t)B * ctx * c->n_layer * 2 * ds_model_kv_dim(c) * 2;
}

/* Times one forward of B decode rows at position ctx (KV holds random values). */
static int decode_time(struct bench *b, enum ds_path path, int B, int ctx, int reps, double *out_s)
{
	int nb = (ctx + 1 + BS - 1) / BS;
	struct ds_fwd_seq *ss = calloc((size_t)B, sizeof(*ss));
	int32_t *blocks = malloc((size_t)B * nb * 4), *tok = malloc((size_t)B * 4);
	struct ds_fwd_row *rows = malloc((size_t)B * sizeof(*rows));
	for (int i = 0; i < B; i++) {
		for (int j = 0; j < nb; j++)
			blocks[i * nb + j] = (i * nb + j) % b->be.n_blocks;
		tok[i] = (int32_t)(ds_hash3(B, ctx, i) % (uint64_t)b->m->cfg.vocab_size);
		ss[i] = (struct ds_fwd_seq){
		    tok + i, 1, ctx, blocks + (size_t)i * nb, nb, false, {0.0f, 0, 1.0f, 1}};
	}
	struct ds_fwd_batch fb = {path, ss, B, rows, NULL};
	struct ds_err err;
	double *t = malloc((size_t)reps * sizeof(double));
	int rc = 0;
	for (int i = -3; i < reps && rc == 0; i++) {
		double t0 = now_s();
		if (ds_backend_forward(&b->be, &fb, &err) != DS_OK) {
			fprintf(stderr, "decode B=%d ctx=%d: %s\n", B, ctx, err.msg);
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

static int bench_decode(struct bench *b)
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
	printf("%6s %6s %10s %10s %10s %8s %8s\n", "batch", "ctx", "roof_ms", "fast_ms", "ref_ms",
	       "fast/roof", "ref/fast");
	int first = 1;
	for (size_t ci = 0; ci < DS_ARRAY_LEN(ctxs); ci++)
		for (size_t bi = 0; bi < DS_ARRAY_LEN(batches); bi++) {
			int B = batches[bi], ctx = ctxs[ci];
			double tf = 0, tr = 0;
			if (decode_time(b, DS_PATH_FAST, B, ctx, 15, &tf) ||
			    decode_time(b, DS_PATH_REF, B, ctx, 7, &tr))
				return 1;
			double bytes =
			    (double)decode_weight_bytes(c, B) + (double)kv_bytes(c, B, ctx + 1);
			double roof = bytes / b->copy_bw;
			printf("%6d %6d %10.3f %10.3f %10.3f %7.1f%% %8.2f\n", B, ctx, roof * 1e3,
			       tf * 1e3, tr * 1e3, 100.0 * roof / tf, tr / tf);
			fprintf(f,
			        "%s  {\"batch\": %d, \"ctx\": %d, \"bytes\": %.0f, "
			        "\"roofline_ms\": %.4f, "
			        "\"fast_ms\": %.4f, \"ref_ms\": %.4f, "
			        "\"fast_fraction_of_roofline\": %.4f, "
			        "\"ref_over_fast\": %.3f, \"fast_tokens_per_s\": %.1f}",
			        first ? "" : ",\n", B, ctx, bytes, roof * 1e3, tf * 1e3, tr * 1e3,
			        roof / tf, tr / tf, B / tf);
			first = 0;
			fflush(stdout);
		}
	fprintf(f, "\n]}\n");
	fclose(f);
	return 0;
}

/* ---- reference GEMM vs cuBLASLt ---- */

/* ref: 0 = cuBLASLt (fast path), 1 = reference (wgmma), 2 = the older mma.sync kernel */
static int time_gemm(struct bench *b, int ref, const uint16_t *A, const uint16_t *W, float *C,
                     int M, int N, int K, double *out_s)
{
	struct ds_cuda_ctx *c = b->c;
	struct ds_err err;
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	int reps = M >= 2048 ? 10 : 30;
	double *t = malloc((size_t)reps * sizeof(double));
	for (int i = -2; i < reps; i++) {
		CK(cudaEventRecord(e0, c->stream));
		enum ds_status rv = DS_OK;
		if (ref == 2) {
			if (ds_k_gemm_mma(A, W, C, M, N, K, c->stream) != cudaSuccess)
				rv = ds_errf(&err, DS_ERR_DEVICE, "mma gemm launch failed");
		} else {
			rv = ref ? ds_cuda_ref_ops.gemm(c, A, W, C, M, N, K, &err)
			         : ds_cuda_fast_ops.gemm(c, A, W, C, M, N, K, &err);
		}
		if (rv != DS_OK) {
			fprintf(stderr, "gemm %d %d %d: %s\n", M, N, K, err.msg);
			return 1;
		}
		CK(cudaEventRecord(e1, c->stream));
		CK(cudaEventSynchronize(e1));
		float ms;
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (i >= 0)
			t[i] = ms * 1e-3;
	}
	*out_s = median(t, reps);
	free(t);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	return 0;
}

/* One variant of the reference GEMM (kernels/gemm_ref*.cu), timed like time_gemm. A variant
 * whose launch is refused returns 2 (reported, the error cleared) so the others still run;
 * any other CUDA error returns 1. */
static int time_gemm_variant(struct bench *b, int v, const uint16_t *A, const uint16_t *W, float *C,
                             int M, int N, int K, double *out_s)
{
	cudaStream_t st = b->c->stream;
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	int reps = M >= 2048 ? 10 : 30;
	double t[30];
	for (int i = -2; i < reps; i++) {
		CK(cudaEventRecord(e0, st));
		cudaError_t le = ds_k_gemm_ref_variant(v, A, W, C, M, N, K, st);
		if (le != cudaSuccess) {
			fprintf(stderr, "gemm variant %d (%s) at %dx%dx%d: %s\n", v,
			        ds_k_gemm_ref_variant_name(v), M, N, K, cudaGetErrorString(le));
			(void)cudaGetLastError();
			CK(cudaEventRecord(e1, st)); /* a sticky error stops the run here */
			CK(cudaEventSynchronize(e1));
			cudaEventDestroy(e0);
			cudaEventDestroy(e1);
			return 2;
		}
		CK(cudaEventRecord(e1, st));
		CK(cudaEventSynchronize(e1));
		float ms;
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (i >= 0)
			t[i] = ms * 1e-3;
	}
	*out_s = median(t, reps);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	return 0;
}

/* Rows 0 and M-1 of C (M, N) into h (2 N floats). */
static int gemm_probe_rows(const float *C, int M, int N, float *h)
{
	CK(cudaDeviceSynchronize());
	CK(cudaMemcpy(h, C, (size_t)N * 4, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(h + N, C + (size_t)(M - 1) * N, (size_t)N * 4, cudaMemcpyDeviceToHost));
	return 0;
}

/* Largest |x - y| / (|y| + 1e-3 * max |y|) over n values: a sanity check of a variant
 * against variant 0 (the tested original), small (~1e-6) when the variant is right. */
static double gemm_rel_diff(const float *x, const float *y, size_t n)
{
	double ymax = 0, worst = 0;
	for (size_t i = 0; i < n; i++)
		ymax = fmax(ymax, fabs((double)y[i]));
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)x[i] - y[i]) / (fabs((double)y[i]) + 1e-3 * ymax + 1e-30);
		if (!(d <= worst)) /* NaN counts as worst */
			worst = isnan(d) ? INFINITY : d;
	}
	return worst;
}

/* use[v] from BENCH_GEMM_VARIANTS (e.g. "0,1,2"; unset or "all": every variant). Variant 0
 * (the baseline of the bit and difference checks) is always used. */
static void gemm_variants_wanted(bool *use, int nv)
{
	const char *e = getenv("BENCH_GEMM_VARIANTS");
	bool all = !e || !*e || strcmp(e, "all") == 0;
	for (int v = 0; v < nv; v++)
		use[v] = all || v == 0;
	for (const char *p = e; !all && p && *p;) {
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p)
			break;
		if (v >= 0 && v < nv)
			use[v] = true;
		p = *end == ',' ? end + 1 : end;
	}
}

/* A number for the JSON output: NaN / inf (a variant whose launch was refused) as -1. */
static double json_num(double x)
{
	return isfinite(x) ? x : -1.0;
}

static int bench_gemm(struct bench *b)
{
	const struct ds_model_config *c = &b->m->cfg;
	int H = c->hidden, qd = ds_model_q_dim(c), kvd = ds_model_kv_dim(c), F = c->ffn;
	struct {
		const char *name;
		int N, K;
	} shapes[] = {
	    {"qkv_proj", qd + 2 * kvd, H}, {"o_proj", H, qd},
	    {"gate_up_proj", 2 * F, H},    {"down_proj", H, F},
	    {"lm_head", c->vocab_size, H},
	};
	enum { NV = DS_K_GEMM_REF_N_VARIANTS };
	int Ms[] = {1, 16, 64, 512, 2048, 8192};
	bool use[NV];
	gemm_variants_wanted(use, NV);
	struct ds_ref_gemm_table tab;
	struct ds_err terr;
	if (ds_ref_gemm_table_init(&tab, getenv(DS_REF_GEMM_TABLE_ENV), NV, &terr) != DS_OK) {
		fprintf(stderr, "%s\n", terr.msg);
		return 1;
	}
	size_t maxA = (size_t)8192 * F, maxW = (size_t)c->vocab_size * H;
	size_t maxC = (size_t)8192 * c->vocab_size;
	size_t maxN = (size_t)c->vocab_size > (size_t)2 * F ? (size_t)c->vocab_size : (size_t)2 * F;
	uint16_t *A, *W;
	float *C, *C2;
	CK(cudaMalloc((void **)&A, maxA * 2));
	CK(cudaMalloc((void **)&W, maxW * 2));
	CK(cudaMalloc((void **)&C, maxC * 4));
	CK(cudaMalloc((void **)&C2, maxN * 4));
	CK(ds_k_synth_fill(A, maxA, 0, 1, 2, 1.0f, 0.0f, 0));
	CK(ds_k_synth_fill(W, maxW, 0, 3, 4, 0.02f, 0.0f, 0));
	CK(cudaDeviceSynchronize());
	FILE *f = json_open(b->out, "gemm");
	if (!f)
		return 1;
	fprintf(f,
	        "{\"bench\": \"gemm\", \"device\": \"%s\", \"ref\": \"the reference path's GEMM "
	        "(refpath/cuda_ref.c: variant per (N, K) from its table)\", \"mma_sync\": \"older "
	        "reference kernel, mma.sync 128x128x32\", \"variants\": [",
	        b->dev);
	for (int v = 0; v < NV; v++)
		if (use[v])
			fprintf(f, "%s\"%s\"", v ? ", " : "", ds_k_gemm_ref_variant_name(v));
	fprintf(f, "], \"baseline\": \"fast path GEMM: own GEMV for M <= 4, else cuBLASLt "
	           "(heuristic top-8 autotuned for M <= 256); keys cublas_* hold it\", "
	           "\"variant_keys\": \"per point, variants[v]: ms, TFLOPs, over_cublas_speed "
	           "(cublas_ms / ms), W_GBps (bytes of W over the time), rel_diff_v0 (rows 0 and "
	           "M-1 vs variant 0), bits_eq_v0\", ");
	printf("GEMM C = A . W^T (bf16 in, fp32 out): reference (wgmma) vs fast (GEMV for M <= 4, "
	       "else cuBLASLt autotuned); vN = reference variant N over fast (speed ratio)\n");
	for (int v = 0; v < NV; v++)
		printf("  v%d = %s%s\n", v, ds_k_gemm_ref_variant_name(v),
		       use[v] ? "" : " (skipped: BENCH_GEMM_VARIANTS)");
	CK(ds_k_gemm_mma_setup());
	printf("reference path's table (%s=%s):", DS_REF_GEMM_TABLE_ENV,
	       getenv(DS_REF_GEMM_TABLE_ENV) ? getenv(DS_REF_GEMM_TABLE_ENV) : "");
	for (size_t si = 0; si < DS_ARRAY_LEN(shapes); si++)
		printf(" %s v%d", shapes[si].name,
		       ds_ref_gemm_table_variant(&tab, shapes[si].N, shapes[si].K));
	printf("\n");
	fprintf(f, "\"ref_table\": {");
	for (size_t si = 0; si < DS_ARRAY_LEN(shapes); si++)
		fprintf(f, "%s\"%s\": %d", si ? ", " : "", shapes[si].name,
		        ds_ref_gemm_table_variant(&tab, shapes[si].N, shapes[si].K));
	fprintf(f, "}, \"resident_ctas\": [");
	for (int v = 0; v < NV; v++) {
		int ctas = 0;
		if (ds_k_gemm_ref_variant_resident(v, &ctas) != cudaSuccess) {
			(void)cudaGetLastError();
			ctas = -1;
		}
		printf("  v%d: K splits %d, %d CTAs resident at once\n", v,
		       ds_k_gemm_ref_variant_splits(v), ctas);
		fprintf(f, "%s%d", v ? ", " : "", ctas);
	}
	fprintf(f, "], \"points\": [\n");
	printf("%-13s %6s %7s %6s %9s %9s %9s %7s", "shape", "M", "N", "K", "ref_TF/s", "mma_TF/s",
	       "fast_TF/s", "ref/fst");
	for (int v = 0; v < NV; v++)
		if (use[v])
			printf("  v%d/fast", v);
	printf("  (worst rel diff vs v0)\n");
	float *h0 = malloc(maxN * 2 * 4), *hv = malloc(maxN * 2 * 4);
	int first = 1, rc = 1;
	for (size_t si = 0; si < DS_ARRAY_LEN(shapes); si++)
		for (size_t mi = 0; mi < DS_ARRAY_LEN(Ms); mi++) {
			int M = Ms[mi], N = shapes[si].N, K = shapes[si].K;
			double tr, tc, tm, tv[NV], rd[NV];
			int eq[NV];
			if (time_gemm(b, 1, A, W, C, M, N, K, &tr) ||
			    time_gemm(b, 0, A, W, C, M, N, K, &tc) ||
			    time_gemm(b, 2, A, W, C, M, N, K, &tm))
				goto out;
			for (int v = 0; v < NV; v++) {
				if (!use[v])
					continue;
				int vr = time_gemm_variant(b, v, A, W, C, M, N, K, &tv[v]);
				if (vr == 2 && v > 0) { /* refused: NaN below, the others go on */
					tv[v] = rd[v] = NAN;
					eq[v] = 0;
					continue;
				}
				if (vr || gemm_probe_rows(C, M, N, v ? hv : h0))
					goto out;
				rd[v] = v ? gemm_rel_diff(hv, h0, (size_t)N * 2) : 0.0;
				eq[v] = v ? memcmp(hv, h0, (size_t)N * 2 * 4) == 0 : 1;
			}
			double fl = 2.0 * M * (double)N * K, worst = 0;
			printf("%-13s %6d %7d %6d %9.1f %9.1f %9.1f %7.2f", shapes[si].name, M, N,
			       K, fl / tr / 1e12, fl / tm / 1e12, fl / tc / 1e12, tc / tr);
			for (int v = 0; v < NV; v++) {
				if (!use[v])
					continue;
				if (isnan(tv[v])) {
					printf(" %8s", "refused");
					continue;
				}
				printf(" %8.2f", tc / tv[v]);
				worst = rd[v] > worst || isnan(rd[v]) ? rd[v] : worst;
			}
			printf("  (%.1e)%s\n", worst, worst > 1e-3 ? "  WRONG VARIANT OUTPUT" : "");
			double wb = 2.0 * (double)N * K; /* bytes of W streamed */
			if (M <= 64) {
				printf("%-13s %6s  W GB/s: ref %.0f, fast %.0f;", "", "", wb / tr / 1e9,
				       wb / tc / 1e9);
				for (int v = 0; v < NV; v++)
					if (use[v])
						printf(" v%d %.0f", v, wb / tv[v] / 1e9);
				printf("\n");
			}
			fprintf(f,
			        "%s  {\"shape\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d, "
			        "\"ref_ms\": %.5f, "
			        "\"mma_sync_ms\": %.5f, \"cublas_ms\": %.5f, \"ref_TFLOPs\": %.2f, "
			        "\"mma_sync_TFLOPs\": %.2f, \"cublas_TFLOPs\": %.2f, "
			        "\"ref_over_cublas_speed\": %.3f, \"ref_W_GBps\": %.1f, "
			        "\"cublas_W_GBps\": %.1f, \"variants\": [",
			        first ? "" : ",\n", shapes[si].name, M, N, K, tr * 1e3, tm * 1e3,
			        tc * 1e3, fl / tr / 1e12, fl / tm / 1e12, fl / tc / 1e12, tc / tr,
			        wb / tr / 1e9, wb / tc / 1e9);
			for (int v = 0; v < NV; v++)
				if (use[v])
					fprintf(
					    f,
					    "%s{\"v\": %d, \"name\": \"%s\", \"ms\": %.5f, "
					    "\"TFLOPs\": "
					    "%.2f, "
					    "\"over_cublas_speed\": %.3f, \"W_GBps\": %.1f, "
					    "\"rel_diff_v0\": %.3g, \"bits_eq_v0\": %s}",
					    v ? ", " : "", v, ds_k_gemm_ref_variant_name(v),
					    json_num(tv[v] * 1e3), json_num(fl / tv[v] / 1e12),
					    json_num(tc / tv[v]), json_num(wb / tv[v] / 1e9),
					    isfinite(rd[v]) ? rd[v] : 1e30,
					    eq[v] ? "true" : "false");
			fprintf(f, "]}");
			first = 0;
			fflush(stdout);
		}
	fprintf(f, "\n], \"row0_invariance_M1_vs_M2048\": {");
	/* row 0 of the product at M = 1 and at M = 2048, for both GEMMs and every variant */
	struct ds_err err;
	float *r1 = malloc(maxN * 4), *r2 = malloc(maxN * 4);
	static const int inv_shapes[] = {0, 1, 3}; /* the narrow ones: qkv, o_proj, down_proj */
	int first_key = 1;
	for (size_t ii = 0; ii < DS_ARRAY_LEN(inv_shapes); ii++) {
		int si = inv_shapes[ii], N = shapes[si].N, K = shapes[si].K;
		for (int ref = 0; ref < 2 + NV; ref++) {
			if (ref >= 2 && !use[ref - 2])
				continue;
			const struct ds_cuda_path_ops *ops =
			    ref == 1 ? &ds_cuda_ref_ops : &ds_cuda_fast_ops;
			if (ref >= 2) {
				cudaError_t e1 =
				    ds_k_gemm_ref_variant(ref - 2, A, W, C2, 1, N, K, b->c->stream);
				cudaError_t e2 = ds_k_gemm_ref_variant(ref - 2, A, W, C, 2048, N, K,
				                                       b->c->stream);
				if (e1 != cudaSuccess || e2 != cudaSuccess) {
					(void)cudaGetLastError();
					printf("%s %s: launch refused\n",
					       ds_k_gemm_ref_variant_name(ref - 2), shapes[si].name);
					continue;
				}
			} else if (ops->gemm(b->c, A, W, C2, 1, N, K, &err) != DS_OK ||
			           ops->gemm(b->c, A, W, C, 2048, N, K, &err) != DS_OK) {
				fprintf(stderr, "gemm invariance: %s\n", err.msg);
				goto out2;
			}
			CK(cudaStreamSynchronize(b->c->stream));
			CK(cudaMemcpy(r1, C2, (size_t)N * 4, cudaMemcpyDeviceToHost));
			CK(cudaMemcpy(r2, C, (size_t)N * 4, cudaMemcpyDeviceToHost));
			int same = memcmp(r1, r2, (size_t)N * 4) == 0;
			char key[64];
			if (ref >= 2)
				snprintf(key, sizeof(key), "%s",
				         ds_k_gemm_ref_variant_name(ref - 2));
			else
				snprintf(key, sizeof(key), "%s", ref ? "ref" : "cublas");
			printf("%s %s: row 0 at M=1 %s row 0 at M=2048\n", key, shapes[si].name,
			       same ? "==" : "!=");
			fprintf(f, "%s\"%s_%s\": %s", first_key ? "" : ", ", key,
			        shapes[si].name, same ? "true" : "false");
			first_key = 0;
		}
	}
	fprintf(f, "}}\n");
	rc = 0;
out2:
	free(r1);
	free(r2);
out:
	fclose(f);
	free(h0);
	free(hv);
	cudaFree(A);
	cudaFree(W);
	cudaFree(C);
	cudaFree(C2);
	return rc;
}

/* ---- attention bandwidth ---- */

static int bench_attn(struct bench *b)
{
	struct ds_cuda_ctx *c = b->c;
	const struct ds_model_config *cfg = &b->m->cfg;
	struct {
		int B, ctx;
	} pts[] = {{1, 8192}, {8, 2048}, {64, 2048}, {256, 2048}, {64, 512}, {1, 512}, {32, 512}};
	FILE *f = json_open(b->out, "attn");
	if (!f)
		return 1;
	fprintf(f,
	        "{\"bench\": \"attn\", \"device\": \"%s\", \"copy_bandwidth_GBps\": %.1f, "
	        "\"points\": [\n",
	        b->dev, b->copy_bw / 1e9);
	printf("decode attention, one layer (KV bytes read / time vs copy bandwidth); fast = the\n"
	       "fast path's choice (attn_decode.cu unless DS_FAST_ATTN=old), old = attn.cu's fast\n"
	       "kernel at `split`\n");
	printf("%5s %6s %6s %10s %10s %10s %8s %8s %8s\n", "batch", "ctx", "split", "fast_GB/s",
	       "old_GB/s", "ref_GB/s", "fast/roof", "ref/roof", "old/fast");
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (size_t pi = 0; pi < DS_ARRAY_LEN(pts); pi++) {
		int B = pts[pi].B, ctx = pts[pi].ctx, nb = (ctx + 1 + BS - 1) / BS;
		for (int i = 0; i < B; i++) {
			c->hm.ids[i] = 1;
			c->hm.pos[i] = ctx;
			c->hm.seq[i] = i;
			c->hm.bt_off[i] = i * nb;
			c->hm.out_tok[i] = i;
			for (int j = 0; j < nb; j++)
				c->hm.bt[i * nb + j] = (i * nb + j) % c->n_blocks;
		}
		struct ds_cuda_pass p = {B, B, B * nb, B, ctx};
		struct ds_err err;
		if (ds_cuda_meta_upload(c, &p, &err) != DS_OK) {
			fprintf(stderr, "attn: %s\n", err.msg);
			return 1;
		}
		CK(ds_k_synth_fill(c->q, (size_t)B * ds_model_q_dim(cfg), 0, 5, 6, 1.0f, 0.0f,
		                   c->stream));
		double tt[3]; /* fast, ref, old */
		int split = ds_cuda_fast_split(c, B, ctx + 1);
		for (int ref = 0; ref < 3; ref++) {
			double t[20];
			for (int i = -2; i < 20; i++) {
				CK(cudaEventRecord(e0, c->stream));
				enum ds_status rv = DS_OK;
				if (ref == 2)
					CK(ds_k_attn_fast(c->q, c->kv, ds_cuda_tokmeta(c), B,
					                  ds_cuda_dims(c), split, c->part, c->att,
					                  c->stream));
				else
					rv = ref ? ds_cuda_ref_ops.attention(c, &p, c->kv, 0, &err)
					         : ds_cuda_fast_ops.attention(c, &p, c->kv, split,
					                                      &err);
				if (rv != DS_OK) {
					fprintf(stderr, "attn: %s\n", err.msg);
					return 1;
				}
				CK(cudaEventRecord(e1, c->stream));
				CK(cudaEventSynchronize(e1));
				float ms;
				CK(cudaEventElapsedTime(&ms, e0, e1));
				if (i >= 0)
					t[i] = ms * 1e-3;
			}
			tt[ref] = median(t, 20);
		}
		double bytes = (double)B * (ctx + 1) * 2 * ds_model_kv_dim(cfg) * 2;
		printf("%5d %6d %6d %10.0f %10.0f %10.0f %7.1f%% %7.1f%% %8.2f\n", B, ctx, split,
		       bytes / tt[0] / 1e9, bytes / tt[2] / 1e9, bytes / tt[1] / 1e9,
		       100 * bytes / tt[0] / b->copy_bw, 100 * bytes / tt[1] / b->copy_bw,
		       tt[2] / tt[0]);
		fprintf(f,
		        "%s  {\"batch\": %d, \"ctx\": %d, \"fast_split\": %d, \"kv_bytes\": %.0f, "
		        "\"fast_us\": %.2f, \"ref_us\": %.2f, \"fast_fraction_of_roofline\": %.4f, "
		        "\"ref_fraction_of_roofline\": %.4f, \"old_us\": %.2f, "
		        "\"old_fraction_of_roofline\": %.4f}",
		        pi ? ",\n" : "", B, ctx, split, bytes, tt[0] * 1e6, tt[1] * 1e6,
		        bytes / tt[0] / b->copy_bw, bytes / tt[1] / b->copy_bw, tt[2] * 1e6,
		        bytes / tt[2] / b->copy_bw);
	}
	fprintf(f, "\n]}\n");
	fclose(f);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	return 0;
}

/* ---- reference attention: CUDA-core kernel (attn.cu) vs tensor-core kernel (attn_mma.cu) ---- */

/* Section "attnref": one layer's reference attention on the llama3-8b shapes, as:
 *  old   ds_k_attn_ref (CUDA cores, split as refpath/cuda_ref.c picked it before the mma kernel),
 *  walk  ds_k_attn_ref_mma with a walk plan (round 1: one CTA walks each row group's tiles),
 *  new   ds_k_attn_ref_mma_split in auto mode (what the reference path runs eagerly: tiles
 *        spread over CTAs when few groups have long contexts, else the walk),
 *  split the same forced to split, graph: auto on the grid of a graph captured for max_pos.
 * Points: a verify pass of 16 windows x 32 rows at context 512, 2048 and 2055 (unaligned
 * windows: three row groups each instead of two), a 2048-row prefill chunk (positions
 * 0..2047), decode at batch 64 (context 512), and few-row passes: decode at batch 1 and 8 at
 * context 512, 2048 and 8192 and one window of 32 at context 2048. Also: KV GB/s of new (each
 * sequence's KV read once), whether walk, new, split and graph gave the same bytes (they
 * must), and the largest |old - new| (the kernels round differently; a large value means a
 * broken kernel). */
static int bench_attn_ref(struct bench *b)
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
	           {"verify_g1_w32_ctx2048", 1, 32, 2016}};
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
	       "auto walk/split), split, graph (auto on a max_pos grid)\n");
	printf("%-24s %5s %9s %9s %9s %9s %9s %8s %8s %6s %5s %10s\n", "point", "rows", "old_us",
	       "walk_us", "new_us", "split_us", "graph_us", "new/old", "new/walk", "newGBs",
	       "same", "max|o-n|");
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	size_t qd = (size_t)ds_model_q_dim(cfg);
	enum { NK = 5 };
	uint16_t *o[NK];
	for (int k = 0; k < NK; k++)
		o[k] = malloc((size_t)c->cap_tokens * qd * 2);
	int32_t *plans[3];
	for (int k = 0; k < 3; k++)
		plans[k] = malloc(DS_K_ATTN_MMA_PLAN_INTS(c->cap_tokens) * 4);
	int rc = 0;
	for (size_t pi = 0; pi < DS_ARRAY_LEN(pts) && rc == 0; pi++) {
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
		struct ds_cuda_pass p = {T, S, S * nb, 0, maxp};
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
		for (int k = 0; k < NK; k++) {
			const int32_t *hp = k == 1 ? plans[0] : k == 3 ? plans[2] : plans[1];
			CK(cudaMemcpyAsync(c->dm.aplan, hp, DS_K_ATTN_MMA_PLAN_INTS(T) * 4,
			                   cudaMemcpyHostToDevice, c->stream));
			double t[20];
			for (int i = -2; i < 20; i++) {
				CK(cudaEventRecord(e0, c->stream));
				if (k == 0)
					CK(ds_k_attn_ref(c->q, c->kv, ds_cuda_tokmeta(c), T, d,
					                 split, c->part, c->att, c->stream));
				else if (k == 1)
					CK(ds_k_attn_ref_mma(c->q, c->kv, ds_cuda_tokmeta(c),
					                     c->dm.aplan, T, d, c->att, c->stream));
				else
					CK(ds_k_attn_ref_mma_split(
					    c->q, c->kv, ds_cuda_tokmeta(c), c->dm.aplan, T, d,
					    k == 4 ? cfg->max_pos - 1 : maxp, c->part,
					    k == 4 || hp[1] != 0, c->att, c->stream));
				CK(cudaEventRecord(e1, c->stream));
				CK(cudaEventSynchronize(e1));
				float ms;
				CK(cudaEventElapsedTime(&ms, e0, e1));
				if (i >= 0)
					t[i] = ms * 1e-3;
			}
			tt[k] = median(t, 20);
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
		printf("%-24s %5d %9.1f %9.1f %9.1f %9.1f %9.1f %8.3f %8.3f %6.0f %5s %10.4g\n",
		       pts[pi].name, T, tt[0] * 1e6, tt[1] * 1e6, tt[2] * 1e6, tt[3] * 1e6,
		       tt[4] * 1e6, tt[2] / tt[0], tt[2] / tt[1], kv_bytes / tt[2] / 1e9,
		       same ? "yes" : "NO", maxd);
		fprintf(f,
		        "%s  {\"point\": \"%s\", \"rows\": %d, \"sequences\": %d, \"pos0\": %d, "
		        "\"old_split\": %d, \"new_mode\": %d, \"old_us\": %.2f, \"walk_us\": %.2f, "
		        "\"new_us\": %.2f, \"split_us\": %.2f, \"graph_us\": %.2f, "
		        "\"new_over_old\": %.4f, \"new_over_walk\": %.4f, \"new_kv_gbs\": %.1f, "
		        "\"new_tflops\": %.2f, \"modes_same_bytes\": %s, "
		        "\"max_abs_diff_old_new\": %.6g}",
		        pi ? ",\n" : "", pts[pi].name, T, S, pts[pi].pos0, split, plans[1][1],
		        tt[0] * 1e6, tt[1] * 1e6, tt[2] * 1e6, tt[3] * 1e6, tt[4] * 1e6,
		        tt[2] / tt[0], tt[2] / tt[1], kv_bytes / tt[2] / 1e9,
		        flops / tt[2] / 1e12, same ? "true" : "false", maxd);
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
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	return rc;
}

/* ---- verify pass vs W decode steps ---- */

static int bench_verify(struct bench *b)
{
	int G = 16, W = 32, ctx = 512, nb = (ctx + W + BS) / BS;
	struct ds_fwd_seq ss[16];
	int32_t *blocks = malloc((size_t)G * nb * 4), *tok = malloc((size_t)G * W * 4);
	struct ds_fwd_row *rows = malloc((size_t)G * W * sizeof(*rows));
	for (int i = 0; i < G; i++) {
		for (int j = 0; j < nb; j++)
			blocks[i * nb + j] = (i * nb + j) % b->be.n_blocks;
		for (int j = 0; j < W; j++)
			tok[i * W + j] =
			    (int32_t)(ds_hash3(i, j, 9) % (uint64_t)b->m->cfg.vocab_size);
		ss[i] = (struct ds_fwd_seq){
		    tok + i * W, W, ctx, blocks + (size_t)i * nb, nb, true, {0.0f, 0, 1.0f, 1}};
	}
	struct ds_fwd_batch fb = {DS_PATH_REF, ss, G, rows, NULL};
	struct ds_err err;
	double t[10];
	for (int i = -2; i < 10; i++) {
		double t0 = now_s();
		if (ds_backend_forward(&b->be, &fb, &err) != DS_OK) {
			fprintf(stderr, "verify: %s\n", err.msg);
			return 1;
		}
		if (i >= 0)
			t[i] = now_s() - t0;
	}
	double tv = median(t, 10), td = 0;
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
		        "\"verify_over_W_steps\": %.4f, \"graph_captured\": false}\n",
		        b->dev, G, W, ctx, tv * 1e3, td * 1e3, W * td * 1e3, tv / (W * td));
		fclose(f);
	}
	free(blocks);
	free(tok);
	free(rows);
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
    "gemm_gate_up", "silu_mul", "gemm_down", "lm_head",  "sample"};

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

static double gemm_bytes(int M, int N, int K)
{
	return 2.0 * N * K + 2.0 * M * K + 4.0 * M * N;
}

/* One fast decode pass of B rows run eagerly, the same launches as ds_cuda_pass_run, with an
 * event pair around each launch. The device metadata is the last decode pass's (same B). */
static int prof_pass(struct bench *b, int B, int ctx, struct prof *pr)
{
	struct ds_cuda_ctx *c = b->c;
	const struct ds_model_config *cfg = &c->cfg;
	int H = cfg->hidden, qd = ds_model_q_dim(cfg), kvd = ds_model_kv_dim(cfg), F = cfg->ffn;
	int V = cfg->vocab_size, nl = cfg->n_layer;
	cudaStream_t st = c->stream;
	struct ds_k_tokmeta tm = ds_cuda_tokmeta(c);
	struct ds_k_dims d = ds_cuda_dims(c);
	struct ds_cuda_pass p = {B, B, 0, B, ctx};
	int n_split = ds_cuda_fast_split(c, B, cfg->max_pos);
	struct ds_err err;
	pr->n = 0;
	PROF_OP(pr, PROF_EMBED, CK(ds_k_embed(c->tok_embd, c->dm.ids, B, H, c->x, st)));
	for (int l = 0; l < nl; l++) {
		const struct ds_cuda_layer *L = &c->layers[l];
		uint16_t *kv = c->kv + (size_t)l * c->kv_layer_elems;
		PROF_OP(pr, PROF_RMSNORM,
		        CK(ds_k_rmsnorm(c->x, l ? c->dlt : NULL, NULL, L->attn_norm, B, H,
		                        cfg->rms_eps, c->h, st)));
		PROF_OP(pr, PROF_QKV,
		        PROF_CK_RV(ds_cuda_fast_ops.gemm(c, c->h, L->wqkv, c->big, B, qd + 2 * kvd,
		                                         H, &err)));
		PROF_OP(pr, PROF_ROPE,
		        CK(ds_k_qkv_rope(c->big, L->bqkv, L->q_norm, L->k_norm, c->rope_cs, tm, B,
		                         d, c->q, kv, st)));
		PROF_OP(pr, PROF_ATTN,
		        PROF_CK_RV(ds_cuda_fast_ops.attention(c, &p, kv, n_split, &err)));
		PROF_OP(
		    pr, PROF_O,
		    PROF_CK_RV(ds_cuda_fast_ops.gemm(c, c->att, L->wo, c->dlt, B, H, qd, &err)));
		PROF_OP(pr, PROF_RMSNORM,
		        CK(ds_k_rmsnorm(c->x, c->dlt, NULL, L->ffn_norm, B, H, cfg->rms_eps, c->h,
		                        st)));
		PROF_OP(
		    pr, PROF_GU,
		    PROF_CK_RV(ds_cuda_fast_ops.gemm(c, c->h, L->w_gu, c->big, B, 2 * F, H, &err)));
		PROF_OP(pr, PROF_SILU, CK(ds_k_silu_mul(c->big, B, F, c->h, st)));
		PROF_OP(
		    pr, PROF_DOWN,
		    PROF_CK_RV(ds_cuda_fast_ops.gemm(c, c->h, L->w_down, c->dlt, B, H, F, &err)));
	}
	PROF_OP(pr, PROF_RMSNORM,
	        CK(ds_k_rmsnorm(c->x, c->dlt, c->dm.out_tok, c->out_norm, B, H, cfg->rms_eps, c->h,
	                        st)));
	PROF_OP(pr, PROF_LM_HEAD,
	        PROF_CK_RV(ds_cuda_fast_ops.gemm(c, c->h, c->lm_head, c->logits, B, V, H, &err)));
	PROF_OP(pr, PROF_SAMPLE, CK(ds_k_sample(c->logits, B, V, c->dm.sp, c->dm.out, st)));
	CK(cudaStreamSynchronize(st));
	memset(pr->bytes, 0, sizeof(pr->bytes));
	pr->bytes[PROF_EMBED] = (2.0 + 4.0) * B * H;
	pr->bytes[PROF_RMSNORM] = (2.0 * nl + 1) * (2.0 * H + B * (4.0 * 3 * H + 2.0 * H));
	pr->bytes[PROF_QKV] = nl * gemm_bytes(B, qd + 2 * kvd, H);
	pr->bytes[PROF_ROPE] = nl * (double)B * (4.0 * (qd + 2 * kvd) + 2.0 * (qd + 2 * kvd));
	pr->bytes[PROF_ATTN] = nl * ((double)B * (ctx + 1) * kvd * 2 * 2 + 4.0 * B * qd);
	pr->bytes[PROF_O] = nl * gemm_bytes(B, H, qd);
	pr->bytes[PROF_GU] = nl * gemm_bytes(B, 2 * F, H);
	pr->bytes[PROF_SILU] = nl * (double)B * (4.0 * 2 * F + 2.0 * F);
	pr->bytes[PROF_DOWN] = nl * gemm_bytes(B, H, F);
	pr->bytes[PROF_LM_HEAD] = gemm_bytes(B, V, H);
	pr->bytes[PROF_SAMPLE] = 4.0 * B * V;
	return 0;
}

/* Median time of replaying bucket bi's captured decode graph (ms). */
static int prof_graph_ms(struct bench *b, int bi, double *ms_out)
{
	struct ds_cuda_ctx *c = b->c;
	if (!c->fast.graph[bi]) {
		*ms_out = -1;
		return 0;
	}
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	double t[20];
	for (int i = -3; i < 20; i++) {
		CK(cudaEventRecord(e0, c->stream));
		CK(cudaGraphLaunch(c->fast.graph[bi], c->stream));
		CK(cudaEventRecord(e1, c->stream));
		CK(cudaEventSynchronize(e1));
		float ms;
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (i >= 0)
			t[i] = ms;
	}
	*ms_out = median(t, 20);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	return 0;
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

static int bench_profile(struct bench *b)
{
	struct ds_cuda_ctx *c = b->c;
	const struct ds_model_config *cfg = &b->m->cfg;
	int batches[] = {1, 8, 32}, ctx = 512;
	struct prof *pr = calloc(1, sizeof(*pr));
	if (!pr)
		return 1;
	for (int i = 0; i < 2 * PROF_MAX_LAUNCH; i++)
		CK(cudaEventCreate(&pr->ev[i]));
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
		int B = batches[bi_], bi = 0;
		while ((1 << bi) < B)
			bi++;
		double tf;
		/* warms the GEMM choices, captures the bucket's graph, leaves this B's metadata */
		if (decode_time(b, DS_PATH_FAST, B, ctx, 5, &tf))
			return 1;
		double graph_ms, op_ms[PROF_N_OPS], best_sum = INFINITY;
		int op_n[PROF_N_OPS];
		if (prof_graph_ms(b, bi, &graph_ms))
			return 1;
		for (int rep = 0; rep < 5; rep++) { /* keep the repetition with the least total */
			if (prof_pass(b, B, ctx, pr))
				return 1;
			double ms[PROF_N_OPS] = {0}, sum = 0;
			int n[PROF_N_OPS] = {0};
			for (int i = 0; i < pr->n; i++) {
				float e;
				CK(cudaEventElapsedTime(&e, pr->ev[2 * i], pr->ev[2 * i + 1]));
				ms[pr->op[i]] += e;
				n[pr->op[i]]++;
				sum += e;
			}
			if (sum < best_sum) {
				best_sum = sum;
				memcpy(op_ms, ms, sizeof(ms));
				memcpy(op_n, n, sizeof(n));
			}
		}
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
	printf("fast-path GEMM choices (ms at the timed M, L2 flushed; inf = not a candidate)\n");
	printf("  %4s %4s %7s %6s %-26s %9s %9s %9s %8s\n", "Mb", "M", "N", "K", "winner", "skinny",
	       "gemv", "cublasLt", "GB/s");
	for (int i = 0; i < c->fast.n_picks; i++) {
		const struct ds_cuda_pick *pk = &c->fast.picks[i];
		char name[64] = "cublasLt";
		if (pk->kind == DS_CUDA_GEMM_GEMV)
			snprintf(name, sizeof(name), "gemv");
		else if (pk->kind == DS_CUDA_GEMM_SKINNY)
			ds_k_skinny_describe(pk->M_timed, pk->variant, name, sizeof(name));
		double gbps = gemm_bytes(pk->M_timed, pk->N, pk->K) / (pk->ms_best * 1e-3) / 1e9;
		printf("  %4d %4d %7d %6d %-26s %9.4f %9.4f %9.4f %8.0f\n", pk->mb, pk->M_timed,
		       pk->N, pk->K, name, pk->ms_skinny, pk->ms_gemv, pk->ms_lt, gbps);
		fprintf(
		    f,
		    "%s  {\"m_bucket\": %d, \"M\": %d, \"N\": %d, \"K\": %d, \"winner\": \"%s\", ",
		    i ? ",\n" : "", pk->mb, pk->M_timed, pk->N, pk->K, name);
		json_ms(f, "skinny_ms", pk->ms_skinny);
		fprintf(f, ", ");
		json_ms(f, "gemv_ms", pk->ms_gemv);
		fprintf(f, ", ");
		json_ms(f, "cublaslt_ms", pk->ms_lt);
		fprintf(f, ", \"best_GBps\": %.1f}", gbps);
	}
	fprintf(f, "\n]}\n");
	fclose(f);
	for (int i = 0; i < 2 * PROF_MAX_LAUNCH; i++)
		cudaEventDestroy(pr->ev[i]);
	free(pr);
	return 0;
}

/* ---- end to end through the engine ---- */

struct e2e_cfg {
	const char *name;
	enum ds_mode mode;
	int det_pct;
	bool early; /* early verification at low-margin tokens (the engine's default) */
	int group;  /* G: windows per reference pass */
};

static int env_int(const char *k, int def)
{
	const char *v = getenv(k);
	return v && *v ? atoi(v) : def;
}

/* The workload: n_req requests submitted at once, prompts of prompt_min..prompt_max random
 * tokens, n_out tokens each (ignore_eos). */
struct e2e_load {
	int n_req, prompt_min, prompt_max, n_out;
};

static int e2e_run(struct bench *b, const struct e2e_cfg *cfg, const struct e2e_load *ld,
                   double *secs, uint64_t *tokens, struct ds_engine_stats *st)
{
	int n_req = ld->n_req, prompt_max = ld->prompt_max, n_out = ld->n_out;
	struct ds_backend be;
	struct ds_engine *e = NULL;
	struct ds_err err;
	int rc = 1;
	if (ds_backend_cuda_init(&be, b->m, 0, &err) != DS_OK) {
		fprintf(stderr, "e2e: %s\n", err.msg);
		return 1;
	}
	struct ds_engine_opts o;
	ds_engine_opts_default(&o);
	o.mode = cfg->mode;
	o.group = cfg->group;
	o.kv_blocks = 256 * ((prompt_max + n_out) / 16 + 2) + 256;
	o.max_step_tokens = 2048;
	o.max_queue = n_req + 16;
	if (ds_engine_init(&e, &be, &o, &err) != DS_OK) {
		fprintf(stderr, "e2e: %s\n", err.msg);
		goto out;
	}
	int32_t *prompt = malloc((size_t)prompt_max * sizeof(int32_t));
	uint64_t h = 12345;
	for (int i = 0; i < n_req; i++) {
		int n = ld->prompt_min +
		        (int)((h = ds_mix64(h)) % (uint64_t)(prompt_max - ld->prompt_min + 1));
		for (int k = 0; k < n; k++)
			prompt[k] = (int32_t)((h = ds_mix64(h)) % (uint64_t)b->m->cfg.vocab_size);
		bool det = cfg->mode != DS_MODE_FAST &&
		           (int)(ds_mix64(777 ^ (uint64_t)i) % 100) < cfg->det_pct;
		struct ds_request_params p = {
		    .prompt = prompt,
		    .n_prompt = n,
		    .max_tokens = n_out,
		    .sampling = {.temperature = 0.7f, .top_p = 1.0f, .seed = ds_mix64((uint64_t)i)},
		    .has_seed = true,
		    .ignore_eos = true,
		    .deterministic = det,
		    .early_verify = cfg->early,
		};
		uint64_t id;
		if (ds_engine_submit(e, &p, &id, &err) != DS_OK) {
			fprintf(stderr, "e2e submit: %s\n", err.msg);
			free(prompt);
			goto out;
		}
	}
	free(prompt);
	double t0 = now_s();
	while (!ds_engine_idle(e)) {
		if (ds_engine_step(e, &err) != DS_OK) {
			fprintf(stderr, "e2e step: %s\n", err.msg);
			goto out;
		}
		struct ds_event *ev;
		while ((ev = ds_engine_poll(e)) != NULL) {
			if (ev->final && ev->finish == DS_FINISH_ERROR) {
				fprintf(stderr, "e2e request failed: %s\n", ev->error);
				ds_event_free(ev);
				goto out;
			}
			ds_event_free(ev);
		}
	}
	*secs = now_s() - t0;
	ds_engine_get_stats(e, st);
	*tokens = st->tokens[0] + st->tokens[1];
	rc = 0;
out:
	ds_engine_free(e);
	ds_backend_free(&be);
	return rc;
}

/* Is name in the comma-separated list (NULL or empty: everything)? */
static bool e2e_selected(const char *list, const char *name)
{
	if (!list || !*list)
		return true;
	size_t n = strlen(name);
	for (const char *p = list; *p;) {
		const char *q = strchr(p, ',');
		size_t len = q ? (size_t)(q - p) : strlen(p);
		if (len == n && strncmp(p, name, n) == 0)
			return true;
		if (!q)
			break;
		p = q + 1;
	}
	return false;
}

/* Every configuration builds its own backend and engine (weights generated again, cuBLASLt
 * autotuned again, graphs captured again, all inside the timed run as a server would pay them
 * once at start-up). A short untimed warm-up run of the fast path and of the reference path
 * comes first, so that the process-wide one-time costs (CUDA's lazy module loading of our
 * kernels and of every cuBLASLt kernel the autotuner tries) do not land on whichever mode runs
 * first. E2E_REQUESTS / E2E_PROMPT_MIN / E2E_PROMPT / E2E_OUT set the workload, E2E_CONFIGS
 * (comma-separated names) picks the configurations. */
static int bench_e2e(struct bench *b)
{
	struct e2e_load ld;
	ld.n_req = env_int("E2E_REQUESTS", 256);
	ld.prompt_max = env_int("E2E_PROMPT", 256);
	ld.prompt_min = env_int("E2E_PROMPT_MIN", ld.prompt_max / 2);
	ld.n_out = env_int("E2E_OUT", 128);
	if (ld.n_req < 1 || ld.prompt_min < 1 || ld.prompt_max < ld.prompt_min || ld.n_out < 1) {
		fprintf(stderr, "e2e: bad workload %d requests, prompts %d..%d, %d out\n", ld.n_req,
		        ld.prompt_min, ld.prompt_max, ld.n_out);
		return 1;
	}
	const char *pick = getenv("E2E_CONFIGS");
	const struct e2e_cfg cfgs[] = {
	    {"fast", DS_MODE_FAST, 0, true, 16},
	    {"dvr-0%", DS_MODE_DVR, 0, true, 16},
	    {"dvr-10%", DS_MODE_DVR, 10, true, 16},
	    {"dvr-50%", DS_MODE_DVR, 50, true, 16},
	    {"dvr-100%", DS_MODE_DVR, 100, true, 16},
	    {"invariant", DS_MODE_INVARIANT, 100, true, 16},
	    {"dvr-10%-full-windows", DS_MODE_DVR, 10, false, 16},
	    {"dvr-50%-full-windows", DS_MODE_DVR, 50, false, 16},
	    {"dvr-10%-G64", DS_MODE_DVR, 10, true, 64},
	    {"dvr-50%-G64", DS_MODE_DVR, 50, true, 64},
	    {"dvr-100%-G64", DS_MODE_DVR, 100, true, 64},
	    {"dvr-10%-G64-full-windows", DS_MODE_DVR, 10, false, 64},
	    {"dvr-50%-G64-full-windows", DS_MODE_DVR, 50, false, 64},
	};
	/* warm-up: untimed, small */
	const struct e2e_cfg warm[] = {{"warm-fast", DS_MODE_FAST, 0, true, 16},
	                               {"warm-dvr", DS_MODE_DVR, 100, true, 16}};
	struct e2e_load wl = {32, ld.prompt_min, ld.prompt_max, 16};
	for (size_t i = 0; i < DS_ARRAY_LEN(warm); i++) {
		double secs = 0;
		uint64_t tok = 0;
		struct ds_engine_stats st;
		memset(&st, 0, sizeof(st));
		if (e2e_run(b, &warm[i], &wl, &secs, &tok, &st))
			return 1;
		printf("warm-up %s: %.2f s (not recorded)\n", warm[i].name, secs);
	}
	FILE *f = json_open(b->out, "e2e");
	if (!f)
		return 1;
	fprintf(f,
	        "{\"bench\": \"e2e\", \"device\": \"%s\", \"model\": \"llama3-8b (synthetic)\", "
	        "\"requests\": %d, \"prompt_tokens\": \"%d..%d\", \"output_tokens\": %d, "
	        "\"temperature\": 0.7, \"W\": 32, \"max_step_tokens\": 2048, \"max_running\": 256, "
	        "\"warmed_up\": true, \"runs\": [\n",
	        b->dev, ld.n_req, ld.prompt_min, ld.prompt_max, ld.n_out);
	printf("end to end, llama3-8b, %d requests, prompts %d..%d, %d out (engine, manual steps)\n",
	       ld.n_req, ld.prompt_min, ld.prompt_max, ld.n_out);
	printf("%-21s %8s %10s %8s %8s %9s %10s %6s %6s %9s\n", "mode", "secs", "tok/s", "vs fast",
	       "windows", "rollbacks", "recomputed", "steps", "refcal", "margin");
	double fast_tps = 0;
	int n_done = 0;
	for (size_t i = 0; i < DS_ARRAY_LEN(cfgs); i++) {
		if (i > 0 && !e2e_selected(pick, cfgs[i].name))
			continue; /* fast always runs: it is the baseline */
		double secs = 0;
		uint64_t tok = 0;
		struct ds_engine_stats st;
		memset(&st, 0, sizeof(st));
		if (e2e_run(b, &cfgs[i], &ld, &secs, &tok, &st))
			return 1;
		double tps = (double)tok / secs;
		if (i == 0)
			fast_tps = tps;
		printf("%-21s %8.2f %10.0f %8.3f %8llu %9llu %10llu %6llu %6llu %9.3g\n", cfgs[i].name,
		       secs, tps, tps / fast_tps, (unsigned long long)st.windows,
		       (unsigned long long)st.rollbacks, (unsigned long long)st.recomputed,
		       (unsigned long long)st.steps, (unsigned long long)st.ref_forward_calls,
		       (double)st.margin_threshold);
		fprintf(f,
		        "%s  {\"mode\": \"%s\", \"deterministic_pct\": %d, \"early_verify\": %s, "
		        "\"secs\": %.3f, "
		        "\"tokens\": %llu, \"tokens_per_s\": %.1f, \"ratio_to_fast\": %.4f, "
		        "\"windows\": %llu, \"rollbacks\": %llu, \"rolled_back\": %llu, "
		        "\"recomputed\": %llu, \"preemptions\": %llu, \"ref_calls\": %llu, "
		        "\"fast_calls\": %llu, \"G\": %d, \"steps\": %llu, \"verify_passes\": %llu, "
		        "\"margin_threshold\": %.6g, \"margin_delta\": %.6g}",
		        n_done ? ",\n" : "", cfgs[i].name, cfgs[i].det_pct,
		        cfgs[i].early ? "true" : "false", secs, (unsigned long long)tok, tps,
		        tps / fast_tps, (unsigned long long)st.windows,
		        (unsigned long long)st.rollbacks, (unsigned long long)st.rolled_back,
		        (unsigned long long)st.recomputed, (unsigned long long)st.preemptions,
		        (unsigned long long)st.ref_forward_calls,
		        (unsigned long long)st.fast_forward_calls, cfgs[i].group,
		        (unsigned long long)st.steps, (unsigned long long)st.verify_passes,
		        (double)st.margin_threshold, (double)st.margin_delta);
		n_done++;
		fflush(stdout);
		fflush(f);
	}
	fprintf(f, "\n]}\n");
	fclose(f);
	return 0;
}

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
		fprintf(stderr, "usage: bench_gpu OUTDIR [gemm attn decode verify profile e2e]\n");
		return 2;
	}
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
	ds_backend_free(&b.be);
	if (!rc && want(argc, argv, "e2e"))
		rc = bench_e2e(&b);
	ds_model_free(b.m);
	return rc;
}
