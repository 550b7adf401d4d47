/* chat_template.h - applying a model's chat template to a messages list, without Jinja.
 *
 * We do not interpret Jinja. We recognise the two template families serving users meet most,
 * by their text, and render them with code that produces what transformers' Jinja rendering
 * produces for plain (role, content) messages:
 *   - ChatML (SmolLM2, Qwen2/2.5/3, ...): `<|im_start|>`. A default system message that the
 *     template inserts when the first message is not a system one is read from the template.
 *   - Llama-3 (3.0 and the 3.1/3.2 form with "Cutting Knowledge Date"): `<|start_header_id|>`.
 *     The 3.1 form's date is the template's fixed fallback ("26 Jul 2024"), never today's
 *     date: a rendering must not depend on when the request arrives.
 * Anything else is DS_ERR_PRECONDITION (the server answers FAILED_PRECONDITION); raw prompts
 * never need a template. */
#ifndef DS_CHAT_TEMPLATE_H
#define DS_CHAT_TEMPLATE_H

#include "ds_common.h"

struct ds_gguf;

enum ds_chat_family { DS_CHAT_NONE = 0, DS_CHAT_CHATML = 1, DS_CHAT_LLAMA3 = 2 };

struct ds_chat_msg {
	const char *role;    /* "system", "user", "assistant", ... (NUL-terminated) */
	const char *content; /* NUL-terminated */
};

struct ds_chat_template {
	enum ds_chat_family family;
	bool has_default_system; /* ChatML: insert default_system when messages[0] isn't system */
	char default_system[1024];
	char bos[64];  /* Llama-3: text of bos_token, emitted first */
	bool llama31;  /* Llama-3.1 system block (knowledge/today dates) */
	char date[32]; /* Llama-3.1: the date string */
};

/* Recognises template text (len bytes, need not be NUL-terminated). bos_text is the text of the
 * BOS token (may be NULL; Llama-3 then uses "<|begin_of_text|>").
 * DS_ERR_PRECONDITION with a message when the family is not recognised. */
enum ds_status ds_chat_template_init(struct ds_chat_template *t, const char *text, size_t len,
                                     const char *bos_text, struct ds_err *err);

/* From a parsed GGUF: tokenizer.chat_template, and the BOS text from the token list.
 * DS_ERR_PRECONDITION when the file has no template or an unrecognised one. */
enum ds_status ds_chat_template_from_gguf(struct ds_chat_template *t, const struct ds_gguf *g,
                                          struct ds_err *err);

/* From a model path: a .gguf file, or an HF directory whose tokenizer_config.json has
 * "chat_template" (a string) and optionally "bos_token". DS_ERR_IO / DS_ERR_FORMAT for
 * unreadable files, DS_ERR_PRECONDITION for a missing or unrecognised template. */
enum ds_status ds_chat_template_load(struct ds_chat_template *t, const char *path,
                                     struct ds_err *err);

/* Renders messages (n >= 1) and, when add_generation_prompt, the assistant header. *out is a
 * malloc'd NUL-terminated string the caller frees (its length in *out_len when non-NULL).
 * DS_ERR_INVALID for n < 1 or a NULL role/content; DS_ERR_PRECONDITION for an unrecognised
 * template; DS_ERR_NOMEM. */
enum ds_status ds_chat_render(const struct ds_chat_template *t, const struct ds_chat_msg *msgs,
                              int n, bool add_generation_prompt, char **out, size_t *out_len,
                              struct ds_err *err);

#endif
