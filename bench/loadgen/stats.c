/* stats.c - sample arrays and type-7 percentiles (see stats.h for the definition). */
#include "stats.h"

#include <math.h>
#include <stdlib.h>

void ds_samples_init(struct ds_samples *s)
{
	memset(s, 0, sizeof(*s));
	s->sorted = true;
}

void ds_samples_free(struct ds_samples *s)
{
	free(s->v);
	ds_samples_init(s);
}

enum ds_status ds_samples_add(struct ds_samples *s, double x)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		double *v = realloc(s->v, cap * sizeof(*v));
		if (!v)
			return DS_ERR_NOMEM;
		s->v = v;
		s->cap = cap;
	}
	if (s->n > 0 && x < s->v[s->n - 1])
		s->sorted = false;
	s->v[s->n++] = x;
	return DS_OK;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

void ds_samples_sort(struct ds_samples *s)
{
	if (!s->sorted)
		qsort(s->v, s->n, sizeof(*s->v), cmp_double);
	s->sorted = true;
}

double ds_percentile(const double *sorted, size_t n, double p)
{
	if (n == 0)
		return NAN;
	if (!(p > 0)) /* also NaN p */
		return sorted[0];
	if (p >= 100)
		return sorted[n - 1];
	double h = (double)(n - 1) * p / 100.0;
	size_t lo = (size_t)floor(h);
	if (lo + 1 >= n)
		return sorted[n - 1];
	return sorted[lo] + (h - (double)lo) * (sorted[lo + 1] - sorted[lo]);
}

void ds_samples_dist(struct ds_samples *s, struct ds_dist *d)
{
	d->n = s->n;
	if (s->n == 0) {
		d->mean = d->min = d->max = d->p50 = d->p90 = d->p99 = d->p999 = NAN;
		return;
	}
	ds_samples_sort(s);
	double sum = 0;
	for (size_t i = 0; i < s->n; i++)
		sum += s->v[i];
	d->mean = sum / (double)s->n;
	d->min = s->v[0];
	d->max = s->v[s->n - 1];
	d->p50 = ds_percentile(s->v, s->n, 50);
	d->p90 = ds_percentile(s->v, s->n, 90);
	d->p99 = ds_percentile(s->v, s->n, 99);
	d->p999 = ds_percentile(s->v, s->n, 99.9);
}
