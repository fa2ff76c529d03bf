
/*
 * ngx_feed_module fuzz targets: nginx's globals set as a worker has them,
 * the fake request, and the checks of what the module answered.
 */


#include "ngx_http_feed_fuzz.h"

#include <stdio.h>
#include <stdlib.h>


static void ngx_http_feed_fuzz_writer(ngx_log_t *log, ngx_uint_t level,
    u_char *buf, size_t len);
static ngx_int_t ngx_http_feed_fuzz_header_filter(ngx_http_request_t *r);
static ngx_int_t ngx_http_feed_fuzz_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);


ngx_log_t                    *ngx_http_feed_fuzz_log;
ngx_http_feed_main_conf_t    *ngx_http_feed_fuzz_fmcf;
ngx_http_feed_loc_conf_t     *ngx_http_feed_fuzz_flcf;
ngx_http_feed_fuzz_answer_t   ngx_http_feed_fuzz_answer;


static ngx_log_t              ngx_http_feed_fuzz_log_s;
static ngx_open_file_t        ngx_http_feed_fuzz_log_file;
static ngx_cycle_t            ngx_http_feed_fuzz_cycle;


void
ngx_http_feed_fuzz_init(void)
{
    static ngx_uint_t  done;

    ngx_log_t                  *log;
    ngx_http_feed_main_conf_t  *fmcf;

    if (done) {
        return;
    }

    done = 1;

    ngx_pid = getpid();
    ngx_pagesize = getpagesize();
    for (ngx_pagesize_shift = 0; (ngx_pagesize >> ngx_pagesize_shift) > 1;
         ngx_pagesize_shift++)
    {
        /* void */
    }
    ngx_cacheline_size = NGX_CPU_CACHE_LINE;
    ngx_use_stderr = 0;

    ngx_time_init();

    /*
     * Every log line is formatted, debug ones included, as in a worker
     * with "debug" logging: the formats run on what the input made.
     */

    log = &ngx_http_feed_fuzz_log_s;
    log->file = &ngx_http_feed_fuzz_log_file;
    log->file->fd = ngx_stderr;
    log->log_level = NGX_LOG_DEBUG_ALL;
    log->writer = ngx_http_feed_fuzz_writer;
    ngx_http_feed_fuzz_log = log;

    ngx_http_feed_fuzz_cycle.log = log;
    ngx_cycle = &ngx_http_feed_fuzz_cycle;

    /* the configuration order would give these: one slot each */
    ngx_http_core_module.ctx_index = 0;
    ngx_http_feed_module.ctx_index = 1;

    ngx_http_top_header_filter = ngx_http_feed_fuzz_header_filter;
    ngx_http_top_body_filter = ngx_http_feed_fuzz_body_filter;

    /* the module's own defaults, as a configuration without feed_* has */

    fmcf = calloc(1, sizeof(ngx_http_feed_main_conf_t));
    ngx_http_feed_fuzz_flcf = calloc(1, sizeof(ngx_http_feed_loc_conf_t));

    if (fmcf == NULL || ngx_http_feed_fuzz_flcf == NULL) {
        abort();
    }

    ngx_http_feed_main_conf_unset(fmcf);
    ngx_http_feed_main_conf_defaults(fmcf);
    ngx_http_feed_fuzz_fmcf = fmcf;
}


/*
 * A request as a location handler gets it: a pool, a connection, the
 * module's configuration, the main request counted once.
 */

ngx_http_request_t *
ngx_http_feed_fuzz_request(void)
{
    ngx_pool_t          *pool;
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    static ngx_str_t  uri = ngx_string("/users/u/timeline");

    pool = ngx_create_pool(NGX_DEFAULT_POOL_SIZE, ngx_http_feed_fuzz_log);
    if (pool == NULL) {
        abort();
    }

    c = ngx_pcalloc(pool, sizeof(ngx_connection_t));
    r = ngx_pcalloc(pool, sizeof(ngx_http_request_t));

    if (c == NULL || r == NULL) {
        abort();
    }

    c->fd = (ngx_socket_t) -1;
    c->log = ngx_http_feed_fuzz_log;
    c->pool = pool;
    c->read = ngx_pcalloc(pool, sizeof(ngx_event_t));
    c->write = ngx_pcalloc(pool, sizeof(ngx_event_t));
    c->data = r;

    r->pool = pool;
    r->connection = c;
    r->main = r;
    r->count = 1;
    r->method = NGX_HTTP_GET;
    r->uri = uri;

    /* nginx's debug log copies them: not NULL even when empty */
    r->args.data = uri.data;
    r->args.len = 0;

    r->ctx = ngx_pcalloc(pool, 2 * sizeof(void *));
    r->main_conf = ngx_pcalloc(pool, 2 * sizeof(void *));
    r->loc_conf = ngx_pcalloc(pool, 2 * sizeof(void *));

    if (c->read == NULL || c->write == NULL || r->ctx == NULL
        || r->main_conf == NULL || r->loc_conf == NULL)
    {
        abort();
    }

    r->loc_conf[0] = ngx_pcalloc(pool, sizeof(ngx_http_core_loc_conf_t));
    r->loc_conf[1] = ngx_http_feed_fuzz_flcf;
    r->main_conf[1] = ngx_http_feed_fuzz_fmcf;

    if (r->loc_conf[0] == NULL
        || ngx_list_init(&r->headers_out.headers, pool, 4,
                         sizeof(ngx_table_elt_t))
           != NGX_OK)
    {
        abort();
    }

    /* the answer's buffer is kept from one input to the next */
    ngx_http_feed_fuzz_answer.status = 0;
    ngx_http_feed_fuzz_answer.headers_sent = 0;
    ngx_http_feed_fuzz_answer.len = 0;

    return r;
}


