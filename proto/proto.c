/*
 * proto.c - request parsing and reply formatting (see proto.h, PROTOCOL.md).
 */
#include "proto.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct proto_cmd_def {
    const char *word;
    unsigned required;                    /* leading entries of args that must be given */
    enum proto_arg args[PROTO_ARGS_MAX];  /* the layout; unused entries are PROTO_ARG_END */
    unsigned flags;                       /* PROTO_F_* */
    const char *usage, *help;
};

static const struct proto_cmd_def cmd_defs[PROTO_CMD_COUNT] = {
#define X(id, word, required, args, flags, usage, help) \
    [PROTO_CMD_##id] = { word, required, args, flags, usage, help },
    PROTO_COMMANDS(X)
#undef X
};

static const char *const err_codes[PROTO_ERR_COUNT] = {
#define X(id) [PROTO_ERR_##id] = #id,
    PROTO_ERRORS(X)
#undef X
};

/* Options one request may carry: bounds the work per line, with room for
 * options to come. PROTOCOL.md gives the number. */
#define MAX_OPTIONS 4

/* The most tokens any command takes: the word, a full layout and the options.
 * One more is collected so that "too many arguments" is detected without
 * counting on. */
#define MAX_TOKENS (1 + PROTO_ARGS_MAX + MAX_OPTIONS + 1)

_Static_assert(PROTO_USER_MAX == 64 && PROTO_PASSWORD_MAX == 128,
               "the AUTH messages spell out the bounds");

#define STR_(x) #x
#define STR(x) STR_(x)

enum opt { OPT_SHARED, OPT_LIMIT, OPT_TTL, OPT_DELAY, OPT_KEEP, OPT_COUNT };

/* Options: a bare word, or word=<n> with n in min..max, of the layouts that
 * end in `set` (PROTO_ARG_OPTIONS or PROTO_ARG_RELEASE). */
static const struct opt_def {
    const char *word;       /* upper case; matched case-insensitively */
    enum proto_arg set;     /* the layouts that take it */
    unsigned min, max;      /* bounds of the value; max 0: the option takes none */
    const char *bad_value;  /* message for a value missing, malformed or out of range */
} opt_defs[OPT_COUNT] = {
    [OPT_SHARED] = { "SHARED", PROTO_ARG_OPTIONS, 0, 0, NULL },
    [OPT_LIMIT]  = { "LIMIT", PROTO_ARG_OPTIONS, 1, PROTO_LIMIT_MAX,
                     "limit must be an integer from 1 to " STR(PROTO_LIMIT_MAX) },
    /* Spelt out: STR() would keep the LL of PROTO_TTL_MAX (see the assertion below). */
    [OPT_TTL]    = { "TTL", PROTO_ARG_OPTIONS, PROTO_TTL_MIN, PROTO_TTL_MAX,
                     "ttl must be an integer from 100 to 86400000" },
    [OPT_DELAY]  = { "DELAY", PROTO_ARG_OPTIONS, 0, PROTO_DELAY_MAX,
                     "delay must be an integer from 0 to 60000" },
    [OPT_KEEP]   = { "KEEP", PROTO_ARG_RELEASE, 0, PROTO_KEEP_MAX,
                     "keep must be an integer from 0 to 86400000" },
};

_Static_assert(PROTO_KEEP_MAX == 86400000, "the keep message spells out the bound");

_Static_assert(PROTO_DELAY_MAX == 60000, "the delay message spells out the bound");

_Static_assert(PROTO_SESSION_LEN == 16 && PROTO_SECRET_LEN == 32,
               "the session messages spell out the lengths");

_Static_assert(PROTO_TTL_MIN == 100 && PROTO_TTL_MAX == 86400000,
               "the ttl messages spell out the bounds");

struct token { const char *p; size_t len; };

static int is_sep(char c) { return c == ' ' || c == '\t'; }

static char ascii_upper(char c) { return (c >= 'a' && c <= 'z') ? (char)(c - 'a' + 'A') : c; }

/* Splits into at most MAX_TOKENS tokens; returns the count (capped). */
static unsigned tokenize(const char *s, size_t len, struct token *tok)
{
    unsigned n = 0;
    size_t i = 0;

    while (i < len && n < MAX_TOKENS) {
        while (i < len && is_sep(s[i]))
            i++;
        if (i == len)
            break;
        tok[n].p = s + i;
        while (i < len && !is_sep(s[i]))
            i++;
        tok[n].len = (size_t)(s + i - tok[n].p);
        n++;
    }
    return n;
}

static int is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

static int word_equals(const struct token *t, const char *word)
{
    size_t wl = strlen(word);

    if (t->len != wl)
        return 0;
    for (size_t i = 0; i < wl; i++)
        if (ascii_upper(t->p[i]) != word[i])
            return 0;
    return 1;
}

int proto_name_valid(const char *name, size_t len)
{
    if (len == 0 || len > PROTO_NAME_MAX)
        return 0;
    if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == ':' || c == '@' || c == '-'))
            return 0;
    }
    return 1;
}

