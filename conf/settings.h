/*
 * settings.h - every tunable of lockbrokerd in one struct, described by one
 * table row per setting (struct setting, the table is in settings.c).
 *
 * Defaults come from settings_init(); a config file (INI, read with inih)
 * overrides them; command-line flags override the file. Everything is
 * validated here, once, before the daemon starts. Defaults, parsing,
 * settings_free() and SIGHUP all walk the same rows: a new setting is a
 * field here and a row there.
 */
#ifndef LOCKBROKER_SETTINGS_H
#define LOCKBROKER_SETTINGS_H

#include <stddef.h>

enum log_level { LOG_LVL_ERROR, LOG_LVL_WARN, LOG_LVL_INFO, LOG_LVL_DEBUG };

/* [tls] client_certs: whether a TLS client must show a certificate signed by ca_file. */
enum tls_client_certs { TLS_CERTS_NONE, TLS_CERTS_OPTIONAL, TLS_CERTS_REQUIRED };

#define SETTINGS_LISTEN_DEFAULT "127.0.0.1:7411"

struct settings {
    /* [server] */
    char *listen;               /* "IP:PORT" or "[IPv6]:PORT"; malloc'd, never NULL */
    char *unix_socket;          /* path, or NULL for none; malloc'd */
    unsigned unix_socket_mode;  /* permission bits applied to the socket file */
    char *unix_socket_group;    /* group name or number given the socket file, or NULL */
    char *users_file;           /* path of the users file, or NULL: no AUTH; malloc'd */
    unsigned allow_anonymous;   /* 1: serve a non-loopback listen address without users */
    unsigned max_clients;       /* connections served at once; more are refused */
    unsigned max_line;          /* longest request line in bytes, LF excluded */
    unsigned max_locks_per_client; /* locks held plus awaited by one connection */
    unsigned max_leases;        /* leases held or awaited through this daemon, all clients */
    unsigned max_leases_per_user; /* of those, per account (a user, or a client address) */
    unsigned max_kept_holds;    /* holds with a lock-delay or kept by UNLOCK keep=, all clients */
    unsigned max_kept_holds_per_user; /* of those, per account */
    unsigned max_grace_ms;      /* the longest GRACE a client may ask, ms */
    unsigned max_sessions;      /* sessions open through this daemon, all clients */
    unsigned max_sessions_per_user; /* of those, per account */
    unsigned max_watches_per_user; /* WATCH subscriptions per account (WATCHES_MAX in all) */
    unsigned lock_delay_ms;     /* lock-delay of a LOCK/TRYLOCK without delay= */
    unsigned auth_threads;      /* threads that hash AUTH passwords, off the event loop */
    unsigned auth_max_pending;  /* AUTHs queued or being hashed at once, all clients */
    unsigned auth_max_pending_per_address; /* the same, from one source address */
    unsigned auth_fail_limit;   /* failed AUTHs of an address within auth_backoff_ms that
                                 * start its back-off; 0: no back-off */
    unsigned auth_backoff_ms;   /* the window failures are counted in, and the back-off */
    unsigned login_timeout_ms;  /* with users: a connection's time to log in; 0: none */
    unsigned max_clients_per_address; /* TCP connections of one address; 0: no cap */
    unsigned tcp_keepalive_idle_s;     /* silence before an accepted TCP peer is probed */
    unsigned tcp_keepalive_interval_s; /* between unanswered probes */
    unsigned tcp_keepalive_count;      /* unanswered probes that end the connection */
    unsigned tcp_user_timeout_ms;      /* unacknowledged data that ends it; 0: kernel's */
    char *tls_listen;           /* "IP:PORT" of the TLS listener, or NULL for none; malloc'd */
    char *tls_cert_file;        /* PEM certificate chain of the TLS listener, or NULL; malloc'd */
    char *tls_key_file;         /* PEM private key of tls_cert_file, or NULL; malloc'd */
    char *tls_ca_file;          /* PEM CA certificates for client certificates, or NULL */
    char *tls_crl_file;         /* PEM CRLs of ca_file's CAs, or NULL for none; malloc'd */
    enum tls_client_certs tls_client_certs;
    unsigned tls_max_handshakes_per_address; /* handshakes of one address at once; 0: no cap */
    char *metrics_listen;       /* "IP:PORT" of the HTTP /metrics endpoint, or NULL for none;
                                 * malloc'd */
    /* [zookeeper] */
    char *zk_hosts;             /* "host:port,..." or NULL for embedded mode; malloc'd */
    char *zk_root;              /* znode prefix, "/lockbroker"; malloc'd, never NULL */
    char *zk_auth;              /* file with user:password (digest scheme), or NULL; malloc'd */
    unsigned zk_session_timeout_ms; /* requested; the server may negotiate another */
    unsigned zk_tick_ms;        /* the ensemble's tickTime (or more): CHECK's window */
    unsigned zk_lease_skew_ms;  /* how far apart daemons' clocks may be, for lease ends */
    unsigned zk_local_handoff;  /* consecutive grants passed among this daemon's clients */
    unsigned zk_keep_idle_ms;   /* how long a released lock's node waits for a local LOCK */
    char *zk_nonfair;           /* "glob[,glob...]": non-fair names, or NULL for none;
                                 * malloc'd; validated as globs, matched with
                                 * settings_globs_match() */
    /* [log] */
    enum log_level log_level;
    unsigned log_rate_limit;    /* lines of one kind written per second at info and above;
                                 * 0: no limit (daemon/log.h) */
    unsigned log_holds;         /* 1: one info line per ended hold (daemon/locks.h) */
};

