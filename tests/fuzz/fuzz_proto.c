/*
 * fuzz_proto.c - libFuzzer harness for the request parser and the reply
 * formatters (proto/proto.c); docs/FUZZING.md says how to run it.
 *
 * The input is one request line as the daemon hands it to proto_parse():
 * any bytes, NUL included, without the LF. Beyond "no crash, no undefined
 * behaviour", every result is checked against what proto.h promises, and
 * the same line with a CR, or with spaces around it, must parse the same.
 * Every reply the daemon builds from a parsed request must fit in
 * PROTO_REPLY_MAX (PROTO_SET_REPLY_MAX for a set's) and be exactly one line.
 */
#define _GNU_SOURCE         /* memfd_create() in fuzz_check.h */
#include "proto.h"
#include "fuzz_check.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int within(const char *p, size_t n, const char *line, size_t len)
{
    return p >= line && n <= len && p + n <= line + len;
}

static int is_blank(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (s[i] != ' ' && s[i] != '\t')
            return 0;
    return 1;
}

/* A reply: exactly `len` bytes, NUL-terminated, one LF, at the end. */
#define check_reply(buf, len) check_reply_max(buf, len, PROTO_REPLY_MAX)
static void check_reply_max(const char *buf, int len, int max)
{
    CHECK(len > 0 && len < max);
    CHECK(buf[len] == '\0' && buf[len - 1] == '\n');
    CHECK(memchr(buf, '\n', (size_t)len) == buf + len - 1);
}

static void check_error(const struct proto_req *req)
{
    char buf[PROTO_REPLY_MAX];

    CHECK(req->err == PROTO_ERR_BAD_COMMAND || req->err == PROTO_ERR_BAD_ARGS ||
          req->err == PROTO_ERR_BAD_NAME);
    CHECK(req->errmsg && req->errmsg[0] && !strchr(req->errmsg, '\n'));
    check_reply(buf, proto_fmt_err(buf, sizeof(buf), req->err, req->errmsg));
}

/* The replies the daemon builds with the request's name. */
static void check_name_replies(const struct proto_req *req)
{
    char buf[PROTO_REPLY_MAX], name[PROTO_NAME_MAX + 1], want[PROTO_REPLY_MAX];
    int n;

    memcpy(name, req->name, req->name_len);
    name[req->name_len] = '\0';

    n = proto_fmt_granted(buf, sizeof(buf), req->name, req->name_len, UINT64_MAX);
    check_reply(buf, n);
    snprintf(want, sizeof(want), "OK %s %" PRIu64 "\n", name, UINT64_MAX);
    CHECK(strcmp(buf, want) == 0);

    n = proto_fmt_word_name(buf, sizeof(buf), "TIMEOUT", req->name, req->name_len);
    check_reply(buf, n);
    snprintf(want, sizeof(want), "TIMEOUT %s\n", name);
    CHECK(strcmp(buf, want) == 0);

    n = proto_fmt_lost(buf, sizeof(buf), name, UINT64_MAX, "session expired");
    check_reply(buf, n);
}

/* A set (LOCK, TRYLOCK, UNLOCK a,b,c): 2..PROTO_SET_MAX distinct valid names
 * that, joined by commas, are the list as given; no lease, no token; its
 * replies fit PROTO_SET_REPLY_MAX. */
static void check_set(const struct proto_req *req, const char *line, size_t len)
{
    static char buf[PROTO_SET_REPLY_MAX];
    uint64_t tokens[PROTO_SET_MAX];
    const char *p = req->name;

    CHECK(req->nnames >= 2 && req->nnames <= PROTO_SET_MAX);
    CHECK(req->ttl_ms == 0 && !req->has_token);
    for (unsigned i = 0; i < req->nnames; i++) {
        const struct proto_name *n = &req->names[i];

        CHECK(within(n->p, n->len, line, len) && proto_name_valid(n->p, n->len));
        CHECK(n->p == p && (i + 1 == req->nnames ? n->p + n->len == req->name + req->name_len
                                                  : n->p[n->len] == ','));
        p = n->p + n->len + 1;
        for (unsigned j = 0; j < i; j++)
            CHECK(n->len != req->names[j].len || memcmp(n->p, req->names[j].p, n->len) != 0);
        tokens[i] = UINT64_MAX;
    }
    check_reply_max(buf, proto_fmt_granted_set(buf, sizeof(buf), req->name, req->name_len,
                                               tokens, req->nnames), PROTO_SET_REPLY_MAX);
    check_reply_max(buf, proto_fmt_word_name(buf, sizeof(buf), "TIMEOUT", req->name,
                                             req->name_len), PROTO_SET_REPLY_MAX);
}

