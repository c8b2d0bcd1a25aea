/* output.c - per-launch writers of a recording directory (see output.h).
 *
 * A full disk must not cost the small files a user wants most: the
 * aggregates (launches.folded, merged*.folded) are written at the end, and
 * summary.json after them. So room for them is held from the start in a
 * reserve file (NP_REC_RESERVE), grown ahead of the aggregates' size as new
 * stacks appear and deleted just before they are written. The per-launch
 * streams go through np_recfile: when one is cut at a record boundary, all
 * are, together, and the totals say how many records were not written. */
#define _GNU_SOURCE
#include "writers/output.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attach/nccl_names.h"
#include "correlate/graphs.h"
#include "ingest/ingest.h"
#include "lib/json.h"
#include "lib/recfile.h"
#include "lib/util.h"
#include "ncclprobe/recording.h"

#define RESERVE_BASE (128u << 10) /* summary.json and the files' overhead */

/* A string literal appended without strlen: the per-launch lines are built
 * without printf (formatting them was a quarter of the reader's time). */
#define APPEND_LIT(s, lit) np_str_append_n((s), "" lit, sizeof(lit) - 1)

enum stream { EXT_FOLDED, LAUNCHES_JSONL, NCCL_JSONL, STACKS_JSONL, GPU_UNMATCHED, NSTREAMS };

static const char *const stream_names[NSTREAMS] = {
    NP_REC_STACKS_EXT_FOLDED, NP_REC_LAUNCHES_JSONL,      NP_REC_NCCL_JSONL,
    NP_REC_STACKS_JSONL,      NP_REC_GPU_UNMATCHED_JSONL,
};

struct np_output {
    char *dir;
    /* NULL when not written: aggregate-only sets, gpu_unmatched until its first record */
    struct np_recfile *streams[NSTREAMS];
    bool aggregate_only; /* NP_OUTPUT_AGGREGATE */
    bool gpu_unmatched_failed;
    int reserve_fd;              /* NP_REC_RESERVE, -1 when none could be made */
    uint64_t reserved;           /* its size */
    uint64_t agg_bytes;          /* what the aggregate files will take, as far as known */
    int cut_error;               /* what cut the streams (all of them), 0 if whole */
    bool finished;               /* np_output_finish ran: the streams are closed */
    struct np_map folded_counts; /* "stack_id;kernel" -> (uintptr_t) count */
    struct np_map kernel_counts; /* kernel name -> (uintptr_t) count */
    struct np_map merged_counts; /* "stack_id;leaf" -> (uintptr_t) count (merged.folded) */
    struct np_map merged_ns;     /* "stack_id;leaf" -> (uintptr_t) GPU ns (merged.gpu_ns) */
    struct np_map stack_ids;     /* stack -> (uintptr_t) id */
    struct np_map ids_by_serial; /* a cached stack's serial -> (uintptr_t) id: found
                                  * without comparing its text (np_stack_texts_serial) */
    struct np_map replays;       /* "nodes id:stack id" -> struct replay_batch * */
    struct np_map composed_ids;  /* hash of (replay stack id, capture stack) -> the id of
                                  * replay;API;[graph capture];capture: composed once */
    char **stacks;               /* stacks[id - 1]: the folded stack of an id */
    size_t *stack_lens;          /* ... and its length */
    uint64_t next_stack_id;
    struct np_output_totals totals;
    struct np_str line, prefix; /* reused line buffers */
    int first_error;
};

static int mkdir_p(const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, 0755) < 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(path, 0755) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

static FILE *open_in(const char *dir, const char *name, int *err) {
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "we");
    if (!f && !*err)
        *err = -errno;
    return f;
}

static struct np_recfile *open_stream(const char *dir, enum stream which, int *err) {
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, stream_names[which]);
    struct np_recfile *f = NULL;
    int rc = np_recfile_open(path, &f);
    if (rc && !*err)
        *err = rc;
    return f;
}

/* ---- the reserve ----------------------------------------------------------- */

/* Holds `size` bytes of the file system for the aggregates. */
static int reserve_grow(struct np_output *o, uint64_t size) {
    if (o->reserve_fd < 0 || size <= o->reserved)
        return 0;
    int rc = posix_fallocate(o->reserve_fd, 0, (off_t)size);
    if (rc == EOPNOTSUPP || rc == EINVAL) { /* a file system without fallocate */
        static const char zeros[4096];
        rc = 0;
        for (uint64_t at = o->reserved; !rc && at < size; at += sizeof(zeros))
            if (pwrite(o->reserve_fd, zeros, sizeof(zeros), (off_t)at) != sizeof(zeros))
                rc = errno ? errno : ENOSPC;
    }
    if (rc)
        return -rc;
    o->reserved = size;
    return 0;
}

static void reserve_open(struct np_output *o) {
    char path[4200];
    snprintf(path, sizeof(path), "%s/" NP_REC_RESERVE, o->dir);
    o->reserve_fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (o->reserve_fd >= 0 && reserve_grow(o, RESERVE_BASE) < 0)
        np_debug("%s: cannot reserve room for the aggregates", path);
}

static void reserve_release(struct np_output *o) {
    if (o->reserve_fd < 0)
        return;
    close(o->reserve_fd);
    o->reserve_fd = -1;
    char path[4200];
    snprintf(path, sizeof(path), "%s/" NP_REC_RESERVE, o->dir);
    unlink(path);
}

/* ---- the streams ----------------------------------------------------------- */

/* Once one stream is cut, every stream is: the files of a recording end
 * together, and stacks.jsonl never misses a stack the others refer to. */
static void cut_all(struct np_output *o, int err) {
    if (!o->cut_error) {
        o->cut_error = err;
        np_warn("%s: %s: the per-launch files end here, at a record boundary; the aggregates "
                "and summary.json are still written",
                o->dir, strerror(-err));
    }
    for (int i = 0; i < NSTREAMS; i++)
        if (o->streams[i])
            np_recfile_cut(o->streams[i], err);
}

static void check_cut(struct np_output *o, struct np_recfile *f) {
    if (!o->cut_error && np_recfile_is_cut(f))
        cut_all(o, np_recfile_error(f));
}

