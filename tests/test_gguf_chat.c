/* test_gguf_chat.c - model/chat_template.c against jinja2's rendering of real templates.
 *
 * tests/fixtures/chat_templates.json (tests/gguf/make_chat_fixture.py) holds SmolLM2's own
 * template, Qwen2.5-style / bare ChatML, Llama-3 / 3.1 templates, two unrecognised families,
 * message lists and what jinja2 renders; every rendering must match byte for byte. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chat_template.h"

#ifndef DS_SOURCE_ROOT
#define DS_SOURCE_ROOT "."
#endif

static json_t *fixture(void)
{
	json_error_t jerr;
	json_t *root =
	    json_load_file(DS_SOURCE_ROOT "/tests/fixtures/chat_templates.json", 0, &jerr);
	if (!root)
		fail_msg("fixture: %s", jerr.text);
	return root;
}

static void test_render_matches_jinja(void **state)
{
	(void)state;
	json_t *root = fixture(), *tmpls = json_object_get(root, "templates");
	int rendered = 0, rejected = 0;
	for (size_t i = 0; i < json_array_size(tmpls); i++) {
		json_t *tj = json_array_get(tmpls, i);
		const char *name = json_string_value(json_object_get(tj, "name"));
		json_t *text = json_object_get(tj, "template");
		const char *family = json_string_value(json_object_get(tj, "family"));
		struct ds_chat_template t;
		struct ds_err err = {{0}};
		enum ds_status s =
		    ds_chat_template_init(&t, json_string_value(text), json_string_length(text),
		                          json_string_value(json_object_get(tj, "bos")), &err);
		if (!family) {
			assert_int_equal(s, DS_ERR_PRECONDITION);
			assert_non_null(strstr(err.msg, "not recognised"));
			struct ds_chat_msg m = {"user", "x"};
			char *out = (char *)1;
			assert_int_equal(ds_chat_render(&t, &m, 1, true, &out, NULL, &err),
			                 DS_ERR_PRECONDITION);
			assert_null(out);
			rejected++;
			continue;
		}
		if (s)
			fail_msg("%s: %s", name, err.msg);
		assert_int_equal(t.family,
		                 strcmp(family, "chatml") == 0 ? DS_CHAT_CHATML : DS_CHAT_LLAMA3);
		json_t *cases = json_object_get(tj, "cases");
		for (size_t c = 0; c < json_array_size(cases); c++) {
			json_t *cj = json_array_get(cases, c),
			       *mj = json_object_get(cj, "messages");
			struct ds_chat_msg msgs[8];
			size_t n = json_array_size(mj);
			assert_true(n <= 8);
			for (size_t k = 0; k < n; k++) {
				msgs[k].role = json_string_value(
				    json_object_get(json_array_get(mj, k), "role"));
				msgs[k].content = json_string_value(
				    json_object_get(json_array_get(mj, k), "content"));
			}
			bool gen = json_is_true(json_object_get(cj, "add_generation_prompt"));
			char *out = NULL;
			size_t len = 0;
			assert_int_equal(ds_chat_render(&t, msgs, (int)n, gen, &out, &len, &err),
			                 DS_OK);
			const char *want = json_string_value(json_object_get(cj, "expected"));
			if (strcmp(out, want) != 0)
				fail_msg("%s case %zu:\n got: [%s]\nwant: [%s]", name, c, out,
				         want);
			assert_int_equal(len, strlen(want));
			free(out);
			rendered++;
		}
	}
	assert_int_equal(rejected, 2);
	assert_true(rendered >= 40);
	json_decref(root);
}

static void test_default_system_extracted(void **state)
{
	(void)state;
	json_t *root = fixture(), *tmpls = json_object_get(root, "templates");
	struct ds_chat_template t;
	for (size_t i = 0; i < json_array_size(tmpls); i++) {
		json_t *tj = json_array_get(tmpls, i), *text = json_object_get(tj, "template");
		const char *name = json_string_value(json_object_get(tj, "name"));
		if (ds_chat_template_init(&t, json_string_value(text), json_string_length(text),
		                          NULL, NULL))
			continue;
		if (strcmp(name, "smollm2") == 0) {
			assert_true(t.has_default_system);
			assert_string_equal(
			    t.default_system,
			    "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
		} else if (strcmp(name, "qwen2.5") == 0) {
			assert_true(t.has_default_system);
			assert_string_equal(
			    t.default_system,
			    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
		} else if (strcmp(name, "chatml") == 0) {
			assert_false(t.has_default_system);
		} else if (strcmp(name, "llama3.1") == 0) {
			assert_true(t.llama31);
			assert_string_equal(t.date, "26 Jul 2024");
			assert_string_equal(t.bos, "<|begin_of_text|>");
		}
	}
	json_decref(root);
}

static void test_bad_input(void **state)
{
	(void)state;
	struct ds_chat_template t;
	struct ds_err err;
	assert_int_equal(ds_chat_template_init(&t, NULL, 0, NULL, &err), DS_ERR_PRECONDITION);
	assert_int_equal(ds_chat_template_init(&t, "", 0, NULL, &err), DS_ERR_PRECONDITION);
	const char *tx = "{{'<|im_start|>' + m}}";
	assert_int_equal(ds_chat_template_init(&t, tx, strlen(tx), NULL, &err), DS_OK);
	char *out = NULL;
	struct ds_chat_msg bad[] = {{NULL, "x"}, {"user", NULL}, {"", "x"}};
	for (int i = 0; i < 3; i++)
		assert_int_equal(ds_chat_render(&t, &bad[i], 1, true, &out, NULL, &err),
		                 DS_ERR_INVALID);
	assert_int_equal(ds_chat_render(&t, bad, 0, true, &out, NULL, &err), DS_ERR_INVALID);
	assert_null(out);
	/* a template cut short inside its default system literal: no default, no overread */
	const char *cut = "{{ '<|im_start|>system\\nYou are";
	assert_int_equal(ds_chat_template_init(&t, cut, strlen(cut), NULL, &err), DS_OK);
	assert_false(t.has_default_system);
}

