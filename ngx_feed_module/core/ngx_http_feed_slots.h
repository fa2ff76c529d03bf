
/*
 * ngx_feed_module: slots of one size carved from chunks of their own, for
 * what a worker holds long and by the thousand (live timelines' streams
 * and their users' readers).
 */


#ifndef _NGX_HTTP_FEED_SLOTS_H_INCLUDED_
#define _NGX_HTTP_FEED_SLOTS_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>


/*
 * The slots of one size, made ready at the first allocation:
 * "static ngx_http_feed_slots_t  s = ngx_http_feed_slots(sizeof(T));"
 */
typedef struct {
    size_t                        size;
    size_t                        slot;       /* with its header, aligned */
    ngx_uint_t                    per_chunk;
    ngx_queue_t                   chunks;     /* all of them */
    ngx_queue_t                   room;       /* those with a free slot */
    ngx_uint_t                    used;
    ngx_uint_t                    nchunks;
} ngx_http_feed_slots_t;


#define ngx_http_feed_slots(size)                                            \
    { size, 0, 0, { NULL, NULL }, { NULL, NULL }, 0, 0 }


void *ngx_http_feed_slots_alloc(ngx_http_feed_slots_t *slots,
    ngx_log_t *log);
void ngx_http_feed_slots_free(void *p);


#endif /* _NGX_HTTP_FEED_SLOTS_H_INCLUDED_ */
