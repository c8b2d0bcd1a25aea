/* flows.c - `ncclprobe report --flows` (see flows.h): reads the flow files
 * through recording/flows.c and totals them per communicator. */
#define _GNU_SOURCE
#include "report/flows.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/json.h"
#include "lib/util.h"
#include "recording/flows.h"

struct peer_tot {
    int peer;
    uint64_t send_steps, send_bytes, recv_steps, recv_bytes;
};
struct channel_tot {
    int channel;
    uint64_t ops, steps, bytes;
};
struct pattern_tot {
    char pattern[24], protocol[8];
    uint64_t steps;
};

struct comm_tot {
    char comm[24];
    int rank, nranks;
    uint64_t ops, steps, bytes;
    struct peer_tot *peers;
    size_t npeers;
    struct channel_tot *channels;
    size_t nchannels;
    struct pattern_tot *patterns;
    size_t npatterns;
};

struct totals {
    struct comm_tot *comms;
    size_t ncomms;
    int err;
};

/* Finds or appends (zeroed) the element whose first member equals key. */
static void *find_or_add(void **arr, size_t *n, size_t size, const void *key, size_t keylen) {
    char *a = *arr;
    for (size_t i = 0; i < *n; i++)
        if (memcmp(a + i * size, key, keylen) == 0)
            return a + i * size;
    char *grown = realloc(a, (*n + 1) * size);
    if (!grown)
        return NULL;
    *arr = grown;
    memset(grown + *n * size, 0, size);
    memcpy(grown + *n * size, key, keylen);
    return grown + (*n)++ * size;
}

/* A number member, or -1 when it is missing, not a number or outside int64_t
 * (converting such a double is undefined). */
static int64_t num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= -0x1p63 && v->valuedouble < 0x1p63))
        return -1;
    return (int64_t)v->valuedouble;
}

static const char *text(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "?";
}

static int add_step(struct comm_tot *c, const cJSON *o) {
    int peer = (int)num(o, "peer"), channel = (int)num(o, "channel");
    uint64_t bytes = (uint64_t)(num(o, "bytes") > 0 ? num(o, "bytes") : 0);
    bool send = strcmp(text(o, "op"), "SEND") == 0;
    struct peer_tot *p =
        find_or_add((void **)&c->peers, &c->npeers, sizeof(*p), &peer, sizeof(peer));
    struct channel_tot *ch =
        find_or_add((void **)&c->channels, &c->nchannels, sizeof(*ch), &channel, sizeof(channel));
    struct pattern_tot key = {0};
    snprintf(key.pattern, sizeof(key.pattern), "%s", text(o, "pattern"));
    snprintf(key.protocol, sizeof(key.protocol), "%s", text(o, "protocol"));
    struct pattern_tot *pt = find_or_add((void **)&c->patterns, &c->npatterns, sizeof(*pt), &key,
                                         offsetof(struct pattern_tot, steps));
    if (!p || !ch || !pt)
        return -ENOMEM;
    (send ? &p->send_steps : &p->recv_steps)[0]++;
    (send ? &p->send_bytes : &p->recv_bytes)[0] += bytes;
    ch->steps++;
    ch->bytes += bytes;
    pt->steps++;
    c->steps++;
    c->bytes += bytes;
    return 0;
}

static int on_line(void *ctx, const char *comm, bool steps, const cJSON *o) {
    struct totals *t = ctx;
    char key[24] = {0};
    snprintf(key, sizeof(key), "%s", comm);
    int rank = (int)num(o, "rank");
    struct comm_tot *c = NULL;
    for (size_t i = 0; i < t->ncomms && !c; i++)
        if (strcmp(t->comms[i].comm, key) == 0 && t->comms[i].rank == rank)
            c = &t->comms[i];
    if (!c && !(c = find_or_add((void **)&t->comms, &t->ncomms, sizeof(*c), key, sizeof(key))))
        return -ENOMEM;
    c->rank = rank;
    c->nranks = (int)num(o, "nranks");
    if (steps)
        return add_step(c, o);
    int channel = (int)num(o, "channel");
    struct channel_tot *ch =
        find_or_add((void **)&c->channels, &c->nchannels, sizeof(*ch), &channel, sizeof(channel));
    if (!ch)
        return -ENOMEM;
    ch->ops++;
    c->ops++;
    return 0;
}

static int by_peer(const void *a, const void *b) {
    return ((const struct peer_tot *)a)->peer - ((const struct peer_tot *)b)->peer;
}
static int by_channel(const void *a, const void *b) {
    return ((const struct channel_tot *)a)->channel - ((const struct channel_tot *)b)->channel;
}
static int by_pattern(const void *a, const void *b) {
    const struct pattern_tot *x = a, *y = b;
    int d = strcmp(x->pattern, y->pattern);
    return d ? d : strcmp(x->protocol, y->protocol);
}

