/*
 * session.c - GRACE and RESUME: holds that outlive a connection (see session.h).
 *
 * Each session is a struct session in the table's list and, by id, in a
 * tsearch(3) tree. Its lock owner holds nothing while attached (the holds
 * are the client's) and the connection's granted holds while detached.
 * Whatever ends a session (QUIT or a close on purpose, a detach with
 * nothing held, its grace over, the daemon stopping) goes through
 * session_free(), which takes it out of the tree, the list and the quota.
 */
#include "config.h"
#include "session.h"

#include <event2/event.h>
#include <limits.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "client.h"
#include "context.h"
#include "log.h"
#include "quota.h"
#include "restart.h"
#include "snap.h"

#define SECRET_BYTES (PROTO_SECRET_LEN / 2)
#define ID_BYTES (PROTO_SESSION_LEN / 2)

struct session {
    struct lock_owner owner;       /* first: the owner's callbacks cast back; holds the
                                    * connection's granted holds while detached */
    struct sessions *set;
    TAILQ_ENTRY(session) link;     /* set->all, in order of opening */
    char id[PROTO_SESSION_LEN + 1];
    unsigned char secret[SECRET_BYTES]; /* never logged */
    int64_t grace_ms;              /* as GRACE asked; kept across reloads */
    struct client *client;         /* attached to; NULL: detached */
    struct event *timer;           /* owned: the end of the grace, armed while detached */
    int64_t ends_ms;               /* detached: monotonic ms when the grace ends */
    char user[PROTO_USER_MAX + 1]; /* the user logged in at GRACE, or "": RESUME needs
                                    * the same one when the daemon has a users file */
    char account[PROTO_ACCOUNT_MAX + 1]; /* who pays (quota.h); the owner's account */
    struct quota_acct *acct;       /* what it counts against in set->accounts */
    char desc[64];                 /* the peer of the connection it was last attached
                                    * to: names the detached holds (STATUS, logs) */
    char label[PROTO_LABEL_MAX + 1]; /* that connection's CLIENT label, or "" */
    bool resuming;                 /* RESUME cuts the connection it is attached to: the
                                    * session goes on even if that one held nothing */
    bool restoring;                /* a handover's successor: attached to the connection
                                    * restore_client, not found yet (sessions_restored) */
    uint64_t restore_client;
};

struct sessions {
    struct event_base *base;       /* borrowed */
    struct locks *locks;           /* borrowed */
    TAILQ_HEAD(, session) all;
    void *by_id;                   /* tsearch root of struct session * by id */
    struct quota accounts;         /* sessions per account; every session counts */
    unsigned max, max_per_account;
    struct sessions_stats stats;
};

static int by_id(const void *a, const void *b)
{
    return strcmp(((const struct session *)a)->id, ((const struct session *)b)->id);
}

static struct session *session_find(struct sessions *ss, const char *id)
{
    struct session key;
    void *found;

    memcpy(key.id, id, PROTO_SESSION_LEN);
    key.id[PROTO_SESSION_LEN] = '\0';
    found = tfind(&key, &ss->by_id, by_id);
    return found ? *(struct session **)found : NULL;
}

static void to_hex(char *out, const unsigned char *in, size_t n)
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

/* hex is 2n lower-case hex digits (the parser checked them). */
static void from_hex(unsigned char *out, const char *hex, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned hi = (unsigned)(hex[2 * i] <= '9' ? hex[2 * i] - '0' : hex[2 * i] - 'a' + 10);
        unsigned lo = (unsigned)(hex[2 * i + 1] <= '9' ? hex[2 * i + 1] - '0'
                                                       : hex[2 * i + 1] - 'a' + 10);
        out[i] = (unsigned char)(hi << 4 | lo);
    }
}

/* ------------------------------------------------------------ lock owner */

static struct session *session_of_owner(const struct lock_owner *o)
{
    return (struct session *)o;
}

/* A detached session waits for nothing: no answer can come. */
static void session_done(struct lock_owner *o, const char *name, enum locks_result r,
                         uint64_t token)
{
}

