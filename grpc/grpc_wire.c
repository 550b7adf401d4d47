/* grpc_wire.c - gRPC status names, the 5-byte message prefix and its incremental deframer,
 * grpc-timeout and grpc-message codecs. Pure functions over bytes: the unit test and the fuzz
 * target drive them directly. The deframer copies only a body that straddles feed() calls;
 * its reassembly buffer is kept (and grown) across messages of one stream. */
#include "grpc_wire.h"

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

enum ds_grpc_code ds_grpc_code_from_http(int http_status)
{
	switch (http_status) {
	case 400:
		return DS_GRPC_INTERNAL;
	case 401:
		return DS_GRPC_UNAUTHENTICATED;
	case 403:
		return DS_GRPC_PERMISSION_DENIED;
	case 404:
		return DS_GRPC_UNIMPLEMENTED;
	case 429:
	case 502:
	case 503:
	case 504:
		return DS_GRPC_UNAVAILABLE;
	default:
		return DS_GRPC_UNKNOWN;
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

/* ---- deframer ---- */

void ds_grpc_deframer_init(struct ds_grpc_deframer *d, size_t max_msg)
{
	memset(d, 0, sizeof(*d));
	d->max_msg = max_msg;
}

void ds_grpc_deframer_free(struct ds_grpc_deframer *d)
{
	free(d->buf);
	memset(d, 0, sizeof(*d));
}

bool ds_grpc_deframer_idle(const struct ds_grpc_deframer *d)
{
	return d->hdr_got == 0;
}

static enum ds_status deframer_fail(struct ds_grpc_deframer *d, enum ds_status rv)
{
	d->failed = rv;
	return rv;
}

/* Validates a complete prefix and sets d->need. */
static enum ds_status deframer_prefix(struct ds_grpc_deframer *d, struct ds_err *err)
{
	if (d->hdr[0] == 1)
		return ds_errf(err, DS_ERR_UNSUPPORTED,
		               "grpc frame: compressed message, but no grpc-encoding is supported "
		               "(use identity)");
	if (d->hdr[0] != 0)
		return ds_errf(err, DS_ERR_FORMAT, "grpc frame: bad message flag byte 0x%02x",
		               d->hdr[0]);
	d->need = (size_t)d->hdr[1] << 24 | (size_t)d->hdr[2] << 16 | (size_t)d->hdr[3] << 8 |
	          (size_t)d->hdr[4];
	if (d->need > d->max_msg)
		return ds_errf(err, DS_ERR_TOO_LONG,
		               "grpc frame: message of %zu bytes exceeds the limit of %zu bytes",
		               d->need, d->max_msg);
	d->got = 0;
	return DS_OK;
}

/* Hands one complete message to the callback; the deframer is idle again first. */
static enum ds_status deframer_deliver(struct ds_grpc_deframer *d, const uint8_t *msg, size_t len,
                                       ds_grpc_msg_fn fn, void *ud, struct ds_err *err)
{
	d->hdr_got = 0;
	return fn(ud, msg, len, err);
}

enum ds_status ds_grpc_deframer_feed(struct ds_grpc_deframer *d, const uint8_t *data, size_t n,
                                     ds_grpc_msg_fn fn, void *ud, struct ds_err *err)
{
	enum ds_status rv;

	if (d->failed != DS_OK)
		return ds_errf(err, d->failed, "grpc frame: input after an earlier error");
	while (n > 0) {
		if (d->hdr_got < 5) {
			size_t k = DS_MIN(5 - d->hdr_got, n);
			memcpy(d->hdr + d->hdr_got, data, k);
			d->hdr_got += k;
			data += k;
			n -= k;
			if (d->hdr_got < 5)
				break;
			if ((rv = deframer_prefix(d, err)) != DS_OK)
				return deframer_fail(d, rv);
			if (n >= d->need) { /* the whole body is already here: no copy */
				const uint8_t *msg = data;
				size_t len = d->need;
				data += len;
				n -= len;
				if ((rv = deframer_deliver(d, msg, len, fn, ud, err)) != DS_OK)
					return deframer_fail(d, rv);
				continue;
			}
			if (d->need > d->cap) {
				uint8_t *nb = realloc(d->buf, d->need);
				if (!nb)
					return deframer_fail(
					    d,
					    ds_errf(
					        err, DS_ERR_NOMEM,
					        "grpc frame: out of memory for a %zu-byte message",
					        d->need));
				d->buf = nb;
				d->cap = d->need;
			}
		}
		size_t k = DS_MIN(d->need - d->got, n);
		memcpy(d->buf + d->got, data, k);
		d->got += k;
		data += k;
		n -= k;
		if (d->got == d->need &&
		    (rv = deframer_deliver(d, d->buf, d->need, fn, ud, err)) != DS_OK)
			return deframer_fail(d, rv);
	}
	return DS_OK;
}

/* ---- grpc-timeout ---- */

void ds_grpc_timeout_format(char out[10], uint64_t timeout_ns)
{
	/* units from fine to coarse, in nanoseconds; the value must fit in 8 digits */
	static const struct {
		char unit;
		uint64_t ns;
	} units[] = {{'u', 1000ull},
	             {'m', 1000000ull},
	             {'S', 1000000000ull},
	             {'M', 60000000000ull},
	             {'H', 3600000000000ull}};
	if (timeout_ns == 0)
		timeout_ns = 1;
	for (size_t i = 0; i < DS_ARRAY_LEN(units); i++) {
		/* rounded up without overflow near UINT64_MAX */
		uint64_t v = timeout_ns / units[i].ns + (timeout_ns % units[i].ns != 0);
		if (v <= 99999999ull || i + 1 == DS_ARRAY_LEN(units)) {
			if (v > 99999999ull)
				v = 99999999ull;
			snprintf(out, 10, "%llu%c", (unsigned long long)v, units[i].unit);
			return;
		}
	}
}

enum ds_status ds_grpc_timeout_parse(const char *s, size_t len, uint64_t *ns)
{
	uint64_t v = 0, mul;
	if (len < 2 || len > 9)
		return DS_ERR_INVALID;
	for (size_t i = 0; i + 1 < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return DS_ERR_INVALID;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
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
		return DS_ERR_INVALID;
	}
	*ns = (v != 0 && mul > UINT64_MAX / v) ? UINT64_MAX : v * mul;
	return DS_OK;
}

/* ---- grpc-message ---- */

size_t ds_grpc_percent_encode(char *out, size_t cap, const char *in)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;
	if (cap == 0)
		return 0;
	for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
		bool plain = *p >= 0x20 && *p <= 0x7e && *p != '%';
		size_t need = plain ? 1 : 3;
		if (o + need >= cap)
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
	return o;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

size_t ds_grpc_percent_decode(char *out, size_t cap, const char *in, size_t len)
{
	size_t o = 0;
	if (cap == 0)
		return 0;
	for (size_t i = 0; i < len && o + 1 < cap; i++) {
		int hi, lo;
		if (in[i] == '%' && i + 2 < len && (hi = hexval(in[i + 1])) >= 0 &&
		    (lo = hexval(in[i + 2])) >= 0) {
			out[o++] = (char)(hi << 4 | lo);
			i += 2;
		} else {
			out[o++] = in[i];
		}
	}
	out[o] = '\0';
	return o;
}
