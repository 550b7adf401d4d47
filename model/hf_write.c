/* hf_write.c - writes a seeded synthetic model as an HF directory (detserve-mkmodel's engine).
 *
 * Tensor data are streamed in fixed-size chunks straight from the counter-based generator, so
 * memory stays small at any model size and the bytes depend only on (cfg, seed, opts). Every
 * file goes to a temporary name first and is renamed into place; config.json comes last, so a
 * directory with a config.json is complete. */
#include "hf.h"
#include "tokenizer.h"
#include "safetensors.h"
#include "synth.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define HF_CHUNK 65536 /* elements per generated chunk */

uint16_t ds_f32_to_f16(float f)
{
	uint32_t x;
	memcpy(&x, &f, sizeof(x));
	uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
	uint32_t ax = x & 0x7fffffffu;
	if (ax > 0x7f800000u)
		return sign | 0x7e00u; /* NaN */
	if (ax >= 0x477ff000u)         /* >= 65520 rounds to infinity */
		return sign | 0x7c00u;
	if (ax < 0x38800000u) { /* below 2^-14: subnormal half, unit 2^-24 */
		float a;
		memcpy(&a, &ax, sizeof(a));
		return sign | (uint16_t)lrintf(a * 16777216.0f); /* exact scaling, RNE */
	}
	uint32_t h = ((((ax >> 23) - 127u + 15u) << 10) | ((ax & 0x7fffffu) >> 13));
	uint32_t rem = ax & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
		h++; /* a carry into the exponent is the correct result */
	return sign | (uint16_t)h;
}

static const char *hf_dtype_st(enum ds_hf_dtype d)
{
	return d == DS_HF_F16 ? "F16" : d == DS_HF_F32 ? "F32" : "BF16";
}

static const char *hf_dtype_torch(enum ds_hf_dtype d)
{
	return d == DS_HF_F16 ? "float16" : d == DS_HF_F32 ? "float32" : "bfloat16";
}

static size_t hf_dtype_size(enum ds_hf_dtype d)
{
	return d == DS_HF_F32 ? 4 : 2;
}

static float hf_tensor_scale(const struct ds_model_config *cfg, const struct ds_tensor_desc *d)
{
	if (d->field == DS_T_TOK_EMBD && cfg->tie_embeddings)
		return ds_synth_tied_embd_scale(cfg);
	return d->synth_scale;
}

/* Writes buf[0..len) to dir/name via a temporary file and a rename. */
static enum ds_status hf_write_text(const char *dir, const char *name, const char *buf, size_t len,
                                    struct ds_err *err)
{
	char path[4096], tmp[4200];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, name);
	FILE *fp = fopen(tmp, "wb");
	if (!fp)
		return ds_errf(err, DS_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
	bool ok = fwrite(buf, 1, len, fp) == len;
	ok = (fclose(fp) == 0) && ok;
	if (!ok || rename(tmp, path) != 0) {
		unlink(tmp);
		return ds_errf(err, DS_ERR_IO, "%s: write failed: %s", path, strerror(errno));
	}
	return DS_OK;
}

