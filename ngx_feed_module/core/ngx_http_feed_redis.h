
/*
 * ngx_feed_module: a hiredis async context per worker, driven by the nginx
 * event loop.
 */


#ifndef _NGX_HTTP_FEED_REDIS_H_INCLUDED_
#define _NGX_HTTP_FEED_REDIS_H_INCLUDED_


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_args.h"

#include <hiredis.h>
#include <async.h>


typedef struct ngx_http_feed_redis_cmd_s  ngx_http_feed_redis_cmd_t;

/*
 * Called once per command: with the reply, or with NULL when the command
 * failed (Redis down, timed out, connection lost).  The reply is freed by
 * hiredis when the handler returns.
 */
typedef void (*ngx_http_feed_redis_pt)(void *data, redisReply *reply);

/* called each time a (re)connection is logged in and ready */
typedef void (*ngx_http_feed_redis_ready_pt)(ngx_http_feed_redis_t *rd,
    void *data);


/*
 * A key that every command of some kind needs beside its own keys (the
 * set of posts being deleted, which every read checks) has on a cluster
 * a copy on each master, named "<base>{<tag>}" with a hash tag of one of
 * the master's slots: a script reaches it wherever it runs.  The handler
 * is called with each copy's name (none for a single Redis).
 */
typedef void (*ngx_http_feed_redis_tag_copy_pt)(void *data, u_char *key,
    size_t len);

/* the nodes a cluster's map can name, masters and replicas */
#define NGX_HTTP_FEED_REDIS_NODES_MAX  64

/* the longest name of a copy, and the buffer a base's copy needs */
#define NGX_HTTP_FEED_REDIS_TAG_COPY_MAX  64
#define NGX_HTTP_FEED_REDIS_TAG_COPY_LEN(base)                               \
    (sizeof(base) - 1 + 2 + NGX_INT_T_LEN)

/*
 * The mark that says a copy is whole for the data its node serves now:
 * "~" and the first digits of the node's run id (lib/deleted.lua)
 */
#define NGX_HTTP_FEED_REDIS_RUN_LEN    16
#define NGX_HTTP_FEED_REDIS_MARK_LEN   (1 + NGX_HTTP_FEED_REDIS_RUN_LEN)


/*
 * A command's words, appended in order by the macros below into the
 * caller's arrays; its keys are marked (key: the index of the first,
 * nkeys: how many, one after the other), because a router needs every
 * command's keys.  A command without keys (INFO, CLIENT) has nkeys 0.
 */
typedef struct {
    const char                  **argv;
    size_t                       *argvlen;
    ngx_uint_t                    argc;
    ngx_uint_t                    key;
    ngx_uint_t                    nkeys;

    /* a command without keys that must reach this key's node */
    const char                   *route;
    size_t                        route_len;
} ngx_http_feed_redis_args_t;


#define ngx_http_feed_redis_args_init(a, v, vlen)                            \
    ((a)->argv = (v), (a)->argvlen = (vlen), (a)->argc = 0,                  \
     (a)->key = 0, (a)->nkeys = 0, (a)->route = NULL, (a)->route_len = 0)

/* CLIENT ID and CLIENT UNBLOCK of a read blocked on a stream: its node */
#define ngx_http_feed_redis_args_route(a, s, n)                              \
    ((a)->route = (const char *) (s), (a)->route_len = (n))

#define ngx_http_feed_redis_args_add(a, s, n)                                \
    ((a)->argv[(a)->argc] = (const char *) (s),                              \
     (a)->argvlen[(a)->argc++] = (n))

/* s: a string literal, nothing else compiles (sizeof of a pointer would) */
#define ngx_http_feed_redis_args_lit(a, s)                                   \
    ngx_http_feed_redis_args_add(a, s, sizeof("" s) - 1)

#define ngx_http_feed_redis_args_key(a, s, n)                                \
    ((a)->key = (a)->nkeys ? (a)->key : (a)->argc, (a)->nkeys++,             \
     ngx_http_feed_redis_args_add(a, s, n))


/*
 * A Lua script, ngx_feed_module/scripts/<name>.lua: its descriptor is made
 * by scripts/lua2h (ngx_http_feed_scripts.h), loaded on every connection
 * and run with EVALSHA.  nkeys and nargs: those its header names; a
 * script may take more after them (a batch of timelines).
 */
