/*  za_safetensors.c: any safetensors file, read whole and checked, its
    float tensors converted to float32.                                     */
#include "za/za_safetensors.h"
#include "za/za_util.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define HEADER_MAX_BYTES (100u * 1024u * 1024u)
#define DTYPE_CHARS 8

typedef struct {
    char *name;
    char dtype [DTYPE_CHARS];
    int element_size;                   //  0: a dtype we do not convert
    int ndim;
    int64_t shape [ZA_SAFETENSORS_MAX_DIMS];
    const uint8_t *data;
    uint64_t bytes;
    uint8_t *owned;                     //  data of an added tensor, or NULL
} s_tensor_t;

struct za_safetensors_t {
    char *path;
    uint8_t *file;
    size_t size;
    json_t *meta;
    s_tensor_t *tensors;
    int count;
};

static int
s_element_size (const char *dtype)
{
    static const struct {
        const char *name;
        int size;
    } known [] = {{"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F64", 8}};
    for (size_t k = 0; k < sizeof known / sizeof known [0]; k++)
        if (!strcmp (dtype, known [k].name))
            return known [k].size;
    return 0;
}

static int
s_dtype_bytes (const char *dtype)
{
    static const char *eight [] = {"F64", "I64", "U64"}, *four [] = {"F32", "I32", "U32"},
                      *two [] = {"F16", "BF16", "I16", "U16"}, *one [] = {"I8", "U8", "BOOL",
                      "F8_E4M3", "F8_E5M2"};
    for (int k = 0; k < 3; k++)
        if (!strcmp (dtype, eight [k]) || !strcmp (dtype, four [k]))
            return !strcmp (dtype, eight [k])? 8: 4;
    for (int k = 0; k < 4; k++)
        if (!strcmp (dtype, two [k]))
            return 2;
    for (int k = 0; k < 5; k++)
        if (!strcmp (dtype, one [k]))
            return 1;
    return 0;
}

//  Reads the whole file. 0, or -1 with an error.
static int
s_read_file (za_safetensors_t *self)
{
    FILE *file = fopen (self->path, "rb");
    if (!file)
        return za_error ("%s: cannot open: %s", self->path, strerror (errno));
    long size = fseek (file, 0, SEEK_END) == 0? ftell (file): -1;
    int rc = 0;
    if (size < 8 || fseek (file, 0, SEEK_SET))
        rc = za_error ("%s: %ld bytes: too short for a safetensors file", self->path, size);
    else
    if (!(self->file = malloc ((size_t) size)))
        rc = za_error ("%s: out of memory reading %ld bytes", self->path, size);
    else
    if (fread (self->file, 1, (size_t) size, file) != (size_t) size)
        rc = za_error ("%s: cannot read: %s", self->path, strerror (errno));
    self->size = rc? 0: (size_t) size;
    fclose (file);
    return rc;
}

//  One tensor's header entry. 0, or -1 with an error.
static int
s_parse_tensor (za_safetensors_t *self, const char *name, json_t *entry, uint64_t data_size,
                const uint8_t *data, s_tensor_t *tensor)
{
    const char *dtype = json_string_value (json_object_get (entry, "dtype"));
    json_t *shape = json_object_get (entry, "shape");
    json_t *offsets = json_object_get (entry, "data_offsets");
    if (!dtype || strlen (dtype) >= DTYPE_CHARS || !s_dtype_bytes (dtype)
    ||  !json_is_array (shape) || json_array_size (shape) > ZA_SAFETENSORS_MAX_DIMS
    ||  !json_is_array (offsets) || json_array_size (offsets) != 2)
        return za_error ("%s: tensor '%s': a known dtype, a shape of at most %d dims and "
                         "two data_offsets are needed", self->path, name,
                         ZA_SAFETENSORS_MAX_DIMS);
    json_int_t begin = json_integer_value (json_array_get (offsets, 0));
    json_int_t end = json_integer_value (json_array_get (offsets, 1));
    uint64_t elements = 1;
    tensor->ndim = (int) json_array_size (shape);
    for (int d = 0; d < tensor->ndim; d++) {
        json_int_t dim = json_integer_value (json_array_get (shape, (size_t) d));
        if (!json_is_integer (json_array_get (shape, (size_t) d)) || dim < 0
        ||  __builtin_mul_overflow (elements, (uint64_t) dim, &elements))
            return za_error ("%s: tensor '%s': a bad shape", self->path, name);
        tensor->shape [d] = dim;
    }
    uint64_t bytes;
    if (__builtin_mul_overflow (elements, (uint64_t) s_dtype_bytes (dtype), &bytes)
    ||  begin < 0 || end < begin || (uint64_t) end > data_size
    ||  (uint64_t) (end - begin) != bytes)
        return za_error ("%s: tensor '%s': data_offsets [%lld, %lld] do not hold its %llu "
                         "bytes within the file's %llu", self->path, name, (long long) begin,
                         (long long) end, (unsigned long long) bytes,
                         (unsigned long long) data_size);
    snprintf (tensor->dtype, sizeof tensor->dtype, "%s", dtype);
    tensor->element_size = s_element_size (dtype);
    tensor->data = data + begin;
    tensor->bytes = bytes;
    tensor->name = strdup (name);
    return tensor->name? 0: za_error ("out of memory");
}

