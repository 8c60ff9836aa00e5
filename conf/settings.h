/*
 * settings.h - every tunable of lockbrokerd in one struct.
 *
 * Defaults come from settings_init(); a config file (INI, read with inih)
 * overrides them; command-line flags override the file. Everything is
 * validated here, once, before the daemon starts.
 */
#ifndef LOCKBROKER_SETTINGS_H
#define LOCKBROKER_SETTINGS_H

#include <stddef.h>

enum log_level { LOG_LVL_ERROR, LOG_LVL_WARN, LOG_LVL_INFO, LOG_LVL_DEBUG };

#define SETTINGS_LISTEN_DEFAULT "127.0.0.1:7411"

struct settings {
    /* [server] */
    char *listen;               /* "IP:PORT" or "[IPv6]:PORT"; malloc'd, never NULL */
    char *unix_socket;          /* path, or NULL for none; malloc'd */
    unsigned unix_socket_mode;  /* permission bits applied to the socket file */
    unsigned max_clients;       /* connections served at once; more are refused */
    unsigned max_line;          /* longest request line in bytes, LF excluded */
    unsigned max_locks_per_client; /* locks held plus awaited by one connection */
    /* [zookeeper] */
    char *zk_hosts;             /* "host:port,..." or NULL for embedded mode; malloc'd */
    char *zk_root;              /* znode prefix, "/lockbroker"; malloc'd, never NULL */
    unsigned zk_session_timeout_ms; /* requested; the server may negotiate another */
    /* [log] */
    enum log_level log_level;
};

/* Fills in the defaults. Returns 0, or -1 when out of memory. */
int settings_init(struct settings *s);

/* Frees the strings owned by s (not s itself). */
void settings_free(struct settings *s);

/*
 * Applies an INI file / string over *s. On error returns -1 and writes
 * "FILE:LINE: what" into err (errlen bytes); `source` names the input in that
 * message. Unknown sections or keys and bad values are errors.
 */
int settings_load_file(struct settings *s, const char *path, char *err, size_t errlen);
int settings_load_string(struct settings *s, const char *text, const char *source,
                         char *err, size_t errlen);

/*
 * Sets one value, as the file would ("server", "listen", "127.0.0.1:1").
 * Used by the loader and by command-line flags. Returns 0, or -1 with a
 * message (no file or line) in err.
 */
int settings_set(struct settings *s, const char *section, const char *key,
                 const char *value, char *err, size_t errlen);

const char *settings_log_level_name(enum log_level l);

struct sockaddr_storage;
/* Parses "IP:PORT" / "[IPv6]:PORT" (numeric, port 0 allowed) into *ss and
 * *len. Returns 0, or -1 when it is not such an address. */
int settings_listen_addr(const char *listen, struct sockaddr_storage *ss, int *len);

#endif
