
/*
 * ngx_feed_module: the node's gauges, a slot per process in the shared
 * zone (ngx_http_feed_gauges_t).
 *
 * A slot is found by its owner's pid, not by ngx_worker: after a reload
 * the old worker N, shutting down, still holds its connections and pages
 * while the new worker N starts.  A process that is gone (kill(pid, 0)
 * finds none) has its slot taken back by whoever sees it first: a worker
 * that starts, or a scrape.  Nothing is locked: a slot changes hands by
 * compare-and-set on its pid, so that a process killed at any point
 * leaves no lock behind.
 */


#include "ngx_http_feed_conf.h"


/*
 * Set on the pid while its new owner zeroes the slot: readers leave it
 * out.  Above any pid (pid_max is at most 2^22).
 */
#define NGX_HTTP_FEED_GAUGES_TAKING                                          \
    ((ngx_atomic_uint_t) 1 << (sizeof(ngx_atomic_uint_t) * 8 - 1))


static ngx_uint_t ngx_http_feed_gauges_alive(ngx_http_feed_gauges_t *g,
    ngx_atomic_uint_t *owner);
static void ngx_http_feed_gauges_zero(ngx_http_feed_gauges_t *g);


/* this process's slot; NULL outside the workers, or without one */
ngx_http_feed_gauges_t  *ngx_http_feed_gauges;

/* the node's slots */
static ngx_http_feed_gauges_t  *ngx_http_feed_gauges_slots;


/*
 * At a worker's start, before it holds anything: the first free slot,
 * or the first whose process is gone, zeroed.
 */

void
ngx_http_feed_gauges_take(ngx_http_feed_gauges_t *slots, ngx_log_t *log)
{
    ngx_uint_t               i;
    ngx_atomic_uint_t        owner, taking;
    ngx_http_feed_gauges_t  *g;

    ngx_http_feed_gauges_slots = slots;
    taking = NGX_HTTP_FEED_GAUGES_TAKING | (ngx_atomic_uint_t) ngx_pid;

    for (i = 0; i < NGX_HTTP_FEED_GAUGE_SLOTS; i++) {
        g = &slots[i];

        if (ngx_http_feed_gauges_alive(g, &owner)) {
            continue;
        }

        /* free, or taken back just now; another worker may be faster */

        if (!ngx_atomic_cmp_set(&g->pid, 0, taking)) {
            continue;
        }

        ngx_http_feed_gauges_zero(g);

        ngx_memory_barrier();
        g->pid = (ngx_atomic_uint_t) ngx_pid;

        ngx_http_feed_gauges = g;

        ngx_log_debug2(NGX_LOG_DEBUG_CORE, log, 0,
                       "feed gauges: slot %ui taken, was %s", i,
                       owner ? "a process gone" : "free");
        return;
    }

    /* cannot be: the master has fewer children than slots */

    ngx_log_error(NGX_LOG_ALERT, log, 0,
                  "feed gauges: no slot left, this worker is not counted");
}


/*
 * At a worker's exit, once it let go of its connections and pages: the
 * slot is zero again and free.
 */

void
ngx_http_feed_gauges_give_back(ngx_log_t *log)
{
    ngx_http_feed_gauges_t  *g;

    g = ngx_http_feed_gauges;

    if (g == NULL) {
        return;
    }

    ngx_http_feed_gauges = NULL;

    ngx_http_feed_gauges_zero(g);

    ngx_memory_barrier();
    g->pid = 0;

    ngx_log_debug1(NGX_LOG_DEBUG_CORE, log, 0,
                   "feed gauges: slot %ui given back",
                   (ngx_uint_t) (g - ngx_http_feed_gauges_slots));
}


/* the slots of the processes that are alive, summed */

void
ngx_http_feed_gauges_sum(ngx_http_feed_gauges_t *sum)
{
    ngx_uint_t               i, k;
    ngx_atomic_uint_t        owner;
    ngx_http_feed_gauges_t  *g;

    ngx_memzero(sum, sizeof(ngx_http_feed_gauges_t));

    if (ngx_http_feed_gauges_slots == NULL) {
        return;
    }

    for (i = 0; i < NGX_HTTP_FEED_GAUGE_SLOTS; i++) {
        g = &ngx_http_feed_gauges_slots[i];

        if (!ngx_http_feed_gauges_alive(g, &owner)
            || (owner & NGX_HTTP_FEED_GAUGES_TAKING))
        {
            continue;
        }

        for (k = 0; k < NGX_HTTP_FEED_REDIS_STATES; k++) {
            sum->redis_connections[k] += g->redis_connections[k];
        }

        sum->local_bytes += g->local_bytes;
        sum->local_pages += g->local_pages;
        sum->streams += g->streams;
        sum->waits += g->waits;
    }
}


/*
 * Whether the slot's owner (*owner, 0: none) is alive.  A slot whose
 * process is gone is freed here, by compare-and-set: the one who saw it
 * first frees it, and a slot taken meanwhile stays with its new owner.
 * EPERM is a process alive under another user (old workers of a reload
 * that changed "user").
 */

static ngx_uint_t
ngx_http_feed_gauges_alive(ngx_http_feed_gauges_t *g,
    ngx_atomic_uint_t *owner)
{
    ngx_pid_t  pid;

    *owner = g->pid;

    if (*owner == 0) {
        return 0;
    }

    pid = (ngx_pid_t) (*owner & ~NGX_HTTP_FEED_GAUGES_TAKING);

    if (pid == ngx_pid || kill(pid, 0) == 0 || ngx_errno == NGX_EPERM) {
        return 1;
    }

    if (ngx_atomic_cmp_set(&g->pid, *owner, 0)) {
        ngx_log_debug1(NGX_LOG_DEBUG_CORE, ngx_cycle->log, 0,
                       "feed gauges: process %P gone, its slot freed", pid);
    }

    return 0;
}


/* everything but the owner */

static void
ngx_http_feed_gauges_zero(ngx_http_feed_gauges_t *g)
{
    ngx_uint_t  k;

    for (k = 0; k < NGX_HTTP_FEED_REDIS_STATES; k++) {
        g->redis_connections[k] = 0;
    }

    g->local_bytes = 0;
    g->local_pages = 0;
    g->streams = 0;
    g->waits = 0;
}
