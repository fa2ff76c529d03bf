
/*
 * ngx_feed_module: request helpers shared by every flow: user ids,
 * query arguments, identity, the common error answers.
 */


#include "ngx_http_feed_util.h"
#include "ngx_http_feed_json.h"
#include "ngx_http_feed_mongo.h"

#if (NGX_LINUX)
#include <sys/random.h>
#endif


/* ^[A-Za-z0-9_.-]{1,64}$ */

ngx_int_t
ngx_http_feed_user_valid(u_char *p, size_t len)
{
    u_char  *last;

    if (len == 0 || len > NGX_HTTP_FEED_USER_MAX) {
        return 0;
    }

    for (last = p + len; p < last; p++) {
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')
              || (*p >= '0' && *p <= '9')
              || *p == '_' || *p == '.' || *p == '-'))
        {
            return 0;
        }
    }

    return 1;
}


ngx_int_t
ngx_http_feed_get_user(ngx_http_request_t *r, ngx_http_complex_value_t *cv,
    ngx_http_feed_user_t *user)
{
    ngx_str_t  value;

    if (ngx_http_complex_value(r, cv, &value) != NGX_OK) {
        return NGX_ERROR;
    }

    if (!ngx_http_feed_user_valid(value.data, value.len)) {
        return NGX_DECLINED;
    }

    ngx_memcpy(user->data, value.data, value.len);
    user->data[value.len] = '\0';
    user->len = value.len;

    return NGX_OK;
}


/* NGX_DECLINED: the argument is absent; the value is still escaped */

ngx_int_t
ngx_http_feed_arg(ngx_http_request_t *r, char *name, ngx_str_t *value)
{
    return ngx_http_arg(r, (u_char *) name, ngx_strlen(name), value);
}


/* "limit": 1..100, 20 when absent; NGX_DECLINED when malformed */

ngx_int_t
ngx_http_feed_arg_limit(ngx_http_request_t *r, ngx_uint_t *limit)
{
    ngx_int_t  n;
    ngx_str_t  value;

    if (ngx_http_feed_arg(r, "limit", &value) != NGX_OK) {
        *limit = NGX_HTTP_FEED_LIMIT_DEFAULT;
        return NGX_OK;
    }

    if (value.len == 0 || value.len > 3) {
        return NGX_DECLINED;
    }

    n = ngx_atoi(value.data, value.len);

    if (n < 1 || n > NGX_HTTP_FEED_LIMIT_MAX) {
        return NGX_DECLINED;
    }

    *limit = n;

    return NGX_OK;
}


/*
 * The arguments every list has: the location's user and "limit";
 * NGX_DECLINED with the error to answer when one is malformed.
 */

