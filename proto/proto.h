/*
 * proto.h - lockbroker wire protocol v1: request parser and reply formatting.
 *
 * Pure code: no sockets, no libevent, no ZooKeeper. The daemon hands it one
 * request line (without the LF) and gets a struct back; replies are formatted
 * into caller-supplied buffers. proto/PROTOCOL.md is the specification.
 */
#ifndef LOCKBROKER_PROTO_H
#define LOCKBROKER_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define PROTO_NAME_MAX 200            /* bytes in a lock name */
#define PROTO_WAIT_MAX 2147483647LL   /* largest wait-ms accepted (~24.8 days) */
#define PROTO_LIMIT_MAX 65535         /* largest n of the limit=<n> option */
#define PROTO_TTL_MIN 100LL           /* bounds of ttl=<ms> and RENEW's ttl-ms: */
#define PROTO_TTL_MAX 86400000LL      /*   0.1 s to 24 h */
#define PROTO_LINE_DEFAULT 1024       /* default request line limit, bytes */
#define PROTO_REPLY_MAX 512           /* enough for any single reply line */
#define PROTO_LABEL_MAX 100           /* bytes in a CLIENT label */
#define PROTO_USER_MAX 64             /* bytes in an AUTH user name */
#define PROTO_ACCOUNT_MAX 80          /* "user <name>" or "address <peer's IP>" (quotas) */
#define PROTO_DELAY_MAX 60000LL      /* largest delay=<ms>: a minute, as Consul's lock-delay */
#define PROTO_KEEP_MAX 86400000LL     /* largest keep=<ms> of UNLOCK: 24 h */
#define PROTO_SAFE_MAX 86400000LL     /* largest <safe-ms> a CHECK answers: 24 h */
#define PROTO_PASSWORD_MAX 128        /* bytes in an AUTH password; with the longest
                                       * user the line fits the smallest max_line */
#define PROTO_GRACE_MIN 100LL         /* bounds of GRACE's ms: the least a client may ask; */
#define PROTO_GRACE_MAX 3600000LL     /*   the most [server] max_grace_ms may allow (1 h) */
#define PROTO_SESSION_LEN 16          /* hex digits of a session id (GRACE, RESUME) */
#define PROTO_SECRET_LEN 32           /* hex digits of a session's secret (128 bits) */
#define PROTO_SET_MAX 16              /* names in one set: LOCK/TRYLOCK/UNLOCK a,b,c */
/* The longest reply about a set: "OK <16 longest names, commas> <16 tokens, commas>". */
#define PROTO_SET_REPLY_MAX (3 + PROTO_SET_MAX * (PROTO_NAME_MAX + 1) + PROTO_SET_MAX * 21 + 2)

/*
 * Argument layouts for the command table. A command's arguments are
 * positional, in the order of its layout; the first `required` of them must be
 * given, the others may be left off from the end. A layout that ends in
 * PROTO_ARG_OPTIONS takes options after them (PROTOCOL.md, "Options").
 */
enum proto_arg {
    PROTO_ARG_END,      /* ends a layout; unused entries are zero */
    PROTO_ARG_NAME,     /* a lock name (proto_name_valid) -> name, name_len */
    PROTO_ARG_NAMES,    /* a lock name, or a set: 2..PROTO_SET_MAX distinct names joined
                         * by commas -> name, name_len (as given), names, nnames */
    PROTO_ARG_WAIT,     /* wait-ms, digits only, 0..PROTO_WAIT_MAX -> wait_ms */
    PROTO_ARG_TOKEN,    /* a token, digits only, 0..UINT64_MAX -> token, has_token */
    PROTO_ARG_TTL,      /* ttl-ms, digits only, PROTO_TTL_MIN..MAX -> ttl_ms */
    PROTO_ARG_LABEL,    /* 1..PROTO_LABEL_MAX printable non-space bytes -> label */
    PROTO_ARG_GLOB,     /* a name pattern: name bytes and * ? [ ] ! -> name, name_len */
    PROTO_ARG_USER,     /* 1..PROTO_USER_MAX of [A-Za-z0-9._@-] -> user, user_len */
    PROTO_ARG_PASSWORD, /* 1..PROTO_PASSWORD_MAX printable non-space bytes -> password */
    PROTO_ARG_GRACE,    /* GRACE's ms: digits only -> grace_ms, or -1 when not digits or
                         * above PROTO_GRACE_MAX (the daemon's bound is a setting, so
                         * the handler answers out-of-range values, not the parser) */
    PROTO_ARG_SESSION,  /* PROTO_SESSION_LEN lower-case hex digits -> session */
    PROTO_ARG_SECRET,   /* PROTO_SECRET_LEN lower-case hex digits -> secret */
    PROTO_ARG_OPTIONS,  /* last: then options, shared | limit=<n> | ttl=<ms> | delay=<ms> */
    PROTO_ARG_RELEASE,  /* last: then the options of a release, keep=<ms> */
};
#define PROTO_ARGS_MAX 4                  /* entries in one layout */
#define PROTO_ARGS(...) { __VA_ARGS__ }   /* a layout: PROTO_ARGS(PROTO_ARG_NAME, ...) */
#define PROTO_NO_ARGS { PROTO_ARG_END }

