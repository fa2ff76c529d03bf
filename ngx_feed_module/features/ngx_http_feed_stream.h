
/*
 * ngx_feed_module: live home timelines, "feed_timeline_stream" (Server-Sent
 * Events): the requests and what they are sent (ngx_http_feed_stream.c),
 * and the worker's readers, one per user streamed whatever the number of
 * their streams, that read what changed (ngx_http_feed_stream_users.c).
 */


#ifndef _NGX_HTTP_FEED_STREAM_H_INCLUDED_
#define _NGX_HTTP_FEED_STREAM_H_INCLUDED_


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_redis.h"
#include "ngx_http_feed_slots.h"
#include "ngx_http_feed_str_hash.h"
#include "ngx_http_feed_util.h"
#include "ngx_http_feed_timeline_cache.h"


/*
 * The entries of a timeline a stream follows: the newest of them, read
 * again at each change, tell what came (an entry not there before) and
 * what went (one there before and no longer)
 */
#define NGX_HTTP_FEED_STREAM_WINDOW   20

/* entries a resumed stream is sent at most before it is told to reset */
#define NGX_HTTP_FEED_STREAM_BACKLOG  NGX_HTTP_FEED_LIMIT_MAX

/* entries gone at once past which a stream is told to reset */
#define NGX_HTTP_FEED_STREAM_GONE_MAX  10


typedef struct ngx_http_feed_stream_user_s  ngx_http_feed_stream_user_t;


/*
 * A live stream, allocated apart from its request: on HTTP/1.x the
 * request is freed once the stream is live and its header sent, and the
 * stream keeps only its connection (ngx_http_feed_stream.c, "detached");
 * on HTTP/2 it stays the request's to its end
 */
typedef struct {
    ngx_connection_t             *connection;
    ngx_http_request_t           *request;    /* NULL once detached */
    ngx_http_core_loc_conf_t     *clcf;       /* send_timeout, send_lowat */

    ngx_http_feed_user_t          user;

    /*
     * The entry to resume after, "" for none: newer ones are sent first;
     * then the newest entry sent
     */
    char                          since[25];

    /* the oldest entry sent, "" for none: deletes from there on are told */
    char                          oldest[25];

    ngx_queue_t                   queue;      /* in its user's streams */
    ngx_queue_t                   all;        /* in the worker's streams */
    ngx_http_feed_stream_user_t  *su;

    /* what resuming it read, until it is sent (its user's read's pool) */
    void                         *backlog;

    /*
     * output: the events not sent yet, oldest first, each one allocation
     * (link, buffer, bytes) freed once sent; their bytes
     */
    ngx_chain_t                  *busy;
    size_t                        unsent;
    size_t                        buffer;
    ngx_msec_t                    written;
    ngx_msec_t                    heartbeat;
    ngx_int_t                     end_rc;

    /*
     * Once detached, what its connection needs of its pool, which goes
     * (ngx_http_feed_stream_own): nothing else there is used again
     */
    ngx_log_t                     log;
    ngx_http_log_ctx_t            log_ctx;
#if (NGX_HAVE_INET6)
    struct sockaddr_in6           sockaddr;
    u_char                        addr_text[NGX_INET6_ADDRSTRLEN];
#else
    struct sockaddr_in            sockaddr;
    u_char                        addr_text[NGX_INET_ADDRSTRLEN];
#endif

    unsigned                      live:1;     /* past its backlog */
    unsigned                      opened:1;   /* its header went out */
    unsigned                      joined:1;
    unsigned                      ended:1;
    unsigned                      detached:1; /* its request freed */
    unsigned                      chunked:1;  /* framed by the stream */
    unsigned                      closing:1;  /* its last bytes going */
    unsigned                      writing:1;  /* in stub_status writing */
    unsigned                      reconnect:1; /* since is a Last-Event-ID */
} ngx_http_feed_stream_t;


/*
 * A request waiting for entries newer than since (a long poll, ?wait=):
 * handler(data) is called once, out of the reader's waiters, when the
 * user's reader reads a newer one, when it cannot read the list, or when
 * the worker shuts down
 */
typedef struct {
    ngx_queue_t                   queue;
    ngx_http_feed_stream_user_t  *su;
    char                          since[25];
    void                        (*handler)(void *data);
    void                         *data;
} ngx_http_feed_stream_waiter_t;


extern ngx_http_feed_handler_t  ngx_http_feed_stream_handler;


/* ngx_http_feed_stream.c */
void ngx_http_feed_stream_update(ngx_http_feed_stream_t *s, u_char *id,
    ngx_str_t *json);
void ngx_http_feed_stream_opened(ngx_http_feed_stream_t *s);
void ngx_http_feed_stream_delete(ngx_http_feed_stream_t *s, u_char *id);
void ngx_http_feed_stream_reset(ngx_http_feed_stream_t *s,
    const char *reason);
ngx_uint_t ngx_http_feed_stream_count(void);
void ngx_http_feed_stream_tick(void);

/* ngx_http_feed_stream_users.c */
ngx_int_t ngx_http_feed_stream_users_init(ngx_http_feed_main_conf_t *fmcf);
void ngx_http_feed_stream_users_exit(void);
ngx_int_t ngx_http_feed_stream_join(ngx_http_feed_stream_t *s);
void ngx_http_feed_stream_leave(ngx_http_feed_stream_t *s);
ngx_int_t ngx_http_feed_stream_wait(ngx_http_feed_stream_waiter_t *w,
    ngx_http_feed_user_t *user);
void ngx_http_feed_stream_unwait(ngx_http_feed_stream_waiter_t *w);
ngx_int_t ngx_http_feed_stream_status(bson_t *doc);


#endif /* _NGX_HTTP_FEED_STREAM_H_INCLUDED_ */
