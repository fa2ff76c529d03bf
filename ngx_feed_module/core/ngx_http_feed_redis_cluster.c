
/*
 * ngx_feed_module: a Redis Cluster behind one client (a router).
 *
 * The slot map comes from CLUSTER SLOTS, asked of any node that is up: at
 * start, on a MOVED, when a master's connection goes, and every few
 * seconds (quickly while a slot has no master that is up, so that a
 * promoted replica is found within a fraction of a second).  Each master
 * gets a connection of its own, an ngx_http_feed_redis_t like a single
 * Redis's: the same login, scripts, timeouts and backoff.  A command goes
 * to the master of its first key's slot; keyless ones to any master up.
 *
 * The node table holds the seeds and the nodes the map, a MOVED or an ASK
 * named.  A node the map no longer names, with nothing in flight on its
 * connection, is forgotten after the map is read or it is found resting
 * (and at once when a new node finds the table full): addresses come and
 * go with restarts and failovers, the table must not fill with the dead.
 */


#include "ngx_http_feed_redis_cluster.h"


#define NGX_HTTP_FEED_REDIS_REFRESH_FAST     250
#define NGX_HTTP_FEED_REDIS_REFRESH_SLOW     10000


typedef struct {
    ngx_http_feed_redis_t        *rd;
    ngx_http_feed_redis_conf_t    conf;
    u_char                        text[NGX_SOCKADDR_STRLEN + 8];
    char                          host[NGX_SOCKADDR_STRLEN];
    /* the node's last slot, + 1 (0: none), and its hash tag */
    ngx_uint_t                    last;
    u_char                        tag[NGX_HTTP_FEED_REDIS_TAG_LEN];
    size_t                        tag_len;
    unsigned                      master:1;
    unsigned                      started:1;
    unsigned                      seed:1;      /* configured: kept */
} ngx_http_feed_redis_node_t;


struct ngx_http_feed_redis_cluster_s {
    ngx_http_feed_redis_t        *router;
    ngx_http_feed_redis_conf_t   *conf;
    ngx_cycle_t                  *cycle;
    ngx_log_t                    *log;

    /* an entry without rd is free; nnodes: past the last one in use */
    ngx_http_feed_redis_node_t    nodes[NGX_HTTP_FEED_REDIS_NODES_MAX];
    ngx_uint_t                    nnodes;

    /* the owner of each slot: a node's index + 1, 0 when none is known */
    uint8_t                       slots[NGX_HTTP_FEED_REDIS_SLOTS];
    uint8_t                       next[NGX_HTTP_FEED_REDIS_SLOTS];

    ngx_event_t                   refresh;
    ngx_event_t                   forget;      /* posted: see sweep() */
    ngx_connection_t              dummy;
    ngx_uint_t                    asked;       /* the node asked, + 1 */
    ngx_uint_t                    turn;        /* whom to ask next */

    unsigned                      refreshing:1;
    unsigned                      reading:1;   /* in the map's callback */
    unsigned                      mapped:1;    /* every slot has a master */
    unsigned                      exiting:1;

    char                          run_id[NGX_INT_T_LEN * 2];
};


static ngx_http_feed_redis_t *ngx_http_feed_redis_cluster_any(
    ngx_http_feed_redis_cluster_t *cl);
static ngx_http_feed_redis_node_t *ngx_http_feed_redis_cluster_node(
    ngx_http_feed_redis_cluster_t *cl, ngx_str_t *host, in_port_t port);
static ngx_http_feed_redis_node_t *ngx_http_feed_redis_cluster_free(
    ngx_http_feed_redis_cluster_t *cl);
static void ngx_http_feed_redis_cluster_sweep(
    ngx_http_feed_redis_cluster_t *cl);
static void ngx_http_feed_redis_cluster_forget_handler(ngx_event_t *ev);
static void ngx_http_feed_redis_cluster_forget(
    ngx_http_feed_redis_cluster_t *cl);
static void ngx_http_feed_redis_cluster_refresh(ngx_event_t *ev);
static void ngx_http_feed_redis_cluster_ask(
    ngx_http_feed_redis_cluster_t *cl);
static ngx_int_t ngx_http_feed_redis_cluster_ask_one(
    ngx_http_feed_redis_cluster_t *cl, ngx_uint_t idle);
static void ngx_http_feed_redis_cluster_slots(void *data, redisReply *reply);
static ngx_int_t ngx_http_feed_redis_cluster_range(void *data,
    ngx_uint_t first, ngx_uint_t last,
    ngx_http_feed_redis_node_addr_t *master);
static void ngx_http_feed_redis_cluster_apply(
    ngx_http_feed_redis_cluster_t *cl);
static void ngx_http_feed_redis_cluster_tags(
    ngx_http_feed_redis_cluster_t *cl);
static void ngx_http_feed_redis_cluster_rearm(
    ngx_http_feed_redis_cluster_t *cl);
static void ngx_http_feed_redis_cluster_make_run_id(
    ngx_http_feed_redis_cluster_t *cl);


