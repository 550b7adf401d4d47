/* test_model.c - the HF loader: round trips against ds_model_synth, the error table, rounding
 * of F16/F32 files, deferred synthetic directories, and malformed-header robustness.
 *
 * Models are written with ds_model_write_hf into a mkdtemp directory, then damaged on purpose
 * by rewriting config.json or a safetensors header (parsed and re-serialized with jansson). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hf.h"
#include "model_internal.h"
#include "safetensors.h"
#include "synth.h"

/* ---- helpers ---- */

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	return remove(p);
}

static void rmrf(const char *dir)
{
	nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static char *tmpdir(void)
{
	char *d = strdup("/tmp/ds-test-model-XXXXXX");
	assert_non_null(d);
	assert_non_null(mkdtemp(d));
	return d;
}

static char *pjoin(const char *dir, const char *name)
{
	static _Thread_local char buf[4][512];
	static _Thread_local int k;
	char *b = buf[k++ % 4];
	snprintf(b, 512, "%s/%s", dir, name);
	return b;
}

static uint8_t *slurp(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	assert_non_null(fp);
	fseek(fp, 0, SEEK_END);
	*len = (size_t)ftell(fp);
	fseek(fp, 0, SEEK_SET);
	uint8_t *b = malloc(*len + 1);
	assert_non_null(b);
	assert_int_equal(fread(b, 1, *len, fp), *len);
	fclose(fp);
	return b;
}

static void spit(const char *path, const void *buf, size_t len)
{
	FILE *fp = fopen(path, "wb");
	assert_non_null(fp);
	assert_int_equal(fwrite(buf, 1, len, fp), len);
	assert_int_equal(fclose(fp), 0);
}

static struct ds_model_config tiny_cfg(const char *arch, bool tie)
{
	struct ds_model_config c;
	assert_int_equal(ds_model_preset("tiny", &c), DS_OK);
	assert_int_equal(ds_hf_config_set_arch(&c, arch), DS_OK);
	c.tie_embeddings = tie;
	return c;
}

static void write_model(const struct ds_model_config *c, uint64_t seed, const char *dir,
                        enum ds_hf_dtype dtype, int shards)
{
	struct ds_hf_write_opts o = {.dtype = dtype, .n_shards = shards};
	struct ds_err err = {{0}};
	enum ds_status rv = ds_model_write_hf(c, seed, dir, &o, &err);
	if (rv != DS_OK)
		fail_msg("write_hf: %s", err.msg);
}

/* Loads dir expecting failure with status `want`; returns the message. */
static const char *load_fails(const char *dir, enum ds_status want)
{
	static _Thread_local struct ds_err err;
	memset(&err, 0, sizeof(err));
	struct ds_model *m = (struct ds_model *)1;
	enum ds_status rv = ds_model_load(dir, &m, &err);
	if (rv != want)
		fail_msg("want %s, got %s: %s", ds_status_str(want), ds_status_str(rv), err.msg);
	assert_null(m);
	assert_true(strlen(err.msg) > 0);
	return err.msg;
}

static void assert_mentions(const char *msg, const char *what)
{
	assert_non_null(msg);
	if (!strstr(msg, what))
		print_error("message \"%s\" does not mention \"%s\"\n", msg, what);
	assert_non_null(strstr(msg, what));
}

/* Rewrites one safetensors file's header through fn; the data section is kept, plus `extra`
 * appended bytes. */
typedef void (*header_fn)(json_t *hdr);

static void patch_header(const char *path, header_fn fn, size_t extra)
{
	size_t len;
	uint8_t *b = slurp(path, &len);
	uint64_t hlen = 0;
	for (int i = 7; i >= 0; i--)
		hlen = (hlen << 8) | b[i];
	json_t *h = json_loadb((const char *)b + 8, hlen, 0, NULL);
	assert_non_null(h);
	fn(h);
	char *s = json_dumps(h, JSON_COMPACT);
	json_decref(h);
	size_t sl = strlen(s), dl = len - 8 - hlen;
	uint8_t *o = calloc(8 + sl + dl + extra, 1);
	for (int i = 0; i < 8; i++)
		o[i] = (uint8_t)((uint64_t)sl >> (8 * i));
	memcpy(o + 8, s, sl);
	memcpy(o + 8 + sl, b + 8 + hlen, dl);
	spit(path, o, 8 + sl + dl + extra);
	free(s);
	free(o);
	free(b);
}

static void cfg_patch(const char *dir, const char *key, json_t *val)
{
	size_t len;
	char *text = (char *)slurp(pjoin(dir, "config.json"), &len);
	json_t *c = json_loadb(text, len, 0, NULL);
	assert_non_null(c);
	json_object_set_new(c, key, val);
	char *s = json_dumps(c, JSON_INDENT(2));
	spit(pjoin(dir, "config.json"), s, strlen(s));
	free(s);
	json_decref(c);
	free(text);
}

/* Every canonical tensor of a and b is byte-identical. */
static void assert_same_weights(struct ds_model *a, struct ds_model *b)
{
	assert_memory_equal(&a->cfg, &b->cfg, sizeof(a->cfg));
	int n = ds_tensor_count(&a->cfg);
	struct ds_tensor_desc *ts = calloc((size_t)n, sizeof(*ts));
	ds_tensor_list(&a->cfg, ts);
	for (int i = 0; i < n; i++) {
		const uint16_t *x = *ds_tensor_slot(&a->w, &ts[i]);
		const uint16_t *y = *ds_tensor_slot(&b->w, &ts[i]);
		assert_non_null(x);
		assert_non_null(y);
		if (memcmp(x, y, (size_t)ds_tensor_numel(&ts[i]) * 2) != 0)
			fail_msg("tensor %s differs", ts[i].name);
	}
	free(ts);
	assert_non_null(a->w.lm_head);
	assert_memory_equal(a->w.lm_head, b->w.lm_head,
	                    (size_t)a->cfg.vocab_size * a->cfg.hidden * 2);
}

/* ---- round trips ---- */

static void test_roundtrip_bf16_variants(void **state)
{
	(void)state;
	static const struct {
		const char *arch;
		bool tie;
		int shards;
	} v[] = {
	    {"llama", false, 1}, {"llama", true, 3},  {"qwen2", false, 3},
	    {"qwen3", true, 1},  {"qwen3", false, 3}, {"mistral", false, 2},
	};
	uint8_t ids[DS_ARRAY_LEN(v)][16];
	for (size_t i = 0; i < DS_ARRAY_LEN(v); i++) {
		char *dir = tmpdir();
		struct ds_model_config c = tiny_cfg(v[i].arch, v[i].tie);
		write_model(&c, 11, dir, DS_HF_BF16, v[i].shards);
		struct ds_model *m, *s, *m2;
		struct ds_err err;
		assert_int_equal(ds_model_load(dir, &m, &err), DS_OK);
		assert_int_equal(ds_model_synth(&c, 11, &s, &err), DS_OK);
		assert_same_weights(m, s);
		assert_true(m->cfg.attn_bias == (strcmp(v[i].arch, "qwen2") == 0));
		assert_true(m->cfg.qk_norm == (strcmp(v[i].arch, "qwen3") == 0));
		assert_true(m->cfg.attn_bias ? m->w.layers[1].bv != NULL
		                             : m->w.layers[1].bv == NULL);
		assert_true(m->cfg.qk_norm ? m->w.layers[0].k_norm != NULL
		                           : m->w.layers[0].k_norm == NULL);
		assert_true(v[i].tie ? m->w.lm_head == m->w.tok_embd
		                     : m->w.lm_head != m->w.tok_embd);
		/* bf16 is zero-copy: one mapping per file, no owned tensor buffers */
		assert_int_equal(m->storage->n_maps, v[i].shards);
		assert_int_equal(m->storage->n_owned, 0);
		assert_false(m->synthetic);
		assert_string_equal(m->source, dir);
		/* the identity is stable across loads and differs between configs */
		assert_int_equal(ds_model_load(dir, &m2, &err), DS_OK);
		assert_memory_equal(m->identity, m2->identity, 16);
		memcpy(ids[i], m->identity, 16);
		for (size_t j = 0; j < i; j++)
			assert_memory_not_equal(ids[i], ids[j], 16);
		ds_model_free(m);
		ds_model_free(m2);
		ds_model_free(s);
		rmrf(dir);
		free(dir);
	}
}

static void load_identity(const char *dir, uint8_t id[16])
{
	struct ds_model *m;
	struct ds_err err;
	assert_int_equal(ds_model_load(dir, &m, &err), DS_OK);
	memcpy(id, m->identity, 16);
	ds_model_free(m);
}

/* Identity = config.json + headers: independent of the directory, changes with the seed
 * (recorded in the header metadata), the layout and the config. */
static void test_identity(void **state)
{
	(void)state;
	struct ds_model_config c = tiny_cfg("llama", false);
	char *a = tmpdir(), *b = tmpdir();
	uint8_t ia[16], ib[16];
	write_model(&c, 1, a, DS_HF_BF16, 1);
	write_model(&c, 1, b, DS_HF_BF16, 1);
	load_identity(a, ia);
	load_identity(b, ib);
	assert_memory_equal(ia, ib, 16);
	write_model(&c, 2, b, DS_HF_BF16, 1);
	load_identity(b, ib);
	assert_memory_not_equal(ia, ib, 16);
	write_model(&c, 1, b, DS_HF_BF16, 2);
	load_identity(b, ib);
	assert_memory_not_equal(ia, ib, 16);
	write_model(&c, 1, b, DS_HF_F32, 1);
	load_identity(b, ib);
	assert_memory_not_equal(ia, ib, 16);
	c.rope_theta = 20000.0f;
	write_model(&c, 1, b, DS_HF_BF16, 1);
	load_identity(b, ib);
	assert_memory_not_equal(ia, ib, 16);
	rmrf(a);
	rmrf(b);
	free(a);
	free(b);
}

/* F32 holds the bf16 values exactly; F16 holds them exactly in its normal range. */
static void test_roundtrip_f32_f16(void **state)
{
	(void)state;
	struct ds_model_config c = tiny_cfg("llama", false);
	struct ds_model *s, *m;
	struct ds_err err;
	assert_int_equal(ds_model_synth(&c, 5, &s, &err), DS_OK);
	char *dir = tmpdir();
	write_model(&c, 5, dir, DS_HF_F32, 2);
	assert_int_equal(ds_model_load(dir, &m, &err), DS_OK);
	assert_same_weights(m, s);
	assert_true(m->storage->n_owned > 0); /* converted into owned buffers */
	ds_model_free(m);

	write_model(&c, 5, dir, DS_HF_F16, 1);
	assert_false(access(pjoin(dir, "model.safetensors.index.json"), F_OK) == 0);
	assert_int_equal(ds_model_load(dir, &m, &err), DS_OK);
	const uint16_t *a = m->w.layers[1].w_down, *b = s->w.layers[1].w_down;
	size_t n = (size_t)c.hidden * c.ffn, exact = 0;
	for (size_t i = 0; i < n; i++) {
		float x = ds_bf16_to_f32(b[i]);
		if (fabsf(x) >= 0x1p-14f) {
			assert_int_equal(a[i], b[i]);
			exact++;
		} else {
			assert_true(fabsf(ds_bf16_to_f32(a[i]) - x) <= 0x1p-25f);
		}
	}
	assert_true(exact > n * 9 / 10);
	ds_model_free(m);
	ds_model_free(s);
	rmrf(dir);
	free(dir);
}

/* Overwrites the first values of model.norm.weight in dir/model.safetensors. */
static void poke_norm(const char *dir, const void *vals, size_t bytes)
{
	const char *path = pjoin(dir, "model.safetensors");
	size_t len;
	uint8_t *b = slurp(path, &len);
	struct ds_st_file f;
	struct ds_err err;
	assert_int_equal(ds_st_parse(b, len, path, &f, &err), DS_OK);
	const struct ds_st_tensor *t = ds_st_find(&f, "model.norm.weight");
	assert_non_null(t);
	memcpy((uint8_t *)t->data, vals, bytes);
	ds_st_file_free(&f);
	spit(path, b, len);
	free(b);
}

static void test_f32_f16_round_to_nearest_even(void **state)
{
	(void)state;
	struct ds_model_config c = tiny_cfg("llama", false);
	char *dir = tmpdir();
	struct ds_model *m;
	struct ds_err err;

	/* f32 -> bf16: ties go to even, above/below half go up/down, overflow to inf */
	static const uint32_t f32[] = {0x3F808000u, 0x3F818000u, 0x3F808001u, 0x3F807FFFu,
	                               0xBF818000u, 0x7F7FFFFFu, 0x00000001u, 0x3F800000u};
	static const uint16_t want32[] = {0x3F80, 0x3F82, 0x3F81, 0x3F80,
	                                  0xBF82, 0x7F80, 0x0000, 0x3F80};
	write_model(&c, 3, dir, DS_HF_F32, 1);
	poke_norm(dir, f32, sizeof(f32));
	assert_int_equal(ds_model_load(dir, &m, &err), DS_OK);
	assert_memory_equal(m->w.out_norm, want32, sizeof(want32));
	ds_model_free(m);

	/* f16 -> bf16: 1+2^-10 rounds down, 1+2^-8 ties to even (down), 1+3*2^-8 ties to even
	 * (up), subnormal 2^-24 and inf are exact */
	static const uint16_t f16[] = {0x3C01, 0x3C04, 0x3C0C, 0x3C10, 0x0001, 0x7C00, 0xC000};
	static const uint16_t want16[] = {0x3F80, 0x3F80, 0x3F82, 0x3F82, 0x3380, 0x7F80, 0xC000};
	write_model(&c, 3, dir, DS_HF_F16, 1);
	poke_norm(dir, f16, sizeof(f16));
	assert_int_equal(ds_model_load(dir, &m, &err), DS_OK);
	assert_memory_equal(m->w.out_norm, want16, sizeof(want16));
	ds_model_free(m);
	rmrf(dir);
	free(dir);
}

/* ---- the error table ---- */

static const char *g_name; /* tensor a header patch targets */

static void hp_dtype_q4(json_t *h)
{
	json_object_set_new(json_object_get(h, g_name), "dtype", json_string("Q4_K"));
}

static void hp_drop(json_t *h)
{
	assert_int_equal(json_object_del(h, g_name), 0);
}

static void hp_reshape(json_t *h)
{
	json_object_set_new(json_object_get(h, g_name), "shape", json_pack("[ii]", 32, 128));
}

static void hp_overlap(json_t *h)
{
	json_t *q = json_object_get(json_object_get(h, "model.layers.0.self_attn.q_proj.weight"),
	                            "data_offsets");
	json_t *k = json_object_get(h, g_name);
	json_t *ko = json_object_get(k, "data_offsets");
	json_int_t size =
	    json_integer_value(json_array_get(ko, 1)) - json_integer_value(json_array_get(ko, 0));
	json_int_t b = json_integer_value(json_array_get(q, 0)) + 64;
	json_object_set_new(k, "data_offsets", json_pack("[II]", b, b + size));
}

static void hp_extra(json_t *h)
{
	/* an ignored extra tensor in 8 appended bytes, as older checkpoints carry */
	json_int_t end = 0;
	const char *key;
	json_t *v;
	json_object_foreach(h, key, v)
	{
		json_t *o = json_object_get(v, "data_offsets");
		if (o && json_integer_value(json_array_get(o, 1)) > end)
			end = json_integer_value(json_array_get(o, 1));
	}
	json_object_set_new(h, "model.layers.0.self_attn.rotary_emb.inv_freq",
	                    json_pack("{s:s, s:[i], s:[II]}", "dtype", "F32", "shape", 2,
	                              "data_offsets", end, end + 8));
}

struct fixture {
	char *dir;
	struct ds_model_config cfg;
};

static int fx_setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));
	fx->dir = tmpdir();
	fx->cfg = tiny_cfg("llama", false);
	write_model(&fx->cfg, 9, fx->dir, DS_HF_BF16, 1);
	*state = fx;
	return 0;
}

