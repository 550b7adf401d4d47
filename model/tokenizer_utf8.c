/* tokenizer_utf8.c - the GPT-2 byte <-> unicode mapping and UTF-8 validation/replacement.
 *
 * Replacement follows the Unicode "maximal subpart" practice, one U+FFFD per maximal
 * ill-formed subsequence, which is what Python's bytes.decode('utf-8', 'replace') and
 * Rust's String::from_utf8_lossy do, so our input sanitizing and our decode output agree
 * with the reference byte for byte. */
#include "tokenizer_internal.h"

/* ---- the GPT-2 byte <-> unicode mapping ---- */

static bool byte_is_direct(unsigned b)
{
	return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
}

/* The bytes that are not printable stand in for themselves shifted to U+0100.. in order:
 * 0..32 -> U+0100..U+0120, 127..160 -> U+0121..U+0142, 173 -> U+0143. */
uint32_t ds_tok_byte_to_cp(uint8_t b)
{
	if (byte_is_direct(b))
		return b;
	if (b <= 32)
		return 256u + b;
	if (b <= 160)
		return 256u + 33u + (b - 127u);
	return 256u + 67u; /* 173 */
}

static int cp_to_byte(uint32_t cp)
{
	if (cp < 256)
		return byte_is_direct(cp) ? (int)cp : -1;
	uint32_t n = cp - 256;
	if (n <= 32)
		return (int)n;
	if (n <= 66)
		return (int)(127 + n - 33);
	return n == 67 ? 173 : -1;
}

bool ds_tok_unmap(const char *s, size_t len, char *out, size_t *out_len)
{
	const uint8_t *p = (const uint8_t *)s;
	size_t o = 0;
	for (size_t i = 0; i < len;) {
		int cl = ds_utf8_char_len(p + i, len - i);
		if (cl <= 0)
			return false;
		uint32_t cp;
		if (cl == 1)
			cp = p[i];
		else if (cl == 2)
			cp = ((uint32_t)(p[i] & 0x1f) << 6) | (p[i + 1] & 0x3f);
		else
			return false; /* image is below U+0800 */
		int b = cp_to_byte(cp);
		if (b < 0)
			return false;
		out[o++] = (char)b;
		i += (size_t)cl;
	}
	*out_len = o;
	return true;
}

size_t ds_tok_map(const uint8_t *raw, size_t len, char *out)
{
	size_t o = 0;
	for (size_t i = 0; i < len; i++) {
		uint32_t cp = ds_tok_byte_to_cp(raw[i]);
		if (cp < 0x80) {
			out[o++] = (char)cp;
		} else {
			out[o++] = (char)(0xc0 | (cp >> 6));
			out[o++] = (char)(0x80 | (cp & 0x3f));
		}
	}
	out[o] = 0;
	return o;
}

/* ---- UTF-8 ---- */

int ds_utf8_char_len(const uint8_t *p, size_t n)
{
	uint8_t c = p[0];
	if (c < 0x80)
		return 1;
	int need;
	uint8_t lo = 0x80, hi = 0xbf;
	if (c >= 0xc2 && c <= 0xdf) {
		need = 2;
	} else if (c >= 0xe0 && c <= 0xef) {
		need = 3;
		if (c == 0xe0)
			lo = 0xa0;
		else if (c == 0xed)
			hi = 0x9f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		need = 4;
		if (c == 0xf0)
			lo = 0x90;
		else if (c == 0xf4)
			hi = 0x8f;
	} else {
		return 0;
	}
	for (int k = 1; k < need; k++) {
		if ((size_t)k >= n)
			return -(need - k);
		uint8_t lo_k = k == 1 ? lo : 0x80, hi_k = k == 1 ? hi : 0xbf;
		if (p[k] < lo_k || p[k] > hi_k)
			return 0;
	}
	return need;
}

size_t ds_utf8_bad_len(const uint8_t *p, size_t n)
{
	/* the lead byte plus the continuation bytes that were still acceptable: the longest
	 * prefix that is a valid but incomplete sequence */
	size_t m = n < 4 ? n : 4;
	while (m > 1 && ds_utf8_char_len(p, m) == 0)
		m--;
	return m;
}

size_t ds_utf8_sanitize(const uint8_t *in, size_t len, char *out)
{
	size_t o = 0;
	for (size_t i = 0; i < len;) {
		int cl = ds_utf8_char_len(in + i, len - i);
		if (cl > 0) {
			if (out)
				memcpy(out + o, in + i, (size_t)cl);
			o += (size_t)cl;
			i += (size_t)cl;
			continue;
		}
		if (!out)
			return 0;
		/* cl < 0: truncated at the end of input, one replacement for the rest */
		size_t bad = cl < 0 ? len - i : ds_utf8_bad_len(in + i, len - i);
		memcpy(out + o, "\xef\xbf\xbd", 3);
		o += 3;
		i += bad;
	}
	return out ? o : 1;
}
