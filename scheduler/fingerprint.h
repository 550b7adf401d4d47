/* fingerprint.h - the request fingerprint (DESIGN.md section 4): a streaming XXH3-128 over the
 * model identity, the prompt, the canonical sampling parameters and the committed tokens.
 *
 * Key decision: every field is written in a fixed little-endian layout with a tag and a length,
 * and committed tokens are fed one at a time as they commit, so the value depends only on the
 * content, never on where verify windows fell or how often update was called. */
#ifndef DS_FINGERPRINT_H
#define DS_FINGERPRINT_H

#include <xxhash.h>

#include "ds_common.h"
#include "sample.h"

struct ds_fp_params {
	struct ds_sample_params sampling;
	int max_tokens;
	const int32_t *stop_ids;
	int n_stop_ids;
	const int32_t *const *stop_seqs;
	const int *stop_seq_lens;
	int n_stop_seqs;
	bool ignore_eos;
};

struct ds_fp {
	XXH3_state_t *st; /* from XXH3_createState: the state needs 64-byte alignment */
};

/* Starts a fingerprint (DS_ERR_NOMEM when the state can't be allocated): model identity, prompt,
 * then the canonical parameters (greedy drops top_k/top_p/seed; top_k >= vocab and top_p == 1 are
 * "off"; stop ids are sorted, deduplicated). */
enum ds_status ds_fp_init(struct ds_fp *fp, const uint8_t identity[16], const int32_t *prompt,
                          int n_prompt, const struct ds_fp_params *p, int vocab);
/* Releases the state (safe on a zeroed or freed fingerprint). */
void ds_fp_free(struct ds_fp *fp);
/* Appends committed tokens. */
void ds_fp_update(struct ds_fp *fp, const int32_t *tokens, int n);
/* Writes the current value as 32 lowercase hex digits plus NUL; the state stays usable. */
void ds_fp_hex(const struct ds_fp *fp, char out[33]);

#endif
