/* stats.h - growable sample arrays and percentiles for the load generator.
 *
 * Percentiles use linear interpolation between closest ranks (Hyndman-Fan type 7, numpy's
 * default): for sorted x[0..n-1] and p in [0, 100], h = (n-1)p/100, and the result is
 * x[floor h] + (h - floor h)(x[floor h + 1] - x[floor h]). It is exact at the sample points, so
 * hand-computed values in the unit test are easy to check. */
#ifndef DS_BENCH_STATS_H
#define DS_BENCH_STATS_H

#include "ds_common.h"

struct ds_samples {
	double *v;
	size_t n, cap;
	bool sorted;
};

void ds_samples_init(struct ds_samples *s);
void ds_samples_free(struct ds_samples *s);
/* Appends x. DS_ERR_NOMEM on allocation failure (s unchanged). */
enum ds_status ds_samples_add(struct ds_samples *s, double x);
/* Sorts in place (idempotent until the next add). */
void ds_samples_sort(struct ds_samples *s);

/* The p-th percentile (p in [0, 100]) of sorted[0..n-1], type 7. NAN when n == 0; p is clamped. */
double ds_percentile(const double *sorted, size_t n, double p);

struct ds_dist {
	size_t n;
	double mean, min, max;
	double p50, p90, p99, p999;
};

/* Summarises s (sorts it). All fields NAN when s is empty (n = 0). */
void ds_samples_dist(struct ds_samples *s, struct ds_dist *out);

#endif
