/* bench_gpu_gemm.c - the gemm section of bench_gpu: the reference GEMM (every variant) against
 * the fast path's GEMM on the llama3-8b shapes, and row invariance (bench_gpu.h). */
#include "bench_gpu.h"

#include <math.h>

/* One GEMM launch for event_median: ref (0 = cuBLASLt, the fast path; 1 = reference, wgmma;
 * 2 = the older mma.sync kernel) or, v >= 0, reference variant v. */
struct gemm_run {
	struct ds_cuda_ctx *c;
	int ref, v;
	const uint16_t *A, *W;
	float *C;
	int M, N, K;
};

static int gemm_run(void *arg)
{
	struct gemm_run *r = arg;
	struct ds_cuda_ctx *c = r->c;
	struct ds_err err;
	enum ds_status rv = DS_OK;
	if (r->v >= 0) {
		cudaError_t le =
		    ds_k_gemm_ref_variant(r->v, r->A, r->W, r->C, r->M, r->N, r->K, c->stream);
		if (le == cudaSuccess)
			return 0;
		fprintf(stderr, "gemm variant %d (%s) at %dx%dx%d: %s\n", r->v,
		        ds_k_gemm_ref_variant_name(r->v), r->M, r->N, r->K, cudaGetErrorString(le));
		(void)cudaGetLastError();
		CK(cudaStreamSynchronize(c->stream)); /* a sticky error stops the run here */
		return 2;
	}
	if (r->ref == 2) {
		if (ds_k_gemm_mma(r->A, r->W, r->C, r->M, r->N, r->K, c->stream) != cudaSuccess)
			rv = ds_errf(&err, DS_ERR_DEVICE, "mma gemm launch failed");
	} else {
		rv = r->ref ? ds_cuda_ref_ops.gemm(c, r->A, r->W, r->C, r->M, r->N, r->K, &err)
		            : ds_cuda_fast_ops.gemm(c, r->A, r->W, r->C, r->M, r->N, r->K, &err);
	}
	if (rv != DS_OK) {
		fprintf(stderr, "gemm %d %d %d: %s\n", r->M, r->N, r->K, err.msg);
		return 1;
	}
	return 0;
}

/* ref: 0 = cuBLASLt (fast path), 1 = reference (wgmma), 2 = the older mma.sync kernel */
static int time_gemm(struct bench *b, int ref, const uint16_t *A, const uint16_t *W, float *C,
                     int M, int N, int K, double *out_s)
{
	struct gemm_run r = {b->c, ref, -1, A, W, C, M, N, K};
	return event_median(b->c->stream, 2, M >= 2048 ? 10 : 30, gemm_run, &r, out_s);
}

/* One variant of the reference GEMM (kernels/gemm_ref*.cu), timed like time_gemm. A variant
 * whose launch is refused returns 2 (reported, the error cleared) so the others still run;
 * any other CUDA error returns 1. */
static int time_gemm_variant(struct bench *b, int v, const uint16_t *A, const uint16_t *W, float *C,
                             int M, int N, int K, double *out_s)
{
	struct gemm_run r = {b->c, 1, v, A, W, C, M, N, K};
	return event_median(b->c->stream, 2, M >= 2048 ? 10 : 30, gemm_run, &r, out_s);
}

