/* Configuration loading: defaults, then the YAML file, then the environment,
 * then flags, each layer overwriting the one before. Every error names the key
 * and the place the bad value came from, because the person reading it is an
 * operator with a Helm values file, not someone with a debugger. */
#include "agentbox/config.h"
#include "agentbox/common.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

/* Longest option name, flag name or environment variable name we handle. */
#define CFG_NAME_MAX 128
/* Where a value came from, e.g. "config file /etc/x.yaml line 3: timeout". */
#define CFG_WHERE_MAX 512
/* How much of a bad value an error message echoes. */
#define CFG_ECHO_MAX 64
/* Widest help column before entries just push the rest right. */
#define CFG_HELP_COL_MAX 40

struct cfg_args {
    const struct cfg_option *opts;
    size_t nopts;
    void *out;
    bool *set;
    struct cfg_result *res;
    const char *config_path;
    bool help;
};

/* A value as it may appear inside an error: bounded and printable. */
static void echo(char *dst, size_t dstlen, const char *v, size_t len)
{
    size_t n = 0, max = AB_MIN(dstlen - 1, (size_t)CFG_ECHO_MAX);
    bool cut = len > max;

    if (cut && max > 3)
        max -= 3;
    for (size_t i = 0; i < len && n < max; i++) {
        unsigned char c = (unsigned char)v[i];
        dst[n++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    if (cut && n + 3 < dstlen) {
        memcpy(dst + n, "...", 3);
        n += 3;
    }
    dst[n] = '\0';
}

static void *field_of(void *out, const struct cfg_option *o)
{
    return (char *)out + o->offset;
}

static void dashed(char *dst, size_t dstlen, const char *name)
{
    size_t n = 0;

    for (; name[n] && n < dstlen - 1; n++)
        dst[n] = name[n] == '_' ? '-' : name[n];
    dst[n] = '\0';
}

static void env_name(char *dst, size_t dstlen, const char *name)
{
    size_t n = ab_strlcpy(dst, "AGENTBOX_", dstlen);

    for (size_t i = 0; name[i] && n < dstlen - 1; i++, n++) {
        char c = name[i];
        if (c >= 'a' && c <= 'z')
            c = (char)(c - 'a' + 'A');
        else if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
            c = '_';
        dst[n] = c;
    }
    if (n < dstlen)
        dst[n] = '\0';
}

/* ---- value parsers ---- */

int cfg_parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};

    if (!s || !out)
        return AB_EINVAL;
    for (size_t i = 0; i < AB_ARRAY_LEN(yes); i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return AB_EINVAL;
}

/* Unsigned decimal digits at *p; advances *p. Fails on no digits or overflow. */
static int parse_digits(const char **p, int64_t *out)
{
    const char *s = *p;
    int64_t v = 0;

    if (*s < '0' || *s > '9')
        return AB_EINVAL;
    for (; *s >= '0' && *s <= '9'; s++) {
        int d = *s - '0';
        if (v > (INT64_MAX - d) / 10)
            return AB_EINVAL;
        v = v * 10 + d;
    }
    *p = s;
    *out = v;
    return 0;
}

static int mul_add(int64_t total, int64_t n, int64_t unit, int64_t *out)
{
    if (n > INT64_MAX / unit || total > INT64_MAX - n * unit)
        return AB_EINVAL;
    *out = total + n * unit;
    return 0;
}

/* "250ms", "30s", "5m", "1h", compounds such as "1m30s", or bare seconds. */
int cfg_parse_duration(const char *s, int64_t *ms)
{
    const char *p = s;
    int64_t total = 0;
    bool first = true;

    if (!s || !ms || !*s)
        return AB_EINVAL;
    while (*p) {
        int64_t n, unit;

        if (parse_digits(&p, &n) != 0)
            return AB_EINVAL;
        if (*p == '\0' && first) {
            unit = 1000;
        } else if (p[0] == 'm' && p[1] == 's') {
            unit = 1;
            p += 2;
        } else if (*p == 's' || *p == 'm' || *p == 'h') {
            unit = *p == 's' ? 1000 : *p == 'm' ? 60 * 1000 : 3600 * 1000;
            p++;
        } else {
            return AB_EINVAL;
        }
        if (mul_add(total, n, unit, &total) != 0)
            return AB_EINVAL;
        first = false;
    }
    *ms = total;
    return 0;
}

/* "512", "512B", "64KiB"/"64Ki", "1MiB", "2GiB", "1TiB"; units are binary and
 * case-insensitive. "MB" is refused rather than guessed at. */
int cfg_parse_size(const char *s, int64_t *bytes)
{
    static const struct {
        const char *unit;
        int64_t mult;
    } units[] = {
        {"", 1},
        {"b", 1},
        {"ki", 1024},
        {"kib", 1024},
        {"mi", 1024 * 1024},
        {"mib", 1024 * 1024},
        {"gi", 1024LL * 1024 * 1024},
        {"gib", 1024LL * 1024 * 1024},
        {"ti", 1024LL * 1024 * 1024 * 1024},
        {"tib", 1024LL * 1024 * 1024 * 1024},
    };
    const char *p = s;
    int64_t n;

    if (!s || !bytes)
        return AB_EINVAL;
    if (parse_digits(&p, &n) != 0)
        return AB_EINVAL;
    for (size_t i = 0; i < AB_ARRAY_LEN(units); i++) {
        if (strcasecmp(p, units[i].unit) == 0)
            return mul_add(0, n, units[i].mult, bytes);
    }
    return AB_EINVAL;
}

static int parse_int(const char *s, int64_t *out)
{
    const char *p = s;
    bool neg = false;
    int64_t v;

    if (*p == '+' || *p == '-')
        neg = *p++ == '-';
    /* parse_digits refuses INT64_MIN's magnitude; nobody configures that. */
    if (parse_digits(&p, &v) != 0 || *p != '\0')
        return AB_EINVAL;
    *out = neg ? -v : v;
    return 0;
}

/* ---- applying one value ---- */

static const char *type_hint(enum cfg_type t)
{
    switch (t) {
    case CFG_STRING:
        return "VALUE";
    case CFG_INT:
        return "N";
    case CFG_BOOL:
        return "true|false";
    case CFG_DURATION:
        return "DURATION";
    case CFG_SIZE:
        return "SIZE";
    }
    return "VALUE";
}

/* Sets one field from text. where says where the text came from. val is
 * NUL-terminated and len long. */
static int apply_value(const struct cfg_option *o, void *out, const char *val, size_t len,
                       const char *where, char *err, size_t errlen)
{
    char shown[CFG_ECHO_MAX + 4];
    void *f = field_of(out, o);
    int64_t v;
    bool b;

    if (len > CFG_VALUE_MAX) {
        ab_errf(err, errlen, "%s: value is %zu bytes, longer than the %d KiB limit; shorten it",
                where, len, CFG_VALUE_MAX / 1024);
        return AB_EINVAL;
    }
    if (memchr(val, '\0', len)) {
        ab_errf(err, errlen, "%s: value contains a NUL byte; remove it", where);
        return AB_EINVAL;
    }
    echo(shown, sizeof(shown), val, len);
    switch (o->type) {
    case CFG_STRING: {
        char *dup = malloc(len + 1);
        char **slot = f;

        if (!dup) {
            ab_errf(err, errlen, "%s: out of memory copying a %zu-byte value", where, len);
            return AB_ENOMEM;
        }
        memcpy(dup, val, len);
        dup[len] = '\0';
        free(*slot);
        *slot = dup;
        return 0;
    }
    case CFG_INT:
        if (parse_int(val, &v) != 0) {
            ab_errf(err, errlen, "%s: '%s' is not an integer (use digits, e.g. 8080)", where,
                    shown);
            return AB_EINVAL;
        }
        *(int64_t *)f = v;
        return 0;
    case CFG_BOOL:
        if (cfg_parse_bool(val, &b) != 0) {
            ab_errf(err, errlen, "%s: '%s' is not a boolean (use true/false, yes/no, on/off, 1/0)",
                    where, shown);
            return AB_EINVAL;
        }
        *(bool *)f = b;
        return 0;
    case CFG_DURATION:
        if (cfg_parse_duration(val, &v) != 0) {
            ab_errf(err, errlen, "%s: '%s' is not a duration (use 500ms, 30s, 5m)", where, shown);
            return AB_EINVAL;
        }
        *(int64_t *)f = v;
        return 0;
    case CFG_SIZE:
        if (cfg_parse_size(val, &v) != 0) {
            ab_errf(err, errlen, "%s: '%s' is not a size (use 512, 64KiB, 1MiB, 2GiB)", where,
                    shown);
            return AB_EINVAL;
        }
        *(int64_t *)f = v;
        return 0;
    }
    ab_errf(err, errlen, "%s: option has an unknown type %d", where, (int)o->type);
    return AB_EINVAL;
}

/* ---- names and suggestions ---- */

static int find_opt(const struct cfg_option *opts, size_t nopts, const char *name)
{
    for (size_t i = 0; i < nopts; i++) {
        if (opts[i].name && strcmp(opts[i].name, name) == 0)
            return (int)i;
    }
    return -1;
}

/* Levenshtein distance, or a large number for names too long to be typos. */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t row[CFG_NAME_MAX + 1];

    if (la > CFG_NAME_MAX || lb > CFG_NAME_MAX)
        return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];

        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);

            best = AB_MIN(best, up + 1);
            best = AB_MIN(best, row[j - 1] + 1);
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* The closest option name within 2 edits, or NULL. */
static const char *suggest(const struct cfg_option *opts, size_t nopts, const char *name)
{
    const char *best = NULL;
    size_t best_d = 3;

    for (size_t i = 0; i < nopts; i++) {
        size_t d;

        if (!opts[i].name)
            continue;
        d = edit_distance(name, opts[i].name);
        if (d < best_d && d < strlen(name)) {
            best = opts[i].name;
            best_d = d;
        }
    }
    return best;
}

