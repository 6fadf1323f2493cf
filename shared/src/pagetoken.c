/* See pagetoken.h. */
#include "agentbox/pagetoken.h"
#include "agentbox/crypto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t pagetoken_decode(const char *t)
{
    char b64[64], num[48];
    uint8_t dec[48];
    size_t n = t ? strlen(t) : 0, w = 0;
    if (n == 0 || n > 40)
        return 0;
    for (size_t i = 0; i < n; i++)
        b64[i] = t[i] == '-' ? '+' : t[i] == '_' ? '/' : t[i];
    while (n % 4)
        b64[n++] = '=';
    b64[n] = '\0';
    if (crypto_base64_decode(b64, n, dec, sizeof(dec) - 1, &w) != 0 || w == 0 || w >= sizeof(num))
        return 0;
    memcpy(num, dec, w);
    num[w] = '\0';
    char *end = NULL;
    long long off = strtoll(num, &end, 10);
    return end && *end == '\0' && off > 0 ? off : 0;
}

void pagetoken_encode(int64_t off, char out[PAGETOKEN_MAX])
{
    char num[32], b64[64];
    size_t j = 0;
    snprintf(num, sizeof(num), "%lld", (long long)off);
    crypto_base64_encode(num, strlen(num), b64);
    for (size_t i = 0; b64[i] && b64[i] != '=' && j + 1 < PAGETOKEN_MAX; i++)
        out[j++] = b64[i] == '+' ? '-' : b64[i] == '/' ? '_' : b64[i];
    out[j] = '\0';
}
