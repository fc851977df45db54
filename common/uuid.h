/*
 * UUIDs for lease ids: parsed in any case from the 8-4-4-4-12 hex form, written in lower
 * case, generated (version 4) from OpenSSL's random source.
 */
#ifndef MX_UUID_H
#define MX_UUID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MX_UUID_STR_LEN 36

/* Parses exactly `len` bytes. Returns true on success. */
bool mx_uuid_parse(const char *s, size_t len, uint8_t out[16]);
/* Writes 36 characters and a NUL into `out` (37 bytes). */
void mx_uuid_format(const uint8_t id[16], char out[MX_UUID_STR_LEN + 1]);
/* A random version-4 UUID. Returns 0, or -1 if the random source failed. */
int mx_uuid_random(uint8_t out[16]);

#endif
