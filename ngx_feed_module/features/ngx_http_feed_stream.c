
/*
 * ngx_feed_module: "feed_timeline_stream", a user's home timeline live, as
 * Server-Sent Events (text/event-stream):
 *
 *   event: update             an entry came into the timeline, oldest
 *   id: <post id>             first: the post as timeline pages have it
 *   data: <post JSON>
 *
 *   event: delete             an entry the stream may have sent went (a
 *   data: <post id>           delete, a block, a mute, an unfollow, a
 *                             hidden post)
 *
 *   event: reset              the stream cannot tell what changed: the
 *   data: {"reason":"..."}    client reads its timeline again
 *
 *   ":"                       a heartbeat, each feed_stream_heartbeat
 *
 * A stream that resumes (Last-Event-ID, or ?since_id=) is sent the entries
 * newer than its point first.  What is sent is read by the user's reader
 * in the worker (ngx_http_feed_stream_users.c), once for all the user's
 * streams.
 *
 * A stream's output goes out in buffers of its own, allocated for each
 * event and freed once sent, so that nothing it holds grows with what it
 * is sent; a client that leaves more than feed_stream_buffer unread is
 * closed (it resumes with Last-Event-ID).  A worker that shuts down ends
 * its streams at its next tick: clients reconnect to the new workers.
 *
 * An HTTP/1.x stream lets its request go once it is live and its header
 * sent (ngx_http_feed_stream_detach), as nginx does for a keepalive
 * connection: a request and its pools are some 10k, the stream then
 * holds its connection and its own small struct.  It writes to the
 * connection itself from then on, chunked when its header said so, and
 * reads only to see the client go.  The access log line is written at
 * that moment.  An HTTP/2 stream, or a subrequest, stays the request's.
 */


#include "ngx_http_feed_stream.h"
#include "ngx_http_feed_json.h"

#if (NGX_LINUX && defined __GLIBC__)
#include <malloc.h>
#endif


/* requests let go (or streams closed) past which the heap is trimmed */
#define NGX_HTTP_FEED_STREAM_TRIM  64


/* the request's context: the stream lives apart from the request */
typedef struct {
    ngx_http_request_t           *request;
    ngx_http_feed_main_conf_t    *fmcf;
    ngx_http_feed_stream_t       *stream;
} ngx_http_feed_stream_ctx_t;


static ngx_int_t ngx_http_feed_stream_args(ngx_http_request_t *r,
    void *data, const ngx_http_feed_error_t **err);
static ngx_int_t ngx_http_feed_stream_start(ngx_http_request_t *r,
    void *data);
static ngx_int_t ngx_http_feed_stream_header(ngx_http_request_t *r);
static void ngx_http_feed_stream_write(ngx_http_feed_stream_t *s,
    ngx_str_t *parts, ngx_uint_t n);
static ngx_chain_t *ngx_http_feed_stream_alloc(ngx_http_feed_stream_t *s,
    size_t len);
static ngx_int_t ngx_http_feed_stream_send(ngx_http_feed_stream_t *s,
    ngx_chain_t *cl);
static void ngx_http_feed_stream_writer(ngx_http_request_t *r);
static ngx_uint_t ngx_http_feed_stream_detachable(ngx_http_feed_stream_t *s);
static void ngx_http_feed_stream_detach(ngx_http_request_t *r);
static void ngx_http_feed_stream_free_header(ngx_connection_t *c,
    ngx_http_connection_t *hc);
static void ngx_http_feed_stream_own(ngx_http_feed_stream_t *s,
    ngx_connection_t *c);
static void ngx_http_feed_stream_free_bufs(ngx_connection_t *c,
    ngx_chain_t *cl);
static void ngx_http_feed_stream_read_handler(ngx_event_t *rev);
static void ngx_http_feed_stream_write_handler(ngx_event_t *wev);
static void ngx_http_feed_stream_trim(void);
static void ngx_http_feed_stream_end(ngx_http_feed_stream_t *s,
    ngx_int_t rc);
static void ngx_http_feed_stream_finish_request(ngx_http_request_t *r);
static void ngx_http_feed_stream_finish(ngx_http_feed_stream_t *s);
static void ngx_http_feed_stream_close(ngx_http_feed_stream_t *s);
static void ngx_http_feed_stream_unlink(ngx_http_feed_stream_t *s);
static void ngx_http_feed_stream_free(ngx_http_feed_stream_t *s);
static void ngx_http_feed_stream_cleanup(void *data);