/* ---- YAML ---- */

static bool scalar_is_null(const yaml_event_t *ev)
{
    const char *v = (const char *)ev->data.scalar.value;

    if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    return ev->data.scalar.length == 0 || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 ||
           strcmp(v, "Null") == 0 || strcmp(v, "NULL") == 0;
}

static void yaml_err(yaml_parser_t *p, const char *src, char *err, size_t errlen)
{
    if (p->error == YAML_MEMORY_ERROR) {
        ab_errf(err, errlen, "config file %s: out of memory while parsing", src);
    } else if (p->error == YAML_READER_ERROR) {
        ab_errf(err, errlen, "config file %s byte %zu: invalid YAML: %s (save it as UTF-8 text)",
                src, p->problem_offset, p->problem ? p->problem : "unreadable input");
    } else {
        ab_errf(err, errlen, "config file %s line %zu: invalid YAML: %s%s%s", src,
                p->problem_mark.line + 1, p->problem ? p->problem : "syntax error",
                p->context ? " " : "", p->context ? p->context : "");
    }
}

enum yaml_state {
    YS_STREAM,  /* before the first document */
    YS_ROOT,    /* document started, root node next */
    YS_KEY,     /* inside the root mapping, key or end next */
    YS_VALUE,   /* key seen, value next */
    YS_DOC_END, /* root done, document end next */
    YS_DONE,
};