ngx_http_feed_redis_cluster_t *
ngx_http_feed_redis_cluster_create(ngx_cycle_t *cycle,
    ngx_http_feed_redis_t *router, ngx_http_feed_redis_conf_t *conf)
{
    ngx_str_t                        host;
    ngx_uint_t                       i;
    ngx_http_feed_redis_node_t      *node;
    ngx_http_feed_redis_conf_t      *seed;
    ngx_http_feed_redis_cluster_t   *cl;

    cl = ngx_calloc(sizeof(ngx_http_feed_redis_cluster_t), cycle->log);
    if (cl == NULL) {
        return NULL;
    }

    cl->router = router;
    cl->conf = conf;
    cl->cycle = cycle;
    cl->log = cycle->log;

    cl->dummy.fd = (ngx_socket_t) -1;
    cl->refresh.handler = ngx_http_feed_redis_cluster_refresh;
    cl->refresh.data = &cl->dummy;
    cl->refresh.log = cycle->log;
    cl->refresh.cancelable = 1;

    cl->forget.handler = ngx_http_feed_redis_cluster_forget_handler;
    cl->forget.data = &cl->dummy;
    cl->forget.log = cycle->log;

    /* the seeds are asked for the map; they become nodes like any other */

    seed = conf->seeds->elts;

    for (i = 0; i < conf->seeds->nelts; i++) {
        host.data = (u_char *) seed[i].host;
        host.len = ngx_strlen(seed[i].host);

        node = ngx_http_feed_redis_cluster_node(cl, &host,
                                                (in_port_t) seed[i].port);
        if (node == NULL) {
            ngx_http_feed_redis_cluster_destroy(cl);
            return NULL;
        }

        /* the way in when every node known is gone: never forgotten */
        node->seed = 1;
    }

    return cl;
}


void
ngx_http_feed_redis_cluster_start(ngx_http_feed_redis_cluster_t *cl)
{
    ngx_uint_t  i;

    for (i = 0; i < cl->nnodes; i++) {
        if (cl->nodes[i].rd) {
            cl->nodes[i].started = 1;
            ngx_http_feed_redis_start(cl->nodes[i].rd);
        }
    }
}


void
ngx_http_feed_redis_cluster_destroy(ngx_http_feed_redis_cluster_t *cl)
{
    ngx_uint_t  i;

    if (cl == NULL) {
        return;
    }

    cl->exiting = 1;

    if (cl->refresh.timer_set) {
        ngx_del_timer(&cl->refresh);
    }

    if (cl->forget.posted) {
        ngx_delete_posted_event(&cl->forget);
    }

    for (i = 0; i < cl->nnodes; i++) {
        ngx_http_feed_redis_destroy(cl->nodes[i].rd);
    }

    ngx_free(cl);
}


/* the node of that address, made (not started) when it is new */

static ngx_http_feed_redis_node_t *
ngx_http_feed_redis_cluster_node(ngx_http_feed_redis_cluster_t *cl,
    ngx_str_t *host, in_port_t port)
{
    u_char                      *p;
    ngx_uint_t                   i;
    ngx_http_feed_redis_node_t  *node;

    for (i = 0; i < cl->nnodes; i++) {
        node = &cl->nodes[i];

        if (node->rd != NULL
            && node->conf.port == port
            && ngx_strlen(node->host) == host->len
            && ngx_strncmp(node->host, host->data, host->len) == 0)
        {
            return node;
        }
    }

    node = NULL;

    if (host->len && host->len < sizeof(node->host)) {
        node = ngx_http_feed_redis_cluster_free(cl);

        if (node == NULL) {
            /* the dead may hold the table: those idle make room now */
            ngx_http_feed_redis_cluster_forget(cl);
            node = ngx_http_feed_redis_cluster_free(cl);
        }
    }

    if (node == NULL) {
        ngx_log_error(NGX_LOG_ERR, cl->log, 0,
                      "redis cluster node \"%V:%d\" not used: %s", host,
                      (int) port, host->len ? "too many nodes"
                                            : "no address");
        return NULL;
    }

    ngx_memzero(node, sizeof(ngx_http_feed_redis_node_t));

    ngx_memcpy(node->host, host->data, host->len);
    node->host[host->len] = '\0';

    p = ngx_snprintf(node->text, sizeof(node->text), "%V:%d", host,
                     (int) port);

    /* a cluster's nodes all take the seeds' password, and have no db */

    node->conf = *cl->conf;
    node->conf.seeds = NULL;
    node->conf.cluster = 0;
    node->conf.unix_path = NULL;
    node->conf.host = node->host;
    node->conf.port = port;
    node->conf.addr_text.data = node->text;
    node->conf.addr_text.len = p - node->text;

    node->rd = ngx_http_feed_redis_create_node(cl->cycle, &node->conf,
                                               cl->router);
    if (node->rd == NULL) {
        return NULL;
    }

    i = node - cl->nodes;

    if (i >= cl->nnodes) {
        cl->nnodes = i + 1;
    }

    ngx_log_debug3(NGX_LOG_DEBUG_EVENT, cl->log, 0,
                   "feed redis cluster node %V is %p, number %ui",
                   &node->conf.addr_text, node->rd, i + 1);

    return node;
}


