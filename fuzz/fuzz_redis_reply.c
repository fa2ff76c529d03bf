
/*
 * Fuzz target: the module's readers of Redis replies, given whatever
 * hiredis's reader (redisReaderFeed/redisReaderGetReply, the one the async
 * context uses) makes of arbitrary RESP bytes.  Each reply goes to:
 *
 *   ngx_http_feed_timeline_cache_parse   the timeline read script's reply,
 *                                        then, when it says the worker's
 *                                        copy is current, a copy gone
 *                                        (ngx_http_feed_timeline_cache_kept);
 *   ngx_http_feed_counts_parse           HMGET of a cached count;
 *   ngx_http_feed_redis_info_reply       INFO server (the run_id);
 *   ngx_http_feed_fanout_consumers_info  XINFO CONSUMERS;
 *   ngx_http_feed_fanout_parse           every array in it, as the fields
 *                                        of a stream entry;
 *   ngx_http_feed_fanout_queue_id_ms     every string in it, as an id.
 *
 * A reply is freed as the module's Redis layer frees it: by hiredis after
 * the handler, through the module's free function, unless a handler kept
 * it, then with the request's pool.
 *
 * Checked: no memory error, no leak, no alert; what a parser takes holds
 * (a run_id within its buffer, a post id of 24 bytes, a valid author).
 *
 * The module's files are included: these are their static functions.
 * The free function and the held replies (ngx_http_feed_redis_command.c)
 * are not static: they come from the module's archive.
 */


#include "ngx_http_feed_fuzz.h"
#include "ngx_http_feed_counts.h"

#include "ngx_http_feed_redis.c"
#include "ngx_http_feed_fanout.c"
#include "ngx_http_feed_fanout_consumers.c"
#include "ngx_http_feed_fanout_queue.c"


/*
 * hiredis allocates an array of the length a header announces before its
 * elements arrive: headers past this, which no reply to the module has,
 * would only measure the allocator.
 */
#define NGX_HTTP_FEED_FUZZ_RESP_MAX  100000


static void ngx_http_feed_fuzz_reply(ngx_http_feed_redis_t *rd,
    redisReply *reply);
static void ngx_http_feed_fuzz_walk(redisReply *e);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    void                   *reply;
    redisReader            *reader;
    ngx_http_feed_redis_t  *rd;

    static ngx_http_feed_redis_conf_t  conf;

    ngx_http_feed_fuzz_init();

    if (!ngx_http_feed_fuzz_resp_bounded(data, size,
                                         NGX_HTTP_FEED_FUZZ_RESP_MAX))
    {
        return 0;
    }

    rd = ngx_http_feed_redis_create((ngx_cycle_t *) ngx_cycle, &conf);
    reader = redisReaderCreate();

    if (rd == NULL || reader == NULL) {
        abort();
    }

    /* as ngx_http_feed_redis_connect() sets the async context's reader */
    rd->fns = *reader->fn;
    rd->fns.freeObject = ngx_http_feed_redis_free_reply;
    reader->fn = &rd->fns;

    ngx_memcpy(rd->run_id, "abc", sizeof("abc"));

    if (redisReaderFeed(reader, (const char *) data, size) != REDIS_OK) {
        abort();
    }

    for ( ;; ) {
        reply = NULL;

        if (redisReaderGetReply(reader, &reply) != REDIS_OK
            || reply == NULL)
        {
            break;
        }

        ngx_http_feed_fuzz_reply(rd, reply);
    }

    redisReaderFree(reader);
    ngx_http_feed_redis_destroy(rd);

    return 0;
}


/* one reply, to every reader of replies, freed as a command's is */

static void
ngx_http_feed_fuzz_reply(ngx_http_feed_redis_t *rd, redisReply *reply)
{
    int64_t                      count;
    ngx_str_t                    kept;
    ngx_http_request_t          *r;
    ngx_http_feed_cached_t       cached;
    ngx_http_feed_fanout_consumers_t    cs;
    ngx_http_feed_counts_gen_t   gen;
    static ngx_str_t             stream = ngx_string("feed:posts:1");

    r = ngx_http_feed_fuzz_request();

    if (ngx_http_feed_timeline_cache_parse(r->pool, reply, &cached) == NGX_OK
        && cached.kept)
    {
        /* the worker's copy, here gone, as when another read replaced it */

        ngx_str_null(&kept);

        (void) ngx_http_feed_timeline_cache_kept(&kept, &cached);
    }

    if (ngx_http_feed_counts_parse(r, rd, reply, &count, &gen) == NGX_OK) {
        ngx_http_feed_fuzz_assert(count >= 0, "a negative count taken");
    }

    ngx_http_feed_fuzz_assert(gen.len < sizeof(gen.data)
                              && gen.data[gen.len] == '\0',
                              "a generation past its buffer");

    ngx_memzero(&cs, sizeof(ngx_http_feed_fanout_consumers_t));
    cs.rd = rd;
    cs.fmcf = ngx_http_feed_fuzz_fmcf;
    cs.stream = &stream;
    cs.log = ngx_http_feed_fuzz_log;
    ngx_str_set(&cs.self, "host:1");
    ngx_str_set(&cs.host, "host");

    ngx_http_feed_fanout_consumers_info(&cs, reply);

    ngx_http_feed_fuzz_walk(reply);

    ngx_http_feed_redis_info_reply(rd, reply);

    ngx_http_feed_fuzz_assert(ngx_strlen(rd->run_id) < sizeof(rd->run_id),
                              "a run_id past its buffer");

    /* hiredis frees the reply once the handler returns */
    rd->fns.freeObject(reply);

    ngx_http_feed_fuzz_done(r);
}


static void
ngx_http_feed_fuzz_walk(redisReply *e)
{
    size_t                         i;
    ngx_http_feed_fanout_entry_t   fe;

    if (e->type == REDIS_REPLY_STRING) {
        (void) ngx_http_feed_fanout_queue_id_ms(e);
        return;
    }

    if (e->type != REDIS_REPLY_ARRAY) {
        return;
    }

    ngx_memzero(&fe, sizeof(ngx_http_feed_fanout_entry_t));

    if (ngx_http_feed_fanout_parse(&fe, e) == NGX_OK) {
        ngx_http_feed_fuzz_assert(fe.kind == 'p' || fe.kind == 'd',
                                  "an entry of no kind taken");
        ngx_http_feed_fuzz_assert(ngx_strnlen((u_char *) fe.page.post_id,
                                              sizeof(fe.page.post_id))
                                  == 24,
                                  "an entry's post id is not 24 bytes");
        ngx_http_feed_fuzz_assert(ngx_http_feed_user_valid(
                                      (u_char *) fe.page.author.data,
                                      fe.page.author.len),
                                  "an entry's author is not valid");
    }

    for (i = 0; i < e->elements; i++) {
        ngx_http_feed_fuzz_walk(e->element[i]);
    }
}