int proto_user_valid(const char *user, size_t len)
{
    if (len == 0 || len > PROTO_USER_MAX)
        return 0;
    /* Lock name characters without ':', which separates the users file's fields. */
    for (size_t i = 0; i < len; i++) {
        char c = user[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '@' || c == '-'))
            return 0;
    }
    return 1;
}

/* 1..max bytes 0x21-0x7e: printable ASCII without spaces. */
static int printable_word(const struct token *t, size_t max)
{
    if (t->len == 0 || t->len > max)
        return 0;
    for (size_t i = 0; i < t->len; i++)
        if (t->p[i] < 0x21 || t->p[i] > 0x7e)
            return 0;
    return 1;
}

int proto_lower_hex(const char *s, size_t n, size_t len)
{
    if (n != len)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

/* Decimal 0..PROTO_WAIT_MAX, digits only; returns -1 when not. */
static int64_t parse_wait(const struct token *t)
{
    int64_t v = 0;

    if (t->len == 0 || t->len > 10)
        return -1;
    for (size_t i = 0; i < t->len; i++) {
        if (t->p[i] < '0' || t->p[i] > '9')
            return -1;
        v = v * 10 + (t->p[i] - '0');
    }
    return v <= PROTO_WAIT_MAX ? v : -1;
}

/* Decimal 0..UINT64_MAX, 1 to 20 digits only, into *v; returns -1 when not. */
static int parse_token(const struct token *t, uint64_t *v)
{
    *v = 0;
    if (t->len == 0 || t->len > 20)
        return -1;
    for (size_t i = 0; i < t->len; i++) {
        unsigned d;

        if (t->p[i] < '0' || t->p[i] > '9')
            return -1;
        d = (unsigned)(t->p[i] - '0');
        if (*v > (UINT64_MAX - d) / 10)
            return -1;  /* 18446744073709551616 and up */
        *v = *v * 10 + d;
    }
    return 0;
}

static enum proto_parse_result fail(struct proto_req *req, enum proto_err err, const char *msg)
{
    req->err = err;
    req->errmsg = msg;
    return PROTO_ERROR;
}

/* The number of positional arguments in def's layout. */
static unsigned layout_len(const struct proto_cmd_def *def)
{
    unsigned n = 0;

    while (n < PROTO_ARGS_MAX && def->args[n] != PROTO_ARG_END &&
           def->args[n] != PROTO_ARG_OPTIONS && def->args[n] != PROTO_ARG_RELEASE)
        n++;
    return n;
}

/* The kind of options the layout ends in (PROTO_ARG_OPTIONS or _RELEASE),
 * or PROTO_ARG_END when it takes none. */
static enum proto_arg takes_options(const struct proto_cmd_def *def)
{
    unsigned n = layout_len(def);

    return n < PROTO_ARGS_MAX ? def->args[n] : PROTO_ARG_END;
}

/* The option of that set t names ("shared"; "limit" with or without "=..."), or -1. */
static int find_option(const struct token *t, enum proto_arg set)
{
    for (int i = 0; i < OPT_COUNT; i++) {
        struct token key = *t;
        const char *eq = memchr(t->p, '=', t->len);

        if (opt_defs[i].set != set)
            continue;
        if (eq && opt_defs[i].max > 0)
            key.len = (size_t)(eq - t->p);
        if (word_equals(&key, opt_defs[i].word))
            return i;
    }
    return -1;
}

/* Decimal min..max, digits only, of any length; returns -1 when not. */
static int64_t parse_value(const char *p, size_t len, unsigned min, unsigned max)
{
    uint64_t v = 0;

    if (len == 0)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        if (v <= max)           /* stops growing once out of range */
            v = v * 10 + (uint64_t)(p[i] - '0');
    }
    return (v >= min && v <= max) ? (int64_t)v : -1;
}

