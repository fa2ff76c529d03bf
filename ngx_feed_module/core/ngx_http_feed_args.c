
/*
 * ngx_feed_module: what a request says: user and post ids, query
 * arguments, pages, and whether its identity may write.
 */


#include "ngx_http_feed_args.h"


static ngx_int_t ngx_http_feed_arg_limit(ngx_http_request_t *r,
    ngx_uint_t max, ngx_uint_t digits, ngx_uint_t *limit);
static ngx_int_t ngx_http_feed_arg_id(ngx_http_request_t *r, char *name,
    char *id, ngx_uint_t *has);
static ngx_int_t ngx_http_feed_check_identity(ngx_http_request_t *r,
    ngx_http_feed_user_t *user);


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


/* a post id: exactly 24 lowercase hex digits */

ngx_int_t
ngx_http_feed_post_id(ngx_str_t *text, bson_oid_t *oid)
{
    u_char      c;
    char        hex[25];
    ngx_uint_t  i;

    if (text->len != 24) {
        return NGX_DECLINED;
    }

    for (i = 0; i < 24; i++) {
        c = text->data[i];

        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
            return NGX_DECLINED;
        }

        hex[i] = c;
    }

    hex[24] = '\0';

    bson_oid_init_from_string(oid, hex);

    return NGX_OK;
}


/* NGX_DECLINED: the argument is absent; the value is still escaped */

ngx_int_t
ngx_http_feed_arg(ngx_http_request_t *r, char *name, ngx_str_t *value)
{
    return ngx_http_arg(r, (u_char *) name, ngx_strlen(name), value);
}


/*
 * "limit": 1..max of at most digits digits (any number when 0), 20 when
 * absent; NGX_DECLINED when malformed
 */

