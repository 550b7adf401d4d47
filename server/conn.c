/* conn.c - one HTTP/2 connection: nghttp2 server session over a libevent bufferevent, gRPC
 * request headers and message reassembly per stream, and the response side (headers, framed
 * messages, trailers or Trailers-Only).
 *
 * Key decisions (nghttp2 examples/libevent-server.c): every exit from the read, write and
 * event callbacks ends in at most one srv_conn_free; nghttp2 stops pulling from the socket
 * buffer past OUTPUT_WOULDBLOCK, so a reader that does not read leaves bytes in the stream's
 * own buffer, where the high-water mark pauses its request in the engine. */
#include "server_internal.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>

#define OUTPUT_WOULDBLOCK (1 << 16)
#define H2_WINDOW (1 << 20)

static void stream_free(struct srv_stream *s);

/* ---- response side ---- */

#define NV(n, v)                                                                                   \
	{                                                                                          \
		(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE     \
	}

static ssize_t stream_data_read(nghttp2_session *h2, int32_t sid, uint8_t *buf, size_t len,
                                uint32_t *flags, nghttp2_data_source *src, void *ud)
{
	(void)ud;
	struct srv_stream *s = src->ptr;
	size_t n = (size_t)evbuffer_remove(s->out, buf, len);
	size_t left = evbuffer_get_length(s->out);
	if (s->req && s->req->paused && left <= s->conn->srv->cfg.stream_high_water / 2)
		srv_stream_drained(s);
	if (left > 0)
		return (ssize_t)n;
	if (!s->closing) {
		if (n > 0)
			return (ssize_t)n;
		s->deferred = true;
		return NGHTTP2_ERR_DEFERRED;
	}
	char code[16];
	snprintf(code, sizeof(code), "%d", s->code);
	nghttp2_nv trailers[] = {NV("grpc-status", code), NV("grpc-message", s->message)};
	size_t nt = s->message[0] ? 2 : 1;
	*flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
	if (nghttp2_submit_trailer(h2, sid, trailers, nt) != 0)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	s->finished = true;
	return (ssize_t)n;
}

static void stream_respond(struct srv_stream *s)
{
	nghttp2_nv hdrs[] = {NV(":status", "200"), NV("content-type", "application/grpc"),
	                     NV("grpc-accept-encoding", "identity")};
	nghttp2_data_provider prd = {.source.ptr = s, .read_callback = stream_data_read};
	if (nghttp2_submit_response(s->conn->h2, s->id, hdrs, DS_ARRAY_LEN(hdrs), &prd) != 0)
		nghttp2_submit_rst_stream(s->conn->h2, NGHTTP2_FLAG_NONE, s->id,
		                          NGHTTP2_INTERNAL_ERROR);
	s->responded = true;
	s->conn->dirty = true;
}

static void stream_kick(struct srv_stream *s)
{
	if (!s->responded) {
		stream_respond(s);
	} else if (s->deferred) {
		s->deferred = false;
		nghttp2_session_resume_data(s->conn->h2, s->id);
		s->conn->dirty = true;
	}
}

static void buf_release(const void *data, size_t len, void *extra)
{
	(void)len;
	(void)extra;
	free((void *)data);
}

void srv_stream_send(struct srv_stream *s, struct ds_rpc_buf *buf)
{
	if (s->closing || s->finished) {
		free(buf->data);
		return;
	}
	/* evbuffer takes the block by reference and frees it when drained */
	if (evbuffer_add_reference(s->out, buf->data, buf->len, buf_release, NULL) != 0)
		free(buf->data);
	buf->data = NULL;
	struct srv_req *r = s->req;
	struct ds_server *srv = s->conn->srv;
	if (r && !r->paused && evbuffer_get_length(s->out) > srv->cfg.stream_high_water) {
		r->paused = true;
		ds_engine_pause(srv->engine, r->engine_id, true);
		ds_metrics_paused(srv->metrics);
		SRV_LOG(srv, DS_LOG_DEBUG, "conn=%llu stream=%d paused: %zu bytes queued",
		        (unsigned long long)s->conn->id, s->id, evbuffer_get_length(s->out));
	}
	stream_kick(s);
}

void srv_stream_finish(struct srv_stream *s, int code, const char *msg)
{
	if (s->closing || s->finished)
		return;
	struct ds_server *srv = s->conn->srv;
	s->code = code;
	ds_grpc_percent_encode(s->message, sizeof(s->message), msg ? msg : "");
	ds_metrics_rpc_done(srv->metrics, s->method, code);
	SRV_LOG(srv, code == DS_GRPC_OK ? DS_LOG_DEBUG : DS_LOG_INFO,
	        "conn=%llu stream=%d %s -> %s%s%s", (unsigned long long)s->conn->id, s->id,
	        ds_rpc_method_name(s->method), ds_grpc_code_name(code), msg && *msg ? ": " : "",
	        msg ? msg : "");
	if (s->deadline)
		event_del(s->deadline);
	if (!s->responded && evbuffer_get_length(s->out) == 0) {
		/* Trailers-Only */
		char c[16];
		snprintf(c, sizeof(c), "%d", code);
		nghttp2_nv hdrs[] = {NV(":status", "200"), NV("content-type", "application/grpc"),
		                     NV("grpc-status", c), NV("grpc-message", s->message)};
		size_t n = s->message[0] ? 4 : 3;
		if (nghttp2_submit_response(s->conn->h2, s->id, hdrs, n, NULL) != 0)
			nghttp2_submit_rst_stream(s->conn->h2, NGHTTP2_FLAG_NONE, s->id,
			                          NGHTTP2_INTERNAL_ERROR);
		s->responded = s->closing = s->finished = true;
		s->conn->dirty = true;
		return;
	}
	s->closing = true;
	stream_kick(s);
}

/* A plain HTTP error for requests that are not gRPC at all (non-POST, wrong content-type). */
static void stream_http_error(struct srv_stream *s, const char *status)
{
	nghttp2_nv hdrs[] = {NV(":status", status)};
	nghttp2_submit_response(s->conn->h2, s->id, hdrs, 1, NULL);
	s->responded = s->closing = s->finished = true;
	s->conn->dirty = true;
	SRV_LOG(s->conn->srv, DS_LOG_INFO, "conn=%llu stream=%d rejected with HTTP %s",
	        (unsigned long long)s->conn->id, s->id, status);
}

/* ---- request side ---- */

static void stream_on_deadline(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct srv_stream *s = arg;
	struct srv_conn *c = s->conn;
	struct ds_server *srv = c->srv;
	srv_stream_cancel_req(s);
	srv_stream_finish(s, DS_GRPC_DEADLINE_EXCEEDED, "deadline exceeded");
	srv_conn_flush(c); /* may free c */
	srv_flush_all(srv);
}

/* The deframer lends each message: keep a copy of the one request message (NULL when empty). */
static enum ds_status stream_on_msg(void *ctx, const uint8_t *msg, size_t len, struct ds_err *err)
{
	struct srv_stream *s = ctx;
	if (s->n_msgs++ > 0)
		return ds_errf(err, DS_ERR_INVALID, "%s takes exactly one request message",
		               ds_rpc_method_name(s->method));
	if (len > 0) {
		if (!(s->msg = malloc(len)))
			return ds_errf(err, DS_ERR_NOMEM, "out of memory for a %zu-byte message",
			               len);
		memcpy(s->msg, msg, len);
	}
	s->msg_len = len;
	return DS_OK;
}

/* A request the deframer refused: the status the server answers with. */
static enum ds_grpc_code stream_deframe_code(enum ds_status rv)
{
	switch (rv) {
	case DS_ERR_TOO_LONG:
		return DS_GRPC_RESOURCE_EXHAUSTED;
	case DS_ERR_UNSUPPORTED:
		return DS_GRPC_UNIMPLEMENTED; /* compressed: we negotiate no grpc-encoding */
	case DS_ERR_FORMAT:
	case DS_ERR_INVALID:
		return DS_GRPC_INVALID_ARGUMENT;
	default:
		return DS_GRPC_INTERNAL;
	}
}

static bool hdr_eq(const uint8_t *a, size_t alen, const char *b)
{
	return alen == strlen(b) && memcmp(a, b, alen) == 0;
}

static bool key_matches(const char *key, const uint8_t *v, size_t vlen)
{
	/* "Bearer <key>", compared in time independent of where it differs */
	size_t klen = strlen(key);
	if (vlen != klen + 7 || memcmp(v, "Bearer ", 7) != 0)
		return false;
	unsigned diff = 0;
	for (size_t i = 0; i < klen; i++)
		diff |= (unsigned)(v[7 + i] ^ (uint8_t)key[i]);
	return diff == 0;
}

static int h2_on_header(nghttp2_session *h2, const nghttp2_frame *f, const uint8_t *name,
                        size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                        void *ud)
{
	(void)flags;
	(void)ud;
	if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	struct srv_stream *s = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
	if (!s)
		return 0;
	struct ds_server *srv = s->conn->srv;
	if (hdr_eq(name, namelen, ":method")) {
		s->is_post = hdr_eq(value, valuelen, "POST");
	} else if (hdr_eq(name, namelen, ":path")) {
		s->method = ds_rpc_method_lookup((const char *)value, valuelen);
	} else if (hdr_eq(name, namelen, "content-type")) {
		s->grpc_ct = valuelen >= 16 && memcmp(value, "application/grpc", 16) == 0 &&
		             (valuelen == 16 || value[16] == '+' || value[16] == ';');
	} else if (hdr_eq(name, namelen, "grpc-timeout")) {
		s->has_timeout =
		    ds_grpc_timeout_parse((const char *)value, valuelen, &s->timeout_ns) == DS_OK;
	} else if (hdr_eq(name, namelen, "authorization")) {
		s->authed = srv->cfg.api_key[0] && key_matches(srv->cfg.api_key, value, valuelen);
	}
	return 0;
}

static int h2_on_begin_headers(nghttp2_session *h2, const nghttp2_frame *f, void *ud)
{
	struct srv_conn *c = ud;
	if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	struct srv_stream *s = calloc(1, sizeof(*s));
	if (!s || !(s->out = evbuffer_new())) {
		free(s);
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	}
	s->conn = c;
	s->id = f->hd.stream_id;
	s->t_start_ns = srv_now_ns();
	ds_grpc_deframer_init(&s->rd, c->srv->cfg.max_message_bytes);
	s->next = c->streams;
	if (c->streams)
		c->streams->prev = s;
	c->streams = s;
	c->n_streams++;
	nghttp2_session_set_stream_user_data(h2, s->id, s);
	return 0;
}

/* Request headers complete: everything decided before the body. */
static void stream_on_headers(struct srv_stream *s)
{
	struct ds_server *srv = s->conn->srv;
	if (!s->is_post) {
		stream_http_error(s, "405");
		return;
	}
	if (!s->grpc_ct) {
		stream_http_error(s, "415");
		return;
	}
	if (s->method == DS_RPC_UNKNOWN) {
		srv_stream_finish(s, DS_GRPC_UNIMPLEMENTED, "unknown method");
		return;
	}
	if (srv->cfg.api_key[0] && !s->authed && s->method != DS_RPC_HEALTH_CHECK) {
		srv_stream_finish(s, DS_GRPC_UNAUTHENTICATED,
		                  "missing or wrong 'authorization: Bearer <key>' header");
		return;
	}
	if (s->has_timeout) {
		s->deadline = evtimer_new(srv->base, stream_on_deadline, s);
		if (!s->deadline) {
			srv_stream_finish(s, DS_GRPC_RESOURCE_EXHAUSTED, "out of memory");
			return;
		}
		uint64_t ns = DS_MIN(s->timeout_ns, (uint64_t)86400 * 1000000000ull);
		struct timeval tv = {.tv_sec = (time_t)(ns / 1000000000ull),
		                     .tv_usec = (suseconds_t)(ns % 1000000000ull / 1000)};
		evtimer_add(s->deadline, &tv);
	}
}

static void stream_on_end(struct srv_stream *s)
{
	if (s->closing || s->finished)
		return;
	if (!ds_grpc_deframer_idle(&s->rd)) {
		srv_stream_finish(s, DS_GRPC_INVALID_ARGUMENT, "request ended inside a message");
		return;
	}
	srv_stream_dispatch(s);
}

static int h2_on_data_chunk(nghttp2_session *h2, uint8_t flags, int32_t sid, const uint8_t *data,
                            size_t len, void *ud)
{
	(void)flags;
	(void)ud;
	struct srv_stream *s = nghttp2_session_get_stream_user_data(h2, sid);
	if (!s || s->closing || s->finished)
		return 0;
	struct ds_err err;
	enum ds_status rv = ds_grpc_deframer_feed(&s->rd, data, len, stream_on_msg, s, &err);
	if (rv != DS_OK)
		srv_stream_finish(s, stream_deframe_code(rv), err.msg);
	return 0;
}

static void conn_ping_arm(struct srv_conn *c, int secs);

static int h2_on_frame_recv(nghttp2_session *h2, const nghttp2_frame *f, void *ud)
{
	struct srv_conn *c = ud;
	if (f->hd.type == NGHTTP2_PING) {
		SRV_LOG(c->srv, DS_LOG_DEBUG, "conn=%llu PING%s", (unsigned long long)c->id,
		        f->hd.flags & NGHTTP2_FLAG_ACK ? " ACK" : "");
		if (f->hd.flags & NGHTTP2_FLAG_ACK) {
			c->ping_outstanding = false;
			conn_ping_arm(c, c->srv->cfg.keepalive_s);
		}
		return 0;
	}
	if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA)
		return 0;
	struct srv_stream *s = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
	if (!s)
		return 0;
	if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST)
		stream_on_headers(s);
	if (f->hd.flags & NGHTTP2_FLAG_END_STREAM)
		stream_on_end(s);
	return 0;
}

