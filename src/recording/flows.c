/* flows.c - the --nccl-flows files of a recording, line by line (see flows.h). */
#define _GNU_SOURCE
#include "recording/flows.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"
#include "ncclprobe/recording.h"

static bool has_prefix(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static int each_line(const char *path, const char *comm, bool steps, np_rec_flow_fn fn, void *ctx) {
    FILE *f = fopen(path, "re");
    if (!f)
        return -errno;
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    int err = 0;
    while (!err && getline(&line, &cap, f) > 0) {
        lineno++;
        cJSON *o = cJSON_Parse(line);
        if (!cJSON_IsObject(o))
            np_warn("%s:%zu: not a JSON object, skipped", path, lineno);
        else
            err = fn(ctx, comm, steps, o);
        cJSON_Delete(o);
    }
    free(line);
    fclose(f);
    return err;
}

static int each_comm(const char *path, const char *comm, np_rec_flow_fn fn, void *ctx) {
    DIR *d = opendir(path);
    if (!d)
        return -errno;
    int err = 0;
    for (struct dirent *e; !err && (e = readdir(d)) != NULL;) {
        bool ops = has_prefix(e->d_name, NP_REC_PROXY_FLOW_PREFIX);
        bool steps = has_prefix(e->d_name, NP_REC_FLOW_STEPS_PREFIX);
        if (!ops && !steps)
            continue;
        char file[4096 + 512];
        snprintf(file, sizeof(file), "%s/%s", path, e->d_name);
        err = each_line(file, comm, steps, fn, ctx);
    }
    closedir(d);
    return err;
}

int np_rec_flows_each(const char *dir, np_rec_flow_fn fn, void *ctx) {
    char root[4096];
    snprintf(root, sizeof(root), "%s/" NP_REC_FLOWS_DIR, dir);
    DIR *d = opendir(root);
    if (!d)
        return -errno;
    int err = 0;
    for (struct dirent *e; !err && (e = readdir(d)) != NULL;) {
        if (!has_prefix(e->d_name, NP_REC_FLOWS_COMM_PREFIX))
            continue;
        char path[4096 + 256];
        snprintf(path, sizeof(path), "%s/%s", root, e->d_name);
        err = each_comm(path, e->d_name + strlen(NP_REC_FLOWS_COMM_PREFIX), fn, ctx);
    }
    closedir(d);
    return err;
}
