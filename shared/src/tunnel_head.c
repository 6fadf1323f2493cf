/* JSON payloads of the tunnel: OPEN and RESPONSE heads and RESET. Both
 * directions check the same bounds, and every refusal names the field and
 * the limit, so a relay can answer 400/502 with the message as it is. */
#include "agentbox/tunnel.h"
#include "agentbox/common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    va_list ap;

    if (err != NULL && errlen > 0) {
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

/* RFC 9110 token characters. */
static bool is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return true;
    return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static bool is_token(const char *s, size_t len)
{
    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!is_tchar((unsigned char)s[i]))
            return false;
    return true;
}

/* No CR, LF, NUL or other control bytes except tab: values end up in
 * HTTP/1.1 heads, where these would split or smuggle lines. */
static bool is_field_value(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return false;
    }
    return true;
}

static bool is_path(const char *s, size_t len)
{
    if (len == 0 || s[0] != '/')
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c == 0x7f)
            return false;
    }
    return true;
}

static int check_headers(const struct tun_header *h, int n, char *err, size_t errlen)
{
    if (n < 0 || n > TUN_MAX_HEADERS)
        return fail(err, errlen, AB_ELIMIT, "headers: at most %d allowed, got %d", TUN_MAX_HEADERS,
                    n);
    for (int i = 0; i < n; i++) {
        size_t nl, vl;
        if (h[i].name == NULL || h[i].value == NULL)
            return fail(err, errlen, AB_EINVAL, "headers[%d]: name and value are required", i);
        nl = strlen(h[i].name);
        vl = strlen(h[i].value);
        if (nl > TUN_HEADER_NAME_MAX)
            return fail(err, errlen, AB_ELIMIT, "headers[%d]: name longer than %d bytes", i,
                        TUN_HEADER_NAME_MAX);
        if (!is_token(h[i].name, nl))
            return fail(err, errlen, AB_EINVAL, "headers[%d]: name must be an HTTP token", i);
        if (vl > TUN_HEADER_VALUE_MAX)
            return fail(err, errlen, AB_ELIMIT, "header '%s': value longer than %d bytes",
                        h[i].name, TUN_HEADER_VALUE_MAX);
        if (!is_field_value(h[i].value, vl))
            return fail(err, errlen, AB_EINVAL, "header '%s': value has control characters",
                        h[i].name);
    }
    return 0;
}

static int check_window(uint32_t w, char *err, size_t errlen)
{
    if (w > TUN_WINDOW_MAX)
        return fail(err, errlen, AB_EINVAL, "window: at most %d bytes", TUN_WINDOW_MAX);
    return 0;
}

static int check_open(const struct tun_head *h, char *err, size_t errlen)
{
    size_t len;
    int rc;

    if (h->service == NULL || (len = strlen(h->service)) == 0 || len > TUN_SERVICE_MAX ||
        !is_token(h->service, len))
        return fail(err, errlen, AB_EINVAL, "service: a token of 1..%d characters is required",
                    TUN_SERVICE_MAX);
    if (h->method == NULL || (len = strlen(h->method)) == 0 || len > TUN_METHOD_MAX ||
        !is_token(h->method, len))
        return fail(err, errlen, AB_EINVAL, "method: a token of 1..%d characters is required",
                    TUN_METHOD_MAX);
    if (h->path == NULL)
        return fail(err, errlen, AB_EINVAL, "path is required");
    len = strlen(h->path);
    if (len > TUN_PATH_MAX)
        return fail(err, errlen, AB_ELIMIT, "path: longer than %d bytes", TUN_PATH_MAX);
    if (!is_path(h->path, len))
        return fail(err, errlen, AB_EINVAL,
                    "path must start with '/' and contain no spaces or control characters");
    rc = check_headers(h->headers, h->nheaders, err, errlen);
    if (rc < 0)
        return rc;
    return check_window(h->window, err, errlen);
}

static int check_response(const struct tun_head *h, char *err, size_t errlen)
{
    int rc;

    if (h->status < 100 || h->status > 599)
        return fail(err, errlen, AB_EINVAL, "status must be an integer between 100 and 599");
    rc = check_headers(h->headers, h->nheaders, err, errlen);
    if (rc < 0)
        return rc;
    return check_window(h->window, err, errlen);
}

