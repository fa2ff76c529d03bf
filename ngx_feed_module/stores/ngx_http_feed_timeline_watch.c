
/*
 * ngx_feed_module: what each worker knows of the versions of the pull
 * authors' lists, heard on a Redis channel: one watch of one copy of the
 * lists, the single Redis's or a cluster master's (the worker's watches:
 * ngx_http_feed_timeline_watch_set.c).
 *
 * Every change of a pull author's list publishes its new version on
 * "feed:pvc" (scripts/lib/pull_changed.lua).  Each worker subscribes on a
 * connection of its own and keeps, by author, the newest version it heard
 * of.  A worker's copy of a first page merged from pull authors' lists
 * keeps those lists' versions (ngx_http_feed_timeline_local.c): while each
 * is the newest the worker heard of, and the worker is sure it hears, it
 * vouches for the copy, and the read script checks only the user's own
 * keys, as for a user who follows no pull author.
 *
 * Being sure: every 100 ms the worker publishes, on a channel of its own
 * and through its main connection, the time it sent that.  A subscriber
 * gets messages in the order they were published, so when one comes back
 * every change published before it was heard.  The worker vouches only
 * while the last one it heard back was sent less than 300 ms ago: a
 * subscription that stopped delivering (a half-open socket, a stalled
 * server) is noticed within that time, and a pull author's post is still
 * seen within a second.
 *
 * Versions learned from a read's reply are those the script saw, and a
 * message about a later change may or may not have been heard before the
 * reply arrives.  Versions are ordered (their first 16 digits are the
 * server's time), so the newest is kept.  An author not known yet is
 * added only if the subscription stayed the same since the read was sent
 * and no message about that author was passed over meanwhile (messages
 * about authors nobody asked about are not kept): otherwise the version
 * could be older than one heard and dropped.
 *
 * The same connection hears what Redis tracks for the worker: the main
 * connection to the watch's node turns CLIENT TRACKING on, its
 * invalidations sent here (REDIRECT, OPTIN: only the reads of first pages
 * ask to be tracked, with CLIENT CACHING yes), and so are the deletes of
 * posts ("feed:dlc").  Both go to ngx_http_feed_timeline_track.c, and the
 * heartbeat that vouches for the pull authors' versions vouches for them
 * too: a copy of a first page is answered without any command while the
 * watch of its node tracks, heard a heartbeat less than 300 ms ago, and
 * heard nothing of its user since the read that found it current.
 */


#include "ngx_http_feed_timeline_watch.h"
#include "ngx_http_feed_keys.h"


#define NGX_HTTP_FEED_WATCH_FRESH      300     /* ms a heartbeat vouches */

/* the versions of the authors known: reset when there are more */
#define NGX_HTTP_FEED_WATCH_MAX        65536

/* the authors of the last messages passed over, for learn() */
#define NGX_HTTP_FEED_WATCH_SKIPPED    256

/*
 * its channels: the pull lists', its own, invalidations, deletes, and
 * deliveries told while streams are live
 */
#define NGX_HTTP_FEED_WATCH_CHANNELS   5

#define NGX_HTTP_FEED_WATCH_INVALIDATE  "__redis__:invalidate"

/* ms between the tries of CLIENT TRACKING on a node that refused it */
#define NGX_HTTP_FEED_WATCH_RETRY      1000

/* a subscription that hears no heartbeat for this long is made again */
#define NGX_HTTP_FEED_WATCH_DEAF       3000

/* 16 digits of time, a dot, then a nonce */
#define NGX_HTTP_FEED_WATCH_TIME_LEN   16
#define NGX_HTTP_FEED_WATCH_VERSION    (NGX_HTTP_FEED_WATCH_TIME_LEN + 1     \
                                        + NGX_HTTP_FEED_NONCE_LEN)


typedef struct {
    ngx_str_node_t                sn;       /* the author */
    u_char                        version[NGX_HTTP_FEED_WATCH_VERSION];
    size_t                        len;
} ngx_http_feed_watch_author_t;


struct ngx_http_feed_watch_s {
    ngx_http_feed_main_conf_t    *fmcf;
    ngx_http_feed_redis_t        *rd;       /* the subscribed connection */
    ngx_log_t                    *log;

    /*
     * Its node's address, its own (its text and host follow the struct):
     * a cluster forgets a node that left the map, and gives its entry to
     * another, while this may still be here
     */
    ngx_http_feed_redis_conf_t    conf;

    /* the copy of the lists watched: "" or, on a cluster, "{<tag>}" */
    u_char                        copy[NGX_HTTP_FEED_PULL_COPY_LEN];
    ngx_str_t                     copy_str;

    /* where the scripts publish the copy's changes */
    u_char                        channel[NGX_HTTP_FEED_WATCH_CHANNEL_LEN];
    size_t                        channel_len;

    ngx_rbtree_t                  rbtree;
    ngx_rbtree_node_t             sentinel;
    ngx_uint_t                    authors;

    /* moves at each reset: the subscription lost, or the versions */
    ngx_uint_t                    era;
    ngx_uint_t                    born;     /* the era it was made in */
    ngx_uint_t                    channels; /* confirmed this era */

