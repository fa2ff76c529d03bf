
/*
 * ngx_feed_module: the markers store, the only code that knows the
 * "markers" collection and the "feed:mk:" keys: where each user stopped
 * reading their home timeline.
 *
 * A marker is one document per user, {_id: user, last_read_id: ObjectId,
 * updated_at: Date, version: 1, 2, ...}.  A PUT changes it by one atomic
 * conditional update, "the version is still the one just read"
 * (compare-and-swap): two PUTs at once, from two workers or two nodes,
 * cannot both change the same version, and the one that loses reads the
 * marker again and decides again.  So the version grows by one at each
 * change, and a marker never moves back unless the PUT forces it.
 *
 * Redis holds a copy, the hash "feed:mk:{<user>}" {v: version, j: the
 * answer's JSON, l: last_read_id}, written only by scripts/marker_set.lua,
 * which never replaces a version with an older one
 * (docs/timeline.md#read-marker); version 0 says the user has none.  The
 * timeline's scripts read it for unread counts (scripts/lib/unread.lua):
 * the timeline cache names the key by ngx_http_feed_markers_cache_key().
 * The count they keep is dropped with every change of the copy
 * (marker_set.lua, marker_drop.lua).
 */


#include "ngx_http_feed_markers_store.h"
#include "ngx_http_feed_scripts.h"
#include "ngx_http_feed_keys.h"


#define NGX_HTTP_FEED_MARKERS          "markers"

/* compare-and-swap rounds lost to other PUTs before giving up (503) */
#define NGX_HTTP_FEED_MARKERS_RETRIES  16

/* how long Redis keeps a copy nobody reads */
#define NGX_HTTP_FEED_MARKERS_TTL      "600"


