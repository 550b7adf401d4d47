/* config.c - flag and config-file parsing for detserve (see config.h). Table-driven: each
 * key names a field and a kind, so the file and the flags can never drift apart. */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum kind { K_STR, K_INT, K_U64, K_SIZE, K_DBL, K_BOOL, K_LOG };

struct key {
	const char *name;
	enum kind kind;
	size_t off;
	size_t size; /* K_STR: buffer size */
	long long lo, hi;
};

#define F(f) offsetof(struct ds_server_config, f), sizeof(((struct ds_server_config *)0)->f)
static const struct key keys[] = {
    {"model", K_STR, F(model), 0, 0},
    {"tokenizer", K_STR, F(tokenizer), 0, 0},
    {"preset", K_STR, F(preset), 0, 0},
    {"seed", K_U64, F(seed), 0, 0},
    {"backend", K_STR, F(backend), 0, 0},
    {"device", K_INT, F(device), 0, 64},
    {"threads", K_INT, F(threads), 0, 1024},
    {"precision", K_STR, F(precision), 0, 0},
    {"mode", K_STR, F(mode), 0, 0},
    {"window", K_INT, F(window), 1, 4096},
    {"group", K_INT, F(group), 1, 4096},
    {"kv-blocks", K_INT, F(kv_blocks), 1, INT_MAX},
    {"kv-block-size", K_INT, F(kv_block_size), 1, 4096},
    {"max-queue", K_INT, F(max_queue), 1, INT_MAX},
    {"max-running", K_INT, F(max_running), 1, 1 << 20},
    {"max-step-tokens", K_INT, F(max_step_tokens), 1, 1 << 20},
    {"inject-mismatch", K_DBL, F(inject_mismatch), 0, 1},
    {"margin", K_DBL, F(margin), -1, 1000},
    {"no-prefix-cache", K_BOOL, F(no_prefix_cache), 0, 0},
    {"step-policy", K_STR, F(step_policy), 0, 0},
    {"admit", K_STR, F(admit), 0, 0},
    {"ref-step-bias", K_DBL, F(ref_step_bias), 0, 1e9},
    {"no-window-auto", K_BOOL, F(no_window_auto), 0, 0},
    {"addr", K_STR, F(addr), 0, 0},
    {"port", K_INT, F(port), 0, 65535},
    {"metrics-port", K_INT, F(metrics_port), -1, 65535},
    {"api-key", K_STR, F(api_key), 0, 0},
    {"max-message-bytes", K_SIZE, F(max_message_bytes), 64, 1ll << 31},
    {"max-streams", K_INT, F(max_streams), 1, 1 << 20},
    {"max-connections", K_INT, F(max_connections), 1, 1 << 20},
    {"keepalive", K_INT, F(keepalive_s), 0, 86400},
    {"keepalive-timeout", K_INT, F(keepalive_timeout_s), 1, 86400},
    {"drain-timeout", K_INT, F(drain_timeout_s), 0, 86400},
    {"stream-high-water", K_SIZE, F(stream_high_water), 256, 1ll << 30},
    {"log-level", K_LOG, F(log_level), 0, 0},
};
#undef F

void ds_server_config_default(struct ds_server_config *c)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->preset, sizeof(c->preset), "tiny");
	snprintf(c->tokenizer, sizeof(c->tokenizer), "auto");
	snprintf(c->backend, sizeof(c->backend), "cpu");
	snprintf(c->precision, sizeof(c->precision), "bf16");
	snprintf(c->mode, sizeof(c->mode), "dvr");
	c->window = 32;
	c->group = 16;
	c->kv_blocks = 1024;
	c->kv_block_size = 16;
	c->max_queue = 1024;
	c->max_running = 256;
	c->max_step_tokens = 512;
	c->margin = -1.0; /* auto: calibrated by the engine at start-up */
	snprintf(c->step_policy, sizeof(c->step_policy), "auto");
	snprintf(c->admit, sizeof(c->admit), "fcfs");
	c->ref_step_bias = -1.0; /* by backend (main.c): 0 on cuda, 1 on cpu */
	snprintf(c->addr, sizeof(c->addr), "127.0.0.1");
	c->port = 50051;
	c->metrics_port = 9090;
	c->max_message_bytes = 4u << 20;
	c->max_streams = 256;
	c->max_connections = 256;
	c->keepalive_s = 7200; /* like gRPC servers: idle Python clients ack late */
	c->keepalive_timeout_s = 20;
	c->drain_timeout_s = 30;
	c->stream_high_water = 64u << 10;
	c->log_level = DS_LOG_INFO;
}

static const struct key *key_find(const char *name)
{
	for (size_t i = 0; i < DS_ARRAY_LEN(keys); i++)
		if (strcmp(keys[i].name, name) == 0)
			return &keys[i];
	return NULL;
}

static bool parse_ll(const char *s, long long *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 0);
	if (errno || end == s || *end)
		return false;
	*out = v;
	return true;
}

