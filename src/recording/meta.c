/* meta.c - what summary.json (a recording's) and window.json (a daemon
 * output set's) say about the recording as a whole (recording.h): its time,
 * its processes, and whether its per-launch files are whole. Both files are
 * optional, and a file that is not valid JSON is taken as absent: the
 * writers fall back on what the lines say. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ncclprobe/recording.h"
#include "recording/jsonl.h"
#include "recording/recording.h"

/* DIR/NAME parsed, or NULL (absent, unreadable, not JSON, out of memory). */
static cJSON *read_json(const struct np_recording *rec, const char *name) {
    char *path = np_rec_path(rec->dir, name), *text = NULL;
    size_t len = 0;
    cJSON *root = NULL;
    if (path && np_read_file(path, &text, &len) == 0)
        root = np_json_parse_exact(text, len);
    free(text);
    free(path);
    return root;
}

static uint64_t u64_or_0(const cJSON *obj, const char *key) {
    uint64_t v;
    return np_json_u64(obj, key, &v) == 0 ? v : 0;
}

static int read_process(struct np_recording *rec, const cJSON *obj, struct np_rec_process *p) {
    const char *comm;
    p->pid = u64_or_0(obj, NP_KEY_PID);
    p->comm = NULL;
    if (np_json_str(obj, NP_KEY_COMM, &comm) != 0)
        return 0;
    p->comm = np_recording_intern(rec, comm);
    return p->comm ? 0 : -ENOMEM;
}

static int read_targets(struct np_recording *rec, const cJSON *targets, struct np_rec_meta *m) {
    if (!cJSON_IsArray(targets))
        return 0;
    m->targets = calloc((size_t)cJSON_GetArraySize(targets) + 1, sizeof(*m->targets));
    if (!m->targets)
        return -ENOMEM;
    int err = 0;
    for (const cJSON *t = targets->child; t && !err; t = t->next) {
        if (cJSON_IsObject(t))
            err = read_process(rec, t, &m->targets[m->ntargets++]);
    }
    return err;
}

static int read_files(struct np_recording *rec, const cJSON *files, struct np_rec_meta *m) {
    const char *reason = "";
    if (!cJSON_IsObject(files) ||
        np_json_bool(files, NP_KEY_PER_LAUNCH_COMPLETE, &m->per_launch_complete) != 0)
        return 0;
    m->files_known = true;
    m->records_written = u64_or_0(files, NP_KEY_RECORDS_WRITTEN);
    m->records_cut = u64_or_0(files, NP_KEY_RECORDS_CUT);
    np_json_str(files, NP_KEY_CUT_REASON, &reason);
    m->cut_reason = np_recording_intern(rec, reason);
    return m->cut_reason ? 0 : -ENOMEM;
}

static int read_summary(struct np_recording *rec, const cJSON *root, struct np_rec_meta *m) {
    double seconds;
    m->summary = true;
    if (!m->window) {
        m->start_unix_ns = u64_or_0(root, NP_KEY_START_TIME_UNIX_NS);
        if (np_json_double(root, NP_KEY_DURATION_S, &seconds) == 0 && seconds > 0)
            m->duration_ns = (uint64_t)(seconds * 1e9);
    }
    int err = read_targets(rec, cJSON_GetObjectItemCaseSensitive(root, NP_KEY_TARGETS), m);
    return err ? err : read_files(rec, cJSON_GetObjectItemCaseSensitive(root, NP_KEY_FILES), m);
}

static int read_window(struct np_recording *rec, const cJSON *root, struct np_rec_meta *m) {
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(root, NP_KEY_WINDOW);
    uint64_t start = u64_or_0(w, NP_KEY_START_UNIX_NS), end = u64_or_0(w, NP_KEY_END_UNIX_NS);
    m->window = true;
    m->start_unix_ns = start;
    m->duration_ns = end > start ? end - start : 0;
    return read_process(rec, cJSON_GetObjectItemCaseSensitive(root, NP_KEY_PROCESS), &m->process);
}

int np_recording_meta(struct np_recording *rec, struct np_rec_meta *out) {
    memset(out, 0, sizeof(*out));
    cJSON *window = read_json(rec, NP_REC_WINDOW_JSON);
    cJSON *summary = read_json(rec, NP_REC_SUMMARY_JSON);
    int err = window ? read_window(rec, window, out) : 0;
    if (!err && summary)
        err = read_summary(rec, summary, out);
    cJSON_Delete(window);
    cJSON_Delete(summary);
    return err;
}

void np_rec_meta_free(struct np_rec_meta *m) {
    free(m->targets);
    memset(m, 0, sizeof(*m));
}
