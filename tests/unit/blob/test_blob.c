/*
 * The blob client without a server: connection strings, URL encoding, the date, SharedKey
 * strings-to-sign and signatures against fixed vectors, the listing parser, and the checks that
 * fail a call before anything is sent.
 *
 * The signing vectors are strings-to-sign that Azurite accepted (put, list page, lease acquire,
 * special-character name) and a few more of the same shape. Every expected signature was
 * computed once, outside this code, with Python's hmac, hashlib and base64 from the development
 * account key and is kept here as a constant, so the test does not check OpenSSL against
 * itself.
 */
#include "tests/unit/testutil.h"

#include <arpa/inet.h>
#include <locale.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>

#include "blob/blob.h"
#include "blob/internal.h"

#define DEV_KEY                                                                                    \
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
#define DEV_CS                                                                                     \
    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=" DEV_KEY               \
    ";BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;"
#define SPECIAL_NAME "dir one/sub+dir/\xC3\xA4 %#?=&;@'.txt"
#define SPECIAL_PATH "dir%20one/sub%2Bdir/%C3%A4%20%25%23%3F%3D%26%3B%40%27.txt"

static struct blob_account parse_ok(const char *cs)
{
    struct blob_account a;
    char err[256] = "";
    int rc = blob_parse_connection_string(cs, &a, err, sizeof err);
    if (rc != 0)
        fail_msg("parse failed: %s", err);
    return a;
}

/* Parses a connection string that must fail; returns the message. */
static const char *parse_err(const char *cs)
{
    static char err[256];
    struct blob_account a;
    err[0] = '\0';
    assert_int_equal(blob_parse_connection_string(cs, &a, err, sizeof err), -1);
    assert_true(err[0] != '\0');
    assert_null(strstr(err, "Eby8vdM0")); /* never the key */
    return err;
}

static void assert_dev_key(const struct blob_account *a)
{
    static const unsigned char head[] = {0x11, 0xbc, 0xbc, 0xbd}, tail[] = {0xb2, 0x81, 0x8c, 0x1b};
    assert_int_equal(a->key_len, 64);
    assert_memory_equal(a->key, head, 4);
    assert_memory_equal(a->key + 60, tail, 4);
}

static void connection_string_full(void **st)
{
    (void)st;
    struct blob_account a = parse_ok(DEV_CS);
    assert_string_equal(a.name, "devstoreaccount1");
    assert_string_equal(a.endpoint, "http://127.0.0.1:10000/devstoreaccount1");
    assert_dev_key(&a);

    /* Keys are case-insensitive, spaces around parts are dropped, the key is split at the
     * first '=' only, and unknown keys are ignored. */
    a = parse_ok(" accountkey = " DEV_KEY " ; ACCOUNTNAME=devstoreaccount1;"
                 "blobendpoint=http://127.0.0.1:10000/devstoreaccount1/;"
                 "QueueEndpoint=http://127.0.0.1:10001/devstoreaccount1;;");
    assert_string_equal(a.endpoint, "http://127.0.0.1:10000/devstoreaccount1");
    assert_dev_key(&a);
}

static void connection_string_development_storage(void **st)
{
    (void)st;
    struct blob_account a = parse_ok("UseDevelopmentStorage=true");
    assert_string_equal(a.name, "devstoreaccount1");
    assert_string_equal(a.endpoint, "http://127.0.0.1:10000/devstoreaccount1");
    assert_dev_key(&a);

    a = parse_ok("usedevelopmentstorage=TRUE;");
    assert_string_equal(a.endpoint, "http://127.0.0.1:10000/devstoreaccount1");

    a = parse_ok("UseDevelopmentStorage=true;DevelopmentStorageProxyUri=http://azurite");
    assert_string_equal(a.endpoint, "http://azurite:10000/devstoreaccount1");
    a = parse_ok(
        "UseDevelopmentStorage=true;DevelopmentStorageProxyUri=https://proxy.example:8080/x");
    assert_string_equal(a.endpoint, "https://proxy.example:10000/devstoreaccount1");
    assert_string_equal(a.name, "devstoreaccount1");
}

static void connection_string_azure(void **st)
{
    (void)st;
    struct blob_account a = parse_ok("DefaultEndpointsProtocol=https;AccountName=myacct;"
                                     "AccountKey=" DEV_KEY ";EndpointSuffix=core.windows.net");
    assert_string_equal(a.name, "myacct");
    assert_string_equal(a.endpoint, "https://myacct.blob.core.windows.net");
    assert_dev_key(&a);

    /* https and core.windows.net are the defaults. */
    a = parse_ok("AccountName=myacct;AccountKey=" DEV_KEY);
    assert_string_equal(a.endpoint, "https://myacct.blob.core.windows.net");

    a = parse_ok("DefaultEndpointsProtocol=HTTP;AccountName=cn1;AccountKey=" DEV_KEY
                 ";EndpointSuffix=core.chinacloudapi.cn");
    assert_string_equal(a.endpoint, "http://cn1.blob.core.chinacloudapi.cn");
}

