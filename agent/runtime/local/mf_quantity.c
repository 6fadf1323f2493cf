/* Kubernetes quantities, Go durations, resource keys and object names
 * (reference §6.4). Pure functions. */
#include "agent/runtime/local/manifest.h"

#include "agentbox/common.h"

#include <stdio.h>
#include <string.h>

typedef unsigned __int128 u128;
#define U128_MAX (~(u128)0)

/* ceil(value * 10^scale), where value is the quantity s. */
static int quantity_scaled(const char *s, int scale, int64_t *out)
{
    static const struct {
        const char *sfx;
        int dec; /* power of ten */
        int bin; /* power of 1024 */
    } sfx[] = {{"Ki", 0, 1}, {"Mi", 0, 2}, {"Gi", 0, 3}, {"Ti", 0, 4}, {"Pi", 0, 5},
               {"Ei", 0, 6}, {"n", -9, 0}, {"u", -6, 0}, {"m", -3, 0}, {"k", 3, 0},
               {"M", 6, 0},  {"G", 9, 0},  {"T", 12, 0}, {"P", 15, 0}, {"E", 18, 0}};
    const char *p = s;
    u128 m = 0;
    int digits = 0, frac = 0, exp10 = 0, bin = 0;
    size_t i;

    if (*p == '+')
        p++;
    if (*p < '0' || *p > '9') {
        if (!(*p == '.' && p[1] >= '0' && p[1] <= '9'))
            return AB_EINVAL;
    }
    for (; *p >= '0' && *p <= '9'; p++) {
        if (++digits > 30)
            return AB_EINVAL;
        m = m * 10 + (u128)(*p - '0');
    }
    if (*p == '.') {
        for (p++; *p >= '0' && *p <= '9'; p++, frac++) {
            if (++digits > 30)
                return AB_EINVAL;
            m = m * 10 + (u128)(*p - '0');
        }
    }
    if ((*p == 'e' || *p == 'E') && p[1] != '\0' &&
        (p[1] == '-' || p[1] == '+' || (p[1] >= '0' && p[1] <= '9'))) {
        int sign = 1, e = 0, ed = 0;

        p++;
        if (*p == '-' || *p == '+')
            sign = *p++ == '-' ? -1 : 1;
        for (; *p >= '0' && *p <= '9'; p++) {
            if (++ed > 3)
                return AB_EINVAL;
            e = e * 10 + (*p - '0');
        }
        if (ed == 0 || *p)
            return AB_EINVAL;
        exp10 = sign * e;
    } else if (*p) {
        for (i = 0; i < AB_ARRAY_LEN(sfx); i++)
            if (!strcmp(p, sfx[i].sfx))
                break;
        if (i == AB_ARRAY_LEN(sfx))
            return AB_EINVAL;
        exp10 = sfx[i].dec;
        bin = sfx[i].bin;
    }
    for (; bin > 0; bin--) {
        if (m > U128_MAX / 1024)
            return AB_EINVAL;
        m *= 1024;
    }
    exp10 += scale - frac;
    if (exp10 >= 0) {
        for (; exp10 > 0; exp10--) {
            if (m > U128_MAX / 10)
                return AB_EINVAL;
            m *= 10;
        }
    } else {
        u128 div = 1;

        if (exp10 < -38) {
            m = m ? 1 : 0;
        } else {
            for (; exp10 < 0; exp10++)
                div *= 10;
            m = m / div + (m % div ? 1 : 0);
        }
    }
    if (m > (u128)INT64_MAX)
        return AB_EINVAL;
    *out = (int64_t)m;
    return 0;
}

int mf_quantity_milli(const char *s, int64_t *milli)
{
    return quantity_scaled(s, 3, milli);
}

int mf_quantity_bytes(const char *s, int64_t *bytes)
{
    return quantity_scaled(s, 0, bytes);
}

int mf_duration_ms(const char *s, int64_t *ms)
{
    static const struct {
        const char *unit;
        int64_t ns;
    } units[] = {
        {"ns", 1},       {"us", 1000},        {"\xc2\xb5s", 1000},  {"\xce\xbcs", 1000},
        {"ms", 1000000}, {"s", 1000000000LL}, {"m", 60000000000LL}, {"h", 3600000000000LL}};
    const u128 cap = (u128)100 * 365 * 24 * 3600000000000LL; /* 100 years */
    const char *p = s;
    u128 total = 0;

    if (*p == '+')
        p++;
    if (!strcmp(p, "0")) {
        *ms = 0;
        return 0;
    }
    if (!*p)
        return AB_EINVAL;
    while (*p) {
        u128 ip = 0, fp = 0, fscale = 1;
        int digits = 0;
        size_t i, best = 0, bestlen = 0;

        for (; *p >= '0' && *p <= '9'; p++, digits++) {
            if (digits > 18)
                return AB_EINVAL;
            ip = ip * 10 + (u128)(*p - '0');
        }
        if (*p == '.') {
            for (p++; *p >= '0' && *p <= '9'; p++, digits++) {
                if (fscale < (u128)1000000000000000000ULL) {
                    fp = fp * 10 + (u128)(*p - '0');
                    fscale *= 10;
                }
            }
        }
        if (digits == 0)
            return AB_EINVAL;
        for (i = 0; i < AB_ARRAY_LEN(units); i++) {
            size_t l = strlen(units[i].unit);
            if (!strncmp(p, units[i].unit, l) && l > bestlen) {
                best = i;
                bestlen = l;
            }
        }
        if (bestlen == 0)
            return AB_EINVAL;
        p += bestlen;
        total += ip * (u128)units[best].ns + (fp * (u128)units[best].ns + fscale - 1) / fscale;
        if (total > cap)
            return AB_EINVAL;
    }
    *ms = (int64_t)((total + 999999) / 1000000);
    return 0;
}

int mf_resource_key(int64_t cpu_milli, int64_t mem_bytes, char *out, size_t outlen)
{
    int64_t cpu = cpu_milli / 1000 + (cpu_milli % 1000 ? 1 : 0);
    int64_t gi = mem_bytes / (1LL << 30);

    if (cpu <= 0 && gi <= 0)
        return AB_EINVAL;
    if (snprintf(out, outlen, "%lldc%lldgi", (long long)cpu, (long long)gi) >= (int)outlen)
        return AB_ELIMIT;
    return 0;
}

bool mf_name_is_label(const char *s, size_t max, bool letter_first)
{
    size_t n = strlen(s), i;

    if (n == 0 || n > max)
        return false;
    if (!((s[0] >= 'a' && s[0] <= 'z') || (!letter_first && s[0] >= '0' && s[0] <= '9')))
        return false;
    for (i = 1; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
            return false;
    }
    return s[n - 1] != '-';
}

bool mf_name_is_subdomain(const char *s)
{
    char part[MF_TEMPLATE_NAME_MAX + 1];
    const char *p = s, *dot;
    size_t n = strlen(s);

    if (n == 0 || n > MF_TEMPLATE_NAME_MAX)
        return false;
    for (;;) {
        size_t l;
        dot = strchr(p, '.');
        l = dot ? (size_t)(dot - p) : strlen(p);
        if (l == 0 || l > 63)
            return false;
        memcpy(part, p, l);
        part[l] = '\0';
        if (!mf_name_is_label(part, 63, false))
            return false;
        if (!dot)
            return true;
        p = dot + 1;
    }
}

const char *mf_kind_name(enum mf_kind k)
{
    switch (k) {
    case MF_TEMPLATE:
        return "SandboxTemplate";
    case MF_POOL:
        return "SandboxPool";
    case MF_ENV:
        return "SandboxEnv";
    }
    return "?";
}
