/* attn_mma_emu.h - a host emulation of the CUDA primitives kernels/attn_mma.cu uses, so its
 * kernel source runs unchanged on the CPU (tests/gpu/test_attn_mma_emu.cc, a unit test).
 *
 * The 128 threads of a CTA are fibers (ucontext) in one OS thread that switch only at the
 * synchronizing primitives: __syncthreads, shuffles, ldmatrix and mma (warp collectives: every
 * lane deposits its operands, waits for the warp, computes its own results from all lanes',
 * waits again). ldmatrix and mma follow the fragment layouts of the PTX ISA (m8n8 .b16
 * matrices; m16n8k16 .bf16 A/B/C); an mma element is its exact sum in double, rounded once.
 * cp.async copies are held per thread and land only at the cp.async.wait_group that covers
 * them, so reading a tile before waiting for it shows up as stale data; and what landed becomes
 * visible to the other threads only at the copying thread's next __syncthreads or __syncwarp
 * (the CUDA memory model: wait_group completes the copies for the thread that issued them), so
 * a thread reading another's copies without a barrier between (a warp collective such as
 * ldmatrix is not one) also reads stale data. The emulation tests
 * the kernel's indexing, grouping, masking and synchronization, not the hardware's rounding.
 * Included by kernels/attn_mma.cu when DS_ATTN_MMA_EMU is defined; C++ only. */
#ifndef DS_ATTN_MMA_EMU_H
#define DS_ATTN_MMA_EMU_H

#include <strings.h> /* ffs */
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include <cuda_runtime_api.h> /* first: its host_defines.h defines the qualifiers below */

#include "cu_common.cuh" /* ds_common.h for C++ */

#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __launch_bounds__
#undef __shared__
#undef __align__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#define __align__(x)

using std::max;
using std::min;

struct emu_dim3 {
	unsigned x, y, z;
};

#define EMU_THREADS 128
#define EMU_WARPS (EMU_THREADS / 32)
#define EMU_STACK (256 << 10)

struct emu_copy {
	void *dst;
	uint8_t data[16];
	int group;
};

struct emu_fiber {
	ucontext_t ctx;
	emu_dim3 tidx;
	bool done;
	std::vector<char> stack;
	std::vector<emu_copy> pending; /* cp.async not yet landed */
	std::vector<emu_copy> landed;  /* landed, not yet visible to the other threads */
	int groups;                    /* committed groups */
};

struct emu_state {
	emu_fiber *cur;
	ucontext_t sched;
	emu_dim3 bidx, gdim;
	unsigned long bar_gen;
	int bar_count, alive;
	unsigned long wgen[EMU_WARPS];
	int wcount[EMU_WARPS];
	uint32_t slot[EMU_WARPS][32][10]; /* a lane's operands of a warp collective */
	const void *addr[EMU_WARPS][32];
	std::function<void()> body;
	long switches;
};

static emu_state emu;
/* the larger of attn_mma.cu's 2 x (K, V) tiles and attn_decode_mma.cuh's 3 stages with its
 * fused epilogue's fp32 heads (up to 8 + 2 of 128) and RoPE row (128), and its 256 int block-table
 * entries */
alignas(16) static uint16_t mt_smem_emu[3 * 2 * 64 * (128 + 8) + 2 * 11 * 128 + 8 + 2 * 256];
#define mt_smem mt_smem_emu /* the kernel's extern __shared__ array */

#define threadIdx (emu.cur->tidx)
#define blockIdx (emu.bidx)
#define gridDim (emu.gdim)

static inline void emu_yield()
{
	emu.switches++;
	swapcontext(&emu.cur->ctx, &emu.sched);
}

/* This thread's landed copies become visible (at a barrier it passes). */
static inline void emu_publish()
{
	for (auto &c : emu.cur->landed)
		memcpy(c.dst, c.data, 16);
	emu.cur->landed.clear();
}

static inline void __syncthreads()
{
	emu_publish();
	unsigned long g = emu.bar_gen;
	if (++emu.bar_count == emu.alive) {
		emu.bar_count = 0;
		emu.bar_gen++;
		return;
	}
	while (emu.bar_gen == g)
		emu_yield();
}

static inline void emu_warp_sync()
{
	int w = (int)threadIdx.x / 32;
	unsigned long g = emu.wgen[w];
	if (++emu.wcount[w] == 32) {
		emu.wcount[w] = 0;
		emu.wgen[w]++;
		return;
	}
	while (emu.wgen[w] == g)
		emu_yield();
}

