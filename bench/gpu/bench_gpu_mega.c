/* bench_gpu_mega.c - the fused decode layers (kernels/mega.cu) against the kernel-per-op step in
 * the same call (both replayed from CUDA graphs), and where the fused kernel's time goes: the
 * durations between the %globaltimer stamps each block takes at the end of each phase. */
#include "bench_gpu.h"

/* The intervals the bench reports: what happens between stamps `from` and `to` of a layer
 * (mega.cu's kernel body; kernels.h, DS_K_MEGA_STAMPS). */
#define N_PHASES 13
static const struct {
	int from, to;
	const char *name;
} phases[N_PHASES] = {{0, 1, "norm (q/k/v input)"},
                      {1, 2, "q/k/v GEMV + RoPE, K/V"},
                      {2, 3, "barrier"},
                      {3, 12, "attention: dot products"},
                      {12, 13, "  partials stored, counted"},
                      {13, 4, "  merge, further items"},
                      {4, 5, "barrier"},
                      {5, 6, "o GEMV + residual"},
                      {6, 7, "barrier"},
                      {7, 8, "norm + gate/up GEMV + SiLU"},
                      {8, 9, "barrier"},
                      {9, 10, "down GEMV + residual"},
                      {10, 11, "barrier"}};

/* Mean duration (us) of each phase over blocks and layers, and the mean over layers of the
 * slowest block's, from a trace of nb blocks and nl layers; *total_us: first stamp to last. */
static void trace_phases(const unsigned long long *tr, int nb, int nl, double *mean_us,
                         double *max_us, double *total_us)
{
	unsigned long long t0 = ~0ull, t1 = 0;
	for (int k = 0; k < N_PHASES; k++) {
		double sum = 0, sum_max = 0;
		for (int l = 0; l < nl; l++) {
			double mx = 0;
			for (int b = 0; b < nb; b++) {
				const unsigned long long *s =
				    tr + ((size_t)b * nl + l) * DS_K_MEGA_STAMPS;
				double d =
				    ((double)s[phases[k].to] - (double)s[phases[k].from]) * 1e-3;
				sum += d;
				mx = d > mx ? d : mx;
			}
			sum_max += mx;
		}
		mean_us[k] = sum / ((double)nb * nl);
		max_us[k] = sum_max / nl;
	}
	for (int b = 0; b < nb; b++) {
		const unsigned long long *s0 = tr + (size_t)b * nl * DS_K_MEGA_STAMPS;
		const unsigned long long *s1 = s0 + (size_t)(nl - 1) * DS_K_MEGA_STAMPS;
		t0 = s0[0] < t0 ? s0[0] : t0;
		int k1 = phases[N_PHASES - 1].to; /* the last layer's last barrier */
		t1 = s1[k1] > t1 ? s1[k1] : t1;
	}
	*total_us = (double)(t1 - t0) * 1e-3;
}

/* The settings the bench also times the fused kernel under (kernels.h, struct ds_k_mega):
 * evict-first weights, attention splits (0: auto), the producer's attention gate (-1: off). The
 * first is the kernel as it was before these settings. */
static const struct {
	bool wef;
	int nz, gate;
	bool late;
} settings[] = {{false, 0, -1, false}, {true, 0, -1, false}, {true, 0, 8, false},
                {true, 0, 16, false},  {true, 0, 24, false}, {true, 0, 16, true},
                {true, 0, 32, true},   {true, 0, 64, true},  {true, 8, 16, false}};

/* One point: the kernel-per-op step (tuned), the fused step under the backend's settings and
 * under each of settings, and a traced fused step; prints and writes its JSON (first: no comma
 * before it). */
