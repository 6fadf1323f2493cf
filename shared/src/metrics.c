/* Prometheus metrics (text exposition format 0.0.4).
 *
 * Each family keeps its series in a hash table behind a rwlock: updates take
 * the read lock and change values with atomics, so updates on different (or
 * the same) series never wait for each other; only creating or removing a
 * series, and rendering, take the write side or the registry mutex.
 * Floating-point values are stored as their bit patterns in 64-bit atomics. */
#include "agentbox/metrics.h"
#include "agentbox/buf.h"
#include "agentbox/common.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define METRICS_MAX_FAMILIES 1024
#define METRICS_NAME_MAX 128
#define METRICS_HELP_MAX 1024
/* Longer label values are cut here (and the cut value names the series). */
#define METRICS_VALUE_MAX 1024
#define METRICS_MAX_BUCKETS 64
#define TABLE_INITIAL 16

static const double default_buckets[] = {.0005, .001, .0025, .005, .01, .025, .05,
                                         .1,    .25,  .5,    1,    2.5, 5,    10};

struct series {
    struct series *next;
    uint64_t hash;
    char **values;            /* one per label name */
    _Atomic uint64_t value;   /* counter / gauge, double bits */
    _Atomic uint64_t sum;     /* histogram, double bits */
    _Atomic uint64_t *counts; /* histogram, per bucket (not cumulative), last is +Inf */
};

struct metric_family {
    struct metrics_registry *reg;
    char *name;
    char *help;
    enum metric_type type;
    size_t nlabels;
    char *labels[METRICS_MAX_LABELS];
    double *buckets;
    size_t nbuckets;
    pthread_rwlock_t lock;
    struct series **table;
    size_t tsize;
    size_t count;
};

struct metrics_registry {
    pthread_mutex_t lock;
    struct metric_family *fams[METRICS_MAX_FAMILIES];
    size_t nfams;
    struct metric_family *dropped;
};

/* A label value as used for lookups: possibly cut at METRICS_VALUE_MAX. */
struct lval {
    const char *s;
    size_t len;
};

static uint64_t dbits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof(u));
    return u;
}

static double bitsd(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof(d));
    return d;
}

