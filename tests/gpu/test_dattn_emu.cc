/* test_dattn_emu.cc - runs the "pipe", "mma" and "mma_block" variants of kernels/attn_decode.cu
 * (K/V staged in shared memory by cp.async; the mma ones on emulated tensor cores, staged by each
 * warp for its own positions or by the whole block) and their combine kernel on the CPU, through
 * the emulated primitives of attn_mma_emu.h (no GPU needed): every thread is a fiber, shared
 * memory starts poisoned, a cp.async lands only at the wait_group that covers it and shows to
 * other threads only at its thread's next barrier, so a stage read before it arrived or without
 * a barrier after it, a buffer overwritten while still in use, a missing zero-fill or a wrong
 * index shows up as a wrong output. Checks against a double reference (the tolerance of
 * test_gpu_dattn.c): head_dim 64 and 128, GQA 1, 3, 4 and 8 (3 and 4 pipeline stages), block sizes
 * 16 and 12, rows of 1 to 200 positions and a padding row (zeros), grid splits 1, 2, 5 and 64
 * (partials merged by the combine kernel, or by the last block through counters: the same bits,
 * counters back at zero; the partial buffer starts as NaN), nothing written past the output. The
 * gpu suite's test_gpu_dattn.c checks every variant on the hardware. Sizes are small. */
#define DS_DATTN_EMU 1
#include <cuda_runtime.h>
#include <strings.h>

#include "pdl.cuh" /* before the emulation's macros (it names launch fields gridDim, blockDim) */

#include "attn_mma_emu.h"

/* what attn_mma.cu does not need: a 3-D grid, blockDim, __ldg, __ldcg, fences, atomicAdd
 * and two-argument bounds */
#undef __launch_bounds__
#define __launch_bounds__(...)
#undef blockIdx
#undef gridDim
static emu_dim3 de_bidx, de_gdim;
static const emu_dim3 de_bdim = {EMU_THREADS, 1, 1};
#define blockIdx (de_bidx)
#define gridDim (de_gdim)
#define blockDim (de_bdim)
template <class T> static inline T __ldg(const T *p)
{
	return *p;
}
template <class T> static inline T __ldcg(const T *p)
{
	return *p;
}
static inline void __threadfence(void)
{
}
static inline unsigned atomicAdd(unsigned *p, unsigned v)
{
	unsigned old = *p; /* fibers switch only at synchronizing primitives: this is atomic */
	*p = old + v;
	return old;
}

#include "../../kernels/attn_decode.cu"

#include <cstdio>
#include <cstdlib>

static_assert(dattn_pipe<128, 4>::SMEM <= sizeof(mt_smem_emu), "emulated shared memory");
static_assert(dattn_pipe<64, 4>::SMEM <= sizeof(mt_smem_emu), "emulated shared memory");
static_assert(dattn_mma<128, 8>::SMEM_EPI + dattn_mma<128, 8>::BT_BYTES <= sizeof(mt_smem_emu),
              "emulated shared memory");
static_assert(DA_THREADS == EMU_THREADS, "one fiber per thread");

#define NROW 7
#define NBLK 97
#define GUARD 64

static const int row_pos[NROW] = {0, 1, 31, -1, 32, 96, 199}; /* -1: padding */
static float rnd(uint64_t seed, uint64_t i, float a)
{
	float u = ds_hash_unit_pm1(ds_hash3(seed, 0x5eed, i));
	return a * (u == 0.0f ? 0.5f : u);
}

/* Every CTA of grid (gx, gy, gz), one at a time. */
template <class F> static void de_launch(unsigned gx, unsigned gy, unsigned gz, F body)
{
	de_gdim = {gx, gy, gz};
	for (unsigned z = 0; z < gz; z++)
		for (unsigned y = 0; y < gy; y++)
			for (unsigned x = 0; x < gx; x++) {
				de_bidx = {x, y, z};
				emu_launch(1, 1, std::function<void()>(body));
			}
}

struct fix {
	ds_k_dims d;
	std::vector<uint16_t> kv, q;
	std::vector<int32_t> pos, seq, off, bt;
	int max_blk;
};