za_safetensors_t *
za_safetensors_load (const char *path)
{
    za_safetensors_t *self = calloc (1, sizeof *self);
    if (!self || !(self->path = strdup (path))) {
        free (self);
        za_error ("out of memory");
        return NULL;
    }
    if (s_read_file (self)) {
        za_safetensors_destroy (&self);
        return NULL;
    }
    uint64_t header_size = 0;
    for (int i = 7; i >= 0; i--)
        header_size = header_size << 8 | self->file [i];
    json_error_t error;
    json_t *header = NULL;
    int rc = 0;
    if (header_size > HEADER_MAX_BYTES || header_size > self->size - 8)
        rc = za_error ("%s: a header of %llu bytes in a file of %zu: not a safetensors file",
                       path, (unsigned long long) header_size, self->size);
    else
    if (!(header = json_loadb ((const char *) self->file + 8, (size_t) header_size, 0, &error))
    ||  !json_is_object (header))
        rc = za_error ("%s: the header is not a JSON object (%s): not a safetensors file",
                       path, header? "another value": error.text);
    size_t entries = header? json_object_size (header): 0;
    if (!rc && !(self->tensors = calloc (entries + 1, sizeof *self->tensors)))
        rc = za_error ("out of memory");
    const uint8_t *data = self->file + 8 + header_size;
    uint64_t data_size = self->size - 8 - header_size;
    const char *key;
    json_t *value;
    json_object_foreach (header, key, value) {
        if (rc)
            break;
        if (!strcmp (key, "__metadata__"))
            self->meta = json_incref (value);
        else
        if ((rc = s_parse_tensor (self, key, value, data_size, data,
                                  &self->tensors [self->count])) == 0)
            self->count++;
    }
    //  A zactor checkpoint says its data's CRC32: check it.
    const char *crc = za_safetensors_meta (self, "crc32");
    if (!rc && crc) {
        uLong computed = crc32 (0L, Z_NULL, 0);
        for (uint64_t at = 0; at < data_size; at += 1u << 30) {
            uint64_t piece = data_size - at < (1u << 30)? data_size - at: 1u << 30;
            computed = crc32 (computed, data + at, (uInt) piece);
        }
        if (strtoul (crc, NULL, 16) != computed)
            rc = za_error ("%s: the data's CRC32 is not the header's %s: the file is corrupt",
                           path, crc);
    }
    json_decref (header);
    if (rc)
        za_safetensors_destroy (&self);
    return self;
}

void
za_safetensors_destroy (za_safetensors_t **self_p)
{
    za_safetensors_t *self = *self_p;
    if (!self)
        return;
    for (int i = 0; i < self->count; i++) {
        free (self->tensors [i].name);
        free (self->tensors [i].owned);
    }
    free (self->tensors);
    json_decref (self->meta);
    free (self->file);
    free (self->path);
    free (self);
    *self_p = NULL;
}

int
za_safetensors_count (const za_safetensors_t *self)
{
    return self->count;
}

const char *
za_safetensors_name (const za_safetensors_t *self, int index)
{
    return self->tensors [index].name;
}

int
za_safetensors_find (const za_safetensors_t *self, const char *name)
{
    for (int i = 0; i < self->count; i++)
        if (!strcmp (self->tensors [i].name, name))
            return i;
    return -1;
}

const char *
za_safetensors_dtype (const za_safetensors_t *self, int index)
{
    return self->tensors [index].dtype;
}

int
za_safetensors_shape (const za_safetensors_t *self, int index, int64_t *shape)
{
    const s_tensor_t *tensor = &self->tensors [index];
    memcpy (shape, tensor->shape, sizeof tensor->shape);
    return tensor->ndim;
}

//  IEEE half to float.
static float
s_half (uint16_t h)
{
    uint32_t sign = (uint32_t) (h >> 15) << 31, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    uint32_t bits;
    if (exponent == 0x1f)
        bits = sign | 0x7f800000u | mantissa << 13;         //  inf, nan
    else
    if (exponent)
        bits = sign | (exponent + 112) << 23 | mantissa << 13;
    else
    if (mantissa) {                                          //  subnormal
        int shift = 0;
        while (!(mantissa & 0x400))
            mantissa <<= 1, shift++;
        bits = sign | (uint32_t) (113 - shift) << 23 | (mantissa & 0x3ff) << 13;
    }
    else
        bits = sign;
    float value;
    memcpy (&value, &bits, sizeof value);
    return value;
}

