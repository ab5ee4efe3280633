/*  za_json.c: numbers for JSON (za_json.h).                              */
#include "za/za_json.h"

#include <math.h>
#include <stdio.h>

const char *
za_json_real_text (double value, int digits, char *text, size_t size)
{
    if (isfinite (value))
        snprintf (text, size, "%.*g", digits, value);
    else
        snprintf (text, size, "null");
    return text;
}

json_t *
za_json_real (double value)
{
    return isfinite (value)? json_real (value): json_null ();
}