static fix fix_make(int n_head, int n_kv, int D, int bs)
{
	fix f;
	f.d = ds_k_dims{n_head, n_kv, D, bs, NBLK, 1e-5f};
	f.max_blk = (200 + bs - 1) / bs;
	f.kv.resize((size_t)NBLK * 2 * n_kv * bs * D);
	for (size_t i = 0; i < f.kv.size(); i++)
		f.kv[i] = ds_f32_to_bf16(rnd(91, i, 1.0f));
	f.q.resize((size_t)NROW * n_head * D);
	for (size_t i = 0; i < f.q.size(); i++)
		f.q[i] = ds_f32_to_bf16(rnd(92, i, (i / ((size_t)n_head * D)) % 2 ? 6.0f : 2.0f));
	for (int t = 0; t < NROW; t++) {
		f.pos.push_back(row_pos[t]);
		f.seq.push_back(t);
		f.off.push_back(t * f.max_blk);
		for (int j = 0; j < f.max_blk; j++) /* scrambled, shared blocks are fine */
			f.bt.push_back((int32_t)(ds_hash3(93, (uint64_t)t, (uint64_t)j) % NBLK));
	}
	return f;
}

static void dref(const fix &f, int t, int h, double *out)
{
	const ds_k_dims &d = f.d;
	int D = d.head_dim, G = d.n_head / d.n_kv, kh = h / G, p = f.pos[(size_t)t];
	int bs = d.block_size;
	const uint16_t *qv = f.q.data() + ((size_t)t * d.n_head + h) * D;
	const int32_t *bt = f.bt.data() + f.off[(size_t)t];
	std::vector<double> s((size_t)p + 1);
	double m = -INFINITY, l = 0;
	for (int j = 0; j <= p; j++) {
		const uint16_t *k = f.kv.data() +
		                    (((size_t)bt[j / bs] * 2 * d.n_kv + kh) * bs + j % bs) * D;
		double a = 0;
		for (int i = 0; i < D; i++)
			a += (double)ds_bf16_to_f32(qv[i]) * ds_bf16_to_f32(k[i]);
		s[(size_t)j] = a / sqrt((double)D);
		m = fmax(m, s[(size_t)j]);
	}
	for (int i = 0; i < D; i++)
		out[i] = 0;
	for (int j = 0; j <= p; j++) {
		const uint16_t *v =
		    f.kv.data() +
		    (((size_t)bt[j / bs] * 2 * d.n_kv + d.n_kv + kh) * bs + j % bs) * D;
		double e = exp(s[(size_t)j] - m);
		l += e;
		for (int i = 0; i < D; i++)
			out[i] += e * ds_bf16_to_f32(v[i]);
	}
	for (int i = 0; i < D; i++)
		out[i] /= l;
}

/* The kernels run: the pipe variant, the mma one with warp-private stages (the default) and the
 * mma one staged by the whole block (DS_FAST_ATTN=mma_block). */
enum form { PIPE, MMA, MMA_BLOCK };
static const char *const form_name[] = {"pipe", "mma ", "mma_block"};

/* Kernel form k over the fixture at split nz: with fused, the last block of a row and KV head
 * merges (counters), else the combine kernel does (when nz > 1). Checks the guard. */
