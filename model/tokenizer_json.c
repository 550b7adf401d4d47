/* tokenizer_json.c - Hugging Face tokenizer.json (+ tokenizer_config.json) loading, and the
 * byte-level fallback tokenizer that detserve-mkmodel writes for synthetic models.
 *
 * Only byte-level BPE is accepted (GPT-2, Llama-3, Qwen2/3, SmolLM2); anything whose
 * behavior we do not reproduce exactly (Unigram, WordPiece, byte_fallback, subword
 * prefixes, unknown normalizers or pre-tokenizers) is refused with DS_ERR_UNSUPPORTED
 * naming the field, rather than encoded differently from the reference. The in-memory
 * byte-level tokenizer is built by generating the same JSON the writer emits and loading
 * it, so the two can never disagree. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <jansson.h>

#include "tokenizer_internal.h"

/* ---- pieces of the JSON ---- */

static const char *jstr(const json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

static bool jbool(const json_t *o, const char *key, bool dflt)
{
	const json_t *v = json_object_get(o, key);
	return json_is_boolean(v) ? json_boolean_value(v) : dflt;
}

/* null, "" and absent all mean "no prefix/suffix" */
static bool jempty(const json_t *o, const char *key)
{
	const json_t *v = json_object_get(o, key);
	return !v || json_is_null(v) || (json_is_string(v) && json_string_length(v) == 0);
}

static enum ds_status load_normalizer(struct ds_tok_builder *b, const json_t *n, struct ds_err *err)
{
	if (!n || json_is_null(n))
		return DS_OK;
	const char *type = jstr(n, "type");
	if (type && strcmp(type, "NFC") == 0) {
		b->nfc = true;
		return DS_OK;
	}
	if (type && strcmp(type, "Sequence") == 0) {
		const json_t *list = json_object_get(n, "normalizers");
		size_t i;
		const json_t *x;
		if (!json_is_array(list))
			return ds_errf(err, DS_ERR_FORMAT, "%s: normalizer.normalizers is not an array", b->src);
		json_array_foreach(list, i, x) {
			enum ds_status rv = load_normalizer(b, x, err);
			if (rv != DS_OK)
				return rv;
		}
		return DS_OK;
	}
	return ds_errf(err, DS_ERR_UNSUPPORTED, "%s: normalizer type %s is not supported (only NFC)",
		       b->src, type ? type : "(missing)");
}

static enum ds_status load_split(struct ds_tok_builder *b, const json_t *p, struct ds_err *err)
{
	static const char *const names[] = { "Isolated", "Removed", "MergedWithPrevious",
					     "MergedWithNext", "Contiguous" };
	const json_t *pat = json_object_get(p, "pattern");
	const char *re = jstr(pat, "Regex"), *lit = jstr(pat, "String");
	const char *beh = jstr(p, "behavior");
	int k = 0;
	while (beh && k < (int)DS_ARRAY_LEN(names) && strcmp(beh, names[k]) != 0)
		k++;
	if (!re && !lit)
		return ds_errf(err, DS_ERR_FORMAT, "%s: Split pre-tokenizer without pattern.Regex or pattern.String",
			       b->src);
	if (!beh || k == (int)DS_ARRAY_LEN(names))
		return ds_errf(err, DS_ERR_UNSUPPORTED, "%s: Split behavior %s is not supported", b->src,
			       beh ? beh : "(missing)");
	return ds_tok_builder_step(b, DS_STEP_SPLIT, re ? re : lit, re == NULL,
				   (enum ds_tok_split_behavior)k, jbool(p, "invert", false), false, err);
}

static enum ds_status load_pretok(struct ds_tok_builder *b, const json_t *p, bool *bytelevel,
				  struct ds_err *err)
{
	if (!p || json_is_null(p))
		return DS_OK;
	const char *type = jstr(p, "type");
	if (!type)
		return ds_errf(err, DS_ERR_FORMAT, "%s: pre_tokenizer without a type", b->src);
	if (strcmp(type, "Sequence") == 0) {
		const json_t *list = json_object_get(p, "pretokenizers");
		size_t i;
		const json_t *x;
		if (!json_is_array(list))
			return ds_errf(err, DS_ERR_FORMAT, "%s: pre_tokenizer.pretokenizers is not an array",
				       b->src);
		json_array_foreach(list, i, x) {
			enum ds_status rv = load_pretok(b, x, bytelevel, err);
			if (rv != DS_OK)
				return rv;
		}
		return DS_OK;
	}
	if (strcmp(type, "Split") == 0)
		return load_split(b, p, err);
	if (strcmp(type, "Digits") == 0) {
		/* a char::is_numeric split: Isolated per digit, or Contiguous runs (= \p{N}+) */
		bool each = jbool(p, "individual_digits", false);
		return ds_tok_builder_step(b, DS_STEP_SPLIT, each ? "\\p{N}" : "\\p{N}+", false,
					   DS_SPLIT_ISOLATED, false, false, err);
	}
	if (strcmp(type, "ByteLevel") == 0) {
		*bytelevel = true;
		return ds_tok_builder_step(b, DS_STEP_BYTELEVEL,
					   jbool(p, "use_regex", true) ? ds_tok_re_gpt2 : NULL, false,
					   DS_SPLIT_ISOLATED, false, jbool(p, "add_prefix_space", true),
					   err);
	}
	return ds_errf(err, DS_ERR_UNSUPPORTED, "%s: pre_tokenizer type %s is not supported", b->src, type);
}

static int added_or_vocab_id(const json_t *root, const char *content)
{
	size_t i;
	const json_t *x;
	json_array_foreach(json_object_get(root, "added_tokens"), i, x) {
		const char *c = jstr(x, "content");
		if (c && strcmp(c, content) == 0)
			return (int)json_integer_value(json_object_get(x, "id"));
	}
	const json_t *v = json_object_get(json_object_get(json_object_get(root, "model"), "vocab"), content);
	return json_is_integer(v) ? (int)json_integer_value(v) : -1;
}

/* TemplateProcessing's "single" template: special tokens before/after $A. */
static enum ds_status load_template(struct ds_tok_builder *b, const json_t *root, const json_t *pp,
				    struct ds_err *err)
{
	const json_t *single = json_object_get(pp, "single");
	const json_t *specials = json_object_get(pp, "special_tokens");
	size_t i;
	const json_t *x;
	bool after = false;
	json_array_foreach(single, i, x) {
		if (json_object_get(x, "Sequence")) {
			after = true;
			continue;
		}
		const char *name = jstr(json_object_get(x, "SpecialToken"), "id");
		if (!name)
			return ds_errf(err, DS_ERR_FORMAT, "%s: post_processor.single[%zu] is neither Sequence nor SpecialToken",
				       b->src, i);
		const json_t *ids = json_object_get(json_object_get(specials, name), "ids");
		size_t j;
		const json_t *id;
		json_array_foreach(ids, j, id) {
			int32_t *arr = after ? b->suffix : b->prefix;
			int *n = after ? &b->n_suffix : &b->n_prefix;
			if (*n == DS_TOK_MAX_AFFIX)
				return ds_errf(err, DS_ERR_UNSUPPORTED, "%s: post_processor adds too many tokens",
					       b->src);
			arr[(*n)++] = (int32_t)json_integer_value(id);
		}
		if (json_array_size(ids) == 0) {
			int id2 = added_or_vocab_id(root, name);
			if (id2 < 0)
				return ds_errf(err, DS_ERR_FORMAT, "%s: post_processor names unknown token %s",
					       b->src, name);
			int32_t *arr = after ? b->suffix : b->prefix;
			int *n = after ? &b->n_suffix : &b->n_prefix;
			if (*n < DS_TOK_MAX_AFFIX)
				arr[(*n)++] = id2;
		}
	}
	return DS_OK;
}

static enum ds_status load_post(struct ds_tok_builder *b, const json_t *root, const json_t *pp,
				struct ds_err *err)
{
	if (!pp || json_is_null(pp))
		return DS_OK;
	const char *type = jstr(pp, "type");
	if (type && strcmp(type, "ByteLevel") == 0)
		return DS_OK; /* offsets only */
	if (type && strcmp(type, "TemplateProcessing") == 0)
		return load_template(b, root, pp, err);
	if (type && strcmp(type, "Sequence") == 0) {
		size_t i;
		const json_t *x;
		json_array_foreach(json_object_get(pp, "processors"), i, x) {
			enum ds_status rv = load_post(b, root, x, err);
			if (rv != DS_OK)
				return rv;
		}
		return DS_OK;
	}
	return ds_errf(err, DS_ERR_UNSUPPORTED, "%s: post_processor type %s is not supported", b->src,
		       type ? type : "(missing)");
}

static bool decoder_is_bytelevel(const json_t *d)
{
	const char *type = jstr(d, "type");
	if (!type)
		return false;
	if (strcmp(type, "ByteLevel") == 0)
		return true;
	if (strcmp(type, "Sequence") == 0) {
		const json_t *list = json_object_get(d, "decoders");
		return json_array_size(list) == 1 && decoder_is_bytelevel(json_array_get(list, 0));
	}
	return false;
}

static enum ds_status load_model(struct ds_tok_builder *b, const json_t *model, struct ds_err *err)
{
	enum ds_status rv;
	const json_t *vocab = json_object_get(model, "vocab");
	const char *key;
	const json_t *v;
	json_object_foreach((json_t *)vocab, key, v) {
		if (!json_is_integer(v))
			return ds_errf(err, DS_ERR_FORMAT, "%s: model.vocab[\"%s\"] is not an integer", b->src, key);
		if ((rv = ds_tok_builder_set(b, (int)json_integer_value(v), key, strlen(key), DS_TOKF_MODEL,
					     err)) != DS_OK)
			return rv;
	}
	const json_t *merges = json_object_get(model, "merges");
	size_t i;
	const json_t *m;
	json_array_foreach(merges, i, m) {
		if (json_is_string(m)) {
			const char *s = json_string_value(m), *sp = strchr(s, ' ');
			if (!sp || strchr(sp + 1, ' '))
				return ds_errf(err, DS_ERR_FORMAT, "%s: model.merges[%zu] \"%s\" is not \"left right\"",
					       b->src, i, s);
			rv = ds_tok_builder_merge(b, s, (size_t)(sp - s), sp + 1, strlen(sp + 1), err);
		} else if (json_is_array(m) && json_array_size(m) == 2 &&
			   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
			const json_t *l = json_array_get(m, 0), *r = json_array_get(m, 1);
			rv = ds_tok_builder_merge(b, json_string_value(l), json_string_length(l),
						  json_string_value(r), json_string_length(r), err);
		} else {
			return ds_errf(err, DS_ERR_FORMAT, "%s: model.merges[%zu] is neither a string nor a pair",
				       b->src, i);
		}
		if (rv != DS_OK)
			return rv;
	}
	return DS_OK;
}

/* ---- tokenizer_config.json ---- */

static int config_token_id(const json_t *root, const json_t *cfg, const char *key)
{
	const json_t *v = json_object_get(cfg, key);
	const char *s = json_is_string(v) ? json_string_value(v) : jstr(v, "content");
	return s ? added_or_vocab_id(root, s) : -1;
}

static void load_config(struct ds_tok_builder *b, const json_t *root, const json_t *cfg)
{
	if (!cfg)
		return;
	b->bos_id = config_token_id(root, cfg, "bos_token");
	b->eos_id = config_token_id(root, cfg, "eos_token");
	b->pad_id = config_token_id(root, cfg, "pad_token");
	/* the post-processor, when there is one, is what `tokenizers` applies */
	if (b->n_prefix == 0 && b->n_suffix == 0) {
		if (jbool(cfg, "add_bos_token", false) && b->bos_id >= 0)
			b->prefix[b->n_prefix++] = b->bos_id;
		if (jbool(cfg, "add_eos_token", false) && b->eos_id >= 0)
			b->suffix[b->n_suffix++] = b->eos_id;
	}
}

/* ---- loading ---- */

static enum ds_status load_root(const json_t *root, const json_t *cfg, const char *src,
				struct ds_tokenizer **out, struct ds_err *err)
{
	enum ds_status rv;
	struct ds_tok_builder b;
	const json_t *model = json_object_get(root, "model");
	if (!json_is_object(model))
		return ds_errf(err, DS_ERR_FORMAT, "%s: no \"model\" object", src);
	const char *type = jstr(model, "type");
	if (type && strcmp(type, "BPE") != 0)
		return ds_errf(err, DS_ERR_UNSUPPORTED,
			       "%s: model.type %s is not supported (only byte-level BPE)", src, type);
	if (!json_is_object(json_object_get(model, "vocab")))
		return ds_errf(err, DS_ERR_FORMAT, "%s: model.vocab is missing or not an object", src);
	if (!json_is_array(json_object_get(model, "merges")))
		return ds_errf(err, DS_ERR_FORMAT, "%s: model.merges is missing: BPE needs merges", src);
	if (jbool(model, "byte_fallback", false))
		return ds_errf(err, DS_ERR_UNSUPPORTED,
			       "%s: model.byte_fallback (SentencePiece-style BPE) is not supported", src);
	if (!jempty(model, "continuing_subword_prefix") || !jempty(model, "end_of_word_suffix"))
		return ds_errf(err, DS_ERR_UNSUPPORTED,
			       "%s: model.continuing_subword_prefix / end_of_word_suffix are not supported", src);
	const json_t *dropout = json_object_get(model, "dropout");
	if (json_is_number(dropout) && json_number_value(dropout) > 0)
		return ds_errf(err, DS_ERR_UNSUPPORTED, "%s: model.dropout is not supported", src);
	if (!decoder_is_bytelevel(json_object_get(root, "decoder")))
		return ds_errf(err, DS_ERR_UNSUPPORTED,
			       "%s: decoder is not ByteLevel: only byte-level BPE is supported", src);

	/* ids: the model vocab and the added tokens */
	long max_id = -1;
	const char *key;
	const json_t *v;
	json_object_foreach((json_t *)json_object_get(model, "vocab"), key, v)
		max_id = DS_MAX(max_id, (long)json_integer_value(v));
	const json_t *added = json_object_get(root, "added_tokens");
	size_t i;
	json_array_foreach(added, i, v)
		max_id = DS_MAX(max_id, (long)json_integer_value(json_object_get(v, "id")));
	if ((rv = ds_tok_builder_init(&b, src, (int)DS_MIN(max_id + 1, (long)INT32_MAX), err)) != DS_OK)
		return rv;
	b.need_merges = true;
	b.ignore_merges = jbool(model, "ignore_merges", false);
	if ((rv = load_model(&b, model, err)) != DS_OK)
		goto fail;
	json_array_foreach(added, i, v) {
		const char *content = jstr(v, "content");
		const json_t *id = json_object_get(v, "id");
		if (!content || !json_is_integer(id)) {
			rv = ds_errf(err, DS_ERR_FORMAT, "%s: added_tokens[%zu] lacks id or content", src, i);
			goto fail;
		}
		uint32_t f = DS_TOKF_ADDED | (jbool(v, "special", false) ? DS_TOKF_SPECIAL : 0) |
			     (jbool(v, "lstrip", false) ? DS_TOKF_LSTRIP : 0) |
			     (jbool(v, "rstrip", false) ? DS_TOKF_RSTRIP : 0);
		if ((rv = ds_tok_builder_set(&b, (int)json_integer_value(id), content, strlen(content), f,
					     err)) != DS_OK)
			goto fail;
	}
	if ((rv = load_normalizer(&b, json_object_get(root, "normalizer"), err)) != DS_OK)
		goto fail;
	bool bytelevel = false;
	if ((rv = load_pretok(&b, json_object_get(root, "pre_tokenizer"), &bytelevel, err)) != DS_OK)
		goto fail;
	if ((rv = load_post(&b, root, json_object_get(root, "post_processor"), err)) != DS_OK)
		goto fail;
	load_config(&b, root, cfg);
	return ds_tok_build(&b, out, err);
fail:
	ds_tok_builder_free(&b);
	return rv;
}

static enum ds_status load_json_file(const char *path, json_t **out, struct ds_err *err)
{
	json_error_t je;
	*out = json_load_file(path, 0, &je);
	if (*out)
		return DS_OK;
	if (je.line < 0 || access(path, R_OK) != 0)
		return ds_errf(err, DS_ERR_IO, "%s: cannot read: %s", path, je.text);
	return ds_errf(err, DS_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", path, je.line,
		       je.column, je.text);
}

enum ds_status ds_tokenizer_load_json(const char *json_path, const char *config_path,
				      struct ds_tokenizer **out, struct ds_err *err)
{
	*out = NULL;
	json_t *root = NULL, *cfg = NULL;
	enum ds_status rv = load_json_file(json_path, &root, err);
	if (rv == DS_OK && config_path)
		rv = load_json_file(config_path, &cfg, err);
	if (rv == DS_OK && !json_is_object(root))
		rv = ds_errf(err, DS_ERR_FORMAT, "%s: top level is not an object", json_path);
	if (rv == DS_OK)
		rv = load_root(root, json_is_object(cfg) ? cfg : NULL, json_path, out, err);
	json_decref(root);
	json_decref(cfg);
	return rv;
}

/* ---- the byte-level fallback ---- */

static int special_name(const struct ds_model_config *cfg, int id, char *buf, size_t cap)
{
	if (id == cfg->bos_id)
		return snprintf(buf, cap, "<|begin_of_text|>");
	for (int k = 0; k < cfg->n_eos; k++)
		if (cfg->eos_ids[k] == id)
			return k == 0 ? snprintf(buf, cap, "<|end_of_text|>")
			       : k == 1 ? snprintf(buf, cap, "<|eot_id|>")
					: snprintf(buf, cap, "<|eos_%d|>", k);
	return 0;
}

static enum ds_status bytelevel_json(const struct ds_model_config *cfg, json_t **tok_out,
				     json_t **cfg_out, struct ds_err *err)
{
	int n = cfg->vocab_size;
	*tok_out = *cfg_out = NULL;
	if (n < 256 || n > (1 << 24))
		return ds_errf(err, DS_ERR_INVALID, "byte-level tokenizer: vocab_size %d cannot hold 256 bytes",
			       n);
	if (cfg->bos_id >= n || cfg->n_eos < 0 || cfg->n_eos > DS_MAX_EOS)
		return ds_errf(err, DS_ERR_INVALID, "byte-level tokenizer: bos_id %d / n_eos %d out of range",
			       cfg->bos_id, cfg->n_eos);
	char *taken = calloc((size_t)n, 1);
	json_t *root = json_object(), *vocab = json_object(), *added = json_array();
	json_t *tc = json_object();
	if (!taken || !root || !vocab || !added || !tc)
		goto nomem;
	int n_special = 0;
	for (int k = -1; k < cfg->n_eos; k++) {
		int id = k < 0 ? cfg->bos_id : cfg->eos_ids[k];
		if (id < 0)
			continue;
		if (id >= n) {
			free(taken);
			json_decref(root);
			json_decref(vocab);
			json_decref(added);
			json_decref(tc);
			return ds_errf(err, DS_ERR_INVALID, "byte-level tokenizer: eos id %d >= vocab_size %d",
				       id, n);
		}
		n_special += !taken[id];
		taken[id] = 1;
	}
	if (n < 256 + n_special) {
		free(taken);
		json_decref(root);
		json_decref(vocab);
		json_decref(added);
		json_decref(tc);
		return ds_errf(err, DS_ERR_INVALID,
			       "byte-level tokenizer: vocab_size %d cannot hold 256 bytes and %d specials", n,
			       n_special);
	}
	int id = 0, pad = -1, reserved = 0;
	for (int byte = 0; byte < 256; byte++, id++) {
		while (taken[id])
			id++;
		char s[4];
		uint8_t raw = (uint8_t)byte;
		ds_tok_map(&raw, 1, s);
		taken[id] = 2;
		json_object_set_new(vocab, s, json_integer(id));
	}
	for (id = 0; id < n; id++) {
		char name[64];
		if (taken[id] == 2)
			continue;
		if (!special_name(cfg, id, name, sizeof(name))) {
			if (pad < 0 && id >= 256) {
				pad = id;
				snprintf(name, sizeof(name), "<|pad|>");
			} else {
				snprintf(name, sizeof(name), "<|reserved_special_token_%d|>", reserved++);
			}
		}
		json_t *a = json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content", name,
				      "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0,
				      "special", 1);
		if (!a || json_array_append_new(added, a) != 0)
			goto nomem;
	}
	free(taken);
	taken = NULL;
	json_t *model = json_pack("{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b, s:o, s:[]}", "type", "BPE",
				  "dropout", "unk_token", "continuing_subword_prefix",
				  "end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0,
				  "ignore_merges", 0, "vocab", vocab, "merges");
	vocab = NULL;
	json_t *bl = json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0,
			       "trim_offsets", 1, "use_regex", 0);
	json_t *dec = json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 1,
				"trim_offsets", 1, "use_regex", 1);
	json_t *post = json_null();
	if (cfg->bos_id >= 0) {
		const char *b = "<|begin_of_text|>";
		post = json_pack("{s:s, s:[{s:{s:s,s:i}},{s:{s:s,s:i}}], s:[{s:{s:s,s:i}},{s:{s:s,s:i}},{s:{s:s,s:i}},{s:{s:s,s:i}}], s:{s:{s:s, s:[i], s:[s]}}}",
				 "type", "TemplateProcessing",
				 "single", "SpecialToken", "id", b, "type_id", 0, "Sequence", "id", "A", "type_id", 0,
				 "pair", "SpecialToken", "id", b, "type_id", 0, "Sequence", "id", "A", "type_id", 0,
				 "SpecialToken", "id", b, "type_id", 1, "Sequence", "id", "B", "type_id", 1,
				 "special_tokens", b, "id", b, "ids", cfg->bos_id, "tokens", b);
	}
	if (!model || !bl || !dec || !post)
		goto nomem2;
	json_object_set_new(root, "version", json_string("1.0"));
	json_object_set_new(root, "truncation", json_null());
	json_object_set_new(root, "padding", json_null());
	json_object_set_new(root, "added_tokens", added);
	added = NULL;
	json_object_set_new(root, "normalizer", json_null());
	json_object_set_new(root, "pre_tokenizer", bl);
	json_object_set_new(root, "post_processor", post);
	json_object_set_new(root, "decoder", dec);
	json_object_set_new(root, "model", model);

	char name[64];
	if (cfg->bos_id >= 0 && special_name(cfg, cfg->bos_id, name, sizeof(name)))
		json_object_set_new(tc, "bos_token", json_string(name));
	if (cfg->n_eos > 0 && cfg->eos_ids[0] >= 0 && special_name(cfg, cfg->eos_ids[0], name, sizeof(name)))
		json_object_set_new(tc, "eos_token", json_string(name));
	if (pad >= 0)
		json_object_set_new(tc, "pad_token", json_string("<|pad|>"));
	json_object_set_new(tc, "add_bos_token", json_boolean(cfg->bos_id >= 0));
	json_object_set_new(tc, "add_eos_token", json_false());
	json_object_set_new(tc, "clean_up_tokenization_spaces", json_false());
	json_object_set_new(tc, "model_max_length", json_integer(cfg->max_pos > 0 ? cfg->max_pos : 1 << 20));
	json_object_set_new(tc, "tokenizer_class", json_string("PreTrainedTokenizerFast"));
	*tok_out = root;
	*cfg_out = tc;
	return DS_OK;
