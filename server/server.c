/* server.c - the listener, the engine's event feed, request dispatch and graceful shutdown.
 *
 * Key decision: the engine is reached only through submit/cancel/pause (thread-safe enqueues)
 * and its event fd; a request's user_tag is its struct srv_req, which stays allocated until
 * the engine's one final event for it, so an event can never point at freed memory even when
 * the stream is long gone. */
#include "server_internal.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <event2/util.h>
#include <arpa/inet.h>
#include <netinet/in.h>

uint64_t srv_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void ds_log(enum ds_log_level max, enum ds_log_level lvl, const char *fmt, ...)
{
	static const char *const names[] = {"error", "warn", "info", "debug"};
	if (lvl > max)
		return;
	char line[1024];
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	int n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s ",
	                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
	                 tm.tm_sec, ts.tv_nsec / 1000000, names[lvl]);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	/* one write per line so lines from threads never interleave */
	for (char *p = line + n; *p; p++)
		if (*p == '\n')
			*p = ' ';
	size_t len = strlen(line);
	line[len] = '\n';
	fwrite(line, 1, len + 1, stderr);
}

/* ---- requests ---- */

static void req_unlink_free(struct ds_server *srv, struct srv_req *r)
{
	if (r->prev)
		r->prev->next = r->next;
	else
		srv->reqs = r->next;
	if (r->next)
		r->next->prev = r->prev;
	srv->n_reqs--;
	free(r);
}

void srv_stream_cancel_req(struct srv_stream *s)
{
	struct srv_req *r = s->req;
	if (!r)
		return;
	r->stream = NULL;
	s->req = NULL;
	ds_engine_cancel(s->conn->srv->engine, r->engine_id);
	SRV_LOG(s->conn->srv, DS_LOG_DEBUG, "req=%llu cancelled", (unsigned long long)r->engine_id);
}

void srv_stream_drained(struct srv_stream *s)
{
	struct srv_req *r = s->req;
	if (!r || !r->paused)
		return;
	r->paused = false;
	ds_engine_pause(s->conn->srv->engine, r->engine_id, false);
}

