/* config.h - the detserve command line and config file.
 *
 * One setter handles both: a config file holds `key = value` lines whose keys are the long
 * flag names without dashes (`#` starts a comment); `--config FILE` is read first wherever it
 * appears, then the other flags override it. Values are checked here, so main() only sees a
 * consistent configuration. */
#ifndef DS_SERVER_CONFIG_H
#define DS_SERVER_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#include "ds_common.h"

enum ds_log_level { DS_LOG_ERROR = 0, DS_LOG_WARN, DS_LOG_INFO, DS_LOG_DEBUG };

struct ds_server_config {
	/* model */
	char model[512];     /* --model DIR|FILE; empty = use the preset */
	char tokenizer[512]; /* --tokenizer auto|none|bytelevel|PATH (default auto) */
	char preset[32];     /* --preset NAME (default "tiny") */
	uint64_t seed;       /* --seed N for synthetic weights */
	char backend[16];    /* --backend cpu|cuda */
	int device;          /* --device N (cuda) */
	int threads;         /* --threads N (cpu; 0 = all) */
	char precision[8];   /* --precision bf16|f32: weights and KV (f32: cpu and --model only) */
	/* engine */
	char mode[16];     /* --mode fast|dvr|invariant|ref-only */
	int window, group; /* -W, -G */
	int kv_blocks, kv_block_size;
	int max_queue, max_running, max_step_tokens;
	double inject_mismatch;
	double margin;
	bool no_prefix_cache;
	char step_policy[8];  /* --step-policy auto|merge|split */
	char admit[16];       /* --admit fcfs|det-first */
	double ref_step_bias; /* --ref-step-bias X; < 0 (the default): by backend (main.c) */
	bool no_window_auto;  /* --no-window-auto: keep W fixed */
	/* transport */
	char addr[128];    /* --addr (default 127.0.0.1) */
	int port;          /* --port (default 50051; 0 = any free port, logged) */
	int metrics_port;  /* --metrics-port (default 9090; -1 = off; 0 = any) */
	char api_key[256]; /* --api-key or --api-key-file */
	size_t max_message_bytes;
	int max_streams; /* per connection */
	int max_connections;
	int keepalive_s; /* server PING interval; 0 = off */
	int keepalive_timeout_s;
	int drain_timeout_s;
	size_t stream_high_water; /* bytes queued on one stream before its request is paused */
	enum ds_log_level log_level;
};

void ds_server_config_default(struct ds_server_config *c);

/* Sets one key (long flag name without dashes) from a string. DS_ERR_INVALID names the key. */
enum ds_status ds_server_config_set(struct ds_server_config *c, const char *key, const char *value,
                                    struct ds_err *err);
/* Reads a config file. DS_ERR_IO / DS_ERR_INVALID name the file and line. */
enum ds_status ds_server_config_load(struct ds_server_config *c, const char *path,
                                     struct ds_err *err);
/* Parses argv (after argv[0]). Sets *help for -h/--help, *version for --version. */
enum ds_status ds_server_config_parse(struct ds_server_config *c, int argc, char **argv, bool *help,
                                      bool *version, struct ds_err *err);
/* The usage text. */
const char *ds_server_config_usage(void);

#endif
