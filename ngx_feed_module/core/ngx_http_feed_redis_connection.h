
/*
 * ngx_feed_module: a Redis connection's insides, shared by the files that
 * make it: ngx_http_feed_redis.c (its life cycle),
 * ngx_http_feed_redis_event.c (its socket on nginx's events),
 * ngx_http_feed_redis_command.c (commands, their timers, replies held) and
 * ngx_http_feed_redis_redirect.c (a cluster node's commands sent again).
 * Only they include it: the cluster's map and every layer above see the
 * connection through ngx_http_feed_redis.h.
 */


#ifndef _NGX_HTTP_FEED_REDIS_CONNECTION_H_INCLUDED_
#define _NGX_HTTP_FEED_REDIS_CONNECTION_H_INCLUDED_


#include "ngx_http_feed_redis.h"
#include "ngx_http_feed_redis_cluster.h"


#define NGX_HTTP_FEED_REDIS_BACKOFF_MIN  50
#define NGX_HTTP_FEED_REDIS_BACKOFF_MAX  2000
#define NGX_HTTP_FEED_REDIS_READY_MAX    4

/* commands' structs kept free for reuse, per connection */
#define NGX_HTTP_FEED_REDIS_FREE         64


/*
 * the connections a worker makes from one conf: its client, a fanout one
 * per partition, the watch, the replication barrier
 */
#define NGX_HTTP_FEED_REDIS_FOLLOWERS    (NGX_HTTP_FEED_PARTITIONS_MAX + 8)


typedef struct {
    ngx_http_feed_redis_ready_pt  handler;
    void                         *data;
} ngx_http_feed_redis_ready_t;


/* the connections whose address comes from the sentinels, or a name */
typedef struct {
    ngx_http_feed_redis_t        *rd[NGX_HTTP_FEED_REDIS_FOLLOWERS];
    ngx_uint_t                    n;
} ngx_http_feed_redis_followers_t;


struct ngx_http_feed_redis_s {
    redisAsyncContext            *ac;
    ngx_http_feed_redis_conf_t   *conf;
    ngx_log_t                    *log;
    ngx_http_feed_redis_state_e   state;

    ngx_event_t                   connect_timer;
    ngx_event_t                   reconnect;
    ngx_msec_t                    backoff;

    /* logins in a row whose ROLE said a replica (sentinel mode) */
    ngx_uint_t                    not_primary;

    /* timer events need a connection-like object for debug logging */
    ngx_connection_t              dummy;

    ngx_queue_t                   pending;
    ngx_queue_t                   free;       /* NGX_HTTP_FEED_REDIS_FREE */
    ngx_uint_t                    npending;
    ngx_uint_t                    nfree;

    unsigned                      connected_once:1;
    unsigned                      counted:1;     /* in the node's gauge */
    unsigned                      failing:1;

    char                          error[128];

    /* unique per redis-server process: tells a restart from a reconnect */
    char                          run_id[48];

    ngx_http_feed_redis_ready_t   ready[NGX_HTTP_FEED_REDIS_READY_MAX];
    ngx_uint_t                    nready;

    /* called when a graceful shutdown begins (the connection is "idle") */
    ngx_http_feed_redis_ready_pt  on_exit;
    void                         *on_exit_data;

    /* hiredis's reply functions, but a reply a handler kept is not freed */
    redisReplyObjectFunctions     fns;

    /* a subscribed connection's messages go here, see subscribe() */
    ngx_http_feed_redis_pt        on_message;
    void                         *on_message_data;

    /* a router has no connection: its cluster's nodes each have one */
    ngx_http_feed_redis_cluster_t *cluster;

    /* a router's: told of each copy's suffix that no master has now */
    ngx_http_feed_redis_tag_copy_pt  on_retire;
    void                         *on_retire_data;

    /* a node: the router it works for */
    ngx_http_feed_redis_t        *router;
    unsigned                      exit_told:1;

    /*
     * Where it connects: the conf's address, or the one pick() sets
     * before each connect (a sentinel's, the primary a sentinel told);
     * NGX_DECLINED from pick(): none known yet, tried again later
     */
    const char                   *host;
    int                           port;
    ngx_str_t                    *addr_text;
    ngx_int_t                   (*pick)(ngx_http_feed_redis_t *rd);
    void                         *pick_data;

    /* a name's follower: waits for, or got, an answer of the resolver */
    unsigned                      resolving:1;
    unsigned                      resolved:1;
    unsigned                      picking:1;
};