/*
 * A free entry of the table, NULL when it is full.  The lowest first: the
 * owners of slots are bytes, a node's number its index + 1.
 */

static ngx_http_feed_redis_node_t *
ngx_http_feed_redis_cluster_free(ngx_http_feed_redis_cluster_t *cl)
{
    ngx_uint_t  i;

    for (i = 0; i < NGX_HTTP_FEED_REDIS_NODES_MAX; i++) {
        if (cl->nodes[i].rd == NULL) {
            return &cl->nodes[i];
        }
    }

    return NULL;
}


/*
 * The nodes are forgotten once the event that asks it is over: a node's
 * connection is freed by no callback of its own (hiredis would use it
 * after), nor of the map's.
 */

static void
ngx_http_feed_redis_cluster_sweep(ngx_http_feed_redis_cluster_t *cl)
{
    if (!cl->exiting && !cl->forget.posted) {
        ngx_post_event(&cl->forget, &ngx_posted_events);
    }
}


static void
ngx_http_feed_redis_cluster_forget_handler(ngx_event_t *ev)
{
    ngx_http_feed_redis_cluster_t  *cl;

    cl = ngx_queue_data(ev, ngx_http_feed_redis_cluster_t, forget);

    ngx_http_feed_redis_cluster_forget(cl);
}


/*
 * Every node that is no seed, owns no slot in the map (nor in the one
 * being read), and has no command on its connection (in flight, or
 * waiting for a retry: a node that only a MOVED or an ASK named has its
 * redirected command there until it is answered): its connection is
 * closed and its entry freed.  Nothing else keeps a node: a watch of the
 * pull lists has its own connection and a copy of the address
 * (ngx_http_feed_timeline_watch.c), the fanout's blocked read is a command
 * in flight.  Not the node asked for the map while its answer is read:
 * a new node that finds the table full calls this from that callback.
 */

static void
ngx_http_feed_redis_cluster_forget(ngx_http_feed_redis_cluster_t *cl)
{
    u_char                       used[NGX_HTTP_FEED_REDIS_NODES_MAX + 1];
    ngx_uint_t                   s, i;
    ngx_http_feed_redis_node_t  *node;

    ngx_memzero(used, sizeof(used));

    for (s = 0; s < NGX_HTTP_FEED_REDIS_SLOTS; s++) {
        used[cl->slots[s]] = 1;
        used[cl->next[s]] = 1;
    }

    for (i = 0; i < cl->nnodes; i++) {
        node = &cl->nodes[i];

        if (node->rd == NULL || node->seed || used[i + 1]
            || (cl->reading && cl->asked == i + 1)
            || ngx_http_feed_redis_pending(node->rd))
        {
            continue;
        }

        ngx_log_error(NGX_LOG_INFO, cl->log, 0,
                      "redis cluster node %V forgotten: not in the map",
                      &node->conf.addr_text);

        ngx_http_feed_stat(redis_forgotten, 1);

        ngx_http_feed_redis_destroy(node->rd);
        ngx_memzero(node, sizeof(ngx_http_feed_redis_node_t));
    }

    while (cl->nnodes && cl->nodes[cl->nnodes - 1].rd == NULL) {
        cl->nnodes--;
    }
}


/* routing */

ngx_http_feed_redis_t *
ngx_http_feed_redis_cluster_route(ngx_http_feed_redis_cluster_t *cl,
    ngx_http_feed_redis_args_t *args)
{
    ngx_uint_t  slot;

    slot = args ? ngx_http_feed_redis_cluster_slot(args)
                : NGX_HTTP_FEED_REDIS_SLOTS;

    if (slot == NGX_HTTP_FEED_REDIS_SLOTS) {
        return ngx_http_feed_redis_cluster_any(cl);
    }

    return ngx_http_feed_redis_cluster_slot_master(cl, slot);
}


/*
 * The slot a command goes by: its first key's, or the key it names as its
 * route; NGX_HTTP_FEED_REDIS_SLOTS for one that any master may run
 */

ngx_uint_t
ngx_http_feed_redis_cluster_slot(ngx_http_feed_redis_args_t *args)
{
    if (args->nkeys) {
        return ngx_http_feed_redis_slot((u_char *) args->argv[args->key],
                                        args->argvlen[args->key]);
    }

    if (args->route) {
        return ngx_http_feed_redis_slot((u_char *) args->route,
                                        args->route_len);
    }

    return NGX_HTTP_FEED_REDIS_SLOTS;
}


/* the master of a slot as the map has it; NULL when none is known */

ngx_http_feed_redis_t *
ngx_http_feed_redis_cluster_slot_master(ngx_http_feed_redis_cluster_t *cl,
    ngx_uint_t slot)
{
    ngx_uint_t  owner;

    owner = cl->slots[slot];

    if (owner == 0) {
        ngx_log_debug1(NGX_LOG_DEBUG_EVENT, cl->log, 0,
                       "feed redis cluster: slot %ui has no master known",
                       slot);
        return NULL;
    }

    return cl->nodes[owner - 1].rd;
}