static void atomic_add_double(_Atomic uint64_t *p, double delta)
{
    uint64_t old = atomic_load_explicit(p, memory_order_relaxed);

    while (!atomic_compare_exchange_weak_explicit(p, &old, dbits(bitsd(old) + delta),
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
}

static bool valid_name(const char *s, bool colon_ok)
{
    size_t len = strnlen(s, METRICS_NAME_MAX + 1);

    if (len == 0 || len > METRICS_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                  (colon_ok && c == ':') || (i > 0 && c >= '0' && c <= '9');
        if (!ok)
            return false;
    }
    return true;
}

static void series_free(struct series *s, size_t nlabels)
{
    if (s == NULL)
        return;
    for (size_t i = 0; s->values != NULL && i < nlabels; i++)
        free(s->values[i]);
    free(s->values);
    free(s->counts);
    free(s);
}

static void family_free(struct metric_family *f)
{
    if (f == NULL)
        return;
    for (size_t i = 0; f->table != NULL && i < f->tsize; i++) {
        struct series *s = f->table[i];
        while (s != NULL) {
            struct series *next = s->next;
            series_free(s, f->nlabels);
            s = next;
        }
    }
    free(f->table);
    for (size_t i = 0; i < f->nlabels; i++)
        free(f->labels[i]);
    free(f->buckets);
    free(f->name);
    free(f->help);
    pthread_rwlock_destroy(&f->lock);
    free(f);
}

/* Fills lv from values; false when the family has labels but values is NULL. */
static bool label_values(const struct metric_family *f, const char *const *values, struct lval *lv,
                         uint64_t *hash)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */

    if (f->nlabels > 0 && values == NULL)
        return false;
    for (size_t i = 0; i < f->nlabels; i++) {
        lv[i].s = values[i] != NULL ? values[i] : "";
        lv[i].len = strnlen(lv[i].s, METRICS_VALUE_MAX);
        for (size_t k = 0; k < lv[i].len; k++)
            h = (h ^ (uint8_t)lv[i].s[k]) * 1099511628211ULL;
        h = (h ^ 0xffu) * 1099511628211ULL; /* 0xff never occurs in UTF-8 */
    }
    *hash = h;
    return true;
}

static struct series *find(const struct metric_family *f, const struct lval *lv, uint64_t hash)
{
    for (struct series *s = f->table[hash % f->tsize]; s != NULL; s = s->next) {
        bool same = s->hash == hash;
        for (size_t i = 0; same && i < f->nlabels; i++)
            same =
                strlen(s->values[i]) == lv[i].len && memcmp(s->values[i], lv[i].s, lv[i].len) == 0;
        if (same)
            return s;
    }
    return NULL;
}

/* Doubles the table; on allocation failure the old one keeps working. */
static void grow(struct metric_family *f)
{
    size_t nsize = f->tsize * 2;
    struct series **t = calloc(nsize, sizeof(*t));

    if (t == NULL)
        return;
    for (size_t i = 0; i < f->tsize; i++) {
        struct series *s = f->table[i];
        while (s != NULL) {
            struct series *next = s->next;
            s->next = t[s->hash % nsize];
            t[s->hash % nsize] = s;
            s = next;
        }
    }
    free(f->table);
    f->table = t;
    f->tsize = nsize;
}

/* Caller holds the write lock. NULL on allocation failure. */
static struct series *create(struct metric_family *f, const struct lval *lv, uint64_t hash)
{
    struct series *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return NULL;
    s->hash = hash;
    if (f->nlabels > 0) {
        s->values = calloc(f->nlabels, sizeof(*s->values));
        if (s->values == NULL)
            goto fail;
        for (size_t i = 0; i < f->nlabels; i++) {
            s->values[i] = strndup(lv[i].s, lv[i].len);
            if (s->values[i] == NULL)
                goto fail;
        }
    }
    if (f->type == METRIC_HISTOGRAM) {
        s->counts = calloc(f->nbuckets + 1, sizeof(*s->counts));
        if (s->counts == NULL)
            goto fail;
    }
    if (f->count >= f->tsize)
        grow(f);
    s->next = f->table[hash % f->tsize];
    f->table[hash % f->tsize] = s;
    f->count++;
    return s;
fail:
    series_free(s, f->nlabels);
    return NULL;
}

/* Returns the series with f->lock held (read or write), or NULL with no lock
 * held when the values are missing, the family is full or memory ran out. */
static struct series *acquire(struct metric_family *f, const char *const *values)
{
    struct lval lv[METRICS_MAX_LABELS];
    uint64_t hash;
    struct series *s;
    bool full;

    if (f == NULL || !label_values(f, values, lv, &hash))
        return NULL;
    pthread_rwlock_rdlock(&f->lock);
    s = find(f, lv, hash);
    if (s != NULL)
        return s;
    pthread_rwlock_unlock(&f->lock);

    pthread_rwlock_wrlock(&f->lock);
    s = find(f, lv, hash);
    full = s == NULL && f->count >= METRICS_MAX_SERIES;
    if (s == NULL && !full)
        s = create(f, lv, hash);
    if (s != NULL)
        return s;
    pthread_rwlock_unlock(&f->lock);
    if (full && f->reg->dropped != f)
        metrics_add(f->reg->dropped, NULL, 1);
    return NULL;
}

static void release(struct metric_family *f)
{
    pthread_rwlock_unlock(&f->lock);
}

/* Counters only go up: a negative or NaN delta is ignored. Not for histograms. */
void metrics_add(struct metric_family *f, const char *const *values, double delta)
{
    struct series *s;

    if (f == NULL || f->type == METRIC_HISTOGRAM)
        return;
    if (f->type == METRIC_COUNTER && !(delta >= 0))
        return;
    s = acquire(f, values);
    if (s == NULL)
        return;
    atomic_add_double(&s->value, delta);
    release(f);
}

/* Gauges and counters (a counter mirrored from elsewhere); not histograms. */
void metrics_set(struct metric_family *f, const char *const *values, double value)
{
    struct series *s;

    if (f == NULL || f->type == METRIC_HISTOGRAM)
        return;
    s = acquire(f, values);
    if (s == NULL)
        return;
    atomic_store_explicit(&s->value, dbits(value), memory_order_relaxed);
    release(f);
}

/* Histograms only; other families ignore it. */
void metrics_observe(struct metric_family *f, const char *const *values, double value)
{
    struct series *s;
    size_t i = 0;

    if (f == NULL || f->type != METRIC_HISTOGRAM)
        return;
    s = acquire(f, values);
    if (s == NULL)
        return;
    while (i < f->nbuckets && !(value <= f->buckets[i]))
        i++;
    atomic_fetch_add_explicit(&s->counts[i], 1, memory_order_relaxed);
    atomic_add_double(&s->sum, value);
    release(f);
}

void metrics_remove(struct metric_family *f, const char *const *values)
{
    struct lval lv[METRICS_MAX_LABELS];
    uint64_t hash;
    struct series **pp;

    if (f == NULL || !label_values(f, values, lv, &hash))
        return;
    pthread_rwlock_wrlock(&f->lock);
    struct series *s = find(f, lv, hash);
    if (s != NULL) {
        for (pp = &f->table[hash % f->tsize]; *pp != s; pp = &(*pp)->next)
            ;
        *pp = s->next;
        f->count--;
        series_free(s, f->nlabels);
    }
    pthread_rwlock_unlock(&f->lock);
}

static struct metric_family *family_new(struct metrics_registry *r, const char *name,
                                        const char *help, enum metric_type type,
                                        const char *const *labels, const double *buckets,
                                        size_t nbuckets)
{
    struct metric_family *f = calloc(1, sizeof(*f));
    pthread_rwlockattr_t attr;

    if (f == NULL)
        return NULL;
    f->reg = r;
    f->type = type;
    /* Writers (new series) first, so a steady stream of updates on existing
     * series cannot starve a registration of a new one. Nothing takes the
     * read side recursively, which this kind would deadlock on. */
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&f->lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    f->name = strdup(name);
    {
        const char *h = help != NULL ? help : "";
        size_t hl = strnlen(h, METRICS_HELP_MAX);
        f->help = malloc(hl + 1);
        if (f->help != NULL) {
            memcpy(f->help, h, hl);
            f->help[hl] = '\0';
        }
    }
    f->tsize = TABLE_INITIAL;
    f->table = calloc(f->tsize, sizeof(*f->table));
    if (f->name == NULL || f->help == NULL || f->table == NULL)
        goto fail;
    for (size_t i = 0; labels != NULL && labels[i] != NULL; i++) {
        f->labels[i] = strdup(labels[i]);
        if (f->labels[i] == NULL)
            goto fail;
        f->nlabels++;
    }
    if (type == METRIC_HISTOGRAM) {
        f->nbuckets = nbuckets;
        f->buckets = calloc(nbuckets > 0 ? nbuckets : 1, sizeof(*f->buckets));
        if (f->buckets == NULL)
            goto fail;
        if (nbuckets > 0)
            memcpy(f->buckets, buckets, nbuckets * sizeof(*buckets));
    }
    return f;
fail:
    family_free(f);
    return NULL;
}

static bool same_labels(const struct metric_family *f, const char *const *labels)
{
    size_t n = 0;

    while (labels != NULL && labels[n] != NULL) {
        if (n >= f->nlabels || strcmp(labels[n], f->labels[n]) != 0)
            return false;
        n++;
    }
    return n == f->nlabels;
}

/* Refuses (NULL): an invalid metric or label name, more than METRICS_MAX_LABELS
 * labels, a histogram label "le", buckets not strictly ascending, a name
 * already registered with another type or other labels, or a full registry. */
struct metric_family *metrics_register(struct metrics_registry *r, const char *name,
                                       const char *help, enum metric_type type,
                                       const char *const *labels, const double *buckets,
                                       size_t nbuckets)
{
    struct metric_family *f = NULL;
    size_t nlabels = 0;
    uint64_t hash;

    if (r == NULL || name == NULL || !valid_name(name, true))
        return NULL;
    for (; labels != NULL && labels[nlabels] != NULL; nlabels++) {
        if (nlabels >= METRICS_MAX_LABELS || !valid_name(labels[nlabels], false) ||
            strncmp(labels[nlabels], "__", 2) == 0)
            return NULL;
        if (type == METRIC_HISTOGRAM && strcmp(labels[nlabels], "le") == 0)
            return NULL;
    }
    if (type == METRIC_HISTOGRAM) {
        if (buckets == NULL) {
            buckets = default_buckets;
            nbuckets = AB_ARRAY_LEN(default_buckets);
        }
        /* +Inf is always there; a caller that lists it gets it once. */
        if (nbuckets > 0 && isinf(buckets[nbuckets - 1]) && buckets[nbuckets - 1] > 0)
            nbuckets--;
        if (nbuckets > METRICS_MAX_BUCKETS)
            return NULL;
        for (size_t i = 0; i < nbuckets; i++) {
            if (!isfinite(buckets[i]) || (i > 0 && !(buckets[i] > buckets[i - 1])))
                return NULL;
        }
    }

    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->nfams; i++) {
        if (strcmp(r->fams[i]->name, name) == 0) {
            f = r->fams[i];
            if (f->type != type || !same_labels(f, labels))
                f = NULL;
            goto out;
        }
    }
    if (r->nfams >= METRICS_MAX_FAMILIES)
        goto out;
    f = family_new(r, name, help, type, labels, buckets, nbuckets);
    if (f == NULL)
        goto out;
    /* A family without labels always has its one series, so it renders as 0
     * before the first update. */
    if (f->nlabels == 0 && (!label_values(f, NULL, NULL, &hash) || create(f, NULL, hash) == NULL)) {
        family_free(f);
        f = NULL;
        goto out;
    }
    r->fams[r->nfams++] = f;
out:
    pthread_mutex_unlock(&r->lock);
    return f;
}

