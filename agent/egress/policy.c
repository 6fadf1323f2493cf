/* The egress policy engine: parsing the E2B `network` object and the one
 * decision function (policy.h). Fails closed: anything it cannot parse is a
 * 400, anything it cannot classify is a deny. */
#include "agent/egress/policy.h"

#include "agentbox/common.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

static const char *const reason_labels[EGRESS_REASON_COUNT] = {
    [EGRESS_ALLOW] = "allow",
    [EGRESS_DENY_INTERNET_OFF] = "internet_off",
    [EGRESS_DENY_LOOPBACK] = "loopback",
    [EGRESS_DENY_LINK_LOCAL] = "link_local",
    [EGRESS_DENY_METADATA] = "metadata",
    [EGRESS_DENY_MULTICAST] = "multicast",
    [EGRESS_DENY_RESERVED] = "reserved",
    [EGRESS_DENY_HOST_ADDRESS] = "host_address",
    [EGRESS_DENY_PRIVATE] = "private",
    [EGRESS_DENY_NOT_ALLOWED] = "not_allowed",
    [EGRESS_DENY_DENY_OUT] = "deny_out",
    [EGRESS_DENY_CONN_LIMIT] = "conn_limit",
};

const char *egress_reason_label(enum egress_reason r)
{
    if ((int)r < 0 || r >= EGRESS_REASON_COUNT)
        return "unknown";
    return reason_labels[r];
}

/* --- addresses ------------------------------------------------------------------------ */

int egress_addr_parse(const char *s, struct egress_addr *out)
{
    memset(out, 0, sizeof(*out));
    if (!s || strlen(s) > INET6_ADDRSTRLEN)
        return AB_EINVAL;
    if (inet_pton(AF_INET, s, out->a) == 1) {
        out->family = AF_INET;
        return 0;
    }
    if (inet_pton(AF_INET6, s, out->a) == 1) {
        out->family = AF_INET6;
        return 0;
    }
    return AB_EINVAL;
}

static void mask_bits(struct egress_addr *a, unsigned bits)
{
    unsigned len = a->family == AF_INET ? 4 : 16;
    for (unsigned i = 0; i < len; i++) {
        unsigned keep = bits >= 8 * (i + 1) ? 8 : (bits > 8 * i ? bits - 8 * i : 0);
        a->a[i] &= (uint8_t)(0xff00u >> keep);
    }
}

int egress_cidr_parse(const char *s, struct egress_cidr *out)
{
    char ip[INET6_ADDRSTRLEN + 1];
    const char *slash = s ? strchr(s, '/') : NULL;
    size_t n = slash ? (size_t)(slash - s) : (s ? strlen(s) : 0);
    unsigned max;

    memset(out, 0, sizeof(*out));
    if (!s || n == 0 || n >= sizeof(ip))
        return AB_EINVAL;
    memcpy(ip, s, n);
    ip[n] = '\0';
    if (egress_addr_parse(ip, &out->net))
        return AB_EINVAL;
    max = out->net.family == AF_INET ? 32 : 128;
    if (!slash) {
        out->bits = (uint8_t)max;
        return 0;
    }
    const char *b = slash + 1;
    if (!*b || strlen(b) > 3 || strspn(b, "0123456789") != strlen(b) || (b[0] == '0' && b[1]))
        return AB_EINVAL;
    unsigned bits = (unsigned)atoi(b);
    if (bits > max)
        return AB_EINVAL;
    out->bits = (uint8_t)bits;
    mask_bits(&out->net, bits);
    return 0;
}

/* IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d) and NAT64
 * (64:ff9b::a.b.c.d) addresses reach the IPv4 address they carry, so they are
 * judged as it. */
static struct egress_addr unwrap(const struct egress_addr *a)
{
    static const uint8_t zero12[12];
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b};
    struct egress_addr v = *a;
    if (a->family == AF_INET6 &&
        (memcmp(a->a, mapped, 12) == 0 || memcmp(a->a, nat64, 12) == 0 ||
         (memcmp(a->a, zero12, 12) == 0 && (a->a[12] | a->a[13] | a->a[14]) != 0))) {
        memset(&v, 0, sizeof(v));
        v.family = AF_INET;
        memcpy(v.a, a->a + 12, 4);
    }
    return v;
}

