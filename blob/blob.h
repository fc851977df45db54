/*
 * Azure Blob Storage over REST: a small client on libcurl with SharedKey signing (HMAC-SHA256
 * from OpenSSL). It speaks to Azure and to the Azurite emulator alike, and does exactly what the
 * blob mirror needs: block blobs, append blobs (the journal), listing with paging, blob leases.
 *
 * Layout: an account (parsed from a connection string, or from endpoint, name and key), a
 * client bound to one container, and one function per REST operation. Every operation fills a
 * struct blob_result with what the service answered and returns 0 when that answer is the
 * operation's success status, -1 otherwise. The client never retries: blob_result_transient()
 * says whether trying again later may help, and the caller owns the backoff.
 *
 * Threads: blob_global_init() once, before any other thread exists. Account functions are pure
 * and may run on any thread. A client may be used by one thread at a time (it owns one libcurl
 * easy handle and its connection); different clients may be used by different threads at once.
 */
#ifndef MX_BLOB_H
#define MX_BLOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The REST version every request is signed with. */
#define BLOB_API_VERSION "2021-08-06"

#define BLOB_ACCOUNT_NAME_MAX 64
#define BLOB_KEY_MAX          128 /* decoded bytes; Azure keys are 64 */
#define BLOB_ENDPOINT_MAX     512
#define BLOB_ETAG_MAX         96
#define BLOB_LEASE_ID_MAX     64
#define BLOB_NAME_MAX         1024 /* bytes of a blob name, as Azure limits it */
#define BLOB_META_MAX         8    /* metadata pairs kept from an answer, and sent at most */
#define BLOB_META_NAME_MAX    32
#define BLOB_META_VALUE_MAX   256

/* Once per process, before any thread is started; and once at the end. 0 or -1. */
int blob_global_init(void);
void blob_global_cleanup(void);

/* ---- Accounts ------------------------------------------------------------------------------ */

/* A storage account: plain data, copied freely, no resources held. Holds the secret key, so
 * wipe it (blob_account_wipe) when done if it lived on the stack of a long-lived thread. */
struct blob_account {
    char name[BLOB_ACCOUNT_NAME_MAX];
    unsigned char key[BLOB_KEY_MAX]; /* decoded AccountKey */
    size_t key_len;
    /* "scheme://host[:port][/path]" without a trailing '/'. Its path is "/<account>" for
     * path-style endpoints (Azurite, IP hosts) and empty for account hosts
     * (https://<account>.blob.core.windows.net). */
    char endpoint[BLOB_ENDPOINT_MAX];
};

/*
 * Parses an Azure Storage connection string:
 *   DefaultEndpointsProtocol=https;AccountName=a;AccountKey=k;EndpointSuffix=core.windows.net
 *   ...;BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1
 *   UseDevelopmentStorage=true[;DevelopmentStorageProxyUri=http://host]
 * Parts are separated by ';', each split at its first '='; keys are case-insensitive; unknown
 * keys (QueueEndpoint, ...) are ignored. Without BlobEndpoint the endpoint is
 * {protocol}://{account}.blob.{suffix} (https and core.windows.net by default). A BlobEndpoint
 * on an IP address or a host without a dot and with no path gets "/<account>" appended, as
 * Azurite expects. UseDevelopmentStorage=true means Azurite's well-known account at
 * http://127.0.0.1:10000/devstoreaccount1 (the proxy URI, when given, replaces scheme and host)
 * and may not be combined with an account, key or endpoint.
 * Returns 0, or -1 with a message in `err` (which never contains the key).
 */
int blob_parse_connection_string(const char *cs, struct blob_account *out, char *err,
                                 size_t errlen);

/* The same from its three parts: endpoint as above (a trailing '/' is dropped), the account
 * name and the base64 AccountKey. Returns 0, or -1 with a message in `err`. */
int blob_account_init(struct blob_account *out, const char *endpoint, const char *name,
                      const char *key_base64, char *err, size_t errlen);

/* Overwrites the key in memory. */
void blob_account_wipe(struct blob_account *a);

/* Whether s is a valid container name: 3 to 63 characters of a-z, 0-9 and single '-'
 * inside. blob_client_new() refuses any other. */
bool blob_container_name_ok(const char *s);

/* ---- Results ------------------------------------------------------------------------------- */

/* What one request came back with. Owned by the caller: start it zeroed ({0}); each operation
 * frees what the previous one left in it, and blob_result_free() releases the last body. The
 * arguments of an operation may point into the result it fills (If-Match set to res->etag, a
 * renewal of res->lease_id): they are copied before it is reset. */
