/*
 * settings.c - defaults, validation and the inih-based loader.
 */
#include "settings.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <event2/util.h>
#include <sys/socket.h>
#include <sys/un.h>

static const char *const level_names[] = { "error", "warn", "info", "debug" };

const char *settings_log_level_name(enum log_level l)
{
    return (unsigned)l < sizeof(level_names) / sizeof(level_names[0]) ? level_names[l] : "?";
}

static int replace_str(char **dst, const char *src)
{
    char *copy = NULL;

    if (src && !(copy = strdup(src)))
        return -1;
    free(*dst);
    *dst = copy;
    return 0;
}

int settings_init(struct settings *s)
{
    memset(s, 0, sizeof(*s));
    s->unix_socket_mode = 0660;        /* owner and group; widen it in the file if needed */
    s->max_clients = 4096;             /* a few MB of buffers at most; raise with ulimit -n */
    s->max_line = 1024;                /* the longest valid request is ~225 bytes */
    s->max_locks_per_client = 256;     /* bounds table memory to ~max_clients * 256 holds */
    s->zk_session_timeout_ms = 10000;  /* a dead daemon's locks go within ~10 s */
    s->log_level = LOG_LVL_INFO;
    if (replace_str(&s->listen, SETTINGS_LISTEN_DEFAULT) < 0 ||
        replace_str(&s->zk_root, "/lockbroker") < 0) {
        settings_free(s);
        return -1;
    }
    return 0;
}

void settings_free(struct settings *s)
{
    free(s->listen);
    free(s->unix_socket);
    free(s->zk_hosts);
    free(s->zk_root);
    memset(s, 0, sizeof(*s));
}

/* Unsigned decimal in [min, max]; the whole string must be digits. */
static int parse_uint(const char *v, unsigned min, unsigned max, unsigned *out)
{
    char *end;
    unsigned long n;

    if (*v < '0' || *v > '9')
        return -1;
    errno = 0;
    n = strtoul(v, &end, 10);
    if (errno || *end || n < min || n > max)
        return -1;
    *out = (unsigned)n;
    return 0;
}

int settings_listen_addr(const char *listen, struct sockaddr_storage *ss, int *len)
{
    const char *colon = strrchr(listen, ':');
    char copy[128];
    bool port0;

    /* Numeric only: no DNS at start-up, no surprise about which address is bound. */
    if (!colon || colon[1] == '\0' || strlen(listen) >= sizeof(copy) - 1 ||
        strspn(colon + 1, "0123456789") != strlen(colon + 1))
        return -1;
    /* libevent reads "::1:7411" as address ::1:7411 without a port, and
     * its atoi() wraps 4294967297 to port 1: insist on brackets and check
     * the port here. */
    if (listen[0] != '[' && memchr(listen, ':', (size_t)(colon - listen)))
        return -1;
    if (strtoul(colon + 1, NULL, 10) > 65535)
        return -1;
    /* libevent refuses port 0, which asks the kernel for a free port: parse
     * with port 1 and put the 0 back. */
    port0 = strtoul(colon + 1, NULL, 10) == 0;
    snprintf(copy, sizeof(copy), "%.*s:%s", (int)(colon - listen), listen,
             port0 ? "1" : colon + 1);
    *len = sizeof(*ss);
    if (evutil_parse_sockaddr_port(copy, (struct sockaddr *)ss, len) < 0)
        return -1;
    if (port0 && ss->ss_family == AF_INET)
        ((struct sockaddr_in *)ss)->sin_port = 0;
    else if (port0)
        ((struct sockaddr_in6 *)ss)->sin6_port = 0;
    return 0;
}

static int valid_listen(const char *v)
{
    struct sockaddr_storage ss;
    int len;

    return settings_listen_addr(v, &ss, &len) == 0;
}

/* "host:port[,host:port...]": what zookeeper_init takes, without a chroot
 * (that is what root is for). Names are resolved when connecting. */