bool egress_cidr_contains(const struct egress_cidr *c, const struct egress_addr *a)
{
    struct egress_addr x = unwrap(a);
    struct egress_addr cn = unwrap(&c->net);
    unsigned bits = c->bits;
    if (cn.family != c->net.family) /* a ::ffff:0:0/96-style entry: judge as IPv4 */
        bits = bits >= 96 ? bits - 96 : 0;
    if (x.family != cn.family)
        return false;
    mask_bits(&x, bits);
    return memcmp(x.a, cn.a, x.family == AF_INET ? 4 : 16) == 0;
}

struct tier_row {
    int family;
    uint8_t a[16];
    uint8_t bits;
    enum egress_reason why;
};

/* First match wins, so exact metadata addresses come before their ranges. */
static const struct tier_row tiers[] = {
    {AF_INET, {169, 254, 169, 254}, 32, EGRESS_DENY_METADATA},
    {AF_INET, {100, 100, 100, 200}, 32, EGRESS_DENY_METADATA}, /* Alibaba, inside CGNAT */
    {AF_INET6, {0xfd, 0x00, 0x0e, 0xc2, [14] = 0x02, 0x54}, 128, EGRESS_DENY_METADATA}, /* AWS */
    {AF_INET, {0}, 8, EGRESS_DENY_RESERVED}, /* 0/8 "this network" */
    {AF_INET, {127}, 8, EGRESS_DENY_LOOPBACK},
    {AF_INET, {169, 254}, 16, EGRESS_DENY_LINK_LOCAL},
    {AF_INET, {224}, 4, EGRESS_DENY_MULTICAST},
    {AF_INET, {240}, 4, EGRESS_DENY_RESERVED}, /* incl. 255.255.255.255 */
    {AF_INET, {10}, 8, EGRESS_DENY_PRIVATE},
    {AF_INET, {172, 16}, 12, EGRESS_DENY_PRIVATE},
    {AF_INET, {192, 168}, 16, EGRESS_DENY_PRIVATE},
    {AF_INET, {100, 64}, 10, EGRESS_DENY_PRIVATE}, /* CGNAT */
    {AF_INET6, {0}, 128, EGRESS_DENY_RESERVED},    /* :: */
    {AF_INET6, {[15] = 1}, 128, EGRESS_DENY_LOOPBACK},
    {AF_INET6, {0}, 96, EGRESS_DENY_RESERVED}, /* the rest of ::/96 */
    {AF_INET6, {0xfe, 0x80}, 10, EGRESS_DENY_LINK_LOCAL},
    {AF_INET6, {0xff}, 8, EGRESS_DENY_MULTICAST},
    {AF_INET6, {0xfc}, 7, EGRESS_DENY_PRIVATE},        /* ULA */
    {AF_INET6, {0xfe, 0xc0}, 10, EGRESS_DENY_PRIVATE}, /* site-local (deprecated) */
};

enum egress_tier egress_addr_tier(const struct egress_addr *a, enum egress_reason *why)
{
    struct egress_addr x = unwrap(a);
    if (why)
        *why = EGRESS_ALLOW;
    if (x.family != AF_INET && x.family != AF_INET6) {
        if (why)
            *why = EGRESS_DENY_RESERVED;
        return EGRESS_TIER_DENIED;
    }
    for (size_t i = 0; i < AB_ARRAY_LEN(tiers); i++) {
        struct egress_cidr c = {.bits = tiers[i].bits};
        if (tiers[i].family != x.family)
            continue;
        c.net.family = tiers[i].family;
        memcpy(c.net.a, tiers[i].a, 16);
        if (!egress_cidr_contains(&c, &x))
            continue;
        if (why)
            *why = tiers[i].why;
        return tiers[i].why == EGRESS_DENY_PRIVATE ? EGRESS_TIER_PRIVATE : EGRESS_TIER_DENIED;
    }
    return EGRESS_TIER_PUBLIC;
}