/* Checks one option and stores it in *req; *seen has a bit per option given. */
static enum proto_parse_result parse_option(const struct token *t, enum proto_arg set,
                                            unsigned *seen, struct proto_req *req)
{
    int opt = find_option(t, set);
    int64_t value = 0;

    if (opt < 0)
        return fail(req, PROTO_ERR_BAD_ARGS, "unknown option");
    if (*seen & (1u << opt))
        return fail(req, PROTO_ERR_BAD_ARGS, "option given twice");
    *seen |= 1u << opt;

    if (opt_defs[opt].max > 0) {
        const char *eq = memchr(t->p, '=', t->len);

        value = eq ? parse_value(eq + 1, (size_t)(t->p + t->len - eq - 1),
                                 opt_defs[opt].min, opt_defs[opt].max) : -1;
        if (value < 0)
            return fail(req, PROTO_ERR_BAD_ARGS, opt_defs[opt].bad_value);
    }

    switch ((enum opt)opt) {
    case OPT_SHARED:
    case OPT_LIMIT:
        /* Both choose the mode; it is still the default unless the other did. */
        if (req->mode != PROTO_MODE_EXCLUSIVE)
            return fail(req, PROTO_ERR_BAD_ARGS, "shared and limit= cannot be combined");
        req->mode = opt == OPT_SHARED ? PROTO_MODE_SHARED : PROTO_MODE_LIMIT;
        req->limit = (unsigned)value;
        break;
    case OPT_TTL:
        req->ttl_ms = value;
        break;
    case OPT_DELAY:
        req->delay_ms = value;
        break;
    case OPT_KEEP:
        req->keep_ms = value;
        break;
    case OPT_COUNT:
        break;          /* never: find_option() returns a row */
    }
    return PROTO_REQUEST;
}

#define MSG_BAD_NAME "names are 1-200 bytes of A-Z a-z 0-9 . _ : @ -, not . or .."

/* A name, or a set "a,b,c" (PROTOCOL.md, "Sets of locks"), into name, names, nnames. */
static enum proto_parse_result parse_names(const struct token *t, struct proto_req *req)
{
    const char *p = t->p, *end = t->p + t->len;

    _Static_assert(PROTO_SET_MAX == 16, "the set messages spell out the bound");
    req->name = t->p;
    req->name_len = t->len;
    req->nnames = 0;
    for (;;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma ? comma : end;
        struct proto_name n = { p, (size_t)(stop - p) };

        if (n.len == 0)
            return fail(req, PROTO_ERR_BAD_ARGS, "a set of names has no empty element");
        if (!proto_name_valid(n.p, n.len))
            return fail(req, PROTO_ERR_BAD_NAME, MSG_BAD_NAME);
        if (req->nnames == PROTO_SET_MAX)
            return fail(req, PROTO_ERR_BAD_ARGS, "a set has at most 16 names");
        for (unsigned i = 0; i < req->nnames; i++)
            if (req->names[i].len == n.len && memcmp(req->names[i].p, n.p, n.len) == 0)
                return fail(req, PROTO_ERR_BAD_ARGS, "a name is given twice in the set");
        req->names[req->nnames++] = n;
        if (!comma)
            return PROTO_REQUEST;
        p = comma + 1;
    }
}

