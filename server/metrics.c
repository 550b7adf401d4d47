/* metrics.c - counters, fixed-bucket histograms and the /metrics handler (see metrics.h).
 * Names follow Prometheus conventions: *_total counters, *_seconds histograms, and a
 * deterministic="true|false" label on everything that splits by request kind. */
#include "metrics.h"

#include <stdio.h>
#include <stdlib.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <netinet/in.h>

#define N_BUCKETS 14
static const double buckets[N_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                          0.25,  0.5,    1,     2.5,  5,     10,   30};

struct hist {
	uint64_t counts[N_BUCKETS + 1]; /* last = +Inf */
	double sum;
	uint64_t n;
};

struct ds_metrics {
	struct evhttp *http;
	struct ds_engine *engine;
	int port;
	/* [deterministic] */
	uint64_t requests[2], tokens[2], prompt_tokens[2], verify_passes[2], windows[2];
	uint64_t rollbacks[2], rolled_back[2], recomputed[2];
	uint64_t finish[2][6];
	struct hist ttft[2], tpot[2], e2e[2];
	uint64_t rpc[DS_RPC_N_METHODS][DS_GRPC_N_CODES];
	int64_t conns;
	uint64_t conns_total, conns_refused, paused;
};

static void hist_observe(struct hist *h, double v)
{
	int i = 0;
	while (i < N_BUCKETS && v > buckets[i])
		i++;
	h->counts[i]++;
	h->sum += v;
	h->n++;
}

void ds_metrics_rpc_done(struct ds_metrics *m, enum ds_rpc_method method, int code)
{
	if (m && method < DS_RPC_N_METHODS && code >= 0 && code < DS_GRPC_N_CODES)
		m->rpc[method][code]++;
}

void ds_metrics_final(struct ds_metrics *m, const struct ds_event *ev)
{
	if (!m)
		return;
	int d = ev->deterministic ? 1 : 0;
	m->requests[d]++;
	m->tokens[d] += (uint64_t)DS_MAX(ev->completion_tokens, 0);
	m->prompt_tokens[d] += (uint64_t)DS_MAX(ev->prompt_tokens, 0);
	m->verify_passes[d] += ev->dvr.verify_passes;
	m->windows[d] += ev->dvr.windows;
	m->rollbacks[d] += ev->dvr.rollbacks;
	m->rolled_back[d] += ev->dvr.rolled_back;
	m->recomputed[d] += ev->dvr.recomputed;
	if ((unsigned)ev->finish < 6)
		m->finish[d][ev->finish]++;
	if (ev->finish == DS_FINISH_ERROR || ev->finish == DS_FINISH_CANCELLED)
		return;
	if (ev->t_first_ns > ev->t_submit_ns)
		hist_observe(&m->ttft[d], (double)(ev->t_first_ns - ev->t_submit_ns) / 1e9);
	if (ev->t_final_ns > ev->t_submit_ns)
		hist_observe(&m->e2e[d], (double)(ev->t_final_ns - ev->t_submit_ns) / 1e9);
	if (ev->completion_tokens > 1 && ev->t_final_ns > ev->t_first_ns)
		hist_observe(&m->tpot[d], (double)(ev->t_final_ns - ev->t_first_ns) / 1e9 /
		                              (ev->completion_tokens - 1));
}

void ds_metrics_conn(struct ds_metrics *m, int delta)
{
	if (!m)
		return;
	m->conns += delta;
	if (delta > 0)
		m->conns_total++;
}

void ds_metrics_conn_refused(struct ds_metrics *m)
{
	if (m)
		m->conns_refused++;
}

void ds_metrics_paused(struct ds_metrics *m)
{
	if (m)
		m->paused++;
}

/* ---- rendering ---- */

static const char *const det_label[2] = {"false", "true"};

static void put_counter2(struct evbuffer *b, const char *name, const char *help,
                         const uint64_t v[2])
{
	evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
	for (int d = 0; d < 2; d++)
		evbuffer_add_printf(b, "%s{deterministic=\"%s\"} %llu\n", name, det_label[d],
		                    (unsigned long long)v[d]);
}

static void put_hist(struct evbuffer *b, const char *name, const char *help, const struct hist h[2])
{
	evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	for (int d = 0; d < 2; d++) {
		uint64_t cum = 0;
		for (int i = 0; i <= N_BUCKETS; i++) {
			cum += h[d].counts[i];
			if (i < N_BUCKETS)
				evbuffer_add_printf(
				    b, "%s_bucket{deterministic=\"%s\",le=\"%g\"} %llu\n", name,
				    det_label[d], buckets[i], (unsigned long long)cum);
			else
				evbuffer_add_printf(
				    b, "%s_bucket{deterministic=\"%s\",le=\"+Inf\"} %llu\n", name,
				    det_label[d], (unsigned long long)cum);
		}
		evbuffer_add_printf(b, "%s_sum{deterministic=\"%s\"} %.9g\n", name, det_label[d],
		                    h[d].sum);
		evbuffer_add_printf(b, "%s_count{deterministic=\"%s\"} %llu\n", name, det_label[d],
		                    (unsigned long long)h[d].n);
	}
}