static bool addr_equal(const struct egress_addr *x, const struct egress_addr *y)
{
    struct egress_addr a = unwrap(x), b = unwrap(y);
    return a.family == b.family && memcmp(a.a, b.a, a.family == AF_INET ? 4 : 16) == 0;
}

/* --- host names ----------------------------------------------------------------------- */

static int normalise(const char *s, size_t n, char out[EGRESS_HOST_MAX + 1])
{
    size_t label = 0;
    if (n > 0 && s[n - 1] == '.')
        n--;
    if (n == 0 || n > EGRESS_HOST_MAX)
        return AB_EINVAL;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '.') {
            if (label == 0 || s[i - 1] == '-')
                return AB_EINVAL;
            label = 0;
        } else if (isalnum(c) || c == '-' || c == '_') {
            if ((label == 0 && c == '-') || ++label > 63)
                return AB_EINVAL;
        } else {
            return AB_EINVAL;
        }
        out[i] = (char)tolower(c);
    }
    if (label == 0 || s[n - 1] == '-')
        return AB_EINVAL;
    out[n] = '\0';
    return 0;
}

/* out is "" unless the whole name was good */
int egress_host_normalise(const char *s, size_t n, char out[EGRESS_HOST_MAX + 1])
{
    int rc = normalise(s, n, out);
    if (rc)
        out[0] = '\0';
    return rc;
}

static int host_normalise(const char *s, char out[EGRESS_HOST_MAX + 1])
{
    return egress_host_normalise(s, strlen(s), out);
}

static bool suffix_matches(const char *suffix, const char *name)
{
    size_t ns = strlen(suffix), nn = strlen(name);
    return nn > ns + 1 && name[nn - ns - 1] == '.' && strcmp(name + nn - ns, suffix) == 0;
}

/* --- parsing -------------------------------------------------------------------------- */

/* One allowOut / denyOut string. */
static int parse_entry(const char *field, size_t i, json_t *v, bool allow_any,
                       struct egress_entry *e, char *err, size_t errlen)
{
    const char *s = json_string_value(v);
    memset(e, 0, sizeof(*e));
    if (!s) {
        snprintf(err, errlen, "network.%s[%zu] must be a string (a host, *.suffix, IP or CIDR)",
                 field, i);
        return AB_EINVAL;
    }
    if (strcmp(s, "*") == 0) {
        if (!allow_any) {
            snprintf(err, errlen,
                     "network.%s[%zu] is \"*\": to cut all egress use allow_internet_access=false",
                     field, i);
            return AB_EINVAL;
        }
        e->kind = EGRESS_ENTRY_ANY;
        return 0;
    }
    if (egress_cidr_parse(s, &e->cidr) == 0) {
        e->kind = EGRESS_ENTRY_CIDR;
        return 0;
    }
    /* "*.com" would allow a whole top-level domain; denying one is fine */
    if (strncmp(s, "*.", 2) == 0 && host_normalise(s + 2, e->host) == 0 &&
        (!allow_any || strchr(e->host, '.'))) {
        e->kind = EGRESS_ENTRY_SUFFIX;
        return 0;
    }
    if (!strchr(s, '*') && !strchr(s, '/') && host_normalise(s, e->host) == 0) {
        e->kind = EGRESS_ENTRY_HOST;
        return 0;
    }
    snprintf(err, errlen,
             "network.%s[%zu] \"%.100s\" is not a host name, *.suffix wildcard (of a name with "
             "a dot), IP address or CIDR",
             field, i, s);
    return AB_EINVAL;
}

static int parse_list(const json_t *net, const char *field, bool allow_any,
                      struct egress_entry **out, size_t *n_out, char *err, size_t errlen)
{
    json_t *arr = json_object_get(net, field);
    size_t i;
    json_t *v;

