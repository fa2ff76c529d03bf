
/*
 * ngx_feed_module: every error the API answers, and how it is answered.
 * Clients and tests read the codes and messages: they are written here
 * once, and each flow names the error it answers.
 */


#ifndef _NGX_HTTP_FEED_ERRORS_H_INCLUDED_
#define _NGX_HTTP_FEED_ERRORS_H_INCLUDED_


#include "ngx_http_feed_conf.h"

#include <bson.h>


/* an answer {"error": code, "message": message} with its status */
typedef struct {
    ngx_uint_t                    status;
    const char                   *code;
    const char                   *message;
} ngx_http_feed_error_t;


/* the request's arguments */
extern const ngx_http_feed_error_t  ngx_http_feed_err_user_id;
extern const ngx_http_feed_error_t  ngx_http_feed_err_post_id;
extern const ngx_http_feed_error_t  ngx_http_feed_err_limit;
extern const ngx_http_feed_error_t  ngx_http_feed_err_source_limit;
extern const ngx_http_feed_error_t  ngx_http_feed_err_cursor;
extern const ngx_http_feed_error_t  ngx_http_feed_err_self_follow;
extern const ngx_http_feed_error_t  ngx_http_feed_err_self_block;
extern const ngx_http_feed_error_t  ngx_http_feed_err_self_mute;
extern const ngx_http_feed_error_t  ngx_http_feed_err_method;
extern const ngx_http_feed_error_t  ngx_http_feed_err_status_method;
extern const ngx_http_feed_error_t  ngx_http_feed_err_media_type;
extern const ngx_http_feed_error_t  ngx_http_feed_err_idempotency_key;

/* a new post's body */
extern const ngx_http_feed_error_t  ngx_http_feed_err_not_json;
extern const ngx_http_feed_error_t  ngx_http_feed_err_not_utf8;
extern const ngx_http_feed_error_t  ngx_http_feed_err_number;
extern const ngx_http_feed_error_t  ngx_http_feed_err_data;
extern const ngx_http_feed_error_t  ngx_http_feed_err_data_size;
extern const ngx_http_feed_error_t  ngx_http_feed_err_body;
extern const ngx_http_feed_error_t  ngx_http_feed_err_body_size;
extern const ngx_http_feed_error_t  ngx_http_feed_err_field;
extern const ngx_http_feed_error_t  ngx_http_feed_err_field_twice;

/* a read marker's PUT */
extern const ngx_http_feed_error_t  ngx_http_feed_err_marker_id;
extern const ngx_http_feed_error_t  ngx_http_feed_err_marker_force;
extern const ngx_http_feed_error_t  ngx_http_feed_err_marker_field;
extern const ngx_http_feed_error_t  ngx_http_feed_err_marker_size;
extern const ngx_http_feed_error_t  ngx_http_feed_err_if_match;

/* the posts a reader saw, and reads without them */
extern const ngx_http_feed_error_t  ngx_http_feed_err_seen_json;
extern const ngx_http_feed_error_t  ngx_http_feed_err_seen_id;
extern const ngx_http_feed_error_t  ngx_http_feed_err_seen_many;
extern const ngx_http_feed_error_t  ngx_http_feed_err_seen_size;
extern const ngx_http_feed_error_t  ngx_http_feed_err_unseen;
extern const ngx_http_feed_error_t  ngx_http_feed_err_event_id;
extern const ngx_http_feed_error_t  ngx_http_feed_err_wait;

/* who may write */
extern const ngx_http_feed_error_t  ngx_http_feed_err_unauthorized;
extern const ngx_http_feed_error_t  ngx_http_feed_err_forbidden;

/* blocks between users */
extern const ngx_http_feed_error_t  ngx_http_feed_err_blocked_follow;
extern const ngx_http_feed_error_t  ngx_http_feed_err_blocked_reader;

/* what is not there */
extern const ngx_http_feed_error_t  ngx_http_feed_err_no_post;
extern const ngx_http_feed_error_t  ngx_http_feed_err_no_user_post;
extern const ngx_http_feed_error_t  ngx_http_feed_err_key_post_gone;
extern const ngx_http_feed_error_t  ngx_http_feed_err_no_marker;

/* what conflicts with an earlier request */
extern const ngx_http_feed_error_t  ngx_http_feed_err_key_reused;
extern const ngx_http_feed_error_t  ngx_http_feed_err_version_conflict;

/* what cannot be done now, or at all */
extern const ngx_http_feed_error_t  ngx_http_feed_err_db_busy;
extern const ngx_http_feed_error_t  ngx_http_feed_err_db_down;
extern const ngx_http_feed_error_t  ngx_http_feed_err_db;
extern const ngx_http_feed_error_t  ngx_http_feed_err_cache_down;
extern const ngx_http_feed_error_t  ngx_http_feed_err_cache_pending;
extern const ngx_http_feed_error_t  ngx_http_feed_err_timeline_down;
extern const ngx_http_feed_error_t  ngx_http_feed_err_seen_down;
extern const ngx_http_feed_error_t  ngx_http_feed_err_unseen_down;
extern const ngx_http_feed_error_t  ngx_http_feed_err_streams_full;
extern const ngx_http_feed_error_t  ngx_http_feed_err_stream_down;
extern const ngx_http_feed_error_t  ngx_http_feed_err_internal;

/* nginx has no reason phrase of its own for 422 */
#define NGX_HTTP_FEED_UNPROCESSABLE  422

/* 422: the limit is written into the message */
#define NGX_HTTP_FEED_FOLLOW_MAX_CODE  "too_many_follows"
#define NGX_HTTP_FEED_FOLLOW_MAX_TEXT  "a user follows at most %L users"
#define NGX_HTTP_FEED_FILTER_MAX_CODE  "too_many_filters"
#define NGX_HTTP_FEED_FILTER_MAX_TEXT                                       \
    "a user blocks and mutes at most %L users"
#define NGX_HTTP_FEED_HIDDEN_MAX_CODE  "too_many_hidden"
#define NGX_HTTP_FEED_HIDDEN_MAX_TEXT  "a user hides at most %L posts"


ngx_int_t ngx_http_feed_error(ngx_http_request_t *r,
    const ngx_http_feed_error_t *err);
ngx_int_t ngx_http_feed_refuse(ngx_http_request_t *r,
    const ngx_http_feed_error_t *err);
ngx_int_t ngx_http_feed_over_max(ngx_http_request_t *r, const char *code,
    const char *text, int64_t max);
ngx_int_t ngx_http_feed_not_allowed(ngx_http_request_t *r, char *allow,
    const ngx_http_feed_error_t *err);
ngx_int_t ngx_http_feed_db_busy(ngx_http_request_t *r);
ngx_int_t ngx_http_feed_db_failed(ngx_http_request_t *r, bson_error_t *error);


#endif /* _NGX_HTTP_FEED_ERRORS_H_INCLUDED_ */