static void check_request(const struct proto_req *req, const char *line, size_t len)
{
    enum proto_cmd cmd = req->cmd;
    /* What the command may carry, from its row of the command table. */
    int takes_name = proto_cmd_takes(cmd, PROTO_ARG_NAME) || proto_cmd_takes(cmd, PROTO_ARG_NAMES);
    int takes_options = proto_cmd_takes(cmd, PROTO_ARG_OPTIONS);
    char buf[PROTO_REPLY_MAX];

    CHECK((unsigned)cmd < PROTO_CMD_COUNT);
    CHECK(req->nnames <= PROTO_SET_MAX);
    CHECK(req->nnames == 0 || proto_cmd_takes(cmd, PROTO_ARG_NAMES));
    if (takes_name && req->nnames > 1) {
        CHECK(req->name && within(req->name, req->name_len, line, len));
        check_set(req, line, len);
    } else if (takes_name) {
        CHECK(req->nnames == 0 || (req->nnames == 1 && req->names[0].p == req->name &&
                                   req->names[0].len == req->name_len));
        CHECK(req->name && within(req->name, req->name_len, line, len));
        CHECK(proto_name_valid(req->name, req->name_len));
        check_name_replies(req);
    } else if (proto_cmd_takes(cmd, PROTO_ARG_GLOB) && req->name) {
        CHECK(within(req->name, req->name_len, line, len));
        CHECK(req->name_len >= 1 && req->name_len <= PROTO_NAME_MAX);
        for (size_t i = 0; i < req->name_len; i++)
            CHECK(proto_name_valid(&req->name[i], 1) || strchr("*?[]!.", req->name[i]));
    } else {
        CHECK(!req->name && req->name_len == 0);
    }

    if (proto_cmd_takes(cmd, PROTO_ARG_LABEL)) {
        CHECK(req->label && within(req->label, req->label_len, line, len));
        CHECK(req->label_len >= 1 && req->label_len <= PROTO_LABEL_MAX);
        for (size_t i = 0; i < req->label_len; i++)
            CHECK(req->label[i] >= 0x21 && req->label[i] <= 0x7e);
    } else {
        CHECK(!req->label && req->label_len == 0);
    }

    if (proto_cmd_takes(cmd, PROTO_ARG_USER)) {
        CHECK(req->user && within(req->user, req->user_len, line, len));
        CHECK(proto_user_valid(req->user, req->user_len));
        CHECK(req->password && within(req->password, req->password_len, line, len));
        CHECK(req->password_len >= 1 && req->password_len <= PROTO_PASSWORD_MAX);
        for (size_t i = 0; i < req->password_len; i++)
            CHECK(req->password[i] >= 0x21 && req->password[i] <= 0x7e);
        /* "OK <user>" */
        check_reply(buf, proto_fmt_word_name(buf, sizeof(buf), "OK", req->user,
                                             req->user_len));
    } else {
        CHECK(!req->user && req->user_len == 0 && !req->password && req->password_len == 0);
    }

    CHECK(req->wait_ms == -1 || (proto_cmd_takes(cmd, PROTO_ARG_WAIT) && req->wait_ms >= 0 &&
                                 req->wait_ms <= PROTO_WAIT_MAX));
    CHECK(req->ttl_ms == 0 || ((takes_options || proto_cmd_takes(cmd, PROTO_ARG_TTL)) &&
                               req->ttl_ms >= PROTO_TTL_MIN && req->ttl_ms <= PROTO_TTL_MAX));
    if (cmd == PROTO_CMD_RENEW)
        CHECK(req->has_token && req->ttl_ms != 0);
    CHECK(!req->has_token || proto_cmd_takes(cmd, PROTO_ARG_TOKEN));
    CHECK(req->delay_ms == -1 || (takes_options && req->delay_ms >= 0 &&
                                  req->delay_ms <= PROTO_DELAY_MAX));
    CHECK(req->has_token || req->token == 0);
    CHECK(req->keep_ms == 0 || (proto_cmd_takes(cmd, PROTO_ARG_RELEASE) && req->keep_ms > 0 &&
                                req->keep_ms <= PROTO_KEEP_MAX));

    switch (req->mode) {
    case PROTO_MODE_EXCLUSIVE:
    case PROTO_MODE_SHARED:
        CHECK(req->limit == 0);
        break;
    case PROTO_MODE_LIMIT:
        CHECK(req->limit >= 1 && req->limit <= PROTO_LIMIT_MAX);
        break;
    default:
        CHECK(0);
    }
    CHECK(req->mode == PROTO_MODE_EXCLUSIVE || takes_options);
}