/*
 * Why the sets of a glob are unbalanced, or NULL. fnmatch(3) takes a '['
 * without its ']' for a literal '[', and a ']' outside a set for a literal
 * ']': neither is a name character, so such a pattern would match nothing,
 * silently. A set is read as fnmatch reads it: '!' first negates, and a ']'
 * right after "[" or "[!" is a member, not the end.
 */
static const char *glob_brackets_problem(const char *p, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (p[i] == ']')
            return "a ']' in the pattern has no '[' before it (a set is [...] or [!...])";
        if (p[i] != '[')
            continue;
        size_t j = i + 1;

        if (j < len && p[j] == '!')
            j++;
        if (j < len && p[j] == ']')
            j++;
        while (j < len && p[j] != ']')
            j++;
        if (j == len)
            return "a '[' in the pattern has no ']' after it (a set is [...] or [!...])";
        i = j;
    }
    return NULL;
}

/* Checks one positional argument of kind `arg` and stores it in *req. */
static enum proto_parse_result parse_arg(enum proto_arg arg, const struct token *t,
                                         struct proto_req *req)
{
    uint64_t token;
    int64_t ttl_ms;
    const char *why;

    switch (arg) {
    case PROTO_ARG_NAME:
        if (!proto_name_valid(t->p, t->len))
            return fail(req, PROTO_ERR_BAD_NAME, MSG_BAD_NAME);
        req->name = t->p;
        req->name_len = t->len;
        break;
    case PROTO_ARG_NAMES:
        return parse_names(t, req);
    case PROTO_ARG_WAIT:
        req->wait_ms = parse_wait(t);
        if (req->wait_ms < 0)
            return fail(req, PROTO_ERR_BAD_ARGS, "wait-ms must be an integer from 0 to 2147483647");
        break;
    case PROTO_ARG_TOKEN:
        if (parse_token(t, &token) < 0)
            return fail(req, PROTO_ERR_BAD_ARGS, "token must be an unsigned 64-bit integer");
        req->token = token;
        req->has_token = 1;
        break;
    case PROTO_ARG_TTL:
        ttl_ms = parse_value(t->p, t->len, PROTO_TTL_MIN, PROTO_TTL_MAX);
        if (ttl_ms < 0)
            return fail(req, PROTO_ERR_BAD_ARGS, "ttl-ms must be an integer from 100 to 86400000");
        req->ttl_ms = ttl_ms;
        break;
    case PROTO_ARG_LABEL:
        if (!printable_word(t, PROTO_LABEL_MAX))
            return fail(req, PROTO_ERR_BAD_ARGS,
                        "a label is 1-100 printable bytes without spaces");
        req->label = t->p;
        req->label_len = t->len;
        break;
    case PROTO_ARG_GLOB:
        if (t->len > PROTO_NAME_MAX)
            return fail(req, PROTO_ERR_BAD_ARGS, "a pattern is 1-200 bytes of name characters "
                        "and * ? [ ] !");
        for (size_t i = 0; i < t->len; i++)
            if (!proto_name_valid(&t->p[i], 1) && (!t->p[i] || !strchr("*?[]!.", t->p[i])))
                return fail(req, PROTO_ERR_BAD_ARGS, "a pattern is 1-200 bytes of name "
                            "characters and * ? [ ] !");
        if ((why = glob_brackets_problem(t->p, t->len)))
            return fail(req, PROTO_ERR_BAD_ARGS, why);
        req->name = t->p;
        req->name_len = t->len;
        break;
    case PROTO_ARG_USER:
        if (!proto_user_valid(t->p, t->len))
            return fail(req, PROTO_ERR_BAD_ARGS,
                        "a user name is 1-64 bytes of A-Z a-z 0-9 . _ @ -");
        req->user = t->p;
        req->user_len = t->len;
        break;
    case PROTO_ARG_PASSWORD:
        if (!printable_word(t, PROTO_PASSWORD_MAX))
            return fail(req, PROTO_ERR_BAD_ARGS,
                        "a password is 1-128 printable bytes without spaces");
        req->password = t->p;
        req->password_len = t->len;
        break;
    case PROTO_ARG_GRACE:
        /* The daemon's bound is a setting: the handler answers a bad value. */
        req->grace_ms = parse_value(t->p, t->len, 0, (unsigned)PROTO_GRACE_MAX + 1);
        break;
    case PROTO_ARG_SESSION:
        if (!proto_lower_hex(t->p, t->len, PROTO_SESSION_LEN))
            return fail(req, PROTO_ERR_BAD_ARGS, "a session is 16 lower-case hex digits");
        req->session = t->p;
        break;
    case PROTO_ARG_SECRET:
        if (!proto_lower_hex(t->p, t->len, PROTO_SECRET_LEN))
            return fail(req, PROTO_ERR_BAD_ARGS, "a secret is 32 lower-case hex digits");
        req->secret = t->p;
        break;
    case PROTO_ARG_END:
    case PROTO_ARG_OPTIONS:
    case PROTO_ARG_RELEASE:
        break;          /* never passed: layout_len() stops before them */
    }
    return PROTO_REQUEST;
}

