/* json_parse_object and every getter on arbitrary bytes. Failures must come
 * with a message; successes must dump and parse back. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/json.h"

static void fail_without_message(int rc, const char *err)
{
    if (rc != 0 && (rc != AB_EINVAL || err[0] == '\0'))
        abort();
}

static void probe(json_t *obj, const char *field, uint8_t knob)
{
    char err[256];
    const char *s = NULL;
    int64_t i = 0;
    bool b = false;
    json_t *v = NULL;
    bool required = knob & 1;
    int64_t lo = (knob & 2) ? INT64_MIN : -10;
    int64_t hi = (knob & 4) ? INT64_MAX : 86400;
    int rc;

    err[0] = '\0';
    rc = json_get_str(obj, field, required, knob >> 3, &s, err, sizeof(err));
    fail_without_message(rc, err);
    if (rc == 0 && s != NULL && (knob >> 3) > 0 && strlen(s) > (size_t)(knob >> 3))
        abort();
    err[0] = '\0';
    rc = json_get_int(obj, field, required, lo, hi, &i, err, sizeof(err));
    fail_without_message(rc, err);
    if (rc == 0 && (i < lo || i > hi))
        abort();
    err[0] = '\0';
    fail_without_message(json_get_bool(obj, field, required, &b, err, sizeof(err)), err);
    err[0] = '\0';
    fail_without_message(json_get_object(obj, field, required, &v, err, sizeof(err)), err);
    err[0] = '\0';
    fail_without_message(json_get_array(obj, field, required, &v, err, sizeof(err)), err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256] = "";
    uint8_t knob = size > 0 ? data[0] : 0;
    size_t maxlen = (knob & 0x80) ? 64 : 0;
    json_t *obj = json_parse_object((const char *)data, size, maxlen, err, sizeof(err));
    const char *key;
    json_t *val;
    char *dump;

    if (obj == NULL) {
        if (err[0] == '\0')
            abort();
        return 0;
    }
    if (!json_is_object(obj) || size == 0 || (maxlen > 0 && size > maxlen))
        abort();
    probe(obj, "templateID", knob);
    probe(obj, "timeout", knob);
    probe(obj, "", knob);
    json_object_foreach(obj, key, val)
    {
        probe(obj, key, knob);
        probe(obj, key, (uint8_t)~knob);
    }

    dump = json_dump_compact(obj);
    if (dump == NULL)
        abort();
    json_t *again = json_parse_object(dump, strlen(dump), strlen(dump) + 1, err, sizeof(err));
    if (again == NULL || !json_equal(obj, again))
        abort();
    json_decref(again);
    free(dump);
    json_decref(obj);
    return 0;
}