static int h2_on_stream_close(nghttp2_session *h2, int32_t sid, uint32_t error_code, void *ud)
{
	struct srv_conn *c = ud;
	struct srv_stream *s = nghttp2_session_get_stream_user_data(h2, sid);
	if (!s)
		return 0;
	if (!s->finished) {
		SRV_LOG(c->srv, DS_LOG_INFO, "conn=%llu stream=%d closed by the client (%s)",
		        (unsigned long long)c->id, sid, nghttp2_http2_strerror(error_code));
		ds_metrics_rpc_done(c->srv->metrics, s->method, DS_GRPC_CANCELLED);
	}
	stream_free(s);
	return 0;
}

static ssize_t h2_send(nghttp2_session *h2, const uint8_t *data, size_t len, int flags, void *ud)
{
	(void)h2;
	(void)flags;
	struct srv_conn *c = ud;
	if (evbuffer_get_length(bufferevent_get_output(c->bev)) >= OUTPUT_WOULDBLOCK)
		return NGHTTP2_ERR_WOULDBLOCK;
	if (bufferevent_write(c->bev, data, len) != 0)
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	return (ssize_t)len;
}

/* ---- streams and connections ---- */

static void stream_free(struct srv_stream *s)
{
	struct srv_conn *c = s->conn;
	srv_stream_cancel_req(s);
	nghttp2_session_set_stream_user_data(c->h2, s->id, NULL);
	if (s->prev)
		s->prev->next = s->next;
	else
		c->streams = s->next;
	if (s->next)
		s->next->prev = s->prev;
	c->n_streams--;
	if (s->deadline)
		event_free(s->deadline);
	evbuffer_free(s->out);
	ds_grpc_deframer_free(&s->rd);
	free(s->msg);
	free(s->acc);
	free(s->acc_lp);
	if (s->ts_on)
		ds_tokenizer_stream_free(&s->ts);
	free(s);
}