static void print_text(FILE *f, const struct comm_tot *c) {
    fprintf(f, "comm 0x%s rank %d of %d: %llu ops, %llu steps, %llu bytes\n", c->comm, c->rank,
            c->nranks, (unsigned long long)c->ops, (unsigned long long)c->steps,
            (unsigned long long)c->bytes);
    fprintf(f, "  %-6s %10s %14s %10s %14s\n", "peer", "send_steps", "send_bytes", "recv_steps",
            "recv_bytes");
    for (size_t i = 0; i < c->npeers; i++) {
        const struct peer_tot *p = &c->peers[i];
        fprintf(f, "  %-6d %10llu %14llu %10llu %14llu\n", p->peer,
                (unsigned long long)p->send_steps, (unsigned long long)p->send_bytes,
                (unsigned long long)p->recv_steps, (unsigned long long)p->recv_bytes);
    }
    fprintf(f, "  %-7s %8s %10s %14s\n", "channel", "ops", "steps", "bytes");
    for (size_t i = 0; i < c->nchannels; i++) {
        const struct channel_tot *ch = &c->channels[i];
        fprintf(f, "  %-7d %8llu %10llu %14llu\n", ch->channel, (unsigned long long)ch->ops,
                (unsigned long long)ch->steps, (unsigned long long)ch->bytes);
    }
    fprintf(f, "  %-16s %-8s %10s\n", "pattern", "protocol", "steps");
    for (size_t i = 0; i < c->npatterns; i++)
        fprintf(f, "  %-16s %-8s %10llu\n", c->patterns[i].pattern, c->patterns[i].protocol,
                (unsigned long long)c->patterns[i].steps);
}

static cJSON *comm_json(const struct comm_tot *c) {
    cJSON *o = cJSON_CreateObject(), *a;
    char hash[32];
    snprintf(hash, sizeof(hash), "0x%s", c->comm);
    np_json_add_text(o, "comm", hash);
    cJSON_AddNumberToObject(o, "rank", c->rank);
    cJSON_AddNumberToObject(o, "nranks", c->nranks);
    np_json_add_u64(o, "ops", c->ops);
    np_json_add_u64(o, "steps", c->steps);
    np_json_add_u64(o, "bytes", c->bytes);
    a = cJSON_AddArrayToObject(o, "peers");
    for (size_t i = 0; i < c->npeers; i++) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "peer", c->peers[i].peer);
        np_json_add_u64(p, "send_steps", c->peers[i].send_steps);
        np_json_add_u64(p, "send_bytes", c->peers[i].send_bytes);
        np_json_add_u64(p, "recv_steps", c->peers[i].recv_steps);
        np_json_add_u64(p, "recv_bytes", c->peers[i].recv_bytes);
        cJSON_AddItemToArray(a, p);
    }
    a = cJSON_AddArrayToObject(o, "channels");
    for (size_t i = 0; i < c->nchannels; i++) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "channel", c->channels[i].channel);
        np_json_add_u64(p, "ops", c->channels[i].ops);
        np_json_add_u64(p, "steps", c->channels[i].steps);
        np_json_add_u64(p, "bytes", c->channels[i].bytes);
        cJSON_AddItemToArray(a, p);
    }
    a = cJSON_AddArrayToObject(o, "patterns");
    for (size_t i = 0; i < c->npatterns; i++) {
        cJSON *p = cJSON_CreateObject();
        np_json_add_text(p, "pattern", c->patterns[i].pattern);
        np_json_add_text(p, "protocol", c->patterns[i].protocol);
        np_json_add_u64(p, "steps", c->patterns[i].steps);
        cJSON_AddItemToArray(a, p);
    }
    return o;
}

static int print(const struct np_report_options *opt, struct totals *t) {
    FILE *f = opt->output ? fopen(opt->output, "we") : stdout;
    if (!f) {
        int err = -errno;
        np_err("cannot write %s: %s", opt->output, strerror(-err));
        return err;
    }
    cJSON *root = opt->json ? cJSON_CreateObject() : NULL;
    cJSON *arr = root ? cJSON_AddArrayToObject(root, "communicators") : NULL;
    for (size_t i = 0; i < t->ncomms; i++) {
        struct comm_tot *c = &t->comms[i];
        qsort(c->peers, c->npeers, sizeof(*c->peers), by_peer);
        qsort(c->channels, c->nchannels, sizeof(*c->channels), by_channel);
        qsort(c->patterns, c->npatterns, sizeof(*c->patterns), by_pattern);
        if (arr)
            cJSON_AddItemToArray(arr, comm_json(c));
        else
            print_text(f, c);
    }
    if (root) {
        char *s = cJSON_PrintUnformatted(root);
        if (s)
            fprintf(f, "%s\n", s);
        free(s);
        cJSON_Delete(root);
    }
    int err = ferror(f) ? -EIO : 0;
    if (f != stdout && fclose(f) != 0 && !err)
        err = -errno;
    return err;
}

int np_report_flows(const struct np_report_options *opt) {
    struct totals t = {0};
    int err = np_rec_flows_each(opt->dir, on_line, &t);
    if (err == -ENOENT)
        np_err("%s has no flows/ (record with --nccl-flows)", opt->dir);
    else if (err)
        np_err("cannot read the flows of %s: %s", opt->dir, strerror(err < 0 ? -err : EIO));
    if (!err)
        err = print(opt, &t);
    for (size_t i = 0; i < t.ncomms; i++) {
        free(t.comms[i].peers);
        free(t.comms[i].channels);
        free(t.comms[i].patterns);
    }
    free(t.comms);
    return err;
}