struct metrics_registry *metrics_registry_new(void)
{
    struct metrics_registry *r = calloc(1, sizeof(*r));

    if (r == NULL)
        return NULL;
    pthread_mutex_init(&r->lock, NULL);
    r->dropped = metrics_register(r, "agentbox_metrics_dropped_series_total",
                                  "Updates dropped because a metric family reached its "
                                  "series limit.",
                                  METRIC_COUNTER, NULL, NULL, 0);
    if (r->dropped == NULL) {
        metrics_registry_free(r);
        return NULL;
    }
    return r;
}

void metrics_registry_free(struct metrics_registry *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->nfams; i++)
        family_free(r->fams[i]);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

static struct metrics_registry *default_registry;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

static void default_init(void)
{
    default_registry = metrics_registry_new();
}

/* NULL only when the first call could not allocate. */
struct metrics_registry *metrics_default(void)
{
    pthread_once(&default_once, default_init);
    return default_registry;
}

/* ---- rendering ---- */

/* Prometheus text is a few KiB in practice; the cap keeps a runaway label
 * set from taking the process's memory with it. */
#define METRICS_RENDER_MAX ((size_t)64 << 20)

/* Rendering appends a lot of small pieces; the first failure sticks so they
 * need no check each, and the render gives up once at the end. */