typedef struct {
    const char                   *name;
    const char                   *text;
    size_t                        len;
    ngx_uint_t                    nkeys;
    ngx_uint_t                    nargs;
    char                          sha1[41];

    /* nkeys as EVALSHA takes it, made once */
    u_char                        numkeys[NGX_INT_T_LEN];
    size_t                        numkeys_len;
} ngx_http_feed_redis_script_t;


/*
 * A script call, built in the caller's arrays of
 * NGX_HTTP_FEED_REDIS_CALL_ARGC(nkeys, nargs) entries: EVALSHA, the SHA1,
 * the number of keys, the keys, the arguments.  The keys are apart from
 * the arguments (argv[3] to argv[3 + nkeys - 1]): a router needs them.
 */
typedef struct {
    ngx_http_feed_redis_script_t *script;
    const char                  **argv;
    size_t                       *argvlen;
    ngx_uint_t                    nkeys;
    ngx_uint_t                    nargs;
    u_char                        numkeys[NGX_INT_T_LEN];
} ngx_http_feed_redis_call_t;


#define NGX_HTTP_FEED_REDIS_CALL_ARGC(nkeys, nargs)  (3 + (nkeys) + (nargs))

/* the key or argument of index i (the script's generated enums) */
#define ngx_http_feed_redis_call_key(call, i, s, n)                          \
    ((call)->argv[3 + (i)] = (const char *) (s),                             \
     (call)->argvlen[3 + (i)] = (n))

#define ngx_http_feed_redis_call_arg(call, i, s, n)                          \
    ((call)->argv[3 + (call)->nkeys + (i)] = (const char *) (s),             \
     (call)->argvlen[3 + (call)->nkeys + (i)] = (n))

/* s: a string literal, nothing else compiles (sizeof of a pointer would) */
#define ngx_http_feed_redis_call_lit(call, i, s)                             \
    ngx_http_feed_redis_call_arg(call, i, s, sizeof("" s) - 1)


/*
 * How many connections were made ready, and how many commands were sent
 * again (redirected or retried), since the worker started: what Redis
 * tracks for a connection (CLIENT TRACKING) is lost with it.
 */
extern ngx_uint_t  ngx_http_feed_redis_connects;
extern ngx_uint_t  ngx_http_feed_redis_resends;


