/* grpcc.h - a small gRPC-over-h2c client on nghttp2 and a non-blocking socket.
 *
 * One ds_grpcc_conn is one TCP connection carrying many concurrent calls (HTTP/2 streams). The
 * caller drives I/O: either ds_grpcc_conn_run() (poll() on this one connection), or, to multiplex
 * several connections, ds_grpcc_conn_pollfd() + ds_grpcc_conn_io() from its own poll loop.
 * Key decision: no threads and no event library; everything happens inside run/io, so callbacks
 * fire on the caller's thread at a well-defined time and the caller can timestamp them.
 *
 * A call delivers each response message to on_message and ends with exactly one on_close carrying
 * the gRPC status: the server's grpc-status/grpc-message trailers, or a status the client derived
 * (CANCELLED after ds_grpcc_call_cancel, DEADLINE_EXCEEDED when the deadline passes, UNAVAILABLE
 * when the connection drops, INTERNAL for protocol violations). The call handle is freed right
 * after on_close returns. */
#ifndef DS_GRPCC_CLIENT_H
#define DS_GRPCC_CLIENT_H

#include "grpc_wire.h"

#include <poll.h>

struct ds_grpcc_conn;
struct ds_grpcc_call;

struct ds_grpcc_conn_opts {
	size_t max_recv_msg;    /* largest response message accepted (default 4 MiB) */
	int connect_timeout_ms; /* default 5000 */
	int max_concurrent;     /* local cap on open streams; 0 = the server's SETTINGS limit */
};

void ds_grpcc_conn_opts_default(struct ds_grpcc_conn_opts *o);

struct ds_grpcc_md {
	const char *name; /* lower-case */
	const char *value;
};

struct ds_grpcc_call_cbs {
	/* Optional: response headers arrived (before any message). */
	void (*on_headers)(struct ds_grpcc_call *call, void *ud);
	/* One complete response message. Return non-zero to cancel the call (on_close follows with
	 * CANCELLED). */
	int (*on_message)(struct ds_grpcc_call *call, const uint8_t *msg, size_t len, void *ud);
	/* Exactly once per started call. message is decoded, never NULL (may be ""). */
	void (*on_close)(struct ds_grpcc_call *call, int code, const char *message, void *ud);
};

/* Connects to host:port (numeric or a name), blocking up to connect_timeout_ms, and sends the
 * HTTP/2 preface and SETTINGS. opts may be NULL. Errors: DS_ERR_IO (resolve/connect), DS_ERR_NOMEM.
 */
enum ds_status ds_grpcc_conn_connect(struct ds_grpcc_conn **out, const char *host, int port,
                                     const struct ds_grpcc_conn_opts *opts, struct ds_err *err);
/* Closes the connection. Calls still open get on_close(UNAVAILABLE) first. NULL is a no-op. */
void ds_grpcc_conn_free(struct ds_grpcc_conn *c);

/* Starts a call: path like "/detserve.v1.Detserve/Generate", one request message (sent with
 * END_STREAM), an optional deadline (timeout_ms <= 0: none), extra metadata. *out (may be NULL)
 * receives the handle, valid until on_close. Errors: DS_ERR_INVALID, DS_ERR_NOMEM, DS_ERR_IO (the
 * connection is dead or going away), DS_ERR_FULL (max_concurrent reached). On error no callback
 * fires. */
enum ds_status ds_grpcc_call_start(struct ds_grpcc_conn *c, const char *path, const uint8_t *msg,
                                   size_t len, int64_t timeout_ms, const struct ds_grpcc_md *md,
                                   int n_md, const struct ds_grpcc_call_cbs *cbs, void *ud,
                                   struct ds_grpcc_call **out, struct ds_err *err);
/* Cancels: sends RST_STREAM(CANCEL) and delivers on_close(CANCELLED) now (inside this call),
 * unless the call already closed. */
void ds_grpcc_call_cancel(struct ds_grpcc_call *call);
/* The HTTP/2 stream id (for logs). */
int32_t ds_grpcc_call_stream_id(const struct ds_grpcc_call *call);

/* Open calls on the connection. */
int ds_grpcc_conn_active(const struct ds_grpcc_conn *c);
/* Calls that can still be started before hitting the stream limit (>= 0). */
int ds_grpcc_conn_capacity(const struct ds_grpcc_conn *c);
/* False once the socket failed, the peer closed, or GOAWAY arrived. */
bool ds_grpcc_conn_usable(const struct ds_grpcc_conn *c);

/* Fills a pollfd for this connection (events = what nghttp2 wants). */
void ds_grpcc_conn_pollfd(struct ds_grpcc_conn *c, struct pollfd *pfd);
/* Handles readiness reported by poll (revents), flushes pending output and fires expired
 * deadlines. Returns DS_ERR_IO once the connection is dead (its calls were closed with
 * UNAVAILABLE); DS_OK otherwise. */
enum ds_status ds_grpcc_conn_io(struct ds_grpcc_conn *c, short revents, struct ds_err *err);
/* Milliseconds until the nearest call deadline (-1: none), for the poll timeout. */
int ds_grpcc_conn_next_timeout_ms(const struct ds_grpcc_conn *c);
/* One poll() round on this connection, waiting at most timeout_ms (-1: until something happens). */
enum ds_status ds_grpcc_conn_run(struct ds_grpcc_conn *c, int timeout_ms, struct ds_err *err);

/* Monotonic clock in nanoseconds (the clock deadlines and benchmarks use). */
uint64_t ds_grpcc_now_ns(void);

#endif
