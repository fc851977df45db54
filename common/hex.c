/* Hexadecimal digits (see hex.h). */
#include "common/hex.h"

int mx_hex_digit(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

int mx_hex_byte(char hi, char lo)
{
    int h = mx_hex_digit(hi), l = mx_hex_digit(lo);
    return h < 0 || l < 0 ? -1 : h << 4 | l;
}