/* the master of a key's slot, + 1; 0 when none is known */

ngx_uint_t
ngx_http_feed_redis_cluster_owner(ngx_http_feed_redis_cluster_t *cl,
    const u_char *key, size_t len)
{
    return cl->slots[ngx_http_feed_redis_slot(key, len)];
}


/*
 * The name of base's copy on the master of key's slot, "<base>{<tag>}",
 * made in buf (NGX_HTTP_FEED_REDIS_TAG_COPY_LEN(base) bytes); 0 when that
 * master is not known.
 */

size_t
ngx_http_feed_redis_cluster_tag_copy(ngx_http_feed_redis_cluster_t *cl,
    const u_char *key, size_t len, ngx_str_t *base, u_char *buf)
{
    ngx_uint_t  owner;

    owner = ngx_http_feed_redis_cluster_owner(cl, key, len);

    if (owner == 0 || cl->nodes[owner - 1].tag_len == 0) {
        return 0;
    }

    return ngx_sprintf(buf, "%V{%*s}", base, cl->nodes[owner - 1].tag_len,
                       cl->nodes[owner - 1].tag)
           - buf;
}


/*
 * The mark that says a copy on the master of key's slot is whole for the
 * data that master serves now: "~" and the first digits of its run id, in
 * buf (NGX_HTTP_FEED_REDIS_MARK_LEN bytes).  A master restarted on an old
 * file (a replica's last full sync, a snapshot), or a replica promoted
 * behind its master, answers with another run id: its copies, made for
 * the data of another run, are not taken as whole, whatever they hold
 * (lib/deleted.lua).  "~?", which no copy has, while the run id is not
 * known.
 */

size_t
ngx_http_feed_redis_cluster_mark(ngx_http_feed_redis_cluster_t *cl,
    const u_char *key, size_t len, u_char *buf)
{
    const char  *id;
    ngx_uint_t   owner;

    owner = ngx_http_feed_redis_cluster_owner(cl, key, len);

    id = (owner && cl->nodes[owner - 1].rd)
         ? ngx_http_feed_redis_run_id(cl->nodes[owner - 1].rd) : NULL;

    buf[0] = '~';

    if (id == NULL || ngx_strlen(id) < NGX_HTTP_FEED_REDIS_RUN_LEN) {
        buf[1] = '?';
        return 2;
    }

    ngx_memcpy(buf + 1, id, NGX_HTTP_FEED_REDIS_RUN_LEN);

    return NGX_HTTP_FEED_REDIS_MARK_LEN;
}


/* the names of base's copies, one on each master that has slots */

void
ngx_http_feed_redis_cluster_tag_copies(ngx_http_feed_redis_cluster_t *cl,
    ngx_str_t *base, ngx_http_feed_redis_tag_copy_pt handler, void *data)
{
    u_char                      *p, buf[NGX_HTTP_FEED_REDIS_TAG_COPY_MAX];
    ngx_uint_t                   i;
    ngx_http_feed_redis_node_t  *node;

    for (i = 0; i < cl->nnodes; i++) {
        node = &cl->nodes[i];

        if (!node->master || node->tag_len == 0
            || base->len + node->tag_len + 2 > sizeof(buf))
        {
            continue;
        }

        p = ngx_sprintf(buf, "%V{%*s}", base, node->tag_len, node->tag);

        handler(data, buf, p - buf);
    }
}


/*
 * Node number n (as ngx_http_feed_redis_cluster_owner() numbers them) when
 * it is a master with slots: its address, and its copies' suffix,
 * "{<tag>}" (buf: NGX_HTTP_FEED_REDIS_TAG_COPY_MAX bytes); NULL otherwise
 */

ngx_http_feed_redis_conf_t *
ngx_http_feed_redis_cluster_master(ngx_http_feed_redis_cluster_t *cl,
    ngx_uint_t n, u_char *buf, size_t *len)
{
    ngx_http_feed_redis_node_t  *node;

    if (n == 0 || n > cl->nnodes) {
        return NULL;
    }

    node = &cl->nodes[n - 1];

    if (!node->master || node->tag_len == 0) {
        return NULL;
    }

    *len = ngx_sprintf(buf, "{%*s}", node->tag_len, node->tag) - buf;

    return &node->conf;
}


/* a master whose connection is up, for a command without keys */

static ngx_http_feed_redis_t *
ngx_http_feed_redis_cluster_any(ngx_http_feed_redis_cluster_t *cl)
{
    ngx_uint_t  i;

    for (i = 0; i < cl->nnodes; i++) {
        if (cl->nodes[i].master
            && ngx_http_feed_redis_state(cl->nodes[i].rd)
               == NGX_HTTP_FEED_REDIS_UP)
        {
            return cl->nodes[i].rd;
        }
    }

    return NULL;
}


