/*
 * The contract's limits on names (docs/api.md, "Names"), written once for every module that
 * holds a name: the HTTP front checks them, the actors and the store keep names within
 * them, and the journal refuses records that break them.
 */
#ifndef MX_NAMES_H
#define MX_NAMES_H

#define MX_NAME_MAX  256 /* a resource name (and a token's prefix): 1 to 256 bytes */
#define MX_OWNER_MAX 256 /* an owner: 1 to 256 bytes of UTF-8 */

#endif