/* A detached hold ended (BREAK, a ZooKeeper session lost): nobody to tell;
 * a later RESUME does not get it back. */
static void session_lost(struct lock_owner *o, const char *name, uint64_t token,
                         const char *reason)
{
    log_info("session %s: detached hold of %s (token %llu) ended: %s",
             session_of_owner(o)->id, name, (unsigned long long)token, reason);
}

static int64_t session_detached_ms(const struct lock_owner *o)
{
    const struct session *s = session_of_owner(o);
    int64_t left;

    if (s->client)
        return -1;
    left = s->ends_ms - locks_mono_ms();
    return left < 1 ? 1 : left;    /* its timer is due: still in force until it runs */
}

static void session_restart_key(const struct lock_owner *o, char *letter, uint64_t *n);

static const struct lock_owner_ops session_owner_ops = {
    .done = session_done,
    .lost = session_lost,
    .detached_ms = session_detached_ms,
    .restart_key = session_restart_key,
};

/* ---------------------------------------------------------------- table */

struct sessions *sessions_new(struct event_base *base, struct locks *locks)
{
    struct sessions *ss = calloc(1, sizeof(*ss));

    if (!ss)
        return NULL;
    ss->base = base;
    ss->locks = locks;
    TAILQ_INIT(&ss->all);
    ss->max = UINT_MAX;
    ss->max_per_account = UINT_MAX;
    return ss;
}

/* Takes s out of everything and frees it; its owner must hold nothing and
 * its client (if any) must have forgotten it. */
static void session_free(struct session *s)
{
    struct sessions *ss = s->set;

    tdelete(s, &ss->by_id, by_id);
    TAILQ_REMOVE(&ss->all, s, link);
    ss->stats.current--;
    if (!s->client)
        ss->stats.detached--;
    quota_put(&ss->accounts, s->acct);
    if (s->timer)
        event_free(s->timer);
    explicit_bzero(s->secret, sizeof(s->secret));
    free(s);
}

void sessions_free(struct sessions *ss)
{
    struct session *s;

    if (!ss)
        return;
    while ((s = TAILQ_FIRST(&ss->all))) {
        if (s->client)
            s->client->session = NULL;
        else
            locks_owner_abandon_all(ss->locks, &s->owner);
        session_free(s);
    }
    quota_clear(&ss->accounts);
    free(ss);
}

void sessions_set_max(struct sessions *ss, unsigned max, unsigned max_per_account)
{
    ss->max = max;
    ss->max_per_account = max_per_account;
}

void sessions_get_stats(const struct sessions *ss, struct sessions_stats *out)
{
    if (ss)
        *out = ss->stats;
    else
        memset(out, 0, sizeof(*out));
}

/* Its grace is over: the holds are abandoned, as the close would have. */
static void on_grace_over(evutil_socket_t fd, short what, void *arg)
{
    struct session *s = arg;

    log_info("session %s: grace of %lld ms over, not resumed: %u holds of %s abandoned",
             s->id, (long long)s->grace_ms, s->owner.nholds, s->desc);
    s->set->stats.expired++;
    locks_owner_abandon_all(s->set->locks, &s->owner);
    session_free(s);
}

/* Attaches s to c: the holds and the name of the connection are c's now. */
static void session_attach(struct session *s, struct client *c)
{
    s->client = c;
    c->session = s;
}