static void render(struct ds_metrics *m, struct evbuffer *b)
{
	static const char *const fin[6] = {"none",          "length",    "stop",
	                                   "stop_sequence", "cancelled", "error"};
	put_counter2(b, "detserve_requests_total", "Finished generation requests.", m->requests);
	evbuffer_add_printf(b, "# HELP detserve_request_finish_total Finished requests by reason.\n"
	                       "# TYPE detserve_request_finish_total counter\n");
	for (int d = 0; d < 2; d++)
		for (int f = 1; f < 6; f++)
			evbuffer_add_printf(b,
			                    "detserve_request_finish_total{deterministic=\"%s\","
			                    "reason=\"%s\"} %llu\n",
			                    det_label[d], fin[f],
			                    (unsigned long long)m->finish[d][f]);
	put_counter2(b, "detserve_generated_tokens_total", "Completion tokens returned.",
	             m->tokens);
	put_counter2(b, "detserve_prompt_tokens_total", "Prompt tokens of finished requests.",
	             m->prompt_tokens);
	put_counter2(b, "detserve_verify_passes_total", "Reference verify passes per request.",
	             m->verify_passes);
	put_counter2(b, "detserve_verify_windows_total", "Windows verified.", m->windows);
	put_counter2(b, "detserve_rollbacks_total", "Verified windows with a mismatch.",
	             m->rollbacks);
	put_counter2(b, "detserve_rolled_back_tokens_total", "Candidate tokens discarded.",
	             m->rolled_back);
	put_counter2(b, "detserve_recomputed_tokens_total",
	             "Tokens recomputed on the reference path.", m->recomputed);
	put_hist(b, "detserve_ttft_seconds", "Time to first token.", m->ttft);
	put_hist(b, "detserve_tpot_seconds", "Time per output token after the first.", m->tpot);
	put_hist(b, "detserve_e2e_seconds", "Submit to final token.", m->e2e);

	evbuffer_add_printf(b, "# HELP detserve_grpc_requests_total RPCs by method and status.\n"
	                       "# TYPE detserve_grpc_requests_total counter\n");
	for (int me = 1; me < DS_RPC_N_METHODS; me++)
		for (int c = 0; c < DS_GRPC_N_CODES; c++)
			if (m->rpc[me][c])
				evbuffer_add_printf(b,
				                    "detserve_grpc_requests_total{method=\"%s\","
				                    "code=\"%s\"} %llu\n",
				                    ds_rpc_method_name((enum ds_rpc_method)me),
				                    ds_grpc_code_name(c),
				                    (unsigned long long)m->rpc[me][c]);
	evbuffer_add_printf(
	    b,
	    "# TYPE detserve_connections gauge\ndetserve_connections %lld\n"
	    "# TYPE detserve_connections_total counter\ndetserve_connections_total %llu\n"
	    "# TYPE detserve_connections_refused_total counter\n"
	    "detserve_connections_refused_total %llu\n"
	    "# HELP detserve_backpressure_pauses_total Streams paused at the output high-water "
	    "mark.\n"
	    "# TYPE detserve_backpressure_pauses_total counter\n"
	    "detserve_backpressure_pauses_total %llu\n",
	    (long long)m->conns, (unsigned long long)m->conns_total,
	    (unsigned long long)m->conns_refused, (unsigned long long)m->paused);
	if (m->engine) {
		struct ds_engine_stats st;
		memset(&st, 0, sizeof(st));
		ds_engine_get_stats(m->engine, &st);
		evbuffer_add_printf(
		    b,
		    "# HELP detserve_queue_depth Requests waiting for admission.\n"
		    "# TYPE detserve_queue_depth gauge\ndetserve_queue_depth %d\n"
		    "# TYPE detserve_running_requests gauge\ndetserve_running_requests %d\n"
		    "# HELP detserve_kv_blocks_used KV cache blocks in use.\n"
		    "# TYPE detserve_kv_blocks_used gauge\ndetserve_kv_blocks_used %d\n"
		    "# TYPE detserve_kv_blocks_total gauge\ndetserve_kv_blocks_total %d\n"
		    "# TYPE detserve_kv_usage_ratio gauge\ndetserve_kv_usage_ratio %.6f\n"
		    "# TYPE detserve_engine_steps_total counter\ndetserve_engine_steps_total %llu\n"
		    "# TYPE detserve_preemptions_total counter\ndetserve_preemptions_total %llu\n"
		    "# TYPE detserve_prefix_hit_tokens_total counter\n"
		    "detserve_prefix_hit_tokens_total %llu\n"
		    "# HELP detserve_ref_steps_total Engine steps run entirely on the reference path.\n"
		    "# TYPE detserve_ref_steps_total counter\ndetserve_ref_steps_total %llu\n"
		    "# HELP detserve_ref_decoded_tokens_total Deterministic tokens decoded directly on "
		    "the reference path.\n"
		    "# TYPE detserve_ref_decoded_tokens_total counter\n"
		    "detserve_ref_decoded_tokens_total %llu\n"
		    "# HELP detserve_verify_window Verify window in use (adaptive up to --window).\n"
		    "# TYPE detserve_verify_window gauge\ndetserve_verify_window %d\n"
		    "# HELP detserve_ref_steps_by_reason_total Reference-path steps by the first "
		    "reason that held: a full window, early verification, a deterministic request "
		    "catching up, or the measured costs.\n"
		    "# TYPE detserve_ref_steps_by_reason_total counter\n"
		    "detserve_ref_steps_by_reason_total{reason=\"window\"} %llu\n"
		    "detserve_ref_steps_by_reason_total{reason=\"early\"} %llu\n"
		    "detserve_ref_steps_by_reason_total{reason=\"catchup\"} %llu\n"
		    "detserve_ref_steps_by_reason_total{reason=\"cost\"} %llu\n",
		    st.waiting, st.running, st.kv_blocks_used, st.kv_blocks_total,
		    st.kv_blocks_total ? (double)st.kv_blocks_used / st.kv_blocks_total : 0.0,
		    (unsigned long long)st.steps, (unsigned long long)st.preemptions,
		    (unsigned long long)st.prefix_hit_tokens, (unsigned long long)st.ref_steps,
		    (unsigned long long)st.ref_decoded, st.window,
		    (unsigned long long)st.ref_steps_window, (unsigned long long)st.ref_steps_early,
		    (unsigned long long)st.ref_steps_catchup, (unsigned long long)st.ref_steps_cost);
	}
}