ngx_http_feed_handler_t  ngx_http_feed_stream_handler = {
    NGX_HTTP_GET, "GET", 0,
    sizeof(ngx_http_feed_stream_ctx_t),
    ngx_http_feed_stream_args,
    ngx_http_feed_stream_start,
    NULL
};


/* the worker's streams */
static ngx_queue_t  ngx_http_feed_streams;
static ngx_uint_t   ngx_http_feed_nstreams;

/* they live for hours: packed together, apart from requests */
static ngx_http_feed_slots_t  ngx_http_feed_stream_slots =
    ngx_http_feed_slots(sizeof(ngx_http_feed_stream_t));

/* requests let go and streams closed since the heap was last trimmed */
static ngx_uint_t   ngx_http_feed_stream_freed;


/*
 * The stream, made apart from the request (it may outlive it) and freed
 * with it unless it detached; the user, and where to resume:
 * Last-Event-ID, else since_id
 */

static ngx_int_t
ngx_http_feed_stream_args(ngx_http_request_t *r, void *data,
    const ngx_http_feed_error_t **err)
{
    ngx_http_feed_stream_ctx_t  *ctx = data;

    ngx_int_t                rc;
    ngx_uint_t               n;
    bson_oid_t               oid;
    ngx_table_elt_t         *h;
    ngx_pool_cleanup_t      *cln;
    ngx_http_feed_page_t     page;
    ngx_http_feed_stream_t  *s;

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    s = ngx_http_feed_slots_alloc(&ngx_http_feed_stream_slots,
                                  r->connection->log);
    if (s == NULL) {
        return NGX_ERROR;
    }

    s->connection = r->connection;
    s->request = r;
    ctx->stream = s;

    cln->handler = ngx_http_feed_stream_cleanup;
    cln->data = s;

    ngx_memzero(&page, sizeof(ngx_http_feed_page_t));

    rc = ngx_http_feed_page_args(r, NGX_HTTP_FEED_PAGE_CLIENT, &page, err);
    if (rc != NGX_OK) {
        return rc;
    }

    s->user = page.user;

    if (page.has_since) {
        ngx_memcpy(s->since, page.since_id, 25);
    }

    h = ngx_http_feed_header(r, "Last-Event-ID", &n);

    if (h) {
        if (ngx_http_feed_post_id(&h->value, &oid) != NGX_OK) {
            *err = &ngx_http_feed_err_event_id;
            return NGX_DECLINED;
        }

        ngx_memcpy(s->since, h->value.data, 24);
        s->since[24] = '\0';
        s->reconnect = 1;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_feed_stream_start(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_stream_ctx_t  *ctx = data;

    ngx_int_t                  rc;
    ngx_http_feed_stream_t    *s = ctx->stream;
    ngx_http_feed_loc_conf_t  *flcf;

    if (ngx_http_feed_nstreams >= ctx->fmcf->stream_max) {
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "feed stream refused: %ui streams in this worker, "
                      "feed_stream_max", ngx_http_feed_nstreams);

        ngx_http_feed_stat(stream_refused, 1);

        return ngx_http_feed_error(r, &ngx_http_feed_err_streams_full);
    }

    if (ctx->fmcf->redis_client == NULL) {
        return ngx_http_feed_error(r, &ngx_http_feed_err_stream_down);
    }

    flcf = ngx_http_get_module_loc_conf(r, ngx_http_feed_module);

    s->clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);
    s->buffer = flcf->stream_buffer;
    /*
     * a period of its own, up to a quarter shorter: streams opened or
     * sent to together do not all beat in the same tick
     */
    s->heartbeat = flcf->stream_heartbeat
                   - (ngx_msec_t) ngx_random()
                     % (flcf->stream_heartbeat / 4 + 1);
    s->written = ngx_current_msec;

    rc = ngx_http_feed_stream_header(r);
    if (rc == NGX_ERROR || rc > NGX_OK) {
        return rc;
    }

    rc = ngx_http_feed_stream_join(s);
    if (rc != NGX_OK) {
        return NGX_ERROR;
    }

    if (ngx_http_feed_nstreams++ == 0) {
        ngx_queue_init(&ngx_http_feed_streams);
    }

    ngx_http_feed_gauge(streams, 1);

    ngx_queue_insert_tail(&ngx_http_feed_streams, &s->all);

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed stream of \"%s\" opened, since \"%s\"",
                   s->user.data, s->since);

    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_feed_stream_writer;

    /*
     * The header goes out when the stream is live (its reader's next
     * read, ngx_http_feed_stream_opened()): a client that sees the stream
     * open is sent every post after that
     */

    return NGX_DONE;
}


