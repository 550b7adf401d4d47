/* rng.h - counter-based hashing used for synthetic weights and for sampling.
 *
 * Everything random in detserve is a pure function of a key (seed, stream, counter), never of
 * call order, so the CPU writer, the GPU generator and the sampler agree by construction.
 * Host and device share these inline definitions (DS_HD). */
#ifndef DS_RNG_H
#define DS_RNG_H

#include "ds_common.h"

static inline DS_HD uint64_t ds_mix64(uint64_t x)
{
	/* splitmix64 finalizer */
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

/* A 64-bit hash of (a, b, c); each argument passes through its own mixing round. A loop over c
 * with a and b fixed can take ds_hash2(a, b) once and finish each c with ds_hash3_last: the
 * same bits. */
static inline DS_HD uint64_t ds_hash2(uint64_t a, uint64_t b)
{
	uint64_t h = ds_mix64(a + 0x9e3779b97f4a7c15ull);
	return ds_mix64(h ^ (b + 0x632be59bd9b4e019ull));
}

static inline DS_HD uint64_t ds_hash3_last(uint64_t h2, uint64_t c)
{
	return ds_mix64(h2 ^ (c + 0x85157af5a3f0d1c3ull));
}

static inline DS_HD uint64_t ds_hash3(uint64_t a, uint64_t b, uint64_t c)
{
	return ds_hash3_last(ds_hash2(a, b), c);
}

/* Uniform in [-1, 1) with 24 bits, exactly representable in f32. */
static inline DS_HD float ds_hash_unit_pm1(uint64_t h)
{
	return (float)(int32_t)((uint32_t)(h >> 40) - (1u << 23)) * (1.0f / 8388608.0f);
}

/* Uniform in (0, 1] with 53 bits, never 0 (for Gumbel noise): (m + 1/2) 2^-53 for the top 53
 * bits m, rounded to the even neighbour where that needs 54 bits (m >= 2^52), so the last m gives
 * exactly 1 (Gumbel noise +inf) with probability 2^-53. Kept as it is: it defines the sampler's
 * bits. */
static inline DS_HD double ds_hash_unit_open(uint64_t h)
{
	return ((double)(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

#endif