/*
 * MOVED: the slot is the target's now, and the map is asked again (more
 * slots may have moved with it); ASK: only this command goes there.
 */

ngx_http_feed_redis_t *
ngx_http_feed_redis_cluster_redirect(ngx_http_feed_redis_cluster_t *cl,
    ngx_http_feed_redis_t *from, ngx_http_feed_redis_redirect_t *rr)
{
    ngx_uint_t                   i;
    ngx_http_feed_redis_node_t  *node;
    ngx_str_t                    host;

    host = rr->addr.host;

    if (host.len == 0) {
        /* an empty host: the node that answered */

        for (i = 0; i < cl->nnodes; i++) {
            if (cl->nodes[i].rd == from) {
                host.data = (u_char *) cl->nodes[i].host;
                host.len = ngx_strlen(cl->nodes[i].host);
                break;
            }
        }
    }

    node = ngx_http_feed_redis_cluster_node(cl, &host, rr->addr.port);
    if (node == NULL) {
        return NULL;
    }

    if (!node->started) {
        node->started = 1;
        ngx_http_feed_redis_start(node->rd);
    }

    ngx_log_debug4(NGX_LOG_DEBUG_EVENT, cl->log, 0,
                   "feed redis cluster: %s slot %ui to %V (%p)",
                   rr->ask ? "ask for" : "moved", rr->slot,
                   &node->conf.addr_text, node->rd);

    if (!rr->ask) {
        node->master = 1;
        cl->slots[rr->slot] = (uint8_t) (node - cl->nodes + 1);

        /*
         * The copies' names follow the slots at once: the map asked now
         * may be this one already, and then would not make them again
         */
        ngx_http_feed_redis_cluster_tags(cl);

        if (!cl->refreshing) {
            ngx_http_feed_redis_cluster_ask(cl);
        }
    }

    return node->rd;
}


/*
 * A node said the map is old (a key not its own any more) or that a slot
 * has no master (CLUSTERDOWN): the map is asked again; why: for the log
 */

void
ngx_http_feed_redis_cluster_stale(ngx_http_feed_redis_cluster_t *cl,
    const char *why)
{
    if (!cl->refreshing) {
        ngx_log_debug1(NGX_LOG_DEBUG_EVENT, cl->log, 0,
                       "feed redis cluster: %s, map asked", why);
        ngx_http_feed_redis_cluster_ask(cl);
    }
}


/* node events, from ngx_http_feed_redis.c */

void
ngx_http_feed_redis_cluster_node_ready(ngx_http_feed_redis_cluster_t *cl,
    ngx_http_feed_redis_t *rd)
{
    ngx_uint_t  i;

    ngx_http_feed_redis_cluster_make_run_id(cl);

    if (!cl->mapped) {
        if (!cl->refreshing) {
            ngx_http_feed_redis_cluster_ask(cl);
        }

        return;
    }

    /* a master back: what waited for Redis can go on */

    for (i = 0; i < cl->nnodes; i++) {
        if (cl->nodes[i].rd == rd && cl->nodes[i].master) {
            ngx_http_feed_redis_router_ready(cl->router);
            return;
        }
    }
}


/*
 * A connection went: the map is asked again at once, and then often
 * until every slot's master is up (a failover takes about the cluster's
 * node timeout).  NGX_DECLINED: the node is no master, let it rest.
 */

ngx_int_t
ngx_http_feed_redis_cluster_node_down(ngx_http_feed_redis_cluster_t *cl,
    ngx_http_feed_redis_t *rd)
{
    ngx_uint_t  i;

    if (cl->exiting) {
        return NGX_DECLINED;
    }

    cl->run_id[0] = '\0';

    for (i = 0; i < cl->nnodes; i++) {
        if (cl->nodes[i].rd != rd) {
            continue;
        }

        if (!cl->refreshing) {
            ngx_http_feed_redis_cluster_ask(cl);
        }

        if (cl->nodes[i].master || !cl->mapped) {
            return NGX_OK;
        }

        ngx_log_debug1(NGX_LOG_DEBUG_EVENT, cl->log, 0,
                       "feed redis cluster node %V rests: no master",
                       &cl->nodes[i].conf.addr_text);

        cl->nodes[i].started = 0;

        /* in its connection's callback: forgotten once it returned */
        ngx_http_feed_redis_cluster_sweep(cl);

        return NGX_DECLINED;
    }

    return NGX_OK;
}


/* the map */

static void
ngx_http_feed_redis_cluster_refresh(ngx_event_t *ev)
{
    ngx_http_feed_redis_cluster_t  *cl;

    cl = ngx_queue_data(ev, ngx_http_feed_redis_cluster_t, refresh);

    if (!cl->refreshing) {
        ngx_http_feed_redis_cluster_ask(cl);
    }
}