/*
 * What the request path checks for a command before its handler runs
 * (daemon/cmd.c), when the daemon has a users file. A command without
 * PROTO_F_ANON needs a login first.
 */
#define PROTO_F_ANON   0x01  /* works before AUTH */
#define PROTO_F_NAMES  0x02  /* every name given must match the user's patterns */
#define PROTO_F_OWN    0x04  /* without a token it acts only on the connection's own
                              * hold: then PROTO_F_NAMES is not checked */
#define PROTO_F_BREAK  0x08  /* the name must match one of the user's break= patterns */
#define PROTO_F_LISTS  0x10  /* lists names: those the user may not use are left out */

/*
 * The command table: X(ID, word, required args, argument layout, flags, usage, help).
 * The parser, the HELP reply, the statistics, the permission checks and the
 * fuzz harness are all generated from it.
 */
#define PROTO_COMMANDS(X)                                                          \
    X(LOCK,    "LOCK",    1, PROTO_ARGS(PROTO_ARG_NAMES, PROTO_ARG_WAIT, PROTO_ARG_OPTIONS), \
      PROTO_F_NAMES,                                                               \
      "LOCK <name>[,<name>...] [<wait-ms>] [shared|limit=<n>] [ttl=<ms>] [delay=<ms>]", \
      "take a lock (or all of a set), waiting up to wait-ms (default: for ever)") \
    X(TRYLOCK, "TRYLOCK", 1, PROTO_ARGS(PROTO_ARG_NAMES, PROTO_ARG_OPTIONS),        \
      PROTO_F_NAMES,                                                               \
      "TRYLOCK <name>[,<name>...] [shared|limit=<n>] [ttl=<ms>] [delay=<ms>]",     \
      "take a lock (or all of a set) only if it is free")                        \
    X(UNLOCK,  "UNLOCK",  1, PROTO_ARGS(PROTO_ARG_NAMES, PROTO_ARG_TOKEN, PROTO_ARG_RELEASE), \
      PROTO_F_NAMES | PROTO_F_OWN,                                                 \
      "UNLOCK <name>[,<name>...] [<token>] [keep=<ms>]",                          \
      "release a lock (or a set) this connection holds, at once or keep=ms later") \
    X(RENEW,   "RENEW",   3, PROTO_ARGS(PROTO_ARG_NAME, PROTO_ARG_TOKEN, PROTO_ARG_TTL), \
      PROTO_F_NAMES,                                                               \
      "RENEW <name> <token> <ttl-ms>", "extend a lease: it now ends ttl-ms from now") \
    X(CHECK,   "CHECK",   1, PROTO_ARGS(PROTO_ARG_NAME, PROTO_ARG_TOKEN),           \
      PROTO_F_NAMES,                                                               \
      "CHECK <name> [<token>]",                                                    \
      "is the lock (the lease) still held, and for how many ms is it certainly safe") \
    X(PING,    "PING",    0, PROTO_NO_ARGS, PROTO_F_ANON, "PING", "answer PONG")   \
    X(QUIT,    "QUIT",    0, PROTO_NO_ARGS, PROTO_F_ANON,                          \
      "QUIT", "answer BYE and close the connection")                               \
    X(STATUS,  "STATUS",  1, PROTO_ARGS(PROTO_ARG_NAME), PROTO_F_NAMES, "STATUS <name>", \
      "who holds a lock, with which token, since when, and how many wait")         \
    X(LOCKS,   "LOCKS",   0, PROTO_ARGS(PROTO_ARG_GLOB), PROTO_F_LISTS, "LOCKS [<glob>]", \
      "the locks held or awaited on this daemon, a LOCK line each, then END")     \
    X(HOLDERS, "HOLDERS", 0, PROTO_ARGS(PROTO_ARG_GLOB), PROTO_F_LISTS, "HOLDERS [<glob>]", \
      "every holder and queued request, all daemons, a HOLDER line each, then END") \
    X(BREAK,   "BREAK",   1, PROTO_ARGS(PROTO_ARG_NAME, PROTO_ARG_TOKEN),           \
      PROTO_F_BREAK,                                                               \
      "BREAK <name> [<token>]",                                                    \
      "end others' holds of a lock (the one with that token) on this daemon")      \
    X(WATCH,   "WATCH",   1, PROTO_ARGS(PROTO_ARG_NAME), PROTO_F_NAMES, "WATCH <name>", \
      "push the lock's state now and at each change, as EVENT lines")             \
    X(UNWATCH, "UNWATCH", 1, PROTO_ARGS(PROTO_ARG_NAME), PROTO_F_NAMES, "UNWATCH <name>", \
      "stop a WATCH")                                                              \
    X(CLIENT,  "CLIENT",  1, PROTO_ARGS(PROTO_ARG_LABEL), 0, "CLIENT <label>",      \
      "name this connection in STATUS and LOCKS (label=) for its later locks")    \
    X(STATS,   "STATS",   0, PROTO_NO_ARGS, 0, "STATS",                            \
      "counters as STAT <name> <value> lines, then END")                          \
    X(HELP,    "HELP",    0, PROTO_NO_ARGS, PROTO_F_ANON, "HELP",                  \
      "this list as HELP lines, then END")                                         \
    X(AUTH,    "AUTH",    2, PROTO_ARGS(PROTO_ARG_USER, PROTO_ARG_PASSWORD),       \
      PROTO_F_ANON, "AUTH <user> <password>", "log in as a user of the daemon's users_file") \
    X(GRACE,   "GRACE",   1, PROTO_ARGS(PROTO_ARG_GRACE), 0, "GRACE <ms>",          \
      "open a session: this connection's holds outlive it by ms, for RESUME")     \
    X(RESUME,  "RESUME",  2, PROTO_ARGS(PROTO_ARG_SESSION, PROTO_ARG_SECRET), 0,   \
      "RESUME <session> <secret>", "take a session's holds back on a new connection")

