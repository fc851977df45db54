/*
 * The blob mirror's decisions without a blob store: how queued batches are packed into
 * Append Blocks and split at line ends, which blobs a restore reads and in which order,
 * and the blob names they rest on. Last, mirror_restore() against a loopback server that
 * answers listings as told: a listing that failed is never read as a container's content.
 */
#include "tests/unit/testutil.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "persistence/journal.h"
#include "persistence/mirror_internal.h"
#include "persistence/mirror_plan.h"

/* ---- packing --------------------------------------------------------------------- */

struct block {
    size_t first_batch, nbatches, len;
    uint64_t first_seq, last_seq;
};

/* Packs a queue of batches the way the mirror thread does: a block takes batches until one
 * is refused or it is full; the next block begins with the batch refused. Batch i holds
 * `per_batch` changes, numbered on from 1. Returns the number of blocks. */
static size_t pack_queue(const size_t *sizes, size_t n, size_t max, uint64_t per_batch,
                         struct block *out, size_t cap)
{
    size_t nblocks = 0;
    for (size_t i = 0; i < n;) {
        struct mirror_pack p;
        mirror_pack_init(&p, max);
        size_t start = i;
        while (i < n && mirror_pack_offer(&p, sizes[i], i * per_batch + 1, (i + 1) * per_batch))
            i++;
        assert_true(p.nbatches >= 1); /* at least one batch per block: the queue moves */
        assert_int_equal(p.nbatches, i - start);
        assert_true(nblocks < cap);
        out[nblocks++] = (struct block){start, p.nbatches, p.len, p.first_seq, p.last_seq};
    }
    return nblocks;
}

/* Every batch in exactly one block, in order, and the blocks' changes contiguous. */
static void assert_covers(const struct block *b, size_t nblocks, const size_t *sizes, size_t n,
                          uint64_t per_batch)
{
    size_t next = 0;
    for (size_t k = 0; k < nblocks; k++) {
        assert_int_equal(b[k].first_batch, next);
        size_t len = 0;
        for (size_t i = 0; i < b[k].nbatches; i++)
            len += sizes[next + i];
        assert_int_equal(b[k].len, len);
        assert_int_equal(b[k].first_seq, next * per_batch + 1);
        next += b[k].nbatches;
        assert_int_equal(b[k].last_seq, next * per_batch);
    }
    assert_int_equal(next, n);
}

static void pack_empty_queue(void **st)
{
    (void)st;
    struct block b[1];
    assert_int_equal(pack_queue(NULL, 0, MAX_BLOCK, 1, b, 1), 0);
    struct mirror_pack p;
    mirror_pack_init(&p, MAX_BLOCK);
    assert_int_equal(p.max, MAX_BLOCK);
    assert_int_equal(p.len, 0);
    assert_int_equal(p.nbatches, 0);
    assert_false(p.full);
    assert_int_equal(mirror_pack_piece("", 0, MAX_BLOCK), 0);
}

static void pack_one_small_batch(void **st)
{
    (void)st;
    size_t sizes[] = {180};
    struct block b[2];
    size_t n = pack_queue(sizes, 1, MAX_BLOCK, 3, b, 2);
    assert_int_equal(n, 1);
    assert_int_equal(b[0].nbatches, 1);
    assert_int_equal(b[0].len, 180);
    assert_int_equal(b[0].first_seq, 1);
    assert_int_equal(b[0].last_seq, 3);
    /* A small block is not full: the next queued batch joins it. */
    struct mirror_pack p;
    mirror_pack_init(&p, MAX_BLOCK);
    assert_true(mirror_pack_offer(&p, 180, 1, 3));
    assert_false(p.full);
    assert_true(mirror_pack_offer(&p, 200, 4, 9));
    assert_int_equal(p.len, 380);
    assert_int_equal(p.first_seq, 1);
    assert_int_equal(p.last_seq, 9);
}

/* Two halves fill a block to the byte; one byte more and the second waits. */
static void pack_batches_exactly_fill_a_block(void **st)
{
    (void)st;
    size_t half = MAX_BLOCK / 2;
    size_t exact[] = {half, half, 10};
    struct block b[4];
    size_t n = pack_queue(exact, 3, MAX_BLOCK, 1, b, 4);
    assert_int_equal(n, 2);
    assert_int_equal(b[0].nbatches, 2);
    assert_int_equal(b[0].len, MAX_BLOCK);
    assert_covers(b, n, exact, 3, 1);

    size_t over[] = {half - 10, half + 11, 10};
    n = pack_queue(over, 3, MAX_BLOCK, 1, b, 4);
    assert_int_equal(n, 3);
    assert_int_equal(b[0].nbatches, 1);
    assert_int_equal(b[1].nbatches, 1); /* the refused batch begins the next block */
    assert_int_equal(b[1].len, half + 11);
    assert_covers(b, n, over, 3, 1);

    /* A refused batch leaves the block as it was, and the block takes no more. */
    struct mirror_pack p;
    mirror_pack_init(&p, MAX_BLOCK);
    assert_true(mirror_pack_offer(&p, half - 10, 1, 1));
    assert_false(mirror_pack_offer(&p, half + 11, 2, 2));
    assert_true(p.full);
    assert_int_equal(p.len, half - 10);
    assert_int_equal(p.last_seq, 1);
    assert_false(mirror_pack_offer(&p, 1, 3, 3));
    assert_int_equal(p.nbatches, 1);
}