enum ds_status ds_server_config_set(struct ds_server_config *c, const char *name, const char *v,
                                    struct ds_err *err)
{
	const struct key *k = key_find(name);
	if (!k)
		return ds_errf(err, DS_ERR_INVALID, "unknown option '%s' (see --help)", name);
	char *field = (char *)c + k->off;
	long long ll;
	switch (k->kind) {
	case K_STR:
		if (strlen(v) >= k->size)
			return ds_errf(err, DS_ERR_INVALID, "%s: value longer than %zu bytes", name,
			               k->size - 1);
		memcpy(field, v, strlen(v) + 1);
		break;
	case K_INT:
	case K_SIZE:
		if (!parse_ll(v, &ll) || ll < k->lo || ll > k->hi)
			return ds_errf(err, DS_ERR_INVALID,
			               "%s: '%s' is not an integer in [%lld, %lld]", name, v, k->lo,
			               k->hi);
		if (k->kind == K_INT)
			*(int *)field = (int)ll;
		else
			*(size_t *)field = (size_t)ll;
		break;
	case K_U64: {
		char *end;
		errno = 0;
		unsigned long long u = strtoull(v, &end, 0);
		if (errno || end == v || *end || v[0] == '-')
			return ds_errf(err, DS_ERR_INVALID, "%s: '%s' is not an unsigned integer",
			               name, v);
		*(uint64_t *)field = u;
		break;
	}
	case K_DBL: {
		char *end;
		double d = strtod(v, &end);
		if (end == v || *end || !(d >= (double)k->lo && d <= (double)k->hi))
			return ds_errf(err, DS_ERR_INVALID,
			               "%s: '%s' is not a number in [%lld, %lld]", name, v, k->lo,
			               k->hi);
		*(double *)field = d;
		break;
	}
	case K_BOOL:
		if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes"))
			*(bool *)field = true;
		else if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "no"))
			*(bool *)field = false;
		else
			return ds_errf(err, DS_ERR_INVALID, "%s: '%s' is not a boolean", name, v);
		break;
	case K_LOG: {
		static const char *const lv[] = {"error", "warn", "info", "debug"};
		size_t i;
		for (i = 0; i < DS_ARRAY_LEN(lv); i++)
			if (!strcmp(v, lv[i]))
				break;
		if (i == DS_ARRAY_LEN(lv))
			return ds_errf(err, DS_ERR_INVALID,
			               "log-level: '%s' is not error|warn|info|debug", v);
		*(enum ds_log_level *)field = (enum ds_log_level)i;
		break;
	}
	}
	if (!strcmp(name, "backend") && strcmp(v, "cpu") && strcmp(v, "cuda"))
		return ds_errf(err, DS_ERR_INVALID, "backend: '%s' is not cpu|cuda", v);
	if (!strcmp(name, "precision") && strcmp(v, "bf16") && strcmp(v, "f32"))
		return ds_errf(err, DS_ERR_INVALID, "precision: '%s' is not bf16|f32", v);
	return DS_OK;
}

static char *trim(char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	size_t n = strlen(s);
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
		s[--n] = '\0';
	return s;
}

enum ds_status ds_server_config_load(struct ds_server_config *c, const char *path,
                                     struct ds_err *err)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return ds_errf(err, DS_ERR_IO, "config %s: %s", path, strerror(errno));
	char line[1024];
	int lineno = 0;
	enum ds_status rv = DS_OK;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		char *hash = strchr(line, '#');
		if (hash)
			*hash = '\0';
		char *s = trim(line);
		if (!*s)
			continue;
		char *eq = strchr(s, '=');
		if (!eq) {
			rv = ds_errf(err, DS_ERR_INVALID, "config %s:%d: expected 'key = value'",
			             path, lineno);
			break;
		}
		*eq = '\0';
		char *k = trim(s), *v = trim(eq + 1);
		struct ds_err e;
		if (ds_server_config_set(c, k, v, &e) != DS_OK) {
			rv = ds_errf(err, DS_ERR_INVALID, "config %s:%d: %s", path, lineno, e.msg);
			break;
		}
	}
	fclose(f);
	return rv;
}

static const char *short_alias(const char *a)
{
	if (!strcmp(a, "-W"))
		return "window";
	if (!strcmp(a, "-G"))
		return "group";
	return NULL;
}

