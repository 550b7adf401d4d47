/* grpc_wire.h - the transport-independent gRPC wire pieces shared by the server and the client:
 * status codes and their names, the 5-byte length-prefixed message framing (an incremental
 * deframer that reassembles messages across DATA frames and splits several per frame),
 * grpc-timeout format/parse, grpc-message percent-encoding/decoding, and the HTTP-status
 * fallback mapping. Nothing here knows about sockets, nghttp2 or which side it runs on.
 *
 * Key decision: the deframer is a push parser that checks the declared length against its
 * limit as soon as the prefix is complete, so an oversized message is refused before any of it
 * is buffered, and a message that lies whole inside one slice is handed over in place (no copy);
 * it copies only what straddles feed() calls. Mapping its errors to a gRPC status is the
 * caller's business: a server refusing a request and a client refusing a response answer with
 * different codes. */
#ifndef DS_GRPC_WIRE_H
#define DS_GRPC_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ds_common.h"

/* The canonical gRPC status codes (grpc/doc/statuscodes.md). */
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

/* "OK", "INVALID_ARGUMENT", ...; "UNKNOWN" for codes outside 0..16. */
const char *ds_grpc_code_name(int code);
/* Maps the HTTP :status of a response that carries no grpc-status (gRPC's
 * http-grpc-status-mapping.md). */
enum ds_grpc_code ds_grpc_code_from_http(int http_status);

/* ---- framing ---- */

/* Writes the 5-byte prefix (flag 0 = uncompressed, big-endian length). */
void ds_grpc_frame_prefix(uint8_t out[5], uint32_t len);

/* Called once per complete message; msg is valid only during the call (copy it to keep it).
 * Return DS_OK to continue; any other status stops the deframer and is returned by feed()
 * as is, with the message the callback wrote into err. */
typedef enum ds_status (*ds_grpc_msg_fn)(void *ud, const uint8_t *msg, size_t len,
                                         struct ds_err *err);

struct ds_grpc_deframer {
	size_t max_msg; /* largest accepted message (bytes) */
	uint8_t hdr[5];
	size_t hdr_got; /* bytes of hdr filled; 5 while a body is being reassembled */
	uint8_t *buf;   /* (cap) reassembly buffer for a body that straddles feed() calls */
	size_t cap;
	size_t need;           /* the body length from the prefix */
	size_t got;            /* body bytes in buf */
	enum ds_status failed; /* sticky: once set, further input is refused */
};

void ds_grpc_deframer_init(struct ds_grpc_deframer *d, size_t max_msg);
void ds_grpc_deframer_free(struct ds_grpc_deframer *d);
/* Feeds any slice of bytes (n may be 0). Errors (sticky: later feeds return the same status):
 * DS_ERR_UNSUPPORTED (compressed flag set: we negotiate no grpc-encoding), DS_ERR_FORMAT (a flag
 * byte other than 0/1), DS_ERR_TOO_LONG (declared length over max_msg, refused before buffering),
 * DS_ERR_NOMEM, or the callback's status. err (may be NULL) says which. */
enum ds_status ds_grpc_deframer_feed(struct ds_grpc_deframer *d, const uint8_t *data, size_t n,
                                     ds_grpc_msg_fn fn, void *ud, struct ds_err *err);
/* True when no partial message (or prefix) is buffered: a stream may end here cleanly. */
bool ds_grpc_deframer_idle(const struct ds_grpc_deframer *d);

/* ---- headers ---- */

/* Formats a grpc-timeout value ("<= 8 digits" + unit) for timeout_ns, choosing the finest unit
 * from u(s) up that fits and rounding up, so the deadline is never shortened (0 is sent as 1u;
 * beyond 99999999H it is capped). out always holds a NUL-terminated string of <= 9 chars. */
void ds_grpc_timeout_format(char out[10], uint64_t timeout_ns);
/* Parses a grpc-timeout value (1-8 digits + one of H M S m u n) into nanoseconds, saturating at
 * UINT64_MAX. DS_ERR_INVALID when malformed. */
enum ds_status ds_grpc_timeout_parse(const char *s, size_t len, uint64_t *ns);

/* Percent-encodes a grpc-message (gRPC HTTP/2 spec): bytes outside 0x20..0x7e and '%' become
 * %XX. Always NUL-terminates when cap > 0, truncating only at whole escapes. Returns the
 * encoded length. */
size_t ds_grpc_percent_encode(char *out, size_t cap, const char *in);
/* Percent-decodes a grpc-message value of len bytes into out (always NUL-terminated when
 * cap > 0, truncated to cap-1). Malformed escapes are copied verbatim, as the spec asks.
 * Returns the decoded length. */
size_t ds_grpc_percent_decode(char *out, size_t cap, const char *in, size_t len);

#endif
