/* test_mkmodel.c - detserve-mkmodel: same seed and config give byte-identical files, another
 * seed gives other weights, and the executable writes exactly what ds_model_write_hf writes.
 *
 * The executable's path is argv[1] (tests/meson.build passes it); without it those checks
 * are skipped. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hf.h"

static const char *g_mkmodel;

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	return remove(p);
}

static char *tmpdir(void)
{
	char *d = strdup("/tmp/ds-test-mkmodel-XXXXXX");
	assert_non_null(d);
	assert_non_null(mkdtemp(d));
	return d;
}

static void rmrf(char *dir)
{
	nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	free(dir);
}

static uint8_t *slurp(const char *dir, const char *name, size_t *len)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	FILE *fp = fopen(p, "rb");
	if (!fp)
		fail_msg("cannot open %s", p);
	fseek(fp, 0, SEEK_END);
	*len = (size_t)ftell(fp);
	fseek(fp, 0, SEEK_SET);
	uint8_t *b = malloc(*len + 1);
	assert_int_equal(fread(b, 1, *len, fp), *len);
	fclose(fp);
	return b;
}

/* Sorted file names in dir (visible ones), newline-joined into buf. */
static void listing(const char *dir, char *buf, size_t cap)
{
	struct dirent **ents;
	int n = scandir(dir, &ents, NULL, alphasort);
	assert_true(n >= 0);
	size_t l = 0;
	buf[0] = '\0';
	for (int i = 0; i < n; i++) {
		if (ents[i]->d_name[0] != '.')
			l += (size_t)snprintf(buf + l, cap - l, "%s\n", ents[i]->d_name);
		free(ents[i]);
	}
	free(ents);
}

/* Returns how many files differ between a and b; asserts both have the same file names. */
static int count_differing(const char *a, const char *b)
{
	char la[4096], lb[4096];
	listing(a, la, sizeof(la));
	listing(b, lb, sizeof(lb));
	assert_string_equal(la, lb);
	int differ = 0;
	for (char *name = strtok(la, "\n"); name; name = strtok(NULL, "\n")) {
		size_t na, nb;
		uint8_t *x = slurp(a, name, &na), *y = slurp(b, name, &nb);
		differ += na != nb || memcmp(x, y, na) != 0;
		free(x);
		free(y);
	}
	return differ;
}

static void write_lib(const char *preset, const char *arch, bool tie, uint64_t seed,
                      const char *dir, enum ds_hf_dtype dtype, int shards, bool deferred)
{
	struct ds_model_config c;
	assert_int_equal(ds_model_preset(preset, &c), DS_OK);
	assert_int_equal(ds_hf_config_set_arch(&c, arch), DS_OK);
	c.tie_embeddings = tie;
	struct ds_hf_write_opts o = {.dtype = dtype, .n_shards = shards, .deferred = deferred};
	struct ds_err err;
	if (ds_model_write_hf(&c, seed, dir, &o, &err) != DS_OK)
		fail_msg("%s", err.msg);
}

static void test_same_seed_same_bytes(void **state)
{
	(void)state;
	static const struct {
		const char *arch;
		bool tie;
		enum ds_hf_dtype dtype;
		int shards;
	} v[] = {{"llama", false, DS_HF_BF16, 3},
	         {"qwen2", true, DS_HF_F16, 1},
	         {"qwen3", false, DS_HF_F32, 2}};
	for (size_t i = 0; i < DS_ARRAY_LEN(v); i++) {
		char *a = tmpdir(), *b = tmpdir(), *c = tmpdir();
		write_lib("tiny", v[i].arch, v[i].tie, 42, a, v[i].dtype, v[i].shards, false);
		write_lib("tiny", v[i].arch, v[i].tie, 42, b, v[i].dtype, v[i].shards, false);
		write_lib("tiny", v[i].arch, v[i].tie, 43, c, v[i].dtype, v[i].shards, false);
		assert_int_equal(count_differing(a, b), 0);
		/* another seed: every weight file differs, config.json and the index do not */
		assert_int_equal(count_differing(a, c), v[i].shards);
		/* rewriting in place (over the old files) gives the same bytes again */
		write_lib("tiny", v[i].arch, v[i].tie, 42, c, v[i].dtype, v[i].shards, false);
		assert_int_equal(count_differing(a, c), 0);
		rmrf(a);
		rmrf(b);
		rmrf(c);
	}
}

static void test_layout_switch_removes_stale_files(void **state)
{
	(void)state;
	char *a = tmpdir(), *b = tmpdir();
	write_lib("tiny", "llama", false, 1, a, DS_HF_BF16, 3, false);
	write_lib("tiny", "llama", false, 1, a, DS_HF_BF16, 2, false);
	write_lib("tiny", "llama", false, 1, b, DS_HF_BF16, 2, false);
	assert_int_equal(count_differing(a, b), 0); /* no 3-shard leftovers */
	write_lib("tiny", "llama", false, 1, a, DS_HF_BF16, 1, true);
	char l[1024];
	listing(a, l, sizeof(l));
	assert_string_equal(l, "config.json\ndetserve_synth.json\ntokenizer.json\ntokenizer_config.json\n");
	rmrf(a);
	rmrf(b);
}