static int fx_setup_sharded(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));
	fx->dir = tmpdir();
	fx->cfg = tiny_cfg("qwen2", false);
	write_model(&fx->cfg, 9, fx->dir, DS_HF_BF16, 3);
	*state = fx;
	return 0;
}

static int fx_teardown(void **state)
{
	struct fixture *fx = *state;
	rmrf(fx->dir);
	free(fx->dir);
	free(fx);
	return 0;
}

static void test_err_unknown_arch(void **state)
{
	struct fixture *fx = *state;
	cfg_patch(fx->dir, "architectures", json_pack("[s]", "GPT2LMHeadModel"));
	const char *msg = load_fails(fx->dir, DS_ERR_UNSUPPORTED);
	assert_mentions(msg, "config.json");
	assert_mentions(msg, "GPT2LMHeadModel");
}

static void test_err_unknown_dtype(void **state)
{
	struct fixture *fx = *state;
	g_name = "model.layers.1.mlp.up_proj.weight";
	patch_header(pjoin(fx->dir, "model.safetensors"), hp_dtype_q4, 0);
	const char *msg = load_fails(fx->dir, DS_ERR_UNSUPPORTED);
	assert_mentions(msg, "model.safetensors");
	assert_mentions(msg, g_name);
	assert_mentions(msg, "Q4_K");
}