static ngx_int_t
ngx_http_feed_stream_header(ngx_http_request_t *r)
{
    static ngx_str_t  no_cache = ngx_string("no-cache");
    static ngx_str_t  no = ngx_string("no");

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = -1;

    ngx_str_set(&r->headers_out.content_type, "text/event-stream");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;

    ngx_http_clear_accept_ranges(r);
    ngx_http_clear_last_modified(r);
    ngx_http_clear_etag(r);

    /* nothing between the client and here keeps or buffers it */

    if (ngx_http_feed_add_header(r, "Cache-Control", &no_cache) != NGX_OK
        || ngx_http_feed_add_header(r, "X-Accel-Buffering", &no) != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_send_header(r);
}


/*
 * An entry came.  Its id goes with it when it is newer than all the
 * stream sent (and than where it resumed): the client's Last-Event-ID is
 * then the newest entry it has, and a resume from it neither skips nor
 * repeats one.  An older one (a late delivery, posts back after an
 * unmute) comes without; its id is in its JSON.
 */

void
ngx_http_feed_stream_update(ngx_http_feed_stream_t *s, u_char *id,
    ngx_str_t *json)
{
    u_char     *p, *last, *nl;
    ngx_str_t   parts[4 + 2 * 8];
    ngx_uint_t  n;

    if (s->ended) {
        return;
    }

    if (s->oldest[0] == '\0' || ngx_memcmp(id, s->oldest, 24) < 0) {
        ngx_memcpy(s->oldest, id, 24);
        s->oldest[24] = '\0';
    }

    ngx_str_set(&parts[0], "event: update");
    n = 1;

    if (s->since[0] == '\0' || ngx_memcmp(id, s->since, 24) > 0) {
        ngx_memcpy(s->since, id, 24);
        s->since[24] = '\0';

        ngx_str_set(&parts[1], "\nid: ");
        parts[2].data = id;
        parts[2].len = 24;
        n = 3;
    }

    /* a JSON text with line breaks (from an application) takes lines */

    p = json->data;
    last = p + json->len;

    do {
        nl = ngx_strlchr(p, last, '\n');

        if (n + 3 >= sizeof(parts) / sizeof(ngx_str_t)) {
            nl = NULL;
        }

        ngx_str_set(&parts[n], "\ndata: ");
        parts[n + 1].data = p;
        parts[n + 1].len = (nl ? nl : last) - p;
        n += 2;

        p = nl ? nl + 1 : last;

    } while (p < last);

    ngx_str_set(&parts[n], "\n\n");
    n++;

    ngx_http_feed_stat(stream_updates, 1);
    ngx_http_feed_stream_write(s, parts, n);
}


/*
 * The stream is live (or cannot be yet, Redis failing): its header goes
 * out now if no event took it out before
 */

void
ngx_http_feed_stream_opened(ngx_http_feed_stream_t *s)
{
    ngx_str_t  first;

    if (s->opened) {
        return;
    }

    ngx_str_set(&first, ":\n\n");
    ngx_http_feed_stream_write(s, &first, 1);
}


void
ngx_http_feed_stream_delete(ngx_http_feed_stream_t *s, u_char *id)
{
    ngx_str_t  parts[3];

    ngx_str_set(&parts[0], "event: delete\ndata: ");
    parts[1].data = id;
    parts[1].len = 24;
    ngx_str_set(&parts[2], "\n\n");

    ngx_http_feed_stat(stream_deletes, 1);
    ngx_http_feed_stream_write(s, parts, 3);
}


void
ngx_http_feed_stream_reset(ngx_http_feed_stream_t *s, const char *reason)
{
    ngx_str_t  parts[3];

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, s->connection->log, 0,
                   "feed stream of \"%s\": reset, %s", s->user.data, reason);

    ngx_str_set(&parts[0], "event: reset\ndata: {\"reason\":\"");
    parts[1].data = (u_char *) reason;
    parts[1].len = ngx_strlen(reason);
    ngx_str_set(&parts[2], "\"}\n\n");

    ngx_http_feed_stat(stream_resets, 1);
    ngx_http_feed_stream_write(s, parts, 3);
}


