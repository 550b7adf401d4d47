/* tokenizer.h - byte-level BPE tokenizers (GPT-2, Llama-3, Qwen2/3, SmolLM2) in C.
 *
 * A tokenizer is loaded from a Hugging Face tokenizer.json (+ tokenizer_config.json), from
 * GGUF metadata (tokenizer.ggml.model == "gpt2"), or built as a byte-level fallback for
 * synthetic models (256 byte tokens + specials, no merges). Encoding follows the reference
 * (Hugging Face `tokenizers`) step by step: added/special tokens are split out first, the
 * rest is NFC-normalized when asked, pre-tokenized (Split regex / Digits / ByteLevel, PCRE2
 * with UTF+UCP and JIT) and merged with a rank-ordered heap, as `tokenizers` does.
 *
 * Key decision: the loaded tokenizer is immutable apart from a try-locked word cache, so
 * encode/decode may run concurrently from any number of threads; scratch lives in each call.
 * Token pieces are kept as raw bytes (the GPT-2 byte<->unicode mapping is undone at load
 * time), so BPE works on bytes and decoding is a concatenation.
 *
 * Invalid UTF-8 in encode input is replaced by U+FFFD per maximal ill-formed subpart (what
 * Python's bytes.decode('utf-8', 'replace') and Rust's from_utf8_lossy do) before
 * anything else. Decoded text is always valid UTF-8 (the same replacement on output).
 *
 * Known differences from `tokenizers`: an added token's single_word flag is ignored and
 * added tokens with normalized=true are matched on the raw rather than the normalized text
 * (none of the supported models use either); character classes come from PCRE2's Unicode
 * tables (Unicode 14 in PCRE2 10.42) where `tokenizers` uses Oniguruma's (Unicode 15), so
 * the 20 Kaktovik numerals U+1D2C0..U+1D2D3 are not \p{N} here. A sweep over every code
 * point of planes 0-2 (tests/tokenizer) finds no other difference. */
#ifndef DS_TOKENIZER_H
#define DS_TOKENIZER_H

#include "ds_common.h"
#include "model.h"

struct ds_tokenizer;
struct ds_gguf;

/* ---- loading ---- */

/* Loads from path: a directory holding tokenizer.json (+ optional tokenizer_config.json),
 * a tokenizer.json file, or a .gguf file. Errors: DS_ERR_IO (missing file), DS_ERR_FORMAT
 * (invalid JSON / GGUF, merge naming an absent token, no merges for a multi-byte vocab),
 * DS_ERR_UNSUPPORTED (Unigram, WordPiece, byte_fallback, unknown pre-tokenizer ...), each
 * with a message naming the file and field. *out is NULL on failure. */
enum ds_status ds_tokenizer_load(const char *path, struct ds_tokenizer **out, struct ds_err *err);

/* tokenizer.json at json_path; config_path (tokenizer_config.json) may be NULL. */
enum ds_status ds_tokenizer_load_json(const char *json_path, const char *config_path,
				      struct ds_tokenizer **out, struct ds_err *err);

/* From an opened GGUF's metadata (tokenizer.ggml.*). g is not retained. */
enum ds_status ds_tokenizer_load_gguf(const struct ds_gguf *g, struct ds_tokenizer **out,
				      struct ds_err *err);

/* The byte-level fallback for synthetic models, identical to what
 * ds_tokenizer_write_bytelevel_json() writes for cfg: the 256 bytes at the lowest ids not
 * taken by specials, <|begin_of_text|> at cfg->bos_id, <|end_of_text|> at cfg->eos_ids[0]
 * (<|eot_id|>, <|eos_N|> for further EOS ids), <|pad|> at the first free id >= 256, and
 * <|reserved_special_token_N|> for the rest up to cfg->vocab_size. DS_ERR_INVALID when the
 * vocab cannot hold them. */
enum ds_status ds_tokenizer_init_bytelevel(const struct ds_model_config *cfg,
					   struct ds_tokenizer **out, struct ds_err *err);

/* Writes dir/tokenizer.json and dir/tokenizer_config.json (HF format, loadable by HF
 * `tokenizers` and by ds_tokenizer_load) describing ds_tokenizer_init_bytelevel(cfg).
 * dir must exist. */
enum ds_status ds_tokenizer_write_bytelevel_json(const char *dir, const struct ds_model_config *cfg,
						 struct ds_err *err);

/* NULL is a no-op. */
void ds_tokenizer_free(struct ds_tokenizer *t);

/* ---- queries ---- */

/* Number of ids (max id + 1); ids without a token decode to nothing. */
int ds_tokenizer_vocab_size(const struct ds_tokenizer *t);
/* -1 when the tokenizer has none. */
int ds_tokenizer_bos_id(const struct ds_tokenizer *t);
int ds_tokenizer_eos_id(const struct ds_tokenizer *t);
int ds_tokenizer_pad_id(const struct ds_tokenizer *t);
/* The raw bytes of a token (byte-level mapping undone; an added token's content).
 * NULL with *len = 0 for an id out of range or without a token. */