static void stream_submit(struct srv_stream *s)
{
	struct ds_server *srv = s->conn->srv;
	struct ds_rpc_gen g;
	char err[512] = "";
	enum ds_grpc_code c =
	    ds_rpc_gen_decode(&srv->env, s->msg, s->msg_len, &g, err, sizeof(err));
	if (c != DS_GRPC_OK) {
		srv_stream_finish(s, c, err);
		return;
	}
	if (srv->draining) {
		ds_rpc_gen_free(&g);
		srv_stream_finish(s, DS_GRPC_UNAVAILABLE, "server is shutting down");
		return;
	}
	struct srv_req *r = calloc(1, sizeof(*r));
	if (!r) {
		ds_rpc_gen_free(&g);
		srv_stream_finish(s, DS_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	g.params.user_tag = (uint64_t)(uintptr_t)r;
	struct ds_err e = {{0}};
	enum ds_status st = ds_engine_submit(srv->engine, &g.params, &r->engine_id, &e);
	bool det = g.params.deterministic;
	int n_prompt = g.params.n_prompt, max_tokens = g.params.max_tokens;
	r->return_logprobs = g.params.return_logprobs;
	snprintf(s->request_id, sizeof(s->request_id), "%s", g.request_id);
	ds_rpc_gen_free(&g);
	if (st != DS_OK) {
		free(r);
		srv_stream_finish(s, ds_rpc_code_from_status(st), e.msg);
		return;
	}
	r->unary = s->method == DS_RPC_GENERATE_UNARY;
	r->stream = s;
	s->req = r;
	r->next = srv->reqs;
	if (srv->reqs)
		srv->reqs->prev = r;
	srv->reqs = r;
	srv->n_reqs++;
	SRV_LOG(srv, DS_LOG_INFO,
	        "conn=%llu stream=%d req=%llu submitted: %s prompt=%d max_tokens=%d det=%d%s%s",
	        (unsigned long long)s->conn->id, s->id, (unsigned long long)r->engine_id,
	        ds_rpc_method_name(s->method), n_prompt, max_tokens, det,
	        s->request_id[0] ? " id=" : "", s->request_id);
}

void srv_stream_dispatch(struct srv_stream *s)
{
	struct ds_server *srv = s->conn->srv;
	char err[512] = "";
	struct ds_rpc_buf buf = {0};
	enum ds_grpc_code c;
	if (s->n_msgs != 1) {
		srv_stream_finish(s, DS_GRPC_INVALID_ARGUMENT,
		                  "expected exactly one request message");
		return;
	}
	switch (s->method) {
	case DS_RPC_SERVER_INFO:
		c = ds_rpc_info_reply(&srv->info, s->msg, s->msg_len, &buf, err, sizeof(err));
		break;
	case DS_RPC_HEALTH_CHECK:
		c = ds_rpc_health_reply(!srv->draining, s->msg, s->msg_len, &buf, err, sizeof(err));
		break;
	case DS_RPC_GENERATE:
	case DS_RPC_GENERATE_UNARY:
		stream_submit(s);
		return;
	default:
		c = DS_GRPC_UNIMPLEMENTED;
		snprintf(err, sizeof(err), "unknown method");
		break;
	}
	if (c == DS_GRPC_OK)
		srv_stream_send(s, &buf);
	srv_stream_finish(s, c, err);
}

/* ---- engine events ---- */

static enum ds_status unary_append(struct srv_stream *s, const struct ds_event *ev, bool lp)
{
	if (ev->n_tokens <= 0)
		return DS_OK;
	if (s->acc_n + ev->n_tokens > s->acc_cap) {
		int cap = DS_MAX(s->acc_cap * 2, s->acc_n + ev->n_tokens);
		int32_t *t = realloc(s->acc, (size_t)cap * sizeof(*t));
		if (!t)
			return DS_ERR_NOMEM;
		s->acc = t;
		if (lp) {
			float *f = realloc(s->acc_lp, (size_t)cap * sizeof(*f));
			if (!f)
				return DS_ERR_NOMEM;
			s->acc_lp = f;
		}
		s->acc_cap = cap;
	}
	memcpy(s->acc + s->acc_n, ev->tokens, (size_t)ev->n_tokens * sizeof(int32_t));
	if (lp)
		memcpy(s->acc_lp + s->acc_n, ev->logprobs, (size_t)ev->n_tokens * sizeof(float));
	s->acc_n += ev->n_tokens;
	return DS_OK;
}

/* The text of a streamed chunk (NULL without a tokenizer). The stream decoder holds bytes of
 * a UTF-8 character split across tokens until it completes; the final chunk flushes it. */
static enum ds_status chunk_text(struct srv_stream *s, const int32_t *t, int n, bool final,
                                 char **out)
{
	const struct ds_tokenizer *tok = s->conn->srv->env.tok;
	char *buf = NULL;
	size_t len = 0, cap = 0;
	*out = NULL;
	if (!tok)
		return DS_OK;
	if (!s->ts_on) {
		ds_tokenizer_stream_init(&s->ts, tok, true);
		s->ts_on = true;
	}
	for (int i = 0; i < n || (i == n && final); i++) {
		const char *piece = NULL;
		size_t plen = 0;
		struct ds_err e;
		enum ds_status rv = i < n
		                        ? ds_tokenizer_stream_push(&s->ts, t[i], &piece, &plen, &e)
		                        : ds_tokenizer_stream_flush(&s->ts, &piece, &plen, &e);
		if (rv == DS_ERR_NOMEM)
			goto nomem;
		if (rv != DS_OK || plen == 0)
			continue; /* an id without a token has no text */
		if (len + plen + 1 > cap) {
			size_t ncap = DS_MAX(cap * 2, len + plen + 64);
			char *nb = realloc(buf, ncap);
			if (!nb)
				goto nomem;
			buf = nb;
			cap = ncap;
		}
		memcpy(buf + len, piece, plen);
		len += plen;
		buf[len] = '\0';
	}
	*out = buf;
	return DS_OK;
nomem:
	free(buf);
	return DS_ERR_NOMEM;
}

static void event_to_stream(struct ds_server *srv, struct srv_stream *s, struct srv_req *r,
                            const struct ds_event *ev)
{
	bool lp = r->return_logprobs && ev->logprobs;
	bool err = ev->final && ev->finish == DS_FINISH_ERROR;
	struct ds_rpc_buf buf = {0};
	char *text = NULL;
	if (r->unary) {
		if (unary_append(s, ev, lp) != DS_OK) {
			srv_stream_cancel_req(s);
			srv_stream_finish(s, DS_GRPC_RESOURCE_EXHAUSTED, "out of memory");
			return;
		}
		if (!ev->final || err)
			goto finish;
		if (srv->env.tok && s->acc_n > 0) {
			size_t tlen;
			struct ds_err e;
			if (ds_tokenizer_decode(srv->env.tok, s->acc, (size_t)s->acc_n, true, &text,
			                        &tlen, &e) == DS_ERR_NOMEM)
				goto oom;
		}
		enum ds_status rv = ds_rpc_gen_encode(s->acc, r->return_logprobs ? s->acc_lp : NULL,
		                                      s->acc_n, text, ev, s->request_id, &buf);
		free(text);
		if (rv != DS_OK)
			goto oom;
		srv_stream_send(s, &buf);
	} else if (!err && (ev->n_tokens > 0 || ev->final)) {
		if (chunk_text(s, ev->tokens, ev->n_tokens, ev->final, &text) != DS_OK)
			goto oom;
		enum ds_status rv = ds_rpc_gen_encode(ev->tokens, lp ? ev->logprobs : NULL,
		                                      ev->n_tokens, text, ev->final ? ev : NULL,
		                                      ev->final ? s->request_id : NULL, &buf);
		free(text);
		if (rv != DS_OK)
			goto oom;
		srv_stream_send(s, &buf);
	}
finish:
	if (!ev->final)
		return;
	if (err)
		srv_stream_finish(s, ds_rpc_code_from_status(ev->status), ev->error);
	else if (ev->finish == DS_FINISH_CANCELLED)
		srv_stream_finish(s, DS_GRPC_CANCELLED, "request cancelled by the server");
	else
		srv_stream_finish(s, DS_GRPC_OK, NULL);
	return;
oom:
	srv_stream_cancel_req(s);
	srv_stream_finish(s, DS_GRPC_RESOURCE_EXHAUSTED, "out of memory encoding a response");
}

static void on_final(struct ds_server *srv, const struct ds_event *ev)
{
	ds_metrics_final(srv->metrics, ev);
	double ttft =
	    ev->t_first_ns > ev->t_submit_ns ? (ev->t_first_ns - ev->t_submit_ns) / 1e6 : 0;
	double e2e =
	    ev->t_final_ns > ev->t_submit_ns ? (ev->t_final_ns - ev->t_submit_ns) / 1e6 : 0;
	static const char *const fin[] = {"none",     "length",    "eos",
	                                  "stop_seq", "cancelled", "error"};
	SRV_LOG(srv, DS_LOG_INFO,
	        "req=%llu finished: %s det=%d prompt=%d completion=%d ttft_ms=%.1f e2e_ms=%.1f "
	        "seed=%llu%s%s%s%s",
	        (unsigned long long)ev->req_id, fin[ev->finish <= DS_FINISH_ERROR ? ev->finish : 0],
	        ev->deterministic, ev->prompt_tokens, ev->completion_tokens, ttft, e2e,
	        (unsigned long long)ev->seed, ev->fingerprint[0] ? " fp=" : "", ev->fingerprint,
	        ev->finish == DS_FINISH_ERROR ? " error=" : "",
	        ev->finish == DS_FINISH_ERROR ? ev->error : "");
}

static void srv_on_engine(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct ds_server *srv = arg;
	struct ds_event *ev;
	while ((ev = ds_engine_poll(srv->engine))) {
		struct srv_req *r = (struct srv_req *)(uintptr_t)ev->user_tag;
		if (r) {
			if (r->stream)
				event_to_stream(srv, r->stream, r, ev);
			if (ev->final) {
				on_final(srv, ev);
				if (r->stream)
					r->stream->req = NULL;
				req_unlink_free(srv, r);
			}
		}
		ds_event_free(ev);
	}
	srv_flush_all(srv);
}

/* ---- connections, shutdown ---- */

void srv_flush_all(struct ds_server *srv)
{
	struct srv_conn *c = srv->conns, *next;
	for (; c; c = next) {
		next = c->next;
		if (c->dirty && !srv_conn_flush(c))
			continue;
		if (srv->draining && c->n_streams == 0 && !nghttp2_session_want_write(c->h2) &&
		    evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
			srv_conn_free(c);
	}
	if (srv->draining && srv->n_conns == 0 && srv->n_reqs == 0) {
		SRV_LOG(srv, DS_LOG_INFO, "drained: all streams finished");
		event_base_loopbreak(srv->base);
	}
}

static void srv_on_accept(struct evconnlistener *lis, evutil_socket_t fd, struct sockaddr *sa,
                          int salen, void *arg)
{
	(void)lis;
	(void)salen;
	struct ds_server *srv = arg;
	if (srv->draining || srv->n_conns >= srv->cfg.max_connections) {
		SRV_LOG(srv, DS_LOG_WARN, "refusing a connection: %s",
		        srv->draining ? "shutting down" : "connection limit reached");
		ds_metrics_conn_refused(srv->metrics);
		evutil_closesocket(fd);
		return;
	}
	srv_conn_accept(srv, fd, sa);
}

static void srv_on_drain_timeout(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct ds_server *srv = arg;
	SRV_LOG(srv, DS_LOG_WARN, "drain timeout: failing %d in-flight requests", srv->n_reqs);
	for (struct srv_conn *c = srv->conns; c; c = c->next)
		for (struct srv_stream *s = c->streams; s; s = s->next) {
			srv_stream_cancel_req(s);
			srv_stream_finish(s, DS_GRPC_UNAVAILABLE,
			                  "server shut down before the request finished");
		}
	for (struct srv_conn *c = srv->conns, *next; c; c = next) {
		next = c->next;
		srv_conn_flush(c);
	}
	event_base_loopbreak(srv->base);
}

static void srv_on_signal(evutil_socket_t sig, short what, void *arg)
{
	(void)what;
	struct ds_server *srv = arg;
	if (srv->draining) {
		SRV_LOG(srv, DS_LOG_WARN, "second signal: stopping now");
		event_base_loopbreak(srv->base);
		return;
	}
	srv->draining = true;
	SRV_LOG(srv, DS_LOG_INFO, "%s: draining %d requests on %d connections (timeout %d s)",
	        sig == SIGTERM ? "SIGTERM" : "SIGINT", srv->n_reqs, srv->n_conns,
	        srv->cfg.drain_timeout_s);
	evconnlistener_disable(srv->lis);
	for (struct srv_conn *c = srv->conns; c; c = c->next)
		srv_conn_goaway(c);
	struct timeval tv = {.tv_sec = srv->cfg.drain_timeout_s, .tv_usec = 0};
	evtimer_add(srv->drain_timer, &tv);
	srv_flush_all(srv);
}

enum ds_status ds_server_init(struct ds_server **out, struct event_base *base,
                              const struct ds_server_config *cfg, struct ds_engine *engine,
                              const struct ds_rpc_info *info, const struct ds_tokenizer *tok,
                              const struct ds_chat_template *chat, struct ds_err *err)
{
	enum ds_status rv = DS_ERR_NOMEM;
	struct ds_server *srv = calloc(1, sizeof(*srv));
	*out = NULL;
	if (!srv)
		return ds_errf(err, DS_ERR_NOMEM, "server: out of memory");
	srv->cfg = *cfg;
	srv->base = base;
	srv->engine = engine;
	srv->info = *info;
	srv->model_cfg = *info->cfg;
	srv->info.cfg = &srv->model_cfg;
	srv->env.cfg = &srv->model_cfg;
	srv->env.mode = info->mode;
	srv->env.tok = tok;
	srv->env.chat = tok ? chat : NULL;
	srv->info.has_tokenizer = tok != NULL;

	struct sockaddr_storage ss;
	int sslen;
	char hostport[192];
	bool v6 = strchr(cfg->addr, ':') != NULL;
	snprintf(hostport, sizeof(hostport), v6 ? "[%s]:%d" : "%s:%d", cfg->addr, cfg->port);
	memset(&ss, 0, sizeof(ss));
	if (v6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)cfg->port);
		sslen = sizeof(*a);
		if (inet_pton(AF_INET6, cfg->addr, &a->sin6_addr) != 1)
			sslen = 0;
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)&ss;
		a->sin_family = AF_INET;
		a->sin_port = htons((uint16_t)cfg->port);
		sslen = sizeof(*a);
		if (inet_pton(AF_INET, cfg->addr, &a->sin_addr) != 1)
			sslen = 0;
	}
	if (sslen == 0) {
		rv = ds_errf(err, DS_ERR_INVALID, "--addr '%s' is not an IP address", cfg->addr);
		goto fail;
	}
	srv->lis = evconnlistener_new_bind(base, srv_on_accept, srv,
	                                   LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_FREE, 128,
	                                   (struct sockaddr *)&ss, sslen);
	if (!srv->lis) {
		rv = ds_errf(err, DS_ERR_IO, "cannot listen on %s: %s", hostport,
		             evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
		goto fail;
	}
	struct sockaddr_storage bound;
	socklen_t blen = sizeof(bound);
	getsockname(evconnlistener_get_fd(srv->lis), (struct sockaddr *)&bound, &blen);
	srv->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
	                                              : ((struct sockaddr_in *)&bound)->sin_port);

	if ((rv = ds_metrics_init(&srv->metrics, base, cfg->addr, cfg->metrics_port, engine,
	                          err)) != DS_OK)
		goto fail;
	rv = DS_ERR_NOMEM;
	srv->engine_ev =
	    event_new(base, ds_engine_event_fd(engine), EV_READ | EV_PERSIST, srv_on_engine, srv);
	srv->sig_term = evsignal_new(base, SIGTERM, srv_on_signal, srv);
	srv->sig_int = evsignal_new(base, SIGINT, srv_on_signal, srv);
	srv->drain_timer = evtimer_new(base, srv_on_drain_timeout, srv);
	if (!srv->engine_ev || !srv->sig_term || !srv->sig_int || !srv->drain_timer ||
	    event_add(srv->engine_ev, NULL) || event_add(srv->sig_term, NULL) ||
	    event_add(srv->sig_int, NULL)) {
		ds_errf(err, DS_ERR_NOMEM, "server: cannot register events");
		goto fail;
	}
	SRV_LOG(srv, DS_LOG_INFO, "listening on %s:%d (h2c gRPC)%s", cfg->addr, srv->port,
	        cfg->api_key[0] ? ", API key required" : "");
	if (ds_metrics_port(srv->metrics) >= 0)
		SRV_LOG(srv, DS_LOG_INFO, "metrics on http://%s:%d/metrics",
		        v6 ? "[::1]" : cfg->addr, ds_metrics_port(srv->metrics));
	*out = srv;
	return DS_OK;
fail:
	ds_server_free(srv);
	return rv;
}

int ds_server_port(const struct ds_server *s)
{
	return s->port;
}

int ds_server_metrics_port(const struct ds_server *s)
{
	return ds_metrics_port(s->metrics);
}

enum ds_status ds_server_run(struct ds_server *s, struct ds_err *err)
{
	if (event_base_dispatch(s->base) < 0)
		return ds_errf(err, DS_ERR_INTERNAL, "event loop failed");
	return DS_OK;
}

void ds_server_free(struct ds_server *srv)
{
	if (!srv)
		return;
	while (srv->conns)
		srv_conn_free(srv->conns);
	while (srv->reqs)
		req_unlink_free(srv, srv->reqs);
	if (srv->lis)
		evconnlistener_free(srv->lis);
	if (srv->engine_ev)
		event_free(srv->engine_ev);
	if (srv->sig_term)
		event_free(srv->sig_term);
	if (srv->sig_int)
		event_free(srv->sig_int);
	if (srv->drain_timer)
		event_free(srv->drain_timer);
	ds_metrics_free(srv->metrics);
	free(srv);
}
