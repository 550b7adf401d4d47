/* cli_common.h - strict number parsing for the command-line programs (detserve-gen,
 * bench_offline): the whole string must be a number in range, so a typo in an option is an
 * error instead of a silent 0. No globals, no exit(): callers decide what a bad value means. */
#ifndef DS_CLI_COMMON_H
#define DS_CLI_COMMON_H

#include <stdbool.h>

/* Parses a base-10 integer in [lo, hi] into *out. False (and *out untouched) when s is empty,
 * has trailing characters, overflows or is out of range. */
bool ds_cli_parse_long(const char *s, long long lo, long long hi, long long *out);
/* Parses a finite float into *out. False (and *out untouched) when s is empty, has trailing
 * characters, overflows or is not finite. */
bool ds_cli_parse_float(const char *s, float *out);

#endif
