/* flamegraph.c - the SVG flame graph renderer (see flamegraph.h): reads
 * folded lines (src/recording/folded.c), cleans every name (valid UTF-8, no
 * control characters), merges the stacks into a tree (lines sorted frame by
 * frame, then one walk), lays the tree out (root at the bottom, children
 * alphabetical, subtrees narrower than MIN_FRAME_WIDTH left out) and writes
 * the SVG: frames as <g><title/><rect/><text/></g> carrying their name and
 * weights in data- attributes for the inline script (zoom, search,
 * details), which never sees a name as code. Its stylesheet and script are
 * flamegraph.css and flamegraph.js, built in (tools/embed-asset.sh). Also
 * np_write_flamegraphs for a recording directory. */
#define _GNU_SOURCE
#include "writers/flamegraph.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flamegraph_assets.h" /* generated from flamegraph.css and flamegraph.js */
#include "lib/json.h"
#include "lib/util.h"
#include "ncclprobe/recording.h"
#include "recording/folded.h"
#include "recording/frames.h"
#include "recording/recording.h"

#define FRAME_HEIGHT 16
#define FONT_SIZE 12
#define FONT_WIDTH 0.59 /* average glyph width / font size (Verdana) */
#define XPAD 10
#define YPAD_TOP 80    /* title, subtitle, legend */
#define YPAD_BOTTOM 34 /* details line */
#define MIN_FRAME_WIDTH 0.1
#define NAME_MAX_BYTES 4000 /* longer names are cut in the SVG (not when merging) */

/* ---- reading ------------------------------------------------------------------ */

struct flame_line {
    char *stack; /* cleaned frames, ';' between them (NULs once split) */
    uint64_t weight;
};

struct flame_input {
    struct flame_line *lines;
    size_t n, cap;
    struct np_flame_stats stats;
    bool saturated;
};

static uint64_t add_sat(uint64_t a, uint64_t b, bool *saturated) {
    if (a > UINT64_MAX - b) {
        *saturated = true;
        return UINT64_MAX;
    }
    return a + b;
}

/* Appends the code point starting at p (n bytes, valid UTF-8) unless it is a
 * control character or not allowed in XML (U+0080-U+009F, U+FFFE, U+FFFF). */
static void keep_char(struct np_str *out, const unsigned char *p, size_t n) {
    if (n == 1 && (p[0] < 0x20 || p[0] == 0x7f))
        return;
    if (n == 2 && p[0] == 0xc2 && p[1] < 0xa0)
        return;
    if (n == 3 && p[0] == 0xef && p[1] == 0xbf && (p[2] == 0xbe || p[2] == 0xbf))
        return;
    np_str_append_n(out, (const char *)p, n);
}

static size_t utf8_len(unsigned char c) {
    return c < 0xc0 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
}

/* raw with valid UTF-8 and no control characters, and when frames (a
 * stack) no empty frame; NULL when nothing is left (or out of memory). */
static char *clean_text(const char *raw, bool frames) {
    char *utf8 = np_utf8_clean(raw);
    if (!utf8)
        return NULL;
    struct np_str out;
    np_str_init(&out);
    size_t frame_start = 0;
    for (const unsigned char *p = (const unsigned char *)utf8; *p;) {
        if (*p == ';' && frames) {
            if (out.len > frame_start) /* drops empty frames */
                np_str_append(&out, ";");
            frame_start = out.len;
            p++;
            continue;
        }
        size_t n = utf8_len(*p); /* valid UTF-8 here: np_utf8_clean */
        keep_char(&out, p, n);
        p += n;
    }
    free(utf8);
    if (frames && out.len > 0 && out.buf[out.len - 1] == ';')
        out.buf[--out.len] = '\0';
    if (out.failed || out.len == 0) {
        np_str_free(&out);
        return NULL;
    }
    return out.buf;
}

static int push_line(struct flame_input *in, char *stack, uint64_t weight) {
    struct flame_line *lines = np_grow_array(in->lines, &in->cap, in->n + 1, sizeof(*lines));
    if (!lines)
        return -ENOMEM;
    in->lines = lines;
    in->lines[in->n++] = (struct flame_line){.stack = stack, .weight = weight};
    return 0;
}

/* Takes a line of the folded reader: its stack cleaned, then kept. 0, 1 when
 * nothing is left of the stack (malformed), -ENOMEM. */