/*
 * An event in a buffer of its own, sent at once, freed once sent; a
 * client that leaves too much unread is let go.  A detached stream
 * frames it as a chunk when its header said "chunked": the request's
 * chunked filter did, before.
 */

static void
ngx_http_feed_stream_write(ngx_http_feed_stream_t *s, ngx_str_t *parts,
    ngx_uint_t n)
{
    size_t        len, size;
    ngx_uint_t    i;
    ngx_chain_t  *cl;

    if (s->ended) {
        return;
    }

    len = 0;

    for (i = 0; i < n; i++) {
        len += parts[i].len;
    }

    size = len;

    if (s->chunked) {
        size += NGX_SIZE_T_LEN + 2 * (sizeof(CRLF) - 1);
    }

    if (s->unsent + size > s->buffer) {
        ngx_log_error(NGX_LOG_INFO, s->connection->log, 0,
                      "feed stream of \"%s\" closed: the client left "
                      "%uz bytes unread, feed_stream_buffer",
                      s->user.data, s->unsent);

        ngx_http_feed_stat(stream_dropped, 1);

        ngx_http_feed_stream_end(s, NGX_ERROR);
        return;
    }

    cl = ngx_http_feed_stream_alloc(s, size);
    if (cl == NULL) {
        ngx_http_feed_stream_end(s, NGX_ERROR);
        return;
    }

    if (s->chunked) {
        cl->buf->last = ngx_sprintf(cl->buf->last, "%xz" CRLF, len);
    }

    for (i = 0; i < n; i++) {
        cl->buf->last = ngx_cpymem(cl->buf->last, parts[i].data,
                                   parts[i].len);
    }

    if (s->chunked) {
        *cl->buf->last++ = CR;
        *cl->buf->last++ = LF;
    }

    s->written = ngx_current_msec;
    s->opened = 1;

    (void) ngx_http_feed_stream_send(s, cl);
}


/* one allocation: the link, the buffer, len bytes; freed once sent */

static ngx_chain_t *
ngx_http_feed_stream_alloc(ngx_http_feed_stream_t *s, size_t len)
{
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    cl = ngx_alloc(sizeof(ngx_chain_t) + sizeof(ngx_buf_t) + len,
                   s->connection->log);
    if (cl == NULL) {
        return NULL;
    }

    b = (ngx_buf_t *) (cl + 1);
    ngx_memzero(b, sizeof(ngx_buf_t));

    b->start = (u_char *) (b + 1);
    b->pos = b->start;
    b->last = b->start;
    b->end = b->start + len;
    b->temporary = 1;
    b->flush = 1;
    b->tag = (ngx_buf_tag_t) &ngx_http_feed_module;

    cl->buf = b;
    cl->next = NULL;

    return cl;
}


/*
 * The one way out, cl added to what waits (NULL: what waits only): by
 * the request's filters while it has one, by the connection once
 * detached.  Buffers sent are freed, what is left is counted; the client
 * has feed_stream_buffer and send_timeout to read it.  NGX_AGAIN: bytes
 * wait.  A stream whose header and all went out lets its request go.
 */

