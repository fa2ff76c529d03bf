
/*
 * ngx_feed_module: every error the API answers, and how it is answered.
 */


#include "ngx_http_feed_errors.h"
#include "ngx_http_feed_json.h"
#include "ngx_http_feed_mongo.h"


#define ngx_http_feed_err(name, status, code, message)                       \
    const ngx_http_feed_error_t  ngx_http_feed_err_##name =                   \
        { status, code, message }


ngx_http_feed_err(user_id, NGX_HTTP_BAD_REQUEST, "invalid_user_id",
    "user ids are 1 to 64 of A-Z a-z 0-9 _ . -");
ngx_http_feed_err(post_id, NGX_HTTP_BAD_REQUEST, "invalid_post_id",
    "post ids are 24 lowercase hexadecimal digits");
ngx_http_feed_err(limit, NGX_HTTP_BAD_REQUEST, "invalid_limit",
    "limit is a number from 1 to 100");
ngx_http_feed_err(source_limit, NGX_HTTP_BAD_REQUEST, "invalid_limit",
    "limit is a number from 1 to 100000");
ngx_http_feed_err(cursor, NGX_HTTP_BAD_REQUEST, "invalid_cursor",
    "cursor is not one this server gave out");
ngx_http_feed_err(self_follow, NGX_HTTP_BAD_REQUEST, "self_follow",
    "a user cannot follow themselves");
ngx_http_feed_err(self_block, NGX_HTTP_BAD_REQUEST, "self_block",
    "a user cannot block themselves");
ngx_http_feed_err(self_mute, NGX_HTTP_BAD_REQUEST, "self_mute",
    "a user cannot mute themselves");
ngx_http_feed_err(method, NGX_HTTP_NOT_ALLOWED, "method_not_allowed",
    "method not allowed here");
ngx_http_feed_err(status_method, NGX_HTTP_NOT_ALLOWED, "method_not_allowed",
    "only GET and HEAD are allowed");
ngx_http_feed_err(media_type, NGX_HTTP_UNSUPPORTED_MEDIA_TYPE,
    "unsupported_media_type", "the request must be application/json");
ngx_http_feed_err(idempotency_key, NGX_HTTP_BAD_REQUEST,
    "invalid_idempotency_key", "Idempotency-Key is given once, 1 to 64 "
    "characters of UTF-8 without control characters");

ngx_http_feed_err(not_json, NGX_HTTP_BAD_REQUEST, "invalid_json",
    "the request is not a JSON object");
ngx_http_feed_err(not_utf8, NGX_HTTP_BAD_REQUEST, "invalid_utf8",
    "the request is not valid UTF-8");
ngx_http_feed_err(number, NGX_HTTP_BAD_REQUEST, "invalid_json",
    "numbers must be finite JSON numbers");
ngx_http_feed_err(data, NGX_HTTP_BAD_REQUEST, "invalid_data",
    "data must be a JSON object without keys that start with $ or contain "
    "a dot");
ngx_http_feed_err(data_size, NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
    "data_too_large", "data is too large");
ngx_http_feed_err(body, NGX_HTTP_BAD_REQUEST, "invalid_body",
    "body must be a non-empty string");
ngx_http_feed_err(body_size, NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
    "body_too_long", "body is too long");
ngx_http_feed_err(field, NGX_HTTP_BAD_REQUEST, "unknown_field",
    "only body and data may be given");
ngx_http_feed_err(field_twice, NGX_HTTP_BAD_REQUEST, "duplicate_field",
    "a field is given twice");

ngx_http_feed_err(marker_id, NGX_HTTP_BAD_REQUEST, "invalid_last_read_id",
    "last_read_id is a post id, 24 lowercase hexadecimal digits");
ngx_http_feed_err(marker_force, NGX_HTTP_BAD_REQUEST, "invalid_force",
    "force is true or false");
ngx_http_feed_err(marker_field, NGX_HTTP_BAD_REQUEST, "unknown_field",
    "only last_read_id and force may be given");
ngx_http_feed_err(marker_size, NGX_HTTP_BAD_REQUEST, "request_too_large",
    "the request is at most 1024 bytes");
ngx_http_feed_err(if_match, NGX_HTTP_BAD_REQUEST, "invalid_if_match",
    "If-Match is one version, a number as the marker's ETag gives it");

ngx_http_feed_err(seen_json, NGX_HTTP_BAD_REQUEST, "invalid_json",
    "the request is a JSON array of post ids");
ngx_http_feed_err(seen_id, NGX_HTTP_BAD_REQUEST, "invalid_post_id",
    "post ids are strings of 24 lowercase hexadecimal digits");
ngx_http_feed_err(seen_many, NGX_HTTP_BAD_REQUEST, "too_many_ids",
    "the request has at most 500 post ids");
ngx_http_feed_err(seen_size, NGX_HTTP_BAD_REQUEST, "request_too_large",
    "the request is at most 16384 bytes");
ngx_http_feed_err(unseen, NGX_HTTP_BAD_REQUEST, "invalid_unseen",
    "unseen is 0 or 1");
ngx_http_feed_err(wait, NGX_HTTP_BAD_REQUEST, "invalid_wait",
    "wait is 0 to 60 seconds, with since_id");
ngx_http_feed_err(event_id, NGX_HTTP_BAD_REQUEST, "invalid_post_id",
    "Last-Event-ID is a post id, 24 lowercase hexadecimal digits");

ngx_http_feed_err(unauthorized, NGX_HTTP_UNAUTHORIZED, "unauthorized",
    "no authenticated user");
ngx_http_feed_err(forbidden, NGX_HTTP_FORBIDDEN, "forbidden",
    "the authenticated user may only change their own data");

ngx_http_feed_err(blocked_follow, NGX_HTTP_FORBIDDEN, "blocked",
    "one of the two users blocks the other");
