/* grpcc_frame.c - gRPC status names, length-prefixed message reassembly, grpc-timeout and
 * grpc-message codecs. The deframer copies only when a message straddles feed() calls; a message
 * that lies whole inside one slice is handed to the callback in place. */
#include "grpcc_frame.h"

#include <stdio.h>
#include <stdlib.h>

static const char *const code_names[DS_GRPCC_CODE_COUNT] = {
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

const char *ds_grpcc_code_name(int code)
{
	if (code < 0 || code >= DS_GRPCC_CODE_COUNT)
		return "UNKNOWN";
	return code_names[code];
}

int ds_grpcc_code_from_http(int http_status)
{
	switch (http_status) {
	case 400:
		return DS_GRPCC_INTERNAL;
	case 401:
		return DS_GRPCC_UNAUTHENTICATED;
	case 403:
		return DS_GRPCC_PERMISSION_DENIED;
	case 404:
		return DS_GRPCC_UNIMPLEMENTED;
	case 429:
	case 502:
	case 503:
	case 504:
		return DS_GRPCC_UNAVAILABLE;
	default:
		return DS_GRPCC_UNKNOWN;
	}
}

void ds_grpcc_frame_header(uint8_t out[5], uint32_t len)
{
	out[0] = 0;
	out[1] = (uint8_t)(len >> 24);
	out[2] = (uint8_t)(len >> 16);
	out[3] = (uint8_t)(len >> 8);
	out[4] = (uint8_t)len;
}

/* ---- deframer ---- */

void ds_grpcc_deframer_init(struct ds_grpcc_deframer *d, size_t max_msg)
{
	memset(d, 0, sizeof(*d));
	d->max_msg = max_msg;
}

void ds_grpcc_deframer_free(struct ds_grpcc_deframer *d)
{
	free(d->buf);
	memset(d, 0, sizeof(*d));
}

bool ds_grpcc_deframer_idle(const struct ds_grpcc_deframer *d)
{
	return d->hdr_got == 0;
}

/* Validates a complete prefix and sets d->need. */
static enum ds_status deframer_header(struct ds_grpcc_deframer *d, struct ds_err *err)
{
	if (d->hdr[0] == 1)
		return ds_errf(err, DS_ERR_UNSUPPORTED,
		               "grpc frame: compressed flag set, no encoding negotiated");
	if (d->hdr[0] != 0)
		return ds_errf(err, DS_ERR_FORMAT, "grpc frame: bad flag byte 0x%02x", d->hdr[0]);
	d->need = ((size_t)d->hdr[1] << 24) | ((size_t)d->hdr[2] << 16) | ((size_t)d->hdr[3] << 8) |
	          (size_t)d->hdr[4];
	if (d->need > d->max_msg)
		return ds_errf(err, DS_ERR_TOO_LONG,
		               "grpc frame: message of %zu bytes exceeds the limit of %zu", d->need,
		               d->max_msg);
	d->got = 0;
	return DS_OK;
}

enum ds_status ds_grpcc_deframer_feed(struct ds_grpcc_deframer *d, const uint8_t *data, size_t len,
                                      ds_grpcc_msg_fn fn, void *ud, struct ds_err *err)
{
	enum ds_status rv;

	while (len > 0) {
		if (d->hdr_got < 5) {
			size_t n = DS_MIN(5 - d->hdr_got, len);
			memcpy(d->hdr + d->hdr_got, data, n);
			d->hdr_got += n;
			data += n;
			len -= n;
			if (d->hdr_got < 5)
				break;
			rv = deframer_header(d, err);
			if (rv != DS_OK)
				return rv;
			/* the whole body is already here: no copy */
			if (len >= d->need) {
				const uint8_t *msg = data;
				size_t n_msg = d->need;
				data += n_msg;
				len -= n_msg;
				d->hdr_got = 0;
				if (fn(ud, msg, n_msg) != 0)
					return ds_errf(err, DS_ERR_CANCELLED,
					               "grpc frame: stopped by the receiver");
				continue;
			}
			if (d->need > d->cap) {
				uint8_t *nb = realloc(d->buf, d->need);
				if (!nb)
					return ds_errf(err, DS_ERR_NOMEM,
					               "grpc frame: no memory for %zu bytes",
					               d->need);
				d->buf = nb;
				d->cap = d->need;
			}
		}
		size_t n = DS_MIN(d->need - d->got, len);
		memcpy(d->buf + d->got, data, n);
		d->got += n;
		data += n;
		len -= n;
		if (d->got == d->need) {
			d->hdr_got = 0;
			if (fn(ud, d->buf, d->need) != 0)
				return ds_errf(err, DS_ERR_CANCELLED,
				               "grpc frame: stopped by the receiver");
		}
	}
	return DS_OK;
}

/* ---- grpc-timeout ---- */

void ds_grpcc_timeout_format(char out[10], uint64_t timeout_us)
{
	/* units from fine to coarse, in microseconds; the value must fit in 8 digits */
	static const struct {
		char unit;
		uint64_t us;
	} units[] = {{'u', 1}, {'m', 1000}, {'S', 1000000}, {'M', 60000000}, {'H', 3600000000ull}};
	if (timeout_us == 0)
		timeout_us = 1;
	for (size_t i = 0; i < DS_ARRAY_LEN(units); i++) {
		uint64_t v = (timeout_us + units[i].us - 1) / units[i].us;
		if (v <= 99999999ull || i + 1 == DS_ARRAY_LEN(units)) {
			if (v > 99999999ull)
				v = 99999999ull;
			snprintf(out, 10, "%llu%c", (unsigned long long)v, units[i].unit);
			return;
		}
	}
}

enum ds_status ds_grpcc_timeout_parse(const char *s, size_t len, uint64_t *us)
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
	case 'n':
		*us = (v + 999) / 1000;
		return DS_OK;
	case 'u':
		mul = 1;
		break;
	case 'm':
		mul = 1000;
		break;
	case 'S':
		mul = 1000000;
		break;
	case 'M':
		mul = 60000000;
		break;
	case 'H':
		mul = 3600000000ull;
		break;
	default:
		return DS_ERR_INVALID;
	}
	*us = v * mul;
	return DS_OK;
}

/* ---- grpc-message ---- */

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

size_t ds_grpcc_percent_decode(char *out, size_t cap, const char *in, size_t len)
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