enum proto_parse_result proto_parse(const char *line, size_t len, struct proto_req *req)
{
    struct token tok[MAX_TOKENS];
    const struct proto_cmd_def *def;
    unsigned ntok, nargs, npos, seen = 0;
    enum proto_arg opts;
    int cmd = -1;

    memset(req, 0, sizeof(*req));
    req->wait_ms = -1;
    req->delay_ms = -1;

    if (len > 0 && line[len - 1] == '\r')
        len--;
    ntok = tokenize(line, len, tok);
    if (ntok == 0)
        return PROTO_BLANK;

    for (int i = 0; i < PROTO_CMD_COUNT; i++)
        if (word_equals(&tok[0], cmd_defs[i].word)) {
            cmd = i;
            break;
        }
    if (cmd < 0)
        return fail(req, PROTO_ERR_BAD_COMMAND, "unknown command (HELP lists them)");
    req->cmd = (enum proto_cmd)cmd;
    def = &cmd_defs[cmd];

    /*
     * The shape first, then the arguments: "UNLOCK a/b 1 2" and "LOCK a/b 1 2"
     * are too many arguments, not bad names. The tokens after the word are
     * positional arguments, then options; an optional positional argument
     * that is left off may be followed by options, so an option in its place
     * ends them ("LOCK a shared"). An option must start with a letter:
     * anything else there is an extra argument ("LOCK a 1 2", "TRYLOCK a 5").
     */
    nargs = ntok - 1;
    opts = takes_options(def);
    if (nargs < def->required)
        return fail(req, PROTO_ERR_BAD_ARGS, "missing argument");
    for (npos = 0; npos < nargs && npos < layout_len(def); npos++)
        if (npos >= def->required && opts && find_option(&tok[1 + npos], opts) >= 0)
            break;
    if (nargs - npos > (opts ? MAX_OPTIONS : 0))
        return fail(req, PROTO_ERR_BAD_ARGS, "too many arguments");
    /* A release takes only its own options: any other word there is one
     * argument too many, as before UNLOCK took keep= ("UNLOCK a 1 shared"). */
    for (unsigned i = 1 + npos; i < ntok; i++)
        if (!is_letter(tok[i].p[0]) ||
            (opts == PROTO_ARG_RELEASE && find_option(&tok[i], opts) < 0))
            return fail(req, PROTO_ERR_BAD_ARGS, "too many arguments");