static void connection_string_endpoints(void **st)
{
    (void)st;
    /* An IP host or a name without a dot and no path: path style, the account appended. */
    struct blob_account a =
        parse_ok("AccountName=acct1;AccountKey=" DEV_KEY ";BlobEndpoint=http://127.0.0.1:10000/");
    assert_string_equal(a.endpoint, "http://127.0.0.1:10000/acct1");
    a = parse_ok("AccountName=acct1;AccountKey=" DEV_KEY ";BlobEndpoint=http://azurite:10000");
    assert_string_equal(a.endpoint, "http://azurite:10000/acct1");
    a = parse_ok("AccountName=acct1;AccountKey=" DEV_KEY ";BlobEndpoint=http://[::1]:10000");
    assert_string_equal(a.endpoint, "http://[::1]:10000/acct1");

    /* An account host is used as given, the trailing '/' dropped. */
    a = parse_ok("AccountName=acct1;AccountKey=" DEV_KEY
                 ";BlobEndpoint=https://acct1.blob.core.windows.net/");
    assert_string_equal(a.endpoint, "https://acct1.blob.core.windows.net");
    a = parse_ok("AccountName=devstoreaccount1;AccountKey=" DEV_KEY
                 ";BlobEndpoint=http://devstoreaccount1.blob.localhost:10000");
    assert_string_equal(a.endpoint, "http://devstoreaccount1.blob.localhost:10000");

    /* The explicit endpoint wins over protocol and suffix. */
    a = parse_ok("DefaultEndpointsProtocol=https;AccountName=acct1;AccountKey=" DEV_KEY
                 ";EndpointSuffix=example.org;BlobEndpoint=http://10.0.0.5:10000/acct1");
    assert_string_equal(a.endpoint, "http://10.0.0.5:10000/acct1");

    /* blob_account_init does the same from its parts. */
    char err[128];
    assert_int_equal(blob_account_init(&a, "http://localhost:10000", "devstoreaccount1", DEV_KEY,
                                       err, sizeof err),
                     0);
    assert_string_equal(a.endpoint, "http://localhost:10000/devstoreaccount1");
    /* The arguments may come from the account being filled in. */
    assert_int_equal(blob_account_init(&a, a.endpoint, a.name, "AAAA", err, sizeof err), 0);
    assert_string_equal(a.endpoint, "http://localhost:10000/devstoreaccount1");
    assert_string_equal(a.name, "devstoreaccount1");
    assert_int_equal(a.key_len, 3);
    blob_account_wipe(&a);
    assert_int_equal(a.key_len, 0);
}

static void connection_string_errors(void **st)
{
    (void)st;
    assert_non_null(strstr(parse_err("AccountName=x"), "AccountKey is missing"));
    assert_non_null(strstr(parse_err("AccountKey=" DEV_KEY), "AccountName is missing"));
    assert_non_null(strstr(parse_err(""), "AccountName is missing"));
    assert_non_null(strstr(parse_err("AccountName=x;AccountKey=abc!"), "base64"));
    assert_non_null(strstr(parse_err("AccountName=x;AccountKey=abc"), "base64"));
    assert_non_null(strstr(parse_err("AccountName=x;AccountKey=ab=c"), "base64"));
    assert_non_null(strstr(parse_err("AccountName=x;AccountKey===="), "base64"));
    assert_non_null(strstr(parse_err("AccountName=x;AccountKey="), "empty"));
    assert_non_null(
        strstr(parse_err("DefaultEndpointsProtocol=ftp;AccountName=x;AccountKey=" DEV_KEY),
               "unknown DefaultEndpointsProtocol 'ftp'"));
    assert_non_null(strstr(parse_err("AccountName=x;AccountKey=" DEV_KEY ";BlobEndpoint=ftp://h"),
                           "http:// or https://"));
    assert_non_null(
        strstr(parse_err("AccountName=x;AccountKey=" DEV_KEY ";BlobEndpoint=http://"), "no host"));
    assert_non_null(strstr(
        parse_err("AccountName=x;AccountKey=" DEV_KEY ";BlobEndpoint=http://h/a?b=c"), "'?'"));
    assert_non_null(strstr(parse_err("AccountName=my-acct;AccountKey=" DEV_KEY), "account name"));
    assert_non_null(strstr(parse_err("AccountName=x;AccountKey=" DEV_KEY ";Garbage"), "'='"));
    assert_non_null(strstr(parse_err("UseDevelopmentStorage=maybe"), "true or false"));
    assert_non_null(strstr(parse_err("UseDevelopmentStorage=true;AccountName=x"), "AccountName"));
    assert_non_null(strstr(parse_err("AccountName=x;DevelopmentStorageProxyUri=http://p"),
                           "UseDevelopmentStorage"));
    assert_non_null(strstr(parse_err("BlobEndpoint=https://x.blob.core.windows.net;"
                                     "AccountName=x;SharedAccessSignature=sv=2021&sig=abc"),
                           "not supported"));
    struct blob_account a;
    char err[64];
    assert_int_equal(blob_parse_connection_string(NULL, &a, err, sizeof err), -1);
    /* No room for a message is fine too. */
    assert_int_equal(blob_parse_connection_string("AccountName=x", &a, NULL, 0), -1);
}