static void test_err_missing_tensor(void **state)
{
	struct fixture *fx = *state;
	g_name = "model.layers.1.self_attn.v_proj.weight";
	patch_header(pjoin(fx->dir, "model.safetensors"), hp_drop, 0);
	const char *msg = load_fails(fx->dir, DS_ERR_NOT_FOUND);
	assert_mentions(msg, "model.safetensors");
	assert_mentions(msg, g_name);
}

static void test_err_shape_mismatch(void **state)
{
	struct fixture *fx = *state;
	g_name = "model.layers.0.self_attn.o_proj.weight"; /* (64, 64) -> (32, 128): same bytes */
	patch_header(pjoin(fx->dir, "model.safetensors"), hp_reshape, 0);
	const char *msg = load_fails(fx->dir, DS_ERR_FORMAT);
	assert_mentions(msg, "model.safetensors");
	assert_mentions(msg, g_name);
	assert_mentions(msg, "[32, 128]");
	assert_mentions(msg, "[64, 64]");
}

static void test_err_truncated(void **state)
{
	struct fixture *fx = *state;
	const char *p = pjoin(fx->dir, "model.safetensors");
	struct stat st;
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(truncate(p, st.st_size - 100), 0);
	const char *msg = load_fails(fx->dir, DS_ERR_FORMAT);
	assert_mentions(msg, "model.safetensors");
	assert_mentions(msg, "lm_head.weight"); /* the last tensor no longer fits */
	assert_mentions(msg, "truncated");
	assert_int_equal(truncate(p, 5), 0);
	assert_mentions(load_fails(fx->dir, DS_ERR_FORMAT), "model.safetensors");
}