/* Streams tensors ts[0..n) into one safetensors file. */
static enum ds_status hf_write_shard(const struct ds_model_config *cfg, uint64_t seed,
                                     const char *dir, const char *name,
                                     const struct ds_tensor_desc *ts, int n, enum ds_hf_dtype dtype,
                                     struct ds_err *err)
{
	enum ds_status rv;
	char path[4096], tmp[4200];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, name);
	struct ds_st_entry *e = calloc((size_t)n, sizeof(*e));
	uint16_t *chunk = malloc(HF_CHUNK * sizeof(uint16_t));
	void *conv = malloc(HF_CHUNK * 4);
	FILE *fp = NULL;
	if (!e || !chunk || !conv) {
		rv = ds_errf(err, DS_ERR_NOMEM, "%s: out of memory", path);
		goto fail;
	}
	for (int i = 0; i < n; i++) {
		e[i].name = ts[i].name;
		e[i].dtype_name = hf_dtype_st(dtype);
		e[i].ndim = ts[i].ndim;
		e[i].shape[0] = ts[i].shape[0];
		e[i].shape[1] = ts[i].shape[1];
		e[i].nbytes = (uint64_t)ds_tensor_numel(&ts[i]) * hf_dtype_size(dtype);
	}
	if (!(fp = fopen(tmp, "wb"))) {
		rv = ds_errf(err, DS_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
		goto fail;
	}
	/* the seed in the header makes the identity (config + headers) differ between seeds */
	char seed_s[24];
	snprintf(seed_s, sizeof(seed_s), "%" PRIu64, seed);
	const char *const meta[][2] = {{"detserve_synth_seed", seed_s}};
	if ((rv = ds_st_write_header(fp, path, e, n, meta, 1, err)) != DS_OK)
		goto fail;
	for (int i = 0; i < n; i++) {
		size_t numel = (size_t)ds_tensor_numel(&ts[i]);
		uint64_t key = ds_synth_key(ts[i].name);
		float scale = hf_tensor_scale(cfg, &ts[i]);
		for (size_t first = 0; first < numel; first += HF_CHUNK) {
			size_t k = DS_MIN((size_t)HF_CHUNK, numel - first);
			ds_synth_fill(chunk, k, first, seed, key, scale, ts[i].synth_offset);
			const void *src = chunk;
			if (dtype == DS_HF_F32) {
				float *o = conv;
				for (size_t j = 0; j < k; j++)
					o[j] = ds_bf16_to_f32(chunk[j]);
				src = conv;
			} else if (dtype == DS_HF_F16) {
				uint16_t *o = conv;
				for (size_t j = 0; j < k; j++)
					o[j] = ds_f32_to_f16(ds_bf16_to_f32(chunk[j]));
				src = conv;
			}
			size_t bytes = k * hf_dtype_size(dtype);
			if (fwrite(src, 1, bytes, fp) != bytes) {
				rv = ds_errf(err, DS_ERR_IO, "%s: write failed for tensor %s: %s",
				             path, ts[i].name, strerror(errno));
				goto fail;
			}
		}
	}
	int rc = fclose(fp);
	fp = NULL;
	if (rc != 0 || rename(tmp, path) != 0) {
		rv = ds_errf(err, DS_ERR_IO, "%s: write failed: %s", path, strerror(errno));
		goto fail;
	}
	free(e);
	free(chunk);
	free(conv);
	return DS_OK;
fail:
	if (fp)
		fclose(fp);
	unlink(tmp);
	free(e);
	free(chunk);
	free(conv);
	return rv;
}

/* First tensor of each shard: contiguous runs balanced by bytes, none empty. */
static void hf_shard_starts(const struct ds_tensor_desc *ts, int n, int k, int *start)
{
	uint64_t total = 0, prefix = 0;
	for (int i = 0; i < n; i++)
		total += (uint64_t)ds_tensor_numel(&ts[i]);
	start[0] = 0;
	int s = 1;
	for (int i = 0; i < n && s < k; i++) {
		/* shard s starts at the first tensor whose prefix reaches s/k of the bytes */
		if (i > start[s - 1] &&
		    (prefix * (uint64_t)k >= (uint64_t)s * total || n - i <= k - s))
			start[s++] = i;
		prefix += (uint64_t)ds_tensor_numel(&ts[i]);
	}
	start[k] = n;
}

static int hf_cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static enum ds_status hf_write_index(const char *dir, const struct ds_tensor_desc *ts, int n,
                                     const int *start, int k, enum ds_hf_dtype dtype,
                                     struct ds_err *err)
{
	/* weight_map keys sorted: sort pointers to the names; since name is the first member of
	 * struct ds_tensor_desc, a name pointer's distance from ts[0].name gives its index */
	const char **names = malloc((size_t)n * sizeof(*names));
	size_t cap = 128 + (size_t)n * (sizeof(ts[0].name) + 48);
	char *s = malloc(cap);
	if (!names || !s) {
		free(names);
		free(s);
		return ds_errf(err, DS_ERR_NOMEM, "%s/%s: out of memory", dir, DS_HF_INDEX);
	}
	uint64_t total = 0;
	for (int i = 0; i < n; i++) {
		names[i] = ts[i].name;
		total += (uint64_t)ds_tensor_numel(&ts[i]) * hf_dtype_size(dtype);
	}
	qsort(names, (size_t)n, sizeof(*names), hf_cmp_str);
	size_t l = (size_t)snprintf(s, cap,
	                            "{\n  \"metadata\": {\n    \"total_size\": %" PRIu64
	                            "\n  },\n  \"weight_map\": {\n",
	                            total);
	for (int i = 0; i < n; i++) {
		int t = (int)(((const char *)names[i] - ts[0].name) / (ptrdiff_t)sizeof(ts[0]));
		int sh = 0;
		while (t >= start[sh + 1])
			sh++;
		l += (size_t)snprintf(s + l, cap - l,
		                      "    \"%s\": \"model-%05d-of-%05d.safetensors\"%s\n",
		                      names[i], sh + 1, k, i + 1 < n ? "," : "");
	}
	l += (size_t)snprintf(s + l, cap - l, "  }\n}\n");
	enum ds_status rv = hf_write_text(dir, DS_HF_INDEX, s, l, err);
	free(names);
	free(s);
	return rv;
}