/* set (may be NULL) records which options the document gave a value. */
static int load_yaml(const struct cfg_option *opts, size_t nopts, void *out, const char *buf,
                     size_t len, const char *src, bool *set, char *err, size_t errlen)
{
    yaml_parser_t parser;
    yaml_event_t ev;
    bool have_ev = false;
    size_t *lines = NULL; /* line where each option was set, for duplicates */
    enum yaml_state st = YS_STREAM;
    int docs = 0, cur = -1, rc = AB_EINVAL;
    char shown[CFG_ECHO_MAX + 4];

    if (!src)
        src = "(buffer)";
    if (len > CFG_FILE_MAX) {
        ab_errf(
            err, errlen,
            "config file %s is %zu bytes, larger than the %d MiB limit; keep only settings in it",
            src, len, CFG_FILE_MAX / (1024 * 1024));
        return AB_EINVAL;
    }
    if (!yaml_parser_initialize(&parser)) {
        ab_errf(err, errlen, "config file %s: out of memory starting the YAML parser", src);
        return AB_ENOMEM;
    }
    lines = calloc(nopts ? nopts : 1, sizeof(*lines));
    if (!lines) {
        ab_errf(err, errlen, "config file %s: out of memory", src);
        rc = AB_ENOMEM;
        goto out;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)(buf ? buf : ""), buf ? len : 0);

    while (st != YS_DONE) {
        size_t line;

        if (!yaml_parser_parse(&parser, &ev)) {
            yaml_err(&parser, src, err, errlen);
            goto out;
        }
        have_ev = true;
        line = ev.start_mark.line + 1;

        if (ev.type == YAML_ALIAS_EVENT) {
            ab_errf(err, errlen,
                    "config file %s line %zu: aliases (*name) are not supported; write the value",
                    src, line);
            goto out;
        }
        switch (st) {
        case YS_STREAM:
            if (ev.type == YAML_STREAM_END_EVENT) {
                st = YS_DONE;
            } else if (ev.type == YAML_DOCUMENT_START_EVENT) {
                if (++docs > 1) {
                    ab_errf(err, errlen,
                            "config file %s line %zu: only one YAML document is allowed; "
                            "remove the second '---'",
                            src, line);
                    goto out;
                }
                st = YS_ROOT;
            }
            break;
        case YS_ROOT:
            if (ev.type == YAML_MAPPING_START_EVENT) {
                st = YS_KEY;
            } else if (ev.type == YAML_SCALAR_EVENT && scalar_is_null(&ev)) {
                st = YS_DOC_END; /* an empty document sets nothing */
            } else {
                ab_errf(err, errlen,
                        "config file %s line %zu: the top level must be a mapping of "
                        "'key: value' lines, found a %s",
                        src, line, ev.type == YAML_SEQUENCE_START_EVENT ? "list" : "single value");
                goto out;
            }
            break;
        case YS_KEY:
            if (ev.type == YAML_MAPPING_END_EVENT) {
                st = YS_DOC_END;
                break;
            }
            if (ev.type != YAML_SCALAR_EVENT) {
                ab_errf(err, errlen, "config file %s line %zu: keys must be plain option names",
                        src, line);
                goto out;
            }
            {
                const char *key = (const char *)ev.data.scalar.value;
                size_t klen = ev.data.scalar.length;
                const char *hint;

                echo(shown, sizeof(shown), key, klen);
                cur = memchr(key, '\0', klen) ? -1 : find_opt(opts, nopts, key);
                if (cur < 0) {
                    hint = memchr(key, '\0', klen) ? NULL : suggest(opts, nopts, key);
                    if (hint)
                        ab_errf(err, errlen,
                                "config file %s line %zu: unknown key '%s'; did you mean '%s'?",
                                src, line, shown, hint);
                    else
                        ab_errf(err, errlen,
                                "config file %s line %zu: unknown key '%s' "
                                "(see --help for the options)",
                                src, line, shown);
                    goto out;
                }
                if (lines[cur]) {
                    ab_errf(err, errlen,
                            "config file %s line %zu: key '%s' is already set on line %zu; "
                            "keep one",
                            src, line, shown, lines[cur]);
                    goto out;
                }
                lines[cur] = line;
            }
            st = YS_VALUE;
            break;
        case YS_VALUE: {
            const struct cfg_option *o = &opts[cur];
            char where[CFG_WHERE_MAX];

            if (ev.type == YAML_MAPPING_START_EVENT || ev.type == YAML_SEQUENCE_START_EVENT) {
                ab_errf(err, errlen,
                        "config file %s line %zu: '%s' must be a single value, not a %s "
                        "(options are flat: write %s: VALUE)",
                        src, line, o->name,
                        ev.type == YAML_MAPPING_START_EVENT ? "mapping" : "list", o->name);
                goto out;
            }
            if (ev.type == YAML_SCALAR_EVENT && !scalar_is_null(&ev)) {
                snprintf(where, sizeof(where), "config file %s line %zu: %s", src, line, o->name);
                rc = apply_value(o, out, (const char *)ev.data.scalar.value, ev.data.scalar.length,
                                 where, err, errlen);
                if (rc != 0)
                    goto out;
                rc = AB_EINVAL;
                if (set)
                    set[cur] = true;
            }
            st = YS_KEY;
            break;
        }
        case YS_DOC_END:
            if (ev.type == YAML_DOCUMENT_END_EVENT)
                st = YS_STREAM;
            break;
        case YS_DONE:
            break;
        }
        yaml_event_delete(&ev);
        have_ev = false;
    }
    rc = 0;