    *out = NULL;
    *n_out = 0;
    if (!arr || json_is_null(arr))
        return 0;
    if (!json_is_array(arr)) {
        snprintf(err, errlen, "network.%s must be an array of strings", field);
        return AB_EINVAL;
    }
    if (json_array_size(arr) > EGRESS_LIST_MAX) {
        snprintf(err, errlen, "network.%s has %zu entries; at most %d are allowed", field,
                 json_array_size(arr), EGRESS_LIST_MAX);
        return AB_EINVAL;
    }
    if (json_array_size(arr) == 0)
        return 0;
    *out = calloc(json_array_size(arr), sizeof(**out));
    if (!*out)
        return AB_ENOMEM;
    json_array_foreach(arr, i, v)
    {
        int rc = parse_entry(field, i, v, allow_any, &(*out)[i], err, errlen);
        if (rc)
            return rc; /* the caller frees *out */
        (*n_out)++;
    }
    return 0;
}

/* One header template: only ${e2b.secrets.NAME} references and text around
 * them, at least one reference, so a literal credential never travels in a
 * create body (reference §5.5). */
static int check_template(const char *host, const char *name, const char *s, char *err,
                          size_t errlen)
{
    const char *p;
    if (strlen(s) > EGRESS_HEADER_VALUE_MAX) {
        snprintf(err, errlen, "network.rules[\"%.100s\"] header \"%.64s\" is longer than %d bytes",
                 host, name, EGRESS_HEADER_VALUE_MAX);
        return AB_EINVAL;
    }
    if (strstr(s, "{{") || strstr(s, "}}")) {
        snprintf(err, errlen,
                 "network.rules[\"%.100s\"] header \"%.64s\" uses the old {{ }} syntax: write "
                 "${e2b.secrets.<name>}",
                 host, name);
        return AB_EINVAL;
    }
    if (strstr(s, "${e2b.identity")) { /* E2B's own token source: name the way here */
        snprintf(err, errlen,
                 "network.rules[\"%.100s\"] header \"%.64s\": ${e2b.identity...} is not "
                 "supported; store the credential with POST /secrets and use "
                 "${e2b.secrets.<name>}",
                 host, name);
        return AB_EINVAL;
    }
    for (p = strstr(s, "${"); p; p = strstr(p + 2, "${")) {
        const char *q = p + 2;
        if (strncmp(q, "e2b.secrets.", 12) != 0) {
            snprintf(err, errlen,
                     "network.rules[\"%.100s\"] header \"%.64s\" has a reference other than "
                     "${e2b.secrets.<name>}",
                     host, name);
            return AB_EINVAL;
        }
        q += 12;
        size_t n = strspn(q, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-");
        if (n == 0 || n > EGRESS_SECRET_NAME_MAX || q[n] != '}') {
            snprintf(err, errlen,
                     "network.rules[\"%.100s\"] header \"%.64s\" has a malformed secret "
                     "reference: write ${e2b.secrets.<name>} with a name of [A-Za-z0-9_-]",
                     host, name);
            return AB_EINVAL;
        }
    }
    if (!strstr(s, "${e2b.secrets.")) {
        snprintf(err, errlen,
                 "network.rules[\"%.100s\"] header \"%.64s\" is a literal value (a plaintext "
                 "credential would leak into request bodies and logs): store it with POST "
                 "/secrets and write ${e2b.secrets.<name>}",
                 host, name);
        return AB_EINVAL;
    }
    return 0;
}

static bool header_name_ok(const char *s)
{
    size_t n = strlen(s);
    /* RFC 9110 token characters */
    return n > 0 && n <= EGRESS_HEADER_NAME_MAX &&
           strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                     "!#$%&'*+-.^_`|~") == n;
}