void srv_conn_free(struct srv_conn *c)
{
	struct ds_server *srv = c->srv;
	while (c->streams) {
		if (!c->streams->finished)
			ds_metrics_rpc_done(srv->metrics, c->streams->method, DS_GRPC_CANCELLED);
		stream_free(c->streams);
	}
	nghttp2_session_del(c->h2);
	if (c->ping_timer)
		event_free(c->ping_timer);
	bufferevent_free(c->bev);
	if (c->prev)
		c->prev->next = c->next;
	else
		srv->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	srv->n_conns--;
	ds_metrics_conn(srv->metrics, -1);
	SRV_LOG(srv, DS_LOG_DEBUG, "conn=%llu closed", (unsigned long long)c->id);
	free(c);
}

bool srv_conn_flush(struct srv_conn *c)
{
	int rv = nghttp2_session_send(c->h2);
	if (rv != 0) {
		SRV_LOG(c->srv, DS_LOG_WARN, "conn=%llu send failed: %s", (unsigned long long)c->id,
		        nghttp2_strerror(rv));
		srv_conn_free(c);
		return false;
	}
	c->dirty = false;
	if (!nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2) &&
	    evbuffer_get_length(bufferevent_get_output(c->bev)) == 0) {
		srv_conn_free(c);
		return false;
	}
	return true;
}