static ngx_int_t
ngx_http_feed_arg_limit(ngx_http_request_t *r, ngx_uint_t max,
    ngx_uint_t digits, ngx_uint_t *limit)
{
    ngx_int_t  n;
    ngx_str_t  value;

    if (ngx_http_feed_arg(r, "limit", &value) != NGX_OK) {
        *limit = NGX_HTTP_FEED_LIMIT_DEFAULT;
        return NGX_OK;
    }

    if (value.len == 0 || (digits && value.len > digits)) {
        return NGX_DECLINED;
    }

    n = ngx_atoi(value.data, value.len);

    if (n < 1 || (ngx_uint_t) n > max) {
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
    ngx_uint_t *limit, const ngx_http_feed_error_t **err)
{
    ngx_int_t                  rc;
    ngx_http_feed_loc_conf_t  *flcf;

    flcf = ngx_http_get_module_loc_conf(r, ngx_http_feed_module);

    rc = ngx_http_feed_get_user(r, flcf->user, user);

    if (rc != NGX_OK) {
        *err = &ngx_http_feed_err_user_id;
        return rc;
    }

    if (ngx_http_feed_arg_limit(r, NGX_HTTP_FEED_LIMIT_MAX, 3, limit)
        != NGX_OK)
    {
        *err = &ngx_http_feed_err_limit;
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/*
 * A page of posts: (user, limit, max_id, since_id).  A client's user is
 * the location's, and it asks for up to 100 posts; the fallback source is
 * asked by the timeline, for a user of its query and up to the cache's
 * size.  NGX_DECLINED with the error to answer when one is malformed.
 */

ngx_int_t
ngx_http_feed_page_args(ngx_http_request_t *r,
    ngx_http_feed_page_from_e from, ngx_http_feed_page_t *page,
    const ngx_http_feed_error_t **err)
{
    ngx_int_t  rc;
    ngx_str_t  value;

    if (from == NGX_HTTP_FEED_PAGE_CLIENT) {
        rc = ngx_http_feed_list_args(r, &page->user, &page->limit, err);
        if (rc != NGX_OK) {
            return rc;
        }

    } else {
        if (ngx_http_feed_arg(r, "user", &value) != NGX_OK
            || !ngx_http_feed_user_valid(value.data, value.len))
        {
            *err = &ngx_http_feed_err_user_id;
            return NGX_DECLINED;
        }

        ngx_memcpy(page->user.data, value.data, value.len);
        page->user.data[value.len] = '\0';
        page->user.len = value.len;

        if (ngx_http_feed_arg_limit(r, NGX_HTTP_FEED_CACHE_SIZE_MAX, 0,
                                    &page->limit)
            != NGX_OK)
        {
            *err = &ngx_http_feed_err_source_limit;
            return NGX_DECLINED;
        }
    }

    if (ngx_http_feed_arg_id(r, "max_id", page->max_id, &page->has_max)
        != NGX_OK
        || ngx_http_feed_arg_id(r, "since_id", page->since_id,
                                &page->has_since)
           != NGX_OK)
    {
        *err = &ngx_http_feed_err_post_id;
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/* a post id argument, when given, as 24 hex digits and a NUL */

static ngx_int_t
ngx_http_feed_arg_id(ngx_http_request_t *r, char *name, char *id,
    ngx_uint_t *has)
{
    ngx_str_t   value;
    bson_oid_t  oid;

    if (ngx_http_feed_arg(r, name, &value) != NGX_OK) {
        return NGX_OK;
    }

    if (ngx_http_feed_post_id(&value, &oid) != NGX_OK) {
        return NGX_DECLINED;
    }

    ngx_memcpy(id, value.data, 24);
    id[24] = '\0';
    *has = 1;

    return NGX_OK;
}


/*
 * With "feed_identity", writes are bound to the authenticated user the
 * variable names: 0 when allowed, else the status to answer.
 */

static ngx_int_t
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


/*
 * NGX_OK when the identity may write as user, NGX_DECLINED with the error
 * to answer when it may not
 */

ngx_int_t
ngx_http_feed_authorize(ngx_http_request_t *r, ngx_http_feed_user_t *user,
    const ngx_http_feed_error_t **err)
{
    switch (ngx_http_feed_check_identity(r, user)) {

    case 0:
        return NGX_OK;

    case NGX_HTTP_UNAUTHORIZED:
        *err = &ngx_http_feed_err_unauthorized;
        return NGX_DECLINED;

    case NGX_HTTP_FORBIDDEN:
        *err = &ngx_http_feed_err_forbidden;
        return NGX_DECLINED;

    default:
        return NGX_ERROR;
    }
}


/*
 * The location's user and target, a relationship between two users (a
 * follow, a block, a mute): valid ids, not the same user (self: the error
 * then), the user the identity may write as.  NGX_DECLINED with the error
 * to answer when not.
 */

ngx_int_t
ngx_http_feed_pair_args(ngx_http_request_t *r, ngx_http_feed_user_t *src,
    ngx_http_feed_user_t *dst, const ngx_http_feed_error_t *self,
    const ngx_http_feed_error_t **err)
{
    ngx_int_t                  rc;
    ngx_http_feed_loc_conf_t  *flcf;

    flcf = ngx_http_get_module_loc_conf(r, ngx_http_feed_module);

    rc = ngx_http_feed_get_user(r, flcf->user, src);
    if (rc == NGX_OK) {
        rc = ngx_http_feed_get_user(r, flcf->target, dst);
    }

    if (rc != NGX_OK) {
        *err = &ngx_http_feed_err_user_id;
        return rc;
    }

    if (src->len == dst->len && ngx_strcmp(src->data, dst->data) == 0) {
        *err = self;
        return NGX_DECLINED;
    }

    return ngx_http_feed_authorize(r, src, err);
}


/*
 * Who reads, with "feed_identity": NGX_OK and the user when the variable
 * holds a valid user id, NGX_DECLINED without an identity
 */

ngx_int_t
ngx_http_feed_reader(ngx_http_request_t *r, ngx_http_feed_user_t *user)
{
    ngx_str_t                  id;
    ngx_http_feed_loc_conf_t  *flcf;

    flcf = ngx_http_get_module_loc_conf(r, ngx_http_feed_module);

    if (flcf->identity == NULL) {
        return NGX_DECLINED;
    }

    if (ngx_http_complex_value(r, flcf->identity, &id) != NGX_OK) {
        return NGX_ERROR;
    }

    if (!ngx_http_feed_user_valid(id.data, id.len)) {
        return NGX_DECLINED;
    }

    ngx_memcpy(user->data, id.data, id.len);
    user->data[id.len] = '\0';
    user->len = id.len;

    return NGX_OK;
}


/* the last request header of this name, and how many there are in *n */

ngx_table_elt_t *
ngx_http_feed_header(ngx_http_request_t *r, const char *name, ngx_uint_t *n)
{
    size_t            len;
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h, *found;

    *n = 0;
    found = NULL;
    len = ngx_strlen(name);

    part = &r->headers_in.headers.part;
    h = part->elts;

    for (i = 0; /* void */; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                break;
            }

            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].key.len == len
            && ngx_strncasecmp(h[i].key.data, (u_char *) name, len) == 0)
        {
            found = &h[i];
            (*n)++;
        }
    }

    return found;
}
