/*
 * Fuzzer: the Azure Storage connection-string parser (blob/account.c).
 */
#include <stdlib.h>
#include <string.h>

#include "blob/blob.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);
int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    char *cs = malloc(size + 1);
    memcpy(cs, data, size);
    cs[size] = '\0';
    struct blob_account a;
    char err[256];
    if (blob_parse_connection_string(cs, &a, err, sizeof err) == 0) {
        if (!a.name[0] || a.key_len == 0 || a.key_len > BLOB_KEY_MAX || !a.endpoint[0])
            abort(); /* accepted means complete */
        size_t n = strlen(a.endpoint);
        if (a.endpoint[n - 1] == '/')
            abort();
        blob_account_wipe(&a);
    }
    free(cs);
    return 0;
}