/* EVP_DecodeBlock counts '=' padding as bytes; the decoded length must not. */
static void account_key_padding(void **st)
{
    (void)st;
    static const struct {
        const char *b64;
        size_t len;
    } cases[] = {{"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHg==", 31},
                 {"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=", 32},
                 {"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8g", 33}};
    unsigned char want[33];
    for (int i = 0; i < 33; i++)
        want[i] = (unsigned char)i;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct blob_account a;
        char err[128] = "";
        assert_int_equal(
            blob_account_init(&a, "https://x.blob.core.windows.net", "x", cases[i].b64, err, 128),
            0);
        assert_int_equal(a.key_len, cases[i].len);
        assert_memory_equal(a.key, want, cases[i].len);
    }
}

static void url_encoding(void **st)
{
    (void)st;
    char *s = blob_url_encode(SPECIAL_NAME, true);
    assert_string_equal(s, SPECIAL_PATH);
    free(s);
    s = blob_url_encode("list/item-1", false);
    assert_string_equal(s, "list%2Fitem-1");
    free(s);
    s = blob_url_encode("AZaz09-._~", false);
    assert_string_equal(s, "AZaz09-._~");
    free(s);
    s = blob_url_encode("a=b&c\\d\x7f", true);
    assert_string_equal(s, "a%3Db%26c%5Cd%7F");
    free(s);
    s = blob_url_encode("", true);
    assert_string_equal(s, "");
    free(s);
}

static void date_is_rfc1123_in_any_locale(void **st)
{
    (void)st;
    char d[BLOB_DATE_LEN];
    /* Whatever locale the process runs in (where one is installed), names stay English. */
    static const char *const locales[] = {"de_DE.UTF-8", "fr_FR.UTF-8", "C.UTF-8", ""};
    for (size_t i = 0; i < sizeof locales / sizeof locales[0]; i++) {
        setlocale(LC_ALL, locales[i]);
        blob_format_date(0, d);
        assert_string_equal(d, "Thu, 01 Jan 1970 00:00:00 GMT");
        blob_format_date(1795321471, d);
        assert_string_equal(d, "Sun, 22 Nov 2026 04:24:31 GMT");
        blob_format_date(951868799, d);
        assert_string_equal(d, "Tue, 29 Feb 2000 23:59:59 GMT");
    }
    setlocale(LC_ALL, "C");
}

static void hmac_known_answer(void **st)
{
    (void)st;
    /* RFC 4231, test case 2. */
    char sig[BLOB_SIG_LEN];
    const char *msg = "what do ya want for nothing?";
    assert_int_equal(blob_hmac_base64((const unsigned char *)"Jefe", 4, msg, strlen(msg), sig), 0);
    assert_string_equal(sig, "W9zBRr9gdU5qBCQmCJV1x1oAPwidJzmDnexYuWTsOEM=");
}

static struct blob_account dev_account(void)
{
    return parse_ok(DEV_CS);
}

