/* chat_template.c - ChatML and Llama-3 chat templates recognised by their text (see the header).
 *
 * Recognition reads a few literal facts out of the Jinja source (the default system message of a
 * ChatML template, the fallback date of a Llama-3.1 one) rather than evaluating it; rendering is
 * plain string building into a growable buffer, checked against jinja2 in the unit test. */
#include "chat_template.h"
#include "gguf.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static const char *mem_find(const char *hay, size_t n, const char *needle)
{
	size_t k = strlen(needle);
	if (k == 0 || k > n)
		return NULL;
	for (size_t i = 0; i + k <= n; i++)
		if (hay[i] == needle[0] && memcmp(hay + i, needle, k) == 0)
			return hay + i;
	return NULL;
}

/* Copies a Jinja string-literal body [p, end) into out, undoing \n \t \' \" \\ escapes;
 * false when it does not fit. */
static bool unescape(const char *p, const char *end, char *out, size_t cap)
{
	size_t o = 0;
	while (p < end) {
		char c = *p++;
		if (c == '\\' && p < end) {
			char e = *p++;
			c = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
		}
		if (o + 1 >= cap)
			return false;
		out[o++] = c;
	}
	out[o] = 0;
	return true;
}

/* ChatML default system: the literal text after "<|im_start|>system" + newline (a real one or
 * an escaped "\n") and before "<|im_end|>", when it is literal text and not the end of the
 * string literal (`'<|im_start|>system\n' + messages[0]['content']`). */
static void chatml_default_system(struct ds_chat_template *t, const char *text, size_t len)
{
	const char *tag = "<|im_start|>system";
	const char *p = text, *end = text + len;
	while ((p = mem_find(p, (size_t)(end - p), tag))) {
		p += strlen(tag);
		if (p < end && *p == '\n')
			p++;
		else if (end - p >= 2 && p[0] == '\\' && p[1] == 'n')
			p += 2;
		else
			continue;
		if (p < end && (*p == '\'' || *p == '"'))
			continue; /* the literal ends here: content comes from the messages */
		const char *stop = mem_find(p, (size_t)(end - p), "<|im_end|>");
		if (!stop)
			return;
		/* the default must be one literal: no quote inside it */
		bool literal = true;
		for (const char *q = p; q < stop; q++)
			if ((*q == '\'' || *q == '"') && q[-1] != '\\')
				literal = false;
		if (!literal)
			continue;
		if (unescape(p, stop, t->default_system, sizeof(t->default_system)))
			t->has_default_system = true;
		return;
	}
}

/* Llama-3.1: set date_string = "26 Jul 2024" (the non-strftime fallback). */
static void llama31_date(struct ds_chat_template *t, const char *text, size_t len)
{
	snprintf(t->date, sizeof(t->date), "26 Jul 2024");
	const char *p = mem_find(text, len, "set date_string = \"");
	if (!p)
		return;
	p += strlen("set date_string = \"");
	const char *q = p;
	while (q < text + len && *q != '"' && q - p < (ptrdiff_t)sizeof(t->date) - 1)
		q++;
	if (q < text + len && *q == '"')
		snprintf(t->date, sizeof(t->date), "%.*s", (int)(q - p), p);
}

enum ds_status ds_chat_template_init(struct ds_chat_template *t, const char *text, size_t len,
                                     const char *bos_text, struct ds_err *err)
{
	memset(t, 0, sizeof(*t));
	if (!text)
		len = 0;
	if (mem_find(text, len, "<|im_start|>")) {
		t->family = DS_CHAT_CHATML;
		chatml_default_system(t, text, len);
		return DS_OK;
	}
	if (mem_find(text, len, "<|start_header_id|>") && mem_find(text, len, "<|eot_id|>")) {
		t->family = DS_CHAT_LLAMA3;
		snprintf(t->bos, sizeof(t->bos), "%s", bos_text ? bos_text : "<|begin_of_text|>");
		if (mem_find(text, len, "Cutting Knowledge Date")) {
			t->llama31 = true;
			llama31_date(t, text, len);
		}
		return DS_OK;
	}
	return ds_errf(err, DS_ERR_PRECONDITION,
	               "chat template not recognised (supported: ChatML <|im_start|>, Llama-3 "
	               "<|start_header_id|>); send a raw prompt instead");
}

enum ds_status ds_chat_template_from_gguf(struct ds_chat_template *t, const struct ds_gguf *g,
                                          struct ds_err *err)
{
	struct ds_gguf_str tmpl, bos = {0};
	memset(t, 0, sizeof(*t));
	if (ds_gguf_get_str(g, "tokenizer.chat_template", &tmpl))
		return ds_errf(err, DS_ERR_PRECONDITION,
		               "%s: no tokenizer.chat_template in the GGUF", g->path);
	uint64_t id;
	char bos_text[64] = {0};
	if (ds_gguf_get_u64(g, "tokenizer.ggml.bos_token_id", &id) == DS_OK &&
	    ds_gguf_arr_str(ds_gguf_find(g, "tokenizer.ggml.tokens"), id, &bos) == DS_OK &&
	    bos.len < sizeof(bos_text))
		memcpy(bos_text, bos.p, bos.len);
	enum ds_status s =
	    ds_chat_template_init(t, tmpl.p, tmpl.len, bos_text[0] ? bos_text : NULL, err);
	if (s && err) {
		char msg[sizeof(err->msg)];
		snprintf(msg, sizeof(msg), "%s", err->msg);
		ds_errf(err, s, "%s: %s", g->path, msg);
	}
	return s;
}