static int take_line(struct flame_input *in, const struct np_folded_line *line) {
    char *stack = clean_text(line->stack, true);
    if (!stack)
        return 1;
    if (push_line(in, stack, line->weight) < 0) {
        free(stack);
        return -ENOMEM;
    }
    in->stats.lines++;
    in->stats.total = add_sat(in->stats.total, line->weight, &in->saturated);
    return 0;
}

static void free_input(struct flame_input *in) {
    for (size_t i = 0; i < in->n; i++)
        free(in->lines[i].stack);
    free(in->lines);
    memset(in, 0, sizeof(*in));
}

static int read_input(FILE *f, struct flame_input *in, const char *source) {
    struct np_folded r;
    struct np_folded_line line;
    int err;
    np_folded_attach(&r, f, source);
    while ((err = np_folded_next(&r, &line)) > 0) {
        err = take_line(in, &line);
        if (err < 0)
            break;
        in->stats.skipped += err;
    }
    in->stats.skipped += r.malformed;
    np_folded_close(&r);
    if (err == -ENOMEM)
        np_err("%s: %s", source, strerror(ENOMEM));
    if (in->stats.skipped)
        np_warn("%s: skipped %llu malformed line(s) (expected 'frame;frame;... WEIGHT')", source,
                (unsigned long long)in->stats.skipped);
    if (in->saturated)
        np_warn("%s: the weights add up to more than 2^64: totals are capped", source);
    return err;
}

/* ---- the tree ------------------------------------------------------------------ */

struct flame_node {
    const char *name;
    uint64_t value;  /* the weight of every line through this frame */
    uint64_t offset; /* where it starts, in weight units from the left */
    int32_t parent, first_child, last_child, next;
    int32_t pre; /* index among the frames drawn (preorder), -1 if left out */
    uint32_t depth;
};

struct flame_tree {
    struct flame_node *nodes; /* nodes[0]: the root, "all" */
    size_t n, cap;
    double scale;       /* px per weight unit */
    uint32_t max_depth; /* of the frames drawn */
    size_t drawn;
    bool saturated;
};

/* Frame by frame order: ';' sorts before any other byte, so every line of a
 * prefix is next to the others, the shorter stack first. */
static int compare_stacks(const void *a, const void *b) {
    const unsigned char *x = (const unsigned char *)((const struct flame_line *)a)->stack;
    const unsigned char *y = (const unsigned char *)((const struct flame_line *)b)->stack;
    for (;; x++, y++) {
        int cx = *x == ';' ? 1 : *x ? *x + 1 : 0;
        int cy = *y == ';' ? 1 : *y ? *y + 1 : 0;
        if (cx != cy || cx == 0)
            return cx - cy;
    }
}

static int32_t add_node(struct flame_tree *t, const char *name, int32_t parent) {
    struct flame_node *nodes =
        t->n < INT32_MAX ? np_grow_array(t->nodes, &t->cap, t->n + 1, sizeof(*nodes)) : NULL;
    if (!nodes)
        return -1;
    t->nodes = nodes;
    int32_t id = (int32_t)t->n++;
    t->nodes[id] = (struct flame_node){
        .name = name, .parent = parent, .first_child = -1, .last_child = -1, .next = -1, .pre = -1};
    if (parent >= 0) {
        struct flame_node *p = &t->nodes[parent];
        t->nodes[id].depth = p->depth + 1;
        if (p->last_child >= 0)
            t->nodes[p->last_child].next = id;
        else
            p->first_child = id;
        p->last_child = id;
    }
    return id;
}

struct path {
    int32_t *ids;
    size_t len, cap;
};

static int path_set(struct path *p, size_t level, int32_t id) {
    int32_t *ids = np_grow_array(p->ids, &p->cap, level + 1, sizeof(*ids));
    if (!ids)
        return -ENOMEM;
    p->ids = ids;
    p->ids[level] = id;
    p->len = level + 1;
    return 0;
}

/* The frames of path from level on are complete (no later line goes through
 * them): the first one too narrow to draw loses its subtree, the last nodes
 * made (nodes[] is in preorder), so pruned frames cost no memory. */
static void finish_path(struct flame_tree *t, const struct path *path, size_t level) {
    for (; level < path->len; level++) {
        struct flame_node *node = &t->nodes[path->ids[level]];
        if ((double)node->value * t->scale < MIN_FRAME_WIDTH) {
            t->n = (size_t)path->ids[level] + 1;
            node->first_child = node->last_child = -1;
            return;
        }
    }
}