enum session_result session_open(struct sessions *ss, struct client *c, int64_t grace_ms,
                                 char id[PROTO_SESSION_LEN + 1],
                                 char secret[PROTO_SECRET_LEN + 1])
{
    unsigned char raw[ID_BYTES];
    struct session *s;
    int tries = 0;

    if (ss->stats.current >= ss->max)
        return SESSION_LIMIT_TOTAL;
    if (quota_count(&ss->accounts, c->account) >= ss->max_per_account)
        return SESSION_LIMIT_ACCOUNT;
    if (!(s = calloc(1, sizeof(*s))))
        return SESSION_NOMEM;
    /* Made now, so that a detach needs no memory. */
    if (!(s->timer = evtimer_new(ss->base, on_grace_over, s)))
        goto nomem;
    if (RAND_bytes(s->secret, sizeof(s->secret)) != 1)
        goto nomem;
    do {
        if (RAND_bytes(raw, sizeof(raw)) != 1 || ++tries > 8)
            goto nomem;
        to_hex(s->id, raw, sizeof(raw));
    } while (session_find(ss, s->id));
    if (!quota_take(&ss->accounts, c->account, &s->acct))
        goto nomem;
    if (!tsearch(s, &ss->by_id, by_id)) {
        quota_put(&ss->accounts, s->acct);
        goto nomem;
    }
    s->set = ss;
    s->grace_ms = grace_ms;
    snprintf(s->user, sizeof(s->user), "%s", c->user ? c->user_name : "");
    snprintf(s->account, sizeof(s->account), "%s", c->account);
    snprintf(s->desc, sizeof(s->desc), "%s", c->peer);
    lock_owner_init(&s->owner, &session_owner_ops, s->desc);
    s->owner.account = s->account;
    TAILQ_INSERT_TAIL(&ss->all, s, link);
    ss->stats.current++;
    session_attach(s, c);
    memcpy(id, s->id, sizeof(s->id));
    to_hex(secret, s->secret, sizeof(s->secret));
    /* Clients ask for a session on every connection: at debug, as "open". */
    log_debug("session %s: opened by conn %llu (%s)%s%s, grace %lld ms", s->id,
              (unsigned long long)c->id, c->peer, s->user[0] ? " as user " : "", s->user,
              (long long)grace_ms);
    return SESSION_OK;
nomem:
    if (s->timer)
        event_free(s->timer);
    explicit_bzero(s->secret, sizeof(s->secret));
    free(s);
    return SESSION_NOMEM;
}

void session_client_lost(struct client *c)
{
    struct session *s = c->session;
    struct timeval tv;
    unsigned moved;

    if (!s)
        return;
    /* The holds go on under the name and label the connection had. */
    snprintf(s->desc, sizeof(s->desc), "%s", c->peer);
    snprintf(s->label, sizeof(s->label), "%s", c->owner.label ? c->owner.label : "");
    s->owner.label = s->label[0] ? s->label : NULL;
    moved = client_release_keep(c, &s->owner);
    c->session = NULL;
    s->client = NULL;
    s->set->stats.detached++;
    if (moved == 0 && !s->resuming) {
        log_debug("session %s: conn %llu (%s) ended holding nothing; session ended", s->id,
                  (unsigned long long)c->id, c->peer);
        session_free(s);
        return;
    }
    /* The grace counts from now: from when this daemon saw the end. */
    event_base_update_cache_time(s->set->base);
    s->ends_ms = locks_mono_ms() + s->grace_ms;
    tv.tv_sec = s->grace_ms / 1000;
    tv.tv_usec = (s->grace_ms % 1000) * 1000;
    if (evtimer_add(s->timer, &tv) < 0) {
        log_error("session %s: cannot arm its grace timer; %u holds abandoned now", s->id,
                  moved);
        locks_owner_abandon_all(s->set->locks, &s->owner);
        session_free(s);
        return;
    }
    log_info("session %s: conn %llu (%s) ended without QUIT: %u holds detached for %lld ms",
             s->id, (unsigned long long)c->id, c->peer, moved, (long long)s->grace_ms);
}

void session_client_end(struct client *c)
{
    struct session *s = c->session;

    if (!s)
        return;
    c->session = NULL;            /* s->client stays: it ends attached */
    log_debug("session %s: ended with conn %llu (%s)", s->id, (unsigned long long)c->id,
              c->peer);
    session_free(s);
}