static void
ngx_http_feed_redis_cluster_ask(ngx_http_feed_redis_cluster_t *cl)
{
    ngx_uint_t  i;

    if (cl->exiting || ngx_exiting || ngx_terminate) {
        return;
    }

    if (cl->refresh.timer_set) {
        ngx_del_timer(&cl->refresh);
    }

    /*
     * A node not blocked first: the fanout's connection to a partition's
     * node waits in a blocked read, and the map would wait behind it; if
     * every node that is up is blocked, the map waits (the ask's timeout
     * counts from the end of the read), it does not time out.
     */

    if (ngx_http_feed_redis_cluster_ask_one(cl, 1) == NGX_OK
        || ngx_http_feed_redis_cluster_ask_one(cl, 0) == NGX_OK)
    {
        return;
    }

    /* nobody up: wake the nodes that rest, the seeds among them */

    for (i = 0; i < cl->nnodes; i++) {
        if (cl->nodes[i].rd && !cl->nodes[i].started) {
            cl->nodes[i].started = 1;
            ngx_http_feed_redis_start(cl->nodes[i].rd);
        }
    }

    ngx_http_feed_redis_cluster_rearm(cl);
}


/*
 * CLUSTER SLOTS of a node that is up (and not blocked, or blocked: the
 * timeout then counts from the end of its read), the next one each time
 */

static ngx_int_t
ngx_http_feed_redis_cluster_ask_one(ngx_http_feed_redis_cluster_t *cl,
    ngx_uint_t idle)
{
    const char                  *argv[2];
    size_t                       argvlen[2];
    ngx_msec_t                   blocked;
    ngx_uint_t                   i, n;
    ngx_http_feed_redis_node_t  *node;
    ngx_http_feed_redis_args_t   args;

    for (n = 0; n < cl->nnodes; n++) {
        i = (cl->turn + n) % cl->nnodes;
        node = &cl->nodes[i];

        if (node->rd == NULL
            || ngx_http_feed_redis_state(node->rd) != NGX_HTTP_FEED_REDIS_UP)
        {
            continue;
        }

        blocked = ngx_http_feed_redis_blocked(node->rd);

        if (idle && blocked) {
            continue;
        }

        ngx_http_feed_redis_args_init(&args, argv, argvlen);
        ngx_http_feed_redis_args_lit(&args, "CLUSTER");
        ngx_http_feed_redis_args_lit(&args, "SLOTS");

        if (ngx_http_feed_redis_send_timeout(node->rd,
                blocked ? blocked + node->conf.timeout : 0,
                ngx_http_feed_redis_cluster_slots, cl, &args)
            == NULL)
        {
            continue;
        }

        ngx_log_debug1(NGX_LOG_DEBUG_EVENT, cl->log, 0,
                       "feed redis cluster: asking %V for the map",
                       &node->conf.addr_text);

        cl->turn = i + 1;
        cl->asked = i + 1;
        cl->refreshing = 1;

        return NGX_OK;
    }

    return NGX_DECLINED;
}


static void
ngx_http_feed_redis_cluster_slots(void *data, redisReply *reply)
{
    ngx_http_feed_redis_cluster_t  *cl = data;

    ngx_int_t   rc;
    ngx_uint_t  s;

    cl->refreshing = 0;

    if (cl->exiting) {
        return;
    }

    ngx_memzero(cl->next, sizeof(cl->next));

    /* a node made for the map may forget others, never the one asked */
    cl->reading = 1;

    rc = ngx_http_feed_redis_slots_parse(reply,
                                         ngx_http_feed_redis_cluster_range,
                                         cl);
    cl->reading = 0;

    if (rc != NGX_OK) {
        ngx_log_error(NGX_LOG_ERR, cl->log, 0,
                      "redis cluster map from %V not read: %*s",
                      &cl->nodes[cl->asked - 1].conf.addr_text,
                      (size_t) (reply == NULL ? sizeof("no answer") - 1
                                : reply->type == REDIS_REPLY_ERROR
                                  ? reply->len : sizeof("not a map") - 1),
                      reply == NULL ? "no answer"
                      : reply->type == REDIS_REPLY_ERROR ? reply->str
                                                         : "not a map");
        ngx_http_feed_redis_cluster_rearm(cl);
        return;
    }

    /*
     * A node outside the cluster (new, or reset, at a seed's address)
     * knows no slot: its map is not the cluster's, and would take every
     * master and its copies away
     */

    for (s = 0; s < NGX_HTTP_FEED_REDIS_SLOTS; s++) {
        if (cl->next[s]) {
            break;
        }
    }

    if (s == NGX_HTTP_FEED_REDIS_SLOTS) {
        ngx_log_error(NGX_LOG_ERR, cl->log, 0,
                      "redis cluster map from %V not read: no slot has a "
                      "master", &cl->nodes[cl->asked - 1].conf.addr_text);
        ngx_http_feed_redis_cluster_rearm(cl);
        return;
    }

    ngx_http_feed_redis_cluster_apply(cl);
    ngx_http_feed_redis_cluster_sweep(cl);
    ngx_http_feed_redis_cluster_rearm(cl);
}


