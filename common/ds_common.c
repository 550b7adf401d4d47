/* ds_common.c - status strings, error formatting and the abort path. */
#include "ds_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>

const char *ds_status_str(enum ds_status s)
{
	switch (s) {
	case DS_OK: return "ok";
	case DS_ERR_INVALID: return "invalid argument";
	case DS_ERR_NOMEM: return "out of memory";
	case DS_ERR_IO: return "i/o error";
	case DS_ERR_FORMAT: return "malformed input";
	case DS_ERR_UNSUPPORTED: return "unsupported";
	case DS_ERR_NOT_FOUND: return "not found";
	case DS_ERR_FULL: return "full";
	case DS_ERR_TOO_LONG: return "too long";
	case DS_ERR_CANCELLED: return "cancelled";
	case DS_ERR_PRECONDITION: return "failed precondition";
	case DS_ERR_DEVICE: return "device error";
	case DS_ERR_INTERNAL: return "internal error";
	}
	return "unknown status";
}

enum ds_status ds_errf(struct ds_err *err, enum ds_status s, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
		va_end(ap);
	}
	return s;
}

_Noreturn void ds_abort_at(const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s:%d: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

float ds_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h >> 15) & 1u;
	uint32_t exp = (uint32_t)(h >> 10) & 0x1fu;
	uint32_t man = (uint32_t)h & 0x3ffu;
	float v;
	if (exp == 0)
		v = ldexpf((float)man, -24); /* subnormal or zero */
	else if (exp == 31)
		v = man ? NAN : INFINITY;
	else
		v = ldexpf((float)(man | 0x400u), (int)exp - 25);
	return sign ? -v : v;
}
