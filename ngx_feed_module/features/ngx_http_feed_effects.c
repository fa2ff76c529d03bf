
/*
 * ngx_feed_module: the cache side effects of a write, made durable.
 *
 * A write that changes what a user's caches may show (a follow, an
 * unfollow, a block, a mute) has three steps:
 *
 *   1. thread, before the write: the effects it may have are recorded in
 *      MongoDB (ngx_http_feed_effects_store.c), under a token of its own;
 *   2. thread, after the write: the effects it does have are known, and an
 *      entry found there before adds them all (an earlier try of the same
 *      write, cut short); the MongoDB part (the model's timeline) is done,
 *      and the entry is held again, or cleared when nothing is owed;
 *   3. event loop: the Redis part is sent; when every reply is a success
 *      the entry is cleared, otherwise it is left to the sweeper
 *      (ngx_http_feed_effects_sweep.c), sooner than its lease, and the
 *      request says so (503: the change is stored, retry).
 *
 * Every effect is idempotent and only ever drops or re-derives cached
 * state from MongoDB, so applying one twice, or one a write did not need
 * after all, costs a rebuild and nothing else.
 */


#include "ngx_http_feed_effects.h"
#include "ngx_http_feed_counts.h"
#include "ngx_http_feed_timeline_cache.h"
#include "ngx_http_feed_model.h"
#include "ngx_http_feed_filters_store.h"


/* the entries a write's last step clears, or hands to the sweeper */
typedef struct {
    ngx_http_feed_effects_t      *fx;
    ngx_http_feed_user_t          users[NGX_HTTP_FEED_EFFECTS_USERS];
    bson_oid_t                    tokens[NGX_HTTP_FEED_EFFECTS_USERS];
    ngx_uint_t                    n;
    ngx_uint_t                    failed;
    int64_t                       now;
} ngx_http_feed_effects_end_t;


static ngx_uint_t ngx_http_feed_effects_mask(ngx_http_feed_effects_t *fx,
    ngx_uint_t effects);
static ngx_uint_t ngx_http_feed_effects_same(ngx_http_feed_user_t *a,
    ngx_http_feed_user_t *b);
static ngx_int_t ngx_http_feed_effects_find(ngx_http_feed_effects_t *fx,
    ngx_http_feed_user_t *user);
static int64_t ngx_http_feed_effects_now(void);
static void ngx_http_feed_effects_replied(void *data, redisReply *reply);
static ngx_int_t ngx_http_feed_effects_end(ngx_http_feed_effects_t *fx);
static ngx_http_feed_effects_end_t *ngx_http_feed_effects_end_make(
    ngx_http_feed_effects_t *fx, ngx_pool_t *pool);
static void ngx_http_feed_effects_end_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client);
static void ngx_http_feed_effects_cleared(ngx_http_feed_mongo_task_t *t);
static void ngx_http_feed_effects_replicated(void *data,
    ngx_uint_t replicated);


void
ngx_http_feed_effects_init(ngx_http_feed_effects_t *fx,
    ngx_http_request_t *r, ngx_http_feed_main_conf_t *fmcf)
{
    ngx_memzero(fx, sizeof(ngx_http_feed_effects_t));

    fx->request = r;
    fx->fmcf = fmcf;
    fx->model = fmcf->timeline_store;

    bson_oid_init(&fx->token, NULL);
}


/*
 * What the write may do to user's caches, before it: NGX_DECLINED when
 * nothing of it applies here (no Redis, no model of MongoDB timelines)
 */

ngx_int_t
ngx_http_feed_effects_add(ngx_http_feed_effects_t *fx,
    ngx_http_feed_user_t *user, ngx_uint_t effects)
{
    ngx_int_t                i;
    ngx_http_feed_effect_t  *e;

    effects = ngx_http_feed_effects_mask(fx, effects);

    if (effects == 0) {
        return NGX_DECLINED;
    }

    i = ngx_http_feed_effects_find(fx, user);

    if (i == NGX_ERROR) {
        if (fx->n == NGX_HTTP_FEED_EFFECTS_USERS) {
            return NGX_ERROR;
        }

        i = fx->n++;
        fx->users[i].user = *user;
    }

    e = &fx->users[i];
    e->effects |= effects;

    return NGX_OK;
}


