
/*
 * ngx_feed_module: the script registry.
 *
 * Every script of ngx_feed_module/scripts is compiled in (lua2h makes
 * ngx_http_feed_scripts.h of them at ./configure time), loaded with
 * SCRIPT LOAD on every connection ahead of any other command, and called
 * by its descriptor with EVALSHA: the text crosses the network once per
 * connection, not once per call.  A server that forgot them (SCRIPT
 * FLUSH, a failover) answers NOSCRIPT: the connection is dropped, and the
 * next one loads them again (ngx_http_feed_redis_reply()).
 */


#define NGX_HTTP_FEED_SCRIPTS_DEFINE

#include "ngx_http_feed_redis.h"
#include "ngx_http_feed_scripts.h"

#include <ngx_sha1.h>


/* the SHA1 EVALSHA names a script by, as SCRIPT LOAD computes it */

void
ngx_http_feed_redis_scripts_init(void)
{
    u_char                         hash[20];
    ngx_sha1_t                     sha1;
    ngx_http_feed_redis_script_t **s;

    for (s = ngx_http_feed_scripts; *s; s++) {
        if ((*s)->sha1[0]) {
            continue;
        }

        ngx_sha1_init(&sha1);
        ngx_sha1_update(&sha1, (*s)->text, (*s)->len);
        ngx_sha1_final(hash, &sha1);

        ngx_hex_dump((u_char *) (*s)->sha1, hash, 20);
        (*s)->sha1[40] = '\0';

        (*s)->numkeys_len = ngx_sprintf((*s)->numkeys, "%ui", (*s)->nkeys)
                            - (*s)->numkeys;
    }
}


/* ahead of any EVALSHA, whatever Redis forgot since the last time */

void
ngx_http_feed_redis_scripts_load(ngx_http_feed_redis_t *rd,
    ngx_http_feed_redis_pt handler, void *data)
{
    size_t                         argvlen[3];
    const char                    *argv[3];
    ngx_http_feed_redis_args_t     args;
    ngx_http_feed_redis_script_t **s;

    for (s = ngx_http_feed_scripts; *s; s++) {
        ngx_http_feed_redis_args_init(&args, argv, argvlen);
        ngx_http_feed_redis_args_lit(&args, "SCRIPT");
        ngx_http_feed_redis_args_lit(&args, "LOAD");
        ngx_http_feed_redis_args_add(&args, (*s)->text, (*s)->len);

        (void) ngx_http_feed_redis_send(rd, handler, data, &args);
    }
}


/*
 * nkeys, nargs: the script's own counts, or more for a script that takes
 * a batch after them.
 */

void
ngx_http_feed_redis_call_init(ngx_http_feed_redis_call_t *call,
    ngx_http_feed_redis_script_t *script, const char **argv,
    size_t *argvlen, ngx_uint_t nkeys, ngx_uint_t nargs)
{
    call->script = script;
    call->argv = argv;
    call->argvlen = argvlen;
    call->nkeys = nkeys;
    call->nargs = nargs;

    argv[0] = "EVALSHA";
    argvlen[0] = 7;
    argv[1] = script->sha1;
    argvlen[1] = 40;

    if (nkeys == script->nkeys) {
        argv[2] = (const char *) script->numkeys;
        argvlen[2] = script->numkeys_len;
        return;
    }

    /* a batch */

    argv[2] = (const char *) call->numkeys;
    argvlen[2] = ngx_sprintf(call->numkeys, "%ui", nkeys) - call->numkeys;
}


/*
 * r: the request the call is for (its pool cleanup makes the call a
 * tombstone if it goes first), or NULL for the worker's own calls.
 * NGX_DECLINED: Redis is unavailable right now.
 */

ngx_int_t
ngx_http_feed_redis_call(ngx_http_request_t *r, ngx_http_feed_redis_t *rd,
    ngx_http_feed_redis_call_t *call, ngx_http_feed_redis_pt handler,
    void *data)
{
    ngx_http_feed_redis_args_t  args;

    args.argv = call->argv;
    args.argvlen = call->argvlen;
    args.argc = NGX_HTTP_FEED_REDIS_CALL_ARGC(call->nkeys, call->nargs);
    args.key = 3;
    args.nkeys = call->nkeys;
    args.route = NULL;
    args.route_len = 0;

    return ngx_http_feed_redis_send_r(r, rd, handler, data, &args);
}
