/* Request-body helpers over jansson. Every failure writes a message that can
 * go back to the client as it is, naming the field and what it must be.
 *
 * Getters leave *out untouched when the field is missing (or null) and not
 * required: the caller sets the default before the call. */
#include "agentbox/json.h"
#include "agentbox/common.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "unknown";
}

json_t *json_parse_object(const char *buf, size_t len, size_t maxlen, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *v;

    if (maxlen == 0)
        maxlen = JSON_BODY_MAX;
    if (buf == NULL || len == 0) {
        ab_errf(err, errlen, "body is empty; send a JSON object");
        return NULL;
    }
    if (len > maxlen) {
        ab_errf(err, errlen, "body is %zu bytes, larger than the limit of %zu bytes", len, maxlen);
        return NULL;
    }
    /* DECODE_ANY so a scalar body gets "must be a JSON object" rather than a
     * syntax error. No JSON_ALLOW_NUL: strings never hold a NUL, so the
     * const char * the getters hand out are whole. */
    v = json_loadb(buf, len, JSON_DECODE_ANY, &jerr);
    if (v == NULL) {
        ab_errf(err, errlen, "body is not valid JSON: %s (line %d, column %d)", jerr.text,
                jerr.line, jerr.column);
        return NULL;
    }
    if (!json_is_object(v)) {
        ab_errf(err, errlen, "body must be a JSON object, not %s", type_name(v));
        json_decref(v);
        return NULL;
    }
    return v;
}

/* Looks up field; returns 1 when present and not null, 0 when absent (or
 * AB_EINVAL when absent and required). */
static int lookup(json_t *obj, const char *field, bool required, json_t **v, char *err,
                  size_t errlen)
{
    if (!json_is_object(obj)) {
        ab_errf(err, errlen, "body must be a JSON object");
        return AB_EINVAL;
    }
    *v = json_object_get(obj, field);
    if (*v != NULL && !json_is_null(*v))
        return 1;
    if (required) {
        ab_errf(err, errlen, "field '%s' is required", field);
        return AB_EINVAL;
    }
    return 0;
}

/* maxlen 0 means no limit beyond the body's own. */
int json_get_str(json_t *obj, const char *field, bool required, size_t maxlen, const char **out,
                 char *err, size_t errlen)
{
    json_t *v;
    int rc = lookup(obj, field, required, &v, err, errlen);

    if (rc <= 0)
        return rc;
    if (!json_is_string(v)) {
        ab_errf(err, errlen, "field '%s' must be a string, not %s", field, type_name(v));
        return AB_EINVAL;
    }
    if (maxlen > 0 && json_string_length(v) > maxlen) {
        ab_errf(err, errlen, "field '%s' must be at most %zu bytes long", field, maxlen);
        return AB_EINVAL;
    }
    *out = json_string_value(v);
    return 0;
}

/* Only JSON integers count: 1.5 and 1.0 are refused like strings are. */
int json_get_int(json_t *obj, const char *field, bool required, int64_t min, int64_t max,
                 int64_t *out, char *err, size_t errlen)
{
    json_t *v;
    int rc = lookup(obj, field, required, &v, err, errlen);
    int64_t n;

    if (rc <= 0)
        return rc;
    if (!json_is_integer(v))
        goto bad;
    n = (int64_t)json_integer_value(v);
    if (n < min || n > max)
        goto bad;
    *out = n;
    return 0;
bad:
    ab_errf(err, errlen, "field '%s' must be an integer between %" PRId64 " and %" PRId64, field,
            min, max);
    return AB_EINVAL;
}

int json_get_bool(json_t *obj, const char *field, bool required, bool *out, char *err,
                  size_t errlen)
{
    json_t *v;
    int rc = lookup(obj, field, required, &v, err, errlen);

    if (rc <= 0)
        return rc;
    if (!json_is_boolean(v)) {
        ab_errf(err, errlen, "field '%s' must be true or false, not %s", field, type_name(v));
        return AB_EINVAL;
    }
    *out = json_is_true(v);
    return 0;
}

int json_get_object(json_t *obj, const char *field, bool required, json_t **out, char *err,
                    size_t errlen)
{
    json_t *v;
    int rc = lookup(obj, field, required, &v, err, errlen);

    if (rc <= 0)
        return rc;
    if (!json_is_object(v)) {
        ab_errf(err, errlen, "field '%s' must be an object, not %s", field, type_name(v));
        return AB_EINVAL;
    }
    *out = v;
    return 0;
}

int json_get_array(json_t *obj, const char *field, bool required, json_t **out, char *err,
                   size_t errlen)
{
    json_t *v;
    int rc = lookup(obj, field, required, &v, err, errlen);

    if (rc <= 0)
        return rc;
    if (!json_is_array(v)) {
        ab_errf(err, errlen, "field '%s' must be an array, not %s", field, type_name(v));
        return AB_EINVAL;
    }
    *out = v;
    return 0;
}

/* Any value, not only objects; NULL on allocation failure. */
char *json_dump_compact(const json_t *v)
{
    return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}

json_t *json_child_object(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);

    if (!json_is_object(v)) {
        v = json_object();
        json_object_set_new(o, k, v);
    }
    return v;
}
