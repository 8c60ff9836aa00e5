/*
 * live_page.c - the live page and its JSON, /locks.json (see live_page.h).
 *
 * The page (daemon/page/: index.html, page.js, page.css) is compiled in
 * (live_page_assets.h, made from those files by Makefile.am), so that it
 * works on a host with no way out: nothing comes from elsewhere, and the
 * Content-Security-Policy metrics.c sends with it forbids anything that
 * does. The page polls /locks.json and writes every user string (names,
 * labels, addresses) with textContent; here they are JSON-escaped, with
 * <, > and & as \u escapes as well.
 *
 * /locks.json is bounded: at most LIST_MAX locks (?limit= lowers it),
 * ROWS_MAX holds and waits of each, in name order from the tree; a reply
 * that leaves locks out says "truncated": true. Nothing is counted beyond
 * what is listed, so a table of a million names costs a request its first
 * LIST_MAX (and, for a glob with no literal prefix, a walk of the names
 * before them, as LOCKS does).
 *
 * In distributed mode each lock's "queue" (its holders and waiters on every
 * daemon) comes from the backend's HOLDERS gathering (backend.h, list),
 * which costs ZooKeeper a listing of every name, one per matching name and
 * a read per node. So it is not asked per request: one gathering at a time,
 * at most every QUEUE_REFRESH_MS while someone polls (every QUEUE_REGLOB_MS
 * when the glob polled changes); replies in between use the latest answer
 * and say how old it is.
 */
#include "config.h"
#include "live_page.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "backend.h"
#include "context.h"
#include "locks.h"
#include "proto.h"
#include "stats.h"

#include "daemon/live_page_assets.h"

/* Locks in one reply at most, and by default: a page shows a screenful or
 * a few, and a script that wants more narrows ?match=. */
#define LIST_MAX 1000
#define LIST_DEFAULT 200
/* Holds and waits listed per lock; the lock's counts say how many there are. */
#define ROWS_MAX 50
/* The most often the queue across daemons is gathered (distributed mode). */
#define QUEUE_REFRESH_MS 5000
/* ... and for a glob other than the latest one's. */
#define QUEUE_REGLOB_MS 1000

/* A name's requests across daemons, as the latest gathering counted them. */
struct queue_count {
    char *name;          /* owned */
    unsigned queue;
};

struct live_page {
    const struct server *srv;       /* borrowed */
    struct backend_list *op;        /* the gathering in flight, or NULL; the backend's */
    char op_glob[PROTO_NAME_MAX + 1];
    int64_t asked_ms;               /* monotonic: when the latest gathering started */
    /* The latest answer: counts sorted by name, for the names of glob. */
    char glob[PROTO_NAME_MAX + 1];
    struct queue_count *counts;     /* owned; NULL: no answer (or a failed one) */
    size_t ncounts;
    int64_t got_ms;                 /* monotonic: when it came */
};

struct asset {
    const char *path;
    const char *type;
    const char *body;
    size_t len;
};

static const struct asset assets[] = {
    { "/", "text/html; charset=utf-8", live_page_index_html, sizeof(live_page_index_html) - 1 },
    { "/page.js", "text/javascript; charset=utf-8", live_page_page_js,
      sizeof(live_page_page_js) - 1 },
    { "/page.css", "text/css; charset=utf-8", live_page_page_css,
      sizeof(live_page_page_css) - 1 },
};
#define NASSETS (sizeof(assets) / sizeof(assets[0]))

#define JSON_PATH "/locks.json"

struct live_page *live_page_new(const struct server *srv)
{
    struct live_page *lp = calloc(1, sizeof(*lp));

    if (lp)
        lp->srv = srv;
    return lp;
}

static void counts_free(struct live_page *lp)
{
    for (size_t i = 0; i < lp->ncounts; i++)
        free(lp->counts[i].name);
    free(lp->counts);
    lp->counts = NULL;
    lp->ncounts = 0;
}