static json_t *headers_to_json(const struct tun_header *h, int n)
{
    json_t *arr = json_array();

    if (arr == NULL)
        return NULL;
    for (int i = 0; i < n; i++) {
        json_t *pair = json_pack("[ss]", h[i].name, h[i].value);
        if (pair == NULL || json_array_append_new(arr, pair) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

/* Dumps obj (stolen) into a malloc'd string bounded by TUN_CONTROL_MAX. */
static int dump(json_t *obj, char **out, size_t *out_len, char *err, size_t errlen)
{
    char *text;
    size_t len;

    if (obj == NULL)
        return fail(err, errlen, AB_EINVAL, "head: a string is not valid UTF-8, or out of memory");
    text = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    if (text == NULL)
        return fail(err, errlen, AB_ENOMEM, "head: out of memory");
    len = strlen(text);
    if (len > TUN_CONTROL_MAX) {
        free(text);
        return fail(err, errlen, AB_ELIMIT, "head: %zu bytes of JSON, over the %d-byte limit", len,
                    TUN_CONTROL_MAX);
    }
    *out = text;
    *out_len = len;
    return 0;
}

int tun_open_head_encode(const struct tun_head *h, char **out, size_t *out_len, char *err,
                         size_t errlen)
{
    json_t *hdrs;
    int rc;

    *out = NULL;
    *out_len = 0;
    rc = check_open(h, err, errlen);
    if (rc < 0)
        return rc;
    hdrs = headers_to_json(h->headers, h->nheaders);
    if (hdrs == NULL)
        return fail(err, errlen, AB_EINVAL, "headers: a value is not valid UTF-8");
    return dump(json_pack("{ss ss ss so sI}", "service", h->service, "method", h->method, "path",
                          h->path, "headers", hdrs, "window", (json_int_t)h->window),
                out, out_len, err, errlen);
}

int tun_response_head_encode(const struct tun_head *h, char **out, size_t *out_len, char *err,
                             size_t errlen)
{
    json_t *hdrs;
    int rc;

    *out = NULL;
    *out_len = 0;
    rc = check_response(h, err, errlen);
    if (rc < 0)
        return rc;
    hdrs = headers_to_json(h->headers, h->nheaders);
    if (hdrs == NULL)
        return fail(err, errlen, AB_EINVAL, "headers: a value is not valid UTF-8");
    return dump(json_pack("{si so sI}", "status", h->status, "headers", hdrs, "window",
                          (json_int_t)h->window),
                out, out_len, err, errlen);
}

void tun_head_release(struct tun_head *h)
{
    if (h == NULL)
        return;
    json_decref(h->json);
    memset(h, 0, sizeof(*h));
}

/* *out gets the object; AB_ELIMIT over TUN_CONTROL_MAX, AB_EINVAL when it is
 * not a JSON object (the caller returns that code as it is). */
static int load_object(const void *buf, size_t len, const char *what, json_t **out, char *err,
                       size_t errlen)
{
    json_error_t jerr;
    json_t *root;

    *out = NULL;
    if (len > TUN_CONTROL_MAX)
        return fail(err, errlen, AB_ELIMIT, "%s: over the %d-byte limit", what, TUN_CONTROL_MAX);
    root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL)
        return fail(err, errlen, AB_EINVAL, "%s is not valid JSON: %s (column %d)", what, jerr.text,
                    jerr.column);
    if (!json_is_object(root)) {
        json_decref(root);
        return fail(err, errlen, AB_EINVAL, "%s must be a JSON object", what);
    }
    *out = root;
    return 0;
}

/* A string field without embedded NULs; missing → NULL with rc 0. */
static int get_string(json_t *obj, const char *field, const char **out, size_t *len, char *err,
                      size_t errlen)
{
    json_t *v = json_object_get(obj, field);

    *out = NULL;
    *len = 0;
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return fail(err, errlen, AB_EINVAL, "field '%s' must be a string", field);
    *out = json_string_value(v);
    *len = json_string_length(v);
    if (strlen(*out) != *len)
        return fail(err, errlen, AB_EINVAL, "field '%s' contains a NUL byte", field);
    return 0;
}

static int parse_common(json_t *root, struct tun_head *h, char *err, size_t errlen)
{
    json_t *hdrs = json_object_get(root, "headers");
    json_t *win = json_object_get(root, "window");

    h->window = TUN_INITIAL_WINDOW;
    if (win != NULL && !json_is_null(win)) {
        json_int_t w;
        if (!json_is_integer(win) || (w = json_integer_value(win)) < 0 || w > TUN_WINDOW_MAX)
            return fail(err, errlen, AB_EINVAL,
                        "field 'window' must be an integer between 0 and %d", TUN_WINDOW_MAX);
        h->window = (uint32_t)w;
    }
    if (hdrs == NULL || json_is_null(hdrs))
        return 0;
    if (!json_is_array(hdrs))
        return fail(err, errlen, AB_EINVAL, "field 'headers' must be an array of [name, value]");
    if (json_array_size(hdrs) > TUN_MAX_HEADERS)
        return fail(err, errlen, AB_ELIMIT, "headers: at most %d allowed, got %zu", TUN_MAX_HEADERS,
                    json_array_size(hdrs));
    for (size_t i = 0; i < json_array_size(hdrs); i++) {
        json_t *pair = json_array_get(hdrs, i);
        json_t *n = json_array_get(pair, 0), *v = json_array_get(pair, 1);
        if (!json_is_array(pair) || json_array_size(pair) != 2 || !json_is_string(n) ||
            !json_is_string(v))
            return fail(err, errlen, AB_EINVAL,
                        "headers[%zu] must be a [name, value] pair of strings", i);
        if (strlen(json_string_value(n)) != json_string_length(n) ||
            strlen(json_string_value(v)) != json_string_length(v))
            return fail(err, errlen, AB_EINVAL, "headers[%zu] contains a NUL byte", i);
        h->headers[i].name = json_string_value(n);
        h->headers[i].value = json_string_value(v);
    }
    h->nheaders = (int)json_array_size(hdrs);
    return check_headers(h->headers, h->nheaders, err, errlen);
}

int tun_open_head_parse(const void *buf, size_t len, struct tun_head *out, char *err, size_t errlen)
{
    json_t *root;
    size_t n;
    int rc;

    memset(out, 0, sizeof(*out));
    if ((rc = load_object(buf, len, "OPEN head", &root, err, errlen)) != 0)
        return rc;
    if ((rc = get_string(root, "service", &out->service, &n, err, errlen)) < 0 ||
        (rc = get_string(root, "method", &out->method, &n, err, errlen)) < 0 ||
        (rc = get_string(root, "path", &out->path, &n, err, errlen)) < 0 ||
        (rc = parse_common(root, out, err, errlen)) < 0 || (rc = check_open(out, err, errlen)) < 0)
        goto fail;
    out->json = root;
    return 0;
fail:
    json_decref(root);
    memset(out, 0, sizeof(*out));
    return rc;
}

int tun_response_head_parse(const void *buf, size_t len, struct tun_head *out, char *err,
                            size_t errlen)
{
    json_t *root, *status;
    int rc;

    memset(out, 0, sizeof(*out));
    if ((rc = load_object(buf, len, "RESPONSE head", &root, err, errlen)) != 0)
        return rc;
    status = json_object_get(root, "status");
    if (!json_is_integer(status) || json_integer_value(status) < 100 ||
        json_integer_value(status) > 599) {
        rc = fail(err, errlen, AB_EINVAL, "field 'status' must be an integer between 100 and 599");
        goto fail;
    }
    out->status = (int)json_integer_value(status);
    if ((rc = parse_common(root, out, err, errlen)) < 0 ||
        (rc = check_response(out, err, errlen)) < 0)
        goto fail;
    out->json = root;
    return 0;
fail:
    json_decref(root);
    memset(out, 0, sizeof(*out));
    return rc;
}

/* Cuts s to at most max bytes without splitting a UTF-8 sequence. */
static size_t utf8_cut(const char *s, size_t max)
{
    size_t len = strlen(s);

    if (len <= max)
        return len;
    while (max > 0 && ((unsigned char)s[max] & 0xc0) == 0x80)
        max--;
    return max;
}

int tun_reset_encode(const char *code, const char *message, char **out, size_t *out_len)
{
    json_t *obj, *msg;
    size_t clen;

    *out = NULL;
    *out_len = 0;
    if (code == NULL || (clen = strlen(code)) == 0 || clen > TUN_RESET_CODE_MAX ||
        !is_token(code, clen))
        return AB_EINVAL;
    if (message == NULL)
        message = "";
    obj = json_object();
    if (obj == NULL)
        return AB_ENOMEM;
    msg = json_stringn(message, utf8_cut(message, TUN_RESET_MESSAGE_MAX));
    if (msg == NULL) /* not UTF-8: keep the code, which is what peers act on */
        msg = json_string("(message was not valid UTF-8)");
    if (json_object_set_new(obj, "code", json_string(code)) != 0 ||
        json_object_set_new(obj, "message", msg) != 0) {
        json_decref(obj);
        return AB_EINVAL;
    }
    return dump(obj, out, out_len, NULL, 0);
}

int tun_reset_parse(const void *buf, size_t len, char *code, size_t codelen, char *message,
                    size_t msglen, char *err, size_t errlen)
{
    json_t *root;
    const char *c, *m;
    size_t cl, ml;
    int rc;

    if (codelen > 0)
        code[0] = '\0';
    if (msglen > 0)
        message[0] = '\0';
    if ((rc = load_object(buf, len, "RESET", &root, err, errlen)) != 0)
        return rc;
    if ((rc = get_string(root, "code", &c, &cl, err, errlen)) < 0 ||
        (rc = get_string(root, "message", &m, &ml, err, errlen)) < 0)
        goto done;
    if (c == NULL || cl == 0 || cl > TUN_RESET_CODE_MAX || !is_token(c, cl)) {
        rc = fail(err, errlen, AB_EINVAL, "RESET field 'code' must be a token of 1..%d characters",
                  TUN_RESET_CODE_MAX);
        goto done;
    }
    if (cl >= codelen) {
        /* a cut code is another code: peers act on it */
        rc = fail(err, errlen, AB_ELIMIT, "RESET field 'code' is longer than %zu characters",
                  codelen > 0 ? codelen - 1 : 0);
        goto done;
    }
    ab_strlcpy(code, c, codelen);
    if (m != NULL)
        ab_strlcpy(message, m, msglen);
    rc = 0;
done:
    json_decref(root);
    return rc;
}