out:
    if (have_ev)
        yaml_event_delete(&ev);
    yaml_parser_delete(&parser);
    free(lines);
    return rc;
}

int cfg_load_yaml_buffer(const struct cfg_option *opts, size_t nopts, void *out, const char *buf,
                         size_t len, const char *source_name, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    return load_yaml(opts, nopts, out, buf, len, source_name, NULL, err, errlen);
}

/* Reads at most CFG_FILE_MAX bytes; *buf is malloc'd and owned by the caller. */
static int read_file(const char *path, const char *from, char **buf, size_t *len, char *err,
                     size_t errlen)
{
    struct stat stt;
    size_t n = 0;
    char *b = NULL;
    int fd, rc = AB_EINVAL;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        ab_errf(err, errlen, "config file %s (from %s): cannot open: %s; check the path", path,
                from, strerror(errno));
        return AB_EINVAL;
    }
    if (fstat(fd, &stt) == 0 && S_ISDIR(stt.st_mode)) {
        ab_errf(err, errlen, "config file %s (from %s) is a directory; name a YAML file", path,
                from);
        goto out;
    }
    b = malloc(CFG_FILE_MAX + 1);
    if (!b) {
        ab_errf(err, errlen, "config file %s: out of memory", path);
        rc = AB_ENOMEM;
        goto out;
    }
    while (n <= CFG_FILE_MAX) {
        ssize_t r = read(fd, b + n, CFG_FILE_MAX + 1 - n);

        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            ab_errf(err, errlen, "config file %s: read failed: %s", path, strerror(errno));
            goto out;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    if (n > CFG_FILE_MAX) {
        ab_errf(err, errlen,
                "config file %s is larger than the %d MiB limit; keep only settings in it", path,
                CFG_FILE_MAX / (1024 * 1024));
        goto out;
    }
    b[n] = '\0';
    *buf = b;
    *len = n;
    b = NULL;
    rc = 0;
out:
    free(b);
    close(fd);
    return rc;
}