static ngx_int_t
ngx_http_feed_redis_cluster_range(void *data, ngx_uint_t first,
    ngx_uint_t last, ngx_http_feed_redis_node_addr_t *master)
{
    ngx_http_feed_redis_cluster_t  *cl = data;

    ngx_str_t                    host;
    ngx_uint_t                   s;
    ngx_http_feed_redis_node_t  *node;

    host = master->host;

    if (host.len == 0) {
        host.data = (u_char *) cl->nodes[cl->asked - 1].host;
        host.len = ngx_strlen(cl->nodes[cl->asked - 1].host);
    }

    node = ngx_http_feed_redis_cluster_node(cl, &host, master->port);
    if (node == NULL) {
        /* its slots stay without a master; the rest of the map is good */
        return NGX_OK;
    }

    for (s = first; s <= last; s++) {
        cl->next[s] = (uint8_t) (node - cl->nodes + 1);
    }

    return NGX_OK;
}


static void
ngx_http_feed_redis_cluster_apply(ngx_http_feed_redis_cluster_t *cl)
{
    u_char      was[NGX_HTTP_FEED_REDIS_NODES_MAX];
    ngx_uint_t  s, i, up, missing, was_mapped, back;

    missing = 0;

    for (i = 0; i < cl->nnodes; i++) {
        was[i] = cl->nodes[i].master;
        cl->nodes[i].master = 0;
    }

    for (s = 0; s < NGX_HTTP_FEED_REDIS_SLOTS; s++) {
        if (cl->next[s] == 0) {
            missing++;
            continue;
        }

        cl->nodes[cl->next[s] - 1].master = 1;
    }

    if (ngx_memcmp(cl->slots, cl->next, sizeof(cl->slots)) != 0) {
        ngx_memcpy(cl->slots, cl->next, sizeof(cl->slots));
        ngx_http_feed_redis_cluster_tags(cl);

        ngx_log_error(NGX_LOG_INFO, cl->log, 0,
                      "redis cluster map from %V: %ui masters, "
                      "%ui slots without one",
                      &cl->nodes[cl->asked - 1].conf.addr_text,
                      ngx_http_feed_redis_cluster_masters(cl, &up), missing);
    }

    for (i = 0; i < cl->nnodes; i++) {
        if (cl->nodes[i].master && !cl->nodes[i].started) {
            cl->nodes[i].started = 1;
            ngx_http_feed_redis_start(cl->nodes[i].rd);
        }
    }

    /*
     * A node the map makes a master again whose connection stayed up (a
     * seed, or a node with commands in flight, kept while it was a
     * replica): no connection comes back to say so, and what waited for
     * its slots' master (the fanout's group, after its read was lost with
     * the old master) is told here
     */

    back = 0;

    for (i = 0; i < cl->nnodes; i++) {
        if (cl->nodes[i].master && !was[i] && cl->nodes[i].rd
            && ngx_http_feed_redis_state(cl->nodes[i].rd)
               == NGX_HTTP_FEED_REDIS_UP)
        {
            ngx_log_debug1(NGX_LOG_DEBUG_EVENT, cl->log, 0,
                           "feed redis cluster: %V a master again, up",
                           &cl->nodes[i].conf.addr_text);
            back = 1;
        }
    }

    was_mapped = cl->mapped;
    cl->mapped = (missing == 0);

    ngx_http_feed_redis_cluster_make_run_id(cl);

    if (cl->mapped && (!was_mapped || back)) {
        ngx_http_feed_redis_router_ready(cl->router);
    }
}


/*
 * Each master's last slot, and its hash tag: keys named with it are the
 * master's own (ngx_http_feed_redis_cluster_tag_copy()).  Its last, not its
 * first: redis-cli --cluster reshard moves a master's slots from the
 * lowest up, so that the tag of a master giving slots stays until the
 * end, and of one taking lower slots does not move.  Made again only for
 * a master whose last slot moved.  A tag that is no master's any more
 * (not one whose master changed: it is written all along) is told to the
 * router's user: from now on this worker writes nothing to its copies.
 */

static void
ngx_http_feed_redis_cluster_tags(ngx_http_feed_redis_cluster_t *cl)
{
    u_char                       tag[NGX_HTTP_FEED_REDIS_TAG_LEN + 2];
    size_t                       len;
    ngx_uint_t                   s, i, j, n;
    ngx_uint_t                   last[NGX_HTTP_FEED_REDIS_NODES_MAX];
    ngx_uint_t                   gone[NGX_HTTP_FEED_REDIS_NODES_MAX];
    ngx_http_feed_redis_node_t  *node;

    ngx_memzero(last, sizeof(last));

    for (s = 0; s < NGX_HTTP_FEED_REDIS_SLOTS; s++) {
        if (cl->slots[s]) {
            last[cl->slots[s] - 1] = s + 1;
        }
    }

    n = 0;

    for (i = 0; i < cl->nnodes; i++) {
        node = &cl->nodes[i];

        if (node->last == last[i]) {
            continue;
        }

        if (node->last) {
            gone[n++] = node->last;
        }

        node->last = last[i];
        node->tag_len = last[i]
                        ? ngx_http_feed_redis_slot_tag(last[i] - 1, node->tag)
                        : 0;

        ngx_log_debug4(NGX_LOG_DEBUG_EVENT, cl->log, 0,
                       "feed redis cluster node %V: last slot %ui, tag %*s",
                       &node->conf.addr_text, last[i], node->tag_len,
                       node->tag);
    }

    for (j = 0; j < n; j++) {
        for (i = 0; i < cl->nnodes; i++) {
            if (cl->nodes[i].last == gone[j]) {
                break;
            }
        }

        if (i < cl->nnodes) {
            continue;
        }

        tag[0] = '{';
        len = ngx_http_feed_redis_slot_tag(gone[j] - 1, tag + 1) + 1;
        tag[len++] = '}';

        ngx_log_debug2(NGX_LOG_DEBUG_EVENT, cl->log, 0,
                       "feed redis cluster: tag %*s is no master's", len,
                       tag);

        ngx_http_feed_redis_router_retired(cl->router, tag, len);
    }
}