/* Adds one line (split at its ';' in place) below the path of the line before. */
static int add_line(struct flame_tree *t, struct path *path, struct flame_line *line) {
    struct flame_node *root = &t->nodes[0];
    root->value = add_sat(root->value, line->weight, &t->saturated);
    size_t level = 0;
    for (char *frame = line->stack; frame; level++) {
        char *end = strchr(frame, ';');
        if (end)
            *end = '\0';
        int32_t id;
        if (level < path->len && strcmp(t->nodes[path->ids[level]].name, frame) == 0) {
            id = path->ids[level];
        } else {
            finish_path(t, path, level);
            id = add_node(t, frame, level ? path->ids[level - 1] : 0);
            if (id < 0 || path_set(path, level, id) < 0)
                return -ENOMEM;
        }
        t->nodes[id].value = add_sat(t->nodes[id].value, line->weight, &t->saturated);
        frame = end ? end + 1 : NULL;
    }
    path->len = level;
    return 0;
}

static int build_tree(struct flame_input *in, struct flame_tree *t, double scale) {
    memset(t, 0, sizeof(*t));
    t->scale = scale;
    if (add_node(t, "all", -1) < 0)
        return -ENOMEM;
    qsort(in->lines, in->n, sizeof(*in->lines), compare_stacks);
    struct path path = {0};
    int err = 0;
    for (size_t i = 0; !err && i < in->n; i++)
        err = add_line(t, &path, &in->lines[i]);
    if (!err)
        finish_path(t, &path, 0);
    free(path.ids);
    return err;
}

/* Every frame's offset (parents come before their children in nodes[]). */
static void layout_tree(struct flame_tree *t) {
    for (size_t i = 0; i < t->n; i++) {
        struct flame_node *node = &t->nodes[i];
        uint64_t cursor = node->offset;
        for (int32_t c = node->first_child; c >= 0; c = t->nodes[c].next) {
            t->nodes[c].offset = cursor;
            cursor = add_sat(cursor, t->nodes[c].value, &t->saturated);
        }
    }
}

/* Next frame to draw after id in preorder (children only when id is drawn). */
static int32_t next_preorder(const struct flame_tree *t, int32_t id, const bool *wide) {
    if (wide[id] && t->nodes[id].first_child >= 0)
        return t->nodes[id].first_child;
    while (id >= 0) {
        if (t->nodes[id].next >= 0)
            return t->nodes[id].next;
        id = t->nodes[id].parent;
    }
    return -1;
}

/* ---- names, numbers, colours ---------------------------------------------------- */

static const char *const kind_label[NP_FRAME_KIND_COUNT] = {
    [NP_FRAME_KIND_NATIVE] = "native", [NP_FRAME_KIND_INLINED] = "inlined",
    [NP_FRAME_KIND_PYTHON] = "Python", [NP_FRAME_KIND_NCCL] = "NCCL",
    [NP_FRAME_KIND_GPU] = "GPU",       [NP_FRAME_KIND_SYNTHETIC] = "unknown"};

/* A kind's colour, varied a little by v1..v3 in [0, 1) (flamegraph.pl-like). */
static void kind_rgb(enum np_frame_kind k, double v1, double v2, double v3, int rgb[3]) {
    switch (k) {
    case NP_FRAME_KIND_GPU: /* green */
        rgb[0] = 40 + (int)(60 * v1), rgb[1] = 180 + (int)(60 * v2), rgb[2] = 40 + (int)(60 * v3);
        break;
    case NP_FRAME_KIND_NCCL: /* purple-blue */
        rgb[0] = 140 + (int)(50 * v1), rgb[1] = 90 + (int)(40 * v2), rgb[2] = 200 + (int)(55 * v3);
        break;
    case NP_FRAME_KIND_PYTHON: /* aqua */
        rgb[0] = 50 + (int)(60 * v1), rgb[1] = 165 + (int)(55 * v2), rgb[2] = 165 + (int)(55 * v3);
        break;
    case NP_FRAME_KIND_SYNTHETIC: /* grey */
        rgb[0] = rgb[1] = rgb[2] = 160 + (int)(50 * v1);
        break;
    case NP_FRAME_KIND_INLINED: /* the native colour, lighter */
        rgb[0] = 225 + (int)(30 * v3), rgb[1] = 110 + (int)(120 * v1), rgb[2] = 90 + (int)(45 * v2);
        break;
    default: /* native: flamegraph.pl's "hot" */
        rgb[0] = 205 + (int)(50 * v3), rgb[1] = (int)(230 * v1), rgb[2] = (int)(55 * v2);
        break;
    }
}