static ngx_int_t
ngx_http_feed_stream_send(ngx_http_feed_stream_t *s, ngx_chain_t *cl)
{
    ngx_int_t          rc;
    ngx_chain_t       *ln, **ll, *out;
    ngx_connection_t  *c = s->connection;

    if (cl) {
        for (ll = &s->busy; *ll; ll = &(*ll)->next) { /* void */ }
        *ll = cl;
    }

    if (s->request) {
        rc = ngx_http_output_filter(s->request, cl);

    } else if (s->busy || c->buffered) {
        out = c->send_chain(c, s->busy, 0);
        rc = (out == NGX_CHAIN_ERROR) ? NGX_ERROR : NGX_OK;

    } else {
        rc = NGX_OK;
    }

    /* in order: the first not sent holds the ones after it */

    while (s->busy && ngx_buf_size(s->busy->buf) == 0) {
        ln = s->busy;
        s->busy = ln->next;
        ngx_free(ln);
    }

    s->unsent = 0;

    for (ln = s->busy; ln; ln = ln->next) {
        s->unsent += ngx_buf_size(ln->buf);
    }

    if (rc == NGX_ERROR) {
        ngx_http_feed_stream_end(s, NGX_ERROR);
        return NGX_ERROR;
    }

    if (s->busy || c->buffered) {
        ngx_add_timer(c->write, s->clcf->send_timeout);

        if (ngx_handle_write_event(c->write, s->clcf->send_lowat) != NGX_OK)
        {
            ngx_http_feed_stream_end(s, NGX_ERROR);
            return NGX_ERROR;
        }

        return NGX_AGAIN;
    }

    if (c->write->timer_set) {
        ngx_del_timer(c->write);
    }

#if (NGX_HTTP_SSL)

    /* an idle TLS stream holds no write buffer, as a keepalive one */

    if (s->detached && c->ssl) {
        ngx_ssl_free_buffer(c);
    }

#endif

    if (ngx_http_feed_stream_detachable(s)) {
        s->request->write_event_handler = ngx_http_feed_stream_detach;
        ngx_post_event(c->write, &ngx_posted_events);
    }

    return NGX_OK;
}


/* the client can take more: what waits goes out */

static void
ngx_http_feed_stream_writer(ngx_http_request_t *r)
{
    ngx_http_feed_stream_t      *s;
    ngx_http_feed_stream_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_feed_module);
    s = ctx->stream;

    if (r->connection->write->timedout) {
        r->connection->write->timedout = 0;

        ngx_log_error(NGX_LOG_INFO, r->connection->log, NGX_ETIMEDOUT,
                      "feed stream of \"%s\" closed: the client read "
                      "nothing for send_timeout", s->user.data);

        ngx_http_feed_stat(stream_dropped, 1);

        ngx_http_feed_stream_end(s, NGX_ERROR);
        return;
    }

    (void) ngx_http_feed_stream_send(s, NULL);
}


/*
 * Whether the request can go: HTTP/1.x, the main request held by the
 * stream alone, live, everything it was given sent, its body neither
 * encoded nor rate-limited by a filter (the stream writes past the
 * filters from then on)
 */

static ngx_uint_t
ngx_http_feed_stream_detachable(ngx_http_feed_stream_t *s)
{
    ngx_http_request_t  *r = s->request;

    if (r == NULL || !s->live || !s->opened || s->ended) {
        return 0;
    }

#if (NGX_HTTP_V2)
    if (r->stream) {
        return 0;
    }
#endif

    if (r != r->main || r->count != 1 || r->blocked || r->discard_body
        || r->postponed || r->out || r->buffered || r->limit_rate
        || s->busy || s->connection->buffered || s->connection->write->delayed
        || (r->headers_out.content_encoding
            && r->headers_out.content_encoding->hash))
    {
        return 0;
    }

    return 1;
}


/*
 * The request goes, as ngx_http_set_keepalive() lets a request go and
 * keeps its connection: freed (its access log line written: status 200,
 * the bytes sent so far), the client's header buffers freed, the
 * connection's events the stream's.  Its stub_status "writing" stays
 * counted until the stream ends.
 */

static void
ngx_http_feed_stream_detach(ngx_http_request_t *r)
{
    ngx_connection_t            *c;
    ngx_http_connection_t       *hc;
    ngx_http_feed_stream_t      *s;
    ngx_http_feed_stream_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_feed_module);
    s = ctx->stream;
    c = r->connection;

    r->write_event_handler = ngx_http_feed_stream_writer;

    if (!ngx_http_feed_stream_detachable(s)) {
        /* more came meanwhile: sent first, the next chance detaches */
        ngx_http_feed_stream_writer(r);
        return;
    }

    hc = r->http_connection;

    s->chunked = r->chunked;
    s->detached = 1;
    s->request = NULL;

#if (NGX_STAT_STUB)
    s->writing = r->stat_writing;
    r->stat_writing = 0;
