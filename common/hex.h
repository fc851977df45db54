/*
 * Hexadecimal digits read in either case, independent of the process locale (<ctype.h>'s
 * isxdigit follows it). Used by UUIDs and by percent-decoding.
 */
#ifndef MX_HEX_H
#define MX_HEX_H

/* The value of a hexadecimal digit (0-9, a-f, A-F), or -1 for any other char. */
int mx_hex_digit(char ch);

/* The byte written as the two digits `hi` `lo` (0 to 255), or -1 when either is not a
 * hexadecimal digit. */
int mx_hex_byte(char hi, char lo);

#endif
