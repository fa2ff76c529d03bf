
/*
 * ngx_feed_module: the feed_redis directive, parsed into the Redis
 * layer's configuration.
 */


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_redis.h"


static ngx_int_t ngx_http_feed_redis_parse_addr(ngx_conf_t *cf,
    ngx_http_feed_redis_conf_t *rcf, ngx_str_t *addr, in_port_t port);
static ngx_int_t ngx_http_feed_redis_sentinel_check(ngx_conf_t *cf,
    ngx_http_feed_redis_conf_t *rcf);
static ngx_int_t ngx_http_feed_redis_parse_name(ngx_conf_t *cf,
    ngx_http_feed_redis_conf_t *rcf, ngx_url_t *u, ngx_str_t *addr);
static ngx_int_t ngx_http_feed_redis_cluster_check(ngx_conf_t *cf,
    ngx_http_feed_redis_conf_t *rcf);
static ngx_int_t ngx_http_feed_redis_parse_param(ngx_conf_t *cf,
    ngx_http_feed_redis_conf_t *rcf, ngx_str_t *param);


/*
 * feed_redis: one address (host:port or unix:path), or a cluster's seed
 * nodes, or the sentinels of sentinel=<name>; then password=, db=,
 * sentinel_password= and cluster.
 */

char *
ngx_http_feed_redis_conf(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_str_t                   *value;
    ngx_uint_t                   i;
    ngx_http_feed_redis_conf_t  *rcf, *seed;

    rcf = (ngx_http_feed_redis_conf_t *) ((u_char *) conf + cmd->offset);

    if (rcf->seeds) {
        return "is duplicate";
    }

    value = cf->args->elts;

    /* the sentinels' default port is theirs: known before the addresses */

    for (i = 1; i < cf->args->nelts; i++) {
        if (ngx_strncmp(value[i].data, "sentinel=", 9) == 0) {
            if (ngx_http_feed_redis_parse_param(cf, rcf, &value[i])
                != NGX_OK)
            {
                return NGX_CONF_ERROR;
            }
        }
    }

    rcf->seeds = ngx_array_create(cf->pool, 3,
                                  sizeof(ngx_http_feed_redis_conf_t));
    if (rcf->seeds == NULL) {
        return NGX_CONF_ERROR;
    }

    for (i = 1; i < cf->args->nelts; i++) {

        if (ngx_strlchr(value[i].data, value[i].data + value[i].len, '=')) {
            if (ngx_strncmp(value[i].data, "sentinel=", 9) != 0
                && ngx_http_feed_redis_parse_param(cf, rcf, &value[i])
                   != NGX_OK)
            {
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_strcmp(value[i].data, "cluster") == 0) {
            rcf->cluster = 1;
            continue;
        }

        /* another address: the seed nodes of a cluster */

        seed = ngx_array_push(rcf->seeds);
        if (seed == NULL) {
            return NGX_CONF_ERROR;
        }

        ngx_memzero(seed, sizeof(ngx_http_feed_redis_conf_t));

        if (ngx_http_feed_redis_parse_addr(cf, seed, &value[i],
                                           rcf->sentinel.len ? 26379 : 6379)
            != NGX_OK)
        {
            return NGX_CONF_ERROR;
        }
    }

    if (rcf->seeds->nelts == 0) {
        return "needs an address";
    }

    seed = rcf->seeds->elts;

    rcf->addr_text = seed[0].addr_text;
    rcf->host = seed[0].host;
    rcf->port = seed[0].port;
    rcf->unix_path = seed[0].unix_path;
    rcf->name = seed[0].name;

    if (rcf->sentinel.len) {
        return (ngx_http_feed_redis_sentinel_check(cf, rcf) == NGX_OK)
               ? NGX_CONF_OK : NGX_CONF_ERROR;
    }

    if (rcf->sentinel_password.len) {
        return "has \"sentinel_password=\" without \"sentinel=\"";
    }

    if (rcf->seeds->nelts > 1) {
        rcf->cluster = 1;
    }

    if (rcf->cluster && ngx_http_feed_redis_cluster_check(cf, rcf) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * Sentinels are asked for the primary by name: TCP addresses, no
 * cluster.  The address text of the connections to the primary is the
 * name's until a sentinel tells the primary.
 */

static ngx_int_t
ngx_http_feed_redis_sentinel_check(ngx_conf_t *cf,
    ngx_http_feed_redis_conf_t *rcf)
{
    u_char                      *p;
    ngx_uint_t                   i;
    ngx_http_feed_redis_conf_t  *seed;

    if (rcf->cluster) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"feed_redis\" cannot be both \"cluster\" and "
                           "\"sentinel=\"");
        return NGX_ERROR;
    }

    seed = rcf->seeds->elts;

    for (i = 0; i < rcf->seeds->nelts; i++) {
        if (seed[i].unix_path) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"feed_redis\" sentinels need TCP "
                               "addresses, not \"%V\"", &seed[i].addr_text);
            return NGX_ERROR;
        }
    }

    p = ngx_pnalloc(cf->pool, sizeof("sentinel=") + rcf->sentinel.len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    rcf->addr_text.data = p;
    rcf->addr_text.len = ngx_sprintf(p, "sentinel=%V%Z", &rcf->sentinel)
                         - p - 1;
    rcf->host = NULL;
    rcf->port = 0;
    rcf->unix_path = NULL;

    return NGX_OK;
}