static enum ds_status load_hf_dir(struct ds_chat_template *t, const char *dir, struct ds_err *err)
{
	char path[1024];
	snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
	json_error_t jerr;
	json_t *root = json_load_file(path, 0, &jerr);
	if (!root)
		return ds_errf(err, DS_ERR_PRECONDITION, "%s: no chat template (%s)", path,
		               jerr.text);
	json_t *tmpl = json_object_get(root, "chat_template");
	json_t *bos = json_object_get(root, "bos_token");
	const char *bos_text = json_is_string(bos) ? json_string_value(bos)
	                       : json_is_object(bos)
	                           ? json_string_value(json_object_get(bos, "content"))
	                           : NULL;
	enum ds_status s;
	if (!json_is_string(tmpl))
		s = ds_errf(err, DS_ERR_PRECONDITION, "%s: no \"chat_template\" string", path);
	else if ((s = ds_chat_template_init(t, json_string_value(tmpl), json_string_length(tmpl),
	                                    bos_text, err)) &&
	         err) {
		char msg[sizeof(err->msg)];
		snprintf(msg, sizeof(msg), "%s", err->msg);
		ds_errf(err, s, "%s: %s", path, msg);
	}
	json_decref(root);
	return s;
}

enum ds_status ds_chat_template_load(struct ds_chat_template *t, const char *path,
                                     struct ds_err *err)
{
	memset(t, 0, sizeof(*t));
	struct stat st;
	if (stat(path, &st) != 0)
		return ds_errf(err, DS_ERR_IO, "%s: cannot stat", path);
	if (S_ISDIR(st.st_mode))
		return load_hf_dir(t, path, err);
	struct ds_gguf *g = NULL;
	enum ds_status s = ds_gguf_open(path, &g, err);
	if (s)
		return s;
	s = ds_chat_template_from_gguf(t, g, err);
	ds_gguf_close(g);
	return s;
}

/* ---- rendering ---- */

struct sbuf {
	char *p;
	size_t len, cap;
	bool oom;
};

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = (b->len + n + 1) * 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->oom = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = 0;
}

static void sb_str(struct sbuf *b, const char *s)
{
	sb_add(b, s, strlen(s));
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Jinja's |trim (Python str.strip(); ASCII whitespace here). */
static void sb_trimmed(struct sbuf *b, const char *s)
{
	size_t n = strlen(s), i = 0;
	while (i < n && is_space(s[i]))
		i++;
	while (n > i && is_space(s[n - 1]))
		n--;
	sb_add(b, s + i, n - i);
}

static void render_chatml(const struct ds_chat_template *t, const struct ds_chat_msg *m, int n,
                          bool gen, struct sbuf *b)
{
	if (t->has_default_system && strcmp(m[0].role, "system") != 0) {
		sb_str(b, "<|im_start|>system\n");
		sb_str(b, t->default_system);
		sb_str(b, "<|im_end|>\n");
	}
	for (int i = 0; i < n; i++) {
		sb_str(b, "<|im_start|>");
		sb_str(b, m[i].role);
		sb_str(b, "\n");
		sb_str(b, m[i].content);
		sb_str(b, "<|im_end|>\n");
	}
	if (gen)
		sb_str(b, "<|im_start|>assistant\n");
}

static void llama3_msg(struct sbuf *b, const char *role, const char *content)
{
	sb_str(b, "<|start_header_id|>");
	sb_str(b, role);
	sb_str(b, "<|end_header_id|>\n\n");
	sb_trimmed(b, content);
	sb_str(b, "<|eot_id|>");
}

static void render_llama3(const struct ds_chat_template *t, const struct ds_chat_msg *m, int n,
                          bool gen, struct sbuf *b)
{
	sb_str(b, t->bos);
	int first = 0;
	if (t->llama31) {
		sb_str(b, "<|start_header_id|>system<|end_header_id|>\n\n");
		sb_str(b, "Cutting Knowledge Date: December 2023\nToday Date: ");
		sb_str(b, t->date);
		sb_str(b, "\n\n");
		if (strcmp(m[0].role, "system") == 0) {
			sb_trimmed(b, m[0].content);
			first = 1;
		}
		sb_str(b, "<|eot_id|>");
	}
	for (int i = first; i < n; i++)
		llama3_msg(b, m[i].role, m[i].content);
	if (gen)
		sb_str(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

enum ds_status ds_chat_render(const struct ds_chat_template *t, const struct ds_chat_msg *msgs,
                              int n, bool add_generation_prompt, char **out, size_t *out_len,
                              struct ds_err *err)
{
	*out = NULL;
	if (out_len)
		*out_len = 0;
	if (!t || (t->family != DS_CHAT_CHATML && t->family != DS_CHAT_LLAMA3))
		return ds_errf(err, DS_ERR_PRECONDITION, "chat template not recognised");
	if (n < 1 || !msgs)
		return ds_errf(err, DS_ERR_INVALID, "chat: messages must not be empty");
	for (int i = 0; i < n; i++)
		if (!msgs[i].role || !msgs[i].content || !msgs[i].role[0])
			return ds_errf(err, DS_ERR_INVALID,
			               "chat: message %d has no role or content", i);
	struct sbuf b = {0};
	sb_add(&b, "", 0);
	if (t->family == DS_CHAT_CHATML)
		render_chatml(t, msgs, n, add_generation_prompt, &b);
	else
		render_llama3(t, msgs, n, add_generation_prompt, &b);
	if (b.oom) {
		free(b.p);
		return ds_errf(err, DS_ERR_NOMEM, "chat: out of memory");
	}
	*out = b.p;
	if (out_len)
		*out_len = b.len;
	return DS_OK;
}
