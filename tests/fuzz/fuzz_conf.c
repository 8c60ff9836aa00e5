/*
 * fuzz_conf.c - libFuzzer harness for the config file loader
 * (conf/settings.c, through inih); docs/FUZZING.md says how to run it.
 *
 * The input is a config file. It is loaded both ways the daemon can:
 * settings_load_string() (up to the first NUL) and settings_load_file()
 * (every byte, through a memfd), and without a NUL the two must agree on
 * the result and the message. An error must name the input and a line of
 * it; a success must leave only values that the table accepts again, and
 * the SIGHUP path (settings_reload, settings_format_reloadable) must take
 * them.
 */
#define _GNU_SOURCE         /* memfd_create() in fuzz_check.h */
#include "settings.h"
#include "fuzz_check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SOURCE "fuzz.conf"

/* Whether field f of a row of that type holds the same value in a and b. */
static int same_value(enum setting_type type, const void *a, const void *b)
{
    const char *sa, *sb;

    switch (type) {
    case SETTING_UINT:
    case SETTING_MODE:
    case SETTING_BOOL:
        return *(const unsigned *)a == *(const unsigned *)b;
    case SETTING_LOG_LEVEL:
        return *(const enum log_level *)a == *(const enum log_level *)b;
    case SETTING_CLIENT_CERTS:
        return *(const enum tls_client_certs *)a == *(const enum tls_client_certs *)b;
    case SETTING_LISTEN:
    case SETTING_PATH:
    case SETTING_ZK_HOSTS:
    case SETTING_ZK_ROOT:
    case SETTING_GROUP:
    case SETTING_GLOBS:
        sa = *(char *const *)a;
        sb = *(char *const *)b;
        return sa == sb || (sa && sb && strcmp(sa, sb) == 0);
    }
    return 0;
}

/* Every stored value, written as the file would, is accepted again and
 * read back as the same value. */
static void check_values(const struct settings *s)
{
    const struct setting *r;
    struct settings again;
    char err[256], value[32];

    CHECK(settings_init(&again) == 0);
    for (size_t i = 0; (r = settings_row(i)); i++) {
        const void *f = (const char *)s + r->offset;
        const char *v = value;

        switch (r->type) {
        case SETTING_UINT:
            snprintf(value, sizeof(value), "%u", *(const unsigned *)f);
            break;
        case SETTING_MODE:
            snprintf(value, sizeof(value), "0%o", *(const unsigned *)f);
            break;
        case SETTING_BOOL:
            CHECK(*(const unsigned *)f <= 1);
            v = *(const unsigned *)f ? "yes" : "no";
            break;
        case SETTING_LOG_LEVEL:
            v = settings_log_level_name(*(const enum log_level *)f);
            break;
        case SETTING_CLIENT_CERTS:
            v = settings_client_certs_name(*(const enum tls_client_certs *)f);
            break;
        case SETTING_ZK_ROOT:
            v = *(char *const *)f;
            CHECK(v && *v);         /* never NULL (settings.h) */
            break;
        case SETTING_LISTEN:        /* NULL for metrics_listen when off */
        case SETTING_PATH:
        case SETTING_ZK_HOSTS:
        case SETTING_GROUP:
        case SETTING_GLOBS:         /* NULL for no nonfair names */
            v = *(char *const *)f ? *(char *const *)f : "";
            CHECK(!*(char *const *)f || **(char *const *)f);  /* none is NULL, not "" */
            break;
        }
        if (settings_set(&again, r->section, r->key, v, err, sizeof(err)) != 0) {
            fprintf(stderr, "[%s] %s = '%s' was loaded but is refused: %s\n", r->section,
                    r->key, v, err);
            CHECK(0);
        }
        if (!same_value(r->type, f, (const char *)&again + r->offset)) {
            fprintf(stderr, "[%s] %s = '%s' is read back as another value\n", r->section,
                    r->key, v);
            CHECK(0);
        }
    }
    settings_free(&again);
}