/* The aggregates grew by `bytes`: the reserve stays ahead of them, twice
 * their size; when it cannot grow, the disk is full and the streams end. */
static void aggregates_grew(struct np_output *o, uint64_t bytes) {
    o->agg_bytes += bytes;
    uint64_t want = RESERVE_BASE + o->agg_bytes;
    if (o->reserve_fd < 0 || want <= o->reserved)
        return;
    int err = reserve_grow(o, RESERVE_BASE + 2 * o->agg_bytes);
    if (err && o->aggregate_only)
        np_debug("%s: cannot grow the reserve: %s", o->dir, strerror(-err));
    else if (err)
        cut_all(o, err);
}

int np_output_open(const char *dir, struct np_output **out) {
    return np_output_open_flags(dir, 0, out);
}

int np_output_open_flags(const char *dir, unsigned flags, struct np_output **out) {
    int err = mkdir_p(dir);
    if (err)
        return err;
    struct np_output *o = calloc(1, sizeof(*o));
    if (!o)
        return -ENOMEM;
    o->reserve_fd = -1;
    o->dir = strdup(dir);
    np_map_init(&o->folded_counts);
    np_map_init(&o->kernel_counts);
    np_map_init(&o->merged_counts);
    np_map_init(&o->merged_ns);
    np_map_init(&o->stack_ids);
    np_map_init(&o->ids_by_serial);
    np_map_init(&o->replays);
    np_map_init(&o->composed_ids);
    np_str_init(&o->line);
    np_str_init(&o->prefix);
    o->next_stack_id = 1;
    o->aggregate_only = flags & NP_OUTPUT_AGGREGATE;
    if (!o->aggregate_only)
        for (int i = 0; i < NSTREAMS; i++)
            if (i != GPU_UNMATCHED)
                o->streams[i] = open_stream(dir, (enum stream)i, &err);
    if (!err && !o->dir)
        err = -ENOMEM;
    if (!err && !o->aggregate_only)
        reserve_open(o);
    if (err) {
        np_output_close(o);
        return err;
    }
    *out = o;
    return 0;
}

void np_output_safe_comm(char *out, size_t size, const char *comm) {
    np_sanitize_frame(out, size, comm, true);
    if (!out[0])
        snprintf(out, size, "?");
}

static void note_error(struct np_output *o, int err) {
    o->totals.write_errors++;
    if (!o->first_error)
        o->first_error = err;
}

static void write_line(struct np_output *o, enum stream which, const struct np_str *line) {
    struct np_recfile *f = o->streams[which];
    if (!f) /* a stream this output does not write (aggregate only) */
        return;
    if (line->failed) {
        note_error(o, -ENOMEM);
        return;
    }
    np_recfile_append(f, line->buf, line->len);
    if (which == STACKS_JSONL) /* on disk before any line that refers to it */
        np_recfile_flush(f);
    check_cut(o, f);
}

/* The length of the stack text of an aggregate key "ID;LEAF". */
static size_t key_stack_len(const struct np_output *o, const char *key) {
    uint64_t id = strtoull(key, NULL, 10);
    return id >= 1 && id < o->next_stack_id ? o->stack_lens[id - 1] : 20;
}

static void add_to(struct np_output *o, struct np_map *m, const char *key, uint64_t n) {
    void **slot = np_map_slot_str_hashed(m, key, np_hash_str(key));
    if (!slot) {
        note_error(o, -ENOMEM);
        return;
    }
    uintptr_t v = (uintptr_t)*slot;
    *slot = (void *)(v + (uintptr_t)n);
    if (!v && n) /* a new line of an aggregate file: stack;leaf count */
        aggregates_grew(o, key_stack_len(o, key) + strlen(key) + 24);
}

static void bump(struct np_output *o, struct np_map *m, const char *key) {
    add_to(o, m, key, 1);
}

/* The id of a (detailed) stack in stacks.jsonl; written there the first
 * time, with its locations, and its folded form kept for launches.folded. */
static uint64_t stack_id_of_text(struct np_output *o, const struct np_stack_texts *texts);

/* Bounded: a memo, started over when full. */
#define IDS_BY_SERIAL_MAX 65536

static uint64_t stack_id(struct np_output *o, const struct np_stack_texts *texts) {
    uint64_t serial = np_stack_texts_serial(texts);
    uintptr_t id = serial ? (uintptr_t)np_map_get_u64(&o->ids_by_serial, serial) : 0;
    if (id)
        return id;
    id = stack_id_of_text(o, texts);
    if (id && serial) {
        if (o->ids_by_serial.count >= IDS_BY_SERIAL_MAX) {
            np_map_free(&o->ids_by_serial, NULL);
            np_map_init(&o->ids_by_serial);
        }
        np_map_put_u64(&o->ids_by_serial, serial, (void *)id); /* a memo: may fail */
    }
    return id;
}

static uint64_t stack_id_of_text(struct np_output *o, const struct np_stack_texts *texts) {
    const char *stack = np_str_cstr(&texts->detailed), *folded = np_str_cstr(&texts->folded);
    uint64_t hash = np_stack_texts_hash(texts); /* ingest hashed it once for all its launches */
    uintptr_t id = (uintptr_t)np_map_get_str_hashed(&o->stack_ids, stack, hash);
    if (id)
        return id;
    char **stacks = realloc(o->stacks, o->next_stack_id * sizeof(*stacks));
    if (stacks)
        o->stacks = stacks;
    size_t *lens = realloc(o->stack_lens, o->next_stack_id * sizeof(*lens));
    if (lens)
        o->stack_lens = lens;
    char *copy = strdup(folded);
    if (!stacks || !lens || !copy ||
        np_map_put_str_hashed(&o->stack_ids, stack, hash, (void *)o->next_stack_id) < 0) {
        free(copy);
        note_error(o, -ENOMEM);
        return 0;
    }
    id = o->next_stack_id++;
    o->stacks[id - 1] = copy;
    o->stack_lens[id - 1] = texts->folded.len;
    struct np_str line;
    np_str_init(&line);
    np_str_appendf(&line, "{\"" NP_KEY_STACK_ID "\":%" PRIuPTR ",\"" NP_KEY_FRAMES "\":[", id);
    const char *p = stack;
    char frame[4096];
    for (int first = 1; *p; first = 0) {
        size_t n = strcspn(p, ";");
        if (n >= sizeof(frame))
            n = sizeof(frame) - 1;
        memcpy(frame, p, n);
        frame[n] = '\0';
        if (!first)
            np_str_append(&line, ",");
        np_json_string(&line, frame);
        p += strcspn(p, ";");
        if (*p == ';')
            p++;
    }
    np_str_append(&line, "],\"" NP_KEY_LOCATIONS "\":[");
    np_str_append(&line, np_str_cstr(&texts->locations));
    np_str_append(&line, "]}\n");
    write_line(o, STACKS_JSONL, &line);
    np_str_free(&line);
    return id;
}