/* a cluster has only database 0, and its nodes tell their IP addresses */

static ngx_int_t
ngx_http_feed_redis_cluster_check(ngx_conf_t *cf,
    ngx_http_feed_redis_conf_t *rcf)
{
    ngx_uint_t                   i;
    ngx_http_feed_redis_conf_t  *seed;

    if (rcf->db > 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"feed_redis\" of a cluster cannot select a "
                           "database: a cluster has only db=0");
        return NGX_ERROR;
    }

    seed = rcf->seeds->elts;

    for (i = 0; i < rcf->seeds->nelts; i++) {
        if (seed[i].unix_path) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"feed_redis\" of a cluster needs TCP "
                               "addresses, not \"%V\"", &seed[i].addr_text);
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/*
 * Names are resolved here: hiredis would resolve them with a blocking
 * getaddrinfo() on every reconnect, on the event loop.  A name is kept
 * too, for nginx's resolver to resolve again at run time when one is
 * configured; one that does not resolve here is left to it (the module's
 * conf checks that there is one, ngx_http_feed_redis_conf_names()).
 */

static ngx_int_t
ngx_http_feed_redis_parse_addr(ngx_conf_t *cf,
    ngx_http_feed_redis_conf_t *rcf, ngx_str_t *addr, in_port_t port)
{
    size_t               len;
    ngx_url_t            u;
    struct sockaddr     *sa;
    u_char               text[NGX_SOCKADDR_STRLEN];
#if (NGX_HAVE_UNIX_DOMAIN)
    struct sockaddr_un  *saun;
#endif

    ngx_memzero(&u, sizeof(ngx_url_t));

    u.url = *addr;
    u.default_port = port;
    u.no_resolve = 1;

    if (ngx_parse_url(cf->pool, &u) != NGX_OK || u.uri.len) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "%s in \"feed_redis\" address \"%V\"",
                           u.err ? u.err : "invalid address", addr);
        return NGX_ERROR;
    }

    if (u.naddrs == 0 && u.host.len) {
        if (u.host.data[0] != '['
            && ngx_inet_addr(u.host.data, u.host.len) == INADDR_NONE
            && ngx_http_feed_redis_parse_name(cf, rcf, &u, addr) != NGX_OK)
        {
            return NGX_ERROR;
        }

        if (ngx_inet_resolve_host(cf->pool, &u) != NGX_OK
            || u.naddrs == 0)
        {
            if (rcf->name.len == 0) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid \"feed_redis\" address \"%V\"",
                                   addr);
                return NGX_ERROR;
            }

            /* left to the resolver: no address until it answers */
            rcf->addr_text = *addr;
            rcf->port = u.port;
            return NGX_OK;
        }
    }

    if (u.naddrs == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid \"feed_redis\" address \"%V\"", addr);
        return NGX_ERROR;
    }

    rcf->addr_text = *addr;
    sa = u.addrs[0].sockaddr;

