/* test_gguf_smollm2.c - the GGUF reader and loader on the real SmolLM2-135M-Instruct Q4_1 file
 * (fetched with tools/fetch-smollm2.sh or $DS_SMOLLM2_GGUF; the cases skip when it can't be
 * had): its metadata, cuts at every section boundary and at random points (each rejected with
 * DS_ERR_FORMAT naming the file; header-region cuts parse exact-size copies so ASan sees any
 * overread), the loaded config, un-permuted Q rows, and its chat template. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>

#include "chat_template.h"
#include "dequant.h"
#include "gguf.h"
#include "model.h"
#include "test_gguf_util.h"

static void test_smollm2_parse(void **state)
{
	(void)state;
	NEED_SMOLLM2(path);
	struct ds_gguf *g = NULL;
	struct ds_err err = {{0}};
	if (ds_gguf_open(path, &g, &err))
		fail_msg("%s", err.msg);
	assert_int_equal(g->version, 3);
	assert_int_equal(g->n_kv, 33);
	assert_int_equal(g->n_tensors, 272);
	const struct ds_gguf_kv *toks = ds_gguf_find(g, "tokenizer.ggml.tokens");
	const struct ds_gguf_kv *merges = ds_gguf_find(g, "tokenizer.ggml.merges");
	assert_int_equal(toks->arr_len, 49152);
	assert_int_equal(merges->arr_len, 48900);
	struct ds_gguf_str s;
	assert_int_equal(ds_gguf_arr_str(toks, 1, &s), DS_OK);
	assert_int_equal(s.len, strlen("<|im_start|>"));
	assert_memory_equal(s.p, "<|im_start|>", s.len);
	assert_int_equal(ds_gguf_get_str(g, "tokenizer.chat_template", &s), DS_OK);
	const struct ds_gguf_tensor *t = ds_gguf_find_tensor(g, "token_embd.weight");
	assert_int_equal(t->ggml_type, DS_GGML_Q8_0);
	assert_int_equal(t->dims[0], 576);
	assert_int_equal(t->dims[1], 49152);

	/* cut at every section boundary (after the header, after each kv, after each tensor
	 * info, at the data section, at each tensor's start and end) and at 160 random points */
	size_t n_cuts = 0, cap = 4096;
	size_t *cuts = malloc(cap * sizeof(*cuts));
	cuts[n_cuts++] = 0;
	cuts[n_cuts++] = 4;
	cuts[n_cuts++] = 24;
	for (uint64_t i = 0; i < g->n_kv; i++) {
		const struct ds_gguf_kv *kv = &g->kv[i];
		cuts[n_cuts++] = (size_t)((const uint8_t *)kv->key.p - g->base);
		cuts[n_cuts++] = (size_t)(kv->data - g->base);
		cuts[n_cuts++] = (size_t)(kv->data - g->base) + (size_t)kv->data_len - 1;
	}
	for (uint64_t i = 0; i < g->n_tensors; i++) {
		cuts[n_cuts++] = (size_t)((const uint8_t *)g->tensors[i].name.p - g->base) - 8;
		cuts[n_cuts++] = (size_t)(g->tensors[i].data - g->base);
		cuts[n_cuts++] = (size_t)(g->tensors[i].data - g->base) + g->tensors[i].nbytes - 1;
	}
	cuts[n_cuts++] = (size_t)g->info_len;
	cuts[n_cuts++] = (size_t)g->data_offset;
	cuts[n_cuts++] = g->size - 1;
	uint64_t x = 88172645463325252ull;
	for (int i = 0; i < 160; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		/* half inside the header+metadata+infos, half anywhere */
		cuts[n_cuts++] = (size_t)(x % (i % 2 ? g->size : g->info_len));
	}
	for (size_t i = 0; i < n_cuts; i++) {
		size_t len = cuts[i];
		enum ds_status st;
		err.msg[0] = 0;
		if (len <= g->data_offset) {
			st = parse_copy(g->base, len,
			                &err); /* exact-size copy: ASan sees overreads */
		} else { /* data section: the parser reads no tensor bytes, so no copy needed */
			struct ds_gguf *h = NULL;
			st = ds_gguf_parse(g->base, len, "cut.gguf", &h, &err);
			ds_gguf_close(h);
		}
		if (st != DS_ERR_FORMAT || !strstr(err.msg, "cut.gguf"))
			fail_msg("cut at %zu: %s: %s", len, ds_status_str(st), err.msg);
	}
	print_message("SmolLM2: %zu cuts all rejected with DS_ERR_FORMAT\n", n_cuts);
	free(cuts);
	ds_gguf_close(g);
}