struct blob_result {
    long status;              /* HTTP status; 0 when no answer came (see curl_code and message) */
    int curl_code;            /* the CURLcode of a transport failure, else 0 */
    char error_code[96];      /* x-ms-error-code (or <Code> of the error body), or "" */
    char etag[BLOB_ETAG_MAX]; /* ETag header as sent, with its quotes, or "" */
    char request_id[64];      /* x-ms-request-id, for support cases, or "" */
    char lease_id[BLOB_LEASE_ID_MAX]; /* x-ms-lease-id, or "" */
    int lease_time;                   /* x-ms-lease-time in seconds, or -1 */
    int64_t append_offset;            /* x-ms-blob-append-offset, or -1 */
    int64_t committed_blocks;         /* x-ms-blob-committed-block-count, or -1 */
    int64_t content_length;           /* Content-Length of a HEAD or GET answer, or -1 */
    char lease_state[16];             /* x-ms-lease-state (available, leased, broken...), or "" */
    bool sealed;                      /* x-ms-blob-sealed: true */
    /* The blob's metadata (x-ms-meta-<name>), as far as BLOB_META_MAX of them fit. */
    struct blob_meta {
        char name[BLOB_META_NAME_MAX];
        char value[BLOB_META_VALUE_MAX];
    } meta[BLOB_META_MAX];
    size_t nmeta;
    char message[256]; /* why the call failed when no status explains it, else "" */
    char *body;        /* the response body, NUL-terminated (the NUL is not counted), or NULL */
    size_t body_len;
};

/* Frees the body and resets every field. Safe on a zeroed or already freed result. */
void blob_result_free(struct blob_result *r);
/* The value of metadata `name` (lower case, without x-ms-meta-) in an answer, or NULL. */
const char *blob_result_meta(const struct blob_result *r, const char *name);

/* True when trying the same request again later may succeed: a transport failure (connect,
 * timeout, reset) or status 408, 429, 500, 502, 503 or 504. */
bool blob_result_transient(const struct blob_result *r);

/* ---- Client -------------------------------------------------------------------------------- */

struct blob_client;

struct blob_options {
    long connect_timeout_ms; /* 0: 5000 */
    long timeout_ms;         /* whole request; 0: 30000 */
    size_t max_body;         /* response bodies larger than this fail the call; 0: 64 MiB */
    long stall_ms; /* a request that moves no byte for this long fails (rounded up to whole
                    * seconds); 0: only timeout_ms bounds it */
    /* Prepended to every blob name, and to a listing's prefix (and cut from the names it
     * lists): the client sees the blobs under it as a container of their own (a partition's,
     * "p/007/"). At most BLOB_PREFIX_MAX bytes. NULL or "": none. */
    const char *prefix;
};
#define BLOB_PREFIX_MAX 63

/*
 * Creates a client for `container` (3 to 63 characters of a-z, 0-9 and '-') of `account`
 * (copied). `opts` may be NULL for the defaults. No request is made. Returns 0 and sets *out,
 * or -1 with a message in `err`. Free with blob_client_free().
 */
int blob_client_new(const struct blob_account *account, const char *container,
                    const struct blob_options *opts, struct blob_client **out, char *err,
                    size_t errlen);
void blob_client_free(struct blob_client *c);

/* Optional preconditions of a request; pass NULL for none. An ETag may be given quoted (as in
 * blob_result.etag) or bare (as in a listing); it is sent quoted. "*" is sent as is. Do not
 * build create-or-update logic on If-Match "*": Azurite lets it create a missing blob. */
struct blob_cond {
    const char *if_match;      /* NULL, an ETag or "*" */
    const char *if_none_match; /* NULL, an ETag or "*" ("*": only if the blob does not exist) */
    const char *lease_id;      /* NULL, or the active lease on the blob */
};

/*
 * Operations. Each returns 0 when the service answered with the success status given below,
 * else -1; `res` says what happened either way (status 0 with curl_code or message when nothing
 * was answered). Blob names are 1 to BLOB_NAME_MAX bytes of any UTF-8 and are percent-encoded
 * here (except unreserved characters and '/').
 *
 * Statuses worth knowing: a failed If-Match is 412 ConditionNotMet; If-None-Match "*" on an
 * existing blob is 409 BlobAlreadyExists; a missing blob is 404 BlobNotFound; a wrong
 * append position is 412 AppendPositionConditionNotMet; a bad signature is 403.
 */

/* 201. An existing container (409 ContainerAlreadyExists) also returns 0: tell the two apart
 * by res->status. */
int blob_create_container(struct blob_client *c, struct blob_result *res);
/* 202. */
int blob_delete_container(struct blob_client *c, struct blob_result *res);

/* Put Blob, a block blob with the whole content (may be empty). 201, res->etag is new. */
int blob_put(struct blob_client *c, const char *name, const void *data, size_t len,
             const struct blob_cond *cond, struct blob_result *res);

/* Get Blob. 200 with res->body (bounded by max_body). 304 (with If-None-Match) returns -1. */
int blob_get(struct blob_client *c, const char *name, const struct blob_cond *cond,
             struct blob_result *res);

/* Get Blob from byte `offset` to its end (x-ms-range: bytes=offset-): 206 with the bytes in
 * res->body. At the end (offset == the blob's length) it returns 0 with an empty body. */