enum ds_status ds_server_config_parse(struct ds_server_config *c, int argc, char **argv, bool *help,
                                      bool *version, struct ds_err *err)
{
	enum ds_status rv;
	*help = *version = false;
	/* the config file first, so flags override it wherever they appear */
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--config")) {
			if (i + 1 >= argc)
				return ds_errf(err, DS_ERR_INVALID, "--config needs a value");
			if ((rv = ds_server_config_load(c, argv[i + 1], err)) != DS_OK)
				return rv;
		} else if (!strncmp(a, "--config=", 9)) {
			if ((rv = ds_server_config_load(c, a + 9, err)) != DS_OK)
				return rv;
		}
	}
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		char name[64];
		const char *val = NULL;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			*help = true;
			continue;
		}
		if (!strcmp(a, "--version")) {
			*version = true;
			continue;
		}
		const char *alias = short_alias(a);
		if (alias) {
			snprintf(name, sizeof(name), "%s", alias);
		} else if (!strncmp(a, "--", 2)) {
			const char *eq = strchr(a, '=');
			size_t n = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
			if (n == 0 || n >= sizeof(name))
				return ds_errf(err, DS_ERR_INVALID, "bad option '%s'", a);
			memcpy(name, a + 2, n);
			name[n] = '\0';
			if (eq)
				val = eq + 1;
		} else {
			return ds_errf(err, DS_ERR_INVALID, "unexpected argument '%s' (see --help)",
			               a);
		}
		const struct key *k = key_find(name);
		bool is_cfg = !strcmp(name, "config");
		if (!k && !is_cfg && strcmp(name, "api-key-file"))
			return ds_errf(err, DS_ERR_INVALID, "unknown option '%s' (see --help)", a);
		if (!val && k && k->kind == K_BOOL) {
			val = "true";
		} else if (!val) {
			if (i + 1 >= argc)
				return ds_errf(err, DS_ERR_INVALID, "%s needs a value", a);
			val = argv[++i];
		}
		if (is_cfg)
			continue;
		if (!strcmp(name, "api-key-file")) {
			FILE *f = fopen(val, "r");
			if (!f)
				return ds_errf(err, DS_ERR_IO, "api-key-file %s: %s", val,
				               strerror(errno));
			char buf[sizeof(c->api_key)] = "";
			bool ok = fgets(buf, sizeof(buf), f) != NULL;
			fclose(f);
			char *t = trim(buf);
			if (!ok || !*t)
				return ds_errf(err, DS_ERR_INVALID, "api-key-file %s is empty",
				               val);
			snprintf(c->api_key, sizeof(c->api_key), "%s", t);
			continue;
		}
		if ((rv = ds_server_config_set(c, name, val, err)) != DS_OK)
			return rv;
	}
	if (c->model[0] == '\0' && c->preset[0] == '\0')
		return ds_errf(err, DS_ERR_INVALID, "give --model DIR or --preset NAME");
	if (strcmp(c->precision, "bf16") != 0 && (strcmp(c->backend, "cpu") != 0 || !c->model[0]))
		return ds_errf(err, DS_ERR_INVALID,
		               "--precision %s needs --backend cpu and --model (presets and the "
		               "CUDA backend are bf16)",
		               c->precision);
	return DS_OK;
}

const char *ds_server_config_usage(void)
{
	return "usage: detserve [options]\n"
	       "model:\n"
	       "  --model DIR|FILE        HF directory (config.json + safetensors) or .gguf\n"
	       "  --preset NAME --seed N  synthetic weights (tiny|small|llama3-8b); default tiny\n"
	       "  --backend cpu|cuda      default cpu; --device N for cuda; --threads N for cpu\n"
	       "  --precision bf16|f32    weights and KV (default bf16; f32: cpu with --model)\n"
	       "  --tokenizer auto|none|bytelevel|PATH  auto: the model's tokenizer.json / GGUF\n"
	       "                          vocabulary (presets: none); bytelevel: 256 byte tokens\n"
	       "engine:\n"
	       "  --mode fast|dvr|invariant|ref-only   default dvr\n"
	       "  -W N, --window N        verify window (32); -G N, --group N windows per pass "
	       "(16)\n"
	       "  --kv-blocks N --kv-block-size N      KV pool (1024 x 16)\n"
	       "  --max-queue N --max-running N --max-step-tokens N\n"
	       "  --margin X              verify early at a candidate with top1-top2 < X\n"
	       "                          (-1 = auto: 1.5x the measured fast-vs-ref gap error,\n"
	       "                          in [0.001, 0.5]); --no-prefix-cache\n"
	       "  --inject-mismatch P     force a fraction P of windows to roll back (studies)\n"
	       "  --step-policy auto|merge|split  DVR steps with reference work: one REF pass\n"
	       "                          for everyone (merge), plus REF steps whenever measured\n"
	       "                          costs favour them (auto, default), or REF passes beside\n"
	       "                          a FAST pass (split); --ref-step-bias X scales REF costs\n"
	       "                          (default 0 on cuda: REF whenever a deterministic\n"
	       "                          request runs; 1 on cpu)\n"
	       "  --admit fcfs|det-first  which waiting request a free slot takes: arrival order\n"
	       "                          (default), or DVR's deterministic requests first so\n"
	       "                          they share REF steps (backlogs; a request is overtaken\n"
	       "                          at most --max-running times)\n"
	       "  --no-window-auto        keep the window at W (default: W is the cap of a window\n"
	       "                          picked from the measured rollback rate and REF cost)\n"
	       "server:\n"
	       "  --addr HOST --port N    gRPC h2c listener (127.0.0.1:50051; port 0 = any)\n"
	       "  --metrics-port N        Prometheus /metrics over HTTP/1.1 (9090; -1 = off)\n"
	       "  --api-key KEY | --api-key-file F   require 'authorization: Bearer KEY'\n"
	       "  --max-message-bytes N --max-streams N --max-connections N\n"
	       "  --keepalive S --keepalive-timeout S --drain-timeout S --stream-high-water BYTES\n"
	       "  --log-level error|warn|info|debug   --config FILE (key = value lines)\n";
}