ngx_int_t
ngx_http_feed_list_args(ngx_http_request_t *r, ngx_http_feed_user_t *user,
    ngx_uint_t *limit, const char **code, const char **message)
{
    ngx_int_t                  rc;
    ngx_http_feed_loc_conf_t  *flcf;

    flcf = ngx_http_get_module_loc_conf(r, ngx_http_feed_module);

    rc = ngx_http_feed_get_user(r, flcf->user, user);

    if (rc != NGX_OK) {
        *code = "invalid_user_id";
        *message = NGX_HTTP_FEED_USER_ID_TEXT;
        return rc;
    }

    if (ngx_http_feed_arg_limit(r, limit) != NGX_OK) {
        *code = "invalid_limit";
        *message = "limit is a number from 1 to 100";
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/*
 * With "feed_identity", writes are bound to the authenticated user the
 * variable names: 0 when allowed, else the status to answer.
 */

ngx_int_t
ngx_http_feed_check_identity(ngx_http_request_t *r,
    ngx_http_feed_user_t *user)
{
    ngx_str_t                  id;
    ngx_http_feed_loc_conf_t  *flcf;

    flcf = ngx_http_get_module_loc_conf(r, ngx_http_feed_module);

    if (flcf->identity == NULL) {
        return 0;
    }

    if (ngx_http_complex_value(r, flcf->identity, &id) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (id.len == 0) {
        return NGX_HTTP_UNAUTHORIZED;
    }

    if (id.len != user->len || ngx_strncmp(id.data, user->data, id.len) != 0) {
        return NGX_HTTP_FORBIDDEN;
    }

    return 0;
}


ngx_int_t
ngx_http_feed_bad_request(ngx_http_request_t *r, const char *code,
    const char *message)
{
    return ngx_http_feed_reject(r, NGX_HTTP_BAD_REQUEST, code, message);
}


ngx_int_t
ngx_http_feed_not_allowed(ngx_http_request_t *r, char *allow)
{
    ngx_str_t  value;

    value.data = (u_char *) allow;
    value.len = ngx_strlen(allow);

    if (ngx_http_feed_add_header(r, "Allow", &value) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_feed_reject(r, NGX_HTTP_NOT_ALLOWED,
                                "method_not_allowed",
                                "method not allowed here");
}


ngx_int_t
ngx_http_feed_unavailable(ngx_http_request_t *r, const char *message)
{
    static ngx_str_t  retry = ngx_string("1");

    if (ngx_http_feed_add_header(r, "Retry-After", &retry) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_feed_send_error(r, NGX_HTTP_SERVICE_UNAVAILABLE,
                                    "unavailable", message);
}


/*
 * A thread task could not be posted: the thread pool's queue is full.  The
 * client may try again shortly (503 with Retry-After).
 */

ngx_int_t
ngx_http_feed_db_busy(ngx_http_request_t *r)
{
    return ngx_http_feed_unavailable(r, "too many requests waiting for the "
                                        "database");
}


ngx_int_t
ngx_http_feed_no_content(ngx_http_request_t *r)
{
    return ngx_http_feed_send_body(r, NGX_HTTP_NO_CONTENT, NULL, 0);
}


/*
 * Finishes a request answered from a callback (a Redis reply, a thread
 * task): nginx's own events would not run the posted requests for us.
 */

void
ngx_http_feed_finalize(ngx_http_request_t *r, ngx_int_t rc)
{
    ngx_connection_t  *c;

    c = r->connection;

    ngx_http_finalize_request(r, rc);
    ngx_http_run_posted_requests(c);
}


/* a request refused before its body was read: discard the body first */

ngx_int_t
ngx_http_feed_reject(ngx_http_request_t *r, ngx_uint_t status,
    const char *code, const char *message)
{
    ngx_int_t  rc;

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    return ngx_http_feed_send_error(r, status, code, message);
}


/* NGX_DECLINED when the identity may write as user, else the answer */

ngx_int_t
ngx_http_feed_authorize(ngx_http_request_t *r, ngx_http_feed_user_t *user)
{
    ngx_int_t  rc;

    rc = ngx_http_feed_check_identity(r, user);

    if (rc == 0) {
        return NGX_DECLINED;
    }

    if (rc == NGX_HTTP_UNAUTHORIZED) {
        return ngx_http_feed_reject(r, rc, "unauthorized",
                                    "no authenticated user");
    }

    if (rc == NGX_HTTP_FORBIDDEN) {
        return ngx_http_feed_reject(r, rc, "forbidden",
                                    "the authenticated user may only change "
                                    "their own data");
    }

    return rc;
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

    if (ngx_http_feed_mongo_error_is_transient(error)) {
        return ngx_http_feed_unavailable(r, "the database is unavailable");
    }

    return ngx_http_feed_send_error(r, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                    "internal", "database error");
}


/* the event loop's cached time, in ms since the epoch */

int64_t
ngx_http_feed_now_ms(void)
{
    ngx_time_t  *tp;

    tp = ngx_timeofday();

    return (int64_t) tp->sec * 1000 + tp->msec;
}


/*
 * Random bytes that differ between processes, containers and hosts: the
 * kernel's, else ngx_random() mixed with the pid and the time (process
 * ids and clocks alone repeat across containers).
 */

void
ngx_http_feed_random(u_char *buf, size_t len)
{
    size_t  i;

#if (NGX_LINUX)
    if (getrandom(buf, len, GRND_NONBLOCK) == (ssize_t) len) {
        return;
    }
#endif

    for (i = 0; i < len; i++) {
        buf[i] = (u_char) (ngx_random() ^ (ngx_pid >> (i % 4 * 8))
                           ^ (ngx_current_msec >> (i % 2 * 8)));
    }
}