struct ngx_http_feed_redis_cmd_s {
    ngx_queue_t                   queue;
    ngx_http_feed_redis_t        *rd;
    ngx_http_feed_redis_pt        handler;
    void                         *data;
    ngx_pool_cleanup_t           *cleanup;
    ngx_event_t                   timer;

    /* the request a command of ngx_http_feed_redis_send_r() is for */
    ngx_http_request_t           *request;

    /* a cluster node's command, kept to be sent again where redirected */
    char                         *formatted;
    size_t                        formatted_len;
    ngx_uint_t                    redirects;

    /*
     * its keys' slot (NGX_HTTP_FEED_REDIS_SLOTS: none), and its pause
     * before it is sent again to the slot's master (TRYAGAIN, CLUSTERDOWN)
     */
    ngx_uint_t                    slot;
    ngx_event_t                   retry;
    ngx_uint_t                    tries;
    ngx_http_feed_redis_retry_e   reason;

    /* a BLOCK command: the connection answers nothing else meanwhile */
    unsigned                      blocking:1;

    /* its first word, for the log: which command timed out */
    u_char                        name[16];
};


/* ngx_http_feed_redis.c */
void ngx_http_feed_redis_drop(ngx_http_feed_redis_t *rd, const char *why);
void ngx_http_feed_redis_retarget(ngx_http_feed_redis_t *rd,
    const char *why);
ngx_int_t ngx_http_feed_redis_follow(ngx_http_feed_redis_followers_t *f,
    ngx_http_feed_redis_t *rd, ngx_int_t (*pick)(ngx_http_feed_redis_t *rd),
    void *data);
ngx_uint_t ngx_http_feed_redis_unfollow(ngx_http_feed_redis_followers_t *f,
    ngx_http_feed_redis_t *rd);

/* ngx_http_feed_redis_sentinel.c */
ngx_http_feed_redis_sentinel_t *ngx_http_feed_redis_sentinel_create(
    ngx_cycle_t *cycle, ngx_http_feed_redis_conf_t *conf);
ngx_int_t ngx_http_feed_redis_sentinel_follow(
    ngx_http_feed_redis_sentinel_t *s, ngx_http_feed_redis_t *rd);
void ngx_http_feed_redis_sentinel_unfollow(ngx_http_feed_redis_t *rd);
void ngx_http_feed_redis_sentinel_role(ngx_http_feed_redis_t *rd,
    redisReply *reply);
void ngx_http_feed_redis_sentinel_readonly(ngx_http_feed_redis_t *rd);

/* ngx_http_feed_redis_name.c */
ngx_http_feed_redis_name_t *ngx_http_feed_redis_name_create(
    ngx_cycle_t *cycle, ngx_http_feed_redis_conf_t *conf);
ngx_int_t ngx_http_feed_redis_name_follow(ngx_http_feed_redis_name_t *n,
    ngx_http_feed_redis_t *rd);
void ngx_http_feed_redis_name_unfollow(ngx_http_feed_redis_t *rd);

/* ngx_http_feed_redis_event.c */
ngx_int_t ngx_http_feed_redis_event_attach(ngx_http_feed_redis_t *rd,
    redisAsyncContext *ac);

/* ngx_http_feed_redis_command.c */
void ngx_http_feed_redis_reply(redisAsyncContext *ac, void *reply,
    void *privdata);
void ngx_http_feed_redis_cmd_done(ngx_http_feed_redis_cmd_t *cmd,
    redisReply *reply);
void ngx_http_feed_redis_cmd_put(ngx_http_feed_redis_cmd_t *cmd);
void ngx_http_feed_redis_free_reply(void *reply);

/* ngx_http_feed_redis_redirect.c */
ngx_int_t ngx_http_feed_redis_format(ngx_http_feed_redis_t *rd,
    ngx_http_feed_redis_cmd_t *cmd, ngx_http_feed_redis_args_t *args);
ngx_int_t ngx_http_feed_redis_redirected(ngx_http_feed_redis_cmd_t *cmd,
    redisReply *reply);
ngx_int_t ngx_http_feed_redis_retried(ngx_http_feed_redis_cmd_t *cmd,
    redisReply *reply);
void ngx_http_feed_redis_retry_handler(ngx_event_t *ev);


#endif /* _NGX_HTTP_FEED_REDIS_CONNECTION_H_INCLUDED_ */