const char *ds_tokenizer_piece(const struct ds_tokenizer *t, int id, size_t *len);
/* Id of the added (special or user-defined) token whose content is exactly s, else -1. */
int ds_tokenizer_find_added(const struct ds_tokenizer *t, const char *s);
/* True for special (control) tokens: skipped by decode(skip_special). */
bool ds_tokenizer_is_special(const struct ds_tokenizer *t, int id);

/* ---- encode / decode ---- */

/* Encodes len bytes of text (NUL bytes allowed). Added tokens in the text are always
 * recognized. add_special adds what the tokenizer's post-processor (or
 * tokenizer_config.json add_bos_token / add_eos_token, or GGUF add_bos_token) asks for.
 * On success *ids (malloc'd, caller frees; NULL when *n_ids == 0) holds *n_ids ids.
 * Errors: DS_ERR_NOMEM, DS_ERR_INTERNAL (regex engine failure, message says which). */
enum ds_status ds_tokenizer_encode(const struct ds_tokenizer *t, const char *text, size_t len,
				   bool add_special, int32_t **ids, size_t *n_ids, struct ds_err *err);

/* Like ds_tokenizer_encode, except that special (control) tokens written in the text are not
 * recognized: their text is encoded like any other (HF `encode_special_tokens = True`);
 * user-defined added tokens still are. Meant for untrusted text, such as a user's message
 * placed inside a chat template, which must not be able to forge <|im_end|> and the like. */
enum ds_status ds_tokenizer_encode_untrusted(const struct ds_tokenizer *t, const char *text,
					     size_t len, bool add_special, int32_t **ids,
					     size_t *n_ids, struct ds_err *err);

/* Decodes ids to NUL-terminated valid UTF-8 (*text malloc'd, caller frees; *len excludes
 * the NUL). Invalid byte sequences become U+FFFD. Unknown ids: DS_ERR_INVALID. */
enum ds_status ds_tokenizer_decode(const struct ds_tokenizer *t, const int32_t *ids, size_t n,
				   bool skip_special, char **text, size_t *len, struct ds_err *err);

/* ---- streaming decode ---- */

/* Emits text only at UTF-8 character boundaries: bytes of a character split across tokens
 * are held back until the character completes; a sequence that can no longer become valid
 * is emitted as U+FFFD. Concatenating every push() plus flush() equals decode(). */
struct ds_tokenizer_stream {
	const struct ds_tokenizer *tok; /* private fields below */
	bool skip_special;
	uint8_t pending[4];
	int n_pending;
	char *out;
	size_t out_cap;
};

void ds_tokenizer_stream_init(struct ds_tokenizer_stream *s, const struct ds_tokenizer *t,
			      bool skip_special);
/* Adds one token. On return text and len hold the newly completed text (valid UTF-8, may be empty), valid
 * until the next call on s. DS_ERR_INVALID for an unknown id, DS_ERR_NOMEM. */
enum ds_status ds_tokenizer_stream_push(struct ds_tokenizer_stream *s, int32_t id,
					const char **text, size_t *len, struct ds_err *err);
/* Ends the stream: any held incomplete character comes out as U+FFFD. */
enum ds_status ds_tokenizer_stream_flush(struct ds_tokenizer_stream *s, const char **text,
					 size_t *len, struct ds_err *err);
void ds_tokenizer_stream_free(struct ds_tokenizer_stream *s);

/* ---- stop strings on the decoded text ---- */

/* Watches the decoded text of a token stream for stop strings (the proto's `stop` field), across
 * token boundaries. Text that might be the start of a stop string is held back until it is
 * known not to be; a completed stop string ends the stream, and neither it nor anything
 * after it is emitted (the OpenAI convention; the caller may append stops[*stop] itself). */
struct ds_tokenizer_stop {
	struct ds_tokenizer_stream stream; /* the rest is private */
	char **stops;
	size_t *stop_lens;
	int n_stops;
	char *held;
	size_t n_held, cap_held;
	char *out;
	size_t cap_out;
	int matched; /* index of the stop string that ended the stream, or -1 */
};

/* Copies the n_stops stop strings (stop_lens[i] bytes each; NULL stop_lens: NUL-terminated).
 * DS_ERR_INVALID for an empty stop string, DS_ERR_NOMEM. */
enum ds_status ds_tokenizer_stop_init(struct ds_tokenizer_stop *s, const struct ds_tokenizer *t,
				      bool skip_special, const char *const *stops,
				      const size_t *stop_lens, int n_stops, struct ds_err *err);
/* Adds one token. text/len: text now safe to show (whole characters, valid until the next
 * call); *stop: the index of the stop string completed by this token, else -1. After a stop,
 * further pushes emit nothing and report the same index. */
enum ds_status ds_tokenizer_stop_push(struct ds_tokenizer_stop *s, int32_t id, const char **text,
				      size_t *len, int *stop, struct ds_err *err);
/* End of generation without a stop: releases the held text (and a pending partial character
 * as U+FFFD). Emits nothing after a stop. */
enum ds_status ds_tokenizer_stop_flush(struct ds_tokenizer_stop *s, const char **text, size_t *len,
				       struct ds_err *err);
void ds_tokenizer_stop_free(struct ds_tokenizer_stop *s);

#endif