#endif

    r->keepalive = 0;

    ngx_http_free_request(r, 0);

    c->data = s;
    c->log->action = "streaming live timeline";

    ngx_http_feed_stream_free_header(c, hc);
    ngx_http_feed_stream_own(s, c);

    ngx_http_feed_stream_freed++;

    c->read->handler = ngx_http_feed_stream_read_handler;
    c->write->handler = ngx_http_feed_stream_write_handler;

    /* nginx closes idle connections first when it shuts down */
    c->idle = 1;

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, c->log, 0,
                   "feed stream of \"%s\" detached, %s, %s, %O sent",
                   s->user.data, s->chunked ? "chunked" : "close-delimited",
                   c->pool ? "its connection's pool kept" : "no pool",
                   c->sent);

    if (c->read->timer_set) {
        ngx_del_timer(c->read);
    }

    if (s->clcf->tcp_nodelay && ngx_tcp_nodelay(c) != NGX_OK) {
        ngx_http_feed_stream_end(s, NGX_ERROR);
        return;
    }

    if (ngx_handle_read_event(c->read, 0) != NGX_OK) {
        ngx_http_feed_stream_end(s, NGX_ERROR);
        return;
    }

    if (c->read->ready) {
        ngx_post_event(c->read, &ngx_posted_events);
    }
}


/*
 * The client's header buffers go, as in ngx_http_set_keepalive(): the
 * stream reads no request again; bytes pipelined after its own are
 * dropped with them
 */

static void
ngx_http_feed_stream_free_header(ngx_connection_t *c,
    ngx_http_connection_t *hc)
{
    if (c->buffer && c->buffer->start) {
        if (ngx_pfree(c->pool, c->buffer->start) == NGX_OK) {
            c->buffer->start = NULL;
            c->buffer->end = NULL;
        }

        c->buffer->pos = c->buffer->start;
        c->buffer->last = c->buffer->start;
    }

    ngx_http_feed_stream_free_bufs(c, hc->free);
    ngx_http_feed_stream_free_bufs(c, hc->busy);

    hc->free = NULL;
    hc->busy = NULL;
    hc->nbusy = 0;
}


/*
 * The connection's pool goes too: what the connection still uses of it
 * (its log, the log's context, the client's address) is copied into the
 * stream, and nothing reads the rest (its header buffer, its
 * ngx_http_connection_t) again.  Kept for TLS (its state is there) and
 * for what would not fit: a unix socket, a PROXY protocol header, a
 * local address found for a wildcard listen.
 */

static void
ngx_http_feed_stream_own(ngx_http_feed_stream_t *s, ngx_connection_t *c)
{
    ngx_pool_t  *pool;

#if (NGX_SSL)
    if (c->ssl) {
        return;
    }
#endif

    if (c->proxy_protocol
        || c->socklen > (socklen_t) sizeof(s->sockaddr)
        || c->addr_text.len > sizeof(s->addr_text)
        || c->local_sockaddr != c->listening->sockaddr
        || c->log->data == NULL)
    {
        return;
    }

    s->log = *c->log;
    s->log_ctx = *(ngx_http_log_ctx_t *) c->log->data;
    s->log.data = &s->log_ctx;

    ngx_memcpy(&s->sockaddr, c->sockaddr, c->socklen);
    ngx_memcpy(s->addr_text, c->addr_text.data, c->addr_text.len);

    c->log = &s->log;
    c->read->log = &s->log;
    c->write->log = &s->log;
    c->sockaddr = (struct sockaddr *) &s->sockaddr;
    c->addr_text.data = s->addr_text;
    c->buffer = NULL;

    pool = c->pool;
    c->pool = NULL;

    ngx_destroy_pool(pool);
}


/* large header buffers and their links: the connection's pool's */

static void
ngx_http_feed_stream_free_bufs(ngx_connection_t *c, ngx_chain_t *cl)
{
    ngx_chain_t  *ln;

    while (cl) {
        ln = cl;
        cl = cl->next;
        ngx_pfree(c->pool, ln->buf->start);
        ngx_free_chain(c->pool, ln);
    }
}


/*
 * A detached stream reads only to see its client go (end of file, an
 * error); what the client sends is dropped.  A worker shutting down
 * closes idle connections through here (c->close): the stream ends, its
 * last chunk sent.
 */