static void set_header_len(const char *path, uint64_t v)
{
	size_t len;
	uint8_t *b = slurp(path, &len);
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	spit(path, b, len);
	free(b);
}

static void test_err_bad_header_len(void **state)
{
	struct fixture *fx = *state;
	const char *p = pjoin(fx->dir, "model.safetensors");
	static const uint64_t bad[] = {UINT64_MAX, 1ull << 62, 1ull << 20, 1, 0};
	for (size_t i = 0; i < DS_ARRAY_LEN(bad); i++) {
		set_header_len(p, bad[i]);
		const char *msg = load_fails(fx->dir, DS_ERR_FORMAT);
		assert_mentions(msg, "model.safetensors");
		assert_mentions(msg, "header length");
	}
	/* plausible but short: cuts the JSON */
	set_header_len(p, 40);
	const char *msg = load_fails(fx->dir, DS_ERR_FORMAT);
	assert_mentions(msg, "model.safetensors");
	assert_mentions(msg, "JSON");
}

static void test_err_overlap(void **state)
{
	struct fixture *fx = *state;
	g_name = "model.layers.0.self_attn.k_proj.weight";
	patch_header(pjoin(fx->dir, "model.safetensors"), hp_overlap, 0);
	const char *msg = load_fails(fx->dir, DS_ERR_FORMAT);
	assert_mentions(msg, "model.safetensors");
	assert_mentions(msg, "model.layers.0.self_attn.q_proj.weight");
	assert_mentions(msg, g_name);
	assert_mentions(msg, "overlap");
}