/*
 * What the write did do to user's caches, after it, in its thread: a
 * timeline owed this way is dropped, whatever filter change it also owes
 */

void
ngx_http_feed_effects_owe(ngx_http_feed_effects_t *fx,
    ngx_http_feed_user_t *user, ngx_uint_t effects)
{
    ngx_int_t  i;

    i = ngx_http_feed_effects_find(fx, user);

    if (i == NGX_ERROR) {
        return;
    }

    fx->need[i] |= effects & fx->users[i].effects;

    if (effects & NGX_HTTP_FEED_EFFECT_TIMELINE) {
        fx->filter[i].author = NULL;
    }
}


/*
 * A read filter of user changed, or user unfollowed author: the cached
 * timeline learns it in place (scripts/timeline_filter.lua), unless it is
 * owed a drop anyway.  Two changes of the same author's reasons, the same
 * way (a block and the unfollow it made), go in one call; any other second
 * change drops the timeline.
 */

void
ngx_http_feed_effects_owe_filter(ngx_http_feed_effects_t *fx,
    ngx_http_feed_user_t *user, ngx_http_feed_user_t *author, u_char kind,
    ngx_uint_t add)
{
    ngx_int_t                        i;
    ngx_http_feed_effects_filter_t  *f;

    i = ngx_http_feed_effects_find(fx, user);

    if (i == NGX_ERROR
        || !(fx->users[i].effects & NGX_HTTP_FEED_EFFECT_TIMELINE))
    {
        return;
    }

    f = &fx->filter[i];

    if (fx->need[i] & NGX_HTTP_FEED_EFFECT_TIMELINE) {

        if (f->author != NULL && f->add == add
            && f->nkinds < NGX_HTTP_FEED_EFFECTS_KINDS
            && ngx_http_feed_effects_same(f->author, author)
            && kind != NGX_HTTP_FEED_FILTER_HIDDEN
            && f->kinds[0] != NGX_HTTP_FEED_FILTER_HIDDEN)
        {
            f->kinds[f->nkinds++] = kind;
            return;
        }

        f->author = NULL;
        return;
    }

    fx->need[i] |= NGX_HTTP_FEED_EFFECT_TIMELINE;
    f->author = author;
    f->kinds[0] = kind;
    f->nkinds = 1;
    f->add = add;
}


static ngx_uint_t
ngx_http_feed_effects_same(ngx_http_feed_user_t *a, ngx_http_feed_user_t *b)
{
    return a->len == b->len && ngx_strncmp(a->data, b->data, a->len) == 0;
}


static ngx_uint_t
ngx_http_feed_effects_mask(ngx_http_feed_effects_t *fx, ngx_uint_t effects)
{
    if (!fx->fmcf->redis_enabled) {
        effects &= ~(NGX_HTTP_FEED_EFFECT_TIMELINE
                     |NGX_HTTP_FEED_EFFECT_COUNTS);
    }

    if (fx->model == 0) {
        effects &= ~NGX_HTTP_FEED_EFFECT_MODEL;
    }

    return effects;
}


static ngx_int_t
ngx_http_feed_effects_find(ngx_http_feed_effects_t *fx,
    ngx_http_feed_user_t *user)
{
    ngx_uint_t  i;

    for (i = 0; i < fx->n; i++) {
        if (fx->users[i].user.len == user->len
            && ngx_strcmp(fx->users[i].user.data, user->data) == 0)
        {
            return i;
        }
    }

    return NGX_ERROR;
}


/* step 1, in the write's thread before it */