    /* the messages passed over: how many, and the last ones' authors */
    ngx_uint_t                    skipped;
    uint32_t                      skip[NGX_HTTP_FEED_WATCH_SKIPPED];

    ngx_msec_t                    echo;     /* sent time of the last heard */
    ngx_msec_t                    since;    /* when subscribed */
    unsigned                      heard:1;  /* one was heard this era */

    u_char                        own[sizeof(NGX_HTTP_FEED_KEY_WATCH_HEARTBEAT)
                                      + NGX_INT64_LEN * 2
                                      + NGX_HTTP_FEED_PULL_COPY_LEN];
    size_t                        own_len;

    ngx_uint_t                    messages;

    /* where deletes are published, "feed:dlc<copy>" */
    u_char                        deletes[NGX_HTTP_FEED_WATCH_CHANNEL_LEN];
    size_t                        deletes_len;

    /*
     * Tracking: the subscribed connection's id, the main connection's
     * CLIENT TRACKING sent (its reply awaited) or on since that stamp
     */
    int64_t                       client;
    ngx_http_feed_redis_cmd_t    *asking;
    ngx_http_feed_redis_cmd_t    *turning;
    uint64_t                      tracking_stamp;
    ngx_uint_t                    tracking_lost;
    ngx_uint_t                    tracking_era;
    unsigned                      tracking:1;
    unsigned                      refused:1;  /* told in the log once */
    ngx_msec_t                    refused_at; /* the last refusal */

    ngx_uint_t                    invalidations;
    ngx_uint_t                    deleted;

    /* deliveries told: the channel, and the node's live mark */
    u_char                        told[NGX_HTTP_FEED_LIVE_KEY_LEN];
    size_t                        told_len;
    ngx_http_feed_live_t         *live;
    ngx_uint_t                    deliveries;
};


static void ngx_http_feed_timeline_watch_ready(ngx_http_feed_redis_t *rd,
    void *data);
static void ngx_http_feed_timeline_watch_message(void *data,
    redisReply *reply);
static void ngx_http_feed_timeline_watch_changed(ngx_http_feed_watch_t *w,
    redisReply *payload);
static void ngx_http_feed_timeline_watch_reset(ngx_http_feed_watch_t *w,
    const char *why, ngx_uint_t lost);
static ngx_http_feed_watch_author_t *ngx_http_feed_timeline_watch_find(
    ngx_http_feed_watch_t *w, u_char *author, size_t len, uint32_t hash);
static void ngx_http_feed_timeline_watch_set(ngx_http_feed_watch_author_t *a,
    u_char *version, size_t len);
static ngx_int_t ngx_http_feed_timeline_watch_add(ngx_http_feed_watch_t *w,
    u_char *author, size_t alen, uint32_t hash, u_char *version,
    size_t vlen);
static ngx_uint_t ngx_http_feed_timeline_watch_newer(u_char *version,
    ngx_http_feed_watch_author_t *a);
static ngx_uint_t ngx_http_feed_timeline_watch_valid(u_char *version,
    size_t len);
static void ngx_http_feed_timeline_watch_forget(ngx_http_feed_watch_t *w,
    ngx_str_t *author, uint32_t hash);
static void ngx_http_feed_timeline_watch_client(void *data,
    redisReply *reply);
static void ngx_http_feed_timeline_watch_track_on(ngx_http_feed_watch_t *w);
static void ngx_http_feed_timeline_watch_tracking(void *data,
    redisReply *reply);
static void ngx_http_feed_timeline_watch_invalidated(ngx_http_feed_watch_t *w,
    redisReply *payload);
static ngx_uint_t ngx_http_feed_timeline_watch_hears(ngx_http_feed_watch_t *w,
    ngx_http_feed_watch_mark_t *m, ngx_uint_t fresh);
static ngx_int_t ngx_http_feed_timeline_watch_line(u_char **pos,
    u_char *last, ngx_str_t *author, ngx_str_t *version);


/* eras of all watches, so that a mark of one never matches another */
static ngx_uint_t  ngx_http_feed_watch_eras;


/*
 * Where the scripts publish the changes of a copy's lists: "feed:pvc", and
 * on a cluster the copy's "{<tag>}" (buf: NGX_HTTP_FEED_WATCH_CHANNEL_LEN)
 */

size_t
ngx_http_feed_watch_channel(ngx_str_t *copy, u_char *buf)
{
    return ngx_sprintf(buf, NGX_HTTP_FEED_KEY_PULL_CHANNEL "%V", copy) - buf;
}


/*
 * Where a delete of a post is told: "feed:dlc", on a cluster with a
 * master's copy's "{<tag>}" (buf: NGX_HTTP_FEED_WATCH_CHANNEL_LEN)
 */

size_t
ngx_http_feed_watch_deletes_channel(ngx_str_t *copy, u_char *buf)
{
    return ngx_sprintf(buf, NGX_HTTP_FEED_KEY_DELETE_CHANNEL "%V", copy)
           - buf;
}


/*
 * The watch of one copy of the lists: of a single Redis, or of a cluster's
 * master (conf: its address; copy: "{<tag>}").  A connection of its own:
 * once subscribed it can send nothing else.  A change is published on the
 * node of its copy, and so is the heartbeat (routed there by its channel's
 * tag): what is published in order on that node is heard in order here.
 */

