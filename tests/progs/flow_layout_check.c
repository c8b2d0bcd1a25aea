/* flow_layout_check.c - prints what --nccl-flows reads from one libnccl, as
 * np_flow_layout_load (src/attach/nccl_flow_layout.c, linked in) found it,
 * for tests/test_nccl_flow_versions.py to compare with gdb's view of the
 * same file. A test driver, not a command (built by the top Makefile).
 *
 *   flow_layout_check LIBNCCL
 *
 * One JSON object on stdout:
 *   status, missing          the layout's verdict ("" when nothing is missing)
 *   fields {"ncclProxyOp.nsteps": {offset, size, bit_size, bit_shift} | null}
 *   symbols {name: {vaddr, file_offset} | null}
 *   save_proxy_clone         SaveProxy is a compiler clone
 *   save_proxy_args {"comm": "rdi", "connIndex": "cfa+0", "channel": "none", ...}
 *                            the clone's parameters at its entry ({} for no clone)
 *   patterns_from_dwarf, patterns ["RING", ...]
 * Exit 0, or 2 on bad usage / no memory. */
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "attach/nccl_flow_layout.h"

static cJSON *fields_json(const struct np_flow_layout *l) {
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; i < NPFF_COUNT; i++) {
        const struct np_field *f = &l->f[i];
        const char *name = np_flow_field_name((enum np_flow_field)i);
        if (f->offset < 0) {
            cJSON_AddNullToObject(o, name);
            continue;
        }
        cJSON *x = cJSON_AddObjectToObject(o, name);
        cJSON_AddNumberToObject(x, "offset", (double)f->offset);
        cJSON_AddNumberToObject(x, "size", f->size);
        cJSON_AddNumberToObject(x, "bit_size", f->bit_size);
        cJSON_AddNumberToObject(x, "bit_shift", f->bit_shift);
    }
    return o;
}

static cJSON *symbols_json(const struct np_flow_layout *l) {
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; i < NP_FLOW_SYMS; i++) {
        const char *name = np_flow_symbol_name((enum np_flow_symbol)i);
        if (!l->sym_vaddr[i]) {
            cJSON_AddNullToObject(o, name);
            continue;
        }
        cJSON *x = cJSON_AddObjectToObject(o, name);
        cJSON_AddNumberToObject(x, "vaddr", (double)l->sym_vaddr[i]);
        cJSON_AddNumberToObject(x, "file_offset", (double)l->sym_offset[i]);
    }
    return o;
}

static cJSON *args_json(const struct np_flow_layout *l) {
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; l->save_proxy_clone && i < NP_FLOW_ARGS; i++) {
        char where[24];
        np_param_loc_name(&l->save_proxy_args[i], where, sizeof(where));
        cJSON_AddStringToObject(o, np_flow_arg_name((enum np_flow_arg)i), where);
    }
    return o;
}

static cJSON *layout_json(const struct np_flow_layout *l) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "status", l->status);
    cJSON_AddStringToObject(o, "missing", l->missing);
    cJSON_AddItemToObject(o, "fields", fields_json(l));
    cJSON_AddItemToObject(o, "symbols", symbols_json(l));
    cJSON_AddBoolToObject(o, "save_proxy_clone", l->save_proxy_clone);
    cJSON_AddItemToObject(o, "save_proxy_args", args_json(l));
    cJSON_AddBoolToObject(o, "patterns_from_dwarf", l->patterns_from_dwarf);
    cJSON *patterns = cJSON_AddArrayToObject(o, "patterns");
    for (int i = 0; i < NP_FLOW_PATTERNS && l->pattern[i][0]; i++)
        cJSON_AddItemToArray(patterns, cJSON_CreateString(l->pattern[i]));
    return o;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: flow_layout_check LIBNCCL\n");
        return 2;
    }
    static struct np_flow_layout l;
    np_flow_layout_load(argv[1], &l);
    cJSON *o = layout_json(&l);
    char *text = o ? cJSON_PrintUnformatted(o) : NULL;
    if (!text) {
        fprintf(stderr, "flow_layout_check: out of memory\n");
        return 2;
    }
    printf("%s\n", text);
    free(text);
    cJSON_Delete(o);
    return 0;
}