static void sign_put_conditional(void **st)
{
    (void)st;
    struct blob_account a = dev_account();
    static char body[300];
    struct blob_request r = {.verb = "PUT",
                             .blob = "hello.txt",
                             .xms = {{"x-ms-blob-type", "BlockBlob"}},
                             .nxms = 1,
                             .body = body,
                             .body_len = sizeof body,
                             .content_type = "application/octet-stream",
                             .if_match = "\"0x20F0C73B385FFE0\""};
    struct blob_signed s;
    assert_int_equal(
        blob_sign_request(&a, "ctest-103abd58", &r, "Sun, 22 Nov 2026 04:24:31 GMT", &s), 0);
    assert_string_equal(s.url, "http://127.0.0.1:10000/devstoreaccount1/ctest-103abd58/hello.txt");
    assert_string_equal(
        s.string_to_sign,
        "PUT\n\n\n300\n\napplication/octet-stream\n\n\n\"0x20F0C73B385FFE0\"\n\n\n\n"
        "x-ms-blob-type:BlockBlob\nx-ms-date:Sun, 22 Nov 2026 04:24:31 "
        "GMT\nx-ms-version:2021-08-06\n"
        "/devstoreaccount1/devstoreaccount1/ctest-103abd58/hello.txt");
    assert_string_equal(s.authorization,
                        "SharedKey devstoreaccount1:KCd6kCI7lgXyn88Y2jSpJuStE39j8vH4H+Ta6B7+MQM=");
    blob_signed_free(&s);
}

static void sign_list_page(void **st)
{
    (void)st;
    struct blob_account a = dev_account();
    /* Sent in this order; signed sorted, with decoded values. */
    struct blob_request r = {.verb = "GET",
                             .query = {{"restype", "container"},
                                       {"comp", "list"},
                                       {"prefix", "list/"},
                                       {"marker", "list/item-1"},
                                       {"maxresults", "2"}},
                             .nquery = 5};
    struct blob_signed s;
    assert_int_equal(
        blob_sign_request(&a, "ctest-103abd58", &r, "Sun, 22 Nov 2026 04:24:31 GMT", &s), 0);
    assert_string_equal(s.url, "http://127.0.0.1:10000/devstoreaccount1/ctest-103abd58"
                               "?restype=container&comp=list&prefix=list%2F&marker=list%2Fitem-1"
                               "&maxresults=2");
    assert_string_equal(s.string_to_sign,
                        "GET\n\n\n\n\n\n\n\n\n\n\n\n"
                        "x-ms-date:Sun, 22 Nov 2026 04:24:31 GMT\nx-ms-version:2021-08-06\n"
                        "/devstoreaccount1/devstoreaccount1/ctest-103abd58\ncomp:list\nmarker:list/"
                        "item-1\nmaxresults:2\nprefix:list/\nrestype:container");
    assert_string_equal(s.authorization,
                        "SharedKey devstoreaccount1:jAlT+9pdvuIgtvpSUvBnCd5FRwE8rLLtjJFc4t/pTFk=");
    blob_signed_free(&s);
}

static void sign_lease_acquire(void **st)
{
    (void)st;
    struct blob_account a = dev_account();
    /* An empty PUT body: the Content-Length line is empty, not "0". */
    struct blob_request r = {
        .verb = "PUT",
        .blob = "hello.txt",
        .query = {{"comp", "lease"}},
        .nquery = 1,
        .xms = {{"x-ms-lease-action", "acquire"},
                {"x-ms-proposed-lease-id", "6e8d5f33-5db8-44ef-a5c1-ec5e2c5ea949"},
                {"x-ms-lease-duration", "15"}},
        .nxms = 3};
    struct blob_signed s;
    assert_int_equal(
        blob_sign_request(&a, "ctest-e6b3f5ee", &r, "Sun, 22 Nov 2026 04:11:23 GMT", &s), 0);
    assert_string_equal(
        s.string_to_sign,
        "PUT\n\n\n\n\n\n\n\n\n\n\n\n"
        "x-ms-date:Sun, 22 Nov 2026 04:11:23 "
        "GMT\nx-ms-lease-action:acquire\nx-ms-lease-duration:15\n"
        "x-ms-proposed-lease-id:6e8d5f33-5db8-44ef-a5c1-ec5e2c5ea949\nx-ms-version:2021-08-06\n"
        "/devstoreaccount1/devstoreaccount1/ctest-e6b3f5ee/hello.txt\ncomp:lease");
    assert_string_equal(s.authorization,
                        "SharedKey devstoreaccount1:7X/1UuESqDywYi9Ay6M8Pt/aECarB9g2qRVN4oFIa/4=");
    blob_signed_free(&s);
}

static void sign_special_name(void **st)
{
    (void)st;
    struct blob_account a = dev_account();
    struct blob_request r = {.verb = "GET", .blob = SPECIAL_NAME};
    struct blob_signed s;
    assert_int_equal(
        blob_sign_request(&a, "ctest-103abd58", &r, "Sun, 22 Nov 2026 04:24:31 GMT", &s), 0);
    assert_string_equal(s.url,
                        "http://127.0.0.1:10000/devstoreaccount1/ctest-103abd58/" SPECIAL_PATH);
    /* The path is signed as sent: encoded, '/' kept, the account twice. */
    assert_string_equal(s.string_to_sign,
                        "GET\n\n\n\n\n\n\n\n\n\n\n\n"
                        "x-ms-date:Sun, 22 Nov 2026 04:24:31 GMT\nx-ms-version:2021-08-06\n"
                        "/devstoreaccount1/devstoreaccount1/ctest-103abd58/" SPECIAL_PATH);
    assert_string_equal(s.authorization,
                        "SharedKey devstoreaccount1:r0t3GJQk/I/IYLppBMMIsptwHBtlerb2vTLl9k1BJ3s=");
    blob_signed_free(&s);
}