    for (unsigned i = 0; i < npos; i++)
        if (parse_arg(def->args[i], &tok[1 + i], req) != PROTO_REQUEST)
            return PROTO_ERROR;
    for (unsigned i = 1 + npos; i < ntok; i++)
        if (parse_option(&tok[i], opts, &seen, req) != PROTO_REQUEST)
            return PROTO_ERROR;
    /* A set is bound to the connection and released by name. */
    if (req->nnames > 1 && req->ttl_ms > 0)
        return fail(req, PROTO_ERR_BAD_ARGS, "a set of locks cannot be a lease (ttl=)");
    if (req->nnames > 1 && req->has_token)
        return fail(req, PROTO_ERR_BAD_ARGS, "UNLOCK of a set takes no token");
    return PROTO_REQUEST;
}

const char *proto_cmd_word(enum proto_cmd cmd)
{
    return cmd < PROTO_CMD_COUNT ? cmd_defs[cmd].word : "?";
}

const char *proto_cmd_usage(enum proto_cmd cmd)
{
    return cmd < PROTO_CMD_COUNT ? cmd_defs[cmd].usage : "?";
}

const char *proto_cmd_help(enum proto_cmd cmd)
{
    return cmd < PROTO_CMD_COUNT ? cmd_defs[cmd].help : "?";
}

const char *proto_err_code(enum proto_err err)
{
    return err < PROTO_ERR_COUNT ? err_codes[err] : "INTERNAL";
}

unsigned proto_cmd_flags(enum proto_cmd cmd)
{
    return cmd < PROTO_CMD_COUNT ? cmd_defs[cmd].flags : 0;
}

const enum proto_arg *proto_cmd_args(enum proto_cmd cmd)
{
    static const enum proto_arg none[PROTO_ARGS_MAX] = { PROTO_ARG_END };

    return cmd < PROTO_CMD_COUNT ? cmd_defs[cmd].args : none;
}

int proto_cmd_takes(enum proto_cmd cmd, enum proto_arg arg)
{
    const enum proto_arg *args = proto_cmd_args(cmd);

    for (unsigned i = 0; i < PROTO_ARGS_MAX && args[i] != PROTO_ARG_END; i++)
        if (args[i] == arg)
            return 1;
    return 0;
}

static int fitted(int n, size_t cap)
{
    return (n < 0 || (size_t)n >= cap) ? -1 : n;
}

int proto_fmt_granted(char *buf, size_t cap, const char *name, size_t len, uint64_t token)
{
    return fitted(snprintf(buf, cap, "OK %.*s %" PRIu64 "\n", (int)len, name, token), cap);
}

int proto_fmt_word_name(char *buf, size_t cap, const char *word, const char *name, size_t len)
{
    return fitted(snprintf(buf, cap, "%s %.*s\n", word, (int)len, name), cap);
}

int proto_fmt_err(char *buf, size_t cap, enum proto_err err, const char *text)
{
    return fitted(snprintf(buf, cap, "ERR %s %s\n", proto_err_code(err), text), cap);
}

int proto_fmt_checked(char *buf, size_t cap, const char *name, size_t len, uint64_t token,
                      int64_t safe_ms)
{
    return fitted(snprintf(buf, cap, "OK %.*s %" PRIu64 " %lld\n", (int)len, name, token,
                           (long long)safe_ms), cap);
}

int proto_fmt_granted_set(char *buf, size_t cap, const char *list, size_t len,
                          const uint64_t *tokens, unsigned n)
{
    int k = snprintf(buf, cap, "OK %.*s ", (int)len, list);

    for (unsigned i = 0; i < n && fitted(k, cap) >= 0; i++)
        k += snprintf(buf + k, cap - (size_t)k, "%s%" PRIu64, i ? "," : "", tokens[i]);
    if (fitted(k, cap) >= 0)
        k += snprintf(buf + k, cap - (size_t)k, "\n");
    return fitted(k, cap);
}