int blob_get_from(struct blob_client *c, const char *name, int64_t offset, struct blob_result *res);
/* Get Blob Properties (HEAD): 200 with etag, content_length and, for append blobs,
 * committed_blocks (the next append position is content_length). Answers carry no body. */
int blob_head(struct blob_client *c, const char *name, struct blob_result *res);

/* Delete Blob. 202. */
int blob_delete(struct blob_client *c, const char *name, const struct blob_cond *cond,
                struct blob_result *res);

/* Put Blob of an empty append blob. 201. With cond->if_none_match "*" it never replaces an
 * existing blob (409 BlobAlreadyExists). */
int blob_create_append(struct blob_client *c, const char *name, const struct blob_cond *cond,
                       struct blob_result *res);

/* Append Block: `len` bytes (1 to 4 MiB) at the end of an append blob. With append_pos >= 0 the
 * service appends only if the blob's length is exactly append_pos. 201 with append_offset (where
 * the block went) and committed_blocks. */
int blob_append_block(struct blob_client *c, const char *name, const void *data, size_t len,
                      int64_t append_pos, const struct blob_cond *cond, struct blob_result *res);

/* Seal an append blob (comp=seal): from then on every Append Block fails with 409
 * BlobIsSealed. Sealing a sealed blob succeeds again. 200. */
int blob_seal(struct blob_client *c, const char *name, const struct blob_cond *cond,
              struct blob_result *res);
/* Set Blob Metadata (comp=metadata): replaces the blob's metadata with the `n` pairs (names of
 * lower-case letters and digits, values printable ASCII; n <= BLOB_META_MAX). With
 * cond->lease_id it succeeds only while that lease holds the blob. 200. */
int blob_set_metadata(struct blob_client *c, const char *name, const struct blob_meta *meta,
                      size_t n, const struct blob_cond *cond, struct blob_result *res);
/* One page of a listing. Owned by the caller: start it zeroed; free with blob_list_free(). */
struct blob_item {
    char *name;               /* unescaped */
    char etag[BLOB_ETAG_MAX]; /* quoted, like blob_result.etag */
    int64_t size;             /* Content-Length, or -1 if the listing had none */
    char lease_state[16];     /* LeaseState (available, leased, broken...), or "" */
    /* Its metadata, listed with blob_list_page_meta() (NULL otherwise, or when it has none):
     * as far as BLOB_META_MAX pairs fit. */
    struct blob_meta *meta;
    size_t nmeta;
};
/* The value of metadata `name` of a listed blob, or NULL. */
const char *blob_item_meta(const struct blob_item *it, const char *name);
struct blob_list {
    struct blob_item *items;
    size_t count;
    char *next_marker; /* pass to the next call; NULL when this was the last page */
};
void blob_list_free(struct blob_list *l);

/*
 * List Blobs whose names start with `prefix` (NULL or "" for all), in name order, one page of
 * at most `max_results` (0: the service's default, 5000) starting at `marker` (NULL for the
 * first page, then the previous page's next_marker, which may still be out->next_marker). 200.
 * `out` is freed first and holds the page on success.
 */
int blob_list_page(struct blob_client *c, const char *prefix, const char *marker,
                   unsigned max_results, struct blob_list *out, struct blob_result *res);
/* The same, each blob with its metadata (include=metadata). */
int blob_list_page_meta(struct blob_client *c, const char *prefix, const char *marker,
                        unsigned max_results, struct blob_list *out, struct blob_result *res);
/* Every blob whose name starts with `prefix`, page after page (at most `max_pages`), each
 * handed to `each` (with its metadata if `meta`). 0, or -1 when a page could not be listed
 * (`res` says why; the blobs of the pages before were handed already). */
int blob_list_each(struct blob_client *c, const char *prefix, bool meta, unsigned max_pages,
                   void (*each)(const struct blob_item *it, void *ctx), void *ctx,
                   struct blob_result *res);

/*
 * Blob leases (comp=lease). Acquire: duration 15..60 seconds or -1 for infinite, proposed_id a
 * GUID or NULL to let the service choose; 201 with res->lease_id. Renew and release: 200.
 * Break: break_period 0..60 seconds, or -1 to let the current lease run out; 202 with
 * res->lease_time (seconds until it is broken).
 */
int blob_lease_acquire(struct blob_client *c, const char *name, int duration,
                       const char *proposed_id, struct blob_result *res);
int blob_lease_renew(struct blob_client *c, const char *name, const char *lease_id,
                     struct blob_result *res);
int blob_lease_release(struct blob_client *c, const char *name, const char *lease_id,
                       struct blob_result *res);
int blob_lease_break(struct blob_client *c, const char *name, int break_period,
                     struct blob_result *res);
/* The same only while the blob's ETag is `if_match` (412 ConditionNotMet otherwise). */
int blob_lease_break_if(struct blob_client *c, const char *name, int break_period,
                        const char *if_match, struct blob_result *res);

#endif