void
ngx_http_feed_fuzz_done(ngx_http_request_t *r)
{
    ngx_destroy_pool(r->pool);
}


/*
 * What the module answers is JSON, with headers that are single lines:
 * whatever the input, else a client or a proxy is fed something else.
 */

void
ngx_http_feed_fuzz_check_answer(ngx_http_request_t *r)
{
    bson_t            doc;
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    ngx_http_feed_fuzz_answer_t  *a = &ngx_http_feed_fuzz_answer;

    part = &r->headers_out.headers.part;
    h = part->elts;

    if (getenv("FEED_FUZZ_LOG")) {
        fprintf(stderr, "answer: %d \"%.*s\"\n", (int) a->status,
                (int) a->len, a->body);
    }

    for (i = 0; /* void */; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                break;
            }

            part = part->next;
            h = part->elts;
            i = 0;
        }

            if (getenv("FEED_FUZZ_LOG")) {
            fprintf(stderr, "header: %.*s: %.*s\n", (int) h[i].key.len,
                    h[i].key.data, (int) h[i].value.len, h[i].value.data);
        }

        if (ngx_strlchr(h[i].value.data, h[i].value.data + h[i].value.len,
                        '\r')
            || ngx_strlchr(h[i].value.data,
                           h[i].value.data + h[i].value.len, '\n'))
        {
            ngx_http_feed_fuzz_fail("a header value with CR or LF",
                                    h[i].value.data, h[i].value.len);
        }
    }

    if (!a->headers_sent || a->len == 0) {
        return;
    }

    if (!bson_init_from_json(&doc, (const char *) a->body, a->len, NULL)) {
        ngx_http_feed_fuzz_fail("an answer that is not JSON", a->body,
                                a->len);
    }

    bson_destroy(&doc);
}


void
ngx_http_feed_fuzz_fail(const char *what, u_char *p, size_t len)
{
    fprintf(stderr, "==FEED== finding: %s", what);

    if (p) {
        fprintf(stderr, ": \"%.*s\"", (int) ngx_min(len, 2048), p);
    }

    fprintf(stderr, "\n");

    abort();
}


/* as the suite treats an [alert] in error.log: a finding */

static void
ngx_http_feed_fuzz_writer(ngx_log_t *log, ngx_uint_t level, u_char *buf,
    size_t len)
{
    if (level <= NGX_LOG_ALERT) {
        ngx_http_feed_fuzz_fail("an alert was logged", buf, len);
    }

    if (getenv("FEED_FUZZ_LOG")) {
        fprintf(stderr, "%.*s", (int) len, buf);
    }
}


static ngx_int_t
ngx_http_feed_fuzz_header_filter(ngx_http_request_t *r)
{
    ngx_http_feed_fuzz_assert(!ngx_http_feed_fuzz_answer.headers_sent,
                              "headers sent twice");

    ngx_http_feed_fuzz_answer.headers_sent = 1;
    ngx_http_feed_fuzz_answer.status = r->headers_out.status;
    r->header_sent = 1;

    return NGX_OK;
}


static ngx_int_t
ngx_http_feed_fuzz_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    size_t                        n;
    u_char                       *p;
    ngx_http_feed_fuzz_answer_t  *a = &ngx_http_feed_fuzz_answer;

    for ( /* void */ ; in; in = in->next) {
        n = in->buf->last - in->buf->pos;

        if (a->len + n > a->size) {
            a->size = ngx_max(2 * a->size, a->len + n);
            p = realloc(a->body, a->size);
            if (p == NULL) {
                abort();
            }

            a->body = p;
        }

        ngx_memcpy(a->body + a->len, in->buf->pos, n);
        a->len += n;
        in->buf->pos = in->buf->last;
    }

    return NGX_OK;
}


/*
 * Every "*n" and "$n" of RESP bytes within max, wherever it stands:
 * hiredis skips the two bytes after a bulk string without looking at
 * them, so a header may begin in the middle of a line.  hiredis allocates
 * an array of the length a header announces before its elements arrive.
 */

ngx_uint_t
ngx_http_feed_fuzz_resp_bounded(const uint8_t *data, size_t size,
    ngx_uint_t max)
{
    size_t      i;
    ngx_uint_t  n;

    for (i = 0; i < size; i++) {

        if (data[i] == '*' || data[i] == '$') {
            n = 0;

            while (i + 1 < size && data[i + 1] >= '0' && data[i + 1] <= '9')
            {
                n = n * 10 + data[++i] - '0';

                if (n > max) {
                    return 0;
                }
            }
        }
    }

    return 1;
}