static int parse_host_rules(const char *host_in, json_t *list, struct egress_rule *r, char *err,
                            size_t errlen)
{
    size_t i;
    json_t *rule;

    if (strchr(host_in, '*')) {
        snprintf(err, errlen,
                 "network.rules host \"%.100s\" is a wildcard: credentials are injected per "
                 "exact host; list each host by name",
                 host_in);
        return AB_EINVAL;
    }
    if (host_normalise(host_in, r->host) != 0) {
        snprintf(err, errlen, "network.rules host \"%.100s\" is not a host name", host_in);
        return AB_EINVAL;
    }
    if (!json_is_array(list)) {
        snprintf(err, errlen, "network.rules[\"%.100s\"] must be a list of rules", host_in);
        return AB_EINVAL;
    }
    if (json_array_size(list) > EGRESS_RULES_PER_HOST_MAX) {
        snprintf(err, errlen, "network.rules[\"%.100s\"] has %zu rules; at most %d are allowed",
                 host_in, json_array_size(list), EGRESS_RULES_PER_HOST_MAX);
        return AB_EINVAL;
    }
    json_array_foreach(list, i, rule)
    {
        json_t *tr, *hdrs, *v;
        const char *name;
        if (!json_is_object(rule)) {
            snprintf(err, errlen, "network.rules[\"%.100s\"][%zu] must be an object", host_in, i);
            return AB_EINVAL;
        }
        tr = json_object_get(rule, "transform");
        if (!tr || json_is_null(tr))
            continue;
        if (!json_is_object(tr)) {
            snprintf(err, errlen, "network.rules[\"%.100s\"][%zu].transform must be an object",
                     host_in, i);
            return AB_EINVAL;
        }
        hdrs = json_object_get(tr, "headers");
        if (!hdrs || json_is_null(hdrs))
            continue;
        if (!json_is_object(hdrs)) {
            snprintf(err, errlen,
                     "network.rules[\"%.100s\"][%zu].transform.headers must be an object", host_in,
                     i);
            return AB_EINVAL;
        }
        json_object_foreach(hdrs, name, v)
        {
            const char *s = json_string_value(v);
            int rc;
            if (!header_name_ok(name)) {
                snprintf(err, errlen,
                         "network.rules[\"%.100s\"][%zu].transform.headers has an invalid header "
                         "name \"%.64s\"",
                         host_in, i, name);
                return AB_EINVAL;
            }
            if (!s) {
                snprintf(err, errlen, "network.rules[\"%.100s\"] header \"%.64s\" must be a string",
                         host_in, name);
                return AB_EINVAL;
            }
            if ((rc = check_template(host_in, name, s, err, errlen)))
                return rc;
            /* a later rule for the same header overrides an earlier one */
            size_t k;
            for (k = 0; k < r->n_headers; k++)
                if (strcasecmp(r->headers[k].name, name) == 0)
                    break;
            if (k == r->n_headers) {
                if (r->n_headers == EGRESS_HEADERS_MAX) {
                    snprintf(err, errlen, "network.rules[\"%.100s\"] sets more than %d headers",
                             host_in, EGRESS_HEADERS_MAX);
                    return AB_EINVAL;
                }
                r->n_headers++;
            }
            ab_strlcpy(r->headers[k].name, name, sizeof(r->headers[k].name));
            ab_strlcpy(r->headers[k].value, s, sizeof(r->headers[k].value));
        }
    }
    return 0;
}

static int rule_cmp(const void *a, const void *b)
{
    return strcmp(((const struct egress_rule *)a)->host, ((const struct egress_rule *)b)->host);
}

/* Does an entry match a host name (for rules: would requests to it be allowed)? */
static bool entry_matches_name(const struct egress_entry *e, const char *name)
{
    switch (e->kind) {
    case EGRESS_ENTRY_HOST:
        return strcmp(e->host, name) == 0;
    case EGRESS_ENTRY_SUFFIX:
        return suffix_matches(e->host, name);
    case EGRESS_ENTRY_ANY:
        return true;
    case EGRESS_ENTRY_CIDR:
        return false;
    }
    return false;
}