struct sbuf {
    struct buf b;
    int rc;
};

static void sb_put(struct sbuf *b, const char *s, size_t n)
{
    if (b->rc == 0)
        b->rc = buf_append(&b->b, s, n);
}

static void sb_str(struct sbuf *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

/* Escapes backslash and newline, and the double quote when quote is set. */
static void sb_escaped(struct sbuf *b, const char *s, bool quote)
{
    for (; *s != '\0'; s++) {
        if (*s == '\\')
            sb_str(b, "\\\\");
        else if (*s == '\n')
            sb_str(b, "\\n");
        else if (quote && *s == '"')
            sb_str(b, "\\\"");
        else
            sb_put(b, s, 1);
    }
}

/* Shortest text that reads back as the same double, laid out as Go's
 * strconv.FormatFloat(v, 'g', -1, 64) does, which is what Prometheus' own
 * clients print: exponent form when the decimal exponent is below -4 or at
 * least 6 ("0.1", "2.5", "100000", "1e+06", "1.5e-07"). */
static void format_double(double v, char out[40])
{
    int prec = 1;
    int exp;
    const char *e;

    if (isnan(v)) {
        strcpy(out, "NaN");
        return;
    }
    if (isinf(v)) {
        strcpy(out, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    /* Fewest significant digits that round-trip (17 always does). */
    for (; prec < 17; prec++) {
        snprintf(out, 40, "%.*e", prec - 1, v);
        if (strtod(out, NULL) == v)
            break;
    }
    snprintf(out, 40, "%.*e", prec - 1, v);
    e = strchr(out, 'e');
    exp = e != NULL ? atoi(e + 1) : 0;
    if (exp < -4 || exp >= 6)
        return;
    snprintf(out, 40, "%.*f", AB_MAX(prec - 1 - exp, 0), v);
}

static void sb_double(struct sbuf *b, double v)
{
    char num[40];

    format_double(v, num);
    sb_str(b, num);
}

/* Writes {a="x",b="y"[,le="…"]}, or nothing when there are no labels at all. */
static void sb_labels(struct sbuf *b, const struct metric_family *f, const struct series *s,
                      const char *le)
{
    if (f->nlabels == 0 && le == NULL)
        return;
    sb_str(b, "{");
    for (size_t i = 0; i < f->nlabels; i++) {
        if (i > 0)
            sb_str(b, ",");
        sb_str(b, f->labels[i]);
        sb_str(b, "=\"");
        sb_escaped(b, s->values[i], true);
        sb_str(b, "\"");
    }
    if (le != NULL) {
        if (f->nlabels > 0)
            sb_str(b, ",");
        sb_str(b, "le=\"");
        sb_str(b, le);
        sb_str(b, "\"");
    }
    sb_str(b, "}");
}

/* qsort_r comparator; arg points at the family's label count. */
static int series_cmp(const void *a, const void *b, void *arg)
{
    const struct series *x = *(const struct series *const *)a;
    const struct series *y = *(const struct series *const *)b;
    size_t nlabels = *(const size_t *)arg;

    for (size_t i = 0; i < nlabels; i++) {
        int c = strcmp(x->values[i], y->values[i]);
        if (c != 0)
            return c;
    }
    return 0;
}

static int family_cmp(const void *a, const void *b)
{
    const struct metric_family *x = *(const struct metric_family *const *)a;
    const struct metric_family *y = *(const struct metric_family *const *)b;

    return strcmp(x->name, y->name);
}

static void render_series(struct sbuf *b, const struct metric_family *f, const struct series *s)
{
    char le[40];
    char num[24];
    uint64_t cum = 0;

    if (f->type != METRIC_HISTOGRAM) {
        sb_str(b, f->name);
        sb_labels(b, f, s, NULL);
        sb_str(b, " ");
        sb_double(b, bitsd(atomic_load_explicit(&s->value, memory_order_relaxed)));
        sb_str(b, "\n");
        return;
    }
    for (size_t i = 0; i <= f->nbuckets; i++) {
        cum += atomic_load_explicit(&s->counts[i], memory_order_relaxed);
        if (i < f->nbuckets)
            format_double(f->buckets[i], le);
        else
            strcpy(le, "+Inf");
        sb_str(b, f->name);
        sb_str(b, "_bucket");
        sb_labels(b, f, s, le);
        snprintf(num, sizeof(num), " %" PRIu64 "\n", cum);
        sb_str(b, num);
    }
    sb_str(b, f->name);
    sb_str(b, "_sum");
    sb_labels(b, f, s, NULL);
    sb_str(b, " ");
    sb_double(b, bitsd(atomic_load_explicit(&s->sum, memory_order_relaxed)));
    sb_str(b, "\n");
    /* _count is the +Inf bucket, so the two always agree even while
     * observations land during the render. */
    sb_str(b, f->name);
    sb_str(b, "_count");
    sb_labels(b, f, s, NULL);
    snprintf(num, sizeof(num), " %" PRIu64 "\n", cum);
    sb_str(b, num);
}

static const char *type_text(enum metric_type t)
{
    switch (t) {
    case METRIC_COUNTER:
        return "counter";
    case METRIC_GAUGE:
        return "gauge";
    case METRIC_HISTOGRAM:
        return "histogram";
    }
    return "untyped";
}

/* Families sorted by name, series by label values, so output is stable.
 * Families with labels but no series yet are left out. The caller frees the
 * result; NULL when memory ran out or the text would pass METRICS_RENDER_MAX. */
char *metrics_render(struct metrics_registry *r, size_t *len)
{
    struct sbuf b = {.rc = 0};
    struct metric_family *fams[METRICS_MAX_FAMILIES];
    struct series **list = NULL;
    size_t nfams;

    if (len != NULL)
        *len = 0;
    if (r == NULL)
        return NULL;
    buf_init(&b.b, METRICS_RENDER_MAX, "metrics text");
    pthread_mutex_lock(&r->lock);
    nfams = r->nfams;
    memcpy(fams, r->fams, nfams * sizeof(fams[0]));
    qsort(fams, nfams, sizeof(fams[0]), family_cmp);
    for (size_t i = 0; i < nfams && b.rc == 0; i++) {
        struct metric_family *f = fams[i];
        size_t n = 0;

        pthread_rwlock_rdlock(&f->lock);
        if (f->count == 0) {
            pthread_rwlock_unlock(&f->lock);
            continue;
        }
        list = malloc(f->count * sizeof(*list));
        if (list == NULL) {
            b.rc = AB_ENOMEM;
            pthread_rwlock_unlock(&f->lock);
            break;
        }
        for (size_t k = 0; k < f->tsize; k++) {
            for (struct series *s = f->table[k]; s != NULL; s = s->next)
                list[n++] = s;
        }
        qsort_r(list, n, sizeof(*list), series_cmp, &f->nlabels);
        sb_str(&b, "# HELP ");
        sb_str(&b, f->name);
        sb_str(&b, " ");
        sb_escaped(&b, f->help, false);
        sb_str(&b, "\n# TYPE ");
        sb_str(&b, f->name);
        sb_str(&b, " ");
        sb_str(&b, type_text(f->type));
        sb_str(&b, "\n");
        for (size_t k = 0; k < n; k++)
            render_series(&b, f, list[k]);
        pthread_rwlock_unlock(&f->lock);
        free(list);
        list = NULL;
    }
    pthread_mutex_unlock(&r->lock);
    if (b.rc == 0)
        b.rc = buf_grow(&b.b, 0); /* an empty registry still renders "" */
    if (b.rc != 0) {
        buf_free(&b.b);
        return NULL;
    }
    return buf_take(&b.b, len);
}