static void sign_host_style(void **st)
{
    (void)st;
    struct blob_account a = parse_ok("AccountName=myacct;AccountKey=" DEV_KEY);
    struct blob_request r = {.verb = "GET", .blob = "b"};
    struct blob_signed s;
    assert_int_equal(blob_sign_request(&a, "cnt", &r, "Sun, 22 Nov 2026 04:24:31 GMT", &s), 0);
    assert_string_equal(s.url, "https://myacct.blob.core.windows.net/cnt/b");
    /* An account host: the account once. */
    assert_string_equal(s.string_to_sign,
                        "GET\n\n\n\n\n\n\n\n\n\n\n\n"
                        "x-ms-date:Sun, 22 Nov 2026 04:24:31 GMT\nx-ms-version:2021-08-06\n"
                        "/myacct/cnt/b");
    assert_string_equal(s.authorization,
                        "SharedKey myacct:+jDmws3vnVVa8wzLwy97WSCTY87mRIm48bRCLBtlbls=");
    blob_signed_free(&s);
}

static void sign_create_container(void **st)
{
    (void)st;
    struct blob_account a = dev_account();
    struct blob_request r = {
        .verb = "PUT", .query = {{"restype", "container"}}, .nquery = 1, .body = "", .body_len = 0};
    struct blob_signed s;
    assert_int_equal(blob_sign_request(&a, "cnt", &r, "Sun, 22 Nov 2026 04:24:31 GMT", &s), 0);
    assert_string_equal(s.url, "http://127.0.0.1:10000/devstoreaccount1/cnt?restype=container");
    assert_string_equal(s.string_to_sign,
                        "PUT\n\n\n\n\n\n\n\n\n\n\n\n"
                        "x-ms-date:Sun, 22 Nov 2026 04:24:31 GMT\nx-ms-version:2021-08-06\n"
                        "/devstoreaccount1/devstoreaccount1/cnt\nrestype:container");
    assert_string_equal(s.authorization,
                        "SharedKey devstoreaccount1:ry4B3IlDcom/Rh10WjtrYgNyXi89HhuvPQ53kCiDDWY=");
    blob_signed_free(&s);
}

static void sign_append_block(void **st)
{
    (void)st;
    struct blob_account a = dev_account();
    struct blob_request r = {.verb = "PUT",
                             .blob = "journal/1/42",
                             .query = {{"comp", "appendblock"}},
                             .nquery = 1,
                             .xms = {{"x-ms-blob-condition-appendpos", "300"}},
                             .nxms = 1,
                             .body = "hello",
                             .body_len = 5,
                             .content_type = "application/octet-stream",
                             .if_match = "\"0xABC\""};
    struct blob_signed s;
    assert_int_equal(blob_sign_request(&a, "cnt", &r, "Sun, 22 Nov 2026 04:24:31 GMT", &s), 0);
    assert_string_equal(
        s.url, "http://127.0.0.1:10000/devstoreaccount1/cnt/journal/1/42?comp=appendblock");
    assert_string_equal(s.string_to_sign,
                        "PUT\n\n\n5\n\napplication/octet-stream\n\n\n\"0xABC\"\n\n\n\n"
                        "x-ms-blob-condition-appendpos:300\nx-ms-date:Sun, 22 Nov 2026 04:24:31 "
                        "GMT\nx-ms-version:2021-08-06\n"
                        "/devstoreaccount1/devstoreaccount1/cnt/journal/1/42\ncomp:appendblock");
    assert_string_equal(s.authorization,
                        "SharedKey devstoreaccount1:PmTQTBRmdOYBgO7FxtzMiZtVTXaujYyt8FJlCQvdq04=");
    blob_signed_free(&s);
}

