/* workload.c - seeded request streams (Poisson + mix) and the JSONL trace reader (jansson). */
#include "workload.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>

uint64_t ds_bench_rng_next(struct ds_bench_rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

double ds_bench_rng_uniform(struct ds_bench_rng *r)
{
	return (double)(ds_bench_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

enum ds_status ds_len_dist_parse(const char *what, const char *s, struct ds_len_dist *d,
                                 struct ds_err *err)
{
	char *end;
	long a, b;
	if (strncmp(s, "fixed:", 6) == 0)
		s += 6;
	if (strncmp(s, "uniform:", 8) == 0) {
		a = strtol(s + 8, &end, 10);
		if (*end != ':')
			goto bad;
		b = strtol(end + 1, &end, 10);
		if (*end || a < 1 || b < a || b > 1000000)
			goto bad;
		d->kind = DS_LEN_UNIFORM;
		d->a = (int)a;
		d->b = (int)b;
		return DS_OK;
	}
	a = strtol(s, &end, 10);
	if (end == s || *end || a < 1 || a > 1000000)
		goto bad;
	d->kind = DS_LEN_FIXED;
	d->a = d->b = (int)a;
	return DS_OK;
bad:
	return ds_errf(err, DS_ERR_INVALID,
	               "%s: bad length distribution '%s' (want N, fixed:N or uniform:A:B)", what,
	               s);
}

int ds_len_dist_draw(const struct ds_len_dist *d, struct ds_bench_rng *r)
{
	if (d->kind == DS_LEN_FIXED)
		return d->a;
	return d->a + (int)(ds_bench_rng_next(r) % (uint64_t)(d->b - d->a + 1));
}

void ds_len_dist_format(const struct ds_len_dist *d, char *buf, size_t cap)
{
	if (d->kind == DS_LEN_FIXED)
		snprintf(buf, cap, "fixed:%d", d->a);
	else
		snprintf(buf, cap, "uniform:%d:%d", d->a, d->b);
}

void ds_workload_opts_default(struct ds_workload_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->seed = 1;
	o->rate = 10;
	o->n_requests = 100;
	o->prompt_len = (struct ds_len_dist){DS_LEN_FIXED, 32, 32};
	o->output_len = (struct ds_len_dist){DS_LEN_FIXED, 32, 32};
	o->vocab = 256;
	o->top_p = 1.0f;
}

void ds_workload_free(struct ds_bench_req *reqs, int n)
{
	if (!reqs)
		return;
	for (int i = 0; i < n; i++) {
		free(reqs[i].prompt);
		free(reqs[i].prompt_text);
	}
	free(reqs);
}

static enum ds_status random_prompt(struct ds_bench_req *q, int len, int vocab,
                                    struct ds_bench_rng *r)
{
	q->prompt = malloc(sizeof(int32_t) * (size_t)len);
	if (!q->prompt)
		return DS_ERR_NOMEM;
	for (int i = 0; i < len; i++)
		q->prompt[i] = (int32_t)(ds_bench_rng_next(r) % (uint64_t)vocab);
	q->n_prompt = len;
	return DS_OK;
}

static void req_defaults(struct ds_bench_req *q, const struct ds_workload_opts *o,
                         struct ds_bench_rng *r)
{
	q->seed = ds_bench_rng_next(r) >> 11; /* < 2^53: exact in any JSON reader */
	q->temperature = o->temperature;
	q->top_k = o->top_k;
	q->top_p = o->top_p;
}

enum ds_status ds_workload_poisson(const struct ds_workload_opts *o, struct ds_bench_req **out,
                                   int *n, struct ds_err *err)
{
	*out = NULL;
	*n = 0;
	if (o->n_requests <= 0 || o->vocab <= 0 || !(o->det_fraction >= 0 && o->det_fraction <= 1))
		return ds_errf(err, DS_ERR_INVALID,
		               "workload: need requests > 0, vocab > 0, det fraction in [0,1]");
	struct ds_bench_req *reqs = calloc((size_t)o->n_requests, sizeof(*reqs));
	if (!reqs)
		return ds_errf(err, DS_ERR_NOMEM, "workload: no memory for %d requests",
		               o->n_requests);
	/* separate streams, so changing the det fraction does not change arrivals or prompts */
	struct ds_bench_rng arr = {o->seed ^ 0xa5a5a5a5ull}, mix = {o->seed ^ 0x5a5a5a5aull},
	                    body = {o->seed};
	double t = 0;
	int k = 0;
	for (; k < o->n_requests; k++) {
		if (o->rate > 0 && k > 0)
			t += -log(1.0 - ds_bench_rng_uniform(&arr)) / o->rate;
		if (o->duration_s > 0 && t > o->duration_s)
			break;
		struct ds_bench_req *q = &reqs[k];
		q->arrival_s = t;
		q->deterministic = ds_bench_rng_uniform(&mix) < o->det_fraction;
		req_defaults(q, o, &body);
		q->max_tokens = ds_len_dist_draw(&o->output_len, &body);
		int plen = ds_len_dist_draw(&o->prompt_len, &body);
		if (o->prompt_text) {
			q->prompt_text = strdup(o->prompt_text);
			if (!q->prompt_text)
				goto nomem;
		} else if (random_prompt(q, plen, o->vocab, &body) != DS_OK) {
			goto nomem;
		}
	}
	*out = reqs;
	*n = k;
	return DS_OK;
nomem:
	ds_workload_free(reqs, o->n_requests);
	return ds_errf(err, DS_ERR_NOMEM, "workload: out of memory");
}

/* ---- trace ---- */

static int cmp_arrival(const void *a, const void *b)
{
	const struct ds_bench_req *x = a, *y = b;
	return (x->arrival_s > y->arrival_s) - (x->arrival_s < y->arrival_s);
}

static enum ds_status trace_line(json_t *j, struct ds_bench_req *q,
                                 const struct ds_workload_opts *o, struct ds_bench_rng *r,
                                 const char *where, struct ds_err *err)
{
	json_t *v;
	if (!json_is_object(j))
		return ds_errf(err, DS_ERR_FORMAT, "%s: not a JSON object", where);
	req_defaults(q, o, r);
	v = json_object_get(j, "arrival_s");
	if (!json_is_number(v) || json_number_value(v) < 0 || !isfinite(json_number_value(v)))
		return ds_errf(err, DS_ERR_FORMAT, "%s: \"arrival_s\" must be a number >= 0",
		               where);
	q->arrival_s = json_number_value(v);
	q->max_tokens = ds_len_dist_draw(&o->output_len, r);
	if ((v = json_object_get(j, "max_tokens"))) {
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    json_integer_value(v) > 1000000)
			return ds_errf(err, DS_ERR_FORMAT,
			               "%s: \"max_tokens\" must be an integer >= 1", where);
		q->max_tokens = (int)json_integer_value(v);
	}
	if ((v = json_object_get(j, "deterministic"))) {
		if (!json_is_boolean(v))
			return ds_errf(err, DS_ERR_FORMAT,
			               "%s: \"deterministic\" must be a boolean", where);
		q->deterministic = json_is_true(v);
	}
	if ((v = json_object_get(j, "seed"))) {
		if (!json_is_integer(v) || json_integer_value(v) < 0)
			return ds_errf(err, DS_ERR_FORMAT, "%s: \"seed\" must be an integer >= 0",
			               where);
		q->seed = (uint64_t)json_integer_value(v);
	}
	if ((v = json_object_get(j, "temperature"))) {
		if (!json_is_number(v))
			return ds_errf(err, DS_ERR_FORMAT, "%s: \"temperature\" must be a number",
			               where);
		q->temperature = (float)json_number_value(v);
	}
	if ((v = json_object_get(j, "top_k"))) {
		if (!json_is_integer(v))
			return ds_errf(err, DS_ERR_FORMAT, "%s: \"top_k\" must be an integer",
			               where);
		q->top_k = (int)json_integer_value(v);
	}
	if ((v = json_object_get(j, "top_p"))) {
		if (!json_is_number(v))
			return ds_errf(err, DS_ERR_FORMAT, "%s: \"top_p\" must be a number", where);
		q->top_p = (float)json_number_value(v);
	}
	if ((v = json_object_get(j, "tag"))) {
		if (!json_is_string(v))
			return ds_errf(err, DS_ERR_FORMAT, "%s: \"tag\" must be a string", where);
		snprintf(q->tag, sizeof(q->tag), "%s", json_string_value(v));
	}
	if ((v = json_object_get(j, "prompt_ids"))) {
		size_t n = json_array_size(v);
		if (!json_is_array(v) || n == 0 || n > 1000000)
			return ds_errf(err, DS_ERR_FORMAT,
			               "%s: \"prompt_ids\" must be a non-empty array", where);
		q->prompt = malloc(sizeof(int32_t) * n);
		if (!q->prompt)
			return ds_errf(err, DS_ERR_NOMEM, "%s: no memory", where);
		q->n_prompt = (int)n;
		for (size_t i = 0; i < n; i++) {
			json_t *e = json_array_get(v, i);
			if (!json_is_integer(e) || json_integer_value(e) < INT32_MIN ||
			    json_integer_value(e) > INT32_MAX)
				return ds_errf(err, DS_ERR_FORMAT,
				               "%s: prompt_ids[%zu] is not an int32", where, i);
			q->prompt[i] = (int32_t)json_integer_value(e);
		}
	} else if ((v = json_object_get(j, "prompt"))) {
		if (!json_is_string(v))
			return ds_errf(err, DS_ERR_FORMAT, "%s: \"prompt\" must be a string",
			               where);
		q->prompt_text = strdup(json_string_value(v));
		if (!q->prompt_text)
			return ds_errf(err, DS_ERR_NOMEM, "%s: no memory", where);
	} else if ((v = json_object_get(j, "prompt_len"))) {
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    json_integer_value(v) > 1000000)
			return ds_errf(err, DS_ERR_FORMAT,
			               "%s: \"prompt_len\" must be an integer >= 1", where);
		if (random_prompt(q, (int)json_integer_value(v), o->vocab, r) != DS_OK)
			return ds_errf(err, DS_ERR_NOMEM, "%s: no memory", where);
	} else {
		return ds_errf(err, DS_ERR_FORMAT,
		               "%s: needs \"prompt_ids\", \"prompt\" or \"prompt_len\"", where);
	}
	return DS_OK;
}

enum ds_status ds_workload_trace(const char *path, const struct ds_workload_opts *o,
                                 struct ds_bench_req **out, int *n, struct ds_err *err)
{
	FILE *f = fopen(path, "r");
	char *line = NULL, where[300];
	size_t lcap = 0;
	int cap = 0, k = 0, lineno = 0;
	struct ds_bench_req *reqs = NULL;
	struct ds_bench_rng r = {o->seed};
	enum ds_status rv = DS_OK;

	*out = NULL;
	*n = 0;
	if (!f)
		return ds_errf(err, DS_ERR_IO, "trace %s: %s", path, strerror(errno));
	while (getline(&line, &lcap, f) >= 0) {
		lineno++;
		const char *p = line;
		while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
			p++;
		if (!*p)
			continue;
		snprintf(where, sizeof(where), "trace %s:%d", path, lineno);
		if (o->n_requests > 0 && k >= o->n_requests)
			break;
		if (k == cap) {
			int nc = cap ? cap * 2 : 256;
			struct ds_bench_req *nr = realloc(reqs, sizeof(*reqs) * (size_t)nc);
			if (!nr) {
				rv = ds_errf(err, DS_ERR_NOMEM, "%s: no memory", where);
				goto fail;
			}
			reqs = nr;
			cap = nc;
		}
		memset(&reqs[k], 0, sizeof(reqs[k]));
		json_error_t je;
		json_t *j = json_loads(p, 0, &je);
		if (!j) {
			k++;
			rv = ds_errf(err, DS_ERR_FORMAT, "%s: bad JSON: %s", where, je.text);
			goto fail;
		}
		rv = trace_line(j, &reqs[k++], o, &r, where, err);
		json_decref(j);
		if (rv != DS_OK)
			goto fail;
	}
	if (k == 0) {
		rv = ds_errf(err, DS_ERR_FORMAT, "trace %s: no requests", path);
		goto fail;
	}
	qsort(reqs, (size_t)k, sizeof(*reqs), cmp_arrival);
	free(line);
	fclose(f);
	*out = reqs;
	*n = k;
	return DS_OK;
fail:
	free(line);
	fclose(f);
	ds_workload_free(reqs, k);
	return rv;
}