static inline void __syncwarp(void)
{
	emu_publish();
	emu_warp_sync();
}

static inline int __ffs(int x)
{
	return ffs(x);
}

static inline float __uint_as_float(unsigned u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static inline unsigned __float_as_uint(float f)
{
	unsigned u;
	memcpy(&u, &f, 4);
	return u;
}

static inline float __fmul_rn(float a, float b)
{
	return a * b;
}
static inline float __fadd_rn(float a, float b)
{
	return a + b;
}
static inline float __fsub_rn(float a, float b)
{
	return a - b;
}
static inline float __fdiv_rn(float a, float b)
{
	return a / b;
}
static inline float __fmaf_rn(float a, float b, float c)
{
	return fmaf(a, b, c);
}

static inline int atomicMin(int *p, int v)
{
	int old = *p; /* fibers switch only at synchronizing primitives: this is atomic */
	*p = std::min(old, v);
	return old;
}

static inline float __shfl_xor_sync(unsigned mask, float v, int m)
{
	(void)mask;
	int w = (int)threadIdx.x / 32, l = (int)threadIdx.x % 32;
	emu.slot[w][l][0] = __float_as_uint(v);
	emu_warp_sync();
	float r = __uint_as_float(emu.slot[w][l ^ m][0]);
	emu_warp_sync();
	return r;
}

/* ---- cp.async ---- */

static inline void mt_cp16(void *smem, const void *gmem, bool valid)
{
	emu_copy c;
	c.dst = smem;
	if (valid)
		memcpy(c.data, gmem, 16);
	else
		memset(c.data, 0, 16);
	c.group = -1; /* uncommitted */
	emu.cur->pending.push_back(c);
}

static inline void mt_commit(void)
{
	for (auto &c : emu.cur->pending)
		if (c.group < 0)
			c.group = emu.cur->groups;
	emu.cur->groups++;
}

template <int N> static inline void mt_wait(void)
{
	std::vector<emu_copy> keep;
	for (auto &c : emu.cur->pending) {
		if (c.group >= 0 && c.group < emu.cur->groups - N)
			emu.cur->landed.push_back(c); /* visible at this thread's next barrier */
		else
			keep.push_back(c);
	}
	emu.cur->pending.swap(keep);
}

/* ---- ldmatrix: lanes 8i..8i+7 give the row addresses of matrix i ---- */

static inline uint16_t emu_at(const void *row, int col)
{
	uint16_t v;
	memcpy(&v, (const uint8_t *)row + 2 * col, 2);
	return v;
}

static inline void emu_ldsm(unsigned *r, const void *smem, bool trans)
{
	int w = (int)threadIdx.x / 32, l = (int)threadIdx.x % 32;
	emu.addr[w][l] = smem;
	emu_warp_sync();
	for (int i = 0; i < 4; i++) {
		uint16_t lo, hi;
		if (!trans) { /* lane l: row l / 4, columns 2 (l % 4), +1 */
			const void *row = emu.addr[w][8 * i + l / 4];
			lo = emu_at(row, 2 * (l % 4));
			hi = emu_at(row, 2 * (l % 4) + 1);
		} else { /* lane l: rows 2 (l % 4), +1 of column l / 4 */
			lo = emu_at(emu.addr[w][8 * i + 2 * (l % 4)], l / 4);
			hi = emu_at(emu.addr[w][8 * i + 2 * (l % 4) + 1], l / 4);
		}
		r[i] = (unsigned)lo | ((unsigned)hi << 16);
	}
	emu_warp_sync();
}

static inline void mt_ldsm_x4(unsigned *r, const void *smem)
{
	emu_ldsm(r, smem, false);
}

static inline void mt_ldsm_x4_trans(unsigned *r, const void *smem)
{
	emu_ldsm(r, smem, true);
}

/* ---- mma.m16n8k16 bf16 -> f32 (g = lane / 4, t = lane % 4) ----
 * A: a0 (g, 2t..2t+1) a1 (g+8, 2t..) a2 (g, 2t+8..) a3 (g+8, 2t+8..); B: b0 (k 2t..2t+1, n g)
 * b1 (k 2t+8.., n g); C/D: c0 c1 (g, 2t..2t+1) c2 c3 (g+8, 2t..). */
static inline void mt_mma(float *c, const unsigned *a, unsigned b0, unsigned b1)
{
	int w = (int)threadIdx.x / 32, l = (int)threadIdx.x % 32;
	uint32_t *s = emu.slot[w][l];
	for (int i = 0; i < 4; i++)
		s[i] = a[i];
	s[4] = b0;
	s[5] = b1;
	emu_warp_sync();
	float A[16][16], B[16][8];
	for (int ln = 0; ln < 32; ln++) {
		int g = ln / 4, t = ln % 4;
		const uint32_t *o = emu.slot[w][ln];
		int ar[4] = {g, g + 8, g, g + 8}, ac[4] = {2 * t, 2 * t, 2 * t + 8, 2 * t + 8};
		for (int i = 0; i < 4; i++) {
			A[ar[i]][ac[i]] = ds_bf16_to_f32((uint16_t)(o[i] & 0xffff));
			A[ar[i]][ac[i] + 1] = ds_bf16_to_f32((uint16_t)(o[i] >> 16));
		}
		for (int i = 0; i < 2; i++) {
			B[2 * t + 8 * i][g] = ds_bf16_to_f32((uint16_t)(o[4 + i] & 0xffff));
			B[2 * t + 8 * i + 1][g] = ds_bf16_to_f32((uint16_t)(o[4 + i] >> 16));
		}
	}
	emu_warp_sync();
	int g = l / 4, t = l % 4;
	for (int i = 0; i < 4; i++) {
		int row = g + 8 * (i / 2), col = 2 * t + (i % 2);
		double acc = c[i];
		for (int k = 0; k < 16; k++)
			acc += (double)A[row][k] * B[k][col];
		c[i] = (float)acc;
	}
}

static inline void mt_st2(float *dst, float a, float b)
{
	dst[0] = a;
	dst[1] = b;
}

static inline unsigned mt_pack(float lo, float hi)
{
	return (unsigned)ds_f32_to_bf16(lo) | ((unsigned)ds_f32_to_bf16(hi) << 16);
}

/* ---- running a grid ---- */

static void emu_entry()
{
	emu.body();
	emu.cur->done = true;
	emu.alive--;
	/* returns to emu.sched through uc_link */
}

/* Runs body as every thread of every CTA of grid (gx, gy), one CTA at a time. */
static void emu_launch(unsigned gx, unsigned gy, std::function<void()> body)
{
	static std::vector<emu_fiber> fibers(EMU_THREADS);
	emu.body = body;
	emu.gdim = {gx, gy, 1};
	for (unsigned by = 0; by < gy; by++)
		for (unsigned bx = 0; bx < gx; bx++) {
			emu.bidx = {bx, by, 0};
			emu.bar_gen = 0;
			emu.bar_count = 0;
			emu.alive = EMU_THREADS;
			for (int w = 0; w < EMU_WARPS; w++)
				emu.wcount[w] = 0;
			/* poison shared memory: the kernel must not read what it did not write */
			memset(mt_smem_emu, 0x7f, sizeof(mt_smem_emu));
			for (int i = 0; i < EMU_THREADS; i++) {
				emu_fiber &f = fibers[(size_t)i];
				f.stack.resize(EMU_STACK);
				f.done = false;
				f.pending.clear();
				f.landed.clear();
				f.groups = 0;
				f.tidx = {(unsigned)i, 0, 0};
				getcontext(&f.ctx);
				f.ctx.uc_stack.ss_sp = f.stack.data();
				f.ctx.uc_stack.ss_size = f.stack.size();
				f.ctx.uc_link = &emu.sched;
				makecontext(&f.ctx, emu_entry, 0);
			}
			for (bool any = true; any;) {
				any = false;
				for (int i = 0; i < EMU_THREADS; i++) {
					emu_fiber &f = fibers[(size_t)i];
					if (f.done)
						continue;
					any = true;
					emu.cur = &f;
					swapcontext(&emu.sched, &f.ctx);
				}
			}
		}
}

/* ---- for the tests that run kernels here ---- */

/* CHECK: a failed check prints where it happened and ends the test: main catches it and
 * returns 1 (no exit() outside main, no failure counter). Checks run on the host between
 * emulated launches, never inside a fiber. */
struct check_failed {};

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, __VA_ARGS__);                                              \
			fprintf(stderr, "\n");                                                     \
			throw check_failed();                                                      \
		}                                                                                  \
	} while (0)

#endif