static void sign_query_canonical(void **st)
{
    (void)st;
    struct blob_account a = dev_account();
    /* Mixed-case names are lower-cased and sorted; an empty value still appears; a value with
     * '=' and '/' is encoded in the URL and signed decoded; a repeated name is joined. */
    struct blob_request r = {.verb = "GET",
                             .query = {{"Prefix", ""},
                                       {"restype", "container"},
                                       {"marker", "a=b/c d"},
                                       {"include", "metadata"},
                                       {"COMP", "list"},
                                       {"include", "snapshots"}},
                             .nquery = 6,
                             .xms = {{"X-MS-Client-Request-Id", "r1"}},
                             .nxms = 1};
    struct blob_signed s;
    assert_int_equal(blob_sign_request(&a, "cnt", &r, "D", &s), 0);
    assert_string_equal(s.url, "http://127.0.0.1:10000/devstoreaccount1/cnt?Prefix=&restype="
                               "container&marker=a%3Db%2Fc%20d&include=metadata&COMP=list&"
                               "include=snapshots");
    assert_string_equal(s.string_to_sign,
                        "GET\n\n\n\n\n\n\n\n\n\n\n\n"
                        "x-ms-client-request-id:r1\nx-ms-date:D\nx-ms-version:2021-08-06\n"
                        "/devstoreaccount1/devstoreaccount1/cnt\ncomp:list\ninclude:metadata,"
                        "snapshots\nmarker:a=b/c d\nprefix:\nrestype:container");
    blob_signed_free(&s);

    /* Too many parameters is an error, not an overflow. */
    r.nquery = BLOB_REQ_MAX_QUERY + 1;
    assert_int_equal(blob_sign_request(&a, "cnt", &r, "D", &s), -1);
}

