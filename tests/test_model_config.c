/* test_model_config.c - config.json parsing: variants as found in real Llama-3.1, Mistral,
 * Qwen2.5 and Qwen3 checkpoints, refusals of what we do not implement, format -> parse
 * round trip, and robustness against truncated or edited text. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include "hf.h"

static void assert_mentions(const char *msg, const char *what)
{
	if (!strstr(msg, what))
		print_error("message \"%s\" does not mention \"%s\"\n", msg, what);
	assert_non_null(strstr(msg, what));
}

static struct ds_model_config tiny_cfg(const char *arch, bool tie)
{
	struct ds_model_config c;
	assert_int_equal(ds_model_preset("tiny", &c), DS_OK);
	assert_int_equal(ds_hf_config_set_arch(&c, arch), DS_OK);
	c.tie_embeddings = tie;
	return c;
}

static enum ds_status parse_cfg(const char *json, struct ds_model_config *c, struct ds_err *err)
{
	return ds_hf_config_parse(json, strlen(json), "x/config.json", c, err);
}

static void test_config_variants(void **state)
{
	(void)state;
	struct ds_model_config c;
	struct ds_err err;
	/* Llama-3.1 style: llama3 rope scaling, eos list, no head_dim key */
	assert_int_equal(
	    parse_cfg("{\"architectures\":[\"LlamaForCausalLM\"],\"vocab_size\":128256,"
	              "\"hidden_size\":4096,\"num_hidden_layers\":32,"
	              "\"num_attention_heads\":32,\"num_key_value_heads\":8,"
	              "\"intermediate_size\":14336,\"max_position_embeddings\":131072,"
	              "\"rms_norm_eps\":1e-05,\"rope_theta\":500000.0,"
	              "\"rope_scaling\":{\"factor\":8.0,\"low_freq_factor\":1.0,"
	              "\"high_freq_factor\":4.0,\"original_max_position_embeddings\":8192,"
	              "\"rope_type\":\"llama3\"},\"bos_token_id\":128000,"
	              "\"eos_token_id\":[128001,128008,128009],\"hidden_act\":\"silu\"}",
	              &c, &err),
	    DS_OK);
	assert_string_equal(c.arch, "LlamaForCausalLM");
	assert_int_equal(c.head_dim, 128);
	assert_int_equal(c.rope_scaling, DS_ROPE_LLAMA3);
	assert_true(c.rope_factor == 8.0f && c.rope_high_freq_factor == 4.0f);
	assert_int_equal(c.rope_orig_max_pos, 8192);
	assert_int_equal(c.n_eos, 3);
	assert_int_equal(c.eos_ids[2], 128009);
	assert_true(c.rms_eps == 1e-5f && c.rope_theta == 500000.0f);
	assert_false(c.attn_bias || c.qk_norm || c.tie_embeddings);
	/* Mistral-7B-v0.1: an active sliding window caps the context; no kv heads key */
	assert_int_equal(
	    parse_cfg("{\"architectures\":[\"MistralForCausalLM\"],\"vocab_size\":32000,"
	              "\"hidden_size\":4096,\"num_hidden_layers\":32,"
	              "\"num_attention_heads\":32,\"intermediate_size\":14336,"
	              "\"max_position_embeddings\":32768,\"sliding_window\":4096,"
	              "\"bos_token_id\":null,\"eos_token_id\":2}",
	              &c, &err),
	    DS_OK);
	assert_int_equal(c.max_pos, 4096);
	assert_int_equal(c.n_kv_head, 32);
	assert_int_equal(c.bos_id, -1);
	assert_int_equal(c.n_eos, 1);
	/* Qwen2.5: bias without a key, an inactive window, tied */
	assert_int_equal(
	    parse_cfg("{\"architectures\":[\"Qwen2ForCausalLM\"],\"vocab_size\":151936,"
	              "\"hidden_size\":896,\"num_hidden_layers\":24,"
	              "\"num_attention_heads\":14,\"num_key_value_heads\":2,"
	              "\"intermediate_size\":4864,\"max_position_embeddings\":32768,"
	              "\"use_sliding_window\":false,\"sliding_window\":4096,"
	              "\"tie_word_embeddings\":true,\"rope_scaling\":null}",
	              &c, &err),
	    DS_OK);
	assert_true(c.attn_bias && c.tie_embeddings && !c.qk_norm);
	assert_int_equal(c.max_pos, 32768);
	assert_int_equal(c.head_dim, 64);
	/* model_type alone; Qwen3's explicit head_dim differs from hidden/heads */
	assert_int_equal(
	    parse_cfg("{\"model_type\":\"qwen3\",\"vocab_size\":151936,"
	              "\"hidden_size\":1024,\"num_hidden_layers\":28,"
	              "\"num_attention_heads\":16,\"num_key_value_heads\":8,\"head_dim\":128,"
	              "\"intermediate_size\":3072,\"attention_bias\":false}",
	              &c, &err),
	    DS_OK);
	assert_string_equal(c.arch, "Qwen3ForCausalLM");
	assert_true(c.qk_norm && !c.attn_bias);
	assert_int_equal(c.head_dim, 128);
	/* refused: another activation, an MLP bias, another rope type, too many eos ids */
	static const char *bad[] = {
	    "{\"model_type\":\"llama\",\"vocab_size\":8,\"hidden_size\":8,\"num_hidden_layers\":1,"
	    "\"num_attention_heads\":1,\"intermediate_size\":8,\"hidden_act\":\"gelu\"}",
	    "{\"model_type\":\"llama\",\"vocab_size\":8,\"hidden_size\":8,\"num_hidden_layers\":1,"
	    "\"num_attention_heads\":1,\"intermediate_size\":8,\"mlp_bias\":true}",
	    "{\"model_type\":\"llama\",\"vocab_size\":8,\"hidden_size\":8,\"num_hidden_layers\":1,"
	    "\"num_attention_heads\":1,\"intermediate_size\":8,\"rope_scaling\":{\"type\":"
	    "\"linear\","
	    "\"factor\":2.0}}",
	    "{\"model_type\":\"llama\",\"vocab_size\":8,\"hidden_size\":8,\"num_hidden_layers\":1,"
	    "\"num_attention_heads\":1,\"intermediate_size\":8,\"eos_token_id\":[1,2,3,4,5,6,7,8,9]"
	    "}",
	    "{\"model_type\":\"gpt2\",\"vocab_size\":8}",
	};
	static const char *field[] = {"gelu", "mlp_bias", "linear", "eos_token_id", "gpt2"};
	for (size_t i = 0; i < DS_ARRAY_LEN(bad); i++) {
		assert_int_equal(parse_cfg(bad[i], &c, &err), DS_ERR_UNSUPPORTED);
		assert_mentions(err.msg, "x/config.json");
		assert_mentions(err.msg, field[i]);
	}
}