static void test_err_invalid_config_json(void **state)
{
	struct fixture *fx = *state;
	const char *bad = "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 259,";
	spit(pjoin(fx->dir, "config.json"), bad, strlen(bad));
	assert_mentions(load_fails(fx->dir, DS_ERR_FORMAT), "config.json");
	/* wrong type, and a missing field, name the field */
	write_model(&fx->cfg, 9, fx->dir, DS_HF_BF16, 1);
	cfg_patch(fx->dir, "hidden_size", json_string("64"));
	const char *msg = load_fails(fx->dir, DS_ERR_FORMAT);
	assert_mentions(msg, "config.json");
	assert_mentions(msg, "hidden_size");
	cfg_patch(fx->dir, "hidden_size", json_null());
	msg = load_fails(fx->dir, DS_ERR_NOT_FOUND);
	assert_mentions(msg, "hidden_size");
	/* inconsistent values are caught by the config check */
	cfg_patch(fx->dir, "hidden_size", json_integer(64));
	cfg_patch(fx->dir, "num_key_value_heads", json_integer(3));
	msg = load_fails(fx->dir, DS_ERR_INVALID);
	assert_mentions(msg, "config.json");
	assert_mentions(msg, "num_key_value_heads");
	cfg_patch(fx->dir, "num_key_value_heads", json_integer(2));
	cfg_patch(fx->dir, "rope_scaling",
	          json_pack("{s:s, s:f}", "rope_type", "yarn", "factor", 4.0));
	msg = load_fails(fx->dir, DS_ERR_UNSUPPORTED);
	assert_mentions(msg, "rope_scaling");
	assert_mentions(msg, "yarn");
	/* absurd sizes are refused before anything is allocated from them */
	cfg_patch(fx->dir, "rope_scaling", json_null());
	cfg_patch(fx->dir, "num_hidden_layers", json_integer(1000000000));
	msg = load_fails(fx->dir, DS_ERR_UNSUPPORTED);
	assert_mentions(msg, "config.json");
	assert_mentions(msg, "num_hidden_layers");
	unlink(pjoin(fx->dir, "config.json"));
	assert_mentions(load_fails(fx->dir, DS_ERR_NOT_FOUND), "config.json");
}

