/* server.h - the detserve gRPC server: h2c (nghttp2 on libevent) in front of the engine.
 *
 * Ownership runs server -> connection -> stream (STYLE.md). The event loop thread does all
 * network work and only enqueues into the engine (submit/cancel/pause); the engine steps on
 * its own thread and wakes the loop through ds_engine_event_fd(). A request outlives its
 * stream when the client goes away first: it is cancelled in the engine and freed when the
 * engine's final event for it arrives. */
#ifndef DS_SERVER_H
#define DS_SERVER_H

#include <event2/event.h>

#include "config.h"
#include "tokenizer.h"
#include "engine.h"
#include "rpc.h"

struct ds_server;

/* Binds the gRPC listener (and the metrics port) and registers everything on base. The
 * engine must already run in threaded mode; it is not owned, nor are tok (NULL = token ids
 * only) and chat (NULL = no chat messages), which must outlive the server. cfg and info are copied.
 * Errors: DS_ERR_IO (bind/listen), DS_ERR_INVALID (address), DS_ERR_NOMEM. */
enum ds_status ds_server_init(struct ds_server **out, struct event_base *base,
                              const struct ds_server_config *cfg, struct ds_engine *engine,
                              const struct ds_rpc_info *info, const struct ds_tokenizer *tok,
                              const struct ds_chat_template *chat, struct ds_err *err);
/* The bound gRPC and metrics ports (useful with port 0). Metrics is -1 when off. */
int ds_server_port(const struct ds_server *s);
int ds_server_metrics_port(const struct ds_server *s);
/* Runs the event loop until SIGTERM/SIGINT has drained (or the drain timeout passed).
 * Returns DS_OK after a graceful stop. */
enum ds_status ds_server_run(struct ds_server *s, struct ds_err *err);
/* Closes every connection and frees the server. NULL is a no-op. */
void ds_server_free(struct ds_server *s);

/* One log line to stderr: "<UTC time> <level> <message>", when lvl <= max. */
void ds_log(enum ds_log_level max, enum ds_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
