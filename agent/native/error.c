/* The native API's error shape (reference §4.1): {"error", "errorCode",
 * "detail"?} on every answer of the native listener — the handlers' own
 * refusals, the router's 404/405 and the auth module's 401/503 alike (the
 * agent installs native_error_json as that listener's error format). */
#include "agent/native/native.h"

#include "agentbox/common.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *native_error_code(int status)
{
    switch (status) {
    case 400:
        return "BAD_REQUEST";
    case 401:
        return "UNAUTHORIZED";
    case 403:
        return "FORBIDDEN";
    case 404:
        return "NOT_FOUND";
    case 405:
        return "METHOD_NOT_ALLOWED";
    case 409:
        return "CONFLICT";
    case 413:
        return "PAYLOAD_TOO_LARGE";
    case 422:
        return "UNPROCESSABLE";
    case 426:
        return "UPGRADE_REQUIRED";
    case 429:
        return "TOO_MANY_REQUESTS";
    case 501:
        return "NOT_IMPLEMENTED";
    case 502:
        return "BAD_GATEWAY";
    case 503:
        return "UNAVAILABLE";
    case 504:
        return "TIMEOUT";
    default:
        return status >= 500 ? "INTERNAL" : "ERROR";
    }
}

json_t *native_error_json(int status, const char *message)
{
    char msg[768];
    const char *at;

    /* agent/auth.c words its refusals once for every listener and names the
     * E2B header; this API's clients (abx direct mode) send AGENTBOX-API-KEY */
    if (status == 401 && (at = strstr(message, "X-API-Key")) != NULL)
        snprintf(msg, sizeof(msg), "%.*sAGENTBOX-API-KEY%s", (int)(at - message), message,
                 at + strlen("X-API-Key"));
    else
        snprintf(msg, sizeof(msg), "%s", message);
    return json_pack("{s:s,s:s}", "error", msg, "errorCode", native_error_code(status));
}

void native_error(struct http_exchange *ex, int status, const char *code, json_t *detail,
                  const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    json_t *body;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    body = native_error_json(status, msg);
    if (code)
        json_object_set_new(body, "errorCode", json_string(code));
    if (detail)
        json_object_set_new(body, "detail", detail);
    http_respond_json(ex, status, body);
}