/* Many small batches: each block takes whole batches until it holds more than half a
 * block, never more than a block. */
static void pack_many_batches_overflow_a_block(void **st)
{
    (void)st;
    enum { N = 3000 };
    static size_t sizes[N];
    for (size_t i = 0; i < N; i++)
        sizes[i] = 4096 + (i * 7919) % 3001;
    static struct block b[N];
    size_t n = pack_queue(sizes, N, MAX_BLOCK, 5, b, N);
    assert_true(n > 1);
    assert_covers(b, n, sizes, N, 5);
    for (size_t k = 0; k < n; k++) {
        assert_true(b[k].len <= MAX_BLOCK);
        if (k + 1 < n) {
            assert_true(b[k].len > MAX_BLOCK / 2); /* full: more than half */
            assert_true(b[k].len - sizes[b[k].first_batch + b[k].nbatches - 1] <= MAX_BLOCK / 2);
        }
    }
}

/* A batch larger than a block goes alone, first or not. */
static void pack_batch_bigger_than_a_block(void **st)
{
    (void)st;
    size_t sizes[] = {MAX_BLOCK + 5, 10, 100, 2 * MAX_BLOCK, 7};
    struct block b[8];
    size_t n = pack_queue(sizes, 5, MAX_BLOCK, 2, b, 8);
    assert_covers(b, n, sizes, 5, 2);
    assert_int_equal(n, 4);
    assert_int_equal(b[0].nbatches, 1);
    assert_int_equal(b[0].len, MAX_BLOCK + 5);
    assert_int_equal(b[1].nbatches, 2); /* 10 and 100; the large one does not fit */
    assert_int_equal(b[2].nbatches, 1);
    assert_int_equal(b[2].len, 2 * MAX_BLOCK);
    assert_int_equal(b[3].nbatches, 1);
}

/* Splits `len` bytes the way the mirror thread does; checks each piece and that the
 * pieces are the input, every byte once, in order. Returns the number of pieces. */
static size_t split_all(const char *data, size_t len, size_t max)
{
    size_t off = 0, pieces = 0;
    while (off < len) {
        size_t n = mirror_pack_piece(data + off, len - off, max);
        assert_true(n > 0);
        assert_true(n <= max);
        assert_int_equal(data[off + n - 1], '\n'); /* never mid-line */
        if (n < len - off)                         /* and as much as fits */
            assert_null(memchr(data + off + n, '\n', max - n));
        off += n;
        pieces++;
    }
    assert_int_equal(off, len);
    return pieces;
}

static void split_at_line_ends(void **st)
{
    (void)st;
    /* Lines of 1 to 300 bytes, in blocks of 1000. */
    char text[20000];
    size_t len = 0;
    for (size_t i = 0; len < sizeof text - 400; i++) {
        size_t n = 1 + (i * 131) % 300;
        memset(text + len, 'a' + (char)(i % 26), n - 1);
        text[len + n - 1] = '\n';
        len += n;
    }
    assert_true(split_all(text, len, 1000) >= len / 1000);
    /* What fits is one piece, whole. */
    assert_int_equal(mirror_pack_piece(text, 999, 1000), 999);
    assert_int_equal(mirror_pack_piece(text, 1000, 1000), 1000);
    /* A line ending exactly at the limit fills the piece. */
    char exact[] = "aaaa\nbbbb\ncc";
    assert_int_equal(mirror_pack_piece(exact, 12, 10), 10);
    assert_int_equal(mirror_pack_piece(exact, 12, 9), 5);
}

/* Real journal lines of a batch larger than a block: decoded piece by piece, every change
 * comes back once, in order. */
static void split_encoded_batch(void **st)
{
    (void)st;
    struct mx_buf block = {0};
    char owner[256]; /* an owner is at most 256 bytes */
    for (uint64_t seq = 1; seq <= 400; seq++) {
        size_t olen = 1 + (seq * 37) % (sizeof owner - 1);
        memset(owner, 'o', olen);
        char name[32];
        int nlen = snprintf(name, sizeof name, "r/%" PRIu64, seq);
        struct store_rec *rec = store_rec_new(name, (size_t)nlen, seq, 1, 1, 0);
        rec->put[0] = (struct store_lease){.held = true, .token = seq};
        rec->put[0].owner = mx_str_new(owner, olen);
        rec->commit_seq = seq;
        jr_encode_rec(&block, rec);
        store_rec_free(rec);
    }
    assert_false(block.oom);
    size_t max = 4096;
    assert_true(block.len > 10 * max);
    assert_true(split_all(block.p, block.len, max) > 10);
    uint64_t want = 1;
    for (size_t off = 0; off < block.len;) {
        size_t n = mirror_pack_piece(block.p + off, block.len - off, max);
        for (size_t at = off; at < off + n;) {
            const char *nl = memchr(block.p + at, '\n', off + n - at);
            assert_non_null(nl);
            struct jr_line l;
            char why[128];
            if (!jr_decode(block.p + at, (size_t)(nl - (block.p + at)), &l, why, sizeof why))
                fail_msg("piece at %zu: %s", off, why);
            assert_int_equal(l.seq, want++);
            jr_line_clear(&l);
            at = (size_t)(nl - block.p) + 1;
        }
        off += n;
    }
    assert_int_equal(want, 401);
    mx_buf_free(&block);
}

/* A single line longer than a block has no line end to cut at: no piece of it fits (0).
 * No change's line comes near 4 MiB; this pins what happens if one did. */