/* thread_key: what the thread's name is called ("comm" in launches.jsonl;
 * "thread" in nccl.jsonl, where "comm" is the communicator). */
static void json_common(struct np_str *s, const struct np_launch *l, const char *thread_key) {
    const struct np_launch_event *e = l->ev;
    APPEND_LIT(s, "{\"" NP_KEY_TS_NS "\":");
    np_str_append_u64(s, e->hdr.ts_ns);
    APPEND_LIT(s, ",\"" NP_KEY_PID "\":");
    np_str_append_u64(s, e->hdr.pid);
    APPEND_LIT(s, ",\"" NP_KEY_TID "\":");
    np_str_append_u64(s, e->hdr.tid);
    APPEND_LIT(s, ",\"" NP_KEY_LAUNCH_ID "\":");
    np_str_append_u64(s, e->launch_id);
    APPEND_LIT(s, ",\"");
    np_str_append(s, thread_key);
    APPEND_LIT(s, "\":");
    char comm[NP_COMM_LEN + 1];
    memcpy(comm, e->comm, NP_COMM_LEN);
    comm[NP_COMM_LEN] = '\0';
    np_json_string(s, comm);
    APPEND_LIT(s, ",\"cpu\":");
    np_str_append_u64(s, e->cpu);
}

/* ,"comm_hash":"0x..","rank":R,"nranks":N,"cuda_dev":D - null when unknown */
static void comm_id_json(struct np_str *s, const struct np_nccl_comm_id *id) {
    if (!id->known) {
        np_str_append(s, ",\"" NP_KEY_COMM_HASH
                         "\":null,\"rank\":null,\"nranks\":null,\"cuda_dev\":null");
        return;
    }
    np_str_appendf(
        s, ",\"" NP_KEY_COMM_HASH "\":\"0x%" PRIx64 "\",\"rank\":%d,\"nranks\":%d,\"cuda_dev\":%d",
        id->hash, id->rank, id->nranks, id->cuda_dev);
}

/* An enum value as its library names it; "" for none (-1). */
static const char *nccl_name(const struct np_nccl_names *names, enum np_nccl_enum e,
                             int64_t value) {
    return value >= 0 ? np_nccl_name(names, e, value) : "";
}

static void nccl_op_json(struct np_str *s, const struct np_nccl_names *names,
                         const struct np_nccl_op *op) {
    np_str_append(s, "{\"" NP_KEY_NCCL_OP "\":");
    np_json_string(s, np_nccl_name(names, NP_NCCL_FUNC, op->func));
    np_str_appendf(s, ",\"count\":%" PRIu64 ",\"datatype\":", op->count);
    np_json_string(s, nccl_name(names, NP_NCCL_DATATYPE, op->datatype));
    np_str_appendf(s, ",\"bytes\":%" PRIu64 ",\"redop\":", op->bytes);
    np_json_string(s, nccl_name(names, NP_NCCL_REDOP, op->redop));
    np_str_appendf(s, ",\"root\":%d,\"peer\":%d,\"algorithm\":", op->root, op->peer);
    np_json_string(s, np_nccl_algorithm_name(op->algorithm));
    np_str_append(s, ",\"protocol\":");
    np_json_string(s, np_nccl_protocol_name(op->protocol));
    np_str_appendf(s, ",\"nchannels\":%d}", op->nchannels);
}

/* ,"nccl":{...}: an NCCL kernel launch's communicator and plan. */
static void nccl_launch_json(struct np_str *s, const struct np_launch *l) {
    const struct np_nccl_plan *p = l->nccl_plan;
    np_str_appendf(s, ",\"" NP_KEY_NCCL "\":{\"" NP_KEY_COMM "\":\"0x%" PRIx64 "\"", l->comm);
    comm_id_json(s, p ? &p->id : &(struct np_nccl_comm_id){0});
    if (p) {
        if (p->has_kernel_fn)
            np_str_appendf(s, ",\"kernel_fn\":\"0x%" PRIx64 "\"", p->kernel_fn);
        np_str_appendf(s, ",\"symmetric\":%s,\"copy_engine\":%s,\"" NP_KEY_NCCL_OPS "\":[",
                       p->symmetric ? "true" : "false", p->copy_engine ? "true" : "false");
        for (uint32_t i = 0; i < p->nops; i++) {
            np_str_append(s, i ? "," : "");
            nccl_op_json(s, p->names, &p->ops[i]);
        }
        np_str_appendf(s, "],\"ops_total\":%u,\"ops_truncated\":%s", p->total_ops,
                       p->total_ops > p->nops || (p->flags & NP_NF_TASK_ERR) ? "true" : "false");
    }
    if (l->nccl_missing) {
        np_str_append(s, ",\"missing\":");
        np_json_string(s, l->nccl_missing);
    }
    np_str_append(s, "}");
}

/* [x,y,z] */
static void append_dim3(struct np_str *s, const uint32_t dims[3]) {
    APPEND_LIT(s, "[");
    for (int i = 0; i < 3; i++) {
        if (i)
            APPEND_LIT(s, ",");
        np_str_append_u64(s, dims[i]);
    }
    APPEND_LIT(s, "]");
}

/* The launch's launches.jsonl object, without its closing brace; kernel
 * NULL: NP_GPU_KERNEL_SLOT where its name goes (a held launch: named when
 * its GPU records are in). */
