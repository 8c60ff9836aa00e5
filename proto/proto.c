/*
 * proto.c - request parsing and reply formatting (see proto.h, PROTOCOL.md).
 */
#include "proto.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

struct proto_cmd_def {
    const char *word;
    unsigned min_args, max_args;
    const char *usage, *help;
};

static const struct proto_cmd_def cmd_defs[PROTO_CMD_COUNT] = {
#define X(id, word, mina, maxa, usage, help) [PROTO_CMD_##id] = { word, mina, maxa, usage, help },
    PROTO_COMMANDS(X)
#undef X
};

static const char *const err_codes[PROTO_ERR_COUNT] = {
#define X(id) [PROTO_ERR_##id] = #id,
    PROTO_ERRORS(X)
#undef X
};

/* The most tokens any command takes: the word plus two arguments. One more
 * is collected so that "too many arguments" is detected without counting on. */
#define MAX_TOKENS 4

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

static enum proto_parse_result fail(struct proto_req *req, enum proto_err err, const char *msg)
{
    req->err = err;
    req->errmsg = msg;
    return PROTO_ERROR;
}

enum proto_parse_result proto_parse(const char *line, size_t len, struct proto_req *req)
{
    struct token tok[MAX_TOKENS];
    unsigned ntok, nargs;
    int cmd = -1;

    memset(req, 0, sizeof(*req));
    req->wait_ms = -1;

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
        return fail(req, PROTO_ERR_BAD_COMMAND, "unknown command");
    req->cmd = (enum proto_cmd)cmd;

    nargs = ntok - 1;
    if (nargs < cmd_defs[cmd].min_args)
        return fail(req, PROTO_ERR_BAD_ARGS, "missing argument");
    if (nargs > cmd_defs[cmd].max_args)
        return fail(req, PROTO_ERR_BAD_ARGS, "too many arguments");

    if (cmd_defs[cmd].max_args >= 1) {
        if (!proto_name_valid(tok[1].p, tok[1].len))
            return fail(req, PROTO_ERR_BAD_NAME,
                        "names are 1-200 bytes of A-Z a-z 0-9 . _ : @ -, not . or ..");
        req->name = tok[1].p;
        req->name_len = tok[1].len;
    }
    if (nargs == 2) {
        req->wait_ms = parse_wait(&tok[2]);
        if (req->wait_ms < 0)
            return fail(req, PROTO_ERR_BAD_ARGS, "wait-ms must be an integer from 0 to 2147483647");
    }
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

int proto_fmt_lost(char *buf, size_t cap, const char *name, uint64_t token, const char *reason)
{
    return fitted(snprintf(buf, cap, "LOST %s %" PRIu64 " %s\n", name, token, reason), cap);
}