static int valid_zk_hosts(const char *v)
{
    const char *p = v;

    if (!*v || strlen(v) > 1024)
        return 0;
    while (*p) {
        size_t hostlen = strcspn(p, ",");
        const char *colon = NULL;
        unsigned port;
        char portbuf[8];

        for (const char *q = p; q < p + hostlen; q++)
            if (*q == ':')
                colon = q;
        if (!colon || colon == p || (size_t)(p + hostlen - colon - 1) >= sizeof(portbuf))
            return 0;
        for (const char *q = p; q < colon; q++)
            if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') ||
                  (*q >= '0' && *q <= '9') || strchr(".-_:[]", *q)))
                return 0;
        snprintf(portbuf, sizeof(portbuf), "%.*s", (int)(p + hostlen - colon - 1), colon + 1);
        if (parse_uint(portbuf, 1, 65535, &port) < 0)
            return 0;
        p += hostlen;
        if (*p == ',' && *++p == '\0')
            return 0;
    }
    return 1;
}

/* A ZooKeeper path prefix: "/a/b", no trailing slash, no empty or dot segments. */
static int valid_zk_root(const char *v)
{
    size_t len = strlen(v);

    if (len < 2 || len > 200 || v[0] != '/' || v[len - 1] == '/' || strstr(v, "//"))
        return 0;
    if (strstr(v, "/./") || strstr(v, "/../") ||
        (len >= 2 && strcmp(v + len - 2, "/.") == 0) ||
        (len >= 3 && strcmp(v + len - 3, "/..") == 0))
        return 0;
    for (const char *p = v; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
              (*p >= '0' && *p <= '9') || strchr("/._-", *p)))
            return 0;
    return 1;
}

#define SET_ERR(...) (snprintf(err, errlen, __VA_ARGS__), -1)