ngx_http_feed_watch_t *
ngx_http_feed_watch_create(ngx_cycle_t *cycle,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_redis_conf_t *conf,
    ngx_str_t *copy)
{
    u_char                 *p;
    size_t                  host;
    ngx_http_feed_watch_t  *w;

    if (copy->len > NGX_HTTP_FEED_PULL_COPY_LEN) {
        return NULL;
    }

    host = conf->host ? ngx_strlen(conf->host) + 1 : 0;

    w = ngx_calloc(sizeof(ngx_http_feed_watch_t) + conf->addr_text.len
                   + host, cycle->log);
    if (w == NULL) {
        return NULL;
    }

    w->fmcf = fmcf;
    w->log = cycle->log;
    w->era = ++ngx_http_feed_watch_eras;
    w->born = w->era;

    w->conf = *conf;
    w->conf.addr_text.data = (u_char *) (w + 1);
    p = ngx_cpymem(w->conf.addr_text.data, conf->addr_text.data,
                   conf->addr_text.len);

    if (conf->host) {
        ngx_memcpy(p, conf->host, host);
        w->conf.host = (char *) p;
    }

    ngx_rbtree_init(&w->rbtree, &w->sentinel, ngx_str_rbtree_insert_value);

    w->copy_str.data = w->copy;
    w->copy_str.len = copy->len;
    ngx_memcpy(w->copy, copy->data, copy->len);

    w->channel_len = ngx_http_feed_watch_channel(copy, w->channel);
    w->deletes_len = ngx_http_feed_watch_deletes_channel(copy, w->deletes);
    w->told_len = ngx_http_feed_timeline_live_channel(copy, w->told);

    w->live = ngx_http_feed_timeline_live_create(copy, cycle->log);
    if (w->live == NULL) {
        ngx_free(w);
        return NULL;
    }
    w->client = -1;
    w->own_len = ngx_sprintf(w->own,
                             NGX_HTTP_FEED_KEY_WATCH_HEARTBEAT "%P-%M%V",
                             ngx_pid, ngx_current_msec, copy)
                 - w->own;

    w->rd = ngx_http_feed_redis_create(cycle, &w->conf);
    if (w->rd == NULL
        || ngx_http_feed_redis_on_ready(w->rd,
                                        ngx_http_feed_timeline_watch_ready, w)
           != NGX_OK)
    {
        if (w->rd) {
            ngx_http_feed_redis_destroy(w->rd);
        }

        ngx_http_feed_timeline_live_destroy(w->live);
        ngx_free(w);
        return NULL;
    }

    ngx_log_debug3(NGX_LOG_DEBUG_CORE, w->log, 0,
                   "feed pull watch of %V: \"%*s\"", &conf->addr_text,
                   w->channel_len, w->channel);

    ngx_http_feed_redis_start(w->rd);

    return w;
}


void
ngx_http_feed_watch_destroy(ngx_http_feed_watch_t *w)
{
    ngx_http_feed_timeline_watch_reset(w, "gone", 1);

    if (w->asking) {
        ngx_http_feed_redis_cancel(w->asking);
        w->asking = NULL;
    }

    ngx_http_feed_redis_destroy(w->rd);
    ngx_http_feed_timeline_live_destroy(w->live);
    ngx_free(w);
}


/* the copy it watches */

ngx_str_t *
ngx_http_feed_watch_copy(ngx_http_feed_watch_t *w)
{
    return &w->copy_str;
}


/* the address of the node it is subscribed on */

ngx_str_t *
ngx_http_feed_watch_addr(ngx_http_feed_watch_t *w)
{
    return &w->conf.addr_text;
}


static void
ngx_http_feed_timeline_watch_ready(ngx_http_feed_redis_t *rd, void *data)
{
    ngx_http_feed_watch_t  *w = data;

    const char                 *argv[NGX_HTTP_FEED_WATCH_CHANNELS + 1];
    size_t                      argvlen[NGX_HTTP_FEED_WATCH_CHANNELS + 1];
    ngx_http_feed_redis_args_t  args;

    /* its id, for the main connection's CLIENT TRACKING REDIRECT */

    w->client = -1;

    if (w->asking) {
        ngx_http_feed_redis_cancel(w->asking);
    }

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "CLIENT");
    ngx_http_feed_redis_args_lit(&args, "ID");

    w->asking = ngx_http_feed_redis_send(rd,
                                         ngx_http_feed_timeline_watch_client,
                                         w, &args);

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "SUBSCRIBE");
    ngx_http_feed_redis_args_add(&args, w->channel, w->channel_len);
    ngx_http_feed_redis_args_add(&args, w->own, w->own_len);
    ngx_http_feed_redis_args_lit(&args, NGX_HTTP_FEED_WATCH_INVALIDATE);
    ngx_http_feed_redis_args_add(&args, w->deletes, w->deletes_len);
    ngx_http_feed_redis_args_add(&args, w->told, w->told_len);

    if (ngx_http_feed_redis_subscribe(rd, ngx_http_feed_timeline_watch_message,
                                      w, &args)
        != NGX_OK)
    {
        ngx_log_error(NGX_LOG_ERR, w->log, 0,
                      "feed pull watch cannot subscribe to \"%*s\"",
                      w->channel_len, w->channel);
    }
}