/* Rows 0 and M-1 of C (M, N) into h (2 N floats). */
static int gemm_probe_rows(const float *C, int M, int N, float *h)
{
	CK(cudaDeviceSynchronize());
	CK(cudaMemcpy(h, C, (size_t)N * 4, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(h + N, C + (size_t)(M - 1) * N, (size_t)N * 4, cudaMemcpyDeviceToHost));
	return 0;
}

/* The largest split count of a reference variant (kernels/gemm_ref_splitk.cu). */
#define DS_GEMM_MAX_SPLITS 4

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

/* Whether point (shape, M) is wanted: BENCH_GEMM_POINTS unset, or a comma list of name:M
 * (e.g. "down_proj:256,o_proj:256") that names it (a profiler run on a few launches). */
static bool gemm_point_wanted(const char *shape, int M)
{
	const char *e = getenv("BENCH_GEMM_POINTS");
	if (!e || !*e)
		return true;
	char want[64];
	snprintf(want, sizeof(want), "%s:%d", shape, M);
	size_t n = strlen(want);
	for (const char *p = e; (p = strstr(p, want)) != NULL; p += n)
		if ((p == e || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
			return true;
	return false;
}

int bench_gemm(struct bench *b)
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
	int Ms[] = {1, 16, 64, 128, 256, 512, 2048, 8192}; /* 128, 256: decode / verify sizes */
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
	printf("  (worst rel diff vs v0; bits checked within each split count)\n");
	float *h0 = malloc(maxN * 2 * 4), *hv = malloc(maxN * 2 * 4);
	float *hs = malloc(maxN * 2 * 4 * (DS_GEMM_MAX_SPLITS + 1)); /* each family's first */
	int first = 1, rc = 1;
	if (!h0 || !hv || !hs) {
		fprintf(stderr, "bench gemm: out of host memory\n");
		goto out;
	}
	for (size_t si = 0; si < DS_ARRAY_LEN(shapes); si++)
		for (size_t mi = 0; mi < DS_ARRAY_LEN(Ms); mi++) {
			int M = Ms[mi], N = shapes[si].N, K = shapes[si].K;
			if (!gemm_point_wanted(shapes[si].name, M))
				continue;
			double tr, tc, tm, tv[NV], rd[NV];
			int eq[NV], fam_eq[NV], fam_first[DS_GEMM_MAX_SPLITS + 1];
			for (int q = 0; q <= DS_GEMM_MAX_SPLITS; q++)
				fam_first[q] = -1;
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
				/* the family's yardstick: variant 0, or the first variant run with
				 * this split count (its probe rows kept in hs) */
				int sv = ds_k_gemm_ref_variant_splits(v);
				if (sv == 1 || sv > DS_GEMM_MAX_SPLITS) {
					fam_eq[v] = sv == 1 && eq[v];
				} else if (fam_first[sv] < 0) {
					fam_first[sv] = v;
					memcpy(hs + (size_t)sv * N * 2, hv, (size_t)N * 2 * 4);
					fam_eq[v] = 1;
				} else {
					fam_eq[v] = memcmp(hv, hs + (size_t)sv * N * 2,
					                   (size_t)N * 2 * 4) == 0;
				}
			}
			double fl = 2.0 * M * (double)N * K, worst = 0;
			bool wrong = false;
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
				wrong = wrong || !fam_eq[v];
			}
			/* A variant must give its family's bits (variant 0's without split-K);
			 * across families the K sum is reordered, so only a gross difference is
			 * wrong. */
			printf("  (%.1e)%s\n", worst,
			       wrong || !(worst <= 1e-2) ? "  WRONG VARIANT OUTPUT" : "");
			double wb = 2.0 * (double)N * K; /* bytes of W streamed */
			if (M <= 256) {
				printf("%-13s %6s  W GB/s: ref %.0f, fast %.0f;", "", "",
				       wb / tr / 1e9, wb / tc / 1e9);
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
					fprintf(f,
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
					       ds_k_gemm_ref_variant_name(ref - 2),
					       shapes[si].name);
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
			fprintf(f, "%s\"%s_%s\": %s", first_key ? "" : ", ", key, shapes[si].name,
			        same ? "true" : "false");
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
	free(hs);
	cudaFree(A);
	cudaFree(W);
	cudaFree(C);
	cudaFree(C2);
	return rc;
}

/* ---- attention bandwidth ---- */

/* ---- l2pf: what an L2 prefetch of a weight buys the fast path's GEMM ---- */

struct pf_run {
	struct gemm_run g;
	void *flush;
	size_t flush_bytes;
	int mode; /* 0 cold, 1 prefetched (132 blocks), 2 prefetched evict-last, 3 one block, 4 warm
	           */
	size_t pf_bytes;
};

/* One timed run of pf_time: the mode's preparation, then the GEMM between e0 and e1 (us). */
static int pf_once(struct pf_run *r, cudaEvent_t e0, cudaEvent_t e1, double *us)
{
	struct ds_cuda_ctx *c = r->g.c;
	if (r->mode <= 3)
		CK(ds_k_l2_evict(r->flush, r->flush_bytes, c->stream));
	if (r->mode >= 1 && r->mode <= 3)
		CK(ds_k_l2_prefetch(r->g.W, r->pf_bytes, r->mode == 3 ? 1 : 132, 16384,
		                    r->mode == 2, c->stream));
	if (r->mode == 4 && gemm_run(&r->g) != 0)
		return 1;
	CK(cudaStreamSynchronize(c->stream));
	CK(cudaEventRecord(e0, c->stream));
	if (gemm_run(&r->g) != 0)
		return 1;
	CK(cudaEventRecord(e1, c->stream));
	CK(cudaEventSynchronize(e1));
	float ms;
	CK(cudaEventElapsedTime(&ms, e0, e1));
	*us = ms * 1e3;
	return 0;
}

/* Times the fast path's GEMM of r alone (events around it only; median of 15 after 2), after
 * the mode's preparation: L2 emptied by reading a scratch buffer (modes 0-3), the weight's first
 * pf_bytes prefetched and the stream synchronized (1-3), or the same GEMM run just before (4). */
static int pf_time(struct pf_run *r, double *out_us)
{
	double t[15];
	cudaEvent_t e0 = NULL, e1 = NULL;
	int rc = cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess;
	for (int i = -2; i < 15 && rc == 0; i++) {
		double us = 0;
		rc = pf_once(r, e0, e1, &us);
		if (i >= 0)
			t[i] = us;
	}
	if (e0)
		cudaEventDestroy(e0);
	if (e1)
		cudaEventDestroy(e1);
	if (rc == 0)
		*out_us = median(t, 15);
	return rc;
}

/* The GEMMs' rows of bench_l2pf for weight w (N x K) at M rows: both prefetch budgets. */
static int l2pf_shape(struct bench *b, FILE *f, int *written, const char *name, const uint16_t *W,
                      int N, int K, int M, const uint16_t *A, float *C, void *flush,
                      size_t flush_bytes)
{
	size_t wbytes = (size_t)N * K * 2;
	size_t budgets[] = {wbytes, DS_MIN(wbytes, (size_t)16 << 20)};
	for (size_t bi = 0; bi < 2; bi++) {
		if (bi == 1 && budgets[1] == budgets[0])
			continue;
		double us[5];
		for (int mode = 0; mode < 5; mode++) {
			struct pf_run r = {
			    {b->c, 0, -1, A, W, C, M, N, K}, flush, flush_bytes, mode, budgets[bi]};
			if (pf_time(&r, &us[mode]))
				return 1;
		}
		double mb = budgets[bi] / 1048576.0;
		printf("%5s %3d %6.1f %8.2f %8.2f %8.2f %8.2f %8.2f %9.3f\n", name, M, mb, us[0],
		       us[1], us[2], us[3], us[4], us[0] / us[1]);
		fprintf(f,
		        "%s  {\"gemm\": \"%s\", \"M\": %d, \"pf_MB\": %.1f, \"cold_us\": %.2f, "
		        "\"pf_us\": %.2f, \"pf_evict_last_us\": %.2f, \"pf_one_block_us\": %.2f, "
		        "\"warm_us\": %.2f}",
		        (*written)++ ? ",\n" : "", name, M, mb, us[0], us[1], us[2], us[3], us[4]);
	}
	return 0;
}

int bench_l2pf(struct bench *b)
{
	struct ds_cuda_ctx *c = b->c;
	const struct ds_model_config *cfg = &b->m->cfg;
	int H = cfg->hidden, qd = ds_model_q_dim(cfg), kvd = ds_model_kv_dim(cfg), F = cfg->ffn;
	const struct ds_cuda_layer *L = &c->layers[3];
	struct {
		const char *name;
		const uint16_t *W;
		int N, K;
	} shapes[] = {
	    {"o", L->wo, H, qd}, {"qkv", L->wqkv, qd + 2 * kvd, H}, {"down", L->w_down, H, F}};
	int Ms[] = {8, 32};
	size_t flush_bytes = (size_t)256 << 20;
	void *flush = NULL;
	uint16_t *A = NULL;
	float *C = NULL;
	FILE *f = NULL;
	int rc =
	    cudaMalloc(&flush, flush_bytes) != cudaSuccess ||
	    cudaMemset(flush, 1, flush_bytes) != cudaSuccess ||
	    cudaMalloc((void **)&A, (size_t)64 * F * 2) != cudaSuccess ||
	    cudaMalloc((void **)&C, (size_t)64 * 2 * F * 4) != cudaSuccess ||
	    ds_k_synth_fill(A, (size_t)64 * F, 0, 3, 4, 1.0f, 0.0f, c->stream) != cudaSuccess ||
	    !(f = json_open(b->out, "l2pf"));
	if (rc == 0) {
		fprintf(f, "{\"bench\": \"l2pf\", \"device\": \"%s\", \"points\": [\n", b->dev);
		printf(
		    "L2 prefetch of a weight before the fast path's GEMM (us, median of 15; cold = "
		    "L2\n");
		printf("emptied first; pf = the weight's first `pf MB` prefetched by 132 blocks, "
		       "pf_el\n");
		printf("with an evict-last policy, pf_1 by one block; warm = the same GEMM run "
		       "before)\n");
		printf("%5s %3s %6s %8s %8s %8s %8s %8s %9s\n", "gemm", "M", "pf_MB", "cold", "pf",
		       "pf_el", "pf_1", "warm", "cold/pf");
	}
	int written = 0;
	for (size_t si = 0; si < DS_ARRAY_LEN(shapes) && rc == 0; si++)
		for (size_t mi = 0; mi < DS_ARRAY_LEN(Ms) && rc == 0; mi++)
			rc = l2pf_shape(b, f, &written, shapes[si].name, shapes[si].W, shapes[si].N,
			                shapes[si].K, Ms[mi], A, C, flush, flush_bytes);
	if (f) {
		fprintf(f, "\n]}\n");
		fclose(f);
	}
	cudaFree(flush);
	cudaFree(A);
	cudaFree(C);
	return rc;
}

/* ---- stream: the streaming GEMM against the fast path's pick, back to back ---- */

/* A burst for event_median: the same GEMM shape on the weights of layers 0 .. n-1 in turn, so
 * each launch streams its weights from HBM (every llama3-8b weight matrix but o is larger than
 * half of L2). kind: 0, the fast path's pick (stream off); 1, the streaming GEMM. */
struct stream_burst {
	struct ds_cuda_ctx *c;
	const uint16_t *A;
	float *C;
	int M, N, K, which, n, kind, variant, pdl, diag;
};

static const uint16_t *stream_weight(const struct ds_cuda_ctx *c, int which, int l)
{
	const struct ds_cuda_layer *L = &c->layers[l];
	return which == 0 ? L->wqkv : which == 1 ? L->wo : which == 2 ? L->w_gu : L->w_down;
}

static int stream_burst_run(void *arg)
{
	struct stream_burst *r = arg;
	struct ds_cuda_ctx *c = r->c;
	for (int l = 0; l < r->n; l++) {
		const uint16_t *W = stream_weight(c, r->which, l);
		if (r->kind == 0) {
			struct ds_err err;
			if (ds_cuda_fast_ops.gemm(c, r->A, W, r->C, r->M, r->N, r->K, &err) !=
			    DS_OK) {
				fprintf(stderr, "stream bench: %s\n", err.msg);
				return 1;
			}
		} else {
			CK(ds_k_stream_gemm_diag(r->A, W, r->C, r->M, r->N, r->K, r->variant,
			                         c->n_sm, r->pdl, r->diag, c->stream));
		}
	}
	return 0;
}

/* Per GEMM us of 16 back-to-back GEMMs over 16 layers' weights (median of 7 bursts), for each
 * decode GEMM of llama3-8b at 1 and 8 rows: the fast path's pick (stream off; cuBLASLt, skinny
 * or GEMV as timed), then each streaming variant without PDL, with PDL (consecutive launches
 * overlap: the next one's weights flow during this one's tail), and its weight stream alone
 * (diag, PDL). GB/s = weight bytes / time. */
int bench_stream(struct bench *b)
{
	struct ds_cuda_ctx *c = b->c;
	const struct ds_model_config *cfg = &b->m->cfg;
	int H = cfg->hidden, qd = ds_model_q_dim(cfg), kvd = ds_model_kv_dim(cfg), F = cfg->ffn;
	struct {
		const char *name;
		int N, K;
	} shapes[] = {
	    {"qkv", qd + 2 * kvd, H}, {"o", H, qd}, {"gate_up", 2 * F, H}, {"down", H, F}};
	int Ms[] = {1, 8}, nl = DS_MIN(16, cfg->n_layer);
	uint16_t *A = NULL;
	float *C = NULL;
	FILE *f = NULL;
	int rc = cudaMalloc((void **)&A, (size_t)8 * F * 2) != cudaSuccess ||
	         cudaMalloc((void **)&C, (size_t)8 * 2 * F * 4) != cudaSuccess ||
	         ds_k_synth_fill(A, (size_t)8 * F, 0, 5, 6, 1.0f, 0.0f, c->stream) != cudaSuccess ||
	         !(f = json_open(b->out, "stream"));
	bool stream0 = c->fast.stream;
	c->fast.stream = false;
	if (rc == 0) {
		fprintf(f, "{\"bench\": \"stream\", \"device\": \"%s\", \"points\": [\n", b->dev);
		printf("streaming GEMM vs the fast path's pick: us per GEMM in bursts of %d over "
		       "layers' weights (GB/s)\n",
		       nl);
		printf("%8s %2s %16s", "gemm", "M", "pick");
		for (int v = 0; v < DS_K_STREAM_VARIANTS; v++)
			printf("  v%d: %16s %16s %16s", v, "plain", "pdl", "stream only");
		printf("\n");
	}
	int written = 0;
	for (size_t si = 0; si < DS_ARRAY_LEN(shapes) && rc == 0; si++)
		for (size_t mi = 0; mi < DS_ARRAY_LEN(Ms) && rc == 0; mi++) {
			int M = Ms[mi], N = shapes[si].N, K = shapes[si].K;
			double gb = (double)N * K * 2 / 1e9, s = 0;
			struct stream_burst r = {c, A, C, M, N, K, (int)si, nl, 0, 0, 0, 0};
			rc = event_median(c->stream, 2, 7, stream_burst_run, &r, &s);
			double pick = s / nl * 1e6;
			printf("%8s %2d %7.2f (%6.0f)", shapes[si].name, M, pick, gb / pick * 1e6);
			fprintf(
			    f, "%s  {\"gemm\": \"%s\", \"M\": %d, \"pick_us\": %.3f, \"stream\": [",
			    written++ ? ",\n" : "", shapes[si].name, M, pick);
			for (int v = 0; v < DS_K_STREAM_VARIANTS && rc == 0; v++) {
				double us[3];
				const int modes[3][2] = {{0, 0}, {1, 0}, {1, 1}}; /* pdl, diag */
				for (int k = 0; k < 3 && rc == 0; k++) {
					struct stream_burst q = {c, A, C,           M,
					                         N, K, (int)si,     nl,
					                         1, v, modes[k][0], modes[k][1]};
					rc =
					    event_median(c->stream, 2, 7, stream_burst_run, &q, &s);
					us[k] = s / nl * 1e6;
				}
				printf("  v%d: %7.2f (%6.0f) %7.2f (%6.0f) %7.2f (%6.0f)", v, us[0],
				       gb / us[0] * 1e6, us[1], gb / us[1] * 1e6, us[2],
				       gb / us[2] * 1e6);
				fprintf(f,
				        "%s{\"variant\": %d, \"plain_us\": %.3f, \"pdl_us\": %.3f, "
				        "\"stream_only_us\": %.3f}",
				        v ? ", " : "", v, us[0], us[1], us[2]);
			}
			printf("\n");
			fprintf(f, "]}");
		}
	c->fast.stream = stream0;
	if (f) {
		fprintf(f, "\n]}\n");
		fclose(f);
	}
	cudaFree(A);
	cudaFree(C);
	return rc;
}