void live_page_free(struct live_page *lp)
{
    if (!lp)
        return;
    if (lp->op)
        lp->srv->backend->ops->list_cancel(lp->srv->backend->impl, lp->op);
    counts_free(lp);
    free(lp);
}

bool live_page_serves(const char *path)
{
    if (strcmp(path, JSON_PATH) == 0)
        return true;
    for (size_t i = 0; i < NASSETS; i++)
        if (strcmp(path, assets[i].path) == 0)
            return true;
    return false;
}

/* ------------------------------------------------------------- JSON */

/* A string literal, its length counted by the compiler. */
#define add_lit(out, lit) evbuffer_add((out), (lit), sizeof(lit) - 1)

/* A JSON string. Bytes outside printable ASCII and <, >, & are \u escapes:
 * the reply is ASCII whatever the bytes, and safe inside HTML too. */
static void json_str(struct evbuffer *out, const char *s)
{
    add_lit(out, "\"");
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;

        if (ch == '"' || ch == '\\')
            evbuffer_add_printf(out, "\\%c", ch);
        else if (ch < 0x20 || ch > 0x7e || ch == '<' || ch == '>' || ch == '&')
            evbuffer_add_printf(out, "\\u%04x", ch);
        else
            evbuffer_add(out, s, 1);
    }
    add_lit(out, "\"");
}

/* A string, or null for NULL and "-" (what the table says for "none"). */
static void json_str_or_null(struct evbuffer *out, const char *s)
{
    if (!s || !s[0] || strcmp(s, "-") == 0)
        add_lit(out, "null");
    else
        json_str(out, s);
}

