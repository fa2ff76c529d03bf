
/*
 * ngx_feed_module: slots of one size, carved from chunks of 64k.
 *
 * A worker that opens thousands of streams at once holds thousands of
 * requests for a moment, then frees them and keeps a few hundred bytes
 * of each stream for hours.  Allocated among the requests, those bytes
 * would pin a page of the heap each, whatever was freed around them; in
 * slots of their own they are packed, and the pages the requests used
 * can go back to the system.  A chunk whose slots are all free goes,
 * unless it is the last with room.
 */


#include "ngx_http_feed_slots.h"


#define NGX_HTTP_FEED_SLOTS_CHUNK  65536


typedef struct {
    ngx_queue_t                   queue;      /* in the slots' chunks */
    ngx_queue_t                   room;       /* in those with room */
    ngx_http_feed_slots_t        *slots;
    u_char                       *free;       /* freed slots, linked */
    ngx_uint_t                    carved;     /* slots ever handed out */
    ngx_uint_t                    used;
} ngx_http_feed_slots_chunk_t;


/* each slot starts with its chunk, the object follows, aligned */
#define NGX_HTTP_FEED_SLOT_HEADER                                            \
    ngx_align(sizeof(ngx_http_feed_slots_chunk_t *), NGX_ALIGNMENT * 2)

#define NGX_HTTP_FEED_SLOTS_START                                            \
    ngx_align(sizeof(ngx_http_feed_slots_chunk_t), NGX_ALIGNMENT * 2)


static ngx_http_feed_slots_chunk_t *ngx_http_feed_slots_chunk(
    ngx_http_feed_slots_t *slots, ngx_log_t *log);


void *
ngx_http_feed_slots_alloc(ngx_http_feed_slots_t *slots, ngx_log_t *log)
{
    u_char                       *p;
    ngx_http_feed_slots_chunk_t  *chunk;

#if (NGX_HTTP_FEED_EXACT_ALLOC)
    /* the sanitizer build: a block of its own, ASan sees past its end */
    return ngx_calloc(slots->size, log);
#endif

    if (slots->per_chunk == 0) {
        slots->slot = ngx_align(NGX_HTTP_FEED_SLOT_HEADER + slots->size,
                                NGX_ALIGNMENT * 2);
        slots->per_chunk = (NGX_HTTP_FEED_SLOTS_CHUNK
                            - NGX_HTTP_FEED_SLOTS_START) / slots->slot;
        ngx_queue_init(&slots->chunks);
        ngx_queue_init(&slots->room);
    }

    if (ngx_queue_empty(&slots->room)) {
        chunk = ngx_http_feed_slots_chunk(slots, log);
        if (chunk == NULL) {
            return NULL;
        }

    } else {
        chunk = ngx_queue_data(ngx_queue_head(&slots->room),
                               ngx_http_feed_slots_chunk_t, room);
    }

    if (chunk->free) {
        p = chunk->free;
        chunk->free = *(u_char **) p;

    } else {
        /* carved as needed: pages not used yet are not touched */
        p = (u_char *) chunk + NGX_HTTP_FEED_SLOTS_START
            + chunk->carved++ * slots->slot;
    }

    chunk->used++;
    slots->used++;

    if (chunk->free == NULL && chunk->carved == slots->per_chunk) {
        ngx_queue_remove(&chunk->room);
    }

    *(ngx_http_feed_slots_chunk_t **) p = chunk;
    p += NGX_HTTP_FEED_SLOT_HEADER;

    ngx_memzero(p, slots->size);

    return p;
}


static ngx_http_feed_slots_chunk_t *
ngx_http_feed_slots_chunk(ngx_http_feed_slots_t *slots, ngx_log_t *log)
{
    ngx_http_feed_slots_chunk_t  *chunk;

    chunk = ngx_alloc(NGX_HTTP_FEED_SLOTS_CHUNK, log);
    if (chunk == NULL) {
        return NULL;
    }

    chunk->slots = slots;
    chunk->free = NULL;
    chunk->carved = 0;
    chunk->used = 0;

    ngx_queue_insert_head(&slots->chunks, &chunk->queue);
    ngx_queue_insert_head(&slots->room, &chunk->room);
    slots->nchunks++;

    ngx_log_debug3(NGX_LOG_DEBUG_CORE, log, 0,
                   "feed slots of %uz: chunk %p, %ui chunks", slots->size,
                   chunk, slots->nchunks);

    return chunk;
}


void
ngx_http_feed_slots_free(void *p)
{
    u_char                       *s;
    ngx_http_feed_slots_t        *slots;
    ngx_http_feed_slots_chunk_t  *chunk;

    if (p == NULL) {
        return;
    }

#if (NGX_HTTP_FEED_EXACT_ALLOC)
    ngx_free(p);
    return;
#endif

    s = (u_char *) p - NGX_HTTP_FEED_SLOT_HEADER;
    chunk = *(ngx_http_feed_slots_chunk_t **) s;
    slots = chunk->slots;

    if (chunk->free == NULL && chunk->carved == slots->per_chunk) {
        ngx_queue_insert_head(&slots->room, &chunk->room);
    }

    *(u_char **) s = chunk->free;
    chunk->free = s;

    chunk->used--;
    slots->used--;

    if (chunk->used || ngx_queue_head(&slots->room) == ngx_queue_last(
                                                           &slots->room))
    {
        return;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_CORE, ngx_cycle->log, 0,
                   "feed slots of %uz: chunk %p free", slots->size, chunk);

    ngx_queue_remove(&chunk->room);
    ngx_queue_remove(&chunk->queue);
    slots->nchunks--;

    ngx_free(chunk);
}