char *ds_metrics_render(struct ds_metrics *m)
{
	struct evbuffer *b = evbuffer_new();
	if (!b)
		return NULL;
	render(m, b);
	size_t n = evbuffer_get_length(b);
	char *s = malloc(n + 1);
	if (s) {
		evbuffer_remove(b, s, n);
		s[n] = '\0';
	}
	evbuffer_free(b);
	return s;
}

static void on_http(struct evhttp_request *req, void *arg)
{
	struct ds_metrics *m = arg;
	const char *uri = evhttp_request_get_uri(req);
	if (strcmp(uri, "/metrics") != 0 && strncmp(uri, "/metrics?", 9) != 0) {
		evhttp_send_error(req, HTTP_NOTFOUND, "try /metrics");
		return;
	}
	struct evbuffer *b = evbuffer_new();
	if (!b) {
		evhttp_send_error(req, HTTP_INTERNAL, "out of memory");
		return;
	}
	render(m, b);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
	                  "text/plain; version=0.0.4");
	evhttp_send_reply(req, HTTP_OK, "OK", b);
	evbuffer_free(b);
}

enum ds_status ds_metrics_init(struct ds_metrics **out, struct event_base *base, const char *addr,
                               int port, struct ds_engine *engine, struct ds_err *err)
{
	struct ds_metrics *m = calloc(1, sizeof(*m));
	*out = NULL;
	if (!m)
		return ds_errf(err, DS_ERR_NOMEM, "metrics: out of memory");
	m->engine = engine;
	m->port = -1;
	if (port >= 0) {
		struct evhttp_bound_socket *h;
		if (!(m->http = evhttp_new(base)))
			goto nomem;
		evhttp_set_allowed_methods(m->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
		evhttp_set_gencb(m->http, on_http, m);
		if (!(h = evhttp_bind_socket_with_handle(m->http, addr, (ev_uint16_t)port))) {
			ds_metrics_free(m);
			return ds_errf(err, DS_ERR_IO, "metrics: cannot listen on %s:%d", addr,
			               port);
		}
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		getsockname(evhttp_bound_socket_get_fd(h), (struct sockaddr *)&ss, &len);
		m->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
		                                         : ((struct sockaddr_in *)&ss)->sin_port);
	}
	*out = m;
	return DS_OK;
nomem:
	ds_metrics_free(m);
	return ds_errf(err, DS_ERR_NOMEM, "metrics: out of memory");
}

void ds_metrics_free(struct ds_metrics *m)
{
	if (!m)
		return;
	if (m->http)
		evhttp_free(m->http);
	free(m);
}

int ds_metrics_port(const struct ds_metrics *m)
{
	return m ? m->port : -1;
}
