/* grpcc.c - gRPC calls over one nghttp2 client session on a non-blocking TCP socket.
 *
 * Ownership: conn -> calls (a doubly linked list). A call is "notified" once on_close has run;
 * the struct lives on until nghttp2 closes its stream (or the connection dies), so a cancelled
 * call's late frames find a quiet owner instead of freed memory. */
#include "grpcc.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#define DEFAULT_MAX_RECV (4u << 20)

struct ds_grpcc_call {
	struct ds_grpcc_conn *conn;
	struct ds_grpcc_call *prev, *next;
	int32_t stream_id;
	struct ds_grpcc_call_cbs cbs;
	void *ud;
	uint8_t *req; /* framed request: 5-byte prefix + message */
	size_t req_len, req_off;
	uint64_t deadline_ns; /* 0 = none */
	struct ds_grpc_deframer deframer;
	int header_blocks; /* HEADERS frames begun: 1 = response headers, 2 = trailers */
	int http_status;
	int grpc_status; /* -1 until the trailers give one */
	char grpc_message[512];
	bool notified; /* on_close has run */
};

struct ds_grpcc_conn {
	int fd;
	nghttp2_session *session;
	char authority[300];
	struct ds_grpcc_conn_opts opts;
	struct ds_grpcc_call *calls;
	int n_active; /* calls not yet notified */
	bool dead;
	bool goaway;
};

uint64_t ds_grpcc_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void ds_grpcc_conn_opts_default(struct ds_grpcc_conn_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->max_recv_msg = DEFAULT_MAX_RECV;
	o->connect_timeout_ms = 5000;
}

/* ---- call bookkeeping ---- */

static void call_unlink_free(struct ds_grpcc_call *call)
{
	struct ds_grpcc_conn *c = call->conn;
	if (call->prev)
		call->prev->next = call->next;
	else
		c->calls = call->next;
	if (call->next)
		call->next->prev = call->prev;
	if (call->stream_id > 0 && c->session)
		nghttp2_session_set_stream_user_data(c->session, call->stream_id, NULL);
	ds_grpc_deframer_free(&call->deframer);
	free(call->req);
	free(call);
}

/* Runs on_close once. */
static void call_notify(struct ds_grpcc_call *call, int code, const char *msg)
{
	if (call->notified)
		return;
	call->notified = true;
	call->conn->n_active--;
	if (call->cbs.on_close)
		call->cbs.on_close(call, code, msg ? msg : "", call->ud);
}

/* The client gives up on a call: reset the stream and report code. */
static void call_abort(struct ds_grpcc_call *call, int code, const char *msg)
{
	if (call->notified)
		return;
	if (call->stream_id > 0 && !call->conn->dead)
		nghttp2_submit_rst_stream(call->conn->session, NGHTTP2_FLAG_NONE, call->stream_id,
		                          NGHTTP2_CANCEL);
	call_notify(call, code, msg);
}

void ds_grpcc_call_cancel(struct ds_grpcc_call *call)
{
	call_abort(call, DS_GRPC_CANCELLED, "cancelled by the client");
}

int32_t ds_grpcc_call_stream_id(const struct ds_grpcc_call *call)
{
	return call->stream_id;
}

/* ---- nghttp2 callbacks ---- */

static ssize_t cb_send(nghttp2_session *s, const uint8_t *data, size_t len, int flags, void *ud)
{
	struct ds_grpcc_conn *c = ud;
	(void)s;
	(void)flags;
	ssize_t n = send(c->fd, data, len, MSG_NOSIGNAL);
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
			return NGHTTP2_ERR_WOULDBLOCK;
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	}
	return n;
}

static int cb_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
	(void)ud;
	if (f->hd.type != NGHTTP2_HEADERS)
		return 0;
	struct ds_grpcc_call *call = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
	if (call)
		call->header_blocks++;
	return 0;
}

static int cb_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
	(void)flags;
	(void)ud;
	if (f->hd.type != NGHTTP2_HEADERS)
		return 0;
	struct ds_grpcc_call *call = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
	if (!call)
		return 0;
	if (namelen == 7 && memcmp(name, ":status", 7) == 0) {
		int st = 0;
		for (size_t i = 0; i < valuelen && i < 4; i++)
			st = st * 10 + (value[i] - '0');
		call->http_status = st;
	} else if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0) {
		int st = 0;
		for (size_t i = 0; i < valuelen && i < 3; i++) {
			if (value[i] < '0' || value[i] > '9') {
				st = DS_GRPC_UNKNOWN;
				break;
			}
			st = st * 10 + (value[i] - '0');
		}
		call->grpc_status = st;
	} else if (namelen == 12 && memcmp(name, "grpc-message", 12) == 0) {
		ds_grpc_percent_decode(call->grpc_message, sizeof(call->grpc_message),
		                       (const char *)value, valuelen);
	}
	return 0;
}