static int64_t wall_ms(void)
{
    struct timeval tv;

    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* ------------------------------------------------------------ health */

/* The statistics the health line shows, picked from one STATS walk. */
struct health_stats {
    char mode[32], zk_state[32], confirmed[8], window_age[24];
};

static void pick_stat(void *cookie, const char *name, const char *value)
{
    struct health_stats *h = cookie;

    if (strcmp(name, "mode") == 0)
        snprintf(h->mode, sizeof(h->mode), "%s", value);
    else if (strcmp(name, "zk_state") == 0)
        snprintf(h->zk_state, sizeof(h->zk_state), "%s", value);
    else if (strcmp(name, "zk_session_confirmed") == 0)
        snprintf(h->confirmed, sizeof(h->confirmed), "%s", value);
    else if (strcmp(name, "zk_window_age_ms") == 0)
        snprintf(h->window_age, sizeof(h->window_age), "%s", value);
}

/* "health": what /healthz says (metrics.c: the same backend calls) and the
 * ZooKeeper session's state from STATS; null for what embedded mode lacks. */
static void add_health(const struct server *srv, struct evbuffer *out,
                       const struct health_stats *hs)
{
    const struct backend *be = srv->backend;
    int64_t down = be->ops->unreachable_since(be->impl);
    const char *why = be->ops->why_unavailable ? be->ops->why_unavailable(be->impl) : NULL;
    const char *fault = be->ops->config_error ? be->ops->config_error(be->impl) : NULL;

    evbuffer_add_printf(out, "\"health\":{\"ok\":%s,\"status\":%d,\"reason\":",
                        down ? "false" : "true", down ? 503 : 200);
    if (!down)
        add_lit(out, "null");
    else
        json_str(out, fault ? fault : why ? why : "unreachable");
    evbuffer_add_printf(out, ",\"down_ms\":");
    if (down)
        evbuffer_add_printf(out, "%" PRId64, locks_mono_ms() - down);
    else
        add_lit(out, "null");
    evbuffer_add_printf(out, ",\"zk_state\":");
    json_str_or_null(out, hs->zk_state);
    evbuffer_add_printf(out, ",\"zk_session_confirmed\":%s,\"zk_window_age_ms\":%s}",
                        !hs->confirmed[0] ? "null"
                        : strcmp(hs->confirmed, "1") == 0 ? "true" : "false",
                        hs->window_age[0] ? hs->window_age : "null");
}

/* "counters": totals since start, which the page turns into rates; "held"
 * and "waiting": now, which it charts as they are. (How many requests had
 * to wait is not counted: in distributed mode every grant waits for
 * ZooKeeper.) */
static void add_counters(const struct server *srv, struct evbuffer *out)
{
    struct locks_stats ls;

    locks_get_stats(srv->locks, &ls);
    evbuffer_add_printf(out, "\"counters\":{\"grants\":%" PRIu64 ",\"timeouts\":%" PRIu64
                        ",\"lost\":%" PRIu64 "},\"held\":%" PRIu64 ",\"waiting\":%" PRIu64,
                        ls.grants, ls.timeouts, ls.lost, ls.held, ls.waiting);
}

/* ------------------------------------------- the queue across daemons */

static int count_cmp(const void *a, const void *b)
{
    return strcmp(((const struct queue_count *)a)->name, ((const struct queue_count *)b)->name);
}

/* The metrics listener serves no users: every name may be counted. */
static bool may_count(void *arg, const char *name)
{
    return true;
}

/* The gathering's answer: rows in name order, each name's requests together. */
static void on_gathered(void *arg, bool ok, const struct backend_holder *rows, size_t n,
                        size_t more)
{
    struct live_page *lp = arg;
    size_t k = 0;

    lp->op = NULL;
    counts_free(lp);
    lp->got_ms = 0;
    if (!ok || (n && !(lp->counts = calloc(n, sizeof(*lp->counts)))))
        return;                   /* nothing rather than counts that may be stale */
    for (size_t i = 0; i < n; i++) {
        if (k && strcmp(lp->counts[k - 1].name, rows[i].name) == 0) {
            lp->counts[k - 1].queue++;
            continue;
        }
        if (!(lp->counts[k].name = strdup(rows[i].name)))
            break;
        lp->counts[k++].queue = 1;
    }
    /* Rows past the most were left out: the last name's count may be short. */
    if (more && k)
        free(lp->counts[--k].name);
    lp->ncounts = k;
    qsort(lp->counts, k, sizeof(*lp->counts), count_cmp);
    snprintf(lp->glob, sizeof(lp->glob), "%s", lp->op_glob);
    lp->got_ms = locks_mono_ms();
}

/* Starts a gathering for glob when the latest is too old or of another
 * glob, none is in flight, and no handover waits for ZooKeeper to fall
 * quiet. Returns whether the latest answer is glob's. */
static bool queue_refresh(struct live_page *lp, const char *glob)
{
    const struct backend *be = lp->srv->backend;
    int64_t now = locks_mono_ms();
    bool same = lp->got_ms && strcmp(lp->glob, glob) == 0;
    int64_t since = lp->asked_ms ? now - lp->asked_ms : INT64_MAX;
    /* A new glob (someone typed one) goes sooner, but pages polling
     * different globs still cost at most one gathering a second. */
    int64_t due = strcmp(lp->op_glob, glob) == 0 ? QUEUE_REFRESH_MS : QUEUE_REGLOB_MS;

    if (!lp->op && !lp->srv->handing_over && since >= due &&
        (lp->op = be->ops->list(be->impl, glob, may_count, on_gathered, lp))) {
        snprintf(lp->op_glob, sizeof(lp->op_glob), "%s", glob);
        lp->asked_ms = now;
    }
    return same;
}

/* The name's queue in the latest answer, or -1 when it has none. */
static int64_t queue_of(const struct live_page *lp, const char *name)
{
    struct queue_count key = { .name = (char *)name };
    const struct queue_count *c = lp->counts ? bsearch(&key, lp->counts, lp->ncounts,
                                                       sizeof(key), count_cmp) : NULL;

    return c ? (int64_t)c->queue : -1;
}

/* ------------------------------------------------------------- locks */

/* One lock's holds and waits being written. */
struct rows {
    struct evbuffer *out;
    int64_t now_ms;          /* wall clock */
    unsigned holds, waits;   /* written so far */
    bool held;               /* writing "holds" (true) or "waits" */
};

static bool add_row(void *arg, const struct backend_holder *r)
{
    struct rows *w = arg;
    unsigned *n = r->held ? &w->holds : &w->waits;

    if (r->held != w->held || *n == ROWS_MAX)
        return true;
    evbuffer_add_printf(w->out, "%s{\"holder\":", (*n)++ ? "," : "");
    json_str_or_null(w->out, r->holder);
    evbuffer_add_printf(w->out, ",\"label\":");
    json_str_or_null(w->out, r->label);
    evbuffer_add_printf(w->out, ",\"mode\":\"%s\"", lock_mode_name(r->mode));
    if (r->held) {
        /* A string: tokens go past 2^53, where a JavaScript number rounds. */
        evbuffer_add_printf(w->out, ",\"token\":\"%" PRIu64 "\",\"kept\":%s,\"held_ms\":%"
                            PRId64 ",\"lease_ms\":", r->token, r->kept ? "true" : "false",
                            w->now_ms - r->since_ms);
        if (r->lease_ms >= 0)
            evbuffer_add_printf(w->out, "%" PRId64 "}", r->lease_ms);
        else
            add_lit(w->out, "null}");
    } else {
        evbuffer_add_printf(w->out, ",\"waited_ms\":%" PRId64 "}", w->now_ms - r->since_ms);
    }
    return true;
}

/* cluster: the latest gathering's answer is for this reply's glob. */
static void add_lock(const struct live_page *lp, struct evbuffer *out, const char *name,
                     int64_t now_ms, bool first, bool cluster)
{
    const struct server *srv = lp->srv;
    const struct backend *be = srv->backend;
    const char *recipe = be->ops->recipe ? be->ops->recipe(be->impl, name) : NULL;
    struct locks_status st;
    struct rows w = { .out = out, .now_ms = now_ms };

    locks_status(srv->locks, name, &st);
    evbuffer_add_printf(out, "%s{\"name\":", first ? "" : ",");
    json_str(out, name);
    evbuffer_add_printf(out, ",\"mode\":\"%s\",\"limit\":%u,\"holders\":%u,\"waiters\":%u,"
                        "\"delay_ms\":%" PRId64 ",\"recipe\":", lock_mode_name(st.mode),
                        st.limit, st.holders, st.waiters, st.delay_ms);
    json_str_or_null(out, recipe);
    /* Embedded mode: this table is every daemon's. Distributed mode: the
     * latest gathering's count, if it has the name. */
    if (!be->ops->list)
        evbuffer_add_printf(out, ",\"queue\":%u", st.holders + st.waiters);
    else if (cluster && queue_of(lp, name) >= 0)
        evbuffer_add_printf(out, ",\"queue\":%" PRId64, queue_of(lp, name));
    else
        add_lit(out, ",\"queue\":null");
    add_lit(out, ",\"holds\":[");
    w.held = true;
    locks_each_hold_of(srv->locks, name, add_row, &w);
    add_lit(out, "],\"waits\":[");
    w.held = false;
    locks_each_hold_of(srv->locks, name, add_row, &w);
    add_lit(out, "]}");
}

/* The query: ?match=<glob>&limit=<n>; 0, or -1 with why. */
static int parse_query(const char *query, char *glob, size_t glob_size, unsigned *limit,
                       char *why, size_t why_size)
{
    struct evkeyvalq q;
    const char *v;
    int rc = 0;

    glob[0] = '\0';
    *limit = LIST_DEFAULT;
    if (!query || !query[0])
        return 0;
    TAILQ_INIT(&q);
    if (evhttp_parse_query_str(query, &q) < 0) {
        snprintf(why, why_size, "bad query string\n");
        return -1;
    }
    if ((v = evhttp_find_header(&q, "match")) && v[0]) {
        size_t len = strlen(v);
        bool printable = true;

        for (size_t i = 0; i < len; i++)
            printable &= v[i] > 0x20 && v[i] < 0x7f;
        if (len >= glob_size || !printable) {
            snprintf(why, why_size, "match: a glob of 1-%zu printable bytes\n", glob_size - 1);
            rc = -1;
        } else {
            memcpy(glob, v, len + 1);
        }
    }
    if (rc == 0 && (v = evhttp_find_header(&q, "limit"))) {
        char *end;
        unsigned long n = strtoul(v, &end, 10);

        if (!v[0] || *end || v[0] == '-' || n < 1 || n > LIST_MAX) {
            snprintf(why, why_size, "limit: a number from 1 to %d\n", LIST_MAX);
            rc = -1;
        } else {
            *limit = (unsigned)n;
        }
    }
    evhttp_clear_headers(&q);
    return rc;
}

static int write_json(struct live_page *lp, const char *query, struct evbuffer *out)
{
    const struct server *srv = lp->srv;
    bool cluster = false;
    char glob[PROTO_NAME_MAX + 1], after[PROTO_NAME_MAX + 1], why[128];
    unsigned limit, n = 0;
    int64_t now = wall_ms();
    struct health_stats hs = { .mode = "" };
    const char *name;
    bool truncated = false;

    if (parse_query(query, glob, sizeof(glob), &limit, why, sizeof(why)) < 0) {
        evbuffer_add(out, why, strlen(why));
        return HTTP_BADREQUEST;
    }
    stats_each(srv, pick_stat, &hs);
    evbuffer_add_printf(out, "{\"daemon\":");
    json_str(out, srv->daemon_id ? srv->daemon_id : "");
    evbuffer_add_printf(out, ",\"mode\":");
    json_str(out, hs.mode[0] ? hs.mode : srv->backend->ops->name);
    evbuffer_add_printf(out, ",\"now_ms\":%" PRId64 ",", now);
    add_health(srv, out, &hs);
    add_lit(out, ",");
    add_counters(srv, out);
    add_lit(out, ",\"match\":");
    json_str_or_null(out, glob);
    /* How old the queue across daemons is (null: embedded mode, or none yet). */
    if (srv->backend->ops->list)
        cluster = queue_refresh(lp, glob[0] ? glob : "*");
    if (cluster)
        evbuffer_add_printf(out, ",\"queue_age_ms\":%" PRId64, locks_mono_ms() - lp->got_ms);
    else
        add_lit(out, ",\"queue_age_ms\":null");
    evbuffer_add_printf(out, ",\"limit\":%u,\"locks\":[", limit);
    for (name = locks_next(srv->locks, glob[0] ? glob : NULL, NULL); name;
         name = locks_next(srv->locks, glob[0] ? glob : NULL, after)) {
        if (n == limit) {
            truncated = true;
            break;
        }
        snprintf(after, sizeof(after), "%s", name);
        add_lock(lp, out, after, now, n++ == 0, cluster);
    }
    evbuffer_add_printf(out, "],\"truncated\":%s}\n", truncated ? "true" : "false");
    return HTTP_OK;
}

int live_page_write(struct live_page *lp, const char *path, const char *query,
                    struct evbuffer *out, const char **content_type)
{
    int code;

    for (size_t i = 0; i < NASSETS; i++) {
        if (strcmp(path, assets[i].path) == 0) {
            *content_type = assets[i].type;
            evbuffer_add_reference(out, assets[i].body, assets[i].len, NULL, NULL);
            return HTTP_OK;
        }
    }
    code = write_json(lp, query, out);
    *content_type = code == HTTP_OK ? "application/json" : "text/plain; charset=utf-8";
    return code;
}