/* ds_chat_template_load on an HF directory (tokenizer_config.json) and on missing paths. */
static void test_load_hf_dir(void **state)
{
	(void)state;
	char dir[] = "/tmp/ds_chat_XXXXXX";
	assert_non_null(mkdtemp(dir));
	char path[256];
	snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
	FILE *f = fopen(path, "w");
	fputs("{\"bos_token\": {\"content\": \"<BOS>\"}, \"chat_template\": \"{{ bos_token }}"
	      "<|start_header_id|>{{ m }}<|eot_id|>\"}",
	      f);
	fclose(f);
	struct ds_chat_template t;
	struct ds_err err = {{0}};
	assert_int_equal(ds_chat_template_load(&t, dir, &err), DS_OK);
	assert_int_equal(t.family, DS_CHAT_LLAMA3);
	assert_string_equal(t.bos, "<BOS>");
	f = fopen(path, "w");
	fputs("{\"chat_template\": \"[INST]\"}", f);
	fclose(f);
	assert_int_equal(ds_chat_template_load(&t, dir, &err), DS_ERR_PRECONDITION);
	assert_non_null(strstr(err.msg, path));
	unlink(path);
	assert_int_equal(ds_chat_template_load(&t, dir, &err), DS_ERR_PRECONDITION);
	rmdir(dir);
	assert_int_equal(ds_chat_template_load(&t, "/nonexistent/m.gguf", &err), DS_ERR_IO);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_render_matches_jinja),
	    cmocka_unit_test(test_default_system_extracted),
	    cmocka_unit_test(test_bad_input),
	    cmocka_unit_test(test_load_hf_dir),
	};
	return cmocka_run_group_tests_name("gguf_chat", tests, NULL, NULL);
}
