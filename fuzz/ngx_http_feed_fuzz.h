
/*
 * ngx_feed_module fuzz targets: what every target shares.
 *
 * The targets run the module's own code, linked with nginx's core built
 * for fuzzing (tools/fuzz-nginx).  A request here is a real nginx request
 * struct in a real pool, with the few fields the module's code reads, and
 * the output filters replaced by ones that keep the answer, so that what
 * the module answers can be checked.
 */


#ifndef _NGX_HTTP_FEED_FUZZ_H_INCLUDED_
#define _NGX_HTTP_FEED_FUZZ_H_INCLUDED_


#include "ngx_http_feed_module.h"
#include "ngx_http_feed_util.h"


/* what the output filters saw of the last request */
typedef struct {
    ngx_uint_t                    status;
    ngx_uint_t                    headers_sent;
    u_char                       *body;
    size_t                        len;
    size_t                        size;
} ngx_http_feed_fuzz_answer_t;


extern ngx_log_t                    *ngx_http_feed_fuzz_log;
extern ngx_http_feed_main_conf_t    *ngx_http_feed_fuzz_fmcf;
extern ngx_http_feed_loc_conf_t     *ngx_http_feed_fuzz_flcf;
extern ngx_http_feed_fuzz_answer_t   ngx_http_feed_fuzz_answer;


void ngx_http_feed_fuzz_init(void);
ngx_uint_t ngx_http_feed_fuzz_resp_bounded(const uint8_t *data, size_t size,
    ngx_uint_t max);
ngx_http_request_t *ngx_http_feed_fuzz_request(void);
void ngx_http_feed_fuzz_done(ngx_http_request_t *r);
void ngx_http_feed_fuzz_check_answer(ngx_http_request_t *r);
void ngx_http_feed_fuzz_fail(const char *what, u_char *p, size_t len);


/* an invariant of the module that the input broke: a finding */
#define ngx_http_feed_fuzz_assert(cond, what)                                \
    if (!(cond)) {                                                           \
        ngx_http_feed_fuzz_fail(what, NULL, 0);                              \
    }


#endif /* _NGX_HTTP_FEED_FUZZ_H_INCLUDED_ */