template <int D, int G>
static std::vector<uint16_t> run_kernel(const fix &f, int nz, bool fused, form k)
{
	const ds_k_dims d = f.d;
	int H = d.n_head;
	size_t on = (size_t)NROW * H * D;
	std::vector<uint16_t> out(on + GUARD, 0x7f7f);
	std::vector<float> part((size_t)NROW * H * nz * (D + 2), NAN);
	std::vector<unsigned> cnt((size_t)NROW * d.n_kv, 0);
	ds_k_tokmeta tm = {f.pos.data(), f.seq.data(), f.off.data(), f.bt.data()};
	float qscale = DA_LOG2E / sqrtf((float)D);
	const ds_k_qkv_epi none = {NULL, NULL, NULL, NULL, NULL, NULL, 0};
	const uint16_t *qp = f.q.data(), *kvp = f.kv.data();
	uint16_t *op = out.data();
	float *pp = part.data();
	unsigned *cp = fused && nz > 1 ? cnt.data() : NULL;
	de_launch(NROW, (unsigned)d.n_kv, (unsigned)nz, [&] {
		if (k == MMA)
			dattn_mma_kernel<D, G, false>(qp, kvp, tm, d, qscale, pp, op, cp, none);
		else if (k == MMA_BLOCK)
			dattn_mma_kernel<D, G, false, false, false>(qp, kvp, tm, d, qscale, pp, op,
			                                            cp, none);
		else
			dattn_pipe_kernel<D, G>(qp, kvp, tm, d, qscale, pp, op, cp, none);
	});
	int pb = k == PIPE ? dattn_shape<D, G>::PB : dattn_mma<D, G>::P;
	if (nz > 1 && !cp)
		de_launch(NROW, (unsigned)H, 1,
		          [&] { dattn_combine_kernel(pp, tm, d, nz, pb, op); });
	for (int i = 0; i < GUARD; i++)
		CHECK(out[on + (size_t)i] == 0x7f7f, "D=%d G=%d split %d: guard %d overwritten", D,
		      G, nz, i);
	for (size_t i = 0; i < cnt.size(); i++)
		CHECK(cnt[i] == 0, "D=%d G=%d split %d: counter %zu = %u after the call", D, G, nz, i,
		      cnt[i]);
	out.resize(on);
	return out;
}

/* Kernel form k checked against the reference; the fused merge gives the same bits. */
template <int D, int G> static void run_case(const fix &f, int nz, form k)
{
	const ds_k_dims d = f.d;
	int H = d.n_head;
	std::vector<uint16_t> out = run_kernel<D, G>(f, nz, false, k);
	bool same = run_kernel<D, G>(f, nz, true, k) == out;
	CHECK(same,
	      "D=%d G=%d split %d: the fused merge differs from the combine kernel", D, G, nz);
	std::vector<double> ref((size_t)D);
	double worst = 0;
	for (int t = 0; t < NROW; t++)
		for (int h = 0; h < H; h++) {
			const uint16_t *o = out.data() + ((size_t)t * H + h) * D;
			if (f.pos[(size_t)t] < 0) {
				for (int i = 0; i < D; i++)
					CHECK(o[i] == 0, "D=%d G=%d split %d: padding row %d head %d dim %d = %#x", D,
					      G, nz, t, h, i, o[i]);
				continue;
			}
			dref(f, t, h, ref.data());
			for (int i = 0; i < D; i++) {
				double g = ds_bf16_to_f32(o[i]), r = ref[(size_t)i];
				/* two bf16 ulps of the reference, or 1e-3 */
				double tol = fmax(2.0 * ldexp(1.0, ilogb(fabs(r)) - 7), 1e-3);
				CHECK(fabs(g - r) <= tol,
				      "D=%d G=%d bs %d split %d: row %d (pos %d) head %d dim %d: %g, want %g",
				      D, G, d.block_size, nz, t, f.pos[(size_t)t], h, i, g, r);
				worst = fmax(worst, fabs(g - r) / tol);
			}
		}
	printf("%s D=%d G=%d bs %d split %2d: worst error / tolerance %.3f\n", form_name[k], D, G,
	       d.block_size, nz, worst);
}

/* ---- the mma variant with the q/k/v epilogue fused (ds_k_attn_decode_qkv) ---- */

/* ds_k_qkv_rope's arithmetic for one head on the host: bias, optional norm (lane-strided
 * partial sums, xor-butterfly reduction), RoPE at pos (rope) or plain rounding (a value head). */