void srv_conn_goaway(struct srv_conn *c)
{
	if (c->goaway)
		return;
	c->goaway = true;
	nghttp2_submit_goaway(c->h2, NGHTTP2_FLAG_NONE,
	                      nghttp2_session_get_last_proc_stream_id(c->h2), NGHTTP2_NO_ERROR,
	                      NULL, 0);
	c->dirty = true;
}

static void conn_on_read(struct bufferevent *bev, void *arg)
{
	struct srv_conn *c = arg;
	struct ds_server *srv = c->srv;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t len = evbuffer_get_length(in);
	unsigned char *data = evbuffer_pullup(in, -1);
	ssize_t rv = nghttp2_session_mem_recv(c->h2, data, len);
	if (rv < 0) {
		SRV_LOG(srv, DS_LOG_INFO, "conn=%llu %s: bad HTTP/2 input (%s), closing",
		        (unsigned long long)c->id, c->peer, nghttp2_strerror((int)rv));
		srv_conn_free(c);
		srv_flush_all(srv);
		return;
	}
	evbuffer_drain(in, (size_t)rv);
	srv_conn_flush(c);
	srv_flush_all(srv);
}

static void conn_on_write(struct bufferevent *bev, void *arg)
{
	(void)bev;
	struct srv_conn *c = arg;
	struct ds_server *srv = c->srv;
	srv_conn_flush(c);
	srv_flush_all(srv);
}