/* Every prefix and many single-byte edits of a config.json parse or fail cleanly. */
static void test_config_parse_never_crashes(void **state)
{
	(void)state;
	struct ds_model_config c0 = tiny_cfg("qwen3", true), c;
	c0.rope_scaling = DS_ROPE_LLAMA3;
	c0.rope_factor = 8.0f;
	c0.rope_low_freq_factor = 1.0f;
	c0.rope_high_freq_factor = 4.0f;
	c0.rope_orig_max_pos = 512;
	c0.n_eos = 2;
	c0.eos_ids[1] = 258;
	char *text;
	struct ds_err err;
	assert_int_equal(ds_hf_config_format(&c0, "bfloat16", &text, &err), DS_OK);
	assert_int_equal(parse_cfg(text, &c, &err), DS_OK);
	assert_memory_equal(&c, &c0, sizeof(c)); /* format -> parse is the identity */
	size_t n = strlen(text);
	for (size_t k = 0; k + 1 < n; k++) { /* all but the trailing newline */
		char *b = malloc(k ? k : 1);
		memcpy(b, text, k);
		assert_int_not_equal(ds_hf_config_parse(b, k, "p", &c, &err), DS_OK);
		free(b);
	}
	static const char flips[] = "\"{}[]:,0-9.etnx";
	for (size_t i = 0; i < n; i++) {
		char *b = malloc(n);
		memcpy(b, text, n);
		b[i] = flips[i % (sizeof(flips) - 1)];
		(void)ds_hf_config_parse(b, n, "p", &c, &err);
		free(b);
	}
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_config_variants),
	    cmocka_unit_test(test_config_parse_never_crashes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
