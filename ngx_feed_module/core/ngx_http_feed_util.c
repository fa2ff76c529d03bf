
/*
 * ngx_feed_module: what every request shares: the handler skeleton, how a
 * request answered from a callback is finished, the time.
 */


#include "ngx_http_feed_util.h"
#include "ngx_http_feed_json.h"

#if (NGX_LINUX)
#include <sys/random.h>
#endif


/*
 * Every feed_* location's handler: the method, the request's context,
 * the arguments, the body, then the handler's own work.  The request is
 * held while the work runs: a callback may answer it before the work
 * returns, and the hold is given back when the work answered at once.
 */

ngx_int_t
ngx_http_feed_handler(ngx_http_request_t *r)
{
    ngx_int_t                     rc;
    ngx_http_feed_ctx_t          *ctx;
    ngx_http_feed_handler_t      *h;
    ngx_http_feed_loc_conf_t     *flcf;
    const ngx_http_feed_error_t  *err;

    ngx_http_feed_stat(requests, 1);

    flcf = ngx_http_get_module_loc_conf(r, ngx_http_feed_module);
    h = flcf->handler;

    if (!(r->method & h->methods)) {
        return ngx_http_feed_not_allowed(r, h->allow, h->not_allowed);
    }

    ctx = ngx_pcalloc(r->pool, h->ctx_size);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->request = r;
    ctx->fmcf = ngx_http_get_module_main_conf(r, ngx_http_feed_module);

    ngx_http_set_ctx(r, ctx, ngx_http_feed_module);

    rc = h->args ? h->args(r, ctx, &err) : NGX_OK;

    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc == NGX_DECLINED) {
        return ngx_http_feed_refuse(r, err);
    }

    if (!(r->method & h->body)) {
        rc = ngx_http_discard_request_body(r);
        if (rc != NGX_OK) {
            return rc;
        }
    }

    r->main->count++;

    rc = h->start(r, ctx);

    if (rc != NGX_DONE) {
        r->main->count--;
    }

    return rc;
}


/*
 * Reads the body, then handler() goes on: nginx's body reader holds the
 * request until then, in place of the handler skeleton's hold.
 */

ngx_int_t
ngx_http_feed_read_body(ngx_http_request_t *r,
    ngx_http_client_body_handler_pt handler)
{
    ngx_int_t  rc;

    r->request_body_in_single_buf = 1;

    rc = ngx_http_read_client_request_body(r, handler);

    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    r->main->count--;

    return NGX_DONE;
}


/* the whole request body in one piece, in memory */

ngx_int_t
ngx_http_feed_read_whole_body(ngx_http_request_t *r, ngx_str_t *body)
{
    size_t        len;
    u_char       *p;
    ssize_t       n;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    body->len = 0;
    body->data = (u_char *) "";

    if (r->request_body == NULL || r->request_body->bufs == NULL) {
        return NGX_OK;
    }

    cl = r->request_body->bufs;

    if (cl->next == NULL && !cl->buf->in_file) {
        if (cl->buf->last > cl->buf->pos) {
            body->data = cl->buf->pos;
            body->len = cl->buf->last - cl->buf->pos;
        }

        return NGX_OK;
    }

    len = 0;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        len += ngx_buf_size(cl->buf);
    }

    p = ngx_pnalloc(r->pool, len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    body->data = p;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        b = cl->buf;

        if (b->in_file) {
            n = ngx_read_file(b->file, p, b->file_last - b->file_pos,
                              b->file_pos);
            if (n != b->file_last - b->file_pos) {
                return NGX_ERROR;
            }

            p += n;

        } else if (b->last > b->pos) {
            /* a chunked body ends with an empty buffer, pos NULL */
            p = ngx_cpymem(p, b->pos, b->last - b->pos);
        }
    }

    body->len = p - body->data;

    return NGX_OK;
}


/*
 * Finishes a request answered from a callback (a Redis reply, a thread
 * task): nginx's own events would not run the posted requests for us.
 */

void
ngx_http_feed_finalize(ngx_http_request_t *r, ngx_int_t rc)
{
    ngx_connection_t  *c;

    c = r->connection;

    ngx_http_finalize_request(r, rc);
    ngx_http_run_posted_requests(c);
}


/*
 * One of the replies a request waits for at once came: NGX_AGAIN while
 * others are to come; NGX_OK when it was the last and the client is still
 * there to answer; NGX_DONE when it left (the request is finalized).
 */

ngx_int_t
ngx_http_feed_last_reply(ngx_http_request_t *r, ngx_uint_t *waiting)
{
    if (--*waiting) {
        return NGX_AGAIN;
    }

    if (r->connection->error) {
        ngx_http_finalize_request(r, NGX_HTTP_CLIENT_CLOSED_REQUEST);
        return NGX_DONE;
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_feed_no_content(ngx_http_request_t *r)
{
    return ngx_http_feed_send_body(r, NGX_HTTP_NO_CONTENT, NULL, 0);
}


/*
 * The fanout queue's partition of an author's posts and deletes: the same
 * for all of them, so that an author's entries keep their order (a delete
 * comes after its post); authors spread evenly.
 */

ngx_str_t *
ngx_http_feed_stream_of(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_user_t *author)
{
    if (fmcf->stream_partitions < 2) {
        return &fmcf->streams[0];
    }

    return &fmcf->streams[ngx_crc32_short((u_char *) author->data,
                                          author->len)
                          % fmcf->stream_partitions];
}


/* the event loop's cached time, in ms since the epoch */

int64_t
ngx_http_feed_now_ms(void)
{
    ngx_time_t  *tp;

    tp = ngx_timeofday();

    return (int64_t) tp->sec * 1000 + tp->msec;
}


/*
 * Random bytes that differ between processes, containers and hosts: the
 * kernel's, else ngx_random() mixed with the pid and the time (process
 * ids and clocks alone repeat across containers).
 */

void
ngx_http_feed_random(u_char *buf, size_t len)
{
    size_t  i;

#if (NGX_LINUX)
    if (getrandom(buf, len, GRND_NONBLOCK) == (ssize_t) len) {
        return;
    }
#endif

    for (i = 0; i < len; i++) {
        buf[i] = (u_char) (ngx_random() ^ (ngx_pid >> (i % 4 * 8))
                           ^ (ngx_current_msec >> (i % 2 * 8)));
    }
}
