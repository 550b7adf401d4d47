/* tokenizer_stop.c - stop strings matched on streamed, decoded text across token boundaries.
 *
 * The text comes out of the streaming decoder (whole UTF-8 characters only). What is not yet
 * shown is kept in `held`; after each token we look for the earliest complete stop string in
 * it, and otherwise emit all but the longest suffix that is a proper prefix of some stop
 * string. `held` is thus never longer than the longest stop string plus one token's text. */
#include <stdlib.h>

#include "tokenizer.h"

enum ds_status ds_tokenizer_stop_init(struct ds_tokenizer_stop *s, const struct ds_tokenizer *t,
				      bool skip_special, const char *const *stops,
				      const size_t *stop_lens, int n_stops, struct ds_err *err)
{
	memset(s, 0, sizeof(*s));
	s->matched = -1;
	ds_tokenizer_stream_init(&s->stream, t, skip_special);
	if (n_stops < 0)
		return ds_errf(err, DS_ERR_INVALID, "stop strings: negative count %d", n_stops);
	if (n_stops == 0)
		return DS_OK;
	s->stops = calloc((size_t)n_stops, sizeof(*s->stops));
	s->stop_lens = calloc((size_t)n_stops, sizeof(*s->stop_lens));
	if (!s->stops || !s->stop_lens)
		goto nomem;
	for (int i = 0; i < n_stops; i++) {
		size_t l = stop_lens ? stop_lens[i] : strlen(stops[i]);
		if (l == 0) {
			ds_tokenizer_stop_free(s);
			return ds_errf(err, DS_ERR_INVALID, "stop string %d is empty", i);
		}
		if (!(s->stops[i] = malloc(l)))
			goto nomem;
		memcpy(s->stops[i], stops[i], l);
		s->stop_lens[i] = l;
		s->n_stops = i + 1;
	}
	return DS_OK;
nomem:
	ds_tokenizer_stop_free(s);
	return ds_errf(err, DS_ERR_NOMEM, "stop strings: out of memory");
}

static bool reserve(char **p, size_t *cap, size_t need)
{
	if (need <= *cap)
		return true;
	size_t c = *cap ? *cap : 64;
	while (c < need)
		c *= 2;
	char *np = realloc(*p, c);
	if (!np)
		return false;
	*p = np;
	*cap = c;
	return true;
}

/* Moves the first n held bytes to out; the rest stays held. */
static void release(struct ds_tokenizer_stop *s, size_t n, const char **text, size_t *len)
{
	memcpy(s->out, s->held, n);
	memmove(s->held, s->held + n, s->n_held - n);
	s->n_held -= n;
	*text = s->out;
	*len = n;
}

enum ds_status ds_tokenizer_stop_push(struct ds_tokenizer_stop *s, int32_t id, const char **text,
				      size_t *len, int *stop, struct ds_err *err)
{
	*text = "";
	*len = 0;
	*stop = s->matched;
	if (s->matched >= 0)
		return DS_OK;
	const char *chunk;
	size_t cl;
	enum ds_status rv = ds_tokenizer_stream_push(&s->stream, id, &chunk, &cl, err);
	if (rv != DS_OK)
		return rv;
	if (!reserve(&s->held, &s->cap_held, s->n_held + cl) || !reserve(&s->out, &s->cap_out, s->n_held + cl))
		return ds_errf(err, DS_ERR_NOMEM, "stop strings: out of memory");
	memcpy(s->held + s->n_held, chunk, cl);
	s->n_held += cl;
	/* the earliest complete stop string (the first listed on a tie) */
	size_t best = SIZE_MAX;
	for (int i = 0; i < s->n_stops; i++) {
		const char *hit = memmem(s->held, s->n_held, s->stops[i], s->stop_lens[i]);
		if (hit && (size_t)(hit - s->held) < best) {
			best = (size_t)(hit - s->held);
			s->matched = i;
		}
	}
	if (s->matched >= 0) {
		release(s, best, text, len);
		s->n_held = 0;
		*stop = s->matched;
		return DS_OK;
	}
	/* hold the longest suffix that some stop string starts with */
	size_t hold = 0;
	for (int i = 0; i < s->n_stops; i++) {
		size_t max = DS_MIN(s->stop_lens[i] - 1, s->n_held);
		for (size_t k = max; k > hold; k--) {
			if (memcmp(s->held + s->n_held - k, s->stops[i], k) == 0) {
				hold = k;
				break;
			}
		}
	}
	release(s, s->n_held - hold, text, len);
	return DS_OK;
}

enum ds_status ds_tokenizer_stop_flush(struct ds_tokenizer_stop *s, const char **text, size_t *len,
				       struct ds_err *err)
{
	*text = "";
	*len = 0;
	if (s->matched >= 0)
		return DS_OK;
	const char *chunk;
	size_t cl;
	enum ds_status rv = ds_tokenizer_stream_flush(&s->stream, &chunk, &cl, err);
	if (rv != DS_OK)
		return rv;
	if (!reserve(&s->held, &s->cap_held, s->n_held + cl) || !reserve(&s->out, &s->cap_out, s->n_held + cl))
		return ds_errf(err, DS_ERR_NOMEM, "stop strings: out of memory");
	memcpy(s->held + s->n_held, chunk, cl);
	s->n_held += cl;
	release(s, s->n_held, text, len);
	return DS_OK;
}

void ds_tokenizer_stop_free(struct ds_tokenizer_stop *s)
{
	for (int i = 0; s->stops && i < s->n_stops; i++)
		free(s->stops[i]);
	free(s->stops);
	free(s->stop_lens);
	free(s->held);
	free(s->out);
	ds_tokenizer_stream_free(&s->stream);
	memset(s, 0, sizeof(*s));
	s->matched = -1;
}
