/*  za_image.h: one image file decoded to the pixels a model takes: JPEG with
    libjpeg-turbo (decoded at the smallest of its 1/8 .. 1 scales that stays
    at or above the target size, so a 512x496 X-ray is decoded at 256x248 for
    224x224), PNG with libspng (any bit depth, gray, palette, alpha), then
    resized to height x width with channels 1 (gray) or 3 (RGB).             */
#ifndef ZA_IMAGE_H_INCLUDED
#define ZA_IMAGE_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZA_IMAGE_SIDE_MAX 16384         //  the largest --image-size
#define ZA_IMAGE_ERROR_MAX 512

//  How the decoded image is brought to the target size.
typedef enum {
    //  Each output pixel is the mean of the input area it covers (antialiased,
    //  as PIL's BOX and TensorFlow's "area"); upscaling an axis is bilinear.
    ZA_RESIZE_AREA = 0,
    //  Bilinear between the four nearest input pixels (Keras's default for
    //  image_dataset_from_directory; aliases when it shrinks much).
    ZA_RESIZE_BILINEAR
} za_resize_t;

typedef struct {
    int height, width;                  //  the size a model takes
    int channels;                       //  1: gray (ITU-R 601 luma), 3: RGB
    za_resize_t resize;
    int crop_to_aspect_ratio;           //  1: the largest centred crop of the
                                        //  target's aspect ratio is resized
                                        //  (Keras's crop_to_aspect_ratio)
} za_image_spec_t;

//  Names "area" and "bilinear" (-1: neither).
int za_resize_parse (const char *name);
const char *za_resize_name (za_resize_t resize);

//  A decoder with its buffers, for one thread at a time.
typedef struct za_image_decoder_t za_image_decoder_t;

//  NULL with an error when out of memory.
za_image_decoder_t *za_image_decoder_new (void);
void za_image_decoder_destroy (za_image_decoder_t **self_p);

//  Decodes a JPEG or PNG (told by its first bytes, whatever the file's name)
//  into out [height * width * channels] bytes, row by row. Returns 0, or -1
//  and za_image_error says what is wrong: not a JPEG or PNG, truncated,
//  corrupt (libjpeg-turbo's or libspng's own words), too large (more than
//  2^28 pixels as decoded). A JPEG that decodes with a warning (a truncated
//  one is filled with gray) is refused, unless the warning is of bytes
//  after its last scan, as TensorFlow takes it.
//  Nothing is logged: the caller says it (once per file, in a loop).
int za_image_decode (za_image_decoder_t *self, const uint8_t *bytes, size_t size,
                     const za_image_spec_t *spec, uint8_t *out);
//  Reads the file at path and decodes it; the error names the file.
int za_image_load (za_image_decoder_t *self, const char *path, const za_image_spec_t *spec,
                   uint8_t *out);
//  Why the last za_image_decode or za_image_load failed.
const char *za_image_error (const za_image_decoder_t *self);

//  Writes pixels [height, width, channels] (1 or 3) as a baseline JPEG of
//  `quality` (1..100) or a PNG: for tests and tools. 0 or -1 with an error.
int za_image_write_jpeg (const char *path, const uint8_t *pixels, int height, int width,
                         int channels, int quality);
int za_image_write_png (const char *path, const uint8_t *pixels, int height, int width,
                        int channels);

#ifdef __cplusplus
}
#endif
#endif