enum proto_cmd {
#define X(id, word, required, args, flags, usage, help) PROTO_CMD_##id,
    PROTO_COMMANDS(X)
#undef X
    PROTO_CMD_COUNT
};

/* Error codes of `ERR <CODE> <text>` replies: X(ID). New codes go at the end.
 * proto_parse() returns only BAD_COMMAND, BAD_ARGS and BAD_NAME. */
#define PROTO_ERRORS(X) \
    X(BAD_COMMAND) X(BAD_ARGS) X(BAD_NAME) X(LINE_TOO_LONG) \
    X(NOT_HELD) X(LIMIT) X(UNAVAILABLE) X(INTERNAL) X(CONFLICT) \
    X(NOAUTH) X(AUTH_FAILED) X(DENIED)

enum proto_err {
#define X(id) PROTO_ERR_##id,
    PROTO_ERRORS(X)
#undef X
    PROTO_ERR_COUNT
};

/* How a LOCK or TRYLOCK wants the lock (PROTOCOL.md, "Options"). */
enum proto_mode { PROTO_MODE_EXCLUSIVE, PROTO_MODE_SHARED, PROTO_MODE_LIMIT };

enum proto_parse_result {
    PROTO_REQUEST,  /* *req describes a well-formed request */
    PROTO_BLANK,    /* empty or whitespace-only line: ignore it, no reply */
    PROTO_ERROR,    /* req->err and req->errmsg say what is wrong */
};

/* One name of a set; points into the parsed line, NOT NUL-terminated. */
struct proto_name {
    const char *p;
    size_t len;           /* 1..PROTO_NAME_MAX */
};

