/*
 * Fuzzer: request routing and resource-name validation (http/api.c). The first byte picks
 * the method, the rest is the decoded path. Checks that a routed name is always valid.
 */
#include <stdlib.h>
#include <string.h>

#include "http/api.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);
int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    static const char *const methods[] = {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH"};
    if (size == 0)
        return 0;
    const char *method = methods[data[0] % 6];
    char *path = malloc(size);
    memcpy(path, data + 1, size - 1);
    path[size - 1] = '\0';

    enum api_route route;
    const char *name;
    size_t len;
    struct api_error e;
    if (api_route(method, path, &route, &name, &len, &e)) {
        if (name && !api_valid_resource(name, len))
            abort(); /* a route must never hand on an invalid name */
        if (name && (name < path || name + len > path + strlen(path)))
            abort();
    } else if (e.status < 400 || e.status > 499 || !e.code) {
        abort();
    }
    api_valid_resource((const char *)data, size);
    free(path);
    return 0;
}