static int parse_rules(const json_t *net, struct egress_policy *p, char *err, size_t errlen)
{
    json_t *rules = json_object_get(net, "rules");
    size_t n;

    if (!rules || json_is_null(rules))
        return 0;
    if (json_is_object(rules))
        n = json_object_size(rules);
    else if (json_is_array(rules))
        n = json_array_size(rules);
    else {
        snprintf(err, errlen, "network.rules must be an object of host → list of rules");
        return AB_EINVAL;
    }
    if (n == 0)
        return 0;
    if (n > EGRESS_RULE_HOSTS_MAX) {
        snprintf(err, errlen, "network.rules names %zu hosts; at most %d are allowed", n,
                 EGRESS_RULE_HOSTS_MAX);
        return AB_EINVAL;
    }
    p->rules = calloc(n, sizeof(*p->rules));
    if (!p->rules)
        return AB_ENOMEM;
    if (json_is_object(rules)) {
        const char *host;
        json_t *list;
        json_object_foreach((json_t *)rules, host, list)
        {
            int rc = parse_host_rules(host, list, &p->rules[p->n_rules], err, errlen);
            if (rc)
                return rc;
            p->n_rules++;
        }
    } else {
        size_t i;
        json_t *pair;
        json_array_foreach(rules, i, pair)
        {
            const char *host = json_string_value(json_array_get(pair, 0));
            if (!json_is_array(pair) || json_array_size(pair) != 2 || !host) {
                snprintf(err, errlen,
                         "network.rules[%zu] must be a [host, [rules]] pair (or send rules as an "
                         "object of host → list of rules)",
                         i);
                return AB_EINVAL;
            }
            int rc =
                parse_host_rules(host, json_array_get(pair, 1), &p->rules[p->n_rules], err, errlen);
            if (rc)
                return rc;
            p->n_rules++;
        }
    }
    qsort(p->rules, p->n_rules, sizeof(*p->rules), rule_cmp);
    for (size_t i = 1; i < p->n_rules; i++)
        if (strcmp(p->rules[i - 1].host, p->rules[i].host) == 0) {
            snprintf(err, errlen, "network.rules names host \"%.100s\" twice", p->rules[i].host);
            return AB_EINVAL;
        }
    if (!p->internet) {
        snprintf(err, errlen,
                 "network.rules with allow_internet_access=false: nothing can reach the hosts "
                 "the rules name; drop the rules or allow internet access");
        return AB_EINVAL;
    }
    for (size_t i = 0; i < p->n_rules; i++) {
        const char *h = p->rules[i].host;
        bool ok = !p->filtering;
        for (size_t k = 0; k < p->n_allow && !ok; k++)
            ok = entry_matches_name(&p->allow[k], h);
        for (size_t k = 0; k < p->n_deny && ok; k++)
            ok = !entry_matches_name(&p->deny[k], h);
        if (!ok) {
            snprintf(err, errlen,
                     "network.rules host \"%.100s\" is not allowed by network.allowOut / "
                     "network.denyOut, so no request could reach it; allow the host or drop "
                     "its rules",
                     h);
            return AB_EINVAL;
        }
    }
    return 0;
}

static int parse_proxy_cred(json_t *obj, const char *field, char *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(obj, field);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v) || json_string_length(v) > EGRESS_PROXY_CRED_MAX) {
        snprintf(err, errlen, "network.egressProxy.%s must be a string of at most %d bytes", field,
                 EGRESS_PROXY_CRED_MAX);
        return AB_EINVAL;
    }
    ab_strlcpy(out, json_string_value(v), EGRESS_PROXY_CRED_MAX + 1);
    return 0;
}

/* "host:port" or "[v6]:port". */
static int parse_hostport(const char *s, struct egress_proxy *px)
{
    char host[EGRESS_HOST_MAX + 1];
    const char *colon, *h = s;
    size_t hn;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':')
            return AB_EINVAL;
        h = s + 1;
        hn = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon || memchr(s, ':', (size_t)(colon - s)))
            return AB_EINVAL;
        hn = (size_t)(colon - s);
    }
    if (hn == 0 || hn > EGRESS_HOST_MAX)
        return AB_EINVAL;
    memcpy(host, h, hn);
    host[hn] = '\0';
    const char *ps = colon + 1;
    if (!*ps || strlen(ps) > 5 || strspn(ps, "0123456789") != strlen(ps))
        return AB_EINVAL;
    long port = atol(ps);
    if (port < 1 || port > 65535)
        return AB_EINVAL;
    struct egress_addr a;
    if (egress_addr_parse(host, &a) == 0)
        ab_strlcpy(px->host, host, sizeof(px->host));
    else if (s[0] == '[' || host_normalise(host, px->host) != 0)
        return AB_EINVAL;
    px->port = (uint16_t)port;
    return 0;
}

