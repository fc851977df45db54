/*
 * SipHash-1-3 with a 128-bit key: names in the directory come from clients, so the
 * hash must be keyed to keep an attacker from sending names that all collide.
 */
#ifndef MX_HASH_H
#define MX_HASH_H

#include <stddef.h>
#include <stdint.h>

struct mx_hash_key {
    uint64_t k0, k1;
};

uint64_t mx_siphash(const struct mx_hash_key *key, const void *data, size_t len);

/* Fills `key` from the system's random source. Returns 0, or -1 if none could be read. */
int mx_hash_key_random(struct mx_hash_key *key);

#endif