/* a and b (parsed from different lines) say the same thing. */
static void check_same(enum proto_parse_result ra, const struct proto_req *a,
                       enum proto_parse_result rb, const struct proto_req *b)
{
    CHECK(ra == rb);
    if (ra == PROTO_BLANK)
        return;
    if (ra == PROTO_ERROR) {
        CHECK(a->err == b->err && a->errmsg == b->errmsg);
        return;
    }
    CHECK(a->cmd == b->cmd && a->name_len == b->name_len && a->label_len == b->label_len);
    CHECK(a->name_len == 0 || memcmp(a->name, b->name, a->name_len) == 0);
    CHECK(a->label_len == 0 || memcmp(a->label, b->label, a->label_len) == 0);
    CHECK(a->user_len == b->user_len && a->password_len == b->password_len);
    CHECK(a->user_len == 0 || memcmp(a->user, b->user, a->user_len) == 0);
    CHECK(a->password_len == 0 || memcmp(a->password, b->password, a->password_len) == 0);
    CHECK(a->wait_ms == b->wait_ms && a->mode == b->mode && a->limit == b->limit);
    CHECK(a->ttl_ms == b->ttl_ms && a->has_token == b->has_token && a->token == b->token);
    CHECK(a->delay_ms == b->delay_ms && a->nnames == b->nnames);
    CHECK(a->grace_ms == b->grace_ms && !a->session == !b->session && !a->secret == !b->secret);
    CHECK(!a->session || memcmp(a->session, b->session, PROTO_SESSION_LEN) == 0);
    CHECK(!a->secret || memcmp(a->secret, b->secret, PROTO_SECRET_LEN) == 0);
    for (unsigned i = 0; i < a->nnames; i++)
        CHECK(a->names[i].len == b->names[i].len &&
              memcmp(a->names[i].p, b->names[i].p, a->names[i].len) == 0);
}

/* The request written out plainly ("LOCK a 5 shared ttl=100") parses to the
 * same request: nothing the parser accepted was misread. */