static void render_launch_json(struct np_str *s, const struct np_launch *l, const char *kernel,
                               uint64_t sid) {
    np_str_reset(s);
    json_common(s, l, "comm");
    APPEND_LIT(s, ",\"" NP_KEY_API "\":");
    np_json_string(s, l->def->api);
    APPEND_LIT(s, ",\"probe_id\":");
    np_str_append_u64(s, l->ev->called_as);
    APPEND_LIT(s, ",\"" NP_KEY_KERNEL "\":");
    if (kernel)
        np_json_string(s, kernel);
    else
        np_str_append_n(s, &(char){NP_GPU_KERNEL_SLOT}, 1);
    APPEND_LIT(s, ",\"func\":\"0x");
    np_str_append_hex(s, l->func);
    APPEND_LIT(s, "\"");
    if (l->has_dims) {
        APPEND_LIT(s, ",\"grid\":");
        append_dim3(s, l->grid);
        APPEND_LIT(s, ",\"block\":");
        append_dim3(s, l->block);
        APPEND_LIT(s, ",\"shmem\":");
        np_str_append_u64(s, l->shmem);
    }
    APPEND_LIT(s, ",\"" NP_KEY_STREAM "\":\"0x");
    np_str_append_hex(s, l->stream);
    if (l->nested)
        APPEND_LIT(s, "\",\"" NP_KEY_NESTED "\":true,\"" NP_KEY_STACK_ID "\":");
    else
        APPEND_LIT(s, "\",\"" NP_KEY_NESTED "\":false,\"" NP_KEY_STACK_ID "\":");
    np_str_append_u64(s, sid);
    if (l->def->layout == NP_LAYOUT_NCCL_LAUNCH)
        nccl_launch_json(s, l);
}

/* A launch's stacks.ext.folded line up to its stack: "ts comm pid tid cpu ". */
static void render_ext_prefix(struct np_str *s, const struct np_launch *l) {
    char comm[NP_COMM_LEN + 1];
    memcpy(comm, l->ev->comm, NP_COMM_LEN);
    comm[NP_COMM_LEN] = '\0';
    char safe[NP_COMM_LEN * 2];
    np_output_safe_comm(safe, sizeof(safe), comm);
    np_str_reset(s);
    np_str_append_u64(s, l->ev->hdr.ts_ns);
    APPEND_LIT(s, " ");
    np_str_append(s, safe);
    APPEND_LIT(s, " ");
    np_str_append_u64(s, l->ev->hdr.pid);
    APPEND_LIT(s, " ");
    np_str_append_u64(s, l->ev->hdr.tid);
    APPEND_LIT(s, " ");
    np_str_append_u64(s, l->ev->cpu);
    APPEND_LIT(s, " ");
}

/* One more GPU leaf under a stack in merged.folded / merged.gpu_ns.folded. */
static void add_merged(struct np_output *o, uint64_t sid, const char *leaf, uint64_t ns,
                       bool timed) {
    struct np_str *s = &o->line;
    np_str_reset(s);
    np_str_append_u64(s, sid);
    APPEND_LIT(s, ";");
    np_str_append(s, leaf);
    bump(o, &o->merged_counts, np_str_cstr(s));
    if (timed)
        add_to(o, &o->merged_ns, np_str_cstr(s), ns);
}

/* A written (outermost) launch under its kernel's final name: counted in
 * launches.folded and by kernel, and its stacks.ext.folded line. */
/* The launch's stacks.ext.folded line: "PREFIX stack;[GPU_Kernel]leaf". */
static void write_ext_line(struct np_output *o, uint64_t sid, const char *ext_prefix,
                           const char *leaf) {
    bool known = sid >= 1 && sid < o->next_stack_id;
    const char *stack = known ? o->stacks[sid - 1] : "";
    size_t stack_len = known ? o->stack_lens[sid - 1] : 0;
    /* the stack is long: copied once, into the file's buffer */
    struct np_recpart parts[] = {
        {ext_prefix, strlen(ext_prefix)},
        {stack, stack_len},
        {stack_len ? ";" NP_LEAF_KERNEL : NP_LEAF_KERNEL,
         stack_len ? sizeof(";" NP_LEAF_KERNEL) - 1 : sizeof(NP_LEAF_KERNEL) - 1},
        {leaf, strlen(leaf)},
        {"\n", 1},
    };
    struct np_recfile *f = o->streams[EXT_FOLDED];
    if (!f) /* aggregate only */
        return;
    np_recfile_append_parts(f, parts, NP_ARRAY_SIZE(parts));
    check_cut(o, f);
}

/* n runs of kernel `leaf` under stack sid: launches.folded and the counts by kernel. */
static void count_kernel_runs(struct np_output *o, uint64_t sid, const char *leaf, uint64_t n) {
    struct np_str *s = &o->line;
    np_str_reset(s);
    np_str_append_u64(s, sid); /* the stack by id: a short key */
    APPEND_LIT(s, ";");
    np_str_append(s, leaf);
    add_to(o, &o->folded_counts, np_str_cstr(s), n);
    add_to(o, &o->kernel_counts, leaf, n);
}

static void count_launch(struct np_output *o, uint64_t sid, const char *ext_prefix,
                         const char *kernel) {
    o->totals.launches++;
    char leaf[1024];
    np_sanitize_frame(leaf, sizeof(leaf), kernel, false);
    count_kernel_runs(o, sid, leaf, 1);
    write_ext_line(o, sid, ext_prefix, leaf);
}

/* launches.jsonl's line of a launch written now; extra: more members. */
static void write_launch_json(struct np_output *o, const struct np_launch *l, const char *kernel,
                              uint64_t sid, const char *extra) {
    struct np_str *s = &o->line;
    render_launch_json(s, l, kernel, sid);
    np_str_append(s, extra);
    np_str_append(s, "}\n");
    write_line(o, LAUNCHES_JSONL, s);
}

/* Its stacks.ext.folded line, and its counts under `kernel` (the CPU
 * side's name: no GPU records will come). */