static void
ngx_http_feed_stream_read_handler(ngx_event_t *rev)
{
    u_char                   buf[NGX_HTTP_DISCARD_BUFFER_SIZE];
    ssize_t                  n;
    ngx_connection_t        *c;
    ngx_http_feed_stream_t  *s;

    c = rev->data;
    s = c->data;

    if (c->close) {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, c->log, 0,
                       "feed stream of \"%s\": the worker shuts down",
                       s->user.data);

        ngx_http_feed_stream_end(s, NGX_OK);
        return;
    }

    for ( ;; ) {
        n = c->recv(c, buf, sizeof(buf));

        if (n == NGX_AGAIN) {
            if (ngx_handle_read_event(rev, 0) != NGX_OK) {
                break;
            }

            return;
        }

        if (n == NGX_ERROR || n == 0) {
            break;
        }

        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, c->log, 0,
                       "feed stream of \"%s\": %z bytes of the client "
                       "dropped", s->user.data, n);
    }

    ngx_log_error(NGX_LOG_INFO, c->log, 0,
                  "feed stream of \"%s\" closed by the client",
                  s->user.data);

    c->error = 1;

    if (s->closing) {
        ngx_http_feed_stream_close(s);
        return;
    }

    ngx_http_feed_stream_end(s, NGX_ERROR);
}


/*
 * A detached stream's writes: what waits goes out; a stream that ended
 * sends its end, then its connection closes
 */

static void
ngx_http_feed_stream_write_handler(ngx_event_t *wev)
{
    ngx_int_t                rc;
    ngx_connection_t        *c;
    ngx_http_feed_stream_t  *s;

    c = wev->data;
    s = c->data;

    if (wev->timedout) {
        wev->timedout = 0;

        ngx_log_error(NGX_LOG_INFO, c->log, NGX_ETIMEDOUT,
                      "feed stream of \"%s\" closed: the client read "
                      "nothing for send_timeout", s->user.data);

        if (!s->closing) {
            ngx_http_feed_stat(stream_dropped, 1);
        }

        c->timedout = 1;
        ngx_http_feed_stream_close(s);
        return;
    }

    if (s->ended && !s->closing) {
        ngx_http_feed_stream_finish(s);
        return;
    }

    rc = ngx_http_feed_stream_send(s, NULL);

    if (s->closing && rc != NGX_AGAIN) {
        ngx_http_feed_stream_close(s);
    }
}


/* each second: heartbeats; a worker shutting down ends its streams */

void
ngx_http_feed_stream_tick(void)
{
    ngx_str_t                beat;
    ngx_queue_t             *q, *next;
    ngx_http_feed_stream_t  *s;

    ngx_http_feed_stream_trim();

    if (ngx_http_feed_nstreams == 0) {
        return;
    }

    ngx_str_set(&beat, ":\n\n");

    for (q = ngx_queue_head(&ngx_http_feed_streams);
         q != ngx_queue_sentinel(&ngx_http_feed_streams);
         q = next)
    {
        next = ngx_queue_next(q);
        s = ngx_queue_data(q, ngx_http_feed_stream_t, all);

        if (ngx_exiting) {
            ngx_http_feed_stream_end(s, NGX_OK);
            continue;
        }

        if (ngx_current_msec - s->written >= s->heartbeat) {
            ngx_http_feed_stream_write(s, &beat, 1);
        }
    }
}


/*
 * Requests let go by the hundred (streams opening together, clients
 * coming back after a reload), and streams closed so, leave their memory
 * free in the heap, and resident: glibc gives back only the top of its
 * heap by itself, and the streams' own memory sits apart
 * (ngx_http_feed_slots.c), not among it.
 * Past NGX_HTTP_FEED_STREAM_TRIM of them, once a second at most, the
 * free pages go back to the system (0.1 to 4 ms a time with 10,000
 * streams opening, bench part 13).
 */

static void
ngx_http_feed_stream_trim(void)
{
    if (ngx_http_feed_stream_freed < NGX_HTTP_FEED_STREAM_TRIM) {
        return;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "feed stream: heap trimmed, %ui requests or streams "
                   "gone",
                   ngx_http_feed_stream_freed);

    ngx_http_feed_stream_freed = 0;

#if (NGX_LINUX && defined __GLIBC__)
    (void) malloc_trim(0);
#endif
}


/*
 * A stream ends: it is sent nothing more; it leaves its reader and the
 * worker's streams, and its request is finished or its connection
 * closed, at the next turn of the event loop (whoever ended it may be
 * walking them).  NGX_OK: the end of the response is sent first; else
 * the connection is closed.
 */

static void
ngx_http_feed_stream_end(ngx_http_feed_stream_t *s, ngx_int_t rc)
{
    if (s->ended) {
        return;
    }

    s->ended = 1;
    s->end_rc = rc;

    if (s->request) {
        s->request->write_event_handler = ngx_http_feed_stream_finish_request;
    }

    ngx_post_event(s->connection->write, &ngx_posted_events);
}


