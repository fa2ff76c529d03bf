
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
 * The request is held for as long as the client stays.  Its output goes
 * out in buffers of its own, allocated for each event and freed once
 * sent, so that its pool does not grow with what it is sent; a client
 * that leaves more than feed_stream_buffer unread is closed (it resumes
 * with Last-Event-ID).  A worker that shuts down ends its streams at its
 * next tick: clients reconnect to the new workers.
 */


#include "ngx_http_feed_stream.h"
#include "ngx_http_feed_json.h"


static ngx_int_t ngx_http_feed_stream_args(ngx_http_request_t *r,
    void *data, const ngx_http_feed_error_t **err);
static ngx_int_t ngx_http_feed_stream_start(ngx_http_request_t *r,
    void *data);
static ngx_int_t ngx_http_feed_stream_header(ngx_http_request_t *r);
static void ngx_http_feed_stream_write(ngx_http_feed_stream_t *s,
    ngx_str_t *parts, ngx_uint_t n);
static void ngx_http_feed_stream_sent(ngx_http_feed_stream_t *s,
    ngx_chain_t *out, ngx_int_t rc);
static void ngx_http_feed_stream_writer(ngx_http_request_t *r);
static void ngx_http_feed_stream_end(ngx_http_feed_stream_t *s,
    ngx_int_t rc);
static void ngx_http_feed_stream_finish(ngx_http_request_t *r);
static void ngx_http_feed_stream_unlink(ngx_http_feed_stream_t *s);
static void ngx_http_feed_stream_cleanup(void *data);


ngx_http_feed_handler_t  ngx_http_feed_stream_handler = {
    NGX_HTTP_GET, "GET", 0,
    sizeof(ngx_http_feed_stream_t),
    ngx_http_feed_stream_args,
    ngx_http_feed_stream_start,
    NULL
};


/* the worker's streams */
static ngx_queue_t  ngx_http_feed_streams;
static ngx_uint_t   ngx_http_feed_nstreams;


/* the user, and where to resume: Last-Event-ID, else since_id */

static ngx_int_t
ngx_http_feed_stream_args(ngx_http_request_t *r, void *data,
    const ngx_http_feed_error_t **err)
{
    ngx_http_feed_stream_t  *s = data;

    ngx_int_t             rc;
    ngx_uint_t            n;
    ngx_table_elt_t      *h;
    bson_oid_t            oid;
    ngx_http_feed_page_t  page;

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
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_feed_stream_start(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_stream_t  *s = data;

    ngx_int_t                  rc;
    ngx_pool_cleanup_t        *cln;
    ngx_http_feed_loc_conf_t  *flcf;

    if (ngx_http_feed_nstreams >= s->fmcf->stream_max) {
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "feed stream refused: %ui streams in this worker, "
                      "feed_stream_max", ngx_http_feed_nstreams);

        ngx_http_feed_stat(stream_refused, 1);

        return ngx_http_feed_error(r, &ngx_http_feed_err_streams_full);
    }

    if (s->fmcf->redis_client == NULL) {
        return ngx_http_feed_error(r, &ngx_http_feed_err_stream_down);
    }

    flcf = ngx_http_get_module_loc_conf(r, ngx_http_feed_module);

    s->buffer = flcf->stream_buffer;
    s->heartbeat = flcf->stream_heartbeat;
    s->written = ngx_current_msec;

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_feed_stream_header(r);
    if (rc == NGX_ERROR || rc > NGX_OK) {
        return rc;
    }

    rc = ngx_http_feed_stream_join(s);
    if (rc != NGX_OK) {
        return NGX_ERROR;
    }

    cln->handler = ngx_http_feed_stream_cleanup;
    cln->data = s;

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

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, s->request->connection->log, 0,
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
 * client that leaves too much unread is let go.
 */

static void
ngx_http_feed_stream_write(ngx_http_feed_stream_t *s, ngx_str_t *parts,
    ngx_uint_t n)
{
    size_t               len;
    u_char              *p;
    ngx_int_t            rc;
    ngx_uint_t           i;
    ngx_buf_t           *b;
    ngx_chain_t         *cl;
    ngx_http_request_t  *r = s->request;

    if (s->ended) {
        return;
    }

    len = 0;

    for (i = 0; i < n; i++) {
        len += parts[i].len;
    }

    if (s->unsent + len > s->buffer) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "feed stream of \"%s\" closed: the client left "
                      "%uz bytes unread, feed_stream_buffer",
                      s->user.data, s->unsent);

        ngx_http_feed_stat(stream_dropped, 1);

        ngx_http_feed_stream_end(s, NGX_ERROR);
        return;
    }

    cl = ngx_chain_get_free_buf(r->pool, &s->free);
    if (cl == NULL) {
        ngx_http_feed_stream_end(s, NGX_ERROR);
        return;
    }

    b = cl->buf;
    ngx_memzero(b, sizeof(ngx_buf_t));

    b->start = ngx_alloc(len, r->connection->log);
    if (b->start == NULL) {
        ngx_http_feed_stream_end(s, NGX_ERROR);
        return;
    }

    p = b->start;

    for (i = 0; i < n; i++) {
        p = ngx_cpymem(p, parts[i].data, parts[i].len);
    }

    b->pos = b->start;
    b->last = p;
    b->end = p;
    b->temporary = 1;
    b->flush = 1;
    b->tag = (ngx_buf_tag_t) &ngx_http_feed_module;

    s->written = ngx_current_msec;
    s->opened = 1;

    rc = ngx_http_output_filter(r, cl);

    ngx_http_feed_stream_sent(s, cl, rc);
}