static void split_line_bigger_than_a_block(void **st)
{
    (void)st;
    size_t max = 64;
    char text[200];
    memset(text, 'x', sizeof text);
    text[sizeof text - 1] = '\n';
    assert_int_equal(mirror_pack_piece(text, sizeof text, max), 0);
    /* Lines before it still go; then nothing more fits. */
    memcpy(text, "short\n", 6);
    assert_int_equal(mirror_pack_piece(text, sizeof text, max), 6);
    assert_int_equal(mirror_pack_piece(text + 6, sizeof text - 6, max), 0);
    /* The same line, once it fits, goes whole. */
    assert_int_equal(mirror_pack_piece(text + 6, sizeof text - 6, sizeof text), sizeof text - 6);
}

/* ---- restore planning ------------------------------------------------------------ */

static char snap_names[16][96], jr_names[16][96];

static const char *snap(size_t i, uint64_t gen, uint64_t seq)
{
    mirror_snapshot_name(snap_names[i], sizeof snap_names[i], gen, seq);
    return snap_names[i];
}

static const char *jr(size_t i, uint64_t gen, uint64_t first)
{
    mirror_journal_name(jr_names[i], sizeof jr_names[i], gen, first);
    return jr_names[i];
}

static void plan_ok(const char *const *names, size_t n, struct mirror_plan *plan)
{
    char err[256] = "";
    if (mirror_plan_restore(names, n, plan, err, sizeof err) != 0)
        fail_msg("plan failed: %s", err);
}