static void conn_on_event(struct bufferevent *bev, short events, void *arg)
{
	(void)bev;
	struct srv_conn *c = arg;
	struct ds_server *srv = c->srv;
	if (events & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)) {
		SRV_LOG(srv, DS_LOG_DEBUG, "conn=%llu %s: %s", (unsigned long long)c->id, c->peer,
		        events & BEV_EVENT_EOF ? "peer closed" : "socket error");
		srv_conn_free(c);
		srv_flush_all(srv);
	}
}

/* Keepalive: PING every keepalive_s; no ACK within keepalive_timeout_s closes the connection. */
static void conn_on_ping_timer(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct srv_conn *c = arg;
	struct ds_server *srv = c->srv;
	if (c->ping_outstanding) {
		SRV_LOG(srv, DS_LOG_INFO, "conn=%llu %s: keepalive PING not acknowledged, closing",
		        (unsigned long long)c->id, c->peer);
		srv_conn_free(c);
		srv_flush_all(srv);
		return;
	}
	c->ping_outstanding = true;
	nghttp2_submit_ping(c->h2, NGHTTP2_FLAG_NONE, NULL);
	conn_ping_arm(c, srv->cfg.keepalive_timeout_s);
	srv_conn_flush(c); /* may free c */
	srv_flush_all(srv);
}

