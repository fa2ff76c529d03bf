
/*
 * ngx_feed_module: the glue between hiredis and nginx's event loop, what
 * hiredis keeps for other loops in its adapters/ (libevent.h, libev.h):
 * a connection's socket is watched by the read and write events of an
 * ngx_connection_t, which hiredis's hooks add and delete, and whose
 * handlers let hiredis read and write.
 *
 * hiredis owns the socket: redisFree() closes it.  Our ngx_connection_t
 * only carries the events; the cleanup hook frees it without closing.
 */


#include "ngx_http_feed_redis_connection.h"


static void ngx_http_feed_redis_add_read(void *data);
static void ngx_http_feed_redis_del_read(void *data);
static void ngx_http_feed_redis_add_write(void *data);
static void ngx_http_feed_redis_del_write(void *data);
static void ngx_http_feed_redis_ev_cleanup(void *data);
static void ngx_http_feed_redis_read_handler(ngx_event_t *rev);
static void ngx_http_feed_redis_write_handler(ngx_event_t *wev);


/*
 * ac's socket on the worker's events, logged to rd's log; the read
 * handler tells rd of a shutdown, found in ac->data as hiredis's
 * callbacks find it.
 */

ngx_int_t
ngx_http_feed_redis_event_attach(ngx_http_feed_redis_t *rd,
    redisAsyncContext *ac)
{
    ngx_connection_t  *c;

    c = ngx_get_connection(ac->c.fd, rd->log);
    if (c == NULL) {
        return NGX_ERROR;
    }

    c->data = ac;
    c->log = rd->log;

    /*
     * nginx tells idle connections first when a graceful shutdown begins:
     * that is how a connection that waits on Redis for long hears of it.
     */

    c->idle = (rd->on_exit != NULL);
    c->read->log = rd->log;
    c->write->log = rd->log;
    c->read->handler = ngx_http_feed_redis_read_handler;
    c->write->handler = ngx_http_feed_redis_write_handler;

    ac->ev.data = c;
    ac->ev.addRead = ngx_http_feed_redis_add_read;
    ac->ev.delRead = ngx_http_feed_redis_del_read;
    ac->ev.addWrite = ngx_http_feed_redis_add_write;
    ac->ev.delWrite = ngx_http_feed_redis_del_write;
    ac->ev.cleanup = ngx_http_feed_redis_ev_cleanup;

    return NGX_OK;
}


/* event hooks: hiredis calls them often, they must be idempotent */

static void
ngx_http_feed_redis_add_read(void *data)
{
    ngx_connection_t  *c = data;

    /*
     * Level-triggered: hiredis reads at most 16 KiB per call, and an
     * edge-triggered event would never fire again for the rest of a
     * larger reply already in the socket buffer.
     */

    if (!c->read->active
        && ngx_add_event(c->read, NGX_READ_EVENT, NGX_LEVEL_EVENT) != NGX_OK)
    {
        ngx_log_error(NGX_LOG_ERR, c->log, 0, "redis add read event failed");
    }
}


static void
ngx_http_feed_redis_del_read(void *data)
{
    ngx_connection_t  *c = data;

    if (c->read->active) {
        (void) ngx_del_event(c->read, NGX_READ_EVENT, NGX_LEVEL_EVENT);
    }
}


static void
ngx_http_feed_redis_add_write(void *data)
{
    ngx_connection_t  *c = data;

    if (!c->write->active
        && ngx_add_event(c->write, NGX_WRITE_EVENT, NGX_LEVEL_EVENT)
           != NGX_OK)
    {
        ngx_log_error(NGX_LOG_ERR, c->log, 0, "redis add write event failed");
    }
}


static void
ngx_http_feed_redis_del_write(void *data)
{
    ngx_connection_t  *c = data;

    if (c->write->active) {
        (void) ngx_del_event(c->write, NGX_WRITE_EVENT, NGX_LEVEL_EVENT);
    }
}


static void
ngx_http_feed_redis_ev_cleanup(void *data)
{
    ngx_connection_t  *c = data;

    ngx_http_feed_redis_del_read(c);
    ngx_http_feed_redis_del_write(c);

    if (c->read->posted) {
        ngx_delete_posted_event(c->read);
    }

    if (c->write->posted) {
        ngx_delete_posted_event(c->write);
    }

    /* hiredis closes the descriptor itself right after this hook */

    ngx_free_connection(c);
    c->fd = (ngx_socket_t) -1;
}


static void
ngx_http_feed_redis_read_handler(ngx_event_t *rev)
{
    ngx_connection_t  *c = rev->data;

    redisAsyncContext      *ac;
    ngx_http_feed_redis_t  *rd;

    ac = c->data;

    if (c->close) {
        /* ngx_close_idle_connections(): the worker is shutting down */

        c->close = 0;
        c->idle = 0;

        rd = ac->data;

        ngx_log_debug1(NGX_LOG_DEBUG_EVENT, c->log, 0,
                       "feed redis %p told of the shutdown", rd);

        if (rd->on_exit) {
            rd->on_exit(rd, rd->on_exit_data);
        }

        if (!rev->ready) {
            return;
        }
    }

    redisAsyncHandleRead(ac);
}


static void
ngx_http_feed_redis_write_handler(ngx_event_t *wev)
{
    ngx_connection_t  *c = wev->data;

    redisAsyncHandleWrite(c->data);
}
