/* bench_gpu_sample.c - device sampling (kernels/sample.cu through ds_cuda_sample) at decode
 * batch sizes, for greedy, temperature (Gumbel-max), top-k and top-p rows: the fast path's
 * launch and the reference path's, on llama3-8b's vocabulary. The baseline is one read of the
 * batch's fp32 logits at the copy bandwidth measured in the same run; a top-k / top-p row
 * searches its logits in about 14 passes, so its ratio is expected to be tens. */
#include "bench_gpu.h"

#include <math.h>

struct sample_run {
	struct ds_cuda_ctx *c;
	bool fast;
	int R;
};

static int sample_run(void *arg)
{
	struct sample_run *r = arg;
	CK(ds_cuda_sample(r->c, r->fast, r->R, 0));
	return 0;
}

/* Median time (s) of ds_cuda_sample(fast) over R rows of c->logits, eager. */
static int sample_time(struct bench *b, bool fast, int R, double *out_s)
{
	struct sample_run r = {b->c, fast, R};
	return event_median(b->c->stream, 3, 15, sample_run, &r, out_s);
}

int bench_sample(struct bench *b)
{
	struct ds_cuda_ctx *c = b->c;
	int V = b->m->cfg.vocab_size;
	static const int rows[] = {1, 8, 32, 64, 256};
	static const struct {
		const char *name;
		float temperature, top_p;
		int top_k;
	} modes[] = {{"greedy", 0.0f, 1.0f, 0},
	             {"temp0.8", 0.8f, 1.0f, 0},
	             {"topk50", 0.8f, 1.0f, 50},
	             {"topp0.9", 0.8f, 0.9f, 0}};
	int rmax = rows[DS_ARRAY_LEN(rows) - 1];
	if (rmax > c->cap_rows)
		return 0;
	/* logits uniform in +-5.2 (sd 3), from a fixed xorshift stream */
	size_t n = (size_t)rmax * V;
	float *lg = malloc(n * sizeof(float));
	struct ds_k_sample_row *sp = calloc((size_t)rmax, sizeof(*sp));
	if (!lg || !sp) {
		free(lg);
		free(sp);
		return 1;
	}
	uint64_t x = 0x9e3779b97f4a7c15ull;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		lg[i] = (float)((double)(x >> 11) / 9007199254740992.0 * 10.4 - 5.2);
	}
	cudaError_t ce = cudaMemcpy(c->logits, lg, n * sizeof(float), cudaMemcpyHostToDevice);
	free(lg);
	if (ce != cudaSuccess) {
		free(sp);
		fprintf(stderr, "bench sample: %s\n", cudaGetErrorString(ce));
		return 1;
	}
	FILE *f = json_open(b->out, "sample");
	printf("device sampling, vocabulary %d (us; ratio to one read of the logits at the copy "
	       "bandwidth)\n%-8s %5s %10s %10s %9s %9s\n",
	       V, "mode", "rows", "fast_us", "ref_us", "fast/roof", "ref/roof");
	if (f)
		fprintf(f,
		        "{\"bench\": \"sample\", \"device\": \"%s\", \"vocab\": %d, "
		        "\"copy_GBps\": %.1f, \"points\": [",
		        b->dev, V, b->copy_bw / 1e9);
	int rc = 0;
	bool first = true;
	for (size_t mi = 0; mi < DS_ARRAY_LEN(modes) && rc == 0; mi++) {
		for (int r = 0; r < rmax; r++) {
			struct ds_k_sample_row row = {modes[mi].temperature, modes[mi].top_k,
			                              modes[mi].top_p,       0,
			                              1234u + (uint64_t)r,   100 + r};
			sp[r] = row;
		}
		if (cudaMemcpy(c->dm.sp, sp, (size_t)rmax * sizeof(*sp), cudaMemcpyHostToDevice) !=
		    cudaSuccess) {
			rc = 1;
			break;
		}
		for (size_t ri = 0; ri < DS_ARRAY_LEN(rows) && rc == 0; ri++) {
			int R = rows[ri];
			double tf = 0, tr = 0, roof = (double)R * V * 4 / b->copy_bw;
			rc = sample_time(b, true, R, &tf);
			if (rc == 0)
				rc = sample_time(b, false, R, &tr);
			if (rc != 0)
				break;
			printf("%-8s %5d %10.1f %10.1f %9.1f %9.1f\n", modes[mi].name, R, tf * 1e6,
			       tr * 1e6, tf / roof, tr / roof);
			if (f)
				fprintf(f,
				        "%s\n  {\"mode\": \"%s\", \"rows\": %d, \"fast_us\": %.2f, "
				        "\"ref_us\": %.2f, \"roof_us\": %.3f}",
				        first ? "" : ",", modes[mi].name, R, tf * 1e6, tr * 1e6,
				        roof * 1e6);
			first = false;
		}
	}
	if (f) {
		fprintf(f, "\n]}\n");
		fclose(f);
	}
	free(sp);
	return rc;
}