/* The writer's f32 -> f16: exact on every f16 value, ties to even between neighbours. */
static void test_f32_to_f16_exhaustive(void **state)
{
	(void)state;
	for (uint32_t h = 0; h < 0x10000u; h++) {
		float f = ds_f16_to_f32((uint16_t)h);
		if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) {
			assert_true((ds_f32_to_f16(f) & 0x7c00u) == 0x7c00u &&
			            (ds_f32_to_f16(f) & 0x3ffu));
			continue; /* NaN stays NaN */
		}
		assert_int_equal(ds_f32_to_f16(f), h);
		if ((h & 0x7fffu) >= 0x7bffu)
			continue;                           /* no finite upper neighbour */
		float g = ds_f16_to_f32((uint16_t)(h + 1)); /* same sign, next magnitude */
		float mid = (f + g) * 0.5f;                 /* exact in f32 */
		uint16_t even = (h & 1u) ? (uint16_t)(h + 1) : (uint16_t)h;
		assert_int_equal(ds_f32_to_f16(mid), even);
		assert_int_equal(ds_f32_to_f16(nextafterf(mid, f)), h);
		assert_int_equal(ds_f32_to_f16(nextafterf(mid, g)), h + 1);
	}
	assert_int_equal(ds_f32_to_f16(65520.0f), 0x7c00); /* halfway above 65504: to infinity */
	assert_int_equal(ds_f32_to_f16(65519.0f), 0x7bff);
	assert_int_equal(ds_f32_to_f16(-1e30f), 0xfc00);
}

static int run_tool(char *const argv[])
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (!freopen("/dev/null", "w", stdout))
			_exit(126);
		execv(argv[0], argv);
		_exit(127);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_tool_matches_library(void **state)
{
	(void)state;
	if (!g_mkmodel)
		skip();
	char *a = tmpdir(), *b = tmpdir(), *c = tmpdir();
	char *argv1[] = {(char *)g_mkmodel, "--preset", "tiny",   "--seed", "42",    "--out", a,
	                 "--shards",        "3",        "--arch", "qwen3",  "--tie", NULL};
	assert_int_equal(run_tool(argv1), 0);
	write_lib("tiny", "qwen3", true, 42, b, DS_HF_BF16, 3, false);
	assert_int_equal(count_differing(a, b), 0);

	char *argv2[] = {(char *)g_mkmodel, "--preset", "llama3-8b", "--seed", "5",
	                 "--out",           c,          NULL};
	assert_int_equal(run_tool(argv2), 0);
	char l[1024];
	listing(c, l, sizeof(l));
	assert_string_equal(l, "config.json\ndetserve_synth.json\ntokenizer.json\ntokenizer_config.json\n");
	size_t n;
	uint8_t *s = slurp(c, "detserve_synth.json", &n);
	s[n] = 0;
	assert_non_null(strstr((char *)s, "\"seed\": 5"));
	free(s);

	/* overrides reach the config */
	char *argv3[] = {(char *)g_mkmodel,
	                 "--preset",
	                 "tiny",
	                 "--out",
	                 c,
	                 "--layers",
	                 "3",
	                 "--hidden",
	                 "96",
	                 "--heads",
	                 "6",
	                 "--kv-heads",
	                 "3",
	                 "--dtype",
	                 "f32",
	                 NULL};
	assert_int_equal(run_tool(argv3), 0);
	s = slurp(c, "config.json", &n);
	s[n] = 0;
	assert_non_null(strstr((char *)s, "\"num_hidden_layers\": 3,"));
	assert_non_null(strstr((char *)s, "\"head_dim\": 16,"));
	assert_non_null(strstr((char *)s, "\"torch_dtype\": \"float32\","));
	free(s);

	/* bad arguments fail with a usage error, writing nothing */
	char *argv4[] = {(char *)g_mkmodel, "--preset", "huge", "--out", c, NULL};
	assert_int_equal(run_tool(argv4), 2);
	char *argv5[] = {(char *)g_mkmodel, "--preset", "tiny", "--out", c, "--dtype", "f8", NULL};
	assert_int_equal(run_tool(argv5), 2);
	char *argv6[] = {(char *)g_mkmodel, "--preset", "tiny", "--out", c, "--heads", "5", NULL};
	assert_int_equal(run_tool(argv6), 1); /* 64 / 5 heads: the config check refuses */
	rmrf(a);
	rmrf(b);
	rmrf(c);
}

int main(int argc, char **argv)
{
	g_mkmodel = argc > 1 ? argv[1] : getenv("DS_MKMODEL");
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_same_seed_same_bytes),
	    cmocka_unit_test(test_layout_switch_removes_stale_files),
	    cmocka_unit_test(test_f32_to_f16_exhaustive),
	    cmocka_unit_test(test_tool_matches_library),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
