
/*
 * Fuzz target: the query of GET /users/{uid}/timeline, as the timeline
 * handler reads it (ngx_http_feed_page_args): the location's user, then
 * limit, max_id and since_id from r->args.
 *
 * Input: "<user>?<args>"; the user is the value of the location's user
 * variable ($1 of the location's regex in the shipped configuration).
 *
 * Checked: no memory error; what is taken is what the rest of the module
 * relies on: a valid user of at most 64 bytes, a limit of 1..100, ids of
 * 24 lowercase hex digits; and a refusal says why.
 */


#include "ngx_http_feed_fuzz.h"
#include "ngx_http_feed_timeline.h"


static void ngx_http_feed_fuzz_check_id(char *id);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    u_char                    *q;
    ngx_int_t                     rc;
    ngx_http_request_t           *r;
    ngx_http_feed_page_t          page;
    ngx_http_complex_value_t      user;
    const ngx_http_feed_error_t  *err;

    ngx_http_feed_fuzz_init();

    r = ngx_http_feed_fuzz_request();

    /* copies of their own: a read past either is reported */

    q = ngx_strlchr((u_char *) data, (u_char *) data + size, '?');

    ngx_memzero(&user, sizeof(ngx_http_complex_value_t));
    user.value.len = q ? (size_t) (q - data) : size;
    user.value.data = ngx_pnalloc(r->pool, user.value.len);

    r->args.len = q ? size - user.value.len - 1 : 0;
    r->args.data = ngx_pnalloc(r->pool, r->args.len);

    if (user.value.data == NULL || r->args.data == NULL) {
        abort();
    }

    if (user.value.len) {
        ngx_memcpy(user.value.data, data, user.value.len);
    }

    if (r->args.len) {
        ngx_memcpy(r->args.data, q + 1, r->args.len);
    }

    ngx_http_feed_fuzz_flcf->user = &user;

    ngx_memzero(&page, sizeof(ngx_http_feed_page_t));
    err = NULL;

    rc = ngx_http_feed_page_args(r, NGX_HTTP_FEED_PAGE_CLIENT, &page, &err);

    if (rc == NGX_OK) {
        ngx_http_feed_fuzz_assert(ngx_http_feed_user_valid(
                                      (u_char *) page.user.data,
                                      page.user.len)
                                  && page.user.data[page.user.len] == '\0',
                                  "an invalid user taken");
        ngx_http_feed_fuzz_assert(page.limit >= 1
                                  && page.limit <= NGX_HTTP_FEED_LIMIT_MAX,
                                  "a limit out of 1..100 taken");

        if (page.has_max) {
            ngx_http_feed_fuzz_check_id(page.max_id);
        }

        if (page.has_since) {
            ngx_http_feed_fuzz_check_id(page.since_id);
        }

    } else {
        ngx_http_feed_fuzz_assert(rc == NGX_DECLINED, "an unexpected rc");
        ngx_http_feed_fuzz_assert(err && err->code && err->message,
                                  "a refusal without a message");
    }

    ngx_http_feed_fuzz_flcf->user = NULL;
    ngx_http_feed_fuzz_done(r);

    return 0;
}


static void
ngx_http_feed_fuzz_check_id(char *id)
{
    ngx_uint_t  i;

    for (i = 0; i < 24; i++) {
        ngx_http_feed_fuzz_assert((id[i] >= '0' && id[i] <= '9')
                                  || (id[i] >= 'a' && id[i] <= 'f'),
                                  "a post id taken that is not hex");
    }

    ngx_http_feed_fuzz_assert(id[24] == '\0', "a post id taken unended");
}