/* a message, a channel's confirmation, or NULL: the connection is gone */

static void
ngx_http_feed_timeline_watch_message(void *data, redisReply *reply)
{
    ngx_http_feed_watch_t  *w = data;

    ngx_int_t    sent;
    redisReply  *kind, *channel, *payload;

    if (reply == NULL) {
        if (w->channels || w->heard) {
            ngx_http_feed_timeline_watch_reset(w, "subscription lost", 1);
        }

        return;
    }

    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3) {
        return;
    }

    kind = reply->element[0];
    channel = reply->element[1];
    payload = reply->element[2];

    if (kind->type != REDIS_REPLY_STRING
        || channel->type != REDIS_REPLY_STRING)
    {
        return;
    }

    if (kind->len == sizeof("subscribe") - 1
        && ngx_strncmp(kind->str, "subscribe", kind->len) == 0)
    {
        w->channels++;
        w->since = ngx_current_msec;

        ngx_log_debug2(NGX_LOG_DEBUG_CORE, w->log, 0,
                       "feed pull watch subscribed to \"%*s\"",
                       (size_t) channel->len, channel->str);
        return;
    }

    if ((size_t) channel->len == sizeof(NGX_HTTP_FEED_WATCH_INVALIDATE) - 1
        && ngx_strncmp(channel->str, NGX_HTTP_FEED_WATCH_INVALIDATE,
                       channel->len) == 0)
    {
        ngx_http_feed_timeline_watch_invalidated(w, payload);
        return;
    }

    if (payload->type != REDIS_REPLY_STRING) {
        return;
    }

    if ((size_t) channel->len == w->deletes_len
        && ngx_strncmp(channel->str, w->deletes, w->deletes_len) == 0)
    {
        /* a post being deleted may be in any copy */
        w->deleted++;

        if (payload->len == 24) {
            ngx_http_feed_track_deleted((u_char *) payload->str);

        } else {
            ngx_http_feed_track_all("a post deleted");
        }

        return;
    }

    if ((size_t) channel->len == w->told_len
        && ngx_strncmp(channel->str, w->told, w->told_len) == 0)
    {
        w->deliveries++;
        ngx_http_feed_track_told((u_char *) payload->str, payload->len);
        return;
    }

    if ((size_t) channel->len == w->own_len
        && ngx_strncmp(channel->str, w->own, w->own_len) == 0)
    {
        sent = ngx_atoi((u_char *) payload->str, payload->len);

        if (sent == NGX_ERROR) {
            return;
        }

        if (!w->heard || (ngx_msec_int_t) ((ngx_msec_t) sent - w->echo) > 0) {
            w->echo = (ngx_msec_t) sent;
        }

        w->heard = 1;
        return;
    }

    w->messages++;
    ngx_http_feed_timeline_watch_changed(w, payload);
}


/* "author version": the newest version of a known author's list */

static void
ngx_http_feed_timeline_watch_changed(ngx_http_feed_watch_t *w,
    redisReply *payload)
{
    u_char                        *p, *last;
    uint32_t                       hash;
    ngx_str_t                      author, version;
    ngx_http_feed_watch_author_t  *a;

    ngx_int_t                      rc;

    p = (u_char *) payload->str;
    last = p + payload->len;

    rc = ngx_http_feed_timeline_watch_line(&p, last, &author, &version);

    if (rc == NGX_ERROR) {
        return;
    }

    /* the readers of live streams merged from it read again */
    ngx_http_feed_track_author(author.data, author.len);

    hash = ngx_crc32_short(author.data, author.len);

    a = ngx_http_feed_timeline_watch_find(w, author.data, author.len, hash);

    if (a && rc == NGX_OK
        && ngx_http_feed_timeline_watch_newer(version.data, a))
    {
        ngx_log_debug4(NGX_LOG_DEBUG_CORE, w->log, 0,
                       "feed pull watch: \"%V\" is at %V, was %*s", &author,
                       &version, a->len, a->version);

        ngx_http_feed_timeline_watch_set(a, version.data, version.len);
        return;
    }

    if (a && a->len == version.len
        && ngx_memcmp(a->version, version.data, version.len) == 0)
    {
        return;
    }

    /*
     * Unknown, gone ("-"), of another form, or not later than the one
     * known (a clock stepped back): no version of it is to be trusted.
     */

    ngx_http_feed_timeline_watch_forget(w, &author, hash);
}


/* an author's versions are not known, nor learned from reads sent before */

static void
ngx_http_feed_timeline_watch_forget(ngx_http_feed_watch_t *w,
    ngx_str_t *author, uint32_t hash)
{
    ngx_http_feed_watch_author_t  *a;

    a = ngx_http_feed_timeline_watch_find(w, author->data, author->len, hash);

    if (a) {
        ngx_log_debug1(NGX_LOG_DEBUG_CORE, w->log, 0,
                       "feed pull watch forgets \"%V\"", author);

        ngx_rbtree_delete(&w->rbtree, &a->sn.node);
        ngx_free(a);
        w->authors--;
    }

    w->skip[w->skipped++ % NGX_HTTP_FEED_WATCH_SKIPPED] = hash;
}


