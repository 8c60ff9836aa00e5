/*
 * lb_json.c - JSON output of the command-line client (see lb_json.h).
 */
#include "config.h"
#include "lb_json.h"

#include <string.h>

/* Digits beyond which a number might not survive a double (2^53 has 16). */
#define JSON_DIGITS_MAX 15

void json_write_string(FILE *f, const char *s, size_t len)
{
    putc('"', f);
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];

        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20 || ch > 0x7e)
            fprintf(f, "\\u%04x", ch);
        else
            putc(ch, f);
    }
    putc('"', f);
}

void json_write_value(FILE *f, const char *v, size_t len)
{
    size_t digits = 0;

    while (digits < len && v[digits] >= '0' && v[digits] <= '9')
        digits++;
    if (len == 1 && v[0] == '-')
        fputs("null", f);
    else if (len > 0 && digits == len && len <= JSON_DIGITS_MAX && (v[0] != '0' || len == 1))
        fwrite(v, 1, len, f);
    else
        json_write_string(f, v, len);
}

/* The value of key in the fields (" k=v k=v"), or NULL; *len its length. */
static const char *field(const char *fields, const char *key, size_t *len)
{
    size_t klen = strlen(key);

    for (const char *p = fields; (p = strchr(p, ' ')); ) {
        p++;
        if (strncmp(p, key, klen) == 0 && p[klen] == '=') {
            *len = strcspn(p + klen + 1, " ");
            return p + klen + 1;
        }
    }
    return NULL;
}

bool json_write_status(FILE *f, const char *name, const char *line)
{
    size_t nlen = strlen(name), len;
    const char *rest;
    bool held;

    if (strncmp(line, "STATUS ", 7) != 0 || strncmp(line + 7, name, nlen) != 0 ||
        line[7 + nlen] != ' ')
        return false;
    rest = line + 7 + nlen + 1;
    if (strncmp(rest, "held", 4) == 0 && (rest[4] == ' ' || !rest[4]))
        held = true;
    else if (strncmp(rest, "free", 4) == 0 && (rest[4] == ' ' || !rest[4]))
        held = false;
    else
        return false;
    rest += 4;                       /* " key=value ..." */
    fputs("{\"name\":", f);
    json_write_string(f, name, nlen);
    /* Both names, as the client libraries give them: "held" (a boolean), and
     * "state" ("held" or "free", as in the line and HOLDERS' "state"). */
    fprintf(f, ",\"held\":%s,\"state\":\"%s\"", held ? "true" : "false",
            held ? "held" : "free");
    for (const char *p = rest; *p == ' '; ) {
        const char *key = p + 1, *eq;
        size_t flen = strcspn(key, " ");

        p = key + flen;
        if (!(eq = memchr(key, '=', flen)))
            continue;                /* not key=value: a later version's word */
        putc(',', f);
        json_write_string(f, key, (size_t)(eq - key));
        putc(':', f);
        /* A token is a string whatever its size: the same type in both modes. */
        if ((size_t)(eq - key) == 5 && strncmp(key, "token", 5) == 0 && eq[1] != '-')
            json_write_string(f, eq + 1, flen - 6);
        else
            json_write_value(f, eq + 1, flen - (size_t)(eq - key) - 1);
    }
    if (!field(rest, "mode", &len))
        fputs(",\"mode\":\"exclusive\"", f);
    if (!field(rest, "holders", &len))
        fprintf(f, ",\"holders\":%d", held ? 1 : 0);
    if (!field(rest, "limit", &len))
        fputs(",\"limit\":null", f);
    if (!field(rest, "label", &len))
        fputs(",\"label\":null", f);
    fputs("}\n", f);
    return true;
}

/* The k=v words of rest as ,"k":v pairs (a token as a string). */
static void write_fields(FILE *f, const char *rest)
{
    for (const char *p = rest; *p == ' '; ) {
        const char *key = p + 1, *eq;
        size_t flen = strcspn(key, " ");

        p = key + flen;
        if (!(eq = memchr(key, '=', flen)))
            continue;
        putc(',', f);
        json_write_string(f, key, (size_t)(eq - key));
        putc(':', f);
        if ((size_t)(eq - key) == 5 && strncmp(key, "token", 5) == 0 && eq[1] != '-')
            json_write_string(f, eq + 1, flen - 6);
        else
            json_write_value(f, eq + 1, flen - (size_t)(eq - key) - 1);
    }
}

void json_write_lock(FILE *f, const char *line)
{
    /* LOCK <name> <mode> k=v ..., or HOLDER <name> <mode> <state> k=v ... */
    size_t skip = strncmp(line, "LOCK ", 5) == 0 ? 5 : strncmp(line, "HOLDER ", 7) == 0 ? 7 : 0;
    const char *name, *mode, *rest;
    size_t nlen, mlen;

    if (strncmp(line, "MORE ", 5) == 0) {
        fputs("{\"more\":", f);
        json_write_value(f, line + 5, strlen(line + 5));
        fputs("}\n", f);
        return;
    }
    if (!skip || !strchr(line + skip, ' ')) {
        fputs("{\"line\":", f);
        json_write_string(f, line, strlen(line));
        fputs("}\n", f);
        return;
    }
    name = line + skip;
    nlen = strcspn(name, " ");
    mode = name + nlen + 1;
    mlen = strcspn(mode, " ");
    rest = mode + mlen;
    fputs("{\"name\":", f);
    json_write_string(f, name, nlen);
    fputs(",\"mode\":", f);
    json_write_string(f, mode, mlen);
    if (skip == 7 && *rest == ' ') {
        size_t slen = strcspn(rest + 1, " ");

        fputs(",\"state\":", f);
        json_write_string(f, rest + 1, slen);
        rest += 1 + slen;
    }
    write_fields(f, rest);
    fputs("}\n", f);
}