static void xml_unescape(void **st)
{
    (void)st;
    static const struct {
        const char *in, *out;
    } ok[] = {{"plain", "plain"},
              {"a&amp;b&lt;c&gt;d&quot;e&apos;f", "a&b<c>d\"e'f"},
              {"&#233;&#xE9;&#Xe9;", "\xC3\xA9\xC3\xA9\xC3\xA9"},
              {"&#x20AC;&#128512;", "\xE2\x82\xAC\xF0\x9F\x98\x80"},
              {"&#x10FFFF;", "\xF4\x8F\xBF\xBF"},
              {"", ""}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char *s = blob_xml_unescape(ok[i].in, strlen(ok[i].in));
        assert_non_null(s);
        assert_string_equal(s, ok[i].out);
        free(s);
    }
    static const char *const bad[] = {"&foo;", "&amp", "&#0;",   "&#xD800;", "&#x110000;",
                                      "&#;",   "&#x;", "&#12a;", "a & b",    "&#99999999999999;",
                                      "&",     "&AMP;"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_null(blob_xml_unescape(bad[i], strlen(bad[i])));
    /* The length bounds the input: no NUL is needed and nothing past it is read. */
    char *s = blob_xml_unescape("ab&amp;cd", 2);
    assert_string_equal(s, "ab");
    free(s);
}

static void list_parse(void **st)
{
    (void)st;
    static const char xml[] =
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?><EnumerationResults "
        "ServiceEndpoint=\"http://127.0.0.1:10000/devstoreaccount1\" ContainerName=\"c\">"
        "<Prefix>list/</Prefix><Marker/><MaxResults>3</MaxResults><Blobs>"
        "<Blob><Name>list/item-0</Name><Properties><Creation-Time>x</Creation-Time>"
        "<Etag>0x1E784236B9D5E70</Etag><Content-Length>300</Content-Length>"
        "<BlobType>BlockBlob</BlobType></Properties></Blob>"
        "<BlobPrefix><Name>list/dir/</Name></BlobPrefix>"
        "<Blob><Name>list/a&amp;b&lt;c&gt; &#233;</Name><Properties><Etag>\"0x2\"</Etag>"
        "<Content-Length>0</Content-Length></Properties><Metadata><Name>no</Name></Metadata>"
        "</Blob>"
        "<Blob><Name Encoded=\"true\">list/%01x</Name><Properties>"
        "<Content-Length>7</Content-Length></Properties></Blob>"
        "<Blob><Name>list/no-props</Name></Blob>"
        "</Blobs><NextMarker>list/a&amp;b</NextMarker></EnumerationResults>";
    struct blob_list l = {0};
    assert_int_equal(blob_parse_list(xml, strlen(xml), &l), 0);
    assert_int_equal(l.count, 4);
    assert_string_equal(l.items[0].name, "list/item-0");
    assert_string_equal(l.items[0].etag, "\"0x1E784236B9D5E70\"");
    assert_int_equal(l.items[0].size, 300);
    assert_string_equal(l.items[1].name, "list/a&b<c> \xC3\xA9");
    assert_string_equal(l.items[1].etag, "\"0x2\"");
    assert_int_equal(l.items[1].size, 0);
    assert_string_equal(l.items[2].name, "list/\x01x");
    assert_string_equal(l.items[2].etag, "");
    assert_int_equal(l.items[2].size, 7);
    assert_string_equal(l.items[3].name, "list/no-props");
    assert_int_equal(l.items[3].size, -1);
    assert_string_equal(l.next_marker, "list/a&b");
    blob_list_free(&l);
    assert_int_equal(l.count, 0);
    assert_null(l.items);

    /* The last page: an empty NextMarker, in either form. */
    static const char *const last[] = {
        "<EnumerationResults><Blobs><Blob><Name>x</Name></Blob></Blobs><NextMarker/>"
        "</EnumerationResults>",
        "<EnumerationResults><Blobs><Blob><Name>x</Name></Blob></Blobs><NextMarker />"
        "</EnumerationResults>",
        "<EnumerationResults><Blobs><Blob><Name>x</Name></Blob></Blobs><NextMarker>"
        "</NextMarker></EnumerationResults>"};
    for (size_t i = 0; i < sizeof last / sizeof last[0]; i++) {
        assert_int_equal(blob_parse_list(last[i], strlen(last[i]), &l), 0);
        assert_int_equal(l.count, 1);
        assert_null(l.next_marker);
        blob_list_free(&l);
    }

    /* Nothing listed. */
    const char *empty = "<EnumerationResults><Blobs /><NextMarker/></EnumerationResults>";
    assert_int_equal(blob_parse_list(empty, strlen(empty), &l), 0);
    assert_int_equal(l.count, 0);
    blob_list_free(&l);

    /* Malformed: cut off, a bad entity, not a listing, a bad size. */
    static const char *const bad[] = {
        "<EnumerationResults><Blobs><Blob><Name>x</Name>",
        "<EnumerationResults><Blobs><Blob><Name>x&bad;</Name></Blob></Blobs></EnumerationResults>",
        "<Error><Code>x</Code></Error>",
        "<EnumerationResults><Blobs><Blob><Name>x</Name><Properties><Content-Length>-1"
        "</Content-Length></Properties></Blob></Blobs></EnumerationResults>",
        "<EnumerationResults><Blobs><Blob><Properties/></Blob></Blobs></EnumerationResults>",
        "<EnumerationResults><Blobs><Blob><Name Encoded=\"true\">%00</Name></Blob></Blobs>"
        "</EnumerationResults>",
        ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(blob_parse_list(bad[i], strlen(bad[i]), &l), -1);
        assert_int_equal(l.count, 0);
        assert_null(l.items);
    }
}

static void transient_classification(void **st)
{
    (void)st;
    struct blob_result r = {0};
    static const long yes[] = {408, 429, 500, 502, 503, 504};
    static const long no[] = {200, 201, 304, 400, 403, 404, 409, 412, 501};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        r.status = yes[i];
        assert_true(blob_result_transient(&r));
    }
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        r.status = no[i];
        assert_false(blob_result_transient(&r));
    }
    r.status = 0;
    static const int transport[] = {CURLE_COULDNT_CONNECT, CURLE_OPERATION_TIMEDOUT,
                                    CURLE_RECV_ERROR,      CURLE_SEND_ERROR,
                                    CURLE_GOT_NOTHING,     CURLE_COULDNT_RESOLVE_HOST};
    for (size_t i = 0; i < sizeof transport / sizeof transport[0]; i++) {
        r.curl_code = transport[i];
        assert_true(blob_result_transient(&r));
    }
    /* Our own failures (curl_code 0) and errors retrying cannot fix are not transient. */
    static const int other[] = {0, CURLE_WRITE_ERROR, CURLE_URL_MALFORMAT,
                                CURLE_UNSUPPORTED_PROTOCOL, CURLE_OUT_OF_MEMORY};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
        r.curl_code = other[i];
        assert_false(blob_result_transient(&r));
    }
}

/* A loopback port that nothing listens on: bound, then closed. */
static int closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    socklen_t len = sizeof sa;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

static struct blob_client *client_on_closed_port(void)
{
    char ep[64], err[128];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", closed_port());
    struct blob_account a;
    assert_int_equal(blob_account_init(&a, ep, "devstoreaccount1", DEV_KEY, err, sizeof err), 0);
    struct blob_options o = {.connect_timeout_ms = 2000, .timeout_ms = 5000};
    struct blob_client *c;
    if (blob_client_new(&a, "cnt", &o, &c, err, sizeof err) != 0)
        fail_msg("client: %s", err);
    return c;
}