int
za_safetensors_floats (const za_safetensors_t *self, int index, float *out)
{
    const s_tensor_t *tensor = &self->tensors [index];
    uint64_t count = tensor->element_size? tensor->bytes / (uint64_t) tensor->element_size: 0;
    const uint8_t *p = tensor->data;
    if (!strcmp (tensor->dtype, "F32"))
        memcpy (out, p, tensor->bytes);
    else
    if (!strcmp (tensor->dtype, "F64"))
        for (uint64_t i = 0; i < count; i++) {
            double value;
            memcpy (&value, p + i * 8, sizeof value);
            out [i] = (float) value;
        }
    else
    if (!strcmp (tensor->dtype, "F16") || !strcmp (tensor->dtype, "BF16")) {
        int brain = tensor->dtype [0] == 'B';
        for (uint64_t i = 0; i < count; i++) {
            uint16_t half = (uint16_t) (p [2 * i] | p [2 * i + 1] << 8);
            if (brain) {
                uint32_t bits = (uint32_t) half << 16;
                memcpy (&out [i], &bits, sizeof bits);
            }
            else
                out [i] = s_half (half);
        }
    }
    else
        return za_error ("%s: tensor '%s' is %s, not a float", self->path, tensor->name,
                         tensor->dtype);
    return 0;
}

const char *
za_safetensors_meta (const za_safetensors_t *self, const char *key)
{
    return self && self->meta? json_string_value (json_object_get (self->meta, key)): NULL;
}

za_safetensors_t *
za_safetensors_new (const char *path)
{
    za_safetensors_t *self = calloc (1, sizeof *self);
    if (!self || !(self->path = strdup (path)) || !(self->meta = json_object ())) {
        za_safetensors_destroy (&self);
        za_error ("out of memory");
    }
    return self;
}

int
za_safetensors_add (za_safetensors_t *self, const char *name, const char *dtype, int ndim,
                    const int64_t *shape, const void *data, uint64_t bytes)
{
    uint64_t elements = 1, want;
    if (strlen (dtype) >= DTYPE_CHARS || !s_dtype_bytes (dtype)
    ||  ndim < 0 || ndim > ZA_SAFETENSORS_MAX_DIMS)
        return za_error ("%s: tensor '%s': dtype %s with %d dims cannot be held", self->path,
                         name, dtype, ndim);
    for (int d = 0; d < ndim; d++)
        if (shape [d] < 0 || __builtin_mul_overflow (elements, (uint64_t) shape [d], &elements))
            return za_error ("%s: tensor '%s': a bad shape", self->path, name);
    if (__builtin_mul_overflow (elements, (uint64_t) s_dtype_bytes (dtype), &want)
    ||  want != bytes)
        return za_error ("%s: tensor '%s': %llu bytes of data for a shape of %llu %s values",
                         self->path, name, (unsigned long long) bytes,
                         (unsigned long long) elements, dtype);
    if (za_safetensors_find (self, name) >= 0)
        return za_error ("%s: two tensors are named '%s'", self->path, name);
    s_tensor_t *grown = realloc (self->tensors, (size_t) (self->count + 1) * sizeof *grown);
    if (!grown)
        return za_error ("out of memory");
    self->tensors = grown;
    s_tensor_t *tensor = &self->tensors [self->count];
    memset (tensor, 0, sizeof *tensor);
    tensor->owned = malloc (bytes? bytes: 1);
    tensor->name = strdup (name);
    if (!tensor->owned || !tensor->name) {
        free (tensor->owned), free (tensor->name);
        return za_error ("out of memory");
    }
    if (bytes)
        memcpy (tensor->owned, data, bytes);
    snprintf (tensor->dtype, sizeof tensor->dtype, "%s", dtype);
    tensor->element_size = s_element_size (dtype);
    tensor->ndim = ndim;
    if (ndim)
        memcpy (tensor->shape, shape, (size_t) ndim * sizeof *shape);
    tensor->data = tensor->owned;
    tensor->bytes = bytes;
    self->count++;
    return 0;
}

int
za_safetensors_set_meta (za_safetensors_t *self, const char *key, const char *value)
{
    if (!self->meta && !(self->meta = json_object ()))
        return za_error ("out of memory");
    //  Kept as given: a file's bytes need not be UTF-8.
    return json_object_set_new_nocheck (self->meta, key, json_stringn_nocheck (value,
                                                                               strlen (value)))
         ? za_error ("out of memory"): 0;
}