static int mega_point(struct bench *b, FILE *js, bool first, int B, int ctx,
                      unsigned long long *dtr, unsigned long long *tr)
{
	struct ds_cuda_ctx *c = b->c;
	struct ds_cuda_fast *f = &c->fast;
	const struct ds_model_config *cfg = &b->m->cfg;
	int nl = cfg->n_layer, nb = c->n_sm;
	size_t n_stamps = (size_t)nb * nl * DS_K_MEGA_STAMPS;
	double t_op = 0, t_mega = 0, total = 0, t_set[DS_ARRAY_LEN(settings)];
	double mean_us[N_PHASES], max_us[N_PHASES];
	int nz0 = f->mega_nz, gate0 = f->mega_gate;
	bool late0 = f->mega_gate_late;
	bool wef0 = f->mega_wef;
	/* the kernel-per-op step, tuned over its own configurations */
	ds_cuda_fast_graphs_reset(c);
	f->graph_tune = true;
	f->mega_tune = false;
	f->mega = false;
	int rc = decode_time(b, DS_PATH_FAST, B, ctx, 15, &t_op);
	/* the fused layers and LM head (the rest of the step: the embedding, sampling) */
	ds_cuda_fast_graphs_reset(c);
	f->graph_tune = false;
	f->mega = true;
	if (rc == 0)
		rc = decode_time(b, DS_PATH_FAST, B, ctx, 15, &t_mega);
	for (size_t i = 0; i < DS_ARRAY_LEN(settings) && rc == 0; i++) {
		ds_cuda_fast_graphs_reset(c);
		f->mega_wef = settings[i].wef;
		f->mega_nz = settings[i].nz;
		f->mega_gate = settings[i].gate;
		f->mega_gate_late = settings[i].late;
		rc = decode_time(b, DS_PATH_FAST, B, ctx, 15, &t_set[i]);
	}
	f->mega_wef = wef0;
	f->mega_nz = nz0;
	f->mega_gate = gate0;
	f->mega_gate_late = late0;
	/* traced (a graph of its own: the trace pointer is a kernel argument) */
	ds_cuda_fast_graphs_reset(c);
	f->mega_trace = dtr;
	double t_tr = 0;
	if (rc == 0)
		rc = decode_time(b, DS_PATH_FAST, B, ctx, 3, &t_tr);
	f->mega_trace = NULL;
	if (rc == 0 &&
	    cudaMemcpy(tr, dtr, n_stamps * sizeof(*tr), cudaMemcpyDeviceToHost) != cudaSuccess)
		rc = 1;
	if (rc != 0)
		return rc;
	trace_phases(tr, nb, nl, mean_us, max_us, &total);
	double roof =
	    ((double)decode_weight_bytes(cfg, B) + (double)kv_bytes(cfg, B, ctx + 1)) / b->copy_bw;
	int slots = ds_cuda_fast_mega_slots(c, B);
	printf(
	    "batch %d, ctx %d: fused %.3f ms (%.1f%% of roofline; ring of %d slots), kernel per "
	    "op %.3f ms (%.1f%%): fused/per-op %.3f; traced step %.3f ms, fused kernel %.3f ms\n",
	    B, ctx, t_mega * 1e3, 100 * roof / t_mega, slots, t_op * 1e3, 100 * roof / t_op,
	    t_mega / t_op, t_tr * 1e3, total * 1e-3);
	printf(
	    "  settings (ef: weights evict-first; nz: attention splits, 0 auto; g: attention gate, "
	    "-1 off, late: opens after the partials), ms (ratio to the first):");
	for (size_t i = 0; i < DS_ARRAY_LEN(settings); i++)
		printf(" ef%d/nz%d/g%d%s %.3f (%.3f)", (int)settings[i].wef, settings[i].nz,
		       settings[i].gate, settings[i].late ? "late" : "", t_set[i] * 1e3,
		       t_set[i] / t_set[0]);
	printf("\n  %-28s %10s %10s\n", "phase (per layer)", "mean_us", "slowest_us");
	for (int k = 0; k < N_PHASES; k++)
		printf("  %-28s %10.2f %10.2f\n", phases[k].name, mean_us[k], max_us[k]);
	fprintf(js,
	        "%s  {\"batch\": %d, \"ctx\": %d, \"ring_slots\": %d, \"fused_ms\": %.4f, "
	        "\"per_op_ms\": %.4f, "
	        "\"roofline_ms\": %.4f, \"fused_over_per_op\": %.4f, \"kernel_us\": %.1f, "
	        "\"weights_evict_first\": %s, \"attn_splits\": %d, \"att_gate\": %d, "
	        "\"att_gate_late\": %s, \"settings\": [",
	        first ? "" : ",\n", B, ctx, slots, t_mega * 1e3, t_op * 1e3, roof * 1e3,
	        t_mega / t_op, total, wef0 ? "true" : "false", nz0, gate0,
	        late0 ? "true" : "false");
	for (size_t i = 0; i < DS_ARRAY_LEN(settings); i++)
		fprintf(js,
		        "%s{\"weights_evict_first\": %s, \"attn_splits\": %d, \"att_gate\": %d, "
		        "\"att_gate_late\": %s, \"ms\": %.4f}",
		        i ? ", " : "", settings[i].wef ? "true" : "false", settings[i].nz,
		        settings[i].gate, settings[i].late ? "true" : "false", t_set[i] * 1e3);
	fprintf(js, "], \"phases\": [");
	for (int k = 0; k < N_PHASES; k++)
		fprintf(js, "%s{\"name\": \"%s\", \"mean_us\": %.3f, \"slowest_us\": %.3f}",
		        k ? ", " : "", phases[k].name, mean_us[k], max_us[k]);
	fprintf(js, "]}");
	fflush(stdout);
	return 0;
}