static void test_err_missing_shard(void **state)
{
	struct fixture *fx = *state;
	const char *shard = "model-00002-of-00003.safetensors";
	assert_int_equal(unlink(pjoin(fx->dir, shard)), 0);
	const char *msg = load_fails(fx->dir, DS_ERR_NOT_FOUND);
	assert_mentions(msg, shard);
	/* the message names a tensor the index puts in that shard */
	json_t *idx = json_load_file(pjoin(fx->dir, "model.safetensors.index.json"), 0, NULL);
	assert_non_null(idx);
	json_t *wm = json_object_get(idx, "weight_map");
	bool named = false;
	for (void *it = json_object_iter(wm); it; it = json_object_iter_next(wm, it))
		if (strcmp(json_string_value(json_object_iter_value(it)), shard) == 0 &&
		    strstr(msg, json_object_iter_key(it)))
			named = true;
	json_decref(idx);
	assert_true(named);
}

static void test_err_missing_in_weight_map(void **state)
{
	struct fixture *fx = *state;
	const char *p = pjoin(fx->dir, "model.safetensors.index.json");
	json_t *idx = json_load_file(p, 0, NULL);
	assert_non_null(idx);
	assert_int_equal(json_object_del(json_object_get(idx, "weight_map"),
	                                 "model.layers.1.self_attn.k_proj.bias"),
	                 0);
	assert_int_equal(json_dump_file(idx, p, JSON_INDENT(2)), 0);
	json_decref(idx);
	const char *msg = load_fails(fx->dir, DS_ERR_NOT_FOUND);
	assert_mentions(msg, "model.safetensors.index.json");
	assert_mentions(msg, "model.layers.1.self_attn.k_proj.bias");
}

