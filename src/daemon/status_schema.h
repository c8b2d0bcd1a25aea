/* status_schema.h - the reply to `ncclprobe ctl status`, defined once:
 * every field's place, JSON type and meaning, and how `ctl status` shows
 * it as text. The daemon adds each field by its id (daemon/status.c,
 * windows.c: np_status_add_*), `ncclprobe ctl` renders the reply from the
 * table (cli/ctl.c), and `ncclprobe ctl --schema` prints it as JSON, which
 * tests/test_daemon.py holds the daemon's reply against: every field sent
 * is in the schema with its type, and every field of the schema is sent. */
#ifndef NP_DAEMON_STATUS_SCHEMA_H
#define NP_DAEMON_STATUS_SCHEMA_H

#include <cjson/cJSON.h>
#include <stdbool.h>

/* In the table's order, which is the order `ctl status` shows them in. A
 * field belongs to the object or array field before it (its parent). */
enum np_status_id {
    NP_ST_OK,
    NP_ST_PID,
    NP_ST_VERSION,
    NP_ST_UPTIME_S,
    NP_ST_CONFIG,
    NP_ST_OUTPUT_DIR,
    NP_ST_WINDOW,
    NP_ST_WINDOW_OPEN,
    NP_ST_WINDOW_ID,
    NP_ST_WINDOW_REASON,
    NP_ST_WINDOW_STARTED,
    NP_ST_WINDOW_ELAPSED_S,
    NP_ST_WINDOW_ENDS_IN_S,
    NP_ST_AGGREGATE,
    NP_ST_AGGREGATE_ON,
    NP_ST_AGGREGATE_INTERVAL_S,
    NP_ST_AGGREGATE_PERIOD_STARTED,
    NP_ST_TARGETS,
    NP_ST_TARGET_PID,
    NP_ST_TARGET_NS_PID,
    NP_ST_TARGET_COMM,
    NP_ST_TARGET_EXE,
    NP_ST_TARGET_CONTAINER,
    NP_ST_TARGET_CGROUP,
    NP_ST_TARGET_PROBES,
    NP_ST_TARGET_LIBRARIES,
    NP_ST_TARGET_LAUNCHES,
    NP_ST_TARGET_LAUNCHES_PER_S,
    NP_ST_TARGET_DROPS,
    NP_ST_TARGET_RATE_LIMITED,
    NP_ST_TARGET_GPU,
    NP_ST_TARGET_CUPTI_ORIGIN,
    NP_ST_TARGET_CUPTI_WHY,
    NP_ST_TARGET_CUPTI_LIBRARY,
    NP_ST_TARGET_OUTPUT,
    NP_ST_TARGET_EXITED,
    NP_ST_PROBES,
    NP_ST_PROBES_ATTACHED,
    NP_ST_PROBES_FAILED,
    NP_ST_RATES,
    NP_ST_RATES_LAUNCHES_PER_S,
    NP_ST_RATES_RECORDS_PER_S,
    NP_ST_RATES_BACKLOG,
    NP_ST_DROPS,
    NP_ST_DROPS_RING_BUFFER,
    NP_ST_DROPS_BACKLOG,
    NP_ST_DROPS_RATE_LIMITED,
    NP_ST_RATE_LIMIT,
    NP_ST_RATE_LIMIT_ACTIVE,
    NP_ST_RATE_LIMIT_PER_PROBE_PER_S,
    NP_ST_RATE_LIMIT_CPU_PERCENT,
    NP_ST_RATE_LIMIT_BUDGET_PERCENT,
    NP_ST_RATE_LIMIT_ACTIVATIONS,
    NP_ST_RATE_LIMIT_READER_THREADS,
    NP_ST_CUPTI,
    NP_ST_CUPTI_SOCKET,
    NP_ST_CUPTI_PEERS,
    NP_ST_DISK,
    NP_ST_DISK_BYTES,
    NP_ST_DISK_SETS,
    NP_ST_DISK_MAX_BYTES,
    NP_ST_DISK_DELETED_SETS,
    NP_ST_DISK_SETS_WRITTEN,
    NP_ST_MEMORY,
    NP_ST_MEMORY_RSS_BYTES,
    NP_ST_MEMORY_CACHE_BYTES,
    NP_ST_MEMORY_CACHE_MAX_BYTES,
    NP_ST_MEMORY_CACHE_RESETS,
    NP_ST_DISCOVERY,
    NP_ST_DISCOVERY_DELAY_MS_P50,
    NP_ST_DISCOVERY_DELAY_MS_MAX,
    NP_ST_DISCOVERY_DELAYS_MEASURED,
    NP_ST_DISCOVERY_ATTACHED,
    NP_ST_DISCOVERY_DETACHED,
    NP_ST_DISCOVERY_SKIPPED_BY_FILTER,
    NP_ST_DISCOVERY_SKIPPED_PTRACED,
    NP_ST_DISCOVERY_MISSED_EXITED,
    NP_ST_DISCOVERY_LOST_NOTIFICATIONS,
    NP_ST_DISCOVERY_MODE,
    NP_ST_COUNT,
    NP_ST_TOP = NP_ST_COUNT, /* the parent of the reply's own fields */
};

