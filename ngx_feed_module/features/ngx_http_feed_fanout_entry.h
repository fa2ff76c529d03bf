
/*
 * ngx_feed_module: the fanout consumer and its entries in flight, shared
 * by the files of fanout (internal to the feature): ngx_http_feed_fanout.c
 * reads, delivers and acknowledges; ngx_http_feed_fanout_pull.c does what
 * the posts of pull authors need.
 */


#ifndef _NGX_HTTP_FEED_FANOUT_ENTRY_H_INCLUDED_
#define _NGX_HTTP_FEED_FANOUT_ENTRY_H_INCLUDED_


#include "ngx_http_feed_fanout.h"


typedef struct ngx_http_feed_fanout_entry_s  ngx_http_feed_fanout_entry_t;


/* a worker's consumer of one partition of the queue */
typedef struct {
    ngx_http_feed_main_conf_t    *fmcf;
    ngx_str_t                    *stream;
    ngx_http_feed_fanout_consumers_t  *consumers;
    ngx_http_feed_redis_t        *rd;
    ngx_log_t                    *log;
    ngx_event_t                   timer;
    ngx_connection_t              dummy;

    char                          consumer[NGX_MAXHOSTNAMELEN + 24];
    size_t                        consumer_len;

    ngx_uint_t                    ready;
    ngx_uint_t                    reading;
    int64_t                       client_id;
    ngx_uint_t                    active;
    ngx_msec_t                    last_claim;

    /*
     * An entry of its own failed (a connection lost, scripts flushed):
     * its pending entries are read again at retry_at, a second after the
     * first failure and twice as long each time they fail again, rather
     * than claimed back after feed_fanout_claim_idle
     */
    ngx_msec_t                    retry_at;
    ngx_msec_t                    retry_backoff;
    unsigned                      retry_own:1;
    unsigned                      reading_own:1;

    /* the entries in flight, whose hold is renewed (fanout_lease.c) */
    ngx_queue_t                   flight;
    ngx_event_t                   lease;

    /* for feed_status, with the counters of ngx_http_feed_stats */
    char                          error[128];

    /* the last post fanned out: how many got it, over how long */
    ngx_uint_t                    last_deliveries;
    ngx_msec_t                    last_ms;
} ngx_http_feed_fanout_t;


struct ngx_http_feed_fanout_entry_s {
    ngx_pool_t                   *pool;
    ngx_http_feed_fanout_t       *fo;
    ngx_queue_t                   queue;
    ngx_http_feed_mongo_task_t   *task;
    ngx_http_feed_fanout_page_t   page;

    char                          sid[48];
    u_char                        kind;
    ngx_str_t                     entry;

    /* a post of a pull author: its entry in the author's list */
    ngx_str_t                     pull_entry;

    /* the post's JSON in link mode, where the entry is its id only */
    ngx_str_t                     json;

    /* this post turned its author to pull (not another one first) */
    ngx_uint_t                    turn_changed;

    /* the page being delivered, batch after batch */
    ngx_http_feed_user_t         *users;
    ngx_uint_t                    nusers;
    ngx_uint_t                    next;

    ngx_uint_t                    waiting;
    ngx_uint_t                    pages;
    ngx_uint_t                    deliveries;
    ngx_msec_t                    first_sent;
    ngx_msec_t                    last_reply;
    unsigned                      fetching:1;
    unsigned                      fetched:1;
    unsigned                      last:1;
    unsigned                      own:1;
    unsigned                      failed:1;


    /* the post that turned its author to pull did it */
    unsigned                      turned:1;
};


void ngx_http_feed_fanout_settle(ngx_http_feed_fanout_entry_t *fe);
void ngx_http_feed_fanout_failing(ngx_http_feed_fanout_entry_t *fe,
    const char *why);
void ngx_http_feed_fanout_fail(ngx_http_feed_fanout_entry_t *fe,
    const char *why);

void ngx_http_feed_fanout_lease_init(ngx_http_feed_fanout_t *fo);
void ngx_http_feed_fanout_lease_hold(ngx_http_feed_fanout_entry_t *fe);
void ngx_http_feed_fanout_lease_release(ngx_http_feed_fanout_entry_t *fe);
void ngx_http_feed_fanout_lease_stop(ngx_http_feed_fanout_t *fo);

void ngx_http_feed_fanout_list(ngx_http_feed_fanout_entry_t *fe);
void ngx_http_feed_fanout_unlist(ngx_http_feed_fanout_entry_t *fe);
void ngx_http_feed_fanout_turn(ngx_http_feed_fanout_entry_t *fe);


#endif /* _NGX_HTTP_FEED_FANOUT_ENTRY_H_INCLUDED_ */