char *ngx_http_feed_redis_conf(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
ngx_int_t ngx_http_feed_redis_conf_names(ngx_conf_t *cf,
    ngx_http_feed_redis_conf_t *rcf, ngx_resolver_t *resolver,
    ngx_msec_t timeout);

ngx_http_feed_redis_t *ngx_http_feed_redis_create(ngx_cycle_t *cycle,
    ngx_http_feed_redis_conf_t *conf);
void ngx_http_feed_redis_start(ngx_http_feed_redis_t *rd);
void ngx_http_feed_redis_destroy(ngx_http_feed_redis_t *rd);

ngx_http_feed_redis_cmd_t *ngx_http_feed_redis_send(ngx_http_feed_redis_t *rd,
    ngx_http_feed_redis_pt handler, void *data,
    ngx_http_feed_redis_args_t *args);
ngx_http_feed_redis_cmd_t *ngx_http_feed_redis_send_timeout(
    ngx_http_feed_redis_t *rd, ngx_msec_t timeout,
    ngx_http_feed_redis_pt handler, void *data,
    ngx_http_feed_redis_args_t *args);
ngx_int_t ngx_http_feed_redis_send_r(ngx_http_request_t *r,
    ngx_http_feed_redis_t *rd, ngx_http_feed_redis_pt handler, void *data,
    ngx_http_feed_redis_args_t *args);
void ngx_http_feed_redis_cancel(ngx_http_feed_redis_cmd_t *cmd);
void ngx_http_feed_redis_reconnect(ngx_http_feed_redis_t *rd,
    const char *why);
ngx_int_t ngx_http_feed_redis_subscribe(ngx_http_feed_redis_t *rd,
    ngx_http_feed_redis_pt handler, void *data,
    ngx_http_feed_redis_args_t *args);
ngx_int_t ngx_http_feed_redis_on_ready(ngx_http_feed_redis_t *rd,
    ngx_http_feed_redis_ready_pt handler, void *data);
ngx_int_t ngx_http_feed_redis_hold_reply(ngx_pool_t *pool, redisReply *reply);
void ngx_http_feed_redis_on_exit(ngx_http_feed_redis_t *rd,
    ngx_http_feed_redis_ready_pt handler, void *data);
void ngx_http_feed_redis_on_retire(ngx_http_feed_redis_t *rd,
    ngx_http_feed_redis_tag_copy_pt handler, void *data);
void ngx_http_feed_redis_stale(ngx_http_feed_redis_t *rd, const char *why);

void ngx_http_feed_redis_scripts_init(void);
void ngx_http_feed_redis_scripts_load(ngx_http_feed_redis_t *rd,
    ngx_http_feed_redis_pt handler, void *data);
void ngx_http_feed_redis_call_init(ngx_http_feed_redis_call_t *call,
    ngx_http_feed_redis_script_t *script, const char **argv,
    size_t *argvlen, ngx_uint_t nkeys, ngx_uint_t nargs);
ngx_int_t ngx_http_feed_redis_call(ngx_http_request_t *r,
    ngx_http_feed_redis_t *rd, ngx_http_feed_redis_call_t *call,
    ngx_http_feed_redis_pt handler, void *data);

ngx_http_feed_redis_state_e ngx_http_feed_redis_state(
    ngx_http_feed_redis_t *rd);
ngx_uint_t ngx_http_feed_redis_pending(ngx_http_feed_redis_t *rd);
const char *ngx_http_feed_redis_last_error(ngx_http_feed_redis_t *rd);
const char *ngx_http_feed_redis_run_id(ngx_http_feed_redis_t *rd);
ngx_str_t *ngx_http_feed_redis_sentinel_primary(ngx_http_feed_redis_t *rd,
    ngx_uint_t *moves);
ngx_str_t *ngx_http_feed_redis_name_address(ngx_http_feed_redis_t *rd,
    ngx_uint_t *moves);

typedef struct ngx_http_feed_redis_barrier_s  ngx_http_feed_redis_barrier_t;
typedef void (*ngx_http_feed_redis_barrier_pt)(void *data,
    ngx_uint_t replicated);

ngx_http_feed_redis_barrier_t *ngx_http_feed_redis_barrier_create(
    ngx_cycle_t *cycle, ngx_http_feed_redis_conf_t *conf);
void ngx_http_feed_redis_barrier_destroy(ngx_http_feed_redis_barrier_t *b);
ngx_int_t ngx_http_feed_redis_barrier_wait(ngx_http_feed_redis_barrier_t *b,
    ngx_http_feed_redis_barrier_pt handler, void *data);
ngx_int_t ngx_http_feed_redis_barrier_wait_r(ngx_http_request_t *r,
    ngx_http_feed_redis_barrier_t *b, ngx_http_feed_redis_barrier_pt handler,
    void *data);
ngx_uint_t ngx_http_feed_redis_masters(ngx_http_feed_redis_t *rd,
    ngx_uint_t *up);
ngx_uint_t ngx_http_feed_redis_nodes(ngx_http_feed_redis_t *rd);
ngx_uint_t ngx_http_feed_redis_clustered(ngx_http_feed_redis_t *rd);
const char *ngx_http_feed_redis_retry_name(ngx_uint_t reason);
ngx_http_feed_redis_conf_t *ngx_http_feed_redis_master(
    ngx_http_feed_redis_t *rd, ngx_uint_t n, u_char *buf, size_t *len);
ngx_uint_t ngx_http_feed_redis_node_of(ngx_http_feed_redis_t *rd,
    const u_char *key, size_t len);
size_t ngx_http_feed_redis_tag_copy(ngx_http_feed_redis_t *rd,
    const u_char *key, size_t len, ngx_str_t *base, u_char *buf);
void ngx_http_feed_redis_tag_copies(ngx_http_feed_redis_t *rd,
    ngx_str_t *base, ngx_http_feed_redis_tag_copy_pt handler, void *data);
size_t ngx_http_feed_redis_tag_copy_mark(ngx_http_feed_redis_t *rd,
    const u_char *key, size_t len, u_char *buf);


#endif /* _NGX_HTTP_FEED_REDIS_H_INCLUDED_ */