static void frame_colour(const char *name, enum np_frame_kind k, char *out, size_t size) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    h ^= h >> 33; /* murmur3's finalizer: names a letter apart get unlike colours */
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    double v1 = (double)(h & 0xffff) / 65536.0;
    double v2 = (double)((h >> 16) & 0xffff) / 65536.0;
    double v3 = (double)((h >> 32) & 0xffff) / 65536.0;
    int rgb[3];
    if (strncmp(name, NP_LEAF_PENDING, strlen(NP_LEAF_PENDING)) == 0) /* no GPU data: paler */
        rgb[0] = 150, rgb[1] = 200, rgb[2] = 150;
    else
        kind_rgb(k, v1, v2, v3, rgb);
    snprintf(out, size, "rgb(%d,%d,%d)", rgb[0], rgb[1], rgb[2]);
}

/* Writes s (at most max_bytes of it, cut at a character) escaped for XML
 * text and attributes. */
static void xml_text(FILE *out, const char *s, size_t max_bytes) {
    size_t len = strlen(s), n = len;
    if (n > max_bytes) {
        n = max_bytes;
        while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
            n--;
    }
    for (size_t i = 0; i < n; i++) {
        switch (s[i]) {
        case '&':
            fputs("&amp;", out);
            break;
        case '<':
            fputs("&lt;", out);
            break;
        case '>':
            fputs("&gt;", out);
            break;
        case '"':
            fputs("&quot;", out);
            break;
        case '\'':
            fputs("&apos;", out);
            break;
        default:
            fputc(s[i], out);
        }
    }
    if (n < len)
        fputs("...", out);
}

/* The label that fits in w pixels: the name, its first characters + "..",
 * or nothing (the same rule as fit() in the script). */
static void write_label(FILE *out, const char *name, double w) {
    double chars = (w - 6) / (FONT_SIZE * FONT_WIDTH);
    if (chars < 3)
        return;
    size_t fit = (size_t)chars, count = 0, cut = 0;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        if ((*p & 0xc0) == 0x80)
            continue;
        if (count == fit - 2)
            cut = (size_t)(p - (const unsigned char *)name);
        count++;
    }
    if (count <= fit) {
        xml_text(out, name, SIZE_MAX);
        return;
    }
    char *head = strndup(name, cut);
    if (head)
        xml_text(out, head, SIZE_MAX);
    free(head);
    fputs("..", out);
}

/* 1234567 -> "1,234,567" */
static void format_count(uint64_t v, char *out, size_t size) {
    char digits[32];
    int n = snprintf(digits, sizeof(digits), "%llu", (unsigned long long)v);
    size_t o = 0;
    for (int i = 0; i < n && o + 2 < size; i++) {
        if (i > 0 && (n - i) % 3 == 0)
            out[o++] = ',';
        out[o++] = digits[i];
    }
    out[o] = '\0';
}

/* "N samples" or "X ms". */
static void format_value(uint64_t v, enum np_flame_unit unit, char *out, size_t size) {
    if (unit == NP_FLAME_COUNT) {
        char n[40];
        format_count(v, n, sizeof(n));
        snprintf(out, size, "%s samples", n);
        return;
    }
    double ms = (double)v / 1e6;
    if (ms >= 1 || v == 0) {
        snprintf(out, size, "%.3f ms", ms);
        return;
    }
    int n = snprintf(out, size, "%.6f", ms);
    while (n > 3 && out[n - 1] == '0') /* 0.004300 -> 0.0043 */
        out[--n] = '\0';
    snprintf(out + n, size - (size_t)n, " ms");
}

/* ---- the SVG ------------------------------------------------------------------- */

struct svg {
    FILE *out;
    const struct np_flame_opts *o;
    int width, height;
    double frame_width; /* px for the whole total */
    uint64_t total;
};

#define SVG_STYLE_OPEN "<style type=\"text/css\">\n"
#define SVG_STYLE_CLOSE "</style>\n"
#define SVG_SCRIPT_OPEN "<script type=\"text/ecmascript\"><![CDATA[\n"
#define SVG_SCRIPT_CLOSE "]]></script>\n"

