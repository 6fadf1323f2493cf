/* Helpers over jansson for request bodies: each read names the field in its
 * error, so a handler can answer 400 with the message as it is, e.g.
 *   "field 'timeout' must be an integer between 0 and 86400"
 *   "field 'templateID' is required"
 *   "body is not valid JSON: '}' expected near end of file (line 1, column 17)" */
#ifndef AGENTBOX_JSON_H
#define AGENTBOX_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JSON_BODY_MAX (1024 * 1024)

/* Parses a body that must be a JSON object of at most maxlen bytes (0 = JSON_BODY_MAX).
 * Returns a new reference or NULL with the message in err. An empty body is an error. */
json_t *json_parse_object(const char *buf, size_t len, size_t maxlen, char *err, size_t errlen);

/* Each getter: missing field → default (or AB_EINVAL "is required" when required);
 * JSON null counts as missing; wrong type or out of range → AB_EINVAL. */
int json_get_str(json_t *obj, const char *field, bool required, size_t maxlen, const char **out,
                 char *err, size_t errlen);
int json_get_int(json_t *obj, const char *field, bool required, int64_t min, int64_t max,
                 int64_t *out, char *err, size_t errlen);
int json_get_bool(json_t *obj, const char *field, bool required, bool *out, char *err,
                  size_t errlen);
/* Object or array child (borrowed reference), type checked. */
int json_get_object(json_t *obj, const char *field, bool required, json_t **out, char *err,
                    size_t errlen);
int json_get_array(json_t *obj, const char *field, bool required, json_t **out, char *err,
                   size_t errlen);

/* For building bodies: o's member k when it is an object, else a new empty
 * object set there (replacing what was); borrowed from o. */
json_t *json_child_object(json_t *o, const char *k);

/* Serialises compactly; caller frees. */
char *json_dump_compact(const json_t *v);

#endif