static ngx_int_t ngx_http_feed_markers_read(mongoc_collection_t *coll,
    ngx_http_feed_user_t *user, ngx_http_feed_marker_t *marker,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_markers_insert(mongoc_collection_t *coll,
    ngx_http_feed_marker_op_t *op, bson_error_t *error);
static ngx_int_t ngx_http_feed_markers_swap(mongoc_collection_t *coll,
    ngx_http_feed_marker_op_t *op, ngx_http_feed_marker_t *cur,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_markers_command(ngx_http_request_t *r,
    ngx_http_feed_redis_t *rd, ngx_http_feed_user_t *user,
    ngx_http_feed_redis_pt handler, void *data);


ngx_int_t
ngx_http_feed_markers_get(mongoc_client_t *client, const char *database,
    ngx_http_feed_user_t *user, ngx_http_feed_marker_t *marker,
    bson_error_t *error)
{
    ngx_int_t             rc;
    mongoc_collection_t  *coll;

    coll = mongoc_client_get_collection(client, database,
                                        NGX_HTTP_FEED_MARKERS);

    rc = ngx_http_feed_markers_read(coll, user, marker, error);

    mongoc_collection_destroy(coll);

    return rc;
}


/*
 * The marker as the PUT leaves it: op->marker, op->changed, or
 * op->conflict when If-Match names another version than the current one
 * (no marker yet is version 0).  Each round reads the marker, decides,
 * and writes only if the version is still the one it read.
 */

ngx_int_t
ngx_http_feed_markers_put(mongoc_client_t *client, const char *database,
    ngx_http_feed_marker_op_t *op, bson_error_t *error)
{
    int                     cmp;
    ngx_int_t               rc;
    ngx_uint_t              i;
    mongoc_collection_t    *coll;
    ngx_http_feed_marker_t  cur;

    coll = mongoc_client_get_collection(client, database,
                                        NGX_HTTP_FEED_MARKERS);

    rc = NGX_AGAIN;

    for (i = 0; rc == NGX_AGAIN && i < NGX_HTTP_FEED_MARKERS_RETRIES; i++) {

        rc = ngx_http_feed_markers_read(coll, &op->user, &cur, error);

        if (rc == NGX_ERROR) {
            break;
        }

        if (rc == NGX_DECLINED) {
            if (op->has_if_match && op->if_match != 0) {
                op->conflict = 1;
                rc = NGX_OK;
                break;
            }

            rc = ngx_http_feed_markers_insert(coll, op, error);
            continue;
        }

        if (op->has_if_match && op->if_match != cur.version) {
            op->conflict = 1;
            op->marker = cur;
            break;
        }

        cmp = bson_oid_compare(&op->id, &cur.last_read_id);

        if (cmp == 0 || (cmp < 0 && !op->force)) {
            /* the same post, or backwards without force: unchanged */
            op->marker = cur;
            break;
        }

        rc = ngx_http_feed_markers_swap(coll, op, &cur, error);
    }

    mongoc_collection_destroy(coll);

    if (rc == NGX_AGAIN) {
        bson_set_error(error, MONGOC_ERROR_SERVER,
                       MONGOC_ERROR_DUPLICATE_KEY,
                       "marker of \"%s\" changed %d times meanwhile",
                       op->user.data, NGX_HTTP_FEED_MARKERS_RETRIES);
        return NGX_ERROR;
    }

    return rc;
}


/* NGX_OK with the marker, NGX_DECLINED when the user has none */

static ngx_int_t
ngx_http_feed_markers_read(mongoc_collection_t *coll,
    ngx_http_feed_user_t *user, ngx_http_feed_marker_t *marker,
    bson_error_t *error)
{
    bson_t       filter, doc;
    ngx_int_t    rc;
    bson_iter_t  it;

    bson_init(&filter);
    BSON_APPEND_UTF8(&filter, "_id", user->data);

    rc = ngx_http_feed_mongo_find_one(coll, &filter, NULL, &doc, error);

    bson_destroy(&filter);

    if (rc != NGX_OK) {
        return rc;
    }

    rc = NGX_OK;

    if (bson_iter_init_find(&it, &doc, "last_read_id")
        && BSON_ITER_HOLDS_OID(&it))
    {
        bson_oid_copy(bson_iter_oid(&it), &marker->last_read_id);

    } else {
        bson_set_error(error, MONGOC_ERROR_BSON, MONGOC_ERROR_BSON_INVALID,
                       "marker of \"%s\" has no last_read_id", user->data);
        rc = NGX_ERROR;
    }

    marker->updated_at = 0;

    if (bson_iter_init_find(&it, &doc, "updated_at")
        && BSON_ITER_HOLDS_DATE_TIME(&it))
    {
        marker->updated_at = bson_iter_date_time(&it);
    }

    marker->version = ngx_http_feed_bson_int(&doc, "version");

    bson_destroy(&doc);

    return rc;
}


/* the first marker: NGX_AGAIN when another PUT made it meanwhile */

static ngx_int_t
ngx_http_feed_markers_insert(mongoc_collection_t *coll,
    ngx_http_feed_marker_op_t *op, bson_error_t *error)
{
    bson_t     selector, fields;
    ngx_int_t  rc;

    bson_init(&selector);
    BSON_APPEND_UTF8(&selector, "_id", op->user.data);

    bson_init(&fields);
    BSON_APPEND_OID(&fields, "last_read_id", &op->id);
    BSON_APPEND_DATE_TIME(&fields, "updated_at", op->now);
    BSON_APPEND_INT64(&fields, "version", 1);

    rc = ngx_http_feed_mongo_insert_new(coll, &selector, &fields, error);

    bson_destroy(&fields);
    bson_destroy(&selector);

    if (rc == NGX_OK) {
        op->marker.last_read_id = op->id;
        op->marker.updated_at = op->now;
        op->marker.version = 1;
        op->changed = 1;
    }

    return rc;
}


/*
 * The change, if the marker is still at the version read: NGX_AGAIN when
 * another PUT changed it first
 */

static ngx_int_t
ngx_http_feed_markers_swap(mongoc_collection_t *coll,
    ngx_http_feed_marker_op_t *op, ngx_http_feed_marker_t *cur,
    bson_error_t *error)
{
    bool     ok;
    bson_t   filter, update, set, inc, reply;
    int64_t  matched;

    bson_init(&filter);
    BSON_APPEND_UTF8(&filter, "_id", op->user.data);
    BSON_APPEND_INT64(&filter, "version", cur->version);

    bson_init(&update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
    BSON_APPEND_OID(&set, "last_read_id", &op->id);
    BSON_APPEND_DATE_TIME(&set, "updated_at", op->now);
    bson_append_document_end(&update, &set);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$inc", &inc);
    BSON_APPEND_INT64(&inc, "version", 1);
    bson_append_document_end(&update, &inc);

    ok = mongoc_collection_update_one(coll, &filter, &update, NULL, &reply,
                                      error);

    matched = ok ? ngx_http_feed_bson_int(&reply, "matchedCount") : 0;

    bson_destroy(&reply);
    bson_destroy(&update);
    bson_destroy(&filter);

    if (!ok) {
        return NGX_ERROR;
    }

    if (matched == 0) {
        return NGX_AGAIN;
    }

    op->marker.last_read_id = op->id;
    op->marker.updated_at = op->now;
    op->marker.version = cur->version + 1;
    op->changed = 1;

    return NGX_OK;
}


/* the cached copy: HMGET v j */

ngx_int_t
ngx_http_feed_markers_cache_lookup(ngx_http_request_t *r,
    ngx_http_feed_redis_t *rd, ngx_http_feed_user_t *user,
    ngx_http_feed_redis_pt handler, void *data)
{
    return ngx_http_feed_markers_command(r, rd, user, handler, data);
}


/* NGX_OK with the cached answer and its version, NGX_DECLINED on a miss */

ngx_int_t
ngx_http_feed_markers_cache_parse(redisReply *reply, ngx_str_t *json,
    int64_t *version)
{
    ngx_int_t    n;
    redisReply  *v, *j;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements != 2)
    {
        return NGX_DECLINED;
    }

    v = reply->element[0];
    j = reply->element[1];

    if (v->type != REDIS_REPLY_STRING || j->type != REDIS_REPLY_STRING
        || j->len == 0)
    {
        return NGX_DECLINED;
    }

    n = ngx_atoi((u_char *) v->str, v->len);
    if (n == NGX_ERROR || n == 0) {
        return NGX_DECLINED;
    }

    *version = n;
    json->data = (u_char *) j->str;
    json->len = j->len;

    return NGX_OK;
}


/*
 * The marker's copy, unless Redis has that version or a newer one; m NULL
 * and version 0 for a user without a marker (json empty).  NGX_DECLINED
 * when Redis is not connected; r NULL: fire and forget.
 */

ngx_int_t
ngx_http_feed_markers_cache_set(ngx_http_request_t *r,
    ngx_http_feed_redis_t *rd, ngx_http_feed_user_t *user,
    ngx_http_feed_marker_t *m, ngx_str_t *json,
    ngx_http_feed_redis_pt handler, void *data)
{
    char                        id[25];
    int64_t                     version;
    char                        key[sizeof(NGX_HTTP_FEED_KEY_MARKER) + 1
                                    + NGX_HTTP_FEED_USER_MAX];
    u_char                      value[NGX_INT64_LEN];
    size_t                      argvlen[NGX_HTTP_FEED_SCRIPT_MARKER_SET_ARGC];
    const char                 *argv[NGX_HTTP_FEED_SCRIPT_MARKER_SET_ARGC];
    ngx_http_feed_redis_call_t  call;

    if (ngx_http_feed_redis_run_id(rd) == NULL) {
        return NGX_DECLINED;
    }

    id[0] = '\0';
    version = 0;

    if (m) {
        bson_oid_to_string(&m->last_read_id, id);
        version = m->version;
    }

    ngx_http_feed_redis_call_init(&call, &ngx_http_feed_script_marker_set,
                                  argv, argvlen,
                                  NGX_HTTP_FEED_SCRIPT_MARKER_SET_NKEYS,
                                  NGX_HTTP_FEED_SCRIPT_MARKER_SET_NARGS);

    ngx_http_feed_redis_call_key(&call,
        NGX_HTTP_FEED_SCRIPT_MARKER_SET_KEY_MARKER,
        key, ngx_http_feed_markers_cache_key(key, user));

    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_MARKER_SET_ARG_VERSION,
        value, ngx_sprintf(value, "%L", version) - value);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_MARKER_SET_ARG_JSON, json->data, json->len);
    ngx_http_feed_redis_call_lit(&call,
        NGX_HTTP_FEED_SCRIPT_MARKER_SET_ARG_TTL, NGX_HTTP_FEED_MARKERS_TTL);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_MARKER_SET_ARG_LAST_READ_ID, id, ngx_strlen(id));

    return ngx_http_feed_redis_call(r, rd, &call, handler, data);
}