static void assert_journal(const struct mirror_plan *plan, const uint64_t *want, size_t n)
{
    assert_int_equal(plan->njournal, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(plan->journal[i], want[i]);
}

static void plan_empty_container(void **st)
{
    (void)st;
    struct mirror_plan plan;
    plan_ok(NULL, 0, &plan);
    assert_string_equal(plan.snapshot, "");
    assert_int_equal(plan.njournal, 0);
    mirror_plan_free(&plan);
    /* Other blobs are not a mirror. */
    const char *junk[] = {"owner",
                          "snapshots/",
                          "snapshots/0000000001-00000000000000000007.json",
                          "journal/0000000001/0000000000000000007",
                          "journal/0000000001-00000000000000000007",
                          "notes.txt"};
    plan_ok(junk, 6, &plan);
    assert_string_equal(plan.snapshot, "");
    assert_int_equal(plan.njournal, 0);
    mirror_plan_free(&plan);
}

static void plan_journal_without_snapshot(void **st)
{
    (void)st;
    const char *names[] = {"owner", jr(0, 2, 1), jr(1, 2, 57), "snapshots/junk"};
    struct mirror_plan plan;
    char err[256] = "";
    assert_int_equal(mirror_plan_restore(names, 4, &plan, err, sizeof err), -1);
    assert_non_null(strstr(err, "journal but no snapshot"));
    mirror_plan_free(&plan);
}

/* The newest snapshot: highest generation first, then highest seq; in any listing order. */
static void plan_newest_snapshot(void **st)
{
    (void)st;
    const char *names[] = {snap(0, 2, 900),  snap(1, 3, 40), "owner",      snap(2, 3, 120),
                           snap(3, 1, 5000), snap(4, 3, 99), jr(0, 3, 121)};
    size_t n = sizeof names / sizeof names[0];
    for (size_t rot = 0; rot < n; rot++) {
        const char *order[sizeof names / sizeof names[0]];
        for (size_t i = 0; i < n; i++)
            order[i] = names[(i + rot) % n];
        struct mirror_plan plan;
        plan_ok(order, n, &plan);
        assert_string_equal(plan.snapshot, snap_names[2]);
        assert_int_equal(plan.generation, 3);
        assert_int_equal(plan.seq, 120);
        uint64_t want[] = {121};
        assert_journal(&plan, want, 1);
        mirror_plan_free(&plan);
    }
}

/* The snapshot's generation's journal, in sequence order, whatever the listing order;
 * blobs wholly before the snapshot left out; other generations ignored. */
static void plan_journal_in_order(void **st)
{
    (void)st;
    const char *names[] = {jr(0, 3, 250), jr(1, 4, 300),  jr(2, 3, 101), snap(0, 3, 100),
                           jr(3, 2, 400), jr(4, 3, 180),  jr(5, 3, 50),  jr(6, 3, 1),
                           "journal/x",   snap(1, 2, 399)};
    struct mirror_plan plan;
    plan_ok(names, sizeof names / sizeof names[0], &plan);
    assert_int_equal(plan.generation, 3);
    uint64_t want[] = {101, 180, 250};
    assert_journal(&plan, want, 3);
    mirror_plan_free(&plan);
}

/* A blob that began before the snapshot is read when the next one begins after it: its
 * tail may hold changes the snapshot lacks (a restore skips the lines it has). */
static void plan_journal_straddling_the_snapshot(void **st)
{
    (void)st;
    const char *names[] = {snap(0, 5, 100), jr(0, 5, 1), jr(1, 5, 60), jr(2, 5, 130)};
    struct mirror_plan plan;
    plan_ok(names, 4, &plan);
    uint64_t want[] = {60, 130};
    assert_journal(&plan, want, 2);
    mirror_plan_free(&plan);
    /* The last blob is always read, even one that began before the snapshot. */
    const char *last[] = {snap(0, 5, 100), jr(0, 5, 1)};
    plan_ok(last, 2, &plan);
    uint64_t want1[] = {1};
    assert_journal(&plan, want1, 1);
    mirror_plan_free(&plan);
    /* A snapshot and no journal of its generation: the snapshot alone. */
    const char *alone[] = {snap(0, 5, 100), jr(0, 4, 1)};
    plan_ok(alone, 2, &plan);
    assert_string_equal(plan.snapshot, snap_names[0]);
    assert_int_equal(plan.njournal, 0);
    mirror_plan_free(&plan);
}

/* Names cannot show a gap: a journal that begins after seq + 1 is still planned, in
 * order; replaying its lines notices the skipped sequence numbers and warns. */
static void plan_gap_is_not_a_plan_error(void **st)
{
    (void)st;
    const char *names[] = {snap(0, 7, 100), jr(0, 7, 400), jr(1, 7, 150)};
    struct mirror_plan plan;
    plan_ok(names, 3, &plan);
    uint64_t want[] = {150, 400};
    assert_journal(&plan, want, 2);
    mirror_plan_free(&plan);
}

/* A newer generation's journal without its snapshot is ignored: a generation writes its
 * snapshot before its journal, so it cannot hold changes the snapshot lacks. */
static void plan_newer_generation_journal_ignored(void **st)
{
    (void)st;
    const char *names[] = {snap(0, 3, 10), jr(0, 3, 11), jr(1, 4, 50)};
    struct mirror_plan plan;
    plan_ok(names, 3, &plan);
    assert_int_equal(plan.generation, 3);
    uint64_t want[] = {11};
    assert_journal(&plan, want, 1);
    mirror_plan_free(&plan);
}

/* The owner blob names the truth: a listing's newest generation may be what a server that
 * lost the container left behind (a stalled standby's snapshot of a generation it never
 * named). Restricted to the named journal's generation, the stray is not read. */
static void plan_of_a_generation_ignores_a_later_stray(void **st)
{
    (void)st;
    const char *names[] = {snap(0, 2, 40), jr(0, 2, 41),   snap(1, 3, 90),
                           jr(1, 3, 91),   snap(2, 2, 10), jr(2, 2, 11)};
    struct mirror_plan plan;
    char err[256] = "";
    assert_int_equal(mirror_plan_restore_gen(names, 6, 2, &plan, err, sizeof err), 0);
    assert_int_equal(plan.generation, 2);
    assert_int_equal(plan.seq, 40);
    uint64_t want[] = {41};
    assert_journal(&plan, want, 1);
    mirror_plan_free(&plan);
    /* Any generation (an owner blob naming nothing): the newest, as before. */
    plan_ok(names, 6, &plan);
    assert_int_equal(plan.generation, 3);
    mirror_plan_free(&plan);
}

/* The plan the owner blob names: exactly its snapshot and its journal. */
static void plan_named_reads_exactly_the_named_pair(void **st)
{
    (void)st;
    struct mirror_plan plan;
    char err[256] = "";
    assert_int_equal(mirror_plan_named(snap(0, 7, 100), jr(0, 7, 101), &plan, err, sizeof err), 0);
    assert_string_equal(plan.snapshot, snap_names[0]);
    assert_int_equal(plan.generation, 7);
    assert_int_equal(plan.seq, 100);
    uint64_t want[] = {101};
    assert_journal(&plan, want, 1);
    mirror_plan_free(&plan);
    /* A snapshot whose journal is not named yet. */
    assert_int_equal(mirror_plan_named(snap(0, 7, 100), "", &plan, err, sizeof err), 0);
    assert_int_equal(plan.njournal, 0);
    mirror_plan_free(&plan);
    /* A journal that begins before the snapshot's next change is read from there on. */
    assert_int_equal(mirror_plan_named(snap(0, 7, 100), jr(0, 7, 60), &plan, err, sizeof err), 0);
    mirror_plan_free(&plan);
}

static void plan_named_refuses_what_cannot_be_whole(void **st)
{
    (void)st;
    struct mirror_plan plan;
    char err[256] = "";
    /* Changes 101 to 104 would be missing. */
    assert_int_equal(mirror_plan_named(snap(0, 7, 100), jr(0, 7, 105), &plan, err, sizeof err), -1);
    assert_non_null(strstr(err, "missing"));
    mirror_plan_free(&plan);
    /* A journal of another generation. */
    assert_int_equal(mirror_plan_named(snap(0, 7, 100), jr(0, 6, 101), &plan, err, sizeof err), -1);
    mirror_plan_free(&plan);
    assert_int_equal(mirror_plan_named("snapshots/junk", "", &plan, err, sizeof err), -1);
    mirror_plan_free(&plan);
    assert_int_equal(mirror_plan_named(snap(0, 7, 100), "journal/x", &plan, err, sizeof err), -1);
    mirror_plan_free(&plan);
}

/* ---- restore's listing ----------------------------------------------------------- */

#define LIST_EMPTY                                                                                 \
    "<?xml version=\"1.0\" encoding=\"utf-8\"?><EnumerationResults><Blobs></Blobs>"                \
    "<NextMarker/></EnumerationResults>"
#define LIST_JOURNAL                                                                               \
    "<?xml version=\"1.0\" encoding=\"utf-8\"?><EnumerationResults><Blobs><Blob>"                  \
    "<Name>journal/0000000001/00000000000000000001</Name></Blob></Blobs><NextMarker/>"             \
    "</EnumerationResults>"
#define FAILED "FAIL"

/* A loopback HTTP server: a listing of prefix snapshots/ or journal/ gets the answer set
 * for it (FAILED: a 500), one request per connection. */
struct fake {
    int fd, port;
    const char *snapshots, *journal;
    pthread_t thread;
};

static void *fake_main(void *arg)
{
    struct fake *f = arg;
    for (;;) {
        int c = accept(f->fd, NULL, NULL);
        if (c < 0)
            return NULL; /* closed: the case is over */
        char req[8192];
        size_t len = 0;
        while (len < sizeof req - 1) {
            ssize_t n = read(c, req + len, sizeof req - 1 - len);
            if (n <= 0)
                break;
            len += (size_t)n;
            req[len] = '\0';
            if (strstr(req, "\r\n\r\n"))
                break;
        }
        req[len] = '\0';
        const char *body = strstr(req, "prefix=snapshots") ? f->snapshots : f->journal;
        char resp[1024];
        int n;
        if (strcmp(body, FAILED) == 0)
            n = snprintf(resp, sizeof resp,
                         "HTTP/1.1 500 Internal Server Error\r\nx-ms-error-code: InternalError\r\n"
                         "Content-Length: 0\r\nConnection: close\r\n\r\n");
        else
            n = snprintf(resp, sizeof resp,
                         "HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\n"
                         "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                         strlen(body), body);
        if (write(c, resp, (size_t)n) != n)
            fprintf(stderr, "fake: short write\n");
        close(c);
    }
}

static void fake_start(struct fake *f, const char *snapshots, const char *journal)
{
    f->snapshots = snapshots;
    f->journal = journal;
    f->fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(f->fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(f->fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(f->fd, 16), 0);
    socklen_t len = sizeof sa;
    assert_int_equal(getsockname(f->fd, (struct sockaddr *)&sa, &len), 0);
    f->port = ntohs(sa.sin_port);
    assert_int_equal(pthread_create(&f->thread, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake *f)
{
    shutdown(f->fd, SHUT_RDWR);
    close(f->fd);
    pthread_join(f->thread, NULL);
}

#define DEV_KEY                                                                                    \
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

/* mirror_restore() into a new store, the container answered by `f`. Returns its result;
 * err says why it failed. */
static int restore_against(struct fake *f, char *err, size_t errlen)
{
    char dir[64];
    mx_temp_dir(dir, "mirror-plan");
    struct store *s;
    struct store_config cfg = {.dir = dir};
    char why[256];
    if (store_open(&s, &cfg, why, sizeof why) != 0)
        fail_msg("store: %s", why);
    assert_true(store_created(s));

    struct mirror m = {.store = s};
    pthread_mutex_init(&m.err_lock, NULL);
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", f->port);
    struct blob_options o = {.connect_timeout_ms = 2000, .timeout_ms = 5000};
    if (blob_account_init(&m.account, ep, "devstoreaccount1", DEV_KEY, why, sizeof why) != 0 ||
        blob_client_new(&m.account, "cnt", &o, &m.bulk, why, sizeof why) != 0)
        fail_msg("client: %s", why);
    struct mirror_restored out;
    err[0] = '\0';
    int rc = mirror_restore(&m, &out, err, errlen);
    assert_false(out.restored);

    blob_client_free(m.bulk);
    blob_account_wipe(&m.account);
    pthread_mutex_destroy(&m.err_lock);
    store_close(s);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    return rc;
}

/* No snapshot listed, then the journal's listing fails: that failure is the answer, not
 * "a journal but no snapshot", nor an empty container (which would start afresh over a
 * mirror it could not see). The same with the snapshots' listing failing. The answers
 * that were listed still decide: the fake is heard. */
static void restore_failed_listing_is_not_a_verdict(void **st)
{
    (void)st;
    assert_int_equal(blob_global_init(), 0);
    struct fake f;
    char err[512];

    fake_start(&f, LIST_EMPTY, FAILED);
    assert_int_equal(restore_against(&f, err, sizeof err), -1);
    fake_stop(&f);
    assert_non_null(strstr(err, "cannot list the journal"));
    assert_null(strstr(err, "no snapshot"));

    fake_start(&f, FAILED, LIST_JOURNAL);
    assert_int_equal(restore_against(&f, err, sizeof err), -1);
    fake_stop(&f);
    assert_non_null(strstr(err, "cannot list snapshots"));
    assert_null(strstr(err, "no snapshot"));

    fake_start(&f, LIST_EMPTY, LIST_JOURNAL);
    assert_int_equal(restore_against(&f, err, sizeof err), -1);
    fake_stop(&f);
    assert_non_null(strstr(err, "journal but no snapshot"));

    fake_start(&f, LIST_EMPTY, LIST_EMPTY);
    assert_int_equal(restore_against(&f, err, sizeof err), 0); /* empty: a fresh start */
    fake_stop(&f);
    blob_global_cleanup();
}

/* ---- names ----------------------------------------------------------------------- */

static void names_round_trip(void **st)
{
    (void)st;
    char name[96];
    uint64_t g = 0, s = 0;
    mirror_snapshot_name(name, sizeof name, 7, 42);
    assert_string_equal(name, "snapshots/0000000007-00000000000000000042.jsonl");
    assert_true(mirror_parse_snapshot_name(name, &g, &s));
    assert_int_equal(g, 7);
    assert_int_equal(s, 42);
    assert_false(mirror_parse_journal_name(name, &g, &s));

    mirror_journal_name(name, sizeof name, 4294967295ull, UINT64_MAX);
    assert_string_equal(name, "journal/4294967295/18446744073709551615");
    assert_true(mirror_parse_journal_name(name, &g, &s));
    assert_int_equal(g, 4294967295ull);
    assert_true(s == UINT64_MAX);
    assert_false(mirror_parse_snapshot_name(name, &g, &s));

    /* Zero-padded: the listing's name order is the numeric order. */
    char a[96], b[96];
    mirror_journal_name(a, sizeof a, 3, 99);
    mirror_journal_name(b, sizeof b, 3, 100);
    assert_true(strcmp(a, b) < 0);
    mirror_snapshot_name(a, sizeof a, 9, 5);
    mirror_snapshot_name(b, sizeof b, 10, 1);
    assert_true(strcmp(a, b) < 0);
}

static void names_refused(void **st)
{
    (void)st;
    const char *bad[] = {
        "",
        "owner",
        "snapshots/0000000007-00000000000000000042.json",
        "snapshots/0000000007-00000000000000000042.jsonlx",
        "snapshots/0000000007_00000000000000000042.jsonl",
        "snapshots/000000007-000000000000000000042.jsonl",
        "snapshots/00000000a7-00000000000000000042.jsonl",
        "snapshots/0000000007-0000000000000000004 .jsonl",
        "snapshot/00000000007-00000000000000000042.jsonl",
        "journal/0000000007/0000000000000000042",
        "journal/0000000007/000000000000000000042",
        "journal/0000000007-00000000000000000042",
        "journal/000000000x/00000000000000000042",
        "journal/0000000007/0000000000000000004-",
        "journals/000000007/00000000000000000042",
        "journal/0000000007/00000000000000000042/",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t g = 0, s = 0;
        if (mirror_parse_snapshot_name(bad[i], &g, &s) ||
            mirror_parse_journal_name(bad[i], &g, &s) || mirror_name_generation(bad[i], &g))
            fail_msg("accepted: '%s'", bad[i]);
    }
}

/* What mirror_max_generation takes from each listed name. */
static void name_generation(void **st)
{
    (void)st;
    uint64_t g = 0;
    assert_true(mirror_name_generation("snapshots/0000000012-00000000000000000003.jsonl", &g));
    assert_int_equal(g, 12);
    assert_true(mirror_name_generation("journal/0000000013/00000000000000000004", &g));
    assert_int_equal(g, 13);
    assert_true(mirror_name_generation("journal/0000000000/00000000000000000000", &g));
    assert_int_equal(g, 0);
    assert_false(mirror_name_generation("owner", &g));
}

/* ---- replaying lines into rows ------------------------------------------------------ */

static void fixture_text(const char *name, char *out, size_t cap, size_t *len)
{
    const char *end = strstr(__FILE__, "unit/persistence/test_mirror_plan.c");
    assert_non_null(end);
    char path[1024];
    snprintf(path, sizeof path, "%.*sfixtures/v1/%s", (int)(end - __FILE__), __FILE__, name);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    *len = fread(out, 1, cap, f);
    assert_true(*len < cap);
    fclose(f);
}

static void replay(struct mirror_replay *st, const char *text, bool snapshot)
{
    char err[256];
    if (mirror_replay_text(st, "t", text, strlen(text), snapshot, err, sizeof err) !=
        MIRROR_READ_OK)
        fail_msg("%s", err);
}

/* The snapshot and journal the first release wrote (tests/fixtures/v1, made by 0.1.0),
 * replayed as a restore does: the rows it left, each of limit 1 with its one lease. */
static void replay_of_the_first_release(void **st)
{
    (void)st;
    static char snap[8192], journal[8192];
    size_t slen, jlen;
    fixture_text("snapshot.jsonl", snap, sizeof snap, &slen);
    fixture_text("journal.jsonl", journal, sizeof journal, &jlen);
    struct mirror_replay r = {0};
    char err[256];
    assert_int_equal(mirror_replay_text(&r, "snapshot", snap, slen, true, err, sizeof err),
                     MIRROR_READ_OK);
    assert_int_equal(r.snapshot_seq, 6);
    assert_int_equal(mirror_replay_text(&r, "journal", journal, jlen, false, err, sizeof err),
                     MIRROR_READ_OK);
    assert_int_equal(r.last_seq, 11);
    assert_int_equal(r.gaps, 0);
    assert_int_equal(r.duplicates, 0);
    assert_int_equal(r.mode, JR_MODE_SYNC);
    assert_int_equal(r.ceiling, 100000);
    assert_int_equal(r.marks.token_hwm, 6);
    assert_int_equal(r.marks.index_hwm, 11);
    assert_int_equal(r.marks.index_floor, 10);

    const struct store_row *row = mirror_replay_get(&r, "mirror/held", 11);
    assert_non_null(row); /* released in the journal: no leases left */
    assert_int_equal(row->nleases, 0);
    assert_int_equal(row->index, 10);

    row = mirror_replay_get(&r, "mirror/expired", 14);
    assert_non_null(row);
    assert_int_equal(row->index, 11);
    assert_int_equal(row->limit, 1);
    assert_int_equal(row->nleases, 1);
    assert_int_equal(row->leases[0].token, 6);
    assert_true(row->leases[0].held);
    assert_false(row->leases[0].shared);
    assert_string_equal(row->leases[0].owner->s, "worker-6");
    assert_int_equal(row->leases[0].deadline_ms, 1795639451640);

    row = mirror_replay_get(&r, "mirror/gone", 11);
    assert_non_null(row);
    assert_int_equal(row->index, 8);
    assert_int_equal(row->nleases, 1);
    assert_int_equal(row->leases[0].token, 5);
    assert_string_equal(row->leases[0].owner->s, "worker-5");

    row = mirror_replay_get(&r, "mirror/meta", 11);
    assert_non_null(row);
    assert_int_equal(row->index, 3);
    assert_int_equal(row->limit, 1);
    assert_int_equal(row->nleases, 1);
    assert_int_equal(row->leases[0].token, 3);
    assert_string_equal(row->leases[0].owner->s, "host \"a\" \xc3\xa9");
    assert_string_equal(row->leases[0].metadata->s,
                        "{\"addr\":\"10.0.0.1:80\",\"n\":[1,2.5,null],\"big\":9007199254740993}");
    assert_int_equal(r.n, 4);
    mirror_replay_free(&r);
}

static void put_lease(struct store_rec *rec, uint32_t i, uint64_t token, uint8_t id)
{
    rec->put[i] = (struct store_lease){.held = true, .token = token, .ttl_ms = 1000};
    rec->put[i].lease_id[0] = id;
    rec->put[i].owner = mx_str_new("o", 1);
}

/* Format 2: a row, then changes that write and forget leases of it (a set for a resource
 * without a row makes one), a drop; leases stay in token order; a duplicate is skipped. */
static void replay_of_sets_and_rows(void **st)
{
    (void)st;
    struct mirror_replay r = {0};
    struct mx_buf b = {0};
    struct store_marks m = {.commit_seq = 10, .token_hwm = 5, .index_hwm = 10};
    jr_encode_snapshot(&b, 2, JR_MODE_ASYNC, &m, 100);
    struct store_row row = {.index = 9, .limit = 3};
    struct store_rec *rec = store_rec_new("sem", 3, 9, 3, 2, 0);
    put_lease(rec, 0, 4, 4);
    put_lease(rec, 1, 2, 2); /* out of order on purpose */
    for (uint32_t i = 0; i < 2; i++)
        assert_int_equal(store_row_add(&row, &rec->put[i]), 0);
    store_rec_free(rec);
    jr_encode_row(&b, "sem", 3, &row);
    store_row_clear(&row);
    mx_buf_append(&b, "", 1);
    replay(&r, b.p, true);
    mx_buf_free(&b);
    const struct store_row *got = mirror_replay_get(&r, "sem", 3);
    assert_int_equal(got->nleases, 2);
    assert_int_equal(got->leases[0].token, 2);

    /* seq 11: lease 2 forgotten, 7 added, 4 renewed; seq 12: a new resource; 13: drop */
    rec = store_rec_new("sem", 3, 11, 3, 2, 1);
    put_lease(rec, 0, 7, 7);
    put_lease(rec, 1, 4, 4);
    rec->put[1].ttl_ms = 5000;
    rec->del[0][0] = 2;
    rec->commit_seq = 11;
    jr_encode_rec(&b, rec);
    jr_encode_rec(&b, rec); /* a block appended twice */
    store_rec_free(rec);
    rec = store_rec_new("new", 3, 12, 1, 1, 0);
    put_lease(rec, 0, 8, 8);
    rec->put[0].shared = true;
    rec->commit_seq = 12;
    jr_encode_rec(&b, rec);
    store_rec_free(rec);
    rec = store_rec_new("gone", 4, 13, 0, 0, 0);
    rec->drop = true;
    rec->commit_seq = 13;
    jr_encode_rec(&b, rec);
    store_rec_free(rec);
    mx_buf_append(&b, "", 1);
    replay(&r, b.p, false);
    mx_buf_free(&b);
    assert_int_equal(r.duplicates, 1);
    assert_int_equal(r.last_seq, 13);
    got = mirror_replay_get(&r, "sem", 3);
    assert_int_equal(got->index, 11);
    assert_int_equal(got->limit, 3);
    assert_int_equal(got->nleases, 2);
    assert_int_equal(got->leases[0].token, 4);
    assert_int_equal(got->leases[0].ttl_ms, 5000);
    assert_int_equal(got->leases[1].token, 7);
    got = mirror_replay_get(&r, "new", 3);
    assert_int_equal(got->nleases, 1);
    assert_true(got->leases[0].shared);
    got = mirror_replay_get(&r, "gone", 4);
    assert_int_equal(got->nleases, 0);
    assert_int_equal(r.marks.index_floor, 13);
    assert_int_equal(r.marks.token_hwm, 8);
    assert_null(mirror_replay_get(&r, "never", 5));
    mirror_replay_free(&r);

    /* A newer format stops the replay with the reason. */
    const char *newer = "{\"op\":\"snapshot\",\"format\":3,\"generation\":1,\"mode\":\"sync\","
                        "\"seq\":1,\"token_hwm\":1,\"index_hwm\":1,\"index_floor\":0,"
                        "\"ceiling\":1}\n";
    char err[256];
    assert_int_equal(mirror_replay_text(&r, "s", newer, strlen(newer), true, err, sizeof err),
                     MIRROR_READ_UNDECODABLE);
    assert_non_null(strstr(err, "format 3"));
    mirror_replay_free(&r);
}

/* The journal line of a group's record `k` of `n`: resource "g/<k>", seq `seq`. */
static void group_line(struct mx_buf *b, uint32_t k, uint32_t n, uint64_t seq, uint64_t token)
{
    char name[16];
    snprintf(name, sizeof name, "g/%u", k);
    struct store_rec *rec = store_rec_new(name, strlen(name), 20 + seq, 1, 1, 0);
    put_lease(rec, 0, token, (uint8_t)(10 + k));
    rec->commit_seq = seq;
    rec->grouped = true;
    rec->group_left = (uint16_t)(n - 1 - k);
    jr_encode_rec(b, rec);
    store_rec_free(rec);
}

static size_t held_in_group(const struct mirror_replay *r, uint32_t n)
{
    size_t held = 0;
    for (uint32_t k = 0; k < n; k++) {
        char name[16];
        snprintf(name, sizeof name, "g/%u", k);
        const struct store_row *row = mirror_replay_get(r, name, strlen(name));
        held += row && row->nleases;
    }
    return held;
}

/* A group is applied whole or not at all: cut off at the journal's end, nothing of it;
 * cut off and appended again whole (the retry of a block whose first piece landed), the
 * whole; read in two parts (a standby following the journal), the whole once both are
 * read. The indexes and tokens of a group left out are never handed out again. */
static void replay_of_a_group_is_whole_or_nothing(void **st)
{
    (void)st;
    struct mirror_replay r = {0};
    struct mx_buf b = {0};
    group_line(&b, 0, 3, 1, 101);
    group_line(&b, 1, 3, 2, 102);
    mx_buf_append(&b, "", 1);
    replay(&r, b.p, false);
    assert_int_equal(held_in_group(&r, 3), 0);
    mirror_replay_free(&r); /* the journal ends there */
    assert_int_equal(r.last_seq, 0);

    replay(&r, b.p, false); /* the same two lines, then the block again, whole */
    assert_int_equal(held_in_group(&r, 3), 0);
    assert_int_equal(r.ngroup, 2);
    b.len = 0;
    group_line(&b, 0, 3, 1, 101);
    group_line(&b, 1, 3, 2, 102);
    group_line(&b, 2, 3, 3, 103);
    mx_buf_append(&b, "", 1);
    replay(&r, b.p, false);
    assert_int_equal(held_in_group(&r, 3), 3);
    assert_int_equal(r.last_seq, 3);
    assert_int_equal(r.groups_dropped, 2);
    mirror_replay_free(&r);

    /* In two reads: nothing after the first, the whole after the second. */
    b.len = 0;
    group_line(&b, 0, 2, 1, 101);
    mx_buf_append(&b, "", 1);
    replay(&r, b.p, false);
    assert_int_equal(held_in_group(&r, 2), 0);
    b.len = 0;
    group_line(&b, 1, 2, 2, 102);
    mx_buf_append(&b, "", 1);
    replay(&r, b.p, false);
    assert_int_equal(held_in_group(&r, 2), 2);
    assert_int_equal(r.groups_dropped, 0);
    mirror_replay_free(&r);

    /* Cut off by a line that is not its next one: left out, its marks kept. */
    b.len = 0;
    group_line(&b, 0, 2, 1, 101);
    struct store_rec *rec = store_rec_new("x", 1, 30, 1, 1, 0);
    put_lease(rec, 0, 7, 1);
    rec->commit_seq = 2;
    jr_encode_rec(&b, rec);
    store_rec_free(rec);
    mx_buf_append(&b, "", 1);
    replay(&r, b.p, false);
    assert_int_equal(held_in_group(&r, 2), 0);
    assert_non_null(mirror_replay_get(&r, "x", 1));
    assert_int_equal(r.groups_dropped, 1);
    assert_int_equal(r.marks.token_hwm, 101);
    assert_int_equal(r.marks.index_hwm, 30);
    mirror_replay_free(&r);
    mx_buf_free(&b);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(replay_of_a_group_is_whole_or_nothing),
    cmocka_unit_test(pack_empty_queue),
    cmocka_unit_test(pack_one_small_batch),
    cmocka_unit_test(pack_batches_exactly_fill_a_block),
    cmocka_unit_test(pack_many_batches_overflow_a_block),
    cmocka_unit_test(pack_batch_bigger_than_a_block),
    cmocka_unit_test(split_at_line_ends),
    cmocka_unit_test(split_encoded_batch),
    cmocka_unit_test(split_line_bigger_than_a_block),
    cmocka_unit_test(plan_empty_container),
    cmocka_unit_test(plan_journal_without_snapshot),
    cmocka_unit_test(plan_newest_snapshot),
    cmocka_unit_test(plan_journal_in_order),
    cmocka_unit_test(plan_journal_straddling_the_snapshot),
    cmocka_unit_test(plan_gap_is_not_a_plan_error),
    cmocka_unit_test(plan_newer_generation_journal_ignored),
    cmocka_unit_test(plan_of_a_generation_ignores_a_later_stray),
    cmocka_unit_test(plan_named_reads_exactly_the_named_pair),
    cmocka_unit_test(plan_named_refuses_what_cannot_be_whole),
    cmocka_unit_test(restore_failed_listing_is_not_a_verdict),
    cmocka_unit_test(names_round_trip),
    cmocka_unit_test(names_refused),
    cmocka_unit_test(name_generation),
    cmocka_unit_test(replay_of_the_first_release),
    cmocka_unit_test(replay_of_sets_and_rows),
};

MX_TEST_MAIN(tests)