static int cb_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
	struct ds_grpcc_conn *c = ud;
	if (f->hd.type == NGHTTP2_GOAWAY) {
		c->goaway = true;
		return 0;
	}
	if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_RESPONSE)
		return 0;
	struct ds_grpcc_call *call = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
	if (call && !call->notified && call->cbs.on_headers &&
	    !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
		call->cbs.on_headers(call, call->ud);
	return 0;
}

static enum ds_status on_deframed(void *ud, const uint8_t *msg, size_t len, struct ds_err *err)
{
	struct ds_grpcc_call *call = ud;
	if (call->notified)
		return ds_errf(err, DS_ERR_CANCELLED, "grpc call: already closed");
	if (call->cbs.on_message && call->cbs.on_message(call, msg, len, call->ud) != 0) {
		ds_grpcc_call_cancel(call);
		return ds_errf(err, DS_ERR_CANCELLED, "grpc call: stopped by the receiver");
	}
	return DS_OK;
}

static int cb_data_chunk(nghttp2_session *s, uint8_t flags, int32_t stream_id, const uint8_t *data,
                         size_t len, void *ud)
{
	(void)flags;
	(void)ud;
	struct ds_grpcc_call *call = nghttp2_session_get_stream_user_data(s, stream_id);
	if (!call || call->notified)
		return 0;
	struct ds_err err;
	enum ds_status rv =
	    ds_grpc_deframer_feed(&call->deframer, data, len, on_deframed, call, &err);
	if (rv == DS_OK || rv == DS_ERR_CANCELLED)
		return 0;
	call_abort(call, rv == DS_ERR_TOO_LONG ? DS_GRPC_RESOURCE_EXHAUSTED : DS_GRPC_INTERNAL,
	           err.msg);
	return 0;
}

static int code_from_h2_error(uint32_t e)
{
	switch (e) {
	case NGHTTP2_REFUSED_STREAM:
		return DS_GRPC_UNAVAILABLE;
	case NGHTTP2_CANCEL:
		return DS_GRPC_CANCELLED;
	case NGHTTP2_ENHANCE_YOUR_CALM:
		return DS_GRPC_RESOURCE_EXHAUSTED;
	case NGHTTP2_INADEQUATE_SECURITY:
		return DS_GRPC_PERMISSION_DENIED;
	default:
		return DS_GRPC_INTERNAL;
	}
}

static int cb_stream_close(nghttp2_session *s, int32_t stream_id, uint32_t error_code, void *ud)
{
	(void)ud;
	struct ds_grpcc_call *call = nghttp2_session_get_stream_user_data(s, stream_id);
	if (!call)
		return 0;
	if (!call->notified) {
		char msg[600];
		int code;
		if (call->grpc_status >= 0) {
			code = call->grpc_status;
			snprintf(msg, sizeof(msg), "%s", call->grpc_message);
			if (code == DS_GRPC_OK && !ds_grpc_deframer_idle(&call->deframer)) {
				code = DS_GRPC_INTERNAL;
				snprintf(msg, sizeof(msg), "stream ended inside a message");
			}
		} else if (error_code != NGHTTP2_NO_ERROR) {
			code = code_from_h2_error(error_code);
			snprintf(msg, sizeof(msg), "stream reset by the server: %s",
			         nghttp2_http2_strerror(error_code));
		} else if (call->http_status != 0 && call->http_status != 200) {
			code = ds_grpc_code_from_http(call->http_status);
			snprintf(msg, sizeof(msg), "HTTP status %d without grpc-status",
			         call->http_status);
		} else {
			code = DS_GRPC_INTERNAL;
			snprintf(msg, sizeof(msg), "stream closed without grpc-status");
		}
		call_notify(call, code, msg);
	}
	call->stream_id = -1; /* the stream is gone: nothing to detach */
	call_unlink_free(call);
	return 0;
}