/*
 * The copy dropped, after a set Redis did not take, and the unread count
 * counted from it (scripts/marker_drop.lua).  NGX_DECLINED when Redis is
 * not connected.
 */

ngx_int_t
ngx_http_feed_markers_cache_drop(ngx_http_request_t *r,
    ngx_http_feed_redis_t *rd, ngx_http_feed_user_t *user,
    ngx_http_feed_redis_pt handler, void *data)
{
    char                        key[sizeof(NGX_HTTP_FEED_KEY_MARKER) + 1
                                    + NGX_HTTP_FEED_USER_MAX];
    size_t                      argvlen[
                                    NGX_HTTP_FEED_SCRIPT_MARKER_DROP_ARGC];
    const char                 *argv[NGX_HTTP_FEED_SCRIPT_MARKER_DROP_ARGC];
    ngx_http_feed_redis_call_t  call;

    if (ngx_http_feed_redis_run_id(rd) == NULL) {
        return NGX_DECLINED;
    }

    ngx_http_feed_redis_call_init(&call, &ngx_http_feed_script_marker_drop,
                                  argv, argvlen,
                                  NGX_HTTP_FEED_SCRIPT_MARKER_DROP_NKEYS,
                                  NGX_HTTP_FEED_SCRIPT_MARKER_DROP_NARGS);

    ngx_http_feed_redis_call_key(&call,
        NGX_HTTP_FEED_SCRIPT_MARKER_DROP_KEY_MARKER,
        key, ngx_http_feed_markers_cache_key(key, user));

    return ngx_http_feed_redis_call(r, rd, &call, handler, data);
}


