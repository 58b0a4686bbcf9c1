/* jsonl.h — a small JSON reader for one line of a log: numbers stay exact
 * 64-bit integers, strings are not unescaped beyond what logs need. */
#ifndef KVE_JSONL_H
#define KVE_JSONL_H

#include <stddef.h>
#include <stdint.h>

typedef enum { KVE_J_NULL, KVE_J_BOOL, KVE_J_INT, KVE_J_STR, KVE_J_ARR, KVE_J_OBJ } kve_jkind;

/* One value; children of arrays and objects are linked through next. */
typedef struct kve_jnode {
    kve_jkind kind;
    int neg;                 /* KVE_J_INT: value is -u */
    uint64_t u;              /* KVE_J_INT magnitude, KVE_J_BOOL 0/1 */
    const char *s, *key;     /* KVE_J_STR text; the member name inside an object */
    size_t slen, klen;
    int32_t first, next;     /* node indices, -1 = none */
    uint32_t count;          /* children */
} kve_jnode;

typedef struct kve_jdoc {
    kve_jnode *nodes;
    size_t n, cap;
    char err[160];           /* why parsing failed, with the byte offset */
} kve_jdoc;

/* Parses @p text (NUL-terminated) into @p doc (root = node 0); 0 on
 * success, -1 with doc->err set. Free with kve_json_free. */
int kve_json_parse(kve_jdoc *doc, const char *text);
void kve_json_free(kve_jdoc *doc);

/* The member @p name of object node @p obj, or NULL. */
const kve_jnode *kve_json_get(const kve_jdoc *doc, const kve_jnode *obj, const char *name);
/* Child @p i (0-based) of an array or object, or NULL. */
const kve_jnode *kve_json_at(const kve_jdoc *doc, const kve_jnode *arr, uint32_t i);

#endif
