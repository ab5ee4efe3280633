/*  fuzz_image.c: libFuzzer harness for the image decoder (za_image.c over
    libjpeg-turbo and libspng) as a loading thread uses it: one decoder for
    the whole run, fed a sequence each input: the fuzzed bytes, then a fixed
    valid JPEG, then a fixed valid PNG. The fuzzed bytes may fail (one
    error) but never crash, and the valid ones must decode to their known
    pixels after whatever came before: a decoder that one bad file leaves
    in a bad state (a corrupt Huffman table once failed every later JPEG of
    its thread) aborts. Build with -DZA_FUZZ=ON (clang); run fuzz/run.sh
    fuzz_image. fuzz/replay.c runs the corpus in ctest.                    */
#include "za/za_image.h"
#include "za/za_util.h"

#include <spng.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#define JPEG_SIDE 24                    //  the valid JPEG: 24 x 24 RGB, 4:2:0
#define PNG_HEIGHT 12                   //  the valid PNG: 12 x 20 gray
#define PNG_WIDTH 20
#define FUZZ_SIDE 16                    //  what the fuzzed bytes are decoded to

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

typedef struct {
    uint8_t *bytes;
    size_t size;
    za_image_spec_t spec;
    uint8_t *pixels;                    //  what they must decode to
} s_valid_t;

static za_image_decoder_t *s_decoder;  //  the loading thread's, for the whole run
static s_valid_t s_jpeg, s_png;

static void
s_die (const char *what)
{
    fprintf (stderr, "fuzz_image: %s\n", what);
    abort ();
}

//  A pattern with edges and gradients, the same every run.
static void
s_pattern (uint8_t *pixels, int height, int width, int channels)
{
    for (int y = 0; y < height; y++)
        for (int x = 0; x < width; x++)
            for (int k = 0; k < channels; k++)
                pixels [(y * width + x) * channels + k]
                    = (uint8_t) (((x * 37 + y * 11 + k * 80) ^ (x > width / 2? 0xa0: 0)) & 0xff);
}

static void
s_make_jpeg (void)
{
    uint8_t rgb [JPEG_SIDE * JPEG_SIDE * 3];
    s_pattern (rgb, JPEG_SIDE, JPEG_SIDE, 3);
    tjhandle jpeg = tjInitCompress ();
    unsigned char *data = NULL;
    unsigned long size = 0;
    if (!jpeg || tjCompress2 (jpeg, rgb, JPEG_SIDE, 0, JPEG_SIDE, TJPF_RGB, &data, &size,
                              TJSAMP_420, 90, 0))
        s_die ("cannot write the valid JPEG");
    s_jpeg.bytes = malloc (size);
    memcpy (s_jpeg.bytes, data, size);
    s_jpeg.size = size;
    tjFree (data);
    tjDestroy (jpeg);
    //  Its pixels: what a decoder that never saw anything else makes.
    s_jpeg.spec = (za_image_spec_t) {.height = JPEG_SIDE, .width = JPEG_SIDE, .channels = 3};
    s_jpeg.pixels = malloc (JPEG_SIDE * JPEG_SIDE * 3);
    za_image_decoder_t *fresh = za_image_decoder_new ();
    if (!fresh || za_image_decode (fresh, s_jpeg.bytes, s_jpeg.size, &s_jpeg.spec,
                                   s_jpeg.pixels))
        s_die ("the valid JPEG does not decode");
    za_image_decoder_destroy (&fresh);
}

static void
s_make_png (void)
{
    static uint8_t gray [PNG_HEIGHT * PNG_WIDTH];
    s_pattern (gray, PNG_HEIGHT, PNG_WIDTH, 1);
    spng_ctx *png = spng_ctx_new (SPNG_CTX_ENCODER);
    struct spng_ihdr ihdr = {.width = PNG_WIDTH, .height = PNG_HEIGHT, .bit_depth = 8,
                             .color_type = SPNG_COLOR_TYPE_GRAYSCALE};
    int error = 0;
    if (!png || spng_set_option (png, SPNG_ENCODE_TO_BUFFER, 1) || spng_set_ihdr (png, &ihdr)
        || spng_encode_image (png, gray, sizeof gray, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE)
        || !(s_png.bytes = spng_get_png_buffer (png, &s_png.size, &error)) || error)
        s_die ("cannot write the valid PNG");
    spng_ctx_free (png);
    //  Lossless, and decoded at its own size: its pixels are the pattern's.
    s_png.spec = (za_image_spec_t) {.height = PNG_HEIGHT, .width = PNG_WIDTH, .channels = 1};
    s_png.pixels = gray;
}

//  The valid image decodes, by the run's decoder, to its known pixels.
static void
s_expect_valid (const s_valid_t *valid, const char *name)
{
    size_t bytes = (size_t) valid->spec.height * valid->spec.width * valid->spec.channels;
    uint8_t *out = malloc (bytes);
    if (za_image_decode (s_decoder, valid->bytes, valid->size, &valid->spec, out)) {
        fprintf (stderr, "fuzz_image: the valid %s after this input: %s\n", name,
                 za_image_error (s_decoder));
        abort ();
    }
    if (memcmp (out, valid->pixels, bytes))
        s_die (name [0] == 'J'? "the valid JPEG decodes to other pixels after this input"
                              : "the valid PNG decodes to other pixels after this input");
    free (out);
}

static void
s_cleanup (void)
{
    za_image_decoder_destroy (&s_decoder);
    free (s_jpeg.bytes);
    free (s_jpeg.pixels);
    free (s_png.bytes);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    if (!s_decoder) {
        s_make_jpeg ();
        s_make_png ();
        if (!(s_decoder = za_image_decoder_new ()))
            s_die ("out of memory");
        atexit (s_cleanup);
    }
    //  The input's size picks gray or RGB and a crop, so every path runs.
    za_image_spec_t spec = {.height = FUZZ_SIDE, .width = FUZZ_SIDE,
                            .channels = size & 1? 1: 3, .crop_to_aspect_ratio = (size >> 1) & 1,
                            .resize = (size >> 2) & 1? ZA_RESIZE_BILINEAR: ZA_RESIZE_AREA};
    uint8_t out [FUZZ_SIDE * FUZZ_SIDE * 3];
    (void) za_image_decode (s_decoder, data, size, &spec, out);
    s_expect_valid (&s_jpeg, "JPEG");
    s_expect_valid (&s_png, "PNG");
    return 0;
}
