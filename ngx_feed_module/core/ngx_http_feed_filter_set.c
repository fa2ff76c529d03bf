
/*
 * ngx_feed_module: a user's read filters in memory, a sorted array of
 * authors and of the posts the user hid ("#" and the post's id, as the
 * cache's hash has them: no user id has a "#"), for the pages made from
 * the fallback's answer (a page past the cache's end, a rebuild that
 * could not be cached, no Redis).  The cache filters its own pages in
 * Redis (scripts/lib/filtered.lua).
 */


#include "ngx_http_feed_filter_set.h"


static int ngx_libc_cdecl ngx_http_feed_filter_set_cmp(const void *one,
    const void *two);


ngx_int_t
ngx_http_feed_filter_set_init(ngx_pool_t *pool, ngx_http_feed_filter_set_t *f,
    ngx_uint_t n)
{
    ngx_memzero(f, sizeof(ngx_http_feed_filter_set_t));

    f->loaded = 1;

    if (n == 0) {
        return NGX_OK;
    }

    f->authors = ngx_palloc(pool, n * sizeof(ngx_str_t));
    if (f->authors == NULL) {
        return NGX_ERROR;
    }

    f->size = n;

    return NGX_OK;
}


/* the author's bytes are not copied: they live as long as the set */

void
ngx_http_feed_filter_set_add(ngx_http_feed_filter_set_t *f, u_char *data,
    size_t len)
{
    if (f->n == f->size || len == 0) {
        return;
    }

    f->authors[f->n].data = data;
    f->authors[f->n].len = len;
    f->n++;
}


/* a hidden post, as "#<id>": the id's bytes are copied */

ngx_int_t
ngx_http_feed_filter_set_add_post(ngx_pool_t *pool,
    ngx_http_feed_filter_set_t *f, u_char *id, size_t len)
{
    u_char  *p;

    p = ngx_pnalloc(pool, len + 1);
    if (p == NULL) {
        return NGX_ERROR;
    }

    p[0] = '#';
    ngx_memcpy(p + 1, id, len);

    ngx_http_feed_filter_set_add(f, p, len + 1);

    return NGX_OK;
}


/* the post of this id is one the user hid */

ngx_uint_t
ngx_http_feed_filter_set_hides(ngx_http_feed_filter_set_t *f, u_char *id,
    size_t len)
{
    u_char  key[NGX_HTTP_FEED_FILTER_POST_LEN];

    if (f->n == 0 || len + 1 > NGX_HTTP_FEED_FILTER_POST_LEN) {
        return 0;
    }

    key[0] = '#';
    ngx_memcpy(key + 1, id, len);

    return ngx_http_feed_filter_set_has(f, key, len + 1);
}


void
ngx_http_feed_filter_set_done(ngx_http_feed_filter_set_t *f)
{
    if (f->n > 1) {
        ngx_qsort(f->authors, f->n, sizeof(ngx_str_t),
                  ngx_http_feed_filter_set_cmp);
    }
}


/*
 * The filters as the store gives them: "<kind><author>" separated by
 * spaces (ngx_http_feed_filters_of), "h<post id>" for a hidden post; an
 * author under two kinds is in the set twice, which changes nothing.
 */

ngx_int_t
ngx_http_feed_filter_set_tokens(ngx_pool_t *pool, ngx_str_t *tokens,
    ngx_http_feed_filter_set_t *f)
{
    u_char      *p, *last, *start;
    ngx_uint_t   n;

    p = tokens->data;
    last = p + tokens->len;
    n = 0;

    while (p < last) {
        if (*p++ == ' ') {
            n++;
        }
    }

    if (ngx_http_feed_filter_set_init(pool, f, tokens->len ? n + 1 : 0)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    for (p = tokens->data; p < last; p++) {
        start = p;

        while (p < last && *p != ' ') {
            p++;
        }

        /* the kind, then the author, or the hidden post's "#<id>" */

        if (p - start > 1 && *start == 'h') {
            if (ngx_http_feed_filter_set_add_post(pool, f, start + 1,
                                                  p - start - 1)
                != NGX_OK)
            {
                return NGX_ERROR;
            }

        } else if (p - start > 1) {
            ngx_http_feed_filter_set_add(f, start + 1, p - start - 1);
        }
    }

    ngx_http_feed_filter_set_done(f);

    return NGX_OK;
}


ngx_uint_t
ngx_http_feed_filter_set_has(ngx_http_feed_filter_set_t *f, u_char *data,
    size_t len)
{
    ngx_int_t   rc;
    ngx_str_t   key;
    ngx_uint_t  lo, hi, mid;

    key.data = data;
    key.len = len;

    lo = 0;
    hi = f->n;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        rc = ngx_http_feed_filter_set_cmp(&key, &f->authors[mid]);

        if (rc == 0) {
            return 1;
        }

        if (rc < 0) {
            hi = mid;

        } else {
            lo = mid + 1;
        }
    }

    return 0;
}


static int ngx_libc_cdecl
ngx_http_feed_filter_set_cmp(const void *one, const void *two)
{
    const ngx_str_t  *a = one, *b = two;

    ngx_int_t  rc;

    rc = ngx_memn2cmp(a->data, b->data, a->len, b->len);

    return rc < 0 ? -1 : (rc > 0 ? 1 : 0);
}