ngx_int_t
ngx_http_feed_effects_record(mongoc_client_t *client, const char *database,
    ngx_http_feed_effects_t *fx, bson_error_t *error)
{
    int64_t  now;

    now = ngx_http_feed_effects_now();

    return ngx_http_feed_effects_pend(client, database, fx->users, fx->n,
                                      &fx->token, now,
                                      now + NGX_HTTP_FEED_EFFECTS_LEASE,
                                      error);
}


/*
 * Step 2, in the write's thread after it: the MongoDB part of what is
 * owed, then the entries held again for the event loop's part (a sweeper
 * that took one over meanwhile may have applied it before the write), or
 * cleared when nothing is owed
 */

ngx_int_t
ngx_http_feed_effects_owed(mongoc_client_t *client, const char *database,
    ngx_http_feed_effects_t *fx, bson_error_t *error)
{
    int64_t                 now;
    ngx_uint_t              i, nheld, nfree;
    bson_oid_t              tokens[NGX_HTTP_FEED_EFFECTS_USERS];
    ngx_http_feed_user_t    free[NGX_HTTP_FEED_EFFECTS_USERS];
    ngx_http_feed_effect_t  held[NGX_HTTP_FEED_EFFECTS_USERS];

    nheld = 0;
    nfree = 0;

    for (i = 0; i < fx->n; i++) {
        if (fx->users[i].earlier) {
            fx->need[i] = ngx_http_feed_effects_mask(fx,
                                                     NGX_HTTP_FEED_EFFECTS_ALL);
        }

        if (fx->need[i] == 0) {
            free[nfree] = fx->users[i].user;
            bson_oid_copy(&fx->token, &tokens[nfree++]);
            continue;
        }

        if (ngx_http_feed_effects_model(client, database, fx->model,
                                        &fx->users[i].user, fx->need[i],
                                        error)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        held[nheld] = fx->users[i];
        held[nheld++].effects |= fx->need[i];
    }

    if (ngx_http_feed_effects_clear(client, database, free, nfree, tokens,
                                    error)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    now = ngx_http_feed_effects_now();

    return ngx_http_feed_effects_pend(client, database, held, nheld,
                                      &fx->token, now,
                                      now + NGX_HTTP_FEED_EFFECTS_LEASE,
                                      error);
}


/* the MongoDB part: the model drops what it has of the user's timeline */

ngx_int_t
ngx_http_feed_effects_model(mongoc_client_t *client, const char *database,
    ngx_uint_t model, ngx_http_feed_user_t *user, ngx_uint_t effects,
    bson_error_t *error)
{
    if (model == 0 || !(effects & NGX_HTTP_FEED_EFFECT_MODEL)) {
        return NGX_OK;
    }

    return ngx_http_feed_model_drop(client, database, model, user, error);
}


/* the time in a thread, where nginx's cached time is not kept current */

static int64_t
ngx_http_feed_effects_now(void)
{
    struct timeval  tv;

    ngx_gettimeofday(&tv);

    return (int64_t) tv.tv_sec * 1000 + tv.tv_usec / 1000;
}


/*
 * Step 3, on the event loop: the Redis part, then the entries cleared.
 * NGX_DONE: done() follows; NGX_OK: all is over now (fx->failed says
 * whether something could not be sent), done() is not called.
 */

ngx_int_t
ngx_http_feed_effects_apply(ngx_http_feed_effects_t *fx,
    ngx_http_feed_effects_done_pt done)
{
    ngx_int_t                        rc;
    ngx_uint_t                       i, sent;
    ngx_http_feed_effects_filter_t  *filter;

    fx->done = done;
    fx->waiting = 0;
    fx->failed = 0;
    fx->replicated = 0;

    for (i = 0; i < fx->n; i++) {
        filter = (fx->users[i].earlier || fx->filter[i].author == NULL)
                 ? NULL : &fx->filter[i];

        rc = ngx_http_feed_effects_send(fx->request, fx->fmcf,
                                        &fx->users[i].user, fx->need[i],
                                        filter, ngx_http_feed_effects_replied,
                                        fx);
        if (rc == NGX_ERROR) {
            return NGX_ERROR;
        }

        sent = rc & 0xff;
        fx->waiting += sent;

        if (rc >> 8) {
            fx->failed = 1;
        }
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, fx->request->connection->log, 0,
                   "feed effects of %ui users: %ui sent%s", fx->n,
                   fx->waiting, fx->failed ? ", some not" : "");

    if (fx->waiting) {
        return NGX_DONE;
    }

    return ngx_http_feed_effects_end(fx);
}


/*
 * The Redis part of a user's effects, a command each (the filter's change
 * in place of the timeline's drop when given); handler gets each reply.
 * Returns how many were sent, plus 256 times how many could not be (no
 * connection), or NGX_ERROR.
 */

ngx_int_t
ngx_http_feed_effects_send(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_user_t *user,
    ngx_uint_t effects, ngx_http_feed_effects_filter_t *filter,
    ngx_http_feed_redis_pt handler, void *data)
{
    ngx_int_t  rc, sent, unsent;
    ngx_str_t  kinds;

    sent = 0;
    unsent = 0;

    if (effects & NGX_HTTP_FEED_EFFECT_TIMELINE) {
        if (filter) {
            kinds.data = filter->kinds;
            kinds.len = filter->nkinds;

            rc = ngx_http_feed_timeline_cache_filter(r, fmcf, user,
                                                     filter->author, &kinds,
                                                     filter->add, handler,
                                                     data);
        } else {
            rc = ngx_http_feed_timeline_cache_drop(r, fmcf, user, handler,
                                                   data);
        }

        if (rc == NGX_ERROR) {
            return NGX_ERROR;
        }

        (rc == NGX_OK) ? sent++ : unsent++;
    }

    if (effects & NGX_HTTP_FEED_EFFECT_COUNTS) {
        rc = ngx_http_feed_counts_invalidate(r, fmcf->redis_client, user,
                                             handler, data);
        if (rc == NGX_ERROR) {
            return NGX_ERROR;
        }

        (rc == NGX_OK) ? sent++ : unsent++;
    }

    return sent + (unsent << 8);
}


static void
ngx_http_feed_effects_replied(void *data, redisReply *reply)
{
    ngx_http_feed_effects_t  *fx = data;

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        fx->failed = 1;

        ngx_log_error(NGX_LOG_WARN, fx->request->connection->log, 0,
                      "cache update refused, left to the sweeper: %*s",
                      reply ? (int) reply->len : 4,
                      reply ? reply->str : "lost");
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, fx->request->connection->log, 0,
                   "feed effects: a reply, %s, %ui to go",
                   fx->failed ? "failed" : "applied", fx->waiting - 1);

    if (--fx->waiting) {
        return;
    }

    if (ngx_http_feed_effects_end(fx) == NGX_OK) {
        fx->done(fx);
    }
}


/*
 * Not known on a replica: the entries stay, and the sweeper applies the
 * effects again once their lease ends (on the new primary, if this one is
 * lost meanwhile).  The answer is the same: Redis has them now.
 */

static void
ngx_http_feed_effects_replicated(void *data, ngx_uint_t replicated)
{
    ngx_http_feed_effects_t  *fx = data;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, fx->request->connection->log, 0,
                   "feed effects %s", replicated ? "on a replica"
                                     : "not known on a replica, kept");

    if (replicated) {
        fx->replicated = 1;

        if (ngx_http_feed_effects_end(fx) != NGX_OK) {
            return;
        }

    } else {
        ngx_http_feed_stat(effects_applied, 1);
    }

    fx->done(fx);
}


