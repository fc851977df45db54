/*
 * SipHash-1-3 (Aumasson and Bernstein), the variant Rust's and Python's hash tables
 * use: one compression round per 8 bytes and three at the end. Written out here
 * because OpenSSL's EVP_MAC SipHash needs a context allocation per call.
 */
#include "common/hash.h"

#include <string.h>
#include <sys/random.h>

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

#define SIPROUND                                                                                   \
    do {                                                                                           \
        v0 += v1;                                                                                  \
        v1 = ROTL(v1, 13);                                                                         \
        v1 ^= v0;                                                                                  \
        v0 = ROTL(v0, 32);                                                                         \
        v2 += v3;                                                                                  \
        v3 = ROTL(v3, 16);                                                                         \
        v3 ^= v2;                                                                                  \
        v0 += v3;                                                                                  \
        v3 = ROTL(v3, 21);                                                                         \
        v3 ^= v0;                                                                                  \
        v2 += v1;                                                                                  \
        v1 = ROTL(v1, 17);                                                                         \
        v1 ^= v2;                                                                                  \
        v2 = ROTL(v2, 32);                                                                         \
    } while (0)

uint64_t mx_siphash(const struct mx_hash_key *key, const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t v0 = 0x736f6d6570736575ull ^ key->k0;
    uint64_t v1 = 0x646f72616e646f6dull ^ key->k1;
    uint64_t v2 = 0x6c7967656e657261ull ^ key->k0;
    uint64_t v3 = 0x7465646279746573ull ^ key->k1;
    uint64_t b = (uint64_t)len << 56;
    size_t whole = len & ~(size_t)7;

    for (size_t i = 0; i < whole; i += 8) {
        uint64_t m;
        memcpy(&m, p + i, 8); /* little-endian hosts only, like the rest of the server */
        v3 ^= m;
        SIPROUND;
        v0 ^= m;
    }
    for (size_t i = 0; i < (len & 7); i++)
        b |= (uint64_t)p[whole + i] << (8 * i);
    v3 ^= b;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

int mx_hash_key_random(struct mx_hash_key *key)
{
    return getrandom(key, sizeof *key, 0) == (ssize_t)sizeof *key ? 0 : -1;
}