static void test_extra_tensor_ignored(void **state)
{
	struct fixture *fx = *state;
	patch_header(pjoin(fx->dir, "model.safetensors"), hp_extra, 8);
	struct ds_model *m, *s;
	struct ds_err err;
	assert_int_equal(ds_model_load(fx->dir, &m, &err), DS_OK);
	assert_int_equal(ds_model_synth(&fx->cfg, 9, &s, &err), DS_OK);
	assert_same_weights(m, s);
	ds_model_free(m);
	ds_model_free(s);
}

/* An odd header length leaves bf16 data 2-byte misaligned: the loader copies instead of
 * pointing into the mapping, with the same values. */
static void test_misaligned_bf16_copied(void **state)
{
	struct fixture *fx = *state;
	const char *p = pjoin(fx->dir, "model.safetensors");
	size_t len;
	uint8_t *b = slurp(p, &len);
	uint64_t hlen = 0;
	for (int i = 7; i >= 0; i--)
		hlen = (hlen << 8) | b[i];
	uint8_t *o = malloc(len + 1);
	memcpy(o, b, 8 + hlen);
	o[8 + hlen] = ' ';
	memcpy(o + 9 + hlen, b + 8 + hlen, len - 8 - hlen);
	for (int i = 0; i < 8; i++)
		o[i] = (uint8_t)((hlen + 1) >> (8 * i));
	spit(p, o, len + 1);
	free(o);
	free(b);
	struct ds_model *m, *s;
	struct ds_err err;
	assert_int_equal(ds_model_load(fx->dir, &m, &err), DS_OK);
	assert_int_equal(ds_model_synth(&fx->cfg, 9, &s, &err), DS_OK);
	assert_int_equal(((uintptr_t)m->w.tok_embd) & 1u, 0);
	assert_int_equal(m->storage->n_owned, ds_tensor_count(&fx->cfg));
	assert_same_weights(m, s);
	ds_model_free(m);
	ds_model_free(s);
}

/* ---- robustness: every truncation and many byte flips of a header, under ASan ---- */

static void test_parse_never_overreads(void **state)
{
	struct fixture *fx = *state;
	size_t len;
	uint8_t *full = slurp(pjoin(fx->dir, "model.safetensors"), &len);
	uint64_t hlen = 0;
	for (int i = 7; i >= 0; i--)
		hlen = (hlen << 8) | full[i];
	struct ds_st_file f;
	struct ds_err err;
	assert_int_equal(ds_st_parse(full, len, "x", &f, &err), DS_OK);
	ds_st_file_free(&f);
	/* exact-size copies, so an overread hits ASan's redzone */
	size_t cuts = 0;
	for (size_t n = 0; n < len; n += (n < 8 + hlen + 64 ? 3 : 997)) {
		uint8_t *b = malloc(n ? n : 1);
		memcpy(b, full, n);
		assert_int_equal(ds_st_parse(b, n, "x", &f, &err), DS_ERR_FORMAT);
		free(b);
		cuts++;
	}
	assert_true(cuts > 100);
	static const uint8_t flips[] = {'"', '}', ']', '9', '-', 0};
	for (size_t i = 8; i < 8 + hlen; i += 5) {
		uint8_t *b = malloc(len);
		memcpy(b, full, len);
		b[i] = flips[i % sizeof(flips)];
		if (ds_st_parse(b, len, "x", &f, &err) == DS_OK)
			ds_st_file_free(&f);
		free(b);
	}
	free(full);
}

/* ---- deferred synthetic directories ---- */

