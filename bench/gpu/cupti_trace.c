/* cupti_trace.c - a kernel timeline for any CUDA program, graph-launched kernels included, for
 * the GPU machine, which has no Nsight Systems: LD_PRELOAD=libdscupti.so CUPTI_TRACE=FILE prog.
 *
 * CUPTI's activity API records every kernel's start and end on the device clock; each completed
 * buffer is appended to FILE as one line a kernel:
 *   start_ns end_ns graph_id node_id grid_x grid_y grid_z block_x name
 * (graph_id 0: launched outside a graph; node_id: the kernel's node in that graph; names as the
 * compiler mangled them). Tracing adds a little time to each launch; kernel durations are the
 * device's own.
 *
 * Key decision: CUPTI's buffer callbacks carry no user pointer, so rather than keep a file handle
 * or a record list in a global, each completed buffer reopens FILE (its path from the
 * environment) for appending; the buffers are large, so that happens rarely. */
#include <cupti.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define TRACE_BUF_BYTES ((size_t)8 << 20)
#define TRACE_ALIGN 8

static void report(const char *what, CUptiResult r)
{
	const char *s = NULL;
	cuptiGetResultString(r, &s);
	fprintf(stderr, "cupti_trace: %s: %s\n", what, s ? s : "unknown error");
}

static void CUPTIAPI buffer_requested(uint8_t **buf, size_t *size, size_t *max_records)
{
	*buf = aligned_alloc(TRACE_ALIGN, TRACE_BUF_BYTES);
	*size = *buf ? TRACE_BUF_BYTES : 0;
	*max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size,
                                      size_t valid)
{
	(void)size;
	const char *path = getenv("CUPTI_TRACE");
	FILE *f = path ? fopen(path, "a") : NULL;
	if (!f && path)
		perror(path);
	CUpti_Activity *rec = NULL;
	while (f && cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
		if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
		    rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
			continue;
		const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
		fprintf(f, "%llu %llu %u %llu %d %d %d %d %s\n", (unsigned long long)k->start,
		        (unsigned long long)k->end, k->graphId, (unsigned long long)k->graphNodeId,
		        k->gridX, k->gridY, k->gridZ, k->blockX, k->name ? k->name : "?");
	}
	size_t dropped = 0;
	if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped)
		fprintf(stderr, "cupti_trace: %zu records dropped\n", dropped);
	if (f)
		fclose(f);
	free(buf);
}

__attribute__((constructor)) static void trace_start(void)
{
	if (!getenv("CUPTI_TRACE"))
		return;
	CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
	if (r != CUPTI_SUCCESS) {
		report("register callbacks", r);
		return;
	}
	r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
	if (r != CUPTI_SUCCESS)
		report("enable kernel records", r);
}

__attribute__((destructor)) static void trace_stop(void)
{
	if (!getenv("CUPTI_TRACE"))
		return;
	CUptiResult r = cuptiActivityFlushAll(1);
	if (r != CUPTI_SUCCESS)
		report("flush", r);
}
