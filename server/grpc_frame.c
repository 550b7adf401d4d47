/* grpc_frame.c - gRPC message framing, status names, grpc-timeout and grpc-message
 * encoding. Pure functions over bytes; the fuzz target drives them directly. */
#include "grpc_frame.h"

#include <stdio.h>
#include <stdlib.h>

static const char *const code_names[DS_GRPC_N_CODES] = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};

const char *ds_grpc_code_name(int code)
{
	if (code < 0 || code >= DS_GRPC_N_CODES)
		return "UNKNOWN";
	return code_names[code];
}

enum ds_grpc_code ds_grpc_code_from_status(enum ds_status s)
{
	switch (s) {
	case DS_OK:
		return DS_GRPC_OK;
	case DS_ERR_INVALID:
		return DS_GRPC_INVALID_ARGUMENT;
	case DS_ERR_TOO_LONG:
		return DS_GRPC_INVALID_ARGUMENT;
	case DS_ERR_FULL:
		return DS_GRPC_RESOURCE_EXHAUSTED;
	case DS_ERR_NOMEM:
		return DS_GRPC_RESOURCE_EXHAUSTED;
	case DS_ERR_PRECONDITION:
		return DS_GRPC_FAILED_PRECONDITION;
	case DS_ERR_UNSUPPORTED:
		return DS_GRPC_UNIMPLEMENTED;
	case DS_ERR_NOT_FOUND:
		return DS_GRPC_NOT_FOUND;
	case DS_ERR_CANCELLED:
		return DS_GRPC_CANCELLED;
	case DS_ERR_FORMAT:
		return DS_GRPC_INVALID_ARGUMENT;
	default:
		return DS_GRPC_INTERNAL;
	}
}

void ds_grpc_frame_prefix(uint8_t out[5], uint32_t len)
{
	out[0] = 0;
	out[1] = (uint8_t)(len >> 24);
	out[2] = (uint8_t)(len >> 16);
	out[3] = (uint8_t)(len >> 8);
	out[4] = (uint8_t)len;
}

/* ---- reader ---- */

void ds_grpc_reader_init(struct ds_grpc_reader *r, size_t max_len)
{
	memset(r, 0, sizeof(*r));
	r->max_len = max_len;
}

void ds_grpc_reader_free(struct ds_grpc_reader *r)
{
	free(r->msg);
	r->msg = NULL;
	r->in_msg = false;
}

bool ds_grpc_reader_partial(const struct ds_grpc_reader *r)
{
	return r->hdr_have > 0 || r->in_msg;
}

static enum ds_grpc_code reader_fail(struct ds_grpc_reader *r, enum ds_grpc_code c)
{
	r->failed = c;
	ds_grpc_reader_free(r);
	return c;
}

enum ds_grpc_code ds_grpc_reader_feed(struct ds_grpc_reader *r, const uint8_t *p, size_t n,
                                      ds_grpc_msg_cb cb, void *ctx, char *errbuf, size_t errlen)
{
	if (r->failed != DS_GRPC_OK)
		return r->failed;
	while (n > 0 || (r->in_msg && r->msg_have == r->msg_len)) {
		if (!r->in_msg) {
			size_t take = DS_MIN(n, 5 - r->hdr_have);
			memcpy(r->hdr + r->hdr_have, p, take);
			r->hdr_have += take;
			p += take;
			n -= take;
			if (r->hdr_have < 5)
				break;
			r->hdr_have = 0;
			uint32_t len = (uint32_t)r->hdr[1] << 24 | (uint32_t)r->hdr[2] << 16 |
			               (uint32_t)r->hdr[3] << 8 | r->hdr[4];
			if (r->hdr[0] == 1) {
				snprintf(errbuf, errlen,
				         "compressed messages are not supported (send "
				         "grpc-encoding identity)");
				return reader_fail(r, DS_GRPC_UNIMPLEMENTED);
			}
			if (r->hdr[0] != 0) {
				snprintf(errbuf, errlen, "bad message flag byte 0x%02x", r->hdr[0]);
				return reader_fail(r, DS_GRPC_INVALID_ARGUMENT);
			}
			if (len > r->max_len) {
				snprintf(
				    errbuf, errlen,
				    "request message of %u bytes exceeds the limit of %zu bytes",
				    len, r->max_len);
				return reader_fail(r, DS_GRPC_RESOURCE_EXHAUSTED);
			}
			r->msg_len = len;
			r->msg_have = 0;
			r->msg = NULL;
			if (len > 0 && !(r->msg = malloc(len))) {
				snprintf(errbuf, errlen, "out of memory for a %u-byte message",
				         len);
				return reader_fail(r, DS_GRPC_INTERNAL);
			}
			r->in_msg = true;
			continue;
		}
		size_t take = DS_MIN(n, r->msg_len - r->msg_have);
		if (take) {
			memcpy(r->msg + r->msg_have, p, take);
			r->msg_have += take;
			p += take;
			n -= take;
		}
		if (r->msg_have < r->msg_len)
			break;
		uint8_t *msg = r->msg;
		size_t len = r->msg_len;
		r->msg = NULL;
		r->in_msg = false;
		enum ds_grpc_code c = cb(ctx, msg, len, errbuf, errlen);
		if (c != DS_GRPC_OK)
			return reader_fail(r, c);
	}
	return DS_GRPC_OK;
}

/* ---- headers ---- */

bool ds_grpc_timeout_parse(const char *s, size_t len, uint64_t *ns)
{
	if (len < 2 || len > 9)
		return false;
	uint64_t v = 0;
	for (size_t i = 0; i + 1 < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	uint64_t mul;
	switch (s[len - 1]) {
	case 'H':
		mul = 3600ull * 1000000000ull;
		break;
	case 'M':
		mul = 60ull * 1000000000ull;
		break;
	case 'S':
		mul = 1000000000ull;
		break;
	case 'm':
		mul = 1000000ull;
		break;
	case 'u':
		mul = 1000ull;
		break;
	case 'n':
		mul = 1ull;
		break;
	default:
		return false;
	}
	*ns = (v != 0 && mul > UINT64_MAX / v) ? UINT64_MAX : v * mul;
	return true;
}

void ds_grpc_percent_encode(const char *in, char *out, size_t outlen)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;
	if (outlen == 0)
		return;
	for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
		bool plain = *p >= 0x20 && *p <= 0x7e && *p != '%';
		size_t need = plain ? 1 : 3;
		if (o + need >= outlen)
			break;
		if (plain) {
			out[o++] = (char)*p;
		} else {
			out[o++] = '%';
			out[o++] = hex[*p >> 4];
			out[o++] = hex[*p & 15];
		}
	}
	out[o] = '\0';
}