static void test_deferred_llama3_8b_shape(void **state)
{
	(void)state;
	struct ds_model_config c;
	assert_int_equal(ds_model_preset("llama3-8b", &c), DS_OK);
	char *dir = tmpdir();
	struct ds_hf_write_opts o = {.deferred = true};
	struct ds_err err;
	assert_int_equal(ds_model_write_hf(&c, 77, dir, &o, &err), DS_OK);
	assert_int_equal(access(pjoin(dir, "model.safetensors"), F_OK), -1);
	struct ds_model *m;
	assert_int_equal(ds_model_load(dir, &m, &err), DS_OK);
	assert_memory_equal(&m->cfg, &c, sizeof(c)); /* rope_scaling llama3, two eos ids, ... */
	assert_true(m->synthetic && m->deferred);
	assert_true(m->synth_seed == 77);
	assert_null(m->w.tok_embd);
	assert_null(m->w.lm_head);
	assert_null(m->w.out_norm);
	for (int l = 0; l < c.n_layer; l++)
		assert_null(m->w.layers[l].wq);
	/* the identity is ds_model_synth's, computed without the weights */
	struct ds_model *ref;
	assert_int_equal(ds_model_new(&c, &ref, &err), DS_OK);
	ref->synth_seed = 77;
	int n = ds_tensor_count(&c);
	struct ds_tensor_desc *ts = calloc((size_t)n, sizeof(*ts));
	ds_tensor_list(&c, ts);
	ds_synth_identity(ref, ts, n);
	assert_memory_equal(m->identity, ref->identity, 16);
	free(ts);
	ds_model_free(ref);
	ds_model_free(m);
	rmrf(dir);
	free(dir);
}

static void test_deferred_materialize(void **state)
{
	(void)state;
	static const char *arch[] = {"llama", "qwen3"};
	for (int i = 0; i < 2; i++) {
		struct ds_model_config c = tiny_cfg(arch[i], i == 1);
		char *dir = tmpdir();
		struct ds_hf_write_opts o = {.deferred = true};
		struct ds_err err;
		assert_int_equal(ds_model_write_hf(&c, 123, dir, &o, &err), DS_OK);
		struct ds_model *m, *s;
		assert_int_equal(ds_model_load(dir, &m, &err), DS_OK);
		assert_int_equal(ds_model_synth(&c, 123, &s, &err), DS_OK);
		assert_true(m->deferred);
		assert_null(m->w.tok_embd);
		assert_memory_equal(m->identity, s->identity, 16);
		assert_int_equal(ds_model_materialize(m, &err), DS_OK);
		assert_false(m->deferred);
		assert_true(m->synthetic);
		assert_same_weights(m, s);
		assert_int_equal(ds_model_materialize(m, &err), DS_OK); /* no-op now */
		/* a written (non-deferred) copy replaces the marker and loads from the files */
		write_model(&c, 123, dir, DS_HF_BF16, 1);
		assert_int_equal(access(pjoin(dir, "detserve_synth.json"), F_OK), -1);
		struct ds_model *f;
		assert_int_equal(ds_model_load(dir, &f, &err), DS_OK);
		assert_false(f->deferred);
		assert_same_weights(f, s);
		ds_model_free(f);
		ds_model_free(m);
		ds_model_free(s);
		rmrf(dir);
		free(dir);
	}
}

static void test_gguf_path_dispatch(void **state)
{
	(void)state;
	struct ds_model *m = (struct ds_model *)1;
	struct ds_err err = {{0}};
	enum ds_status rv = ds_model_load("/nonexistent/model.gguf", &m, &err);
	assert_int_not_equal(rv, DS_OK);
	assert_null(m);
	assert_mentions(err.msg, "model.gguf");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_roundtrip_bf16_variants),
	    cmocka_unit_test(test_identity),
	    cmocka_unit_test(test_roundtrip_f32_f16),
	    cmocka_unit_test(test_f32_f16_round_to_nearest_even),
	    cmocka_unit_test_setup_teardown(test_err_unknown_arch, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_err_unknown_dtype, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_err_missing_tensor, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_err_shape_mismatch, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_err_truncated, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_err_bad_header_len, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_err_overlap, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_err_invalid_config_json, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_err_missing_shard, fx_setup_sharded, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_err_missing_in_weight_map, fx_setup_sharded,
	                                    fx_teardown),
	    cmocka_unit_test_setup_teardown(test_extra_tensor_ignored, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_misaligned_bf16_copied, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_parse_never_overreads, fx_setup, fx_teardown),
	    cmocka_unit_test(test_deferred_llama3_8b_shape),
	    cmocka_unit_test(test_deferred_materialize),
	    cmocka_unit_test(test_gguf_path_dispatch),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