/* often while a slot lacks a master that is up, seldom when all is well */

static void
ngx_http_feed_redis_cluster_rearm(ngx_http_feed_redis_cluster_t *cl)
{
    ngx_uint_t  i;
    ngx_msec_t  delay;

    if (cl->exiting || ngx_exiting || ngx_terminate) {
        return;
    }

    delay = cl->mapped ? NGX_HTTP_FEED_REDIS_REFRESH_SLOW
                       : NGX_HTTP_FEED_REDIS_REFRESH_FAST;

    for (i = 0; i < cl->nnodes; i++) {
        if (cl->nodes[i].master
            && ngx_http_feed_redis_state(cl->nodes[i].rd)
               != NGX_HTTP_FEED_REDIS_UP)
        {
            delay = NGX_HTTP_FEED_REDIS_REFRESH_FAST;
            break;
        }
    }

    if (cl->refresh.timer_set) {
        ngx_del_timer(&cl->refresh);
    }

    ngx_add_timer(&cl->refresh, delay);
}


/*
 * The cluster's run id changes whenever a master's does (a restart, a
 * failover): what a single Redis's run id tells, that data may be lost.
 * NULL until every master has answered.
 */

static void
ngx_http_feed_redis_cluster_make_run_id(ngx_http_feed_redis_cluster_t *cl)
{
    uint32_t     crc;
    ngx_uint_t   i;
    const char  *id;

    cl->run_id[0] = '\0';

    if (!cl->mapped) {
        return;
    }

    ngx_crc32_init(crc);

    for (i = 0; i < cl->nnodes; i++) {
        if (!cl->nodes[i].master) {
            continue;
        }

        id = ngx_http_feed_redis_run_id(cl->nodes[i].rd);
        if (id == NULL) {
            return;
        }

        ngx_crc32_update(&crc, (u_char *) id, ngx_strlen(id));
    }

    ngx_crc32_final(crc);

    ngx_sprintf((u_char *) cl->run_id, "c%08xD%Z", crc);
}


/* what the status page and the router's own functions tell */

ngx_http_feed_redis_state_e
ngx_http_feed_redis_cluster_state(ngx_http_feed_redis_cluster_t *cl)
{
    if (cl->exiting) {
        return NGX_HTTP_FEED_REDIS_EXITING;
    }

    if (!cl->mapped) {
        return cl->nnodes ? NGX_HTTP_FEED_REDIS_CONNECTING
                          : NGX_HTTP_FEED_REDIS_DOWN;
    }

    return ngx_http_feed_redis_cluster_any(cl) ? NGX_HTTP_FEED_REDIS_UP
                                               : NGX_HTTP_FEED_REDIS_DOWN;
}


ngx_uint_t
ngx_http_feed_redis_cluster_pending(ngx_http_feed_redis_cluster_t *cl)
{
    ngx_uint_t  i, n;

    n = 0;

    for (i = 0; i < cl->nnodes; i++) {
        n += ngx_http_feed_redis_pending(cl->nodes[i].rd);
    }

    return n;
}


const char *
ngx_http_feed_redis_cluster_run_id(ngx_http_feed_redis_cluster_t *cl)
{
    return cl->run_id[0] ? cl->run_id : NULL;
}


ngx_uint_t
ngx_http_feed_redis_cluster_masters(ngx_http_feed_redis_cluster_t *cl,
    ngx_uint_t *up)
{
    ngx_uint_t  i, n;

    n = 0;
    *up = 0;

    for (i = 0; i < cl->nnodes; i++) {
        if (!cl->nodes[i].master) {
            continue;
        }

        n++;

        if (ngx_http_feed_redis_state(cl->nodes[i].rd)
            == NGX_HTTP_FEED_REDIS_UP)
        {
            (*up)++;
        }
    }

    return n;
}


ngx_uint_t
ngx_http_feed_redis_cluster_nodes(ngx_http_feed_redis_cluster_t *cl)
{
    ngx_uint_t  i, n;

    n = 0;

    for (i = 0; i < cl->nnodes; i++) {
        n += (cl->nodes[i].rd != NULL);
    }

    return n;
}