enum session_result session_resume(struct sessions *ss, struct client *c, const char *id,
                                   const char *secret, unsigned *n)
{
    struct session *s = session_find(ss, id);
    unsigned char given[SECRET_BYTES];
    bool secret_ok, user_ok;

    from_hex(given, secret, sizeof(given));
    /* Compared in constant time: how long it takes says nothing of how
     * much of a guess was right. (An id is no secret: it is logged.) */
    secret_ok = s && CRYPTO_memcmp(given, s->secret, sizeof(given)) == 0;
    explicit_bzero(given, sizeof(given));
    /* With a users file, only the session's user may take it back. */
    user_ok = s && (!c->srv->users || (c->user && strcmp(c->user_name, s->user) == 0));
    if (!secret_ok || !user_ok) {
        log_info("conn %llu (%s): RESUME of session %.*s refused: %s",
                 (unsigned long long)c->id, c->peer, PROTO_SESSION_LEN, id,
                 !s ? "no such session" : !secret_ok ? "wrong secret" : "another user");
        return SESSION_NOT_FOUND;
    }
    if (s->client) {
        struct client *old = s->client;

        log_info("session %s: RESUME by conn %llu (%s) while conn %llu (%s) is still "
                 "attached: closing that one", s->id, (unsigned long long)c->id, c->peer,
                 (unsigned long long)old->id, old->peer);
        s->resuming = true;
        old->io->cut(old);        /* detaches s (session_client_lost) and frees old */
        s->resuming = false;
    }
    evtimer_del(s->timer);
    ss->stats.detached--;
    ss->stats.resumed++;
    *n = locks_owner_move_held(ss->locks, &s->owner, &c->owner);
    session_attach(s, c);
    log_info("session %s: resumed by conn %llu (%s): %u holds", s->id,
             (unsigned long long)c->id, c->peer, *n);
    return SESSION_OK;
}

/*
 * The handover's part (restart.h; data: the struct sessions). By the time
 * it saves, the connections that cannot be carried (TLS) were shed: closed
 * as lost (conn.c), so their sessions detached there, their grace counting
 * from that close. So every session is either detached, the owner of its
 * holds (their records name it 's'<id>, session_restart_key), or attached
 * to a connection that is carried. Records: "sessions" (the counters since
 * start), then one "session" per session:
 *
 *   session <id> <secret hex> <grace ms> <user> <account> <desc> <label>
 *           <attached> <conn id> <grace end, monotonic ms>
 *
 * The secret travels as the session's other secrets do (the ZooKeeper
 * password, the logins): in the memory file passed to the successor only.
 */
static void session_restart_key(const struct lock_owner *o, char *letter, uint64_t *n)
{
    *letter = 's';
    *n = strtoull(session_of_owner(o)->id, NULL, 16);
}

static void sessions_save(void *data, struct snap_w *w)
{
    struct sessions *ss = data;
    struct session *s;
    char secret[PROTO_SECRET_LEN + 1];

    snap_w_rec(w, "sessions");
    snap_w_u64(w, ss->stats.resumed);
    snap_w_u64(w, ss->stats.expired);
    TAILQ_FOREACH(s, &ss->all, link) {
        snap_w_rec(w, "session");
        snap_w_str(w, s->id);
        to_hex(secret, s->secret, sizeof(s->secret));
        snap_w_str(w, secret);
        explicit_bzero(secret, sizeof(secret));
        snap_w_i64(w, s->grace_ms);
        snap_w_str(w, s->user);
        snap_w_str(w, s->account);
        snap_w_str(w, s->desc);
        snap_w_str(w, s->label);
        snap_w_bool(w, s->client != NULL);
        snap_w_u64(w, s->client ? s->client->id : 0);
        snap_w_i64(w, s->client ? 0 : s->ends_ms);
    }
}

static bool sessions_restore_stats(void *data, struct snap_r *r, struct restart_in *in)
{
    struct sessions *ss = data;

    ss->stats.resumed = snap_r_u64(r);
    ss->stats.expired = snap_r_u64(r);
    return snap_r_done(r);
}

/* Arms s's grace timer for what is left of it (a grace that ran out during
 * the handover ends as soon as the loop runs). */
static bool session_arm_grace(struct session *s)
{
    int64_t left = s->ends_ms - locks_mono_ms();
    struct timeval tv;

    left = left < 0 ? 0 : left;
    tv.tv_sec = left / 1000;
    tv.tv_usec = (left % 1000) * 1000;
    return evtimer_add(s->timer, &tv) == 0;
}