/* HMGET <key> v j: NGX_DECLINED when Redis is not connected */

static ngx_int_t
ngx_http_feed_markers_command(ngx_http_request_t *r,
    ngx_http_feed_redis_t *rd, ngx_http_feed_user_t *user,
    ngx_http_feed_redis_pt handler, void *data)
{
    char                        key[sizeof(NGX_HTTP_FEED_KEY_MARKER) + 1
                                    + NGX_HTTP_FEED_USER_MAX];
    size_t                      argvlen[4];
    const char                 *argv[4];
    ngx_http_feed_redis_args_t  args;

    if (ngx_http_feed_redis_run_id(rd) == NULL) {
        return NGX_DECLINED;
    }

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "HMGET");
    ngx_http_feed_redis_args_key(&args, key,
                                 ngx_http_feed_markers_cache_key(key, user));
    ngx_http_feed_redis_args_lit(&args, "v");
    ngx_http_feed_redis_args_lit(&args, "j");

    return ngx_http_feed_redis_send_r(r, rd, handler, data, &args);
}


/* whether a set's or a drop's reply says Redis took it */

ngx_int_t
ngx_http_feed_markers_cache_taken(redisReply *reply)
{
    return (reply != NULL && reply->type == REDIS_REPLY_INTEGER)
           ? NGX_OK : NGX_DECLINED;
}


/*
 * "feed:mk:{<user>}" in buf, of NGX_HTTP_FEED_USER_MAX + 16 bytes: also
 * for the timeline's scripts, which read the copy
 */

size_t
ngx_http_feed_markers_cache_key(char *buf, ngx_http_feed_user_t *user)
{
    u_char  *p;

    p = ngx_cpymem(buf, NGX_HTTP_FEED_KEY_MARKER,
                   sizeof(NGX_HTTP_FEED_KEY_MARKER) - 1);
    p = ngx_cpymem(p, user->data, user->len);
    *p++ = '}';

    return p - (u_char *) buf;
}


/* whether a Redis key is a marker's copy (a change a timeline shows not) */

ngx_uint_t
ngx_http_feed_markers_is_cache_key(ngx_str_t *key)
{
    return key->len > sizeof(NGX_HTTP_FEED_KEY_MARKER) - 1
           && ngx_strncmp(key->data, NGX_HTTP_FEED_KEY_MARKER,
                          sizeof(NGX_HTTP_FEED_KEY_MARKER) - 1) == 0;
}