static void host_epi_head(const float *src, const uint16_t *bias, const uint16_t *nw,
                          const float *cs, int D, float eps, int pos, bool rope, uint16_t *dst)
{
	std::vector<float> buf((size_t)D);
	for (int i = 0; i < D; i++)
		buf[(size_t)i] = bias ? __fadd_rn(src[i], ds_bf16_to_f32(bias[i])) : src[i];
	if (nw) {
		float ss[32];
		for (int l = 0; l < 32; l++) {
			ss[l] = 0.0f;
			for (int i = l; i < D; i += 32)
				ss[l] = __fmaf_rn(buf[(size_t)i], buf[(size_t)i], ss[l]);
		}
		for (int o = 16; o > 0; o >>= 1) {
			float nx[32];
			for (int l = 0; l < 32; l++)
				nx[l] = ss[l] + ss[l ^ o];
			memcpy(ss, nx, sizeof(ss));
		}
		float inv = 1.0f / sqrtf(ss[0] / (float)D + eps);
		for (int i = 0; i < D; i++)
			buf[(size_t)i] = __fmul_rn(__fmul_rn(buf[(size_t)i], inv), ds_bf16_to_f32(nw[i]));
	}
	int half = D / 2;
	for (int i = 0; i < D; i++)
		dst[i] = ds_f32_to_bf16(buf[(size_t)i]);
	if (!rope)
		return;
	const float *c = cs + (size_t)pos * half * 2;
	for (int i = 0; i < half; i++) {
		float x1 = buf[(size_t)i], x2 = buf[(size_t)(i + half)], co = c[2 * i], si = c[2 * i + 1];
		dst[i] = ds_f32_to_bf16(__fsub_rn(__fmul_rn(x1, co), __fmul_rn(x2, si)));
		dst[i + half] = ds_f32_to_bf16(__fadd_rn(__fmul_rn(x2, co), __fmul_rn(x1, si)));
	}
}

/* The fused kernel against the host epilogue followed by the unfused mma kernel: the same output
 * bits and the same cache (the own K/V written once, nothing else touched). Block tables are
 * private per row here, as in serving (a decode position is never in a shared block). */
