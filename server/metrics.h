/* metrics.h - Prometheus text exposition over HTTP/1.1 (libevent evhttp) on its own port.
 *
 * Counters and histograms are updated on the event-loop thread only (no locks); queue depth,
 * KV usage and the engine's DVR totals are read from ds_engine_get_stats() at scrape time. */
#ifndef DS_METRICS_H
#define DS_METRICS_H

#include <event2/event.h>

#include "engine.h"
#include "rpc.h"

struct ds_metrics;

/* Binds addr:port (port -1 = no HTTP endpoint, counters still kept; 0 = any free port).
 * DS_ERR_IO when the port cannot be bound. */
enum ds_status ds_metrics_init(struct ds_metrics **out, struct event_base *base, const char *addr,
                               int port, struct ds_engine *engine, struct ds_err *err);
void ds_metrics_free(struct ds_metrics *m);
int ds_metrics_port(const struct ds_metrics *m);

/* An RPC ended with this grpc-status. */
void ds_metrics_rpc_done(struct ds_metrics *m, enum ds_rpc_method method, int code);
/* A request's final event: request/token/DVR counters and TTFT/TPOT/E2E histograms. */
void ds_metrics_final(struct ds_metrics *m, const struct ds_event *ev);
void ds_metrics_conn(struct ds_metrics *m, int delta);
void ds_metrics_conn_refused(struct ds_metrics *m);
/* A stream crossed its output high-water mark and its request was paused. */
void ds_metrics_paused(struct ds_metrics *m);

/* Renders the exposition text into a malloc'd string (for tests); NULL when out of memory. */
char *ds_metrics_render(struct ds_metrics *m);

#endif