int settings_set(struct settings *s, const char *section, const char *key,
                 const char *value, char *err, size_t errlen)
{
    unsigned u;

    if (strcmp(section, "server") == 0) {
        if (strcmp(key, "listen") == 0) {
            if (!valid_listen(value))
                return SET_ERR("listen: '%s' is not IP:PORT or [IPv6]:PORT", value);
            return replace_str(&s->listen, value) < 0 ? SET_ERR("out of memory") : 0;
        }
        if (strcmp(key, "unix_socket") == 0) {
            if (strlen(value) >= sizeof(((struct sockaddr_un *)0)->sun_path))
                return SET_ERR("unix_socket: path longer than %zu bytes",
                               sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
            return replace_str(&s->unix_socket, *value ? value : NULL) < 0
                       ? SET_ERR("out of memory") : 0;
        }
        if (strcmp(key, "unix_socket_mode") == 0) {
            char *end;
            unsigned long m = strtoul(value, &end, 8);
            if (*value < '0' || *value > '7' || *end || m > 0777)
                return SET_ERR("unix_socket_mode: '%s' is not an octal mode like 0660", value);
            s->unix_socket_mode = (unsigned)m;
            return 0;
        }
        if (strcmp(key, "max_clients") == 0) {
            if (parse_uint(value, 1, 1000000, &u) < 0)
                return SET_ERR("max_clients: '%s' is not an integer from 1 to 1000000", value);
            s->max_clients = u;
            return 0;
        }
        if (strcmp(key, "max_line") == 0) {
            if (parse_uint(value, 256, 1048576, &u) < 0)
                return SET_ERR("max_line: '%s' is not an integer from 256 to 1048576", value);
            s->max_line = u;
            return 0;
        }
        if (strcmp(key, "max_locks_per_client") == 0) {
            if (parse_uint(value, 1, 1000000, &u) < 0)
                return SET_ERR("max_locks_per_client: '%s' is not an integer from 1 to 1000000",
                               value);
            s->max_locks_per_client = u;
            return 0;
        }
    } else if (strcmp(section, "zookeeper") == 0) {
        if (strcmp(key, "hosts") == 0) {
            if (*value && !valid_zk_hosts(value))
                return SET_ERR("hosts: '%s' is not host:port[,host:port...]", value);
            return replace_str(&s->zk_hosts, *value ? value : NULL) < 0
                       ? SET_ERR("out of memory") : 0;
        }
        if (strcmp(key, "root") == 0) {
            if (!valid_zk_root(value))
                return SET_ERR("root: '%s' is not an absolute ZooKeeper path like /lockbroker",
                               value);
            return replace_str(&s->zk_root, value) < 0 ? SET_ERR("out of memory") : 0;
        }
        if (strcmp(key, "session_timeout_ms") == 0) {
            if (parse_uint(value, 1000, 600000, &u) < 0)
                return SET_ERR("session_timeout_ms: '%s' is not an integer from 1000 to 600000",
                               value);
            s->zk_session_timeout_ms = u;
            return 0;
        }
    } else if (strcmp(section, "log") == 0) {
        if (strcmp(key, "level") == 0) {
            for (unsigned i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++)
                if (strcasecmp(value, level_names[i]) == 0) {
                    s->log_level = (enum log_level)i;
                    return 0;
                }
            return SET_ERR("level: '%s' is not one of error, warn, info, debug", value);
        }
    } else {
        return SET_ERR("unknown section [%s]", section);
    }
    return SET_ERR("unknown key '%s' in [%s]", key, section);
}

/*
 * inih returns the line of the first error, a syntax error or a value the
 * handler refused, but does not tell the handler its line. The loader
 * reads the input itself and counts lines (inih counts one per reader
 * call), so that a value error is reported only with its own line.
 */
struct load_ctx {
    struct settings *s;
    FILE *f;            /* the input: a file, or else... */
    const char *rest;   /* ...what is left of a string */
    int line;           /* lines handed to inih so far */
    int err_line;       /* the line of msg */
    char msg[256];      /* the first value error, without location */
};

/* fgets()-like reader for ini_parse_stream(). A line longer than inih's
 * buffer would be split in two silently; it is reported as an error instead. */
static char *read_line(char *buf, int size, void *stream)
{
    struct load_ctx *ctx = stream;
    bool too_long = false;

    if (size < 2)
        return NULL;
    if (ctx->f) {
        size_t n;
        int ch;

        if (!fgets(buf, size, ctx->f))
            return NULL;
        n = strlen(buf);
        if (n == (size_t)size - 1 && buf[n - 1] != '\n' && (ch = getc(ctx->f)) != EOF) {
            too_long = true;
            while (ch != EOF && ch != '\n')    /* skip the rest of that line */
                ch = getc(ctx->f);
        }
    } else {
        size_t n = strcspn(ctx->rest, "\n");

        if (!*ctx->rest)
            return NULL;
        /* The line and its LF must fit with the NUL, as with fgets(). */
        too_long = n + (ctx->rest[n] == '\n') > (size_t)size - 1;
        if (ctx->rest[n] == '\n')
            n++;                        /* keep the LF, as fgets() does */
        if (too_long) {
            ctx->rest += n;
        } else {
            memcpy(buf, ctx->rest, n);
            buf[n] = '\0';
            ctx->rest += n;
        }
    }
    ctx->line++;
    if (too_long) {
        if (!ctx->msg[0]) {
            snprintf(ctx->msg, sizeof(ctx->msg), "line longer than %d bytes", size - 2);
            ctx->err_line = ctx->line;
        }
        snprintf(buf, (size_t)size, "[\n");   /* a syntax error on this line */
    }
    return buf;
}

/* inih handler: returns 0 on error so that ini_parse reports the line. */
static int on_ini_value(void *user, const char *section, const char *key, const char *value)
{
    struct load_ctx *ctx = user;
    char msg[256];

    if (settings_set(ctx->s, section, key, value, msg, sizeof(msg)) == 0)
        return 1;
    if (!ctx->msg[0]) {
        snprintf(ctx->msg, sizeof(ctx->msg), "%s", msg);
        ctx->err_line = ctx->line;
    }
    return 0;
}

static int report(int rc, const struct load_ctx *ctx, const char *source, char *err, size_t errlen)
{
    if (rc == 0)
        return 0;
    if (rc == -1)
        return SET_ERR("%s: cannot open: %s", source, strerror(errno));
    if (rc == -2)
        return SET_ERR("%s: out of memory", source);
    return SET_ERR("%s:%d: %s", source, rc,
                   ctx->msg[0] && ctx->err_line == rc ? ctx->msg : "syntax error");
}

int settings_load_file(struct settings *s, const char *path, char *err, size_t errlen)
{
    struct load_ctx ctx = { .s = s };
    int rc;

    if (!(ctx.f = fopen(path, "r")))
        return report(-1, &ctx, path, err, errlen);
    rc = ini_parse_stream(read_line, &ctx, on_ini_value, &ctx);
    fclose(ctx.f);
    return report(rc, &ctx, path, err, errlen);
}

int settings_load_string(struct settings *s, const char *text, const char *source,
                         char *err, size_t errlen)
{
    struct load_ctx ctx = { .s = s, .rest = text };

    return report(ini_parse_stream(read_line, &ctx, on_ini_value, &ctx), &ctx, source,
                  err, errlen);
}