nomem2:
	json_decref(model);
	json_decref(bl);
	json_decref(dec);
	json_decref(post);
nomem:
	free(taken);
	json_decref(root);
	json_decref(vocab);
	json_decref(added);
	json_decref(tc);
	return ds_errf(err, DS_ERR_NOMEM, "byte-level tokenizer: out of memory");
}

enum ds_status ds_tokenizer_init_bytelevel(const struct ds_model_config *cfg,
					   struct ds_tokenizer **out, struct ds_err *err)
{
	json_t *root, *tc;
	*out = NULL;
	enum ds_status rv = bytelevel_json(cfg, &root, &tc, err);
	if (rv != DS_OK)
		return rv;
	rv = load_root(root, tc, "byte-level tokenizer", out, err);
	json_decref(root);
	json_decref(tc);
	return rv;
}

enum ds_status ds_tokenizer_write_bytelevel_json(const char *dir, const struct ds_model_config *cfg,
						 struct ds_err *err)
{
	json_t *root, *tc;
	enum ds_status rv = bytelevel_json(cfg, &root, &tc, err);
	if (rv != DS_OK)
		return rv;
	char p[4096];
	snprintf(p, sizeof(p), "%s/tokenizer.json", dir);
	if (json_dump_file(root, p, JSON_INDENT(1) | JSON_ENSURE_ASCII) != 0) {
		rv = ds_errf(err, DS_ERR_IO, "%s: cannot write", p);
	} else {
		snprintf(p, sizeof(p), "%s/tokenizer_config.json", dir);
		if (json_dump_file(tc, p, JSON_INDENT(2)) != 0)
			rv = ds_errf(err, DS_ERR_IO, "%s: cannot write", p);
	}
	json_decref(root);
	json_decref(tc);
	return rv;
}