/* ---- flags ---- */

/* Walks argv. The first pass (apply false) finds --config, --help and the
 * positionals and refuses unknown flags; the second applies flag values, so
 * that flags win over the file and the environment loaded in between. */
static int scan_args(struct cfg_args *a, int argc, char **argv, bool apply, char *err,
                     size_t errlen)
{
    bool flags_done = false;

    for (int i = 0; i < argc && argv[i]; i++) {
        const char *arg = argv[i], *name, *eq, *value;
        char norm[CFG_NAME_MAX], flag[CFG_NAME_MAX + 8], where[CFG_WHERE_MAX];
        size_t nlen;
        bool negated = false;
        int idx;

        if (flags_done || arg[0] != '-' || arg[1] == '\0') {
            if (apply)
                continue;
            if (!a->res) {
                echo(norm, sizeof(norm), arg, strlen(arg));
                ab_errf(err, errlen, "unexpected argument '%s': this command takes none", norm);
                return AB_EINVAL;
            }
            if (a->res->npositional >= CFG_MAX_POSITIONAL) {
                echo(norm, sizeof(norm), arg, strlen(arg));
                ab_errf(
                    err, errlen,
                    "too many arguments: at most %d are accepted, '%s' is one more (see --help)",
                    CFG_MAX_POSITIONAL, norm);
                return AB_EINVAL;
            }
            a->res->positional[a->res->npositional++] = arg;
            continue;
        }
        if (strcmp(arg, "--") == 0) {
            flags_done = true;
            continue;
        }
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            a->help = true;
            continue;
        }
        name = arg[1] == '-' ? arg + 2 : arg + 1;
        eq = strchr(name, '=');
        nlen = eq ? (size_t)(eq - name) : strlen(name);
        value = eq ? eq + 1 : NULL;
        /* Name only, never the value: it may be a secret. */
        echo(flag, sizeof(flag), arg, (size_t)(name - arg) + nlen);
        if (arg[1] != '-' || nlen == 0 || nlen >= sizeof(norm)) {
            ab_errf(err, errlen, "unknown flag '%s' (flags are spelled --name; see --help)", flag);
            return AB_EINVAL;
        }
        for (size_t k = 0; k < nlen; k++)
            norm[k] = name[k] == '-' ? '_' : name[k];
        norm[nlen] = '\0';

        if (strcmp(norm, "config") == 0) {
            if (!value) {
                if (i + 1 >= argc || !argv[i + 1]) {
                    ab_errf(err, errlen, "flag --config needs a value: --config FILE");
                    return AB_EINVAL;
                }
                value = argv[++i];
            }
            if (!*value) {
                ab_errf(err, errlen, "flag --config: the file name is empty");
                return AB_EINVAL;
            }
            a->config_path = value;
            continue;
        }
        idx = find_opt(a->opts, a->nopts, norm);
        if (idx < 0 && strncmp(norm, "no_", 3) == 0) {
            idx = find_opt(a->opts, a->nopts, norm + 3);
            if (idx >= 0 && a->opts[idx].type != CFG_BOOL)
                idx = -1;
            negated = idx >= 0;
        }
        if (idx < 0) {
            const char *hint = suggest(a->opts, a->nopts, norm);
            char hd[CFG_NAME_MAX];

            if (hint) {
                dashed(hd, sizeof(hd), hint);
                ab_errf(err, errlen, "unknown flag '%s'; did you mean '--%s'?", flag, hd);
            } else {
                ab_errf(err, errlen, "unknown flag '%s' (see --help)", flag);
            }
            return AB_EINVAL;
        }

        {
            const struct cfg_option *o = &a->opts[idx];
            char dn[CFG_NAME_MAX];

            dashed(dn, sizeof(dn), o->name);
            if (o->type == CFG_BOOL) {
                if (negated && value) {
                    ab_errf(err, errlen, "flag --no-%s takes no value; use --%s=false", dn, dn);
                    return AB_EINVAL;
                }
                if (!value)
                    value = negated ? "false" : "true";
            } else if (!value) {
                if (i + 1 >= argc || !argv[i + 1]) {
                    ab_errf(err, errlen, "flag --%s needs a value: --%s %s", dn, dn,
                            type_hint(o->type));
                    return AB_EINVAL;
                }
                value = argv[++i];
            }
            if (!apply)
                continue;
            snprintf(where, sizeof(where), "flag --%s%s", negated ? "no-" : "", dn);
            int rc = apply_value(o, a->out, value, strlen(value), where, err, errlen);
            if (rc != 0)
                return rc; /* AB_ENOMEM stays AB_ENOMEM */
            a->set[idx] = true;
        }
    }
    return 0;
}

