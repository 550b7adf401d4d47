/* grpc_frame.h - gRPC wire pieces that know nothing about sockets: status codes, the 5-byte
 * length-prefixed message framing (reassembly across DATA frames, several messages per
 * frame), grpc-timeout parsing and grpc-message percent-encoding.
 *
 * Key decision: the reader checks the declared length against the limit as soon as the
 * 5-byte prefix is complete, so an oversized message is refused before any of it is
 * buffered; a slow or hostile peer cannot make us allocate more than max_len per stream. */
#ifndef DS_GRPC_FRAME_H
#define DS_GRPC_FRAME_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#include "ds_common.h"

enum ds_grpc_code {
	DS_GRPC_OK = 0,
	DS_GRPC_CANCELLED = 1,
	DS_GRPC_UNKNOWN = 2,
	DS_GRPC_INVALID_ARGUMENT = 3,
	DS_GRPC_DEADLINE_EXCEEDED = 4,
	DS_GRPC_NOT_FOUND = 5,
	DS_GRPC_ALREADY_EXISTS = 6,
	DS_GRPC_PERMISSION_DENIED = 7,
	DS_GRPC_RESOURCE_EXHAUSTED = 8,
	DS_GRPC_FAILED_PRECONDITION = 9,
	DS_GRPC_ABORTED = 10,
	DS_GRPC_OUT_OF_RANGE = 11,
	DS_GRPC_UNIMPLEMENTED = 12,
	DS_GRPC_INTERNAL = 13,
	DS_GRPC_UNAVAILABLE = 14,
	DS_GRPC_DATA_LOSS = 15,
	DS_GRPC_UNAUTHENTICATED = 16,
};
#define DS_GRPC_N_CODES 17

/* "OK", "INVALID_ARGUMENT", ...; "UNKNOWN" for values out of range. */
const char *ds_grpc_code_name(int code);
/* The status a request-path enum ds_status maps to on the wire. */
enum ds_grpc_code ds_grpc_code_from_status(enum ds_status s);

/* Writes the 5-byte prefix (flag 0 = uncompressed, big-endian length). */
void ds_grpc_frame_prefix(uint8_t out[5], uint32_t len);

/* ---- reader: reassembles length-prefixed messages from arbitrary chunks ---- */

/* Receives one complete message; ownership of msg (malloc'd, may be NULL when len == 0)
 * passes to the callee. Returns DS_GRPC_OK to continue, or a status that stops the reader
 * (the reader then reports it with the message the callee wrote into errbuf). */
typedef enum ds_grpc_code (*ds_grpc_msg_cb)(void *ctx, uint8_t *msg, size_t len, char *errbuf,
                                            size_t errlen);

struct ds_grpc_reader {
	size_t max_len; /* largest accepted message */
	uint8_t hdr[5];
	size_t hdr_have; /* bytes of hdr seen */
	uint8_t *msg;    /* (msg_len) being filled */
	size_t msg_len, msg_have;
	bool in_msg;
	enum ds_grpc_code failed; /* sticky: once set, further input is ignored */
};

void ds_grpc_reader_init(struct ds_grpc_reader *r, size_t max_len);
void ds_grpc_reader_free(struct ds_grpc_reader *r);
/* Feeds bytes. Returns DS_GRPC_OK, or (sticky) RESOURCE_EXHAUSTED for a declared length over
 * max_len, UNIMPLEMENTED for the compressed flag, INVALID_ARGUMENT for a flag byte other than
 * 0/1, INTERNAL when out of memory, or the callback's status; errbuf says which. */
enum ds_grpc_code ds_grpc_reader_feed(struct ds_grpc_reader *r, const uint8_t *p, size_t n,
                                      ds_grpc_msg_cb cb, void *ctx, char *errbuf, size_t errlen);
/* True when bytes of an unfinished message (or prefix) are buffered: at end of stream this
 * means the peer sent a truncated message. */
bool ds_grpc_reader_partial(const struct ds_grpc_reader *r);

/* ---- headers ---- */

/* Parses a grpc-timeout value ("1-8 digits" + one of H M S m u n) into nanoseconds,
 * saturating at UINT64_MAX. Returns false when malformed. */
bool ds_grpc_timeout_parse(const char *s, size_t len, uint64_t *ns);

/* Percent-encodes a grpc-message per the gRPC HTTP/2 spec: bytes outside 0x20..0x7e and '%'
 * become %XX. Always NUL-terminates (truncating whole escapes) when outlen > 0. */
void ds_grpc_percent_encode(const char *in, char *out, size_t outlen);

#endif
