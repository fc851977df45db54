/*
 * mutexd_partition_of() against the published test vectors (tests/vectors/partitions.json,
 * the table of docs/api.md, "Partitions"), which the server's tests and every client's run
 * too; the hash-tag rule's edges; and a count out of range. No server.
 */
#include "testing.h"

#include <cjson/cJSON.h>

#include "mutexd.h"
#include "partition.h"

static unsigned partition_of(const char *name, unsigned count)
{
    unsigned p = 9999;
    assert_int_equal(mutexd_partition_of(name, count, &p), MUTEXD_OK);
    return p;
}

static void every_published_vector_holds(void **state)
{
    (void)state;
    FILE *f = fopen(MUTEXD_PARTITION_VECTORS, "r");
    if (f == NULL)
        fail_msg("cannot open %s", MUTEXD_PARTITION_VECTORS);
    static char text[65536];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    cJSON *doc = cJSON_Parse(text);
    assert_non_null(doc);
    int checked = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(doc, "vectors"))
    {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "name"));
        const char *hashed = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "hashed"));
        const char *crc = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "crc32"));
        assert_true(name != NULL && hashed != NULL && crc != NULL);
        size_t len;
        const char *tag = mxc_hash_tag(name, &len);
        if (len != strlen(hashed) || memcmp(tag, hashed, len) != 0)
            fail_msg("%s: hashes \"%.*s\", not \"%s\"", name, (int)len, tag, hashed);
        if (mxc_name_hash(name) != strtoul(crc, NULL, 16))
            fail_msg("%s: CRC-32 %08x, not %s", name, (unsigned)mxc_name_hash(name), crc);
        const cJSON *p;
        cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(v, "partitions"))
        {
            unsigned count = (unsigned)strtoul(p->string, NULL, 10);
            if (partition_of(name, count) != (unsigned)p->valueint)
                fail_msg("%s: partition %u of %u, not %d", name, partition_of(name, count), count,
                         p->valueint);
            checked++;
        }
    }
    assert_true(checked >= 40);
    cJSON_Delete(doc);
}

/* Edges of the rule the vectors leave out: one byte between the braces is a tag, a tag may end
 * the name, and a '}' before the first '{' closes nothing. */
static void the_hash_tag_rule(void **state)
{
    (void)state;
    static const char *const edges[][2] = {
        {"{x}", "x"}, {"x/{order-7}", "order-7"}, {"a}b{c}", "c"}};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        size_t len;
        const char *tag = mxc_hash_tag(edges[i][0], &len);
        if (len != strlen(edges[i][1]) || memcmp(tag, edges[i][1], len) != 0)
            fail_msg("%s: \"%.*s\", not \"%s\"", edges[i][0], (int)len, tag, edges[i][1]);
    }
    /* Names that share a tag share a partition, whatever the count. */
    for (unsigned count = 1; count <= 256; count++)
        if (partition_of("{o}/a", count) != partition_of("{o}/bb", count))
            fail_msg("{o}/a and {o}/bb apart among %u", count);
}

static void bad_arguments_are_refused(void **state)
{
    (void)state;
    unsigned p = 7;
    assert_int_equal(mutexd_partition_of("a", 0, &p), MUTEXD_ERR_ARG);
    assert_int_equal(mutexd_partition_of("a", 257, &p), MUTEXD_ERR_ARG);
    assert_int_equal(mutexd_partition_of(NULL, 3, &p), MUTEXD_ERR_ARG);
    assert_int_equal(p, 7);
    assert_int_equal(mutexd_partition_of("a", 3, NULL), MUTEXD_ERR_ARG);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(every_published_vector_holds),
    cmocka_unit_test(the_hash_tag_rule),
    cmocka_unit_test(bad_arguments_are_refused),
};

TEST_MAIN(tests)