/* ---- environment ---- */

static int apply_env(const struct cfg_option *opts, size_t nopts, void *out, bool *set, char *err,
                     size_t errlen)
{
    for (size_t i = 0; i < nopts; i++) {
        char name[CFG_NAME_MAX + 16], where[CFG_WHERE_MAX];
        /* The alias first, so AGENTBOX_* overrides it. Empty means unset. */
        const char *vars[2];

        env_name(name, sizeof(name), opts[i].name);
        vars[0] = opts[i].env_alias;
        vars[1] = name;
        for (size_t k = 0; k < 2; k++) {
            const char *v;
            int rc;

            if (!vars[k] || !(v = getenv(vars[k])) || !*v)
                continue;
            snprintf(where, sizeof(where), "environment %s", vars[k]);
            rc = apply_value(&opts[i], out, v, strlen(v), where, err, errlen);
            if (rc != 0)
                return rc;
            set[i] = true;
        }
    }
    return 0;
}

/* ---- public ---- */

static void zero_fields(const struct cfg_option *opts, size_t nopts, void *out)
{
    for (size_t i = 0; i < nopts; i++) {
        void *f = field_of(out, &opts[i]);

        switch (opts[i].type) {
        case CFG_STRING:
            *(char **)f = NULL;
            break;
        case CFG_BOOL:
            *(bool *)f = false;
            break;
        default:
            *(int64_t *)f = 0;
            break;
        }
    }
}