/*
 * Whether the worker can vouch for a copy merged from these lists
 * ("author version\n" each): it hears every change, and none of theirs
 * since the copy was made.
 */

ngx_uint_t
ngx_http_feed_watch_vouch(ngx_http_feed_watch_t *w, ngx_str_t *lists)
{
    u_char                        *p, *last;
    ngx_str_t                      author, version;
    ngx_http_feed_watch_author_t  *a;

    if (lists->len == 0 || w->channels < NGX_HTTP_FEED_WATCH_CHANNELS
        || !w->heard
        || (ngx_msec_int_t) (ngx_current_msec - w->echo)
           > NGX_HTTP_FEED_WATCH_FRESH)
    {
        return 0;
    }

    p = lists->data;
    last = p + lists->len;

    while (p < last) {
        if (ngx_http_feed_timeline_watch_line(&p, last, &author, &version)
            != NGX_OK)
        {
            return 0;
        }

        a = ngx_http_feed_timeline_watch_find(w, author.data, author.len,
                                     ngx_crc32_short(author.data, author.len));

        if (a == NULL || a->len != version.len
            || ngx_memcmp(a->version, version.data, version.len) != 0)
        {
            return 0;
        }
    }

    return 1;
}


/* where the watch is when a read is sent: learn() needs it */

void
ngx_http_feed_watch_mark(ngx_http_feed_watch_t *w,
    ngx_http_feed_watch_mark_t *m)
{
    if (w->channels < NGX_HTTP_FEED_WATCH_CHANNELS) {
        m->era = 0;
        m->skipped = 0;
        return;
    }

    m->era = w->era;
    m->skipped = w->skipped;
}


/* the versions a read's reply saw ("author version\n" each) */

void
ngx_http_feed_watch_learn(ngx_http_feed_watch_t *w, ngx_str_t *lists,
    ngx_http_feed_watch_mark_t *m)
{
    u_char                        *p, *last;
    uint32_t                       hash;
    ngx_int_t                      rc;
    ngx_uint_t                     i, fresh;
    ngx_str_t                      author, version;
    ngx_http_feed_watch_author_t  *a;

    /*
     * Not a mark of another watch of the same number (a node's number is
     * given to another once the first is forgotten): its versions are of
     * other copies
     */

    if (m->era < w->born) {
        return;
    }

    /* new authors only while what was passed over since is all known */

    fresh = (m->era != 0 && m->era == w->era
             && w->skipped - m->skipped <= NGX_HTTP_FEED_WATCH_SKIPPED);

    p = lists->data;
    last = p + lists->len;

    while (p < last) {
        rc = ngx_http_feed_timeline_watch_line(&p, last, &author, &version);

        if (rc == NGX_ERROR) {
            return;
        }

        hash = ngx_crc32_short(author.data, author.len);

        if (rc == NGX_DECLINED) {
            /* written by an older module, unannounced: not to be trusted */
            ngx_http_feed_timeline_watch_forget(w, &author, hash);
            continue;
        }

        a = ngx_http_feed_timeline_watch_find(w, author.data, author.len,
                                              hash);
        if (a) {
            if (ngx_http_feed_timeline_watch_newer(version.data, a)) {
                ngx_http_feed_timeline_watch_set(a, version.data,
                                                 version.len);
            }

            continue;
        }

        if (!fresh) {
            continue;
        }

        for (i = m->skipped; i != w->skipped; i++) {
            if (w->skip[i % NGX_HTTP_FEED_WATCH_SKIPPED] == hash) {
                break;
            }
        }

        if (i != w->skipped) {
            continue;
        }

        if (w->authors == NGX_HTTP_FEED_WATCH_MAX) {
            ngx_http_feed_timeline_watch_reset(w, "full", 0);
            return;
        }

        if (ngx_http_feed_timeline_watch_add(w, author.data, author.len, hash,
                                             version.data, version.len)
            != NGX_OK)
        {
            return;
        }
    }
}


/* for feed_status: added to what the other watches count */

void
ngx_http_feed_watch_count(ngx_http_feed_watch_t *w,
    ngx_http_feed_watch_counts_t *c)
{
    ngx_msec_int_t  ago;

    ago = w->heard ? (ngx_msec_int_t) (ngx_current_msec - w->echo) : -1;

    /* the oldest heartbeat heard; -1 when one watch heard none yet */

    if (c->watches == 0 || ago < 0
        || (c->heard_ms_ago >= 0 && ago > c->heard_ms_ago))
    {
        c->heard_ms_ago = ago;
    }

    c->watches++;
    c->subscribed += (w->channels >= NGX_HTTP_FEED_WATCH_CHANNELS);
    c->authors += w->authors;
    c->messages += w->messages;
    c->passed_over += w->skipped;
    c->tracking += w->tracking;
    c->invalidations += w->invalidations;
    c->deleted += w->deleted;
    c->deliveries += w->deliveries;
}


