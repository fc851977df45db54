/*
 * Rows, leases and records in memory (see store.h): made, copied and freed, with no SQL.
 */
#include <stdlib.h>
#include <string.h>

#include "persistence/store.h"

void store_lease_clear(struct store_lease *l)
{
    mx_str_unref(l->owner);
    mx_str_unref(l->metadata);
    memset(l, 0, sizeof *l);
}

void store_lease_copy(struct store_lease *dst, const struct store_lease *src)
{
    *dst = *src;
    mx_str_ref(dst->owner);
    mx_str_ref(dst->metadata);
}

void store_row_clear(struct store_row *row)
{
    for (uint32_t i = 0; i < row->nleases; i++)
        store_lease_clear(&row->leases[i]);
    free(row->leases);
    memset(row, 0, sizeof *row);
}

int store_row_add(struct store_row *row, const struct store_lease *l)
{
    if (row->nleases == UINT32_MAX)
        return -1;
    struct store_lease *v = realloc(row->leases, ((size_t)row->nleases + 1) * sizeof *v);
    if (!v)
        return -1;
    row->leases = v;
    store_lease_copy(&v[row->nleases++], l);
    return 0;
}

struct store_rec *store_rec_new(const char *name, size_t len, uint64_t index, uint32_t limit,
                                uint32_t nput, uint32_t ndel)
{
    struct store_rec *rec = malloc(sizeof *rec + len + 1);
    if (!rec)
        return NULL;
    memset(rec, 0, sizeof *rec);
    rec->index = index;
    rec->limit = limit;
    if (nput && !(rec->put = calloc(nput, sizeof *rec->put)))
        goto oom;
    if (ndel && !(rec->del = calloc(ndel, sizeof *rec->del)))
        goto oom;
    rec->nput = nput;
    rec->ndel = ndel;
    rec->name_len = (uint16_t)len;
    memcpy(rec->name, name, len);
    rec->name[len] = '\0';
    return rec;
oom:
    free(rec->put);
    free(rec);
    return NULL;
}

struct store_rec *store_rec_from_row(const char *name, size_t len, const struct store_row *row)
{
    struct store_rec *rec = store_rec_new(name, len, row->index, row->limit, row->nleases, 0);
    if (!rec)
        return NULL;
    for (uint32_t i = 0; i < row->nleases; i++)
        store_lease_copy(&rec->put[i], &row->leases[i]);
    rec->drop = row->nleases == 0;
    return rec;
}

void store_rec_free(struct store_rec *rec)
{
    if (rec) {
        for (uint32_t i = 0; i < rec->nput; i++)
            store_lease_clear(&rec->put[i]);
        free(rec->put);
        free(rec->del);
        free(rec);
    }
}
