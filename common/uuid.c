/*
 * UUIDs for lease ids (see uuid.h): parsed and written in the 8-4-4-4-12 hex form, and
 * generated as version 4 from a per-thread pool of OpenSSL random bytes, refilled 16 UUIDs
 * at a time (each taken out of the pool is wiped from it).
 */
#include "common/uuid.h"

#include "common/hex.h"

#include <openssl/rand.h>
#include <string.h>

bool mx_uuid_parse(const char *s, size_t len, uint8_t out[16])
{
    if (len != MX_UUID_STR_LEN)
        return false;
    int k = 0;
    for (size_t i = 0; i < len;) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i++] != '-')
                return false;
            continue;
        }
        int byte = mx_hex_byte(s[i], s[i + 1]);
        if (byte < 0)
            return false;
        out[k++] = (uint8_t)byte;
        i += 2;
    }
    return k == 16;
}

void mx_uuid_format(const uint8_t id[16], char out[MX_UUID_STR_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    int o = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            out[o++] = '-';
        out[o++] = hex[id[i] >> 4];
        out[o++] = hex[id[i] & 15];
    }
    out[o] = '\0';
}

/* Random bytes drawn from OpenSSL's generator a few ids at a time: each draw costs a
 * system call (its fork check) that a lease grant need not pay every time. The bytes are
 * as random as one draw per id; each is used once. */
enum { UUID_POOL = 16 * 16 };
static _Thread_local uint8_t pool[UUID_POOL];
static _Thread_local size_t pool_used = UUID_POOL;

int mx_uuid_random(uint8_t out[16])
{
    if (pool_used == UUID_POOL) {
        if (RAND_bytes(pool, UUID_POOL) != 1)
            return -1;
        pool_used = 0;
    }
    memcpy(out, pool + pool_used, 16);
    memset(pool + pool_used, 0, 16);
    pool_used += 16;
    out[6] = (uint8_t)((out[6] & 0x0f) | 0x40); /* version 4 */
    out[8] = (uint8_t)((out[8] & 0x3f) | 0x80); /* variant 10 */
    return 0;
}