static bool session_restore(void *data, struct snap_r *r, struct restart_in *in)
{
    struct sessions *ss = data;
    struct session *s = calloc(1, sizeof(*s));
    char secret[PROTO_SECRET_LEN + 1] = "";
    bool attached;

    if (!s)
        return snap_r_fail(r, "out of memory");
    snap_r_str_copy(r, s->id, sizeof(s->id));
    snap_r_str_copy(r, secret, sizeof(secret));
    s->grace_ms = snap_r_i64(r);
    snap_r_str_copy(r, s->user, sizeof(s->user));
    snap_r_str_copy(r, s->account, sizeof(s->account));
    snap_r_str_copy(r, s->desc, sizeof(s->desc));
    snap_r_str_copy(r, s->label, sizeof(s->label));
    attached = snap_r_bool(r);
    s->restore_client = snap_r_u64(r);
    s->ends_ms = snap_r_i64(r);
    if (snap_r_done(r) && (!proto_lower_hex(s->id, strlen(s->id), PROTO_SESSION_LEN) ||
                           !proto_lower_hex(secret, strlen(secret), PROTO_SECRET_LEN) ||
                           s->grace_ms <= 0))
        snap_r_fail(r, "a session record with a bad id, secret or grace");
    if (!snap_r_ok(r)) {
        explicit_bzero(secret, sizeof(secret));
        free(s);
        return false;
    }
    from_hex(s->secret, secret, sizeof(s->secret));
    explicit_bzero(secret, sizeof(secret));
    s->set = ss;
    lock_owner_init(&s->owner, &session_owner_ops, s->desc);
    s->owner.account = s->account;
    s->owner.label = s->label[0] ? s->label : NULL;
    if (session_find(ss, s->id)) {
        snap_r_fail(r, "session %s twice", s->id);
        free(s);
        return false;
    }
    if (!(s->timer = evtimer_new(ss->base, on_grace_over, s)) ||
        !quota_take(&ss->accounts, s->account, &s->acct) || !tsearch(s, &ss->by_id, by_id)) {
        if (s->acct)
            quota_put(&ss->accounts, s->acct);
        if (s->timer)
            event_free(s->timer);
        free(s);
        return snap_r_fail(r, "out of memory");
    }
    TAILQ_INSERT_TAIL(&ss->all, s, link);
    ss->stats.current++;
    if (attached) {
        /* Its connection comes later in the snapshot: sessions_restored. */
        s->restoring = true;
        return true;
    }
    ss->stats.detached++;
    if (!session_arm_grace(s))
        return snap_r_fail(r, "out of memory");
    /* Its holds' records name it; they come after the connections. */
    return restart_keep(in, r, 's', strtoull(s->id, NULL, 16), &s->owner);
}

/* Every record was read: attached sessions find their connection. */
static bool sessions_restored(void *data, struct snap_r *r, struct restart_in *in)
{
    struct sessions *ss = data;
    struct session *s;

    TAILQ_FOREACH(s, &ss->all, link) {
        struct lock_owner *o;

        if (!s->restoring)
            continue;
        if (!(o = restart_find(in, 'c', s->restore_client)))
            return snap_r_fail(r, "session %s names conn %llu, which is not there", s->id,
                               (unsigned long long)s->restore_client);
        s->restoring = false;
        session_attach(s, client_of_owner(o));
    }
    if (ss->stats.current)
        log_info("handover: carried %llu sessions, %llu of them detached",
                 (unsigned long long)ss->stats.current, (unsigned long long)ss->stats.detached);
    return true;
}

const struct restart_part sessions_restart_part = {
    .name = "sessions",
    .kinds = (const struct restart_kind[]){
        { "sessions", sessions_restore_stats }, { "session", session_restore }, { NULL } },
    .save = sessions_save,
    .restored = sessions_restored,
};

int64_t session_grace_ms(const struct session *s)
{
    return s->grace_ms;
}