/* Every [interop] rule, written as the file would, is accepted again
 * (without its line) as the same rule; the checks across sections answer
 * 0, or an error that names the input and the rule's line. */
static void check_interop(const struct settings *s, size_t lines)
{
    struct interop again = { 0 };
    char err[1024], value[INTEROP_PATH_MAX + 32];

    for (unsigned i = 0; i < s->interop.n; i++) {
        const struct interop_rule *r = &s->interop.rules[i];

        CHECK(r->line >= 1 && (size_t)r->line <= lines);
        snprintf(value, sizeof(value), "%s %s", interop_profile_name(r->profile), r->path);
        if (interop_add(&again, r->glob, value, 0, err, sizeof(err)) != 0) {
            fprintf(stderr, "[interop] %s = %s was loaded but is refused: %s\n", r->glob,
                    value, err);
            CHECK(0);
        }
    }
    for (unsigned i = 0; i < again.n; i++)
        again.rules[i].line = s->interop.rules[i].line;
    CHECK(interop_equal(&again, &s->interop));
    interop_free(&again);
    if (settings_check(s, SOURCE, err, sizeof(err)) != 0)
        fuzz_check_error(err, SOURCE, lines);
}

static void on_restart(const char *what, void *arg)
{
    CHECK(what && *what);
    ++*(int *)arg;
}

/* SIGHUP with the loaded values over the defaults, and the log line. */
static void check_reload(struct settings *fresh, const uint8_t *data, size_t size)
{
    struct settings live;
    size_t cap = size ? data[size - 1] + 1 : 1;
    char *buf = malloc(cap);    /* exactly cap bytes, for ASan */
    int restarts = 0;

    CHECK(buf && settings_init(&live) == 0);
    settings_reload(&live, fresh, on_restart, &restarts);
    settings_format_reloadable(&live, buf, cap);
    CHECK(strlen(buf) < cap);
    settings_free(&live);
    free(buf);
}

/* Loads data through a file, as -c does; returns settings_load_file()'s result. */
static int load_file(struct settings *s, const uint8_t *data, size_t size, char *path,
                     size_t pathlen, char *err, size_t errlen)
{
    int fd = fuzz_memfd(data, size, path, pathlen), rc;

    rc = settings_load_file(s, path, err, errlen);
    close(fd);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Room for any message: both must be whole to compare them. */
    char *text = malloc(size + 1), err[1024], ferr[1024], path[64], fmsg[1024];
    struct settings s, fs;
    size_t lines = 1, text_lines = 1;
    int rc, frc;

    CHECK(text);
    memcpy(text, data, size);
    text[size] = '\0';
    for (size_t i = 0; i < size; i++)
        if (data[i] == '\n') {
            lines++;
            if (i < strlen(text))
                text_lines++;
        }

    CHECK(settings_init(&s) == 0);
    rc = settings_load_string(&s, text, SOURCE, err, sizeof(err));
    CHECK(rc == 0 || rc == -1);
    if (rc == 0) {
        check_values(&s);
        check_interop(&s, text_lines);
        check_reload(&s, data, size);
    } else {
        fuzz_check_error(err, SOURCE, text_lines);
    }

    CHECK(settings_init(&fs) == 0);
    frc = load_file(&fs, data, size, path, sizeof(path), ferr, sizeof(ferr));
    CHECK(frc == 0 || frc == -1);
    if (frc == 0) {
        check_values(&fs);
    } else {
        fuzz_check_error(ferr, path, lines);
    }

    /* Without a NUL both read the same lines: same answer, same message. */
    if (strlen(text) == size) {
        CHECK(rc == frc);
        if (rc < 0) {
            snprintf(fmsg, sizeof(fmsg), "%s%s", SOURCE, ferr + strlen(path));
            if (strcmp(err, fmsg) != 0) {
                fprintf(stderr, "string: %s\nfile:   %s\n", err, ferr);
                CHECK(0);
            }
        }
    }
    settings_free(&fs);
    settings_free(&s);
    free(text);
    return 0;
}