/*
 * What went out: buffers sent are freed (kept for the next events), what
 * is left is counted; the client has feed_stream_buffer and send_timeout
 * to read it.
 */

static void
ngx_http_feed_stream_sent(ngx_http_feed_stream_t *s, ngx_chain_t *out,
    ngx_int_t rc)
{
    ngx_chain_t               *cl;
    ngx_http_request_t        *r = s->request;
    ngx_http_core_loc_conf_t  *clcf;

    ngx_chain_update_chains(r->pool, &s->free, &s->busy, &out,
                            (ngx_buf_tag_t) &ngx_http_feed_module);

    for (cl = s->free; cl; cl = cl->next) {
        if (cl->buf->start) {
            ngx_free(cl->buf->start);
            ngx_memzero(cl->buf, sizeof(ngx_buf_t));
        }
    }

    s->unsent = 0;

    for (cl = s->busy; cl; cl = cl->next) {
        s->unsent += ngx_buf_size(cl->buf);
    }

    if (rc == NGX_ERROR) {
        ngx_http_feed_stream_end(s, NGX_ERROR);
        return;
    }

    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    if (s->busy || r->connection->buffered) {
        ngx_add_timer(r->connection->write, clcf->send_timeout);

        if (ngx_handle_write_event(r->connection->write, clcf->send_lowat)
            != NGX_OK)
        {
            ngx_http_feed_stream_end(s, NGX_ERROR);
        }

        return;
    }

    if (r->connection->write->timer_set) {
        ngx_del_timer(r->connection->write);
    }
}


/* the client can take more: what waits goes out */

static void
ngx_http_feed_stream_writer(ngx_http_request_t *r)
{
    ngx_int_t                rc;
    ngx_http_feed_stream_t  *s;

    s = ngx_http_get_module_ctx(r, ngx_http_feed_module);

    if (r->connection->write->timedout) {
        r->connection->write->timedout = 0;

        ngx_log_error(NGX_LOG_INFO, r->connection->log, NGX_ETIMEDOUT,
                      "feed stream of \"%s\" closed: the client read "
                      "nothing for send_timeout", s->user.data);

        ngx_http_feed_stat(stream_dropped, 1);

        ngx_http_feed_stream_end(s, NGX_ERROR);
        return;
    }

    rc = ngx_http_output_filter(r, NULL);

    ngx_http_feed_stream_sent(s, NULL, rc);
}


/* each second: heartbeats; a worker shutting down ends its streams */

void
ngx_http_feed_stream_tick(void)
{
    ngx_str_t                beat;
    ngx_queue_t             *q, *next;
    ngx_http_feed_stream_t  *s;

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
 * A stream ends: it is sent nothing more; it leaves its reader and the
 * worker's streams, and its request is finished, at the next turn of the
 * event loop (whoever ended it may be walking them).  NGX_OK: the end of
 * the response is sent, the connection may be kept; else it is closed.
 */

static void
ngx_http_feed_stream_end(ngx_http_feed_stream_t *s, ngx_int_t rc)
{
    ngx_http_request_t  *r = s->request;

    if (s->ended) {
        return;
    }

    s->ended = 1;
    s->end_rc = rc;

    r->write_event_handler = ngx_http_feed_stream_finish;
    ngx_post_event(r->connection->write, &ngx_posted_events);
}


static void
ngx_http_feed_stream_finish(ngx_http_request_t *r)
{
    ngx_int_t                rc;
    ngx_http_feed_stream_t  *s;

    s = ngx_http_get_module_ctx(r, ngx_http_feed_module);

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed stream of \"%s\" ends, %i", s->user.data,
                   s->end_rc);

    r->write_event_handler = ngx_http_request_empty_handler;

    ngx_http_feed_stream_unlink(s);

    if (s->end_rc != NGX_OK) {
        ngx_http_finalize_request(r, NGX_ERROR);
        return;
    }

    rc = ngx_http_send_special(r, NGX_HTTP_LAST);

    ngx_http_finalize_request(r, rc == NGX_ERROR ? NGX_ERROR : NGX_OK);
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


/* the request is gone: nothing is sent from its buffers any more */

static void
ngx_http_feed_stream_cleanup(void *data)
{
    ngx_http_feed_stream_t  *s = data;

    ngx_chain_t  *cl;

    ngx_http_feed_stream_unlink(s);

    for (cl = s->busy; cl; cl = cl->next) {
        ngx_free(cl->buf->start);
        cl->buf->start = NULL;
    }
}


ngx_uint_t
ngx_http_feed_stream_count(void)
{
    return ngx_http_feed_nstreams;
}
