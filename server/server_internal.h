/* server_internal.h - private structs shared by server.c (listener, engine events, request
 * dispatch, shutdown) and conn.c (the HTTP/2 session and per-stream gRPC framing). */
#ifndef DS_SERVER_INTERNAL_H
#define DS_SERVER_INTERNAL_H

#include <event2/bufferevent.h>
#include <event2/buffer.h>
#include <event2/listener.h>
#include <nghttp2/nghttp2.h>

#include "metrics.h"
#include "server.h"
#include "tokenizer.h"

/* A request in the engine. Lives from submit until the engine's final event. */
struct srv_req {
	uint64_t engine_id;
	struct srv_stream *stream; /* NULL once the client or the deadline ended the stream */
	bool unary, return_logprobs, paused;
	struct srv_req *prev, *next;
};

struct srv_stream {
	struct srv_conn *conn;
	int32_t id;
	enum ds_rpc_method method;
	/* request headers */
	bool is_post, grpc_ct, authed, has_timeout;
	uint64_t timeout_ns;
	/* request body */
	struct ds_grpc_deframer rd;
	uint8_t *msg;
	size_t msg_len;
	int n_msgs;
	/* response */
	bool responded; /* response HEADERS submitted */
	bool closing;   /* status decided: trailers follow the queued data */
	bool finished;  /* trailers (or a Trailers-Only / HTTP error response) submitted */
	bool deferred;  /* the data source returned DEFERRED */
	int code;
	char message[512];    /* percent-encoded grpc-message */
	struct evbuffer *out; /* framed messages not yet handed to nghttp2 */
	struct event *deadline;
	struct srv_req *req;
	char request_id[128];
	int32_t *acc;  /* unary: (acc_n) tokens so far */
	float *acc_lp; /* unary: (acc_n) logprobs or NULL */
	int acc_n, acc_cap;
	struct ds_tokenizer_stream ts; /* streaming detokenizer, when ts_on */
	bool ts_on;
	uint64_t t_start_ns;
	struct srv_stream *prev, *next;
};

struct srv_conn {
	struct ds_server *srv;
	uint64_t id;
	struct bufferevent *bev;
	nghttp2_session *h2;
	struct srv_stream *streams;
	int n_streams;
	struct event *ping_timer;
	bool ping_outstanding;
	bool goaway;
	bool dirty; /* nghttp2 has queued frames to send */
	char peer[64];
	struct srv_conn *prev, *next;
};

struct ds_server {
	struct ds_server_config cfg;
	struct event_base *base;
	struct evconnlistener *lis;
	struct event *engine_ev, *sig_term, *sig_int, *drain_timer;
	struct ds_engine *engine;
	struct ds_rpc_env env;
	struct ds_rpc_info info;
	struct ds_model_config model_cfg;
	struct ds_metrics *metrics;
	struct srv_conn *conns;
	int n_conns;
	struct srv_req *reqs;
	int n_reqs;
	uint64_t next_conn_id;
	int port;
	bool draining;
};

#define SRV_LOG(srv, lvl, ...) ds_log((srv)->cfg.log_level, (lvl), __VA_ARGS__)

uint64_t srv_now_ns(void);

/* conn.c */
void srv_conn_accept(struct ds_server *srv, evutil_socket_t fd, const struct sockaddr *sa);
void srv_conn_free(struct srv_conn *c);
/* Sends what nghttp2 has queued. Returns false when the connection was freed. */
bool srv_conn_flush(struct srv_conn *c);
void srv_conn_goaway(struct srv_conn *c);
/* Queues one framed message (ownership of buf->data passes) on the stream. */
void srv_stream_send(struct srv_stream *s, struct ds_rpc_buf *buf);
/* Decides the status: trailers after the queued data, or Trailers-Only if nothing was sent. */
void srv_stream_finish(struct srv_stream *s, int code, const char *msg);

/* server.c */
/* The request message is complete (END_STREAM): run the method. */
void srv_stream_dispatch(struct srv_stream *s);
/* Decouples the stream from its engine request and cancels the request. */
void srv_stream_cancel_req(struct srv_stream *s);
/* Stream output drained below the low-water mark: resume its request. */
void srv_stream_drained(struct srv_stream *s);
/* Flushes connections with queued frames; closes drained ones while shutting down. */
void srv_flush_all(struct ds_server *srv);

#endif