static bool is_missing(const struct cfg_option *o, void *out, bool set)
{
    if (!set)
        return true;
    if (o->type == CFG_STRING) {
        char *s = *(char **)field_of(out, o);
        return !s || !*s;
    }
    return false;
}

int cfg_load(const struct cfg_option *opts, size_t nopts, void *out, int argc, char **argv,
             struct cfg_result *res, char *err, size_t errlen)
{
    struct cfg_args a;
    bool *set = NULL;
    char *file = NULL;
    size_t flen = 0;
    int rc = AB_EINVAL;

    if (err && errlen)
        err[0] = '\0';
    if (res)
        memset(res, 0, sizeof(*res));
    /* *out may be uninitialised memory: overwrite, never free. */
    zero_fields(opts, nopts, out);
    set = calloc(nopts ? nopts : 1, sizeof(*set));
    if (!set) {
        ab_errf(err, errlen, "out of memory loading the configuration");
        return AB_ENOMEM;
    }

    for (size_t i = 0; i < nopts; i++) {
        char where[CFG_WHERE_MAX];

        if (!opts[i].def)
            continue;
        snprintf(where, sizeof(where), "default of option %s", opts[i].name);
        rc = apply_value(&opts[i], out, opts[i].def, strlen(opts[i].def), where, err, errlen);
        if (rc != 0)
            goto out;
        set[i] = true;
    }

    memset(&a, 0, sizeof(a));
    a.opts = opts;
    a.nopts = nopts;
    a.out = out;
    a.set = set;
    a.res = res;
    rc = scan_args(&a, argc, argv, false, err, errlen);
    if (rc != 0)
        goto out;
    if (res)
        res->help = a.help;

    {
        const char *path = a.config_path, *from = "--config";

        if (!path) {
            path = getenv("AGENTBOX_CONFIG");
            from = "AGENTBOX_CONFIG";
        }
        if (path && *path) {
            rc = read_file(path, from, &file, &flen, err, errlen);
            if (rc != 0)
                goto out;
            rc = load_yaml(opts, nopts, out, file, flen, path, set, err, errlen);
            if (rc != 0)
                goto out;
        }
    }

    rc = apply_env(opts, nopts, out, set, err, errlen);
    if (rc != 0)
        goto out;
    rc = scan_args(&a, argc, argv, true, err, errlen);
    if (rc != 0)
        goto out;

    for (size_t i = 0; i < nopts && !a.help; i++) {
        char dn[CFG_NAME_MAX], en[CFG_NAME_MAX + 16];

        if (!opts[i].required || !is_missing(&opts[i], out, set[i]))
            continue;
        dashed(dn, sizeof(dn), opts[i].name);
        env_name(en, sizeof(en), opts[i].name);
        ab_errf(err, errlen, "%s is required: set --%s, %s%s%s or %s in the config file",
                opts[i].name, dn, en, opts[i].env_alias ? ", " : "",
                opts[i].env_alias ? opts[i].env_alias : "", opts[i].name);
        rc = AB_EINVAL;
        goto out;
    }
    rc = 0;

out:
    if (rc != 0)
        cfg_free(opts, nopts, out);
    free(file);
    free(set);
    return rc;
}

void cfg_free(const struct cfg_option *opts, size_t nopts, void *out)
{
    if (!opts || !out)
        return;
    for (size_t i = 0; i < nopts; i++) {
        if (opts[i].type == CFG_STRING) {
            char **slot = field_of(out, &opts[i]);
            free(*slot);
            *slot = NULL;
        }
    }
}

/* ---- help ---- */

enum { HC_FLAG, HC_ENV, HC_KEY, HC_DEFAULT, HC_HELP, HC_N };

/* Fills the cells of row r: 0 is the header, 1..nopts the options, then
 * --config and --help. */
