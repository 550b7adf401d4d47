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
 * anything else. Decoded text is always valid UTF-8 (the same replacement on output). */
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

#endif