/*
 * The time it is sent, published on the watch's own channel, through the
 * main connection (on a cluster, to the node of the channel's tag), every
 * NGX_HTTP_FEED_WATCH_BEAT.  A subscription that hears none for long is
 * made again.
 */

void
ngx_http_feed_watch_beat(ngx_http_feed_watch_t *w)
{
    u_char                      now[NGX_INT_T_LEN];
    const char                 *argv[3];
    size_t                      argvlen[3];
    ngx_http_feed_redis_args_t  args;

    if (w->channels >= NGX_HTTP_FEED_WATCH_CHANNELS
        && ngx_http_feed_redis_state(w->fmcf->redis_client)
           == NGX_HTTP_FEED_REDIS_UP
        && (ngx_msec_int_t) (ngx_current_msec - (w->heard ? w->echo
                                                           : w->since))
           > NGX_HTTP_FEED_WATCH_DEAF)
    {
        /* a half-open socket, or a server that stopped delivering */

        ngx_log_error(NGX_LOG_WARN, w->log, 0,
                      "feed pull watch heard no heartbeat for %M ms, "
                      "subscribing again", (ngx_msec_t)
                      NGX_HTTP_FEED_WATCH_DEAF);

        ngx_http_feed_timeline_watch_reset(w, "deaf", 1);
        ngx_http_feed_redis_reconnect(w->rd, "no heartbeat heard");
    }

    /* tracking lost with a connection made again: turned on again */

    if (w->tracking && w->tracking_lost != ngx_http_feed_track_lost()) {
        w->tracking = 0;
    }

    /*
     * tracking turned on; on a node that refused it, again after a second,
     * not at each heartbeat
     */

    if (w->fmcf->cache_tracking
        && w->channels >= NGX_HTTP_FEED_WATCH_CHANNELS && w->client >= 0
        && !w->tracking && w->turning == NULL
        && (!w->refused
            || ngx_current_msec - w->refused_at >= NGX_HTTP_FEED_WATCH_RETRY))
    {
        ngx_http_feed_timeline_watch_track_on(w);
    }

    /* the node's live mark, renewed once subscribed to what it tells */

    if (w->channels >= NGX_HTTP_FEED_WATCH_CHANNELS) {
        ngx_http_feed_timeline_live_beat(w->live, w->fmcf, 0);
    }

    if (w->channels >= NGX_HTTP_FEED_WATCH_CHANNELS) {
        ngx_http_feed_redis_args_init(&args, argv, argvlen);
        ngx_http_feed_redis_args_lit(&args, "PUBLISH");
        ngx_http_feed_redis_args_key(&args, w->own, w->own_len);
        ngx_http_feed_redis_args_add(&args, now,
                                     ngx_sprintf(now, "%M", ngx_current_msec)
                                     - now);

        (void) ngx_http_feed_redis_send(w->fmcf->redis_client, NULL, NULL,
                                        &args);
    }
}


/*
 * The worker began to stream: the node's live mark is set now; or it
 * stopped: the mark's era is forgotten
 */

void
ngx_http_feed_watch_live(ngx_http_feed_watch_t *w, ngx_uint_t on)
{
    if (!on) {
        ngx_http_feed_timeline_live_forget(w->live);
        return;
    }

    if (w->channels >= NGX_HTTP_FEED_WATCH_CHANNELS) {
        ngx_http_feed_timeline_live_beat(w->live, w->fmcf, 1);
    }
}


/*
 * Whether a stream's read of this mark misses nothing since: the watch
 * heard all its node told, deliveries included (the live mark was set
 * before the read).  Not whether the user's keys changed, as for a copy
 * of a page: the watch tells the streams' readers of each change
 * (ngx_http_feed_timeline_track.c's hooks), and a change of the list
 * itself that a copy hears is a delivery they are told.
 */

ngx_uint_t
ngx_http_feed_watch_live_vouch(ngx_http_feed_watch_t *w,
    ngx_http_feed_watch_mark_t *m)
{
    return ngx_http_feed_timeline_watch_hears(w, m, 0)
           && ngx_http_feed_timeline_live_vouch(w->live, m->stamp);
}


/*
 * Everything known is forgotten: nothing is vouched for until relearned.
 * lost: the subscription is gone too, and must be made and heard again.
 */

static void
ngx_http_feed_timeline_watch_reset(ngx_http_feed_watch_t *w, const char *why,
    ngx_uint_t lost)
{
    ngx_rbtree_node_t             *node;
    ngx_http_feed_watch_author_t  *a;

    ngx_log_debug2(NGX_LOG_DEBUG_CORE, w->log, 0,
                   "feed pull watch reset: %s, %ui authors", why, w->authors);

    while (w->rbtree.root != w->rbtree.sentinel) {
        node = ngx_rbtree_min(w->rbtree.root, w->rbtree.sentinel);
        ngx_rbtree_delete(&w->rbtree, node);

        a = (ngx_http_feed_watch_author_t *) node;
        ngx_free(a);
    }

    w->authors = 0;
    w->era = ++ngx_http_feed_watch_eras;

    if (lost) {
        w->channels = 0;
        w->heard = 0;
        w->tracking = 0;

        if (w->turning) {
            ngx_http_feed_redis_cancel(w->turning);
            w->turning = NULL;
        }
    }
}


