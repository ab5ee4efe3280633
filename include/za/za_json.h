/*  za_json.h: numbers for JSON, which has neither NaN nor infinity: a
    diverged loss (NaN) made lines no reader takes, and reports the broker
    refused.                                                              */
#ifndef ZA_JSON_H_INCLUDED
#define ZA_JSON_H_INCLUDED

#include <jansson.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

//  value with `digits` significant digits, or null when it is not finite,
//  into text [size]; returns text.
#define ZA_JSON_REAL_MAX 32
const char *za_json_real_text (double value, int digits, char *text, size_t size);

//  The same as jansson's value: json_real, or json_null when not finite (a
//  new reference, as json_real's).
json_t *za_json_real (double value);

#ifdef __cplusplus
}
#endif

#endif
