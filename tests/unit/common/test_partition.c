/*
 * The partition of a resource (common/partition.h) against the published test vectors
 * (tests/vectors/partitions.json, the table of docs/api.md), which every client's tests run
 * too; and the hash-tag rule's edges one by one.
 */
#include "tests/unit/testutil.h"

#include <cjson/cJSON.h>

#include "common/partition.h"

static cJSON *load_vectors(void)
{
    FILE *f = fopen(MX_PARTITION_VECTORS, "r");
    if (!f)
        fail_msg("cannot open %s", MX_PARTITION_VECTORS);
    static char text[65536];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    cJSON *doc = cJSON_Parse(text);
    assert_non_null(doc);
    return doc;
}

static void every_published_vector_holds(void **st)
{
    (void)st;
    cJSON *doc = load_vectors();
    const cJSON *v;
    int checked = 0;
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(doc, "vectors"))
    {
        const char *name = cJSON_GetObjectItemCaseSensitive(v, "name")->valuestring;
        const char *hashed = cJSON_GetObjectItemCaseSensitive(v, "hashed")->valuestring;
        unsigned long crc =
            strtoul(cJSON_GetObjectItemCaseSensitive(v, "crc32")->valuestring, NULL, 16);
        size_t tag_len;
        const char *tag = mx_hash_tag(name, strlen(name), &tag_len);
        if (tag_len != strlen(hashed) || memcmp(tag, hashed, tag_len) != 0)
            fail_msg("%s: hashes \"%.*s\", not \"%s\"", name, (int)tag_len, tag, hashed);
        assert_int_equal(mx_name_hash(name, strlen(name)), crc);
        const cJSON *p;
        cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(v, "partitions"))
        {
            unsigned count = (unsigned)strtoul(p->string, NULL, 10);
            if (mx_partition(name, strlen(name), count) != (unsigned)p->valueint)
                fail_msg("%s: partition %u of %u, want %d", name,
                         mx_partition(name, strlen(name), count), count, p->valueint);
            checked++;
        }
    }
    assert_true(checked >= 40);
    cJSON_Delete(doc);
}

/* The rule in words: the first `{`, the first `}` after it, at least one byte between. */
static void the_hash_tag_rule(void **st)
{
    (void)st;
    static const struct {
        const char *name, *tag;
    } cases[] = {
        {"{order-7}/lock", "order-7"},
        {"x/{order-7}", "order-7"},
        {"a{}b", "a{}b"},
        {"{a{b}c", "a{b"},
        {"a{b", "a{b"},
        {"a}b{c}", "c"},
        {"{}{x}", "{}{x}"},
        {"{{x}}", "{x"},
        {"plain", "plain"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n;
        const char *t = mx_hash_tag(cases[i].name, strlen(cases[i].name), &n);
        if (n != strlen(cases[i].tag) || memcmp(t, cases[i].tag, n) != 0)
            fail_msg("%s: \"%.*s\", want \"%s\"", cases[i].name, (int)n, t, cases[i].tag);
    }
    /* One partition: always 0; names sharing a tag share a partition whatever the count. */
    assert_int_equal(mx_partition("anything", 8, 1), 0);
    for (unsigned count = 2; count <= MX_PARTITIONS_MAX; count++)
        assert_int_equal(mx_partition("{o}/a", 5, count), mx_partition("{o}/bb", 6, count));
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(every_published_vector_holds),
    cmocka_unit_test(the_hash_tag_rule),
};
MX_TEST_MAIN(tests)