/*
 * The entries go once their effects are applied, before the answer: the
 * next write of the same users must not take them for an earlier try's
 * (it would drop a timeline its filter change could have kept).  If the
 * clear fails, the sweeper applies them once more, which does no harm.
 * Otherwise the sweeper is told to take them now rather than when their
 * lease ends, in the background.  NGX_DONE: done() follows the clear.
 */

static ngx_int_t
ngx_http_feed_effects_end(ngx_http_feed_effects_t *fx)
{
    ngx_int_t                     rc;
    ngx_uint_t                    i;
    ngx_http_feed_mongo_task_t   *t;
    ngx_http_feed_effects_end_t  *end;

    for (i = 0; i < fx->n; i++) {
        if (fx->need[i]) {
            break;
        }
    }

    if (i == fx->n || fx->fmcf->mongo_client == NULL) {
        return NGX_OK;
    }

    if (fx->failed) {
        ngx_http_feed_stat(effects_failed, 1);
        ngx_http_feed_effects_sweep_soon();

        t = ngx_http_feed_mongo_task_bg(fx->fmcf->mongo_client,
                                        ngx_http_feed_effects_end_run, NULL);
        if (t == NULL) {
            return NGX_OK;
        }

        end = ngx_http_feed_effects_end_make(fx, t->pool);
        if (end == NULL) {
            ngx_destroy_pool(t->pool);
            return NGX_OK;
        }

        t->data = end;
        (void) ngx_http_feed_mongo_post_bg(t);

        return NGX_OK;
    }

    /*
     * With sentinels, the entries go once a replica has the effects too:
     * a primary lost before takes them along, and the sweeper applies
     * them again where the sentinels moved
     */

    if (fx->fmcf->redis_barrier && !fx->replicated) {
        rc = ngx_http_feed_redis_barrier_wait_r(fx->request,
                 fx->fmcf->redis_barrier, ngx_http_feed_effects_replicated,
                 fx);

        return (rc == NGX_OK) ? NGX_DONE : NGX_OK;
    }

    ngx_http_feed_stat(effects_applied, 1);

    end = ngx_http_feed_effects_end_make(fx, fx->request->pool);
    if (end == NULL) {
        return NGX_OK;
    }

    t = ngx_http_feed_mongo_task(fx->request->pool, fx->fmcf->mongo_client,
                                 ngx_http_feed_effects_end_run,
                                 ngx_http_feed_effects_cleared, end);

    if (t == NULL || ngx_http_feed_mongo_post_r(fx->request, t) != NGX_OK) {
        return NGX_OK;
    }

    return NGX_DONE;
}