static void svg_header(struct svg *s) {
    fprintf(s->out,
            "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n"
            "<!DOCTYPE svg PUBLIC \"-//W3C//DTD SVG 1.1//EN\" "
            "\"http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd\">\n"
            "<svg version=\"1.1\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "xmlns=\"http://www.w3.org/2000/svg\">\n"
            "<!-- Flame graph by ncclprobe. Click a frame to zoom, Ctrl-F to search. -->\n"
            "<defs><linearGradient id=\"np_background\" y1=\"0\" y2=\"1\" x1=\"0\" x2=\"0\">"
            "<stop stop-color=\"#eeeeee\" offset=\"5%%\"/>"
            "<stop stop-color=\"#eeeeb0\" offset=\"95%%\"/></linearGradient></defs>\n",
            s->width, s->height, s->width, s->height);
    fputs(SVG_STYLE_OPEN, s->out);
    fputs(flamegraph_css, s->out); /* src/writers/flamegraph.css */
    fputs(SVG_STYLE_CLOSE, s->out);
    fprintf(s->out,
            "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"url(#np_background)\"/>\n",
            s->width, s->height);
}

static void svg_titles(struct svg *s) {
    const char *title = s->o->title ? s->o->title : "Flame Graph";
    char total[64];
    format_value(s->total, s->o->unit, total, sizeof(total));
    char *clean = clean_text(title, false);
    fprintf(s->out, "<text id=\"np_title\" x=\"%.1f\" y=\"24\">", s->width / 2.0);
    xml_text(s->out, clean ? clean : "", 1000);
    free(clean);
    fprintf(s->out, "</text>\n<text id=\"np_subtitle\" x=\"%.1f\" y=\"44\">%s, total %s</text>\n",
            s->width / 2.0,
            s->o->unit == NP_FLAME_NS ? "width: GPU time (ns, shown as ms)"
                                      : "width: samples (launch count)",
            total);
}

static void svg_legend(struct svg *s, const bool present[NP_FRAME_KIND_COUNT]) {
    static const char *const sample[NP_FRAME_KIND_COUNT] = {
        [NP_FRAME_KIND_NATIVE] = "f",
        [NP_FRAME_KIND_INLINED] = "f" NP_FRAME_INLINED_SUFFIX,
        [NP_FRAME_KIND_PYTHON] = "f (x.py:1)",
        [NP_FRAME_KIND_NCCL] = NP_FRAME_NCCL_PREFIX "AllReduce",
        [NP_FRAME_KIND_GPU] = NP_LEAF_KERNEL "k",
        [NP_FRAME_KIND_SYNTHETIC] = NP_FRAME_UNKNOWN};
    double x = XPAD;
    fputs("<g id=\"np_legend\">\n", s->out);
    for (int k = 0; k < NP_FRAME_KIND_COUNT; k++) {
        if (!present[k])
            continue;
        char colour[32];
        frame_colour(sample[k], (enum np_frame_kind)k, colour, sizeof(colour));
        fprintf(s->out,
                "<rect x=\"%.1f\" y=\"55\" width=\"10\" height=\"10\" fill=\"%s\" "
                "data-kind=\"%s\"/><text x=\"%.1f\" y=\"64\">%s</text>\n",
                x, colour, kind_label[k], x + 14, kind_label[k]);
        x += 14 + strlen(kind_label[k]) * FONT_SIZE * 0.55 + 14;
    }
    fputs("</g>\n", s->out);
}

static void svg_controls(struct svg *s) {
    fprintf(s->out,
            "<text id=\"np_unzoom\" class=\"hide\" x=\"%d\" y=\"24\">Reset Zoom</text>\n"
            "<text id=\"np_search\" x=\"%d\" y=\"24\">Search</text>\n"
            "<text id=\"np_details\" x=\"%d\" y=\"%d\"> </text>\n"
            "<text id=\"np_matched\" x=\"%d\" y=\"%d\"> </text>\n",
            XPAD, s->width - XPAD, XPAD, s->height - 17, s->width - XPAD, s->height - 17);
}

static void svg_frame(struct svg *s, const struct flame_tree *t, const struct flame_node *node) {
    double scale = s->frame_width / (double)s->total;
    double x = XPAD + (double)node->offset * scale, w = (double)node->value * scale;
    double y = s->height - YPAD_BOTTOM - (double)(node->depth + 1) * FRAME_HEIGHT;
    enum np_frame_kind k = np_frame_kind(node->name);
    char colour[32], value[64];
    frame_colour(node->name, k, colour, sizeof(colour));
    format_value(node->value, s->o->unit, value, sizeof(value));

    fputs("<g data-n=\"", s->out);
    xml_text(s->out, node->name, NAME_MAX_BYTES);
    fprintf(s->out, "\" data-v=\"%llu\" data-o=\"%llu\" data-d=\"%u\" data-p=\"%d\"><title>",
            (unsigned long long)node->value, (unsigned long long)node->offset, node->depth,
            node->parent >= 0 ? t->nodes[node->parent].pre : -1);
    xml_text(s->out, node->name, NAME_MAX_BYTES);
    fprintf(s->out, " (%s, %.2f%%)</title>", value, 100.0 * (double)node->value / (double)s->total);
    fprintf(s->out,
            "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" fill=\"%s\" rx=\"2\" "
            "ry=\"2\"/><text x=\"%.2f\" y=\"%.1f\">",
            x, y, w, FRAME_HEIGHT - 1, colour, x + 3, y + FRAME_HEIGHT - 5);
    write_label(s->out, node->name, w);
    fputs("</text></g>\n", s->out);
}

/* Marks the frames to draw (preorder numbers), their depth and kinds. */
static void choose_frames(struct flame_tree *t, double scale, bool *wide,
                          bool present[NP_FRAME_KIND_COUNT]) {
    for (size_t i = 0; i < t->n; i++) {
        const struct flame_node *node = &t->nodes[i];
        wide[i] = (double)node->value * scale >= MIN_FRAME_WIDTH &&
                  (node->parent < 0 || wide[node->parent]);
    }
    for (int32_t id = 0; id >= 0; id = next_preorder(t, id, wide)) {
        if (!wide[id])
            continue;
        t->nodes[id].pre = (int32_t)t->drawn++;
        if (t->nodes[id].depth > t->max_depth)
            t->max_depth = t->nodes[id].depth;
        present[np_frame_kind(t->nodes[id].name)] = true;
    }
}

static int render_tree(FILE *out, struct flame_tree *t, const struct np_flame_opts *o) {
    struct svg s = {.out = out, .o = o, .width = o->width ? o->width : NP_FLAME_DEFAULT_WIDTH};
    s.frame_width = s.width - 2 * XPAD;
    s.total = t->nodes[0].value;
    double scale = s.frame_width / (double)s.total;
    bool present[NP_FRAME_KIND_COUNT] = {0};
    bool *wide = calloc(t->n, sizeof(*wide));
    if (!wide)
        return -ENOMEM;
    layout_tree(t);
    choose_frames(t, scale, wide, present);
    s.height = YPAD_TOP + (int)(t->max_depth + 1) * FRAME_HEIGHT + YPAD_BOTTOM;

    svg_header(&s);
    svg_titles(&s);
    svg_legend(&s, present);
    svg_controls(&s);
    fprintf(out,
            "<g id=\"np_frames\" data-total=\"%llu\" data-xpad=\"%d\" data-width=\"%.2f\" "
            "data-charw=\"%.4f\">\n",
            (unsigned long long)s.total, XPAD, s.frame_width, FONT_SIZE * FONT_WIDTH);
    for (int32_t id = 0; id >= 0; id = next_preorder(t, id, wide))
        if (wide[id])
            svg_frame(&s, t, &t->nodes[id]);
    fputs("</g>\n", out);
    fputs(SVG_SCRIPT_OPEN, out);
    fputs(flamegraph_js, out); /* src/writers/flamegraph.js */
    fputs(SVG_SCRIPT_CLOSE, out);
    fputs("</svg>\n", out);
    free(wide);
    return 0;
}

static void render_empty(FILE *out, const struct np_flame_opts *o) {
    struct svg s = {.out = out, .o = o, .width = o->width ? o->width : NP_FLAME_DEFAULT_WIDTH};
    s.height = YPAD_TOP + 3 * FRAME_HEIGHT + YPAD_BOTTOM;
    svg_header(&s);
    svg_titles(&s);
    fprintf(out, "<text id=\"np_empty\" x=\"%.1f\" y=\"%d\">no samples</text>\n</svg>\n",
            s.width / 2.0, YPAD_TOP + 2 * FRAME_HEIGHT);
}

/* ---- entry points ---------------------------------------------------------------- */

static int render_input(struct flame_input *in, FILE *out, const struct np_flame_opts *o) {
    int err = 0;
    if (in->stats.total == 0) {
        render_empty(out, o);
    } else {
        struct flame_tree t;
        int width = o->width ? o->width : NP_FLAME_DEFAULT_WIDTH;
        err = build_tree(in, &t, (double)(width - 2 * XPAD) / (double)in->stats.total);
        if (!err)
            err = render_tree(out, &t, o);
        free(t.nodes);
    }
    if (!err && (fflush(out) != 0 || ferror(out)))
        err = -EIO;
    return err;
}

int np_flamegraph_render_stats(FILE *in, FILE *out, const struct np_flame_opts *o,
                               struct np_flame_stats *stats) {
    struct np_flame_opts defaults = {0};
    struct flame_input input = {0};
    if (!o)
        o = &defaults;
    int err = read_input(in, &input, o->source ? o->source : "input");
    if (!err)
        err = render_input(&input, out, o);
    if (stats)
        *stats = input.stats;
    free_input(&input);
    return err;
}

struct svg_job {
    struct flame_input *input;
    const struct np_flame_opts *opts;
};

static int fill_svg(FILE *out, void *ctx) {
    struct svg_job *job = ctx;
    return render_input(job->input, out, job->opts);
}

/* Writes the SVG of input to path, atomically; 0 or -errno. */
static int write_svg(struct flame_input *input, const char *path, const struct np_flame_opts *o) {
    struct svg_job job = {input, o};
    return np_write_atomic(path, fill_svg, &job);
}

/* Renders in_path to out_path unless its weights are all zero and
 * skip_empty: 0, 1 when skipped, -errno (said, but for a missing input). */
static int render_file(const char *in_path, const char *out_path, const struct np_flame_opts *o,
                       bool skip_empty) {
    FILE *in = fopen(in_path, "re");
    if (!in) {
        int err = -errno;
        if (err != -ENOENT) /* a missing input is the caller's to say */
            np_err("cannot read %s: %s", in_path, strerror(-err));
        return err;
    }
    struct flame_input input = {0};
    struct np_flame_opts opts = *o;
    opts.source = in_path;
    int err = read_input(in, &input, in_path);
    fclose(in);
    if (!err && skip_empty && input.stats.total == 0) {
        free_input(&input);
        return 1;
    }
    if (!err) {
        err = write_svg(&input, out_path, &opts);
        if (err)
            np_err("cannot write %s: %s", out_path, strerror(-err));
    }
    free_input(&input);
    return err;
}

int np_flamegraph_file(const char *in_path, const char *out_path, const struct np_flame_opts *o) {
    return render_file(in_path, out_path, o, false);
}

/* Renders dir/in_name to dir/out_name (render_file's results). */
static int write_one(const char *dir, const char *in_name, const char *out_name,
                     const struct np_flame_opts *o, bool skip_empty) {
    char *in_path = np_rec_path(dir, in_name), *out_path = np_rec_path(dir, out_name);
    int err = in_path && out_path ? render_file(in_path, out_path, o, skip_empty) : -ENOMEM;
    if (err == -ENOMEM)
        np_err("%s: out of memory", dir);
    free(in_path);
    free(out_path);
    return err;
}

/* No GPU time: no flame graph of it, and no stale one either. */
static int remove_gpu_ns_graph(const char *dir) {
    char *path = np_rec_path(dir, NP_REC_FLAMEGRAPH_GPU_NS_SVG);
    if (!path) {
        np_err("%s: out of memory", dir);
        return -ENOMEM;
    }
    unlink(path);
    free(path);
    return 0;
}

int np_write_flamegraphs(const char *dir) {
    struct np_flame_opts count = {.title = "ncclprobe: launches by stack", .unit = NP_FLAME_COUNT};
    struct np_flame_opts ns = {.title = "ncclprobe: GPU time by stack", .unit = NP_FLAME_NS};
    int err = write_one(dir, NP_REC_MERGED_FOLDED, NP_REC_FLAMEGRAPH_SVG, &count, false);
    if (err == -ENOENT)
        np_warn("%s/" NP_REC_MERGED_FOLDED " does not exist: no flame graph", dir);
    if (err < 0)
        return err;
    err = write_one(dir, NP_REC_MERGED_GPU_NS_FOLDED, NP_REC_FLAMEGRAPH_GPU_NS_SVG, &ns, true);
    return err == 1 || err == -ENOENT ? remove_gpu_ns_graph(dir) : err;
}