static void conn_ping_arm(struct srv_conn *c, int secs)
{
	if (!c->ping_timer || secs <= 0)
		return;
	struct timeval tv = {.tv_sec = secs, .tv_usec = 0};
	evtimer_add(c->ping_timer, &tv);
}

void srv_conn_accept(struct ds_server *srv, evutil_socket_t fd, const struct sockaddr *sa)
{
	struct srv_conn *c = NULL;
	nghttp2_session_callbacks *cbs = NULL;
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (!(c = calloc(1, sizeof(*c))))
		goto fail;
	c->srv = srv;
	c->id = ++srv->next_conn_id;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		char a[INET_ADDRSTRLEN] = "?";
		inet_ntop(AF_INET, &in->sin_addr, a, sizeof(a));
		snprintf(c->peer, sizeof(c->peer), "%s:%d", a, ntohs(in->sin_port));
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		char a[INET6_ADDRSTRLEN] = "?";
		inet_ntop(AF_INET6, &in6->sin6_addr, a, sizeof(a));
		snprintf(c->peer, sizeof(c->peer), "[%s]:%d", a, ntohs(in6->sin6_port));
	}
	c->bev = bufferevent_socket_new(srv->base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (!c->bev)
		goto fail;
	fd = -1; /* owned by the bufferevent now */
	if (nghttp2_session_callbacks_new(&cbs) != 0)
		goto fail;
	nghttp2_session_callbacks_set_send_callback(cbs, h2_send);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, h2_on_frame_recv);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, h2_on_data_chunk);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs, h2_on_stream_close);
	nghttp2_session_callbacks_set_on_header_callback(cbs, h2_on_header);
	nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, h2_on_begin_headers);
	int rv = nghttp2_session_server_new(&c->h2, cbs, c);
	nghttp2_session_callbacks_del(cbs);
	if (rv != 0)
		goto fail;
	nghttp2_settings_entry iv[] = {
	    {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, (uint32_t)srv->cfg.max_streams},
	    {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, H2_WINDOW},
	    {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 16384},
	};
	if (nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, DS_ARRAY_LEN(iv)) != 0 ||
	    nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0, H2_WINDOW) != 0)
		goto fail;
	if (srv->cfg.keepalive_s > 0) {
		if (!(c->ping_timer = evtimer_new(srv->base, conn_on_ping_timer, c)))
			goto fail;
		conn_ping_arm(c, srv->cfg.keepalive_s);
	}
	c->next = srv->conns;
	if (srv->conns)
		srv->conns->prev = c;
	srv->conns = c;
	srv->n_conns++;
	ds_metrics_conn(srv->metrics, +1);
	bufferevent_setcb(c->bev, conn_on_read, conn_on_write, conn_on_event, c);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	SRV_LOG(srv, DS_LOG_DEBUG, "conn=%llu accepted from %s", (unsigned long long)c->id,
	        c->peer);
	c->dirty = true;
	srv_conn_flush(c);
	return;
fail:
	SRV_LOG(srv, DS_LOG_WARN, "accept: out of memory, dropping a connection");
	if (c) {
		if (c->h2)
			nghttp2_session_del(c->h2);
		if (c->ping_timer)
			event_free(c->ping_timer);
		if (c->bev)
			bufferevent_free(c->bev);
		free(c);
	}
	if (fd >= 0)
		evutil_closesocket(fd);
}