static void count_written_launch(struct np_output *o, const struct np_launch *l, uint64_t sid,
                                 const char *kernel) {
    render_ext_prefix(&o->prefix, l);
    o->totals.launches++;
    /* "[GPU_Kernel]leaf" for merged.folded, the bare leaf after its marker */
    char merged_leaf[sizeof(NP_LEAF_KERNEL) - 1 + 1024];
    char *leaf = merged_leaf + sizeof(NP_LEAF_KERNEL) - 1;
    memcpy(merged_leaf, NP_LEAF_KERNEL, sizeof(NP_LEAF_KERNEL) - 1);
    np_sanitize_frame(leaf, 1024, kernel, false);
    count_kernel_runs(o, sid, leaf, 1);
    write_ext_line(o, sid, np_str_cstr(&o->prefix), leaf);
    add_merged(o, sid, merged_leaf, 0, false);
}

uint64_t np_output_launch(struct np_output *o, const struct np_launch *l,
                          const struct np_stack_texts *texts, const char *kernel,
                          struct np_output_held *held) {
    uint64_t sid = stack_id(o, texts);
    if (held) { /* written when its GPU records are in: np_output_gpu_launch */
        render_launch_json(&held->json, l, NULL, sid);
        render_ext_prefix(&held->ext, l);
        return sid;
    }
    write_launch_json(o, l, kernel, sid, "");
    if (l->nested) {
        o->totals.nested++;
        return sid;
    }
    count_written_launch(o, l, sid, kernel);
    return sid;
}

/* ---- CUDA graphs ------------------------------------------------------------ */

/* Replays of one node list from one stack, counted until the output
 * finishes; then each node is counted `count` times (expand_replays). */
struct replay_batch {
    uint32_t pid;
    uint64_t replay_sid;
    struct np_graph_nodes *nodes;
    struct np_stack_texts replay;
    uint64_t count;
};

static void free_replay_batch(void *p) {
    struct replay_batch *b = p;
    if (!b)
        return;
    np_graph_nodes_put(b->nodes);
    np_str_free(&b->replay.folded);
    np_str_free(&b->replay.detailed);
    np_str_free(&b->replay.locations);
    free(b);
}

void np_output_captured(struct np_output *o, const struct np_launch *l,
                        const struct np_stack_texts *texts, const char *kernel) {
    uint64_t sid = stack_id(o, texts);
    write_launch_json(o, l, kernel, sid, ",\"" NP_KEY_CAPTURED "\":true");
    o->totals.captured++;
}

uint64_t np_output_graph_unknown(struct np_output *o, const struct np_launch *l,
                                 const struct np_stack_texts *texts, const char *kernel,
                                 const char *why) {
    uint64_t sid = stack_id(o, texts);
    struct np_str extra;
    np_str_init(&extra);
    np_str_append(&extra, ",\"" NP_KEY_GRAPH_UNKNOWN "\":");
    np_json_string(&extra, why);
    write_launch_json(o, l, kernel, sid, np_str_cstr(&extra));
    np_str_free(&extra);
    if (l->nested)
        o->totals.nested++;
    else
        count_written_launch(o, l, sid, kernel);
    return sid;
}

static struct replay_batch *replay_batch(struct np_output *o, uint32_t pid,
                                         struct np_graph_nodes *nodes, uint64_t sid,
                                         const struct np_stack_texts *texts) {
    char key[72];
    /* the list itself (held: its address is not reused), not its id (per process) */
    snprintf(key, sizeof(key), "%u:%p:%" PRIu64, pid, (void *)nodes, sid);
    struct replay_batch *b = np_map_get_str(&o->replays, key);
    if (b)
        return b;
    b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    np_str_init(&b->replay.folded);
    np_str_init(&b->replay.detailed);
    np_str_init(&b->replay.locations);
    b->pid = pid;
    b->replay_sid = sid;
    np_str_append(&b->replay.folded, np_str_cstr(&texts->folded));
    np_str_append(&b->replay.detailed, np_str_cstr(&texts->detailed));
    np_str_append(&b->replay.locations, np_str_cstr(&texts->locations));
    if (np_map_put_str(&o->replays, key, b) < 0) {
        free_replay_batch(b);
        return NULL;
    }
    np_graph_nodes_ref(nodes);
    b->nodes = nodes;
    return b;
}

void np_output_graph_replay(struct np_output *o, const struct np_launch *l,
                            const struct np_stack_texts *texts, const char *kernel,
                            struct np_graph_nodes *nodes) {
    uint64_t sid = stack_id(o, texts);
    char extra[64];
    snprintf(extra, sizeof(extra), ",\"" NP_KEY_GRAPH_NODES "\":%zu", nodes->n);
    write_launch_json(o, l, kernel, sid, extra);
    if (l->nested) {
        o->totals.nested++;
        return;
    }
    o->totals.launches++;
    struct np_str prefix;
    np_str_init(&prefix);
    render_ext_prefix(&prefix, l);
    char leaf[1024];
    np_sanitize_frame(leaf, sizeof(leaf), kernel, false);
    write_ext_line(o, sid, np_str_cstr(&prefix), leaf);
    np_str_free(&prefix);
    struct replay_batch *b = replay_batch(o, l->ev->hdr.pid, nodes, sid, texts);
    if (b)
        b->count++;
    else
        note_error(o, -ENOMEM);
}

/* graph_replays.jsonl's line of one node of a batch. */
static void write_replay_line(struct np_output *o, FILE *f, const struct replay_batch *b,
                              uint64_t sid, const char *kernel) {
    if (!f)
        return;
    struct np_str *s = &o->line;
    np_str_reset(s);
    np_str_appendf(s,
                   "{\"" NP_KEY_PID "\":%u,\"" NP_KEY_STACK_ID "\":%" PRIu64
                   ",\"" NP_KEY_REPLAY_STACK_ID "\":%" PRIu64 ",\"" NP_KEY_KERNEL "\":",
                   b->pid, sid, b->replay_sid);
    np_json_string(s, kernel);
    np_str_appendf(s, ",\"" NP_KEY_COUNT "\":%" PRIu64 "}\n", b->count);
    if (s->failed || fwrite(s->buf, 1, s->len, f) != s->len)
        note_error(o, s->failed ? -ENOMEM : -EIO);
}

/* Every node of every replayed list, counted under its composed stack (and
 * written to graph_replays.jsonl for the readers of launches.jsonl). */
