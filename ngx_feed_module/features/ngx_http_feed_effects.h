
/*
 * ngx_feed_module: the cache side effects of a write, durable: recorded in
 * MongoDB before the write, applied before the answer when Redis takes
 * them, and by a sweeper on any node when it could not.
 */


#ifndef _NGX_HTTP_FEED_EFFECTS_H_INCLUDED_
#define _NGX_HTTP_FEED_EFFECTS_H_INCLUDED_


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_mongo.h"
#include "ngx_http_feed_redis.h"
#include "ngx_http_feed_util.h"
#include "ngx_http_feed_effects_store.h"


/*
 * How long a write holds its entry before a sweeper may apply it: a
 * write that dies after its MongoDB part is completed this late at most
 */
#define NGX_HTTP_FEED_EFFECTS_LEASE  1000


typedef struct ngx_http_feed_effects_s  ngx_http_feed_effects_t;

/* the replies are in: fx->failed says whether some effect was left over */
typedef void (*ngx_http_feed_effects_done_pt)(ngx_http_feed_effects_t *fx);


/* a block's reason and its unfollow's, changed together */
#define NGX_HTTP_FEED_EFFECTS_KINDS    2


/*
 * A read filter changed, or an unfollow hides the followee's posts: sent
 * in place of the drop of a user's timeline
 */
typedef struct {
    ngx_http_feed_user_t         *author;
    u_char                        kinds[NGX_HTTP_FEED_EFFECTS_KINDS];
    ngx_uint_t                    nkinds;
    ngx_uint_t                    add;
} ngx_http_feed_effects_filter_t;


struct ngx_http_feed_effects_s {
    /* the users' entries, recorded with the effects a write may have */
    ngx_http_feed_effect_t          users[NGX_HTTP_FEED_EFFECTS_USERS];
    ngx_uint_t                      n;
    bson_oid_t                      token;
    ngx_uint_t                      model;     /* feed_timeline_store */

    /*
     * Set after the write, by it: the effects each user is owed now.  An
     * entry found there before adds all of them (an earlier try's).
     */
    ngx_uint_t                      need[NGX_HTTP_FEED_EFFECTS_USERS];
    ngx_http_feed_effects_filter_t  filter[NGX_HTTP_FEED_EFFECTS_USERS];

    /* the event loop's side */
    ngx_http_request_t             *request;
    ngx_http_feed_main_conf_t      *fmcf;
    ngx_uint_t                      waiting;
    ngx_uint_t                      failed;
    ngx_uint_t                      replicated;  /* with sentinel= */
    ngx_http_feed_effects_done_pt   done;
};


void ngx_http_feed_effects_init(ngx_http_feed_effects_t *fx,
    ngx_http_request_t *r, ngx_http_feed_main_conf_t *fmcf);
ngx_int_t ngx_http_feed_effects_add(ngx_http_feed_effects_t *fx,
    ngx_http_feed_user_t *user, ngx_uint_t effects);
void ngx_http_feed_effects_owe(ngx_http_feed_effects_t *fx,
    ngx_http_feed_user_t *user, ngx_uint_t effects);
void ngx_http_feed_effects_owe_filter(ngx_http_feed_effects_t *fx,
    ngx_http_feed_user_t *user, ngx_http_feed_user_t *author, u_char kind,
    ngx_uint_t add);

ngx_int_t ngx_http_feed_effects_record(mongoc_client_t *client,
    const char *database, ngx_http_feed_effects_t *fx, bson_error_t *error);
ngx_int_t ngx_http_feed_effects_owed(mongoc_client_t *client,
    const char *database, ngx_http_feed_effects_t *fx, bson_error_t *error);

ngx_int_t ngx_http_feed_effects_apply(ngx_http_feed_effects_t *fx,
    ngx_http_feed_effects_done_pt done);
ngx_int_t ngx_http_feed_effects_send(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_user_t *user,
    ngx_uint_t effects, ngx_http_feed_effects_filter_t *filter,
    ngx_http_feed_redis_pt handler, void *data);
ngx_int_t ngx_http_feed_effects_model(mongoc_client_t *client,
    const char *database, ngx_uint_t model, ngx_http_feed_user_t *user,
    ngx_uint_t effects, bson_error_t *error);

ngx_int_t ngx_http_feed_effects_sweep_init(ngx_cycle_t *cycle,
    ngx_http_feed_main_conf_t *fmcf);
void ngx_http_feed_effects_sweep_soon(void);
void ngx_http_feed_effects_sweep_exit(void);


#endif /* _NGX_HTTP_FEED_EFFECTS_H_INCLUDED_ */