static void test_smollm2_load(void **state)
{
	(void)state;
	NEED_SMOLLM2(path);
	struct ds_model *m = NULL;
	struct ds_err err = {{0}};
	if (ds_model_load_gguf(path, &m, &err))
		fail_msg("%s", err.msg);
	const struct ds_model_config *c = &m->cfg;
	assert_int_equal(c->vocab_size, 49152);
	assert_int_equal(c->hidden, 576);
	assert_int_equal(c->n_layer, 30);
	assert_int_equal(c->n_head, 9);
	assert_int_equal(c->n_kv_head, 3);
	assert_int_equal(c->head_dim, 64);
	assert_int_equal(c->ffn, 1536);
	assert_int_equal(c->max_pos, 8192);
	assert_true(c->rope_theta == 100000.0f);
	assert_true(c->tie_embeddings);
	assert_ptr_equal(m->w.lm_head, m->w.tok_embd);
	assert_int_equal(c->bos_id, 1);
	assert_int_equal(c->eos_ids[0], 2);
	/* a norm weight is F32 in the file: spot-check it against the raw bytes */
	struct ds_gguf *g = NULL;
	assert_int_equal(ds_gguf_open(path, &g, &err), DS_OK);
	const struct ds_gguf_tensor *t = ds_gguf_find_tensor(g, "blk.7.ffn_norm.weight");
	for (int i = 0; i < 576; i++) {
		float f;
		memcpy(&f, t->data + 4 * i, 4);
		assert_int_equal(m->w.layers[7].ffn_norm[i], ds_f32_to_bf16(f));
	}
	/* Q rows are un-permuted: HF row j of head 2 is GGUF row 2*j of head 2 */
	t = ds_gguf_find_tensor(g, "blk.3.attn_q.weight");
	float *row = malloc(576 * sizeof(float));
	uint32_t blck, bytes;
	ds_gguf_type_size(t->ggml_type, &blck, &bytes);
	size_t row_bytes = 576 / blck * bytes;
	for (int j = 0; j < 32; j++) {
		int gguf_row = 2 * 64 + 2 * j + 1, hf_row = 2 * 64 + 32 + j;
		ds_dequant_f32(t->ggml_type, t->data + (size_t)gguf_row * row_bytes, 576, row);
		for (int i = 0; i < 576; i++)
			assert_int_equal(m->w.layers[3].wq[(size_t)hf_row * 576 + i],
			                 ds_f32_to_bf16(row[i]));
	}
	free(row);
	char hex[33];
	ds_model_identity_hex(m, hex);
	print_message("SmolLM2 identity %s\n", hex);

	/* the generic loader dispatches .gguf here: same model identity */
	struct ds_model *m2 = NULL;
	if (ds_model_load(path, &m2, &err))
		fail_msg("ds_model_load: %s", err.msg);
	assert_memory_equal(m2->identity, m->identity, 16);
	ds_model_free(m2);

	/* its chat template is ChatML with SmolLM's default system message */
	struct ds_chat_template ct;
	assert_int_equal(ds_chat_template_load(&ct, path, &err), DS_OK);
	assert_int_equal(ct.family, DS_CHAT_CHATML);
	struct ds_chat_msg msg = {"user", "Hi"};
	char *text = NULL;
	assert_int_equal(ds_chat_render(&ct, &msg, 1, true, &text, NULL, &err), DS_OK);
	assert_string_equal(text,
	                    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
	                    "trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
	                    "<|im_start|>assistant\n");
	free(text);
	ds_gguf_close(g);
	ds_model_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_smollm2_parse),
	    cmocka_unit_test(test_smollm2_load),
	};
	return cmocka_run_group_tests_name("gguf_smollm2", tests, NULL, NULL);
}