int bench_mega(struct bench *b)
{
	struct ds_cuda_ctx *c = b->c;
	struct ds_cuda_fast *f = &c->fast;
	const struct ds_model_config *cfg = &b->m->cfg;
	if (!f->mega_ok) {
		printf("mega: the model does not qualify for the fused decode layers\n");
		return 0;
	}
	static const struct {
		int ctx, batch;
	} points[] = {{512, 1}, {512, 2}, {512, 4}, {512, 8}, {2048, 1}, {2048, 8}};
	int nl = cfg->n_layer, nb = c->n_sm;
	size_t n_stamps = (size_t)nb * nl * DS_K_MEGA_STAMPS;
	unsigned long long *dtr = NULL, *tr = malloc(n_stamps * sizeof(*tr));
	if (!tr || cudaMalloc((void **)&dtr, n_stamps * sizeof(*dtr)) != cudaSuccess) {
		free(tr);
		return 1;
	}
	FILE *js = json_open(b->out, "mega");
	if (!js) {
		cudaFree(dtr);
		free(tr);
		return 1;
	}
	fprintf(js,
	        "{\"bench\": \"mega\", \"model\": \"llama3-8b (synthetic, generated on device)\", "
	        "\"device\": \"%s\", \"blocks\": %d, \"points\": [\n",
	        b->dev, nb);
	printf(
	    "fused decode layers vs kernel per op, llama3-8b, %d blocks (graph replays, median)\n",
	    nb);
	bool tune0 = f->graph_tune, mega0 = f->mega, mtune0 = f->mega_tune;
	int rc = 0;
	bool first = true;
	for (size_t i = 0; i < DS_ARRAY_LEN(points) && rc == 0; i++) {
		if (!point_picked("MEGA_POINTS", points[i].batch, points[i].ctx))
			continue;
		rc = mega_point(b, js, first, points[i].batch, points[i].ctx, dtr, tr);
		first = false;
	}
	fprintf(js, "\n]}\n");
	fclose(js);
	f->graph_tune = tune0;
	f->mega = mega0;
	f->mega_tune = mtune0;
	ds_cuda_fast_graphs_reset(c);
	cudaFree(dtr);
	free(tr);
	return rc;
}