template <int D, int G> static void run_fused(int n_kv, int nz, bool extras, bool early)
{
	fix f = fix_make(n_kv * G, n_kv, D, 16);
	ds_k_dims d = f.d;
	CHECK(NROW * f.max_blk <= NBLK, "fixture too small for private block tables");
	for (int t = 0; t < NROW; t++)
		for (int j = 0; j < f.max_blk; j++)
			f.bt[(size_t)t * f.max_blk + (size_t)j] = t * f.max_blk + j;
	int H = d.n_head, n_all = H + 2 * n_kv, half = D / 2;
	std::vector<float> qkv((size_t)NROW * n_all * D), cs((size_t)201 * half * 2);
	for (size_t i = 0; i < qkv.size(); i++)
		qkv[i] = rnd(94, i, 3.0f);
	for (int p = 0; p <= 200; p++)
		for (int i = 0; i < half; i++) {
			double a = p * pow(10000.0, -2.0 * i / D);
			cs[((size_t)p * half + i) * 2] = (float)cos(a);
			cs[((size_t)p * half + i) * 2 + 1] = (float)sin(a);
		}
	std::vector<uint16_t> bias((size_t)n_all * D), qn((size_t)D), kn((size_t)D);
	for (size_t i = 0; i < bias.size(); i++)
		bias[i] = ds_f32_to_bf16(rnd(95, i, 0.5f));
	for (int i = 0; i < D; i++) {
		qn[(size_t)i] = ds_f32_to_bf16(1.0f + rnd(96, (uint64_t)i, 0.3f));
		kn[(size_t)i] = ds_f32_to_bf16(1.0f + rnd(97, (uint64_t)i, 0.3f));
	}
	ds_k_qkv_epi e = {qkv.data(),
	                  extras ? bias.data() : NULL,
	                  extras ? qn.data() : NULL,
	                  extras ? kn.data() : NULL,
	                  cs.data(),
	                  NULL,
	                  early ? 1 : 0};
	/* the reference: host epilogue into q and the cache, then the unfused kernel */
	fix r = f;
	for (int t = 0; t < NROW; t++) {
		int p = f.pos[(size_t)t];
		if (p < 0)
			continue;
		const float *row = qkv.data() + (size_t)t * n_all * D;
		int blk = f.bt[(size_t)t * f.max_blk + (size_t)(p / 16)];
		for (int h = 0; h < n_all; h++) {
			uint16_t *dst;
			if (h < H)
				dst = r.q.data() + ((size_t)t * H + h) * D;
			else
				dst = r.kv.data() +
				      (((size_t)blk * 2 * n_kv + (size_t)(h - H)) * 16 + (size_t)(p % 16)) * D;
			host_epi_head(row + (size_t)h * D, e.bias ? e.bias + (size_t)h * D : NULL,
			              h < H ? e.q_norm : h < H + n_kv ? e.k_norm : NULL, cs.data(), D,
			              d.eps, p, h < H + n_kv, dst);
		}
	}
	size_t on = (size_t)NROW * H * D;
	std::vector<uint16_t> want(on, 0x7f7f), got(on + GUARD, 0x7f7f);
	std::vector<float> part((size_t)NROW * H * nz * (D + 2), NAN);
	float qscale = DA_LOG2E / sqrtf((float)D);
	const ds_k_qkv_epi none = {NULL, NULL, NULL, NULL, NULL, NULL, 0};
	ds_k_tokmeta rtm = {r.pos.data(), r.seq.data(), r.off.data(), r.bt.data()};
	ds_k_tokmeta ftm = {f.pos.data(), f.seq.data(), f.off.data(), f.bt.data()};
	int pb = dattn_mma<D, G>::P;
	const uint16_t *rq = r.q.data(), *rkv = r.kv.data();
	uint16_t *fkv = f.kv.data(), *wp = want.data(), *gp = got.data();
	float *pp = part.data();
	de_launch(NROW, (unsigned)n_kv, (unsigned)nz, [&] {
		dattn_mma_kernel<D, G, false>(rq, rkv, rtm, d, qscale, pp, wp, NULL, none);
	});
	if (nz > 1)
		de_launch(NROW, (unsigned)H, 1, [&] { dattn_combine_kernel(pp, rtm, d, nz, pb, wp); });
	std::fill(part.begin(), part.end(), NAN);
	de_launch(NROW, (unsigned)n_kv, (unsigned)nz, [&] {
		dattn_mma_kernel<D, G, true>(NULL, fkv, ftm, d, qscale, pp, gp, NULL, e);
	});
	if (nz > 1)
		de_launch(NROW, (unsigned)H, 1, [&] { dattn_combine_kernel(pp, ftm, d, nz, pb, gp); });
	for (int i = 0; i < GUARD; i++)
		CHECK(got[on + (size_t)i] == 0x7f7f, "fused D=%d G=%d: guard %d overwritten", D, G, i);
	got.resize(on);
	CHECK(got == want,
	      "fused D=%d G=%d split %d extras %d early %d: output differs from epilogue + kernel",
	      D, G, nz, (int)extras, (int)early);
	CHECK(f.kv == r.kv, "fused D=%d G=%d split %d extras %d early %d: the cache differs", D, G,
	      nz, (int)extras, (int)early);
	printf("fused D=%d G=%d split %2d extras %d early %d: same bits as epilogue + mma kernel\n",
	       D, G, nz, (int)extras, (int)early);
}

template <int D, int G> static void run_shape(int n_kv, int bs)
{
	fix f = fix_make(n_kv * G, n_kv, D, bs);
	static const int splits[] = {1, 2, 5, DS_K_ATTN_DECODE_MAX_SPLIT};
	for (int nz : splits)
		for (form k : {PIPE, MMA, MMA_BLOCK})
			run_case<D, G>(f, nz, k);
}

int main(void)
{
	try {
		run_shape<128, 4>(2, 16); /* llama3-8b's shape: 3 stages */
		run_shape<64, 3>(2, 16);
		run_shape<128, 8>(1, 16); /* 4 stages */
		run_shape<64, 1>(2, 16);
		run_shape<128, 4>(1, 12); /* block size not a power of two */
		for (int nz : {1, 2, 5})
			for (bool early : {false, true}) {
				run_fused<128, 4>(1, nz, false, early);
				run_fused<128, 4>(1, nz, true, early);
				run_fused<64, 3>(2, nz, true, early);
			}
	} catch (const check_failed &) {
		fprintf(stderr, "FAILED\n");
		return 1;
	}
	printf("ok\n");
	return 0;
}