#if (NGX_HAVE_UNIX_DOMAIN)
    if (sa->sa_family == AF_UNIX) {
        saun = (struct sockaddr_un *) sa;
        len = ngx_strlen(saun->sun_path);

        rcf->unix_path = ngx_pcalloc(cf->pool, len + 1);
        if (rcf->unix_path == NULL) {
            return NGX_ERROR;
        }

        ngx_memcpy(rcf->unix_path, saun->sun_path, len);

        return NGX_OK;
    }
#endif

    len = ngx_sock_ntop(sa, u.addrs[0].socklen, text, NGX_SOCKADDR_STRLEN, 0);

    rcf->host = ngx_pcalloc(cf->pool, len + 1);
    if (rcf->host == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(rcf->host, text, len);
    rcf->port = u.port;

    return NGX_OK;
}


/* a host name, kept NUL-terminated for the log and the resolver */

static ngx_int_t
ngx_http_feed_redis_parse_name(ngx_conf_t *cf,
    ngx_http_feed_redis_conf_t *rcf, ngx_url_t *u, ngx_str_t *addr)
{
    rcf->name.data = ngx_pnalloc(cf->pool, u->host.len + 1);
    if (rcf->name.data == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(rcf->name.data, u->host.data, u->host.len);
    rcf->name.data[u->host.len] = '\0';
    rcf->name.len = u->host.len;

    return NGX_OK;
}


/*
 * At the end of the http block: a name is resolved again at run time
 * only through the resolver of the http block; one that did not resolve
 * when read needs one.  Names of a cluster's seeds or of sentinels are
 * resolved once (their nodes tell addresses, not names).
 */

ngx_int_t
ngx_http_feed_redis_conf_names(ngx_conf_t *cf,
    ngx_http_feed_redis_conf_t *rcf, ngx_resolver_t *resolver,
    ngx_msec_t timeout)
{
    ngx_uint_t                   i;
    ngx_http_feed_redis_conf_t  *seed;

    if (rcf->seeds == NULL) {
        return NGX_OK;
    }

    if (resolver && resolver->connections.nelts == 0) {
        resolver = NULL;
    }

    seed = rcf->seeds->elts;

    for (i = 0; i < rcf->seeds->nelts; i++) {
        if (seed[i].name.len && seed[i].host == NULL
            && (resolver == NULL || rcf->cluster || rcf->sentinel.len))
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "host not found in \"feed_redis\" address "
                               "\"%V\"%s", &seed[i].addr_text,
                               resolver ? "" : " (without a \"resolver\")");
            return NGX_ERROR;
        }
    }

    if (resolver == NULL || rcf->cluster || rcf->sentinel.len
        || rcf->name.len == 0)
    {
        ngx_str_null(&rcf->name);
        return NGX_OK;
    }

    rcf->resolver = resolver;

    /* not merged yet at this point: nginx's own default is 30 s */
    rcf->resolver_timeout = (timeout == NGX_CONF_UNSET_MSEC) ? 30000
                                                              : timeout;

    return NGX_OK;
}


static ngx_int_t
ngx_http_feed_redis_parse_param(ngx_conf_t *cf,
    ngx_http_feed_redis_conf_t *rcf, ngx_str_t *param)
{
    if (ngx_strncmp(param->data, "password=", 9) == 0
        && param->len > 9)
    {
        rcf->password.data = param->data + 9;
        rcf->password.len = param->len - 9;
        return NGX_OK;
    }

    if (ngx_strncmp(param->data, "sentinel_password=", 18) == 0
        && param->len > 18)
    {
        rcf->sentinel_password.data = param->data + 18;
        rcf->sentinel_password.len = param->len - 18;
        return NGX_OK;
    }

    /* a primary's name, as in the sentinels' "sentinel monitor" */

    if (ngx_strncmp(param->data, "sentinel=", 9) == 0 && param->len > 9) {
        rcf->sentinel.data = param->data + 9;
        rcf->sentinel.len = param->len - 9;
        return NGX_OK;
    }

    if (ngx_strncmp(param->data, "db=", 3) == 0) {
        rcf->db = ngx_atoi(param->data + 3, param->len - 3);

        if (rcf->db != NGX_ERROR && rcf->db < 65536) {
            return NGX_OK;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid database index \"%V\" in \"feed_redis\"",
                           param);
        return NGX_ERROR;
    }

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid parameter \"%V\" in \"feed_redis\"", param);

    return NGX_ERROR;
}
