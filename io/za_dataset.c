/*  za_dataset.c: a labelled data set in memory, as every source (IDX files,
    caller arrays) fills it and the input pipeline (za_input.c) reads it.    */
#include "za/za_dataset.h"
#include "za/za_util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

//  The shape and the labels every dataset has; NULL (with an error) when
//  memory runs out.
static za_dataset_t *
s_dataset_shaped (int64_t count, int height, int width, int channels,
                  int64_t feature_size)
{
    za_dataset_t *self = calloc (1, sizeof *self);
    if (self)
        self->labels = za_alloc ((size_t) (count > 0? count: 1) * sizeof (int32_t));
    if (!self || !self->labels) {
        za_error ("out of memory allocating a dataset");
        free (self);
        return NULL;
    }
    self->count = count;
    self->height = height;
    self->width = width;
    self->channels = channels;
    self->feature_size = feature_size;
    return self;
}

//  Allocates an empty dataset of the given shape, its examples as floats, or
//  as bytes when `as_bytes`; NULL (with an error) when the sizes overflow or
//  memory runs out.
za_dataset_t *
za_dataset_new (int64_t count, int height, int width, int channels, int as_bytes)
{
    int64_t feature_size, features;
    if (__builtin_mul_overflow ((int64_t) height, (int64_t) width, &feature_size)
    ||  __builtin_mul_overflow (feature_size, (int64_t) channels, &feature_size)
    ||  __builtin_mul_overflow (feature_size, count, &features)
    ||  features > (int64_t) (PTRDIFF_MAX / sizeof (float))) {
        za_error ("dataset of %lld examples of %dx%dx%d is too large",
                  (long long) count, height, width, channels);
        return NULL;
    }
    za_dataset_t *self = s_dataset_shaped (count, height, width, channels, feature_size);
    if (!self)
        return NULL;
    if (as_bytes)
        self->pixels = za_alloc ((size_t) (features > 0? features: 1));
    else
        self->features = za_alloc ((size_t) features * sizeof (float));
    if (!self->features && !self->pixels) {
        za_error ("out of memory allocating a dataset");
        za_dataset_destroy (&self);
    }
    return self;
}

za_dataset_t *
za_dataset_new_loaded (int64_t count, int height, int width, int channels,
                       const za_dataset_loader_t *loader, void *source)
{
    int64_t feature_size;
    za_dataset_t *self = NULL;
    if (count < 0 || height <= 0 || width <= 0 || channels <= 0
    ||  __builtin_mul_overflow ((int64_t) height, (int64_t) width, &feature_size)
    ||  __builtin_mul_overflow (feature_size, (int64_t) channels, &feature_size))
        za_error ("dataset of %lld examples of %dx%dx%d cannot be made",
                  (long long) count, height, width, channels);
    else
        self = s_dataset_shaped (count, height, width, channels, feature_size);
    if (!self) {
        loader->destroy (&source);
        return NULL;
    }
    self->loader = loader;
    self->source = source;
    return self;
}

void
za_dataset_count_classes (za_dataset_t *self)
{
    int32_t max_label = 0;
    for (int64_t i = 0; i < self->count; i++)
        if (self->labels [i] > max_label)
            max_label = self->labels [i];
    self->n_classes = max_label + 1;
}


za_dataset_t *
za_dataset_from_arrays (const float *features, const int32_t *labels,
                        int64_t count, int height, int width, int channels)
{
    if (!features || !labels) {
        za_error ("za_dataset_from_arrays: features and labels are required");
        return NULL;
    }
    if (count <= 0 || height <= 0 || width <= 0 || channels <= 0) {
        za_error ("za_dataset_from_arrays: count %lld and shape %dx%dx%d must be > 0",
                  (long long) count, height, width, channels);
        return NULL;
    }
    for (int64_t i = 0; i < count; i++)
        if (labels [i] < 0) {
            za_error ("za_dataset_from_arrays: label %lld is %d (must be >= 0)",
                      (long long) i, labels [i]);
            return NULL;
        }
    za_dataset_t *self = za_dataset_new (count, height, width, channels, 0);
    if (!self)
        return NULL;
    memcpy (self->features, features,
            (size_t) (count * self->feature_size) * sizeof (float));
    memcpy (self->labels, labels, (size_t) count * sizeof (int32_t));
    za_dataset_count_classes (self);
    return self;
}

void
za_dataset_destroy (za_dataset_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    za_dataset_t *self = *self_p;
    za_free (self->features);
    za_free (self->pixels);
    za_free (self->labels);
    if (self->loader)
        self->loader->destroy (&self->source);
    free (self);
    *self_p = NULL;
}

int64_t
za_dataset_listed (const za_dataset_t *self)
{
    return self && self->loader? self->count: 0;
}

int64_t
za_dataset_bad (const za_dataset_t *self)
{
    return self && self->loader && self->loader->bad? self->loader->bad (self->source): 0;
}