/* the entries the write holds: the users it owed something, its token */

static ngx_http_feed_effects_end_t *
ngx_http_feed_effects_end_make(ngx_http_feed_effects_t *fx, ngx_pool_t *pool)
{
    ngx_uint_t                    i;
    ngx_http_feed_effects_end_t  *end;

    end = ngx_palloc(pool, sizeof(ngx_http_feed_effects_end_t));
    if (end == NULL) {
        return NULL;
    }

    end->fx = fx;
    end->n = 0;
    end->failed = fx->failed;
    end->now = ngx_http_feed_now_ms();

    for (i = 0; i < fx->n; i++) {
        if (fx->need[i] == 0) {
            continue;
        }

        end->users[end->n] = fx->users[i].user;
        bson_oid_copy(&fx->token, &end->tokens[end->n++]);
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, fx->request->connection->log, 0,
                   "feed effects: %ui entries %s", end->n,
                   end->failed ? "left to the sweeper" : "to clear");

    return end;
}


static void
ngx_http_feed_effects_end_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_effects_end_t  *end = t->data;

    if (end->failed) {
        t->rc = ngx_http_feed_effects_soon(client, t->database, end->users,
                                           end->n, end->tokens, end->now,
                                           &t->error);
        return;
    }

    t->rc = ngx_http_feed_effects_clear(client, t->database, end->users,
                                        end->n, end->tokens, &t->error);
}


/* back from the clear: the write answers */

static void
ngx_http_feed_effects_cleared(ngx_http_feed_mongo_task_t *t)
{
    ngx_http_feed_effects_end_t  *end = t->data;

    if (t->rc != NGX_OK) {
        ngx_log_error(NGX_LOG_WARN, t->request->connection->log, 0,
                      "cache side effects applied, not cleared, the sweeper "
                      "applies them again: %s", t->error.message);
    }

    end->fx->done(end->fx);
}
