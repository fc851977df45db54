/*
 * The owner blob: who holds a blob container, and what of it is the truth (docs/ha.md,
 * "The owner blob"). Every operation on it lives here; the mirror (which writes the
 * container) and the server group (which watches it) call these and nothing else.
 *
 * The blob `owner` of the container carries an Azure lease, held by the one server that
 * may write the container, and metadata written only under that lease:
 *   url         the holder's advertised URL ("-": a server outside any group)
 *   generation  the generation the holder claimed: it writes blobs of no other, and a
 *               later holder claims a higher one
 *   snapshot    the snapshot a restore starts from ("-": none yet)
 *   journal     the journal blob after that snapshot, the one appended to now ("-": none)
 *   since       when the holder took the container (wall clock, ms)
 *   to          written by a holder that hands the container over, with its lease, just
 *               before it releases it: the server it hands it to (absent otherwise; the
 *               next holder's first metadata write drops it)
 * `snapshot` and `journal` always change together, in one metadata write: a restore and a
 * standby's copy read exactly that snapshot and that journal, never "the newest in a
 * listing", so blobs left behind by a server that lost the lease are never read.
 *
 * Every call answers OWNER_OK, OWNER_AGAIN (no answer, or a transient error: the request
 * may or may not have taken effect; try again) or OWNER_FENCED (the lease is another
 * server's, or the blob is gone: this server must never write the container again). The
 * caller passes a blob client it alone uses at the time.
 */
#ifndef MX_OWNER_H
#define MX_OWNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "blob/blob.h"

#define OWNER_BLOB          "owner"
#define OWNER_LEASE_SECONDS 15 /* Azure's shortest: a crashed owner is replaced soonest */

enum owner_rc { OWNER_OK = 0, OWNER_AGAIN, OWNER_FENCED };

/* What the owner blob says. Names are "" where the blob names none. */
struct owner_meta {
    char url[256];
    uint64_t generation;
    char snapshot[96];
    char journal[96];
    int64_t since_ms;
    char to[256]; /* the server a handover gives the container to, or "" */
};

/* The owner blob as one read saw it. */
struct owner_view {
    bool exists;          /* false: no owner blob (a new container) */
    char lease_state[16]; /* available, leased, expired, breaking, broken */
    char etag[BLOB_ETAG_MAX];
    struct owner_meta meta;
};

/* True when the lease state lets a server acquire the lease now. */
bool owner_lease_free(const char *lease_state);

/* Reads the owner blob. OWNER_OK (v->exists false when there is none) or OWNER_AGAIN. */
enum owner_rc owner_read(struct blob_client *c, struct owner_view *v, struct blob_result *r);
/* The view of an owner blob listed with its metadata (blob_list_page_meta()): the same as
 * owner_read() gives, from one listing of many partitions' owner blobs. */
void owner_from_item(const struct blob_item *it, struct owner_view *v);

/* Creates the owner blob when there is none (an existing one is left as it is). */
enum owner_rc owner_create(struct blob_client *c, struct blob_result *r);

/* Takes the lease with `lease_id`. OWNER_OK, OWNER_AGAIN (another holds it: r->status 409,
 * or a transient error), or OWNER_FENCED for any other refusal (see r). */
enum owner_rc owner_take(struct blob_client *c, const char *lease_id, struct blob_result *r);

/* Renews it. OWNER_FENCED: it is not ours any more. */
enum owner_rc owner_renew(struct blob_client *c, const char *lease_id, struct blob_result *r);

/* Writes the metadata, under the lease. OWNER_FENCED: the lease is not ours. */
enum owner_rc owner_publish(struct blob_client *c, const char *lease_id, const struct owner_meta *m,
                            struct blob_result *r);

/* Names `to` in the metadata as the server the container is handed to, under the lease,
 * just before owner_release(): with the rest as `known` (what this holder surely wrote
 * last), or, NULL, as the blob has it (read first: one request more). */
enum owner_rc owner_name_next(struct blob_client *c, const char *lease_id,
                              const struct owner_meta *known, const char *to,
                              struct blob_result *r);

/* Releases the lease (best effort: it lapses by itself otherwise). */
enum owner_rc owner_release(struct blob_client *c, const char *lease_id, struct blob_result *r);

/* Breaks the lease at once, only if the blob is still at `etag` (as read when the decision
 * was made): a server that took the container since has written its name first, changing
 * the ETag, and its lease is not broken. OWNER_OK: broken, or there was no lease to break. */
enum owner_rc owner_break_if(struct blob_client *c, const char *etag, struct blob_result *r);

/* Seals a journal blob the owner blob named: nothing appended to it after this lands.
 * OWNER_OK also when it is sealed already or gone. */
enum owner_rc owner_seal(struct blob_client *c, const char *journal, struct blob_result *r);

#endif