/* What a value looks like in the file; it also fixes the C type of the field. */
enum setting_type {
    SETTING_UINT,       /* unsigned: decimal digits, from min to max */
    SETTING_MODE,       /* unsigned: octal permission bits, from min to max */
    SETTING_LOG_LEVEL,  /* enum log_level: error, warn, info or debug, any case */
    SETTING_LISTEN,     /* char *: what settings_listen_addr() accepts; empty means none
                         * (NULL) when the row's default is empty */
    SETTING_PATH,       /* char *: at most max bytes; empty means none (NULL) */
    SETTING_ZK_HOSTS,   /* char *: "host:port[,host:port...]"; empty means none (NULL) */
    SETTING_ZK_ROOT,    /* char *: absolute znode path, no trailing slash */
    SETTING_BOOL,       /* unsigned 0 or 1: yes/no, true/false, on/off, 1/0, any case */
    SETTING_GROUP,      /* char *: a group name or number, at most max bytes; empty: none */
    SETTING_GLOBS,      /* char *: 1..64 comma-separated LOCKS-style patterns of 1..200
                         * name characters and * ? [ ] !; empty means none (NULL) */
    SETTING_CLIENT_CERTS, /* enum tls_client_certs: none, optional or required, any case */
};


/* One setting. Rows live in static storage and never change. */
struct setting {
    const char *section;    /* INI section, without brackets */
    const char *key;        /* unique within its section */
    enum setting_type type;
    size_t offset;          /* of its field in struct settings */
    const char *def;        /* default, written as in the file ("" for none) */
    unsigned min, max;      /* bounds of UINT and MODE; the longest PATH */
    const char *restart;    /* NULL: SIGHUP applies it; else how the reload warning
                             * names it (rows that share the name warn once) */
    const char *help;       /* one line, for people */
};

/* The rows in table order: row i, or NULL once i is past the last. */
const struct setting *settings_row(size_t i);

/* Fills in every row's default. Returns 0, or -1 when out of memory. */
int settings_init(struct settings *s);

/* Frees the strings owned by s (not s itself). */
void settings_free(struct settings *s);

/*
 * Applies an INI file / string over *s. On error returns -1 and writes
 * "FILE:LINE: what" into err (errlen bytes); `source` names the input in that
 * message. Unknown sections or keys, bad values and lines without '=' are
 * errors; of a key given twice, the later line wins. A path that is not a
 * regular file (a directory, a FIFO) is an error "PATH: is a directory",
 * and so is one that cannot be opened or read. On error *s may hold some of
 * the file's values: the caller frees it.
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

/* The longest [zookeeper] auth: "user:password" in bytes. */
#define SETTINGS_ZK_AUTH_MAX 255

/*
 * Reads the [zookeeper] auth file at path: one line, "user:password" (a
 * final LF or CRLF is dropped), into buf (len bytes: SETTINGS_ZK_AUTH_MAX + 2
 * fits the longest with its LF). A file that others may read or write, one
 * too long, of more than one line, or without a user, ':' and a password is
 * refused. Returns 0, or -1 with "PATH: why" in err (never the secret).
 */
int settings_read_zk_auth(const char *path, char *buf, size_t len, char *err, size_t errlen);

const char *settings_log_level_name(enum log_level l);
const char *settings_client_certs_name(enum tls_client_certs c);   /* "optional"; static */

/* Whether name matches one of the patterns of globs (a SETTING_GLOBS
 * value: "a*,b?"), or false when globs is NULL. */
int settings_globs_match(const char *globs, const char *name);

/*
 * SIGHUP: moves into *live the value of every row that SIGHUP applies and
 * that differs in *fresh (fresh gets live's old one, so the caller still
 * settings_free()s fresh and nothing is allocated). For the other rows that
 * differ, live keeps its value and needs_restart(what, arg) is called once
 * per distinct row->restart. Both structs are the caller's.
 */
void settings_reload(struct settings *live, struct settings *fresh,
                     void (*needs_restart)(const char *what, void *arg), void *arg);

/*
 * Writes the rows SIGHUP applies, with their values in s, into buf (len
 * bytes, always NUL-terminated, cut if short): "log level info,
 * max_clients 4096, ...". [server] keys go bare, others after their section.
 */
void settings_format_reloadable(const struct settings *s, char *buf, size_t len);

struct sockaddr_storage;
/* Parses "IP:PORT" / "[IPv6]:PORT" (numeric, port 0 allowed) into *ss and
 * *len. Returns 0, or -1 when it is not such an address. */
int settings_listen_addr(const char *listen, struct sockaddr_storage *ss, int *len);

#endif
