/* cli_common.c - strict number parsing shared by the command-line programs (see cli_common.h):
 * strtoll/strtof with errno, end-pointer and range checks. */
#include "cli_common.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

bool ds_cli_parse_long(const char *s, long long lo, long long hi, long long *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

bool ds_cli_parse_float(const char *s, float *out)
{
	char *end;
	errno = 0;
	float v = strtof(s, &end);
	if (errno || end == s || *end || !isfinite(v))
		return false;
	*out = v;
	return true;
}