struct proto_req {
    enum proto_cmd cmd;
    const char *name;     /* points into the parsed line; NOT NUL-terminated; for a set,
                           * the whole list as given ("a,b,c") */
    size_t name_len;      /* 1..PROTO_NAME_MAX when cmd takes a name; a set's list may be
                           * longer (the line bounds it) */
    unsigned nnames;      /* LOCK, TRYLOCK, UNLOCK: 1, or 2..PROTO_SET_MAX for a set; else 0 */
    struct proto_name names[PROTO_SET_MAX]; /* the first nnames: each name, in the order
                                             * given, pairwise distinct */
    int64_t wait_ms;      /* LOCK only: -1 = wait for ever, else 0..PROTO_WAIT_MAX */
    enum proto_mode mode; /* LOCK/TRYLOCK: EXCLUSIVE unless an option says otherwise */
    unsigned limit;       /* PROTO_MODE_LIMIT: 1..PROTO_LIMIT_MAX; otherwise 0 */
    int64_t ttl_ms;       /* LOCK/TRYLOCK ttl=, RENEW's ttl-ms: 0 = none, else PROTO_TTL_MIN..MAX */
    int64_t delay_ms;     /* LOCK/TRYLOCK delay=: -1 = not given, else 0..PROTO_DELAY_MAX */
    int64_t keep_ms;      /* UNLOCK keep=: 0 = not given, else 0..PROTO_KEEP_MAX */
    int has_token;        /* UNLOCK and CHECK with a token, and RENEW: 1 */
    uint64_t token;       /* valid when has_token */
    const char *label;    /* CLIENT: points into the line; NOT NUL-terminated */
    size_t label_len;     /* 1..PROTO_LABEL_MAX */
    const char *user;     /* AUTH: points into the line; NOT NUL-terminated */
    size_t user_len;      /* 1..PROTO_USER_MAX */
    const char *password; /* AUTH: points into the line; NOT NUL-terminated */
    size_t password_len;  /* 1..PROTO_PASSWORD_MAX */
    int64_t grace_ms;     /* GRACE: the ms given, or -1 when not digits (or absurdly large) */
    const char *session;  /* RESUME: PROTO_SESSION_LEN hex digits in the line; NOT
                           * NUL-terminated */
    const char *secret;   /* RESUME: PROTO_SECRET_LEN hex digits in the line; likewise */
    enum proto_err err;   /* valid when the parse result is PROTO_ERROR */
    const char *errmsg;   /* static string; valid when PROTO_ERROR */
};

/*
 * Parses one request line. `line` need not be NUL-terminated and may hold any
 * bytes, NUL included; `len` excludes the LF (a trailing CR is ignored here).
 * The caller enforces the line length limit. *req borrows from `line`.
 */
enum proto_parse_result proto_parse(const char *line, size_t len,
                                    struct proto_req *req);

/* 1 if user[0..len) is a valid user name (1..64 bytes of [A-Za-z0-9._@-]). */
int proto_user_valid(const char *user, size_t len);

/* 1 if s[0..n) is exactly len lower-case hex digits (0-9 a-f): a session
 * id or secret, in RESUME and in the handover's session records. */
int proto_lower_hex(const char *s, size_t n, size_t len);

/* 1 if name[0..len) is a valid lock name (1..200 bytes of [A-Za-z0-9._:@-], not "." or ".."). */
int proto_name_valid(const char *name, size_t len);

const char *proto_cmd_word(enum proto_cmd cmd);   /* "LOCK"; static */
const char *proto_cmd_usage(enum proto_cmd cmd);  /* "UNLOCK <name> [<token>]"; static */
const char *proto_cmd_help(enum proto_cmd cmd);   /* one line of explanation; static */
const char *proto_err_code(enum proto_err err);   /* "BAD_NAME"; static */
unsigned proto_cmd_flags(enum proto_cmd cmd);     /* PROTO_F_* of its row */
/* Its argument layout: PROTO_ARGS_MAX entries, ending in PROTO_ARG_END; static. */
const enum proto_arg *proto_cmd_args(enum proto_cmd cmd);
/* 1 if the command's layout has an argument of that kind. */
int proto_cmd_takes(enum proto_cmd cmd, enum proto_arg arg);