static int parse_proxy(const json_t *net, struct egress_policy *p, char *err, size_t errlen)
{
    json_t *v = json_object_get(net, "egressProxy");
    const char *addr;
    struct egress_addr a;
    enum egress_reason why;

    if (!v || json_is_null(v))
        return 0;
    if (json_is_string(v))
        addr = json_string_value(v);
    else if (json_is_object(v))
        addr = json_string_value(json_object_get(v, "address"));
    else {
        snprintf(err, errlen,
                 "network.egressProxy must be an object {address, username?, "
                 "password?}");
        return AB_EINVAL;
    }
    if (!addr) {
        snprintf(err, errlen, "network.egressProxy.address is required (\"host:port\")");
        return AB_EINVAL;
    }
    if (strncmp(addr, "socks5://", 9) == 0)
        addr += 9;
    if (parse_hostport(addr, &p->proxy) != 0) {
        snprintf(err, errlen,
                 "network.egressProxy.address \"%.100s\" must be host:port with a port of "
                 "1-65535",
                 addr);
        return AB_EINVAL;
    }
    if (json_is_object(v)) {
        int rc = parse_proxy_cred(v, "username", p->proxy.username, err, errlen);
        if (!rc)
            rc = parse_proxy_cred(v, "password", p->proxy.password, err, errlen);
        if (rc)
            return rc;
        if (!p->proxy.username[0] && p->proxy.password[0]) {
            snprintf(err, errlen, "network.egressProxy.password needs a username");
            return AB_EINVAL;
        }
    }
    /* a name is judged again after resolution, by the gateway */
    if (egress_addr_parse(p->proxy.host, &a) == 0) {
        enum egress_tier t = egress_addr_tier(&a, &why);
        if (t == EGRESS_TIER_DENIED || (t == EGRESS_TIER_PRIVATE && !p->allow_private)) {
            snprintf(err, errlen,
                     "network.egressProxy.address %.64s is a %s address, which a sandbox may not "
                     "reach; use a public proxy",
                     p->proxy.host, egress_reason_label(why));
            return AB_EINVAL;
        }
    }
    p->has_proxy = true;
    return 0;
}

int egress_policy_parse(const json_t *net, const struct egress_opts *opts,
                        struct egress_policy **out, char *err, size_t errlen)
{
    struct egress_policy *p = calloc(1, sizeof(*p));
    int rc;

    *out = NULL;
    if (!p)
        return AB_ENOMEM;
    p->internet = opts ? opts->internet : false;
    p->allow_private = opts ? opts->allow_private : false;
    if (net && json_is_null(net))
        net = NULL;
    if (net && !json_is_object(net)) {
        snprintf(err, errlen, "network must be an object");
        rc = AB_EINVAL;
        goto fail;
    }
    if (net) {
        if ((rc = parse_list(net, "allowOut", true, &p->allow, &p->n_allow, err, errlen)))
            goto fail;
        if ((rc = parse_list(net, "denyOut", false, &p->deny, &p->n_deny, err, errlen)))
            goto fail;
        p->filtering = p->n_allow > 0;
        if ((rc = parse_rules(net, p, err, errlen)))
            goto fail;
        if ((rc = parse_proxy(net, p, err, errlen)))
            goto fail;
    }
    *out = p;
    return 0;
fail:
    egress_policy_free(p);
    return rc;
}

void egress_policy_free(struct egress_policy *p)
{
    if (!p)
        return;
    free(p->allow);
    free(p->deny);
    if (p->rules) /* header templates are not secrets, but the proxy password is */
        memset(p->rules, 0, sizeof(*p->rules) * p->n_rules);
    free(p->rules);
    memset(&p->proxy, 0, sizeof(p->proxy));
    free(p);
}