/* the subscribed connection's id, asked before it subscribes */

static void
ngx_http_feed_timeline_watch_client(void *data, redisReply *reply)
{
    ngx_http_feed_watch_t  *w = data;

    w->asking = NULL;

    if (reply == NULL || reply->type != REDIS_REPLY_INTEGER) {
        return;
    }

    w->client = reply->integer;

    ngx_log_debug1(NGX_LOG_DEBUG_CORE, w->log, 0,
                   "feed watch: client id %L", w->client);
}


/*
 * The main connection to the watch's node tracks the keys of the reads
 * that ask it (OPTIN), its invalidations sent to the watch's connection.
 * Tracking off first: a connection that tracked for an older watch's
 * connection forgets what it tracked.  The reads sent after these are
 * tracked: the watch vouches for copies read after its stamp.
 */

static void
ngx_http_feed_timeline_watch_track_on(ngx_http_feed_watch_t *w)
{
    u_char                      id[NGX_INT64_LEN];
    const char                 *argv[6];
    size_t                      argvlen[6];
    ngx_http_feed_redis_args_t  args;

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "CLIENT");
    ngx_http_feed_redis_args_lit(&args, "TRACKING");
    ngx_http_feed_redis_args_lit(&args, "off");
    ngx_http_feed_redis_args_route(&args, w->own, w->own_len);

    (void) ngx_http_feed_redis_send(w->fmcf->redis_client, NULL, NULL,
                                    &args);

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "CLIENT");
    ngx_http_feed_redis_args_lit(&args, "TRACKING");
    ngx_http_feed_redis_args_lit(&args, "on");
    ngx_http_feed_redis_args_lit(&args, "REDIRECT");
    ngx_http_feed_redis_args_add(&args, id,
                                 ngx_sprintf(id, "%L", w->client) - id);
    ngx_http_feed_redis_args_lit(&args, "OPTIN");
    ngx_http_feed_redis_args_route(&args, w->own, w->own_len);

    w->tracking_lost = ngx_http_feed_track_lost();
    w->tracking_era = w->era;
    w->tracking_stamp = ngx_http_feed_track_stamp();

    w->turning = ngx_http_feed_redis_send(w->fmcf->redis_client,
                                          ngx_http_feed_timeline_watch_tracking,
                                          w, &args);

    ngx_log_debug2(NGX_LOG_DEBUG_CORE, w->log, 0,
                   "feed watch: tracking to client %L, stamp %uL",
                   w->client, w->tracking_stamp);
}


static void
ngx_http_feed_timeline_watch_tracking(void *data, redisReply *reply)
{
    ngx_http_feed_watch_t  *w = data;

    w->turning = NULL;

    if (reply == NULL) {
        return;
    }

    if (reply->type != REDIS_REPLY_STATUS) {
        w->refused_at = ngx_current_msec;

        if (!w->refused) {
            ngx_log_error(NGX_LOG_WARN, w->log, 0,
                          "feed watch: redis refused CLIENT TRACKING: %*s, "
                          "every read asks redis",
                          (size_t) reply->len, reply->str);
            w->refused = 1;
        }

        return;
    }

    /* the subscription or the connections changed meanwhile: again */

    if (w->tracking_era != w->era
        || w->tracking_lost != ngx_http_feed_track_lost())
    {
        return;
    }

    w->tracking = 1;

    ngx_log_debug1(NGX_LOG_DEBUG_CORE, w->log, 0,
                   "feed watch: tracking on, stamp %uL", w->tracking_stamp);
}


/*
 * Keys Redis stopped tracking because they changed, or NULL: all of them
 * (FLUSHALL, FLUSHDB).  A key named "feed:<kind>:{<user>}" is a user's.
 */

static void
ngx_http_feed_timeline_watch_invalidated(ngx_http_feed_watch_t *w,
    redisReply *payload)
{
    u_char      *p, *last, *open;
    size_t       i;
    ngx_str_t    name;
    redisReply  *key;

    w->invalidations++;

    if (payload->type != REDIS_REPLY_ARRAY) {
        ngx_http_feed_track_all("redis flushed");
        return;
    }

    for (i = 0; i < payload->elements; i++) {
        key = payload->element[i];

        if (key->type != REDIS_REPLY_STRING) {
            continue;
        }

        p = (u_char *) key->str;
        last = p + key->len;

        open = ngx_strlchr(p, last, '{');
        if (open == NULL) {
            continue;
        }

        p = ngx_strlchr(open + 1, last, '}');
        if (p == NULL) {
            continue;
        }

        name.data = (u_char *) key->str;
        name.len = key->len;

        ngx_http_feed_track_changed(open + 1, p - open - 1, &name);
    }
}


/*
 * Whether a copy found current by a read with this mark is still: the
 * watch tracked for that read, heard a heartbeat lately (fresh: a copy
 * answered without Redis; a live stream's reader only needs the watch
 * to be the one that tracked, as a late message still comes), and heard
 * nothing of its user since.
 */