static void refused_connection_is_transient(void **st)
{
    (void)st;
    assert_int_equal(blob_global_init(), 0);
    struct blob_client *c = client_on_closed_port();
    struct blob_result r = {0};
    assert_int_equal(blob_put(c, "x", "abc", 3, NULL, &r), -1);
    assert_int_equal(r.status, 0);
    assert_int_equal(r.curl_code, CURLE_COULDNT_CONNECT);
    assert_true(r.message[0] != '\0');
    assert_true(blob_result_transient(&r));
    blob_result_free(&r);
    blob_client_free(c);
    blob_global_cleanup();
}

static void client_rejects_bad_container(void **st)
{
    (void)st;
    struct blob_account a = dev_account();
    struct blob_client *c = NULL;
    char err[128];
    static const char *const bad[] = {"ab", "Upper", "a--b", "-ab", "ab-", "a_b", "dir/x", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(blob_client_new(&a, bad[i], NULL, &c, err, sizeof err), -1);
        assert_null(c);
        assert_non_null(strstr(err, "container name"));
    }
    char long_name[65];
    memset(long_name, 'a', 64);
    long_name[64] = '\0';
    assert_int_equal(blob_client_new(&a, long_name, NULL, &c, err, sizeof err), -1);
    long_name[63] = '\0';
    assert_int_equal(blob_client_new(&a, long_name, NULL, &c, err, sizeof err), 0);
    blob_client_free(c);
    assert_int_equal(blob_client_new(&a, "a-b-0", NULL, &c, err, sizeof err), 0);
    blob_client_free(c);
    struct blob_account empty = {0};
    assert_int_equal(blob_client_new(&empty, "abc", NULL, &c, err, sizeof err), -1);
}

/* Bad arguments fail before anything is sent: no status and no transport error. */
static void bad_arguments_fail_locally(void **st)
{
    (void)st;
    struct blob_client *c = client_on_closed_port();
    struct blob_result r = {0};
    char big[BLOB_NAME_MAX + 2];
    memset(big, 'n', sizeof big - 1);
    big[sizeof big - 1] = '\0';

#define LOCAL_FAIL(call)                                                                           \
    do {                                                                                           \
        assert_int_equal((call), -1);                                                              \
        assert_int_equal(r.status, 0);                                                             \
        assert_int_equal(r.curl_code, 0);                                                          \
        assert_true(r.message[0] != '\0');                                                         \
        assert_false(blob_result_transient(&r));                                                   \
    } while (0)
    LOCAL_FAIL(blob_put(c, "", "x", 1, NULL, &r));
    LOCAL_FAIL(blob_put(c, big, "x", 1, NULL, &r));
    LOCAL_FAIL(blob_put(c, "x", NULL, 1, NULL, &r));
    LOCAL_FAIL(blob_put(c, "x", "x", 1, &(struct blob_cond){.if_match = "\"a\"\r\nX-Evil: 1"}, &r));
    LOCAL_FAIL(blob_get(c, "x", &(struct blob_cond){.if_none_match = ""}, &r));
    LOCAL_FAIL(blob_delete(c, "x", &(struct blob_cond){.lease_id = "a\nb"}, &r));
    LOCAL_FAIL(blob_append_block(c, "x", "", 0, 0, NULL, &r));
    LOCAL_FAIL(blob_lease_acquire(c, "x", 10, NULL, &r));
    LOCAL_FAIL(blob_lease_acquire(c, "x", 61, NULL, &r));
    LOCAL_FAIL(blob_lease_renew(c, "x", NULL, &r));
    LOCAL_FAIL(blob_lease_break(c, "x", 61, &r));
#undef LOCAL_FAIL
    blob_result_free(&r);
    blob_client_free(c);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(connection_string_full),
    cmocka_unit_test(connection_string_development_storage),
    cmocka_unit_test(connection_string_azure),
    cmocka_unit_test(connection_string_endpoints),
    cmocka_unit_test(connection_string_errors),
    cmocka_unit_test(account_key_padding),
    cmocka_unit_test(url_encoding),
    cmocka_unit_test(date_is_rfc1123_in_any_locale),
    cmocka_unit_test(hmac_known_answer),
    cmocka_unit_test(sign_put_conditional),
    cmocka_unit_test(sign_list_page),
    cmocka_unit_test(sign_lease_acquire),
    cmocka_unit_test(sign_special_name),
    cmocka_unit_test(sign_host_style),
    cmocka_unit_test(sign_create_container),
    cmocka_unit_test(sign_append_block),
    cmocka_unit_test(sign_query_canonical),
    cmocka_unit_test(xml_unescape),
    cmocka_unit_test(list_parse),
    cmocka_unit_test(transient_classification),
    cmocka_unit_test(refused_connection_is_transient),
    cmocka_unit_test(client_rejects_bad_container),
    cmocka_unit_test(bad_arguments_fail_locally),
};
MX_TEST_MAIN(tests)