ngx_http_feed_err(blocked_reader, NGX_HTTP_FORBIDDEN, "blocked",
    "this user blocks the authenticated user");

ngx_http_feed_err(no_post, NGX_HTTP_NOT_FOUND, "not_found",
    "no such post");
ngx_http_feed_err(no_user_post, NGX_HTTP_NOT_FOUND, "not_found",
    "no such post of this user");
ngx_http_feed_err(key_post_gone, NGX_HTTP_NOT_FOUND, "not_found",
    "the post made with this Idempotency-Key was deleted");

ngx_http_feed_err(no_marker, NGX_HTTP_NOT_FOUND, "not_found",
    "this user has no read marker");

ngx_http_feed_err(version_conflict, NGX_HTTP_CONFLICT, "version_conflict",
    "the marker's version is not the one If-Match gives");
ngx_http_feed_err(key_reused, NGX_HTTP_FEED_UNPROCESSABLE,
    "idempotency_key_reused",
    "this Idempotency-Key was used for another post within the hour");

ngx_http_feed_err(db_busy, NGX_HTTP_SERVICE_UNAVAILABLE, "unavailable",
    "too many requests waiting for the database");
ngx_http_feed_err(db_down, NGX_HTTP_SERVICE_UNAVAILABLE, "unavailable",
    "the database is unavailable");
ngx_http_feed_err(db, NGX_HTTP_INTERNAL_SERVER_ERROR, "internal",
    "database error");
ngx_http_feed_err(cache_down, NGX_HTTP_SERVICE_UNAVAILABLE, "unavailable",
    "the cache is unavailable, nothing was deleted");
ngx_http_feed_err(cache_pending, NGX_HTTP_SERVICE_UNAVAILABLE, "unavailable",
    "the change is stored, the cache has yet to take it: retry");
ngx_http_feed_err(timeline_down, NGX_HTTP_SERVICE_UNAVAILABLE, "unavailable",
    "the timeline cannot be built now");
ngx_http_feed_err(seen_down, NGX_HTTP_SERVICE_UNAVAILABLE, "unavailable",
    "the cache is unavailable, nothing was kept: retry");
ngx_http_feed_err(unseen_down, NGX_HTTP_SERVICE_UNAVAILABLE, "unavailable",
    "what the user saw is unknown now: retry, or read without unseen");
ngx_http_feed_err(streams_full, NGX_HTTP_SERVICE_UNAVAILABLE, "unavailable",
    "too many live streams here now: retry");
ngx_http_feed_err(stream_down, NGX_HTTP_SERVICE_UNAVAILABLE, "unavailable",
    "live timelines need the cache (feed_redis)");
ngx_http_feed_err(internal, NGX_HTTP_INTERNAL_SERVER_ERROR, "internal",
    "internal error");


/* the answer; a 503 tells the client to try again shortly */

ngx_int_t
ngx_http_feed_error(ngx_http_request_t *r, const ngx_http_feed_error_t *err)
{
    static ngx_str_t  retry = ngx_string("1");

    if (err->status == NGX_HTTP_SERVICE_UNAVAILABLE
        && ngx_http_feed_add_header(r, "Retry-After", &retry) != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (err->status == NGX_HTTP_FEED_UNPROCESSABLE) {
        ngx_str_set(&r->headers_out.status_line, "422 Unprocessable Entity");
    }

    return ngx_http_feed_send_error(r, err->status, err->code, err->message);
}


/*
 * 422 for a write past a limit (feed_follow_max, feed_filter_max): text
 * has one %L, the limit
 */

ngx_int_t
ngx_http_feed_over_max(ngx_http_request_t *r, const char *code,
    const char *text, int64_t max)
{
    u_char  *msg, *p;

    msg = ngx_pnalloc(r->pool, ngx_strlen(text) + NGX_INT64_LEN);
    if (msg == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p = ngx_sprintf(msg, text, max);
    *p = '\0';

    /* nginx has no reason phrase of its own for 422 */
    ngx_str_set(&r->headers_out.status_line, "422 Unprocessable Entity");

    return ngx_http_feed_send_error(r, 422, code, (char *) msg);
}


/* a request refused before its body was read: discard the body first */

ngx_int_t
ngx_http_feed_refuse(ngx_http_request_t *r, const ngx_http_feed_error_t *err)
{
    ngx_int_t  rc;

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    return ngx_http_feed_error(r, err);
}


/* 405 with the methods the location takes; err: its wording, or NULL */

ngx_int_t
ngx_http_feed_not_allowed(ngx_http_request_t *r, char *allow,
    const ngx_http_feed_error_t *err)
{
    ngx_str_t  value;

    value.data = (u_char *) allow;
    value.len = ngx_strlen(allow);

    if (ngx_http_feed_add_header(r, "Allow", &value) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_feed_refuse(r, err ? err : &ngx_http_feed_err_method);
}


/*
 * A thread task could not be posted: the thread pool's queue is full.  The
 * client may try again shortly (503 with Retry-After).
 */

ngx_int_t
ngx_http_feed_db_busy(ngx_http_request_t *r)
{
    return ngx_http_feed_error(r, &ngx_http_feed_err_db_busy);
}


/* MongoDB failed a request: 503 when it may work again soon, else 500 */

ngx_int_t
ngx_http_feed_db_failed(ngx_http_request_t *r, bson_error_t *error)
{
    if (r->connection->error) {
        return NGX_HTTP_CLIENT_CLOSED_REQUEST;
    }

    ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                  "mongodb request failed: %s", error->message);

    return ngx_http_feed_error(r, ngx_http_feed_mongo_error_is_transient(error)
                                  ? &ngx_http_feed_err_db_down
                                  : &ngx_http_feed_err_db);
}