/* --- the decision --------------------------------------------------------------------- */

static bool entry_matches(const struct egress_entry *e, const struct egress_addr *a,
                          const char *name)
{
    if (e->kind == EGRESS_ENTRY_CIDR)
        return egress_cidr_contains(&e->cidr, a);
    return name && e->kind != EGRESS_ENTRY_ANY && entry_matches_name(e, name);
}

enum egress_reason egress_decide(const struct egress_policy *p, const struct egress_dest *d,
                                 const struct egress_addr *self, size_t n_self)
{
    enum egress_reason why;
    enum egress_tier tier;
    const char *name = NULL;
    bool private_closed;

    if (!p || !p->internet)
        return EGRESS_DENY_INTERNET_OFF;
    tier = egress_addr_tier(&d->addr, &why);
    if (tier == EGRESS_TIER_DENIED)
        return why;
    for (size_t i = 0; i < n_self; i++)
        if (addr_equal(&self[i], &d->addr))
            return EGRESS_DENY_HOST_ADDRESS;
    /* names only where the gateway can read one, and only if it checked it */
    if ((d->port == 80 || d->port == 443) && d->name && d->name[0] && d->name_verified)
        name = d->name;
    for (size_t i = 0; i < p->n_deny; i++)
        if (entry_matches(&p->deny[i], &d->addr, name))
            return EGRESS_DENY_DENY_OUT;
    private_closed = tier == EGRESS_TIER_PRIVATE && !p->allow_private;
    if (!p->filtering)
        return private_closed ? EGRESS_DENY_PRIVATE : EGRESS_ALLOW;
    for (size_t i = 0; i < p->n_allow; i++) {
        const struct egress_entry *e = &p->allow[i];
        switch (e->kind) {
        case EGRESS_ENTRY_ANY:
            if (!private_closed)
                return EGRESS_ALLOW;
            break;
        case EGRESS_ENTRY_CIDR:
        case EGRESS_ENTRY_HOST: /* naming the destination opens the private tier for it */
            if (entry_matches(e, &d->addr, name))
                return EGRESS_ALLOW;
            break;
        case EGRESS_ENTRY_SUFFIX: /* a wildcard never opens a private address */
            if (!private_closed && entry_matches(e, &d->addr, name))
                return EGRESS_ALLOW;
            break;
        }
    }
    return private_closed ? EGRESS_DENY_PRIVATE : EGRESS_DENY_NOT_ALLOWED;
}

const struct egress_rule *egress_policy_rule_for(const struct egress_policy *p, const char *host)
{
    struct egress_rule key;
    if (!p || !p->n_rules || !host || strlen(host) > EGRESS_HOST_MAX)
        return NULL;
    ab_strlcpy(key.host, host, sizeof(key.host));
    return bsearch(&key, p->rules, p->n_rules, sizeof(*p->rules), rule_cmp);
}

size_t egress_policy_secret_names(const struct egress_policy *p,
                                  char (*names)[EGRESS_SECRET_NAME_MAX + 1], size_t max)
{
    size_t n = 0;
    char name[EGRESS_SECRET_NAME_MAX + 1];

    for (size_t r = 0; p && r < p->n_rules; r++)
        for (size_t h = 0; h < p->rules[r].n_headers; h++) {
            const char *s = p->rules[r].headers[h].value;
            for (const char *q = strstr(s, "${e2b.secrets."); q;
                 q = strstr(q + 1, "${e2b.secrets.")) {
                size_t len = strcspn(q + 14, "}");
                bool dup = false;
                if (len == 0 || len > EGRESS_SECRET_NAME_MAX)
                    continue; /* refused at parse time; never here */
                memcpy(name, q + 14, len);
                name[len] = '\0';
                for (size_t k = 0; k < n && k < max && !dup; k++)
                    dup = strcmp(names[k], name) == 0;
                if (dup)
                    continue;
                if (n < max)
                    memcpy(names[n], name, len + 1);
                n++;
            }
        }
    return n;
}