static ssize_t cb_read_req(nghttp2_session *s, int32_t stream_id, uint8_t *buf, size_t len,
                           uint32_t *flags, nghttp2_data_source *src, void *ud)
{
	(void)s;
	(void)stream_id;
	(void)ud;
	struct ds_grpcc_call *call = src->ptr;
	size_t n = DS_MIN(len, call->req_len - call->req_off);
	memcpy(buf, call->req + call->req_off, n);
	call->req_off += n;
	if (call->req_off == call->req_len)
		*flags |= NGHTTP2_DATA_FLAG_EOF;
	return (ssize_t)n;
}

/* ---- connection ---- */

static enum ds_status sock_connect(int *out, const char *host, int port, int timeout_ms,
                                   struct ds_err *err)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL,
	                *ai;
	char portstr[16];
	int fd = -1, rc;
	snprintf(portstr, sizeof(portstr), "%d", port);
	rc = getaddrinfo(host, portstr, &hints, &res);
	if (rc != 0)
		return ds_errf(err, DS_ERR_IO, "connect %s:%d: %s", host, port, gai_strerror(rc));
	int last_errno = 0;
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
		            ai->ai_protocol);
		if (fd < 0) {
			last_errno = errno;
			continue;
		}
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
			break;
		if (errno == EINPROGRESS) {
			struct pollfd p = {.fd = fd, .events = POLLOUT};
			int soerr = 0;
			socklen_t sl = sizeof(soerr);
			rc = poll(&p, 1, timeout_ms);
			if (rc == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 &&
			    soerr == 0)
				break;
			last_errno = rc == 0 ? ETIMEDOUT : (soerr ? soerr : errno);
		} else {
			last_errno = errno;
		}
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		return ds_errf(err, DS_ERR_IO, "connect %s:%d: %s", host, port,
		               strerror(last_errno));
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	*out = fd;
	return DS_OK;
}

enum ds_status ds_grpcc_conn_connect(struct ds_grpcc_conn **out, const char *host, int port,
                                     const struct ds_grpcc_conn_opts *opts, struct ds_err *err)
{
	nghttp2_session_callbacks *cbs = NULL;
	struct ds_grpcc_conn *c = calloc(1, sizeof(*c));
	enum ds_status rv;
	*out = NULL;
	if (!c)
		return ds_errf(err, DS_ERR_NOMEM, "grpc: no memory for a connection");
	c->fd = -1;
	if (opts)
		c->opts = *opts;
	else
		ds_grpcc_conn_opts_default(&c->opts);
	if (c->opts.max_recv_msg == 0)
		c->opts.max_recv_msg = DEFAULT_MAX_RECV;
	snprintf(c->authority, sizeof(c->authority), strchr(host, ':') ? "[%s]:%d" : "%s:%d", host,
	         port);
	rv = sock_connect(&c->fd, host, port,
	                  c->opts.connect_timeout_ms > 0 ? c->opts.connect_timeout_ms : 5000, err);
	if (rv != DS_OK)
		goto fail;
	if (nghttp2_session_callbacks_new(&cbs) != 0) {
		rv = ds_errf(err, DS_ERR_NOMEM, "grpc: no memory for nghttp2 callbacks");
		goto fail;
	}
	nghttp2_session_callbacks_set_send_callback(cbs, cb_send);
	nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, cb_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cbs, cb_header);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, cb_frame_recv);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, cb_data_chunk);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs, cb_stream_close);
	int ng = nghttp2_session_client_new(&c->session, cbs, c);
	nghttp2_session_callbacks_del(cbs);
	if (ng != 0) {
		rv = ds_errf(err, DS_ERR_NOMEM, "grpc: nghttp2 session: %s", nghttp2_strerror(ng));
		goto fail;
	}
	/* big windows: a benchmark client must never be the one that throttles the server */
	nghttp2_settings_entry iv[] = {
	    {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
	    {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 8u << 20},
	};
	nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, iv, DS_ARRAY_LEN(iv));
	nghttp2_session_set_local_window_size(c->session, NGHTTP2_FLAG_NONE, 0, 1 << 30);
	nghttp2_session_send(c->session);
	*out = c;
	return DS_OK;
fail:
	ds_grpcc_conn_free(c);
	return rv;
}

/* The connection is unusable: every open call ends with UNAVAILABLE, structs are freed. */
static void conn_kill(struct ds_grpcc_conn *c, const char *why)
{
	if (c->dead)
		return;
	c->dead = true;
	while (c->calls) {
		struct ds_grpcc_call *call = c->calls;
		/* on_close may not start calls here: dead connections refuse them */
		call_notify(call, DS_GRPC_UNAVAILABLE, why);
		call_unlink_free(call);
	}
}