static void expand_replays(struct np_output *o) {
    if (!o->replays.count)
        return;
    FILE *f = o->aggregate_only || !o->dir
                  ? NULL
                  : open_in(o->dir, NP_REC_GRAPH_REPLAYS_JSONL, &o->first_error);
    struct np_stack_texts composed = {0};
    np_str_init(&composed.folded);
    np_str_init(&composed.detailed);
    np_str_init(&composed.locations);
    for (size_t i = 0; i < o->replays.cap; i++) {
        if (!o->replays.slots[i].used)
            continue;
        struct replay_batch *b = o->replays.slots[i].value;
        for (size_t k = 0; b && b->count && k < b->nodes->n; k++) {
            const struct np_graph_node *node = &b->nodes->v[k];
            np_graph_compose(&b->replay, node, &composed);
            uint64_t sid = stack_id(o, &composed);
            char leaf[1024], merged_leaf[1100];
            np_sanitize_frame(leaf, sizeof(leaf), node->kernel, false);
            snprintf(merged_leaf, sizeof(merged_leaf), NP_LEAF_KERNEL "%s", leaf);
            count_kernel_runs(o, sid, leaf, b->count);
            struct np_str *s = &o->line;
            np_str_reset(s);
            np_str_appendf(s, "%" PRIu64 ";%s", sid, merged_leaf);
            add_to(o, &o->merged_counts, np_str_cstr(s), b->count);
            o->totals.replayed_kernels += b->count;
            write_replay_line(o, f, b, sid, leaf);
        }
        if (b)
            b->count = 0;
    }
    np_str_free(&composed.folded);
    np_str_free(&composed.detailed);
    np_str_free(&composed.locations);
    if (f && fclose(f) != 0)
        note_error(o, -errno);
}

/* A GPU record's name (kernel or API), NUL-terminated, into buf (NP_WIRE_MAX_NAME + 1 bytes). */
static const char *record_name(char *buf, const struct np_gpu_record *r) {
    memcpy(buf, r->name, r->name_len);
    buf[r->name_len] = '\0';
    return buf;
}

/* The flame-graph leaf of a GPU record. */
static void gpu_leaf(char *out, size_t size, const struct np_gpu_record *r) {
    if (r->kind == NP_GPU_MEMCPY) {
        snprintf(out, size, NP_LEAF_MEMCPY "%s", np_gpu_copy_kind_name(r->copy_kind));
    } else if (r->kind == NP_GPU_MEMSET) {
        snprintf(out, size, NP_LEAF_MEMSET);
    } else {
        char name[NP_WIRE_MAX_NAME + 1], safe[NP_WIRE_MAX_NAME + 1];
        np_sanitize_frame(safe, sizeof(safe), record_name(name, r), false);
        snprintf(out, size, NP_LEAF_KERNEL "%s", safe);
    }
}

/* capture_sid: the stack a replayed record is counted under (0: its launch's). */
static void gpu_record_json(struct np_str *s, const struct np_gpu_record *r, uint64_t capture_sid,
                            const char *capture_by) {
    static const char *const types[] = {"", "kernel", "memcpy", "memset"};
    np_str_appendf(s, "{\"" NP_KEY_GPU_TYPE "\":\"%s\"",
                   types[r->kind <= NP_GPU_MEMSET ? r->kind : 0]);
    if (r->kind == NP_GPU_KERNEL) {
        char name[NP_WIRE_MAX_NAME + 1];
        np_str_append(s, ",\"" NP_KEY_GPU_NAME "\":");
        np_json_string(s, record_name(name, r));
    }
    np_str_appendf(s,
                   ",\"correlation_id\":%u,\"" NP_KEY_START_NS "\":%" PRIu64 ",\"" NP_KEY_END_NS
                   "\":%" PRIu64 ",\"" NP_KEY_DEVICE "\":%u,\"" NP_KEY_CONTEXT
                   "\":%u,\"" NP_KEY_STREAM "\":%u,\"" NP_KEY_GRAPH_ID "\":%u"
                   ",\"" NP_KEY_GRAPH_NODE_ID "\":%" PRIu64,
                   r->correlation_id, r->start_ns, r->end_ns, r->device, r->context, r->stream,
                   r->graph_id, r->graph_node_id);
    if (capture_sid)
        np_str_appendf(
            s, ",\"" NP_KEY_CAPTURE_STACK_ID "\":%" PRIu64 ",\"" NP_KEY_CAPTURE_BY "\":\"%s\"",
            capture_sid, capture_by);
    if (r->kind == NP_GPU_KERNEL)
        np_str_appendf(s, ",\"grid\":[%u,%u,%u],\"block\":[%u,%u,%u]}", r->grid[0], r->grid[1],
                       r->grid[2], r->block[0], r->block[1], r->block[2]);
    else if (r->kind == NP_GPU_MEMCPY)
        np_str_appendf(s, ",\"" NP_KEY_COPY_KIND "\":\"%s\",\"bytes\":%" PRIu64 "}",
                       np_gpu_copy_kind_name(r->copy_kind), r->bytes);
    else
        np_str_appendf(s, ",\"bytes\":%" PRIu64 "}", r->bytes);
}

static uint64_t gpu_ns(const struct np_gpu_record *r) {
    return r->end_ns > r->start_ns ? r->end_ns - r->start_ns : 0;
}

/* A held launch's JSON with its kernel's name where the slot is. */
static void append_named_json(struct np_str *s, const char *json, const char *kernel) {
    const char *slot = strchr(json, NP_GPU_KERNEL_SLOT);
    if (!slot) {
        np_str_append(s, json);
        return;
    }
    np_str_append_n(s, json, (size_t)(slot - json));
    np_json_string(s, kernel);
    np_str_append(s, slot + 1);
}

/* The stacks a replay's records are counted under (capture_sid[i]: the
 * composed stack of record i, 0 when not tied to its capture); how many are. */