ngx_uint_t
ngx_http_feed_watch_tracks(ngx_http_feed_watch_t *w,
    ngx_http_feed_user_t *user, ngx_http_feed_watch_mark_t *m,
    ngx_uint_t fresh)
{
    return ngx_http_feed_timeline_watch_hears(w, m, fresh)
           && ngx_http_feed_track_current(user, m->stamp);
}


/*
 * Whether the watch has heard all its node told since the read of this
 * mark: tracking on since before it, subscribed all along, a heartbeat
 * heard (lately, when fresh)
 */

static ngx_uint_t
ngx_http_feed_timeline_watch_hears(ngx_http_feed_watch_t *w,
    ngx_http_feed_watch_mark_t *m, ngx_uint_t fresh)
{
    return w->tracking && m->era == w->era && m->stamp > w->tracking_stamp
           && w->tracking_lost == ngx_http_feed_track_lost()
           && w->channels >= NGX_HTTP_FEED_WATCH_CHANNELS && w->heard
           && !(fresh
                && (ngx_msec_int_t) (ngx_current_msec - w->echo)
                   > NGX_HTTP_FEED_WATCH_FRESH);
}


/*
 * A read that the watch's node will track: its stamp in the mark.  Not
 * after a connection was made again, until the watch turned tracking on
 * again on it (the next heartbeat).
 */

ngx_uint_t
ngx_http_feed_watch_track(ngx_http_feed_watch_t *w,
    ngx_http_feed_watch_mark_t *m)
{
    if (!w->tracking || m->era != w->era
        || w->tracking_lost != ngx_http_feed_track_lost())
    {
        m->stamp = 0;
        return 0;
    }

    m->stamp = ngx_http_feed_track_stamp();

    return m->stamp != 0;
}


static ngx_http_feed_watch_author_t *
ngx_http_feed_timeline_watch_find(ngx_http_feed_watch_t *w, u_char *author,
    size_t len, uint32_t hash)
{
    ngx_str_t  key;

    key.data = author;
    key.len = len;

    return (ngx_http_feed_watch_author_t *)
               ngx_str_rbtree_lookup(&w->rbtree, &key, hash);
}


static ngx_int_t
ngx_http_feed_timeline_watch_add(ngx_http_feed_watch_t *w, u_char *author,
    size_t alen, uint32_t hash, u_char *version, size_t vlen)
{
    ngx_http_feed_watch_author_t  *a;

    a = ngx_alloc(sizeof(ngx_http_feed_watch_author_t) + alen, w->log);
    if (a == NULL) {
        return NGX_ERROR;
    }

    a->sn.node.key = hash;
    a->sn.str.data = (u_char *) (a + 1);
    a->sn.str.len = alen;
    ngx_memcpy(a->sn.str.data, author, alen);

    ngx_http_feed_timeline_watch_set(a, version, vlen);

    ngx_rbtree_insert(&w->rbtree, &a->sn.node);
    w->authors++;

    return NGX_OK;
}


static void
ngx_http_feed_timeline_watch_set(ngx_http_feed_watch_author_t *a,
    u_char *version, size_t len)
{
    ngx_memcpy(a->version, version, len);
    a->len = len;
}


/* versions are ordered by their time: later, or the same time elsewhere */

static ngx_uint_t
ngx_http_feed_timeline_watch_newer(u_char *version,
    ngx_http_feed_watch_author_t *a)
{
    return ngx_memcmp(version, a->version, NGX_HTTP_FEED_WATCH_TIME_LEN) > 0;
}


static ngx_uint_t
ngx_http_feed_timeline_watch_valid(u_char *version, size_t len)
{
    size_t  i;

    if (len <= NGX_HTTP_FEED_WATCH_TIME_LEN + 1
        || len > NGX_HTTP_FEED_WATCH_VERSION
        || version[NGX_HTTP_FEED_WATCH_TIME_LEN] != '.')
    {
        return 0;
    }

    for (i = 0; i < NGX_HTTP_FEED_WATCH_TIME_LEN; i++) {
        if (version[i] < '0' || version[i] > '9') {
            return 0;
        }
    }

    return 1;
}


/*
 * "author version\n" (or without the newline at the end of a message):
 * NGX_OK, NGX_DECLINED for a version of another form ("-": the list is
 * gone), NGX_ERROR when not even the author can be read.
 */

static ngx_int_t
ngx_http_feed_timeline_watch_line(u_char **pos, u_char *last,
    ngx_str_t *author, ngx_str_t *version)
{
    u_char  *p, *sp, *nl;

    p = *pos;

    nl = ngx_strlchr(p, last, '\n');
    if (nl == NULL) {
        nl = last;
    }

    sp = ngx_strlchr(p, nl, ' ');
    if (sp == NULL) {
        return NGX_ERROR;
    }

    author->data = p;
    author->len = sp - p;
    version->data = sp + 1;
    version->len = nl - (sp + 1);

    *pos = (nl < last) ? nl + 1 : last;

    if (!ngx_http_feed_user_valid(author->data, author->len)) {
        return NGX_ERROR;
    }

    return ngx_http_feed_timeline_watch_valid(version->data, version->len)
           ? NGX_OK : NGX_DECLINED;
}