void ds_grpcc_conn_free(struct ds_grpcc_conn *c)
{
	if (!c)
		return;
	conn_kill(c, "connection closed by the client");
	if (c->session)
		nghttp2_session_del(c->session);
	if (c->fd >= 0)
		close(c->fd);
	free(c);
}

int ds_grpcc_conn_active(const struct ds_grpcc_conn *c)
{
	return c->n_active;
}

int ds_grpcc_conn_capacity(const struct ds_grpcc_conn *c)
{
	if (c->dead || c->goaway)
		return 0;
	int64_t lim = nghttp2_session_get_remote_settings(c->session,
	                                                  NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
	if (c->opts.max_concurrent > 0 && c->opts.max_concurrent < lim)
		lim = c->opts.max_concurrent;
	int64_t cap = lim - c->n_active;
	return cap < 0 ? 0 : (cap > INT32_MAX ? INT32_MAX : (int)cap);
}

bool ds_grpcc_conn_usable(const struct ds_grpcc_conn *c)
{
	return !c->dead && !c->goaway;
}

#define MAKE_NV(n, v)                                                                              \
	{                                                                                          \
		(uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE         \
	}

enum ds_status ds_grpcc_call_start(struct ds_grpcc_conn *c, const char *path, const uint8_t *msg,
                                   size_t len, int64_t timeout_ms, const struct ds_grpcc_md *md,
                                   int n_md, const struct ds_grpcc_call_cbs *cbs, void *ud,
                                   struct ds_grpcc_call **out, struct ds_err *err)
{
	if (out)
		*out = NULL;
	if (!c || !path || path[0] != '/' || (len > 0 && !msg) || !cbs || n_md < 0 || n_md > 16 ||
	    len > UINT32_MAX)
		return ds_errf(err, DS_ERR_INVALID, "grpc call: bad arguments");
	if (c->dead || c->goaway)
		return ds_errf(err, DS_ERR_IO, "grpc call %s: the connection is %s", path,
		               c->dead ? "closed" : "going away");
	if (c->opts.max_concurrent > 0 && c->n_active >= c->opts.max_concurrent)
		return ds_errf(err, DS_ERR_FULL, "grpc call %s: %d calls already open", path,
		               c->n_active);
	struct ds_grpcc_call *call = calloc(1, sizeof(*call));
	if (!call)
		return ds_errf(err, DS_ERR_NOMEM, "grpc call: no memory");
	call->req = malloc(len + 5);
	if (!call->req) {
		free(call);
		return ds_errf(err, DS_ERR_NOMEM, "grpc call: no memory for a %zu-byte request",
		               len);
	}
	ds_grpc_frame_prefix(call->req, (uint32_t)len);
	if (len)
		memcpy(call->req + 5, msg, len);
	call->req_len = len + 5;
	call->conn = c;
	call->cbs = *cbs;
	call->ud = ud;
	call->grpc_status = -1;
	ds_grpc_deframer_init(&call->deframer, c->opts.max_recv_msg);

	char tbuf[10];
	nghttp2_nv nva[8 + 16] = {
	    MAKE_NV(":method", "POST"),
	    MAKE_NV(":scheme", "http"),
	    MAKE_NV(":path", path),
	    MAKE_NV(":authority", c->authority),
	    MAKE_NV("content-type", "application/grpc"),
	    MAKE_NV("te", "trailers"),
	    MAKE_NV("user-agent", "detserve-client/" DS_VERSION),
	};
	size_t nv = 7;
	if (timeout_ms > 0) {
		ds_grpc_timeout_format(tbuf, (uint64_t)timeout_ms * 1000000ull);
		nghttp2_nv t = MAKE_NV("grpc-timeout", tbuf);
		nva[nv++] = t;
		call->deadline_ns = ds_grpcc_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	}
	for (int i = 0; i < n_md; i++) {
		nghttp2_nv m = MAKE_NV(md[i].name, md[i].value);
		nva[nv++] = m;
	}
	nghttp2_data_provider prd = {.source.ptr = call, .read_callback = cb_read_req};
	int32_t sid = nghttp2_submit_request(c->session, NULL, nva, nv, &prd, call);
	if (sid < 0) {
		ds_grpc_deframer_free(&call->deframer);
		free(call->req);
		free(call);
		return ds_errf(err, sid == NGHTTP2_ERR_NOMEM ? DS_ERR_NOMEM : DS_ERR_IO,
		               "grpc call %s: %s", path, nghttp2_strerror(sid));
	}
	call->stream_id = sid;
	call->next = c->calls;
	if (c->calls)
		c->calls->prev = call;
	c->calls = call;
	c->n_active++;
	if (out)
		*out = call;
	return DS_OK;
}

/* ---- I/O ---- */

void ds_grpcc_conn_pollfd(struct ds_grpcc_conn *c, struct pollfd *pfd)
{
	pfd->fd = c->dead ? -1 : c->fd;
	pfd->events = 0;
	pfd->revents = 0;
	if (c->dead)
		return;
	if (nghttp2_session_want_read(c->session))
		pfd->events |= POLLIN;
	if (nghttp2_session_want_write(c->session))
		pfd->events |= POLLOUT;
}

int ds_grpcc_conn_next_timeout_ms(const struct ds_grpcc_conn *c)
{
	uint64_t now = ds_grpcc_now_ns(), best = UINT64_MAX;
	for (const struct ds_grpcc_call *k = c->calls; k; k = k->next)
		if (!k->notified && k->deadline_ns && k->deadline_ns < best)
			best = k->deadline_ns;
	if (best == UINT64_MAX)
		return -1;
	if (best <= now)
		return 0;
	uint64_t ms = (best - now + 999999) / 1000000;
	return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

static void conn_expire(struct ds_grpcc_conn *c)
{
	uint64_t now = ds_grpcc_now_ns();
	struct ds_grpcc_call *k = c->calls;
	while (k) {
		struct ds_grpcc_call *next = k->next; /* call_abort may not free k, but be safe */
		if (!k->notified && k->deadline_ns && k->deadline_ns <= now)
			call_abort(k, DS_GRPC_DEADLINE_EXCEEDED, "deadline exceeded (client side)");
		k = next;
	}
}

enum ds_status ds_grpcc_conn_io(struct ds_grpcc_conn *c, short revents, struct ds_err *err)
{
	uint8_t buf[16384];
	int rc;
	if (c->dead)
		return ds_errf(err, DS_ERR_IO, "grpc: connection %s is closed", c->authority);
	if (revents & (POLLIN | POLLERR | POLLHUP)) {
		for (;;) {
			ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
				break;
			if (n <= 0) {
				ds_errf(err, DS_ERR_IO, "grpc: connection %s %s", c->authority,
				        n == 0 ? "closed by the server" : strerror(errno));
				conn_kill(c, err ? err->msg : "connection lost");
				return DS_ERR_IO;
			}
			ssize_t m = nghttp2_session_mem_recv(c->session, buf, (size_t)n);
			if (m < 0) {
				ds_errf(err, DS_ERR_IO, "grpc: HTTP/2 protocol error from %s: %s",
				        c->authority, nghttp2_strerror((int)m));
				conn_kill(c, err ? err->msg : "protocol error");
				return DS_ERR_IO;
			}
			if ((size_t)n < sizeof(buf))
				break;
		}
	}
	conn_expire(c);
	rc = nghttp2_session_send(c->session);
	if (rc != 0) {
		ds_errf(err, DS_ERR_IO, "grpc: send to %s: %s", c->authority, nghttp2_strerror(rc));
		conn_kill(c, err ? err->msg : "send failed");
		return DS_ERR_IO;
	}
	if (!nghttp2_session_want_read(c->session) && !nghttp2_session_want_write(c->session)) {
		ds_errf(err, DS_ERR_IO, "grpc: connection %s finished (GOAWAY)", c->authority);
		conn_kill(c, "connection closed (GOAWAY)");
		return DS_ERR_IO;
	}
	return DS_OK;
}

enum ds_status ds_grpcc_conn_run(struct ds_grpcc_conn *c, int timeout_ms, struct ds_err *err)
{
	struct pollfd p;
	if (c->dead)
		return ds_errf(err, DS_ERR_IO, "grpc: connection %s is closed", c->authority);
	ds_grpcc_conn_pollfd(c, &p);
	int dl = ds_grpcc_conn_next_timeout_ms(c);
	if (dl >= 0 && (timeout_ms < 0 || dl < timeout_ms))
		timeout_ms = dl;
	int rc = poll(&p, 1, timeout_ms);
	if (rc < 0 && errno != EINTR)
		return ds_errf(err, DS_ERR_IO, "grpc: poll: %s", strerror(errno));
	return ds_grpcc_conn_io(c, rc > 0 ? p.revents : 0, err);
}