int proto_fmt_lost(char *buf, size_t cap, const char *name, uint64_t token, const char *reason)
{
    return fitted(snprintf(buf, cap, "LOST %s %" PRIu64 " %s\n", name, token, reason), cap);
}

int proto_fmt_ok2(char *buf, size_t cap, const char *a, const char *b)
{
    return fitted(snprintf(buf, cap, "OK %s %s\n", a, b), cap);
}

int proto_fmt_word(char *buf, size_t cap, const char *word)
{
    return fitted(snprintf(buf, cap, "%s\n", word), cap);
}

int proto_fmt_more(char *buf, size_t cap, size_t more)
{
    return fitted(snprintf(buf, cap, "MORE %zu\n", more), cap);
}

int proto_fmt_stat(char *buf, size_t cap, const char *name, const char *value)
{
    return fitted(snprintf(buf, cap, "STAT %s %s\n", name, value), cap);
}

int proto_fmt_help(char *buf, size_t cap, enum proto_cmd cmd)
{
    return fitted(snprintf(buf, cap, "HELP %s - %s\n", proto_cmd_usage(cmd),
                           proto_cmd_help(cmd)), cap);
}

/* Appends to buf[*k..cap); *k becomes -1 once it does not fit. */
static void append(char *buf, size_t cap, int *k, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void append(char *buf, size_t cap, int *k, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (*k < 0)
        return;
    va_start(ap, fmt);
    n = vsnprintf(buf + *k, cap - (size_t)*k, fmt, ap);
    va_end(ap);
    *k = n < 0 || (size_t)n >= cap - (size_t)*k ? -1 : *k + n;
}

static const char *or_dash(const char *s)
{
    return s && s[0] ? s : "-";
}

/* "exclusive", "shared", "limit=<n>" */
static void append_mode(char *buf, size_t cap, int *k, const struct proto_info *in)
{
    if (in->mode == PROTO_MODE_LIMIT)
        append(buf, cap, k, "limit=%u", in->limit);
    else
        append(buf, cap, k, "%s", in->mode == PROTO_MODE_SHARED ? "shared" : "exclusive");
}

/* "<daemon>/<holder>", or the holder alone, or "-" */
static void append_holder(char *buf, size_t cap, int *k, const struct proto_info *in)
{
    if (!in->holder)
        append(buf, cap, k, "-");
    else if (in->daemon)
        append(buf, cap, k, "%s/%s", in->daemon, in->holder);
    else
        append(buf, cap, k, "%s", in->holder);
}

static void append_token(char *buf, size_t cap, int *k, const struct proto_info *in)
{
    if (in->has_token)
        append(buf, cap, k, "%" PRIu64, in->token);
    else
        append(buf, cap, k, "-");
}

static void append_since(char *buf, size_t cap, int *k, const struct proto_info *in)
{
    if (in->since_ms >= 0)
        append(buf, cap, k, "%lld", (long long)in->since_ms);
    else
        append(buf, cap, k, "-");
}

static void append_lease(char *buf, size_t cap, int *k, const struct proto_info *in)
{
    if (in->lease_ms >= 0)
        append(buf, cap, k, " lease=%lld", (long long)in->lease_ms);
}

static void append_detached(char *buf, size_t cap, int *k, const struct proto_info *in)
{
    if (in->detached_ms > 0)
        append(buf, cap, k, " detached=%lld", (long long)in->detached_ms);
}

static void append_recipe(char *buf, size_t cap, int *k, const struct proto_info *in)
{
    if (in->recipe)
        append(buf, cap, k, " recipe=%s", in->recipe);
}

int proto_fmt_status(char *buf, size_t cap, const struct proto_info *in)
{
    int k = 0;

    append(buf, cap, &k, "STATUS %s %s holder=", in->name,
           in->state == PROTO_HELD ? "held" : "free");
    if (in->state == PROTO_HELD)
        append_holder(buf, cap, &k, in);
    else
        append(buf, cap, &k, "-");
    append(buf, cap, &k, " token=");
    if (in->state == PROTO_HELD)
        append_token(buf, cap, &k, in);
    else
        append(buf, cap, &k, "-");
    append(buf, cap, &k, " since=");
    if (in->state == PROTO_HELD)
        append_since(buf, cap, &k, in);
    else
        append(buf, cap, &k, "-");
    append(buf, cap, &k, " waiters=%u queue=%u", in->waiters, in->queue);
    /* Exclusive lines keep their v1 form; the others end in mode= and holders=. */
    if (in->mode == PROTO_MODE_SHARED)
        append(buf, cap, &k, " mode=shared holders=%u", in->holders);
    else if (in->mode == PROTO_MODE_LIMIT)
        append(buf, cap, &k, " mode=limit limit=%u holders=%u", in->limit, in->holders);
    if (in->delay_ms > 0)
        append(buf, cap, &k, " delay=%lld", (long long)in->delay_ms);
    append_lease(buf, cap, &k, in);
    append_detached(buf, cap, &k, in);
    append_recipe(buf, cap, &k, in);
    if (in->label && in->label[0])
        append(buf, cap, &k, " label=%s", in->label);
    append(buf, cap, &k, "\n");
    return k;
}

int proto_fmt_lock(char *buf, size_t cap, const struct proto_info *in)
{
    int k = 0;

    append(buf, cap, &k, "LOCK %s ", in->name);
    append_mode(buf, cap, &k, in);
    append(buf, cap, &k, " holder=");
    append_holder(buf, cap, &k, in);
    append(buf, cap, &k, " label=%s token=", or_dash(in->label));
    append_token(buf, cap, &k, in);
    append(buf, cap, &k, " since=");
    append_since(buf, cap, &k, in);
    append(buf, cap, &k, " holders=%u waiters=%u", in->holders, in->waiters);
    if (in->has_waited)
        append(buf, cap, &k, " waited=%lld", (long long)in->waited_ms);
    if (in->delay_ms > 0)
        append(buf, cap, &k, " delay=%lld", (long long)in->delay_ms);
    append_lease(buf, cap, &k, in);
    append_detached(buf, cap, &k, in);
    append_recipe(buf, cap, &k, in);
    append(buf, cap, &k, "\n");
    return k;
}

int proto_fmt_holder(char *buf, size_t cap, const struct proto_info *in)
{
    int k = 0;

    append(buf, cap, &k, "HOLDER %s ", in->name);
    append_mode(buf, cap, &k, in);
    append(buf, cap, &k, " %s holder=", in->state == PROTO_QUEUED ? "queued" : "held");
    append_holder(buf, cap, &k, in);
    append(buf, cap, &k, " label=%s token=", or_dash(in->label));
    append_token(buf, cap, &k, in);
    append(buf, cap, &k, " since=");
    append_since(buf, cap, &k, in);
    append_lease(buf, cap, &k, in);
    append(buf, cap, &k, "\n");
    return k;
}

int proto_fmt_event(char *buf, size_t cap, const struct proto_info *in)
{
    int k = 0;

    if (in->state != PROTO_HELD)
        return fitted(snprintf(buf, cap, "EVENT %s %s\n", in->name,
                               in->state == PROTO_UNAVAILABLE ? "unavailable" : "free"), cap);
    append(buf, cap, &k, "EVENT %s held ", in->name);
    append_token(buf, cap, &k, in);
    append(buf, cap, &k, " holders=%u label=%s holder=", in->holders, or_dash(in->label));
    append_holder(buf, cap, &k, in);
    append(buf, cap, &k, " mode=");
    append_mode(buf, cap, &k, in);
    append(buf, cap, &k, "\n");
    return k;
}
