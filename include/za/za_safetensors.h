/*  za_safetensors.h: a safetensors file from anywhere (PyTorch's, Keras's,
    zactor's own checkpoints) read as float32 tensors: F32, F16, BF16 and F64
    converted, I64 and the rest listed but not converted. The header is
    checked as the format says (JSON, offsets within the data, each tensor's
    bytes its shape's); a zactor checkpoint's CRC32 is checked too.

    File: 8 bytes little-endian u64 N, N bytes of JSON header
      {"__metadata__": {...strings}, "NAME": {"dtype": "F32", "shape": [..],
       "data_offsets": [begin, end]}, ...}, then the data.                  */
#ifndef ZA_SAFETENSORS_H_INCLUDED
#define ZA_SAFETENSORS_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZA_SAFETENSORS_MAX_DIMS 8

typedef struct za_safetensors_t za_safetensors_t;

//  Reads and checks the file. NULL with an error naming it and the defect.
za_safetensors_t *za_safetensors_load (const char *path);
void za_safetensors_destroy (za_safetensors_t **self_p);

int za_safetensors_count (const za_safetensors_t *self);
const char *za_safetensors_name (const za_safetensors_t *self, int index);
//  The tensor named `name`: its index, or -1.
int za_safetensors_find (const za_safetensors_t *self, const char *name);
//  Its dtype as the file says ("F32", "BF16", ...).
const char *za_safetensors_dtype (const za_safetensors_t *self, int index);
//  Its shape into shape [ZA_SAFETENSORS_MAX_DIMS]; returns ndim.
int za_safetensors_shape (const za_safetensors_t *self, int index, int64_t *shape);
//  Its elements as floats into out (as many as its shape's product). 0, or
//  -1 with an error: a dtype that is not a float.
int za_safetensors_floats (const za_safetensors_t *self, int index, float *out);
//  A metadata string, or NULL.
const char *za_safetensors_meta (const za_safetensors_t *self, const char *key);

//  A set of tensors read from another format (an ONNX file's initializers,
//  za_onnx.h), named `path` in messages: empty, then filled by add (dtype a
//  safetensors one, data `bytes` long and copied; 0, or -1 with an error: an
//  unknown dtype, bytes not the shape's, a name taken) and set_meta.
za_safetensors_t *za_safetensors_new (const char *path);
int za_safetensors_add (za_safetensors_t *self, const char *name, const char *dtype, int ndim,
                        const int64_t *shape, const void *data, uint64_t bytes);
int za_safetensors_set_meta (za_safetensors_t *self, const char *key, const char *value);

#ifdef __cplusplus
}
#endif
#endif
