/* grpcc_frame.h - the transport-free half of our gRPC client: status codes, the 5-byte
 * length-prefixed message framing (with reassembly across DATA frames and several messages per
 * frame), grpc-timeout encoding and grpc-message percent-decoding.
 *
 * Key decision: the deframer is a push parser (feed it any slice of bytes, it calls back once per
 * complete message), so it never cares how HTTP/2 cut the stream; it is unit-tested on its own. */
#ifndef DS_GRPCC_FRAME_H
#define DS_GRPCC_FRAME_H

#include "ds_common.h"

/* The canonical gRPC status codes (grpc/doc/statuscodes.md). */
enum ds_grpcc_code {
	DS_GRPCC_OK = 0,
	DS_GRPCC_CANCELLED = 1,
	DS_GRPCC_UNKNOWN = 2,
	DS_GRPCC_INVALID_ARGUMENT = 3,
	DS_GRPCC_DEADLINE_EXCEEDED = 4,
	DS_GRPCC_NOT_FOUND = 5,
	DS_GRPCC_ALREADY_EXISTS = 6,
	DS_GRPCC_PERMISSION_DENIED = 7,
	DS_GRPCC_RESOURCE_EXHAUSTED = 8,
	DS_GRPCC_FAILED_PRECONDITION = 9,
	DS_GRPCC_ABORTED = 10,
	DS_GRPCC_OUT_OF_RANGE = 11,
	DS_GRPCC_UNIMPLEMENTED = 12,
	DS_GRPCC_INTERNAL = 13,
	DS_GRPCC_UNAVAILABLE = 14,
	DS_GRPCC_DATA_LOSS = 15,
	DS_GRPCC_UNAUTHENTICATED = 16,
	DS_GRPCC_CODE_COUNT
};

/* "OK", "CANCELLED", ...; "UNKNOWN" for codes outside 0..16. */
const char *ds_grpcc_code_name(int code);
/* Maps an HTTP :status of a response that carries no grpc-status (gRPC's http-grpc-status-mapping).
 */
int ds_grpcc_code_from_http(int http_status);

/* Writes the 5-byte prefix (flag 0 = uncompressed, big-endian length). */
void ds_grpcc_frame_header(uint8_t out[5], uint32_t len);

/* Called once per complete message; msg is valid only during the call. Return non-zero to stop. */
typedef int (*ds_grpcc_msg_fn)(void *ud, const uint8_t *msg, size_t len);

struct ds_grpcc_deframer {
	uint8_t hdr[5];
	size_t hdr_got; /* bytes of hdr filled */
	uint8_t *buf;   /* the message being reassembled */
	size_t need;    /* its length from the prefix */
	size_t got;
	size_t cap;
	size_t max_msg; /* larger messages are refused */
};

/* max_msg: the largest message accepted (bytes). */
void ds_grpcc_deframer_init(struct ds_grpcc_deframer *d, size_t max_msg);
void ds_grpcc_deframer_free(struct ds_grpcc_deframer *d);
/* Feeds bytes. Errors: DS_ERR_UNSUPPORTED (compressed flag set), DS_ERR_TOO_LONG (message over
 * max_msg), DS_ERR_FORMAT (flag byte other than 0/1), DS_ERR_NOMEM, DS_ERR_CANCELLED (the callback
 * returned non-zero). After an error the deframer must not be fed again. */
enum ds_status ds_grpcc_deframer_feed(struct ds_grpcc_deframer *d, const uint8_t *data, size_t len,
                                      ds_grpcc_msg_fn fn, void *ud, struct ds_err *err);
/* True when no partial message is buffered (a stream may end here cleanly). */
bool ds_grpcc_deframer_idle(const struct ds_grpcc_deframer *d);

/* Formats a grpc-timeout value ("<=8 digits><unit>") for timeout_us > 0, choosing the finest unit
 * that fits, rounding up so the deadline is never shortened. out needs 10 bytes. */
void ds_grpcc_timeout_format(char out[10], uint64_t timeout_us);
/* Parses a grpc-timeout value to microseconds. DS_ERR_INVALID if malformed. */
enum ds_status ds_grpcc_timeout_parse(const char *s, size_t len, uint64_t *us);

/* Percent-decodes a grpc-message value into out (always NUL-terminated, truncated to cap-1).
 * Malformed escapes are copied verbatim, as the gRPC spec asks. Returns the decoded length. */
size_t ds_grpcc_percent_decode(char *out, size_t cap, const char *in, size_t len);

#endif