static void help_row(const struct cfg_option *opts, size_t nopts, size_t r, char cells[HC_N][256])
{
    for (int c = 0; c < HC_N; c++)
        cells[c][0] = '\0';
    if (r == 0) {
        ab_strlcpy(cells[HC_FLAG], "FLAG", 256);
        ab_strlcpy(cells[HC_ENV], "ENVIRONMENT", 256);
        ab_strlcpy(cells[HC_KEY], "CONFIG KEY", 256);
        ab_strlcpy(cells[HC_DEFAULT], "DEFAULT", 256);
        ab_strlcpy(cells[HC_HELP], "DESCRIPTION", 256);
    } else if (r <= nopts) {
        const struct cfg_option *o = &opts[r - 1];
        char dn[CFG_NAME_MAX], en[CFG_NAME_MAX + 16];

        dashed(dn, sizeof(dn), o->name);
        env_name(en, sizeof(en), o->name);
        if (o->type == CFG_BOOL)
            snprintf(cells[HC_FLAG], 256, "--[no-]%s", dn);
        else
            snprintf(cells[HC_FLAG], 256, "--%s %s", dn, type_hint(o->type));
        snprintf(cells[HC_ENV], 256, "%s%s%s", en, o->env_alias ? ", " : "",
                 o->env_alias ? o->env_alias : "");
        ab_strlcpy(cells[HC_KEY], o->name, 256);
        if (o->required)
            ab_strlcpy(cells[HC_DEFAULT], "(required)", 256);
        else if (o->def && *o->def)
            ab_strlcpy(cells[HC_DEFAULT], o->def, 256);
        else if (o->def)
            ab_strlcpy(cells[HC_DEFAULT], "\"\"", 256);
        else
            ab_strlcpy(cells[HC_DEFAULT], "-", 256);
        ab_strlcpy(cells[HC_HELP], o->help ? o->help : "", 256);
    } else if (r == nopts + 1) {
        ab_strlcpy(cells[HC_FLAG], "--config FILE", 256);
        ab_strlcpy(cells[HC_ENV], "AGENTBOX_CONFIG", 256);
        ab_strlcpy(cells[HC_KEY], "-", 256);
        ab_strlcpy(cells[HC_DEFAULT], "-", 256);
        ab_strlcpy(cells[HC_HELP], "YAML file of 'key: value' settings", 256);
    } else {
        ab_strlcpy(cells[HC_FLAG], "-h, --help", 256);
        ab_strlcpy(cells[HC_ENV], "-", 256);
        ab_strlcpy(cells[HC_KEY], "-", 256);
        ab_strlcpy(cells[HC_DEFAULT], "-", 256);
        ab_strlcpy(cells[HC_HELP], "show this help", 256);
    }
}

void cfg_print_help(FILE *f, const char *usage, const char *description,
                    const struct cfg_option *opts, size_t nopts)
{
    char cells[HC_N][256];
    int width[HC_N] = {0};
    size_t rows = nopts + 3;

    if (!f)
        return;
    if (usage && *usage) {
        if (strncasecmp(usage, "usage", 5) == 0)
            fprintf(f, "%s\n", usage);
        else
            fprintf(f, "Usage: %s\n", usage);
    }
    if (description && *description)
        fprintf(f, "\n%s\n", description);
    fprintf(f, "\nOptions (flag > environment > config file > default):\n");

    for (size_t r = 0; r < rows; r++) {
        help_row(opts, nopts, r, cells);
        for (int c = 0; c < HC_N - 1; c++) {
            int w = (int)strlen(cells[c]);
            if (w > width[c])
                width[c] = AB_MIN(w, CFG_HELP_COL_MAX);
        }
    }
    for (size_t r = 0; r < rows; r++) {
        help_row(opts, nopts, r, cells);
        fprintf(f, "  %-*s  %-*s  %-*s  %-*s  %s\n", width[HC_FLAG], cells[HC_FLAG], width[HC_ENV],
                cells[HC_ENV], width[HC_KEY], cells[HC_KEY], width[HC_DEFAULT], cells[HC_DEFAULT],
                cells[HC_HELP]);
    }
}