static void
ngx_http_feed_stream_finish_request(ngx_http_request_t *r)
{
    ngx_http_feed_stream_ctx_t  *ctx;

    r->write_event_handler = ngx_http_request_empty_handler;

    ctx = ngx_http_get_module_ctx(r, ngx_http_feed_module);

    ngx_http_feed_stream_finish(ctx->stream);
}


/*
 * The end of the response: the request's last buffer through its
 * filters, or, detached, the last chunk written by the stream and the
 * connection closed once it went out (send_timeout at most)
 */

static void
ngx_http_feed_stream_finish(ngx_http_feed_stream_t *s)
{
    ngx_int_t            rc;
    ngx_chain_t         *cl;
    ngx_http_request_t  *r = s->request;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, s->connection->log, 0,
                   "feed stream of \"%s\" ends, %i", s->user.data,
                   s->end_rc);

    ngx_http_feed_stream_unlink(s);

    if (r) {
        if (s->end_rc != NGX_OK) {
            ngx_http_finalize_request(r, NGX_ERROR);
            return;
        }

        rc = ngx_http_send_special(r, NGX_HTTP_LAST);

        ngx_http_finalize_request(r, rc == NGX_ERROR ? NGX_ERROR : NGX_OK);
        return;
    }

    s->closing = 1;

    if (s->end_rc != NGX_OK) {
        ngx_http_feed_stream_close(s);
        return;
    }

    cl = NULL;

    if (s->chunked) {
        cl = ngx_http_feed_stream_alloc(s, sizeof("0" CRLF CRLF) - 1);
        if (cl == NULL) {
            ngx_http_feed_stream_close(s);
            return;
        }

        cl->buf->last = ngx_cpymem(cl->buf->last, "0" CRLF CRLF,
                                   sizeof("0" CRLF CRLF) - 1);
    }

    if (ngx_http_feed_stream_send(s, cl) != NGX_AGAIN) {
        ngx_http_feed_stream_close(s);
    }
}


/*
 * A detached stream is over: its connection closes, as a keepalive one,
 * or as ngx_http_close_connection() would without the pool it no longer
 * has; the stream goes after it (the connection's log is the stream's)
 */

static void
ngx_http_feed_stream_close(ngx_http_feed_stream_t *s)
{
    ngx_connection_t  *c = s->connection;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, c->log, 0,
                   "feed stream of \"%s\" closed", s->user.data);

    ngx_http_feed_stream_unlink(s);

#if (NGX_STAT_STUB)
    if (s->writing) {
        (void) ngx_atomic_fetch_add(ngx_stat_writing, -1);
    }
#endif

    if (c->pool) {
        ngx_http_close_connection(c);

    } else {
#if (NGX_STAT_STUB)
        (void) ngx_atomic_fetch_add(ngx_stat_active, -1);
#endif

        c->destroyed = 1;
        ngx_close_connection(c);
    }

    ngx_http_feed_stream_free(s);
    ngx_http_feed_stream_freed++;
}


/* the stream is gone from its reader and the worker's (once) */

static void
ngx_http_feed_stream_unlink(ngx_http_feed_stream_t *s)
{
    if (!s->joined) {
        return;
    }

    ngx_http_feed_stream_leave(s);
    ngx_queue_remove(&s->all);
    ngx_http_feed_nstreams--;

    ngx_http_feed_gauge(streams, -1);
}


/* the stream and what it did not send */

static void
ngx_http_feed_stream_free(ngx_http_feed_stream_t *s)
{
    ngx_chain_t  *cl, *ln;

    for (cl = s->busy; cl; /* void */) {
        ln = cl;
        cl = cl->next;
        ngx_free(ln);
    }

    ngx_http_feed_slots_free(s);
}


/*
 * The request is gone: nothing is sent from the stream's buffers any
 * more, and the stream goes with it, unless it detached (it lives on)
 */

static void
ngx_http_feed_stream_cleanup(void *data)
{
    ngx_http_feed_stream_t  *s = data;

    if (s->detached) {
        return;
    }

    ngx_http_feed_stream_unlink(s);
    ngx_http_feed_stream_free(s);
}


ngx_uint_t
ngx_http_feed_stream_count(void)
{
    return ngx_http_feed_nstreams;
}