static void check_round_trip(const struct proto_req *req)
{
    char line[PROTO_SET_REPLY_MAX + 1024];   /* a set's list and the rest */
    struct proto_req again;
    size_t n;

    n = (size_t)snprintf(line, sizeof(line), "%s", proto_cmd_word(req->cmd));
    if (req->name)
        n += (size_t)snprintf(line + n, sizeof(line) - n, " %.*s", (int)req->name_len, req->name);
    if (req->label)
        n += (size_t)snprintf(line + n, sizeof(line) - n, " %.*s", (int)req->label_len,
                              req->label);
    if (req->user)
        n += (size_t)snprintf(line + n, sizeof(line) - n, " %.*s %.*s", (int)req->user_len,
                              req->user, (int)req->password_len, req->password);
    if (req->wait_ms >= 0)
        n += (size_t)snprintf(line + n, sizeof(line) - n, " %lld", (long long)req->wait_ms);
    if (req->has_token)
        n += (size_t)snprintf(line + n, sizeof(line) - n, " %" PRIu64, req->token);
    if (req->cmd == PROTO_CMD_RENEW)
        n += (size_t)snprintf(line + n, sizeof(line) - n, " %lld", (long long)req->ttl_ms);
    if (req->mode == PROTO_MODE_SHARED)
        n += (size_t)snprintf(line + n, sizeof(line) - n, " shared");
    if (req->mode == PROTO_MODE_LIMIT)
        n += (size_t)snprintf(line + n, sizeof(line) - n, " limit=%u", req->limit);
    if (req->ttl_ms && req->cmd != PROTO_CMD_RENEW)
        n += (size_t)snprintf(line + n, sizeof(line) - n, " ttl=%lld", (long long)req->ttl_ms);
    if (req->delay_ms >= 0)
        n += (size_t)snprintf(line + n, sizeof(line) - n, " delay=%lld", (long long)req->delay_ms);
    /* GRACE's ms as given, or a word that is not digits (-1: the handler's error). */
    if (req->cmd == PROTO_CMD_GRACE && req->grace_ms >= 0)
        n += (size_t)snprintf(line + n, sizeof(line) - n, " %lld", (long long)req->grace_ms);
    else if (req->cmd == PROTO_CMD_GRACE)
        n += (size_t)snprintf(line + n, sizeof(line) - n, " x");
    if (req->session)
        n += (size_t)snprintf(line + n, sizeof(line) - n, " %.*s %.*s", PROTO_SESSION_LEN,
                              req->session, PROTO_SECRET_LEN, req->secret);
    CHECK(n < sizeof(line));
    check_same(PROTO_REQUEST, req, proto_parse(line, n, &again), &again);
}

/* Formatting arbitrary bytes into a buffer of any size: -1 or an exact fit,
 * never a byte past cap (the buffer is exactly cap bytes, for ASan). */
static void check_fmt_bounds(const char *data, size_t len)
{
    size_t cap = len ? (unsigned char)data[0] : 0;
    char *buf = malloc(cap ? cap : 1);
    int n;

    CHECK(buf);
    if (cap) {
        n = proto_fmt_word_name(buf, cap, "BUSY", data, len);
        CHECK(n == -1 || ((size_t)n < cap && buf[n] == '\0'));
        n = proto_fmt_granted(buf, cap, data, len, 42);
        CHECK(n == -1 || ((size_t)n < cap && buf[n] == '\0'));
        n = proto_fmt_granted_set(buf, cap, data, len, (const uint64_t[]){ 1, 42 }, 2);
        CHECK(n == -1 || ((size_t)n < cap && buf[n] == '\0'));
    }
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Exactly `size` bytes on the heap: ASan sees any read past the line. */
    char *line = malloc(size ? size : 1), *variant = malloc(size + 3);
    struct proto_req req, other;
    enum proto_parse_result r, r2;
    size_t len = size;

    CHECK(line && variant);
    memcpy(line, data, size);

    r = proto_parse(line, len, &req);
    switch (r) {
    case PROTO_REQUEST:
        check_request(&req, line, len);
        break;
    case PROTO_ERROR:
        check_error(&req);
        break;
    case PROTO_BLANK:
        CHECK(is_blank(line, len && line[len - 1] == '\r' ? len - 1 : len));
        break;
    default:
        CHECK(0);
    }

    /* The CR of a CRLF line is ignored. */
    if (len == 0 || line[len - 1] != '\r') {
        memcpy(variant, line, len);
        variant[len] = '\r';
        r2 = proto_parse(variant, len + 1, &other);
        check_same(r, &req, r2, &other);

        /* Leading and trailing spaces and tabs are ignored. */
        variant[0] = ' ';
        memcpy(variant + 1, line, len);
        variant[len + 1] = '\t';
        variant[len + 2] = '\r';
        r2 = proto_parse(variant, len + 3, &other);
        check_same(r, &req, r2, &other);
    }

    if (r == PROTO_REQUEST)
        check_round_trip(&req);

    /* Command words are matched case-insensitively. */
    memcpy(variant, line, len);
    for (size_t i = 0; i < len && variant[i] != ' ' && variant[i] != '\t'; i++)
        if ((variant[i] >= 'a' && variant[i] <= 'z') || (variant[i] >= 'A' && variant[i] <= 'Z'))
            variant[i] ^= 0x20;
    r2 = proto_parse(variant, len, &other);
    check_same(r, &req, r2, &other);

    check_fmt_bounds(line, len);
    free(variant);
    free(line);
    return 0;
}