/*
 * Reply formatting. Each writes one LF-terminated line into buf (cap bytes,
 * NUL-terminated) and returns its length without the NUL, or -1 if it does
 * not fit. Names are passed as pointer + length and are copied verbatim.
 */
int proto_fmt_granted(char *buf, size_t cap, const char *name, size_t len, uint64_t token); /* OK n t */
int proto_fmt_word_name(char *buf, size_t cap, const char *word,
                        const char *name, size_t len);  /* "OK n", "BUSY n", "TIMEOUT n" */
int proto_fmt_err(char *buf, size_t cap, enum proto_err err, const char *text);          /* ERR C t */
int proto_fmt_checked(char *buf, size_t cap, const char *name, size_t len, uint64_t token,
                      int64_t safe_ms);                                                   /* OK n t s */
int proto_fmt_lost(char *buf, size_t cap, const char *name, uint64_t token,
                   const char *reason);                                                   /* LOST n t r */
/* "OK a,b,c t1,t2,t3": list as the client gave it, tokens[i] the token of its i-th name;
 * PROTO_SET_REPLY_MAX bytes take any set's. */
int proto_fmt_granted_set(char *buf, size_t cap, const char *list, size_t len,
                          const uint64_t *tokens, unsigned n);

/* "OK <a> <b>": GRACE's "OK <session> <secret>", RESUME's "OK <session> <n>". */
int proto_fmt_ok2(char *buf, size_t cap, const char *a, const char *b);

/* "PONG", "BYE", "OK", "END": a line of one word. */
int proto_fmt_word(char *buf, size_t cap, const char *word);
int proto_fmt_more(char *buf, size_t cap, size_t more);                     /* MORE n */
int proto_fmt_stat(char *buf, size_t cap, const char *name, const char *value); /* STAT n v */
int proto_fmt_help(char *buf, size_t cap, enum proto_cmd cmd);   /* HELP <usage> - <help> */

/* Enough for any STATUS, LOCK, HOLDER or EVENT line (PROTOCOL.md bounds their fields). */
#define PROTO_INFO_MAX 2048

enum proto_state { PROTO_FREE, PROTO_HELD, PROTO_QUEUED, PROTO_UNAVAILABLE };

/*
 * What a STATUS, LOCK, HOLDER or EVENT line says of a lock or of one holder.
 * Strings are NUL-terminated and borrowed; NULL (or "" for label) prints "-"
 * where the line has the field, and leaves an optional field out.
 */
struct proto_info {
    const char *name;
    enum proto_state state;
    enum proto_mode mode;
    unsigned limit;         /* PROTO_MODE_LIMIT only */
    const char *daemon;     /* prefixed to holder as "<daemon>/<holder>", or NULL */
    const char *holder;     /* the holder, or NULL */
    const char *label;      /* its CLIENT label, or NULL/"" */
    int has_token;
    uint64_t token;
    int64_t since_ms;       /* wall-clock ms; -1: not known */
    unsigned holders, waiters, queue;
    int has_waited;         /* LOCK: adds waited= */
    int64_t waited_ms;      /* how long the earliest waiter has waited, ms */
    int64_t delay_ms;       /* STATUS, LOCK: > 0 adds delay= */
    int64_t lease_ms;       /* >= 0 adds lease= */
    int64_t detached_ms;    /* STATUS, LOCK: > 0 adds detached= (a session's hold whose
                             * connection ended: its grace left, at least 1) */
    const char *recipe;     /* adds recipe=, or NULL */
};

/*
 * STATUS <name> held|free holder= token= since= waiters= queue= [mode= holders=]
 * [delay=] [lease=] [detached=] [recipe=] [label=]. A free lock prints holder, token and since as -.
 */
int proto_fmt_status(char *buf, size_t cap, const struct proto_info *in);
/* LOCK <name> <mode> holder= label= token= since= holders= waiters= [waited=] [delay=]
 * [lease=] [detached=] [recipe=] */
int proto_fmt_lock(char *buf, size_t cap, const struct proto_info *in);
/* HOLDER <name> <mode> held|queued holder= label= token= since= [lease=] */
int proto_fmt_holder(char *buf, size_t cap, const struct proto_info *in);
/* EVENT <name> free | unavailable | held <token|-> holders= label= holder= mode= */
int proto_fmt_event(char *buf, size_t cap, const struct proto_info *in);

#endif