enum np_status_type {
    NP_STATUS_NUMBER,
    NP_STATUS_STRING,
    NP_STATUS_BOOL,
    NP_STATUS_OBJECT,
    NP_STATUS_ARRAY, /* of objects: its fields are each element's */
};

/* How `ctl status` shows a field. */
enum np_status_show {
    NP_SHOW_NONE,     /* not in the text */
    NP_SHOW_NUMBER,   /* text: printf format of the value / scale */
    NP_SHOW_COUNT,    /* text: printf format of the value and "s" unless it is 1 */
    NP_SHOW_STRING,   /* text: a prefix to the string */
    NP_SHOW_DURATION, /* text: a prefix to "1h 02m 03s" */
    NP_SHOW_BOOL,     /* text: the word for true, no: for false */
    NP_SHOW_LIST,     /* an array: "N" on its line, then a table of its columns */
};

enum {
    NP_SF_NULL = 1 << 0,      /* may be null (show: null_text) */
    NP_SF_OPEN = 1 << 1,      /* only while a window is open */
    NP_SF_JOINED = 1 << 2,    /* shown joined to the part before it: "open #7" */
    NP_SF_SANITIZED = 1 << 3, /* a process's name or path: bytes that are not UTF-8 are escaped */
};

struct np_status_field {
    enum np_status_id parent; /* NP_ST_TOP, or an object or array field */
    const char *key;
    enum np_status_type type;
    unsigned flags;
    const char *help;
    /* `ctl status`: the line it is on ("daemon:"), and how it is shown there */
    const char *line;
    enum np_status_show show;
    const char *text;
    const char *no;
    double scale;           /* the number shown is value / scale (0: 1) */
    const char *null_text;  /* shown for null */
    enum np_status_id with; /* nonzero: shown with this field, when both are there ... */
    const char *text_with;  /* ... with this format of the two; the other is then skipped */
    /* a column of its array's table */
    const char *column;
    int width;     /* printf's field width, negative: left-aligned; 0: the last column */
    int precision; /* a number's decimals, a string's most characters */
};

extern const struct np_status_field np_status_fields[NP_ST_COUNT];

/* The reply's field: adds it to obj (the reply, or its parent's object),
 * with the table's key; the type must be the table's. */
cJSON *np_status_add_object(cJSON *obj, enum np_status_id id); /* an object or array */
void np_status_add_number(cJSON *obj, enum np_status_id id, double v);
void np_status_add_bool(cJSON *obj, enum np_status_id id, bool v);
/* v NULL: null (a NP_SF_NULL field). */
void np_status_add_string(cJSON *obj, enum np_status_id id, const char *v);

/* "targets[].pid": where the field is in the reply. */
void np_status_path(enum np_status_id id, char *out, size_t size);
/* The schema as JSON: {"fields":[{"path","type","nullable","window_open_only","help"}...]}. */
cJSON *np_status_schema_json(void);

#endif