static uint32_t replay_stacks(struct np_output *o, const struct np_gpu_launch *gl,
                              const struct np_output_replay *replay, uint64_t *capture_sid) {
    uint32_t tied = 0;
    struct np_stack_texts composed = {0};
    np_str_init(&composed.folded);
    np_str_init(&composed.detailed);
    np_str_init(&composed.locations);
    for (uint32_t i = 0; i < gl->nrecords; i++) {
        capture_sid[i] = 0;
        if (!replay || !replay->node[i])
            continue;
        /* every replay of a node from one line composes the same stack: once per output */
        const uint64_t parts[2] = {gl->stack_id, replay->node[i]->stack->hash};
        uint64_t key = np_hash_bytes(parts, sizeof(parts));
        capture_sid[i] = (uintptr_t)np_map_get_u64(&o->composed_ids, key);
        if (!capture_sid[i]) {
            np_graph_compose(replay->stack, replay->node[i], &composed);
            capture_sid[i] = stack_id(o, &composed);
            if (capture_sid[i] &&
                np_map_put_u64(&o->composed_ids, key, (void *)(uintptr_t)capture_sid[i]) < 0)
                note_error(o, -ENOMEM);
        }
        tied += capture_sid[i] != 0;
    }
    np_str_free(&composed.folded);
    np_str_free(&composed.detailed);
    np_str_free(&composed.locations);
    return tied;
}

/* A replay whose records are tied to their capture: its stacks.ext.folded
 * line, and every kernel record counted in launches.folded as a kernel run
 * (under its capture stack when tied, else under the replay's). */
static void count_replay(struct np_output *o, const struct np_gpu_launch *gl, const char *kernel,
                         const uint64_t *capture_sid) {
    o->totals.launches++;
    char leaf[1024];
    np_sanitize_frame(leaf, sizeof(leaf), kernel, false);
    write_ext_line(o, gl->stack_id, gl->ext, leaf);
    for (uint32_t i = 0; i < gl->nrecords; i++) {
        const struct np_gpu_record *r = gl->records[i];
        if (r->kind != NP_GPU_KERNEL)
            continue;
        char name[NP_WIRE_MAX_NAME + 1];
        np_sanitize_frame(leaf, sizeof(leaf), record_name(name, r), false);
        count_kernel_runs(o, capture_sid[i] ? capture_sid[i] : gl->stack_id, leaf, 1);
        o->totals.replayed_kernels += capture_sid[i] != 0;
    }
}

void np_output_gpu_launch(struct np_output *o, const struct np_gpu_launch *gl,
                          enum np_gpu_status status, const char *kernel,
                          const struct np_output_replay *replay) {
    static const char *const names[] = {NP_GPU_STATUS_NONE, NP_GPU_STATUS_MATCHED,
                                        NP_GPU_STATUS_PENDING};
    uint64_t *capture_sid = gl->nrecords ? calloc(gl->nrecords, sizeof(*capture_sid)) : NULL;
    if (gl->nrecords && !capture_sid) {
        note_error(o, -ENOMEM);
        replay = NULL; /* the records stay under the replay's stack */
    }
    uint32_t tied = capture_sid ? replay_stacks(o, gl, replay, capture_sid) : 0;
    struct np_str *s = &o->line;
    np_str_reset(s);
    append_named_json(s, gl->json, kernel);
    np_str_append(s, ",\"correlation_ids\":[");
    for (uint32_t i = 0; i < gl->nids; i++)
        np_str_appendf(s, "%s%u", i ? "," : "", gl->ids[i]);
    np_str_appendf(s, "],\"" NP_KEY_GPU_STATUS "\":\"%s\",\"" NP_KEY_GPU "\":[", names[status]);
    for (uint32_t i = 0; i < gl->nrecords; i++) {
        if (i)
            np_str_append(s, ",");
        gpu_record_json(s, gl->records[i], tied ? capture_sid[i] : 0,
                        tied && capture_sid[i] ? replay->by[i] : NULL);
    }
    np_str_append(s, "]}\n");
    write_line(o, LAUNCHES_JSONL, s);
    if (tied)
        count_replay(o, gl, kernel, capture_sid);
    else
        count_launch(o, gl->stack_id, gl->ext, kernel);

    char leaf[NP_WIRE_MAX_NAME + 64];
    if (status == NP_GPU_NONE) {
        char safe[1024];
        np_sanitize_frame(safe, sizeof(safe), kernel, false);
        snprintf(leaf, sizeof(leaf), NP_LEAF_KERNEL "%s", safe);
        add_merged(o, gl->stack_id, leaf, 0, false);
    } else if (status == NP_GPU_PENDING) {
        add_merged(o, gl->stack_id, NP_LEAF_PENDING, 0, false);
    }
    for (uint32_t i = 0; i < gl->nrecords; i++) {
        gpu_leaf(leaf, sizeof(leaf), gl->records[i]);
        uint64_t sid = tied && capture_sid[i] ? capture_sid[i] : gl->stack_id;
        add_merged(o, sid, leaf, gpu_ns(gl->records[i]), true);
    }
    free(capture_sid);
}

void np_output_gpu_unmatched(struct np_output *o, const struct np_gpu_record *r) {
    if (!o->streams[GPU_UNMATCHED] && !o->gpu_unmatched_failed && !o->aggregate_only &&
        !o->cut_error) {
        int err = 0;
        o->streams[GPU_UNMATCHED] = open_stream(o->dir, GPU_UNMATCHED, &err);
        if (!o->streams[GPU_UNMATCHED]) {
            o->gpu_unmatched_failed = true;
            note_error(o, err);
        }
    }
    if (o->streams[GPU_UNMATCHED]) {
        struct np_str *s = &o->line;
        np_str_reset(s);
        gpu_record_json(s, r, 0, NULL);
        np_str_append(s, "\n");
        write_line(o, GPU_UNMATCHED, s);
    }
    char leaf[NP_WIRE_MAX_NAME + 64];
    gpu_leaf(leaf, sizeof(leaf), r);
    add_merged(o, 0, leaf, gpu_ns(r), true);
}