/* Removes weight files left by an earlier write with another layout. */
static void hf_remove_stale(const char *dir, int keep_shards, bool keep_single, bool keep_synth)
{
	char path[4096];
	DIR *d = opendir(dir);
	if (d) {
		struct dirent *de;
		while ((de = readdir(d))) {
			int i, k;
			char tail;
			if (sscanf(de->d_name, "model-%5d-of-%5d.safetensor%c", &i, &k, &tail) ==
			        3 &&
			    tail == 's' && k != keep_shards) {
				snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
				unlink(path);
			}
		}
		closedir(d);
	}
	if (!keep_single) {
		snprintf(path, sizeof(path), "%s/%s", dir, DS_HF_WEIGHTS);
		unlink(path);
	}
	if (keep_shards == 0) {
		snprintf(path, sizeof(path), "%s/%s", dir, DS_HF_INDEX);
		unlink(path);
	}
	if (!keep_synth) {
		snprintf(path, sizeof(path), "%s/%s", dir, DS_HF_SYNTH);
		unlink(path);
	}
}

enum ds_status ds_model_write_hf(const struct ds_model_config *cfg, uint64_t seed, const char *dir,
                                 const struct ds_hf_write_opts *opts, struct ds_err *err)
{
	enum ds_status rv = ds_model_config_check(cfg, err);
	if (rv != DS_OK)
		return rv;
	if (seed > (uint64_t)INT64_MAX)
		return ds_errf(err, DS_ERR_INVALID, "mkmodel: seed %" PRIu64 " must be below 2^63",
		               seed);
	if (opts->dtype != DS_HF_BF16 && opts->dtype != DS_HF_F16 && opts->dtype != DS_HF_F32)
		return ds_errf(err, DS_ERR_INVALID, "mkmodel: unknown dtype %d", (int)opts->dtype);
	if (strlen(dir) > 3000)
		return ds_errf(err, DS_ERR_INVALID, "mkmodel: directory path is too long");
	char *config = NULL;
	if ((rv = ds_hf_config_format(cfg, hf_dtype_torch(opts->dtype), &config, err)) != DS_OK)
		return rv;
	int n = ds_tensor_count(cfg);
	int k = opts->deferred ? 0 : DS_MAX(opts->n_shards, 1);
	struct ds_tensor_desc *ts = calloc((size_t)n, sizeof(*ts));
	int *start = calloc((size_t)n + 2, sizeof(*start));
	if (!ts || !start) {
		rv = ds_errf(err, DS_ERR_NOMEM, "mkmodel: out of memory");
		goto out;
	}
	ds_tensor_list(cfg, ts);
	if (k > n) {
		rv = ds_errf(err, DS_ERR_INVALID, "mkmodel: %d shards for %d tensors", k, n);
		goto out;
	}
	if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
		rv = ds_errf(err, DS_ERR_IO, "%s: cannot create directory: %s", dir,
		             strerror(errno));
		goto out;
	}
	hf_remove_stale(dir, k > 1 ? k : 0, k == 1, opts->deferred);
	if (opts->deferred) {
		char buf[64];
		int len = snprintf(buf, sizeof(buf), "{\n  \"seed\": %" PRIu64 "\n}\n", seed);
		rv = hf_write_text(dir, DS_HF_SYNTH, buf, (size_t)len, err);
	} else if (k == 1) {
		rv = hf_write_shard(cfg, seed, dir, DS_HF_WEIGHTS, ts, n, opts->dtype, err);
	} else {
		hf_shard_starts(ts, n, k, start);
		for (int s = 0; s < k && rv == DS_OK; s++) {
			char name[64];
			snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", s + 1, k);
			rv = hf_write_shard(cfg, seed, dir, name, ts + start[s],
			                    start[s + 1] - start[s], opts->dtype, err);
		}
		if (rv == DS_OK)
			rv = hf_write_index(dir, ts, n, start, k, opts->dtype, err);
	}
	/* the byte-level fallback tokenizer, so text prompts work on synthetic models */
	if (rv == DS_OK)
		rv = ds_tokenizer_write_bytelevel_json(dir, cfg, err);
	if (rv == DS_OK)
		rv = hf_write_text(dir, DS_HF_CONFIG, config, strlen(config), err);
out:
	free(config);
	free(ts);
	free(start);
	return rv;
}