void np_output_nccl_op(struct np_output *o, const struct np_launch *l,
                       const struct np_stack_texts *stack) {
    uint64_t sid = stack_id(o, stack);
    struct np_str *s = &o->line;
    int size = np_nccl_datatype_bytes(l->nccl_names, l->datatype);

    o->totals.nccl_ops++;
    np_str_reset(s);
    json_common(s, l, "thread");
    np_str_append(s, ",\"" NP_KEY_NCCL_OP "\":");
    np_json_string(s, l->def->api);
    np_str_appendf(s, ",\"count\":%" PRIu64 ",\"datatype\":", l->count);
    np_json_string(s, nccl_name(l->nccl_names, NP_NCCL_DATATYPE, l->datatype));
    np_str_appendf(s, ",\"bytes\":%" PRIu64 ",\"redop\":", l->count * (uint64_t)size);
    np_json_string(s, nccl_name(l->nccl_names, NP_NCCL_REDOP, l->redop));
    np_str_appendf(
        s, ",\"root\":%" PRId64 ",\"peer\":%" PRId64 ",\"" NP_KEY_COMM "\":\"0x%" PRIx64 "\"",
        l->root, l->peer, l->comm);
    comm_id_json(s, &l->comm_id);
    np_str_appendf(s,
                   ",\"" NP_KEY_STREAM "\":\"0x%" PRIx64 "\",\"sendbuff\":\"0x%" PRIx64
                   "\",\"recvbuff\":\"0x%" PRIx64 "\",\"" NP_KEY_STACK_ID "\":%" PRIu64 "}\n",
                   l->stream, l->sendbuff, l->recvbuff, sid);
    write_line(o, NCCL_JSONL, s);
}

/* stacks.jsonl first: the other files refer to its stacks. */
static const enum stream flush_order[NSTREAMS] = {STACKS_JSONL, LAUNCHES_JSONL, NCCL_JSONL,
                                                  EXT_FOLDED, GPU_UNMATCHED};

void np_output_flush(struct np_output *o) {
    for (int i = 0; i < NSTREAMS; i++) {
        struct np_recfile *f = o->streams[flush_order[i]];
        if (f) {
            np_recfile_flush(f);
            check_cut(o, f);
        }
    }
}

/* merged.folded / merged.gpu_ns.folded: "stack;LEAF WEIGHT"; stack id 0
 * is the GPU work no launch claimed. */
static void write_merged(struct np_output *o, const char *name, const struct np_map *m) {
    FILE *f = open_in(o->dir, name, &o->first_error);
    if (!f)
        return;
    for (size_t i = 0; i < m->cap; i++) {
        const struct np_map_entry *e = &m->slots[i];
        if (!e->used)
            continue;
        char *leaf = NULL;
        uint64_t id = strtoull(e->skey, &leaf, 10);
        const char *stack = id >= 1 && id < o->next_stack_id ? o->stacks[id - 1]
                            : id == 0                        ? NP_FRAME_NO_LAUNCH_STACK
                                                             : "";
        if (fprintf(f, "%s%s%s %" PRIuPTR "\n", stack, *stack ? ";" : "", leaf + 1,
                    (uintptr_t)e->value) < 0)
            note_error(o, -errno);
    }
    if (fclose(f) != 0)
        note_error(o, -errno);
}

static void write_folded(struct np_output *o) {
    FILE *f = open_in(o->dir, NP_REC_LAUNCHES_FOLDED, &o->first_error);
    if (!f)
        return;
    for (size_t i = 0; i < o->folded_counts.cap; i++) {
        const struct np_map_entry *e = &o->folded_counts.slots[i];
        if (!e->used)
            continue;
        char *kernel = NULL;
        uint64_t id = strtoull(e->skey, &kernel, 10);
        const char *stack = id >= 1 && id < o->next_stack_id ? o->stacks[id - 1] : "";
        if (fprintf(f, "%s%s" NP_LEAF_KERNEL "%s %" PRIuPTR "\n", stack, *stack ? ";" : "",
                    kernel + 1, (uintptr_t)e->value) < 0)
            note_error(o, -errno);
    }
    if (fclose(f) != 0)
        note_error(o, -errno);
}

/* The streams end (cut ones at their last whole record), the reserve goes,
 * and the aggregates are written in the room it held. */
int np_output_finish(struct np_output *o) {
    if (o->finished)
        return o->first_error;
    o->finished = true;
    expand_replays(o); /* their stacks go to stacks.jsonl: before it closes */
    np_output_flush(o);
    for (int i = 0; i < NSTREAMS; i++) {
        struct np_recfile *f = o->streams[flush_order[i]];
        if (!f)
            continue;
        o->totals.records_written += np_recfile_records(f);
        o->totals.records_cut += np_recfile_records_cut(f);
        int err = np_recfile_close(f);
        if (err && !o->cut_error)
            cut_all(o, err);
        o->streams[flush_order[i]] = NULL;
    }
    if (o->cut_error)
        note_error(o, o->cut_error);
    o->totals.cut_error = o->cut_error;
    reserve_release(o);
    if (o->dir) {
        write_folded(o);
        write_merged(o, NP_REC_MERGED_FOLDED, &o->merged_counts);
        write_merged(o, NP_REC_MERGED_GPU_NS_FOLDED, &o->merged_ns);
    }
    return o->first_error;
}

int np_output_close(struct np_output *o) {
    if (!o)
        return 0;
    np_output_finish(o);
    int err = o->first_error;
    np_map_free(&o->folded_counts, NULL);
    np_map_free(&o->kernel_counts, NULL);
    np_map_free(&o->merged_counts, NULL);
    np_map_free(&o->merged_ns, NULL);
    np_map_free(&o->stack_ids, NULL);
    np_map_free(&o->ids_by_serial, NULL);
    np_map_free(&o->replays, free_replay_batch);
    np_map_free(&o->composed_ids, NULL);
    for (uint64_t id = 1; id < o->next_stack_id; id++)
        free(o->stacks[id - 1]);
    free(o->stacks);
    free(o->stack_lens);
    np_str_free(&o->line);
    np_str_free(&o->prefix);
    free(o->dir);
    free(o);
    return err;
}

const struct np_output_totals *np_output_totals(const struct np_output *o) {
    return &o->totals;
}

const struct np_map *np_output_kernel_counts(const struct np_output *o) {
    return &o->kernel_counts;
}

const char *np_output_dir(const struct np_output *o) {
    return o->dir;
}
