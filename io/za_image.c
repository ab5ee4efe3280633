/*  za_image.c: JPEG (TurboJPEG, decode-time scaling) and PNG (libspng) to a
    model's pixels, with a separable resize whose taps are planned per axis. */
#include "za/za_image.h"
#include "za/za_util.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <spng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#define FILE_MAX_BYTES (256u << 20)     //  an image file larger is refused
#define JPEG_SCANS_BYTES_MAX (1024u << 20)  //  what a JPEG of several scans may take,
#define JPEG_SCANS_BYTES_FREE (192u << 20)  //  past this much only from a file of at
#define JPEG_SCANS_PER_BYTE 4096            //  least 1/4096 of it (a 25-byte header
                                            //  may not ask for 284 MiB)
#define PIXELS_MAX (1u << 28)           //  an image decoded larger is refused (a 16384
                                        //  square, 768 MiB in RGB; TensorFlow's JPEG
                                        //  limit is twice that)
#define JPEG_BLOCK_BYTES 128            //  a block's 64 coefficients, 2 bytes each
#define JPEG_COMPONENTS_MAX 4
#define PNG_DEFLATE_RATIO_MAX 1100      //  deflate makes at most some 1032 bytes of one
#define LUMA_R 0.299f                   //  ITU-R BT.601, as libjpeg's gray
#define LUMA_G 0.587f
#define LUMA_B 0.114f

struct za_image_decoder_t {
    tjhandle jpeg;                      //  NULL after a failure, until the next JPEG
    uint8_t *file;                      //  the file's bytes
    size_t file_capacity;
    uint8_t *decoded;                   //  the image at its decoded size
    size_t decoded_capacity;
    float *rows;                        //  the horizontal pass: [in height, out width, c]
    size_t rows_capacity;
    int *first;                         //  taps: per output index of both axes
    int *count;
    float *weights;
    size_t first_capacity, count_capacity, weights_capacity;
    char error [ZA_IMAGE_ERROR_MAX];    //  why the last decode failed
};

//  Keeps why a decode failed (za_image_error). Returns -1.
static int
s_fail (za_image_decoder_t *self, const char *fmt, ...) __attribute__ ((format (printf, 2, 3)));

static int
s_fail (za_image_decoder_t *self, const char *fmt, ...)
{
    va_list args;
    va_start (args, fmt);
    vsnprintf (self->error, sizeof self->error, fmt, args);
    va_end (args);
    return -1;
}

int
za_resize_parse (const char *name)
{
    return !name? -1: strcmp (name, "area") == 0? ZA_RESIZE_AREA
         : strcmp (name, "bilinear") == 0? ZA_RESIZE_BILINEAR: -1;
}

const char *
za_resize_name (za_resize_t resize)
{
    return resize == ZA_RESIZE_BILINEAR? "bilinear": "area";
}

za_image_decoder_t *
za_image_decoder_new (void)
{
    za_image_decoder_t *self = (za_image_decoder_t *) calloc (1, sizeof *self);
    if (!self || !(self->jpeg = tjInitDecompress ())) {
        za_error ("image decoder: out of memory");
        free (self);
        return NULL;
    }
    return self;
}

void
za_image_decoder_destroy (za_image_decoder_t **self_p)
{
    za_image_decoder_t *self = *self_p;
    if (!self)
        return;
    if (self->jpeg)
        tjDestroy (self->jpeg);
    free (self->file);
    free (self->decoded);
    free (self->rows);
    free (self->first);
    free (self->count);
    free (self->weights);
    free (self);
    *self_p = NULL;
}

//  Grows *buffer to hold `bytes`. 0 or -1 with an error.
static int
s_reserve (za_image_decoder_t *self, void **buffer, size_t *capacity, size_t bytes)
{
    if (bytes <= *capacity)
        return 0;
    void *grown = realloc (*buffer, bytes);
    if (!grown)
        return s_fail (self, "out of memory for %zu bytes", bytes);
    *buffer = grown;
    *capacity = bytes;
    return 0;
}

// ---------------------------------------------------------------------------
//  Resize: per axis, each output index reads `count` inputs from `first`
//  with weights that sum to 1.

//  Plans one axis: `in` input pixels from `offset` (a crop) onto `out`.
static void
s_plan_axis (int in, double offset, double span, int out, za_resize_t resize, int *first,
             int *count, float *weights, int max_taps)
{
    double scale = span / out;
    for (int o = 0; o < out; o++) {
        float *w = weights + (size_t) o * max_taps;
        if (resize == ZA_RESIZE_AREA && scale >= 1.0) {
            double x0 = offset + o * scale, x1 = x0 + scale;
            int i0 = (int) floor (x0), i1 = (int) ceil (x1);
            if (i1 > in)
                i1 = in;
            first [o] = i0;
            count [o] = i1 - i0;
            for (int i = i0; i < i1; i++) {
                double lo = i > x0? i: x0, hi = i + 1 < x1? i + 1: x1;
                w [i - i0] = (float) ((hi - lo) / scale);
            }
        }
        else {
            double center = offset + (o + 0.5) * scale - 0.5;
            int i0 = (int) floor (center);
            float f = (float) (center - i0);
            if (i0 < 0)
                i0 = 0, f = 0;
            if (i0 >= in - 1)
                i0 = in - 1, f = 0;
            first [o] = i0;
            count [o] = f > 0? 2: 1;
            w [0] = 1.0f - f;
            w [1] = f;
        }
    }
}

//  src [h, w, c] -> out [spec height, width, c], cropping to the target's
//  aspect ratio when asked.
static int
s_resize (za_image_decoder_t *self, const uint8_t *src, int h, int w, int c,
          const za_image_spec_t *spec, uint8_t *out)
{
    int oh = spec->height, ow = spec->width;
    double span_h = h, span_w = w, off_h = 0, off_w = 0;
    if (spec->crop_to_aspect_ratio) {
        //  Keras's smart_resize: whole pixels, the box's start rounded down.
        int crop_h = (int) ((double) w * oh / ow), crop_w = (int) ((double) h * ow / oh);
        crop_h = crop_h < 1? 1: crop_h > h? h: crop_h;
        crop_w = crop_w < 1? 1: crop_w > w? w: crop_w;
        span_h = crop_h, off_h = (h - crop_h) / 2;
        span_w = crop_w, off_w = (w - crop_w) / 2;
    }
    int taps_h = (int) ceil (span_h / oh) + 2, taps_w = (int) ceil (span_w / ow) + 2;
    int taps = taps_h > taps_w? taps_h: taps_w;
    size_t outs = (size_t) oh + ow;
    if (s_reserve (self, (void **) &self->first, &self->first_capacity, outs * sizeof (int))
        || s_reserve (self, (void **) &self->count, &self->count_capacity, outs * sizeof (int))
        || s_reserve (self, (void **) &self->weights, &self->weights_capacity,
                      outs * taps * sizeof (float))
        || s_reserve (self, (void **) &self->rows, &self->rows_capacity,
                      ((size_t) h + 1) * ow * c * sizeof (float)))
        return -1;
    int *first_w = self->first, *first_h = self->first + ow;
    int *count_w = self->count, *count_h = self->count + ow;
    float *weights_w = self->weights, *weights_h = self->weights + (size_t) ow * taps;
    s_plan_axis (w, off_w, span_w, ow, spec->resize, first_w, count_w, weights_w, taps);
    s_plan_axis (h, off_h, span_h, oh, spec->resize, first_h, count_h, weights_h, taps);
    //  Horizontal pass over the rows the vertical one reads.
    int row_lo = first_h [0], row_hi = first_h [oh - 1] + count_h [oh - 1];
    for (int y = row_lo; y < row_hi; y++) {
        const uint8_t *in = src + (size_t) y * w * c;
        float *row = self->rows + (size_t) y * ow * c;
        if (c == 1)                     //  gray: no channel loop in the way
            for (int x = 0; x < ow; x++) {
                const float *wt = weights_w + (size_t) x * taps;
                const uint8_t *at = in + first_w [x];
                float sum = 0;
                for (int t = 0; t < count_w [x]; t++)
                    sum += wt [t] * at [t];
                row [x] = sum;
            }
        else
            for (int x = 0; x < ow; x++) {
                const float *wt = weights_w + (size_t) x * taps;
                for (int k = 0; k < c; k++) {
                    float sum = 0;
                    for (int t = 0; t < count_w [x]; t++)
                        sum += wt [t] * in [(size_t) (first_w [x] + t) * c + k];
                    row [(size_t) x * c + k] = sum;
                }
            }
    }
    //  Vertical pass, a whole row at a time (the inner loop vectorises).
    size_t line_size = (size_t) ow * c;
    float *sum = self->rows + (size_t) h * line_size;
    for (int y = 0; y < oh; y++) {
        const float *wt = weights_h + (size_t) y * taps;
        const float *row = self->rows + (size_t) first_h [y] * line_size;
        for (size_t i = 0; i < line_size; i++)
            sum [i] = wt [0] * row [i];
        for (int t = 1; t < count_h [y]; t++) {
            row += line_size;
            for (size_t i = 0; i < line_size; i++)
                sum [i] += wt [t] * row [i];
        }
        uint8_t *line = out + (size_t) y * line_size;
        for (size_t i = 0; i < line_size; i++) {
            int v = (int) (sum [i] + 0.5f);
            line [i] = (uint8_t) (v < 0? 0: v > 255? 255: v);
        }
    }
    return 0;
}

// ---------------------------------------------------------------------------
//  Decoders

//  The smallest of TurboJPEG's scales (at most 1) that keeps the image (or
//  its crop) at or above the target on both axes.
static tjscalingfactor
s_jpeg_scale (int w, int h, const za_image_spec_t *spec)
{
    double need_w = spec->width, need_h = spec->height;
    if (spec->crop_to_aspect_ratio) {
        //  The crop keeps the whole of one axis; the other is cut to the ratio.
        double target = (double) spec->width / spec->height;
        if ((double) w / h > target)
            need_w = spec->height * ((double) w / h);
        else
            need_h = spec->width / ((double) w / h);
    }
    int count = 0;
    tjscalingfactor *factors = tjGetScalingFactors (&count);
    tjscalingfactor best = {1, 1};
    for (int i = 0; factors && i < count; i++) {
        tjscalingfactor f = factors [i];
        if (f.num > f.denom || TJSCALED (w, f) < need_w || TJSCALED (h, f) < need_h)
            continue;
        if (TJSCALED (w, f) < TJSCALED (w, best))
            best = f;
    }
    return best;
}

//  A JPEG that failed leaves libjpeg-turbo 2.1's TurboJPEG handle as the
//  failure left it, and TurboJPEG has no reset: after a corrupt Huffman or
//  quantisation table every later JPEG of the handle failed with the same
//  words; after a file cut before its first scan (no SOS marker) the next
//  one's header "succeeded" with no size written (read as 32618x-1178605888).
//  So a failure frees the handle, and the next JPEG takes a new one.
//  The next marker from `at` as libjpeg finds it (next_marker in jdmarker.c):
//  past any byte that is not 0xFF (garbage, which it warns of), past 0xFF
//  fill bytes, and past 0xFF 0x00 (not a marker). The offset of the 0xFF
//  before the marker's code, or size when there is none.
static size_t
s_jpeg_next_marker (const uint8_t *bytes, size_t size, size_t at)
{
    while (at + 1 < size) {
        while (at < size && bytes [at] != 0xff)
            at++;
        while (at + 1 < size && bytes [at + 1] == 0xff)
            at++;
        if (at + 1 >= size)
            break;
        if (bytes [at + 1] != 0x00)
            return at;
        at += 2;
    }
    return size;
}

//  What libjpeg keeps to decode a JPEG of several scans (progressive, or
//  components in scans of their own): every block's coefficients of the
//  whole image, whatever the scale it is decoded at; 0 for a JPEG of one
//  scan, which it decodes a row of blocks at a time. Read from the frame
//  (SOF) and the first scan's (SOS) markers, found as libjpeg finds them,
//  with the frame's size into *w, *h (0: none found). A 25-byte progressive
//  file declaring 14888x10014 made libjpeg allocate 298 MB for one component.
static size_t
s_jpeg_scans_bytes (const uint8_t *bytes, size_t size, int *w, int *h)
{
    int progressive = 0, comps = 0, hmax = 1, vmax = 1;
    int hs [JPEG_COMPONENTS_MAX] = {1, 1, 1, 1}, vs [JPEG_COMPONENTS_MAX] = {1, 1, 1, 1};
    *w = *h = 0;
    for (size_t at = s_jpeg_next_marker (bytes, size, 2); at + 1 < size;
         at = s_jpeg_next_marker (bytes, size, at)) {
        uint8_t marker = bytes [at + 1];
        //  Markers without a length: RSTn, SOI, EOI, TEM.
        if ((marker >= 0xd0 && marker <= 0xd9) || marker == 0x01) {
            at += 2;
            continue;
        }
        if (at + 4 > size)
            break;
        size_t length = (size_t) bytes [at + 2] << 8 | bytes [at + 3];
        int frame = marker >= 0xc0 && marker <= 0xcf && marker != 0xc4 && marker != 0xc8
                 && marker != 0xcc;
        if (frame && at + 10 <= size) {
            progressive = (marker & 0x03) == 0x02;      //  SOF2, SOF6, SOF10, SOF14
            *h = bytes [at + 5] << 8 | bytes [at + 6];
            *w = bytes [at + 7] << 8 | bytes [at + 8];
            comps = bytes [at + 9];
            for (int c = 0; c < comps && c < JPEG_COMPONENTS_MAX && at + 11 + 3 * c < size;
                 c++) {
                hs [c] = bytes [at + 11 + 3 * c] >> 4;
                vs [c] = bytes [at + 11 + 3 * c] & 0x0f;
                hmax = hs [c] > hmax? hs [c]: hmax;
                vmax = vs [c] > vmax? vs [c]: vmax;
            }
        }
        if (marker == 0xda) {           //  the first scan: all components in it?
            if (!progressive && at + 4 < size && bytes [at + 4] >= comps)
                return 0;
            break;
        }
        at += 2 + length;
    }
    size_t total = 0;
    for (int c = 0; c < comps; c++) {
        int k = c < JPEG_COMPONENTS_MAX? c: 0;
        size_t cw = ((size_t) *w * (hs [k]? hs [k]: 1) + hmax - 1) / hmax;
        size_t ch = ((size_t) *h * (vs [k]? vs [k]: 1) + vmax - 1) / vmax;
        total += (cw + 7) / 8 * ((ch + 7) / 8) * JPEG_BLOCK_BYTES;
    }
    return total;
}

//  Gray from RGB: ITU-R BT.601's luma, rounded (a gray pixel's value kept).
static inline uint8_t
s_luma (int r, int g, int b)
{
    return (uint8_t) (LUMA_R * r + LUMA_G * g + LUMA_B * b + 0.5f);
}

//  1 when the JPEG has Adobe's APP14 marker before its first scan: its CMYK
//  is stored inverted (255: no ink), as Photoshop writes it.
static int
s_jpeg_adobe (const uint8_t *bytes, size_t size)
{
    for (size_t at = s_jpeg_next_marker (bytes, size, 2); at + 4 <= size;
         at = s_jpeg_next_marker (bytes, size, at)) {
        uint8_t marker = bytes [at + 1];
        if ((marker >= 0xd0 && marker <= 0xd9) || marker == 0x01) {
            at += 2;
            continue;
        }
        size_t length = (size_t) bytes [at + 2] << 8 | bytes [at + 3];
        if (marker == 0xda)
            break;
        if (marker == 0xee && length >= 7 && at + 9 <= size
            && !memcmp (bytes + at + 4, "Adobe", 5))
            return 1;
        at += 2 + length;
    }
    return 0;
}

//  A CMYK (or YCCK) JPEG's pixels [n, 4] to RGB or gray [n, channels], in
//  place, as TensorFlow's decode_jpeg makes them (the ink off the white,
//  weighted by the black; Adobe's values inverted).
static void
s_cmyk_to (uint8_t *pixels, size_t n, int channels, int adobe)
{
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = pixels + 4 * i;
        int c = p [0], m = p [1], y = p [2], k = p [3];
        if (!adobe)
            c = 255 - c, m = 255 - m, y = 255 - y, k = 255 - k;
        int r = c * k / 255, g = m * k / 255, b = y * k / 255;
        if (channels == 1)
            pixels [i] = s_luma (r, g, b);
        else {
            uint8_t *q = pixels + 3 * i;
            q [0] = (uint8_t) r, q [1] = (uint8_t) g, q [2] = (uint8_t) b;
        }
    }
}

//  A copy of a JPEG whose JFIF marker (APP0 "JFIF\0", first) has a version
//  libjpeg does not know (2.01: a warning it stops at), made 1.02 as
//  TensorFlow's libjpeg reads it past the warning; NULL for any other
//  (caller frees).
static uint8_t *
s_jpeg_known_jfif (const uint8_t *bytes, size_t size)
{
    size_t at = s_jpeg_next_marker (bytes, size, 2);
    if (at + 11 > size || bytes [at + 1] != 0xe0 || memcmp (bytes + at + 4, "JFIF", 5)
        || bytes [at + 9] == 1)
        return NULL;
    uint8_t *copy = (uint8_t *) malloc (size);
    if (copy) {
        memcpy (copy, bytes, size);
        copy [at + 9] = 1;
        copy [at + 10] = 2;
    }
    return copy;
}

//  A decode stopped at a warning (a truncated file is filled with gray)
//  is an error, but for bytes between the last scan and the end (EOI):
//  every scan decoded with no warning before it, and TensorFlow takes the
//  image (the "extraneous bytes before marker 0xd9" of many photo sets): it
//  is decoded again past them. 0 when so decoded, else -1 (said).
static int
s_decode_warned (za_image_decoder_t *self, const uint8_t *bytes, size_t size, int sw, int sh,
                 int format)
{
    const char *why = tjGetErrorStr2 (self->jpeg);
    if (tjGetErrorCode (self->jpeg) != TJERR_WARNING || !why
        || !strstr (why, "extraneous bytes before marker 0xd9"))
        return s_fail (self, "a corrupt or truncated JPEG: %s", why);
    if (tjDecompress2 (self->jpeg, bytes, (unsigned long) size, self->decoded, sw, 0, sh,
                       format, 0) && tjGetErrorCode (self->jpeg) != TJERR_WARNING)
        return s_fail (self, "a corrupt JPEG: %s", tjGetErrorStr2 (self->jpeg));
    return 0;
}

static int
s_decode_jpeg (za_image_decoder_t *self, const uint8_t *bytes, size_t size,
               const za_image_spec_t *spec, uint8_t *out)
{
    if (!self->jpeg && !(self->jpeg = tjInitDecompress ()))
        return s_fail (self, "JPEG: out of memory");
    //  A stream of tables alone (no frame) also "succeeds" with no size.
    int w = 0, h = 0, subsampling, colorspace;
    if (tjDecompressHeader3 (self->jpeg, bytes, (unsigned long) size, &w, &h, &subsampling,
                             &colorspace))
        return s_fail (self, "not a readable JPEG: %s", tjGetErrorStr2 (self->jpeg));
    if (w <= 0 || h <= 0)
        return s_fail (self, "a JPEG with no image in it (tables only)");
    //  Its frame must be the one libjpeg read: else what it would keep is
    //  not known, and a file read two ways is a damaged one.
    int frame_w, frame_h;
    size_t scans_bytes = s_jpeg_scans_bytes (bytes, size, &frame_w, &frame_h);
    if (frame_w != w || frame_h != h)
        return s_fail (self, "a JPEG whose frame marker zactor finds at another place than "
                       "libjpeg (%dx%d, not %dx%d): damaged", frame_w, frame_h, w, h);
    if (scans_bytes > JPEG_SCANS_BYTES_MAX
        || (scans_bytes > JPEG_SCANS_BYTES_FREE && scans_bytes / JPEG_SCANS_PER_BYTE > size))
        return s_fail (self, "a progressive (or multi-scan) JPEG of %dx%d: libjpeg would keep "
                       "%zu MiB of it to decode it (at most %u MiB, or %u MiB from a file of "
                       "%zu bytes)", w, h, scans_bytes >> 20, JPEG_SCANS_BYTES_MAX >> 20,
                       JPEG_SCANS_BYTES_FREE >> 20, size);
    tjscalingfactor scale = s_jpeg_scale (w, h, spec);
    int sw = TJSCALED (w, scale), sh = TJSCALED (h, scale), c = spec->channels;
    if ((uint64_t) sw * sh > PIXELS_MAX)
        return s_fail (self, "a JPEG of %dx%d, decoded at %dx%d: more than %u pixels", w, h,
                       sw, sh, PIXELS_MAX);
    //  CMYK (Photoshop's, some of ImageNet's): decoded as it is, then made RGB.
    int cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
    if (s_reserve (self, (void **) &self->decoded, &self->decoded_capacity,
                   (size_t) sw * sh * (cmyk? 4: c)))
        return -1;
    int format = cmyk? TJPF_CMYK: c == 1? TJPF_GRAY: TJPF_RGB;
    if (tjDecompress2 (self->jpeg, bytes, (unsigned long) size, self->decoded, sw, 0, sh, format,
                       TJFLAG_STOPONWARNING)
        && s_decode_warned (self, bytes, size, sw, sh, format))
        return -1;
    if (cmyk)
        s_cmyk_to (self->decoded, (size_t) sw * sh, c, s_jpeg_adobe (bytes, size));
    return s_resize (self, self->decoded, sh, sw, c, spec, out);
}

static int
s_decode_png (za_image_decoder_t *self, const uint8_t *bytes, size_t size,
              const za_image_spec_t *spec, uint8_t *out)
{
    spng_ctx *png = spng_ctx_new (0);
    if (!png)
        return s_fail (self, "PNG: out of memory");
    struct spng_ihdr ihdr;
    size_t rgb_size = 0;
    int rc = spng_set_png_buffer (png, bytes, size);
    if (!rc)
        rc = spng_get_ihdr (png, &ihdr);
    if (!rc && (uint64_t) ihdr.width * ihdr.height > PIXELS_MAX) {
        spng_ctx_free (png);
        return s_fail (self, "a PNG of %ux%u: more than %u pixels", ihdr.width, ihdr.height,
                       PIXELS_MAX);
    }
    //  Before its pixels are allocated: a file too small to hold them, even
    //  at deflate's best, is cut short (a 33-byte header declared 8468x11020).
    static const int channels_of [7] = {1, 0, 3, 1, 2, 0, 4};   //  by color type
    size_t row = rc? 0: 1 + ((size_t) ihdr.width * (ihdr.color_type <= 6
                                                    ? channels_of [ihdr.color_type]: 4)
                             * ihdr.bit_depth + 7) / 8;
    if (!rc && (size_t) ihdr.height * row / PNG_DEFLATE_RATIO_MAX > size) {
        spng_ctx_free (png);
        return s_fail (self, "a PNG of %ux%u in %zu bytes: too few to hold it (cut short)",
                       ihdr.width, ihdr.height, size);
    }
    if (!rc)
        rc = spng_decoded_image_size (png, SPNG_FMT_RGB8, &rgb_size);
    if (!rc && s_reserve (self, (void **) &self->decoded, &self->decoded_capacity, rgb_size)) {
        spng_ctx_free (png);
        return -1;
    }
    if (!rc)
        rc = spng_decode_image (png, self->decoded, rgb_size, SPNG_FMT_RGB8, SPNG_DECODE_TRNS);
    //  The image's last IDAT chunk's CRC is checked only when the chunks after
    //  it are read, to IEND (libpng, as TensorFlow's decode_png and PIL, also
    //  refuses a bad CRC there, and a file without its IEND).
    if (!rc)
        rc = spng_decode_chunks (png);
    spng_ctx_free (png);
    if (rc)
        return s_fail (self, "a corrupt or truncated PNG: %s",
                       rc == SPNG_IO_EOF? "the file ends early": spng_strerror (rc));
    int w = (int) ihdr.width, h = (int) ihdr.height;
    if (spec->channels == 1) {
        //  Gray in place: for a gray PNG (r = g = b) each value is kept exactly.
        size_t pixels = (size_t) w * h;
        for (size_t i = 0; i < pixels; i++) {
            const uint8_t *p = self->decoded + i * 3;
            self->decoded [i] = s_luma (p [0], p [1], p [2]);
        }
    }
    return s_resize (self, self->decoded, h, w, spec->channels, spec, out);
}

int
za_image_decode (za_image_decoder_t *self, const uint8_t *bytes, size_t size,
                 const za_image_spec_t *spec, uint8_t *out)
{
    static const uint8_t png_magic [8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (spec->height <= 0 || spec->width <= 0
        || (spec->channels != 1 && spec->channels != 3))
        return s_fail (self, "image: cannot make %dx%dx%d pixels", spec->height, spec->width,
                         spec->channels);
    if (size >= 3 && bytes [0] == 0xff && bytes [1] == 0xd8 && bytes [2] == 0xff) {
        uint8_t *known = s_jpeg_known_jfif (bytes, size);
        int rc = s_decode_jpeg (self, known? known: bytes, size, spec, out);
        free (known);
        if (rc && self->jpeg) {         //  the next JPEG takes a new handle
            tjDestroy (self->jpeg);
            self->jpeg = NULL;
        }
        return rc;
    }
    if (size >= 8 && memcmp (bytes, png_magic, 8) == 0)
        return s_decode_png (self, bytes, size, spec, out);
    return s_fail (self, "not a JPEG or PNG (its first bytes are neither's)");
}

int
za_image_load (za_image_decoder_t *self, const char *path, const za_image_spec_t *spec,
               uint8_t *out)
{
    FILE *file = fopen (path, "rb");
    if (!file)
        return s_fail (self, "%s: cannot open: %s", path, strerror (errno));
    long size = fseek (file, 0, SEEK_END) == 0? ftell (file): -1;
    int rc = -1;
    if (size < 0 || (unsigned long) size > FILE_MAX_BYTES || fseek (file, 0, SEEK_SET))
        s_fail (self, "%s: %ld bytes (an image file has at most %u)", path, size,
                FILE_MAX_BYTES);
    else
    if (s_reserve (self, (void **) &self->file, &self->file_capacity, (size_t) size + 1) == 0) {
        if (fread (self->file, 1, (size_t) size, file) != (size_t) size)
            s_fail (self, "%s: cannot read: %s", path, strerror (errno));
        else
        if (za_image_decode (self, self->file, (size_t) size, spec, out)) {
            char why [ZA_IMAGE_ERROR_MAX];
            snprintf (why, sizeof why, "%s", self->error);
            s_fail (self, "%s: %s", path, why);
        }
        else
            rc = 0;
    }
    fclose (file);
    return rc;
}

const char *
za_image_error (const za_image_decoder_t *self)
{
    return self->error;
}

// ---------------------------------------------------------------------------
//  Encoders

int
za_image_write_jpeg (const char *path, const uint8_t *pixels, int height, int width,
                     int channels, int quality)
{
    tjhandle jpeg = tjInitCompress ();
    if (!jpeg)
        return za_error ("JPEG: out of memory");
    unsigned char *data = NULL;
    unsigned long size = 0;
    int rc = tjCompress2 (jpeg, pixels, width, 0, height, channels == 1? TJPF_GRAY: TJPF_RGB,
                          &data, &size, channels == 1? TJSAMP_GRAY: TJSAMP_420, quality,
                          TJFLAG_ACCURATEDCT);
    if (rc)
        za_error ("%s: JPEG: %s", path, tjGetErrorStr2 (jpeg));
    FILE *file = rc? NULL: fopen (path, "wb");
    if (!rc && (!file || fwrite (data, 1, size, file) != size))
        rc = za_error ("%s: cannot write: %s", path, strerror (errno));
    if (file && fclose (file) && !rc)
        rc = za_error ("%s: cannot write: %s", path, strerror (errno));
    tjFree (data);
    tjDestroy (jpeg);
    return rc? -1: 0;
}

int
za_image_write_png (const char *path, const uint8_t *pixels, int height, int width,
                    int channels)
{
    FILE *file = fopen (path, "wb");
    if (!file)
        return za_error ("%s: cannot write: %s", path, strerror (errno));
    spng_ctx *png = spng_ctx_new (SPNG_CTX_ENCODER);
    struct spng_ihdr ihdr = {
        .width = (uint32_t) width, .height = (uint32_t) height, .bit_depth = 8,
        .color_type = channels == 1? SPNG_COLOR_TYPE_GRAYSCALE: SPNG_COLOR_TYPE_TRUECOLOR,
    };
    size_t size = (size_t) height * width * channels;
    int rc = png? 0: SPNG_EMEM;
    if (!rc)
        rc = spng_set_png_file (png, file);
    if (!rc)
        rc = spng_set_ihdr (png, &ihdr);
    if (!rc)
        rc = spng_encode_image (png, pixels, size, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
    spng_ctx_free (png);
    if (fclose (file) && !rc)
        return za_error ("%s: cannot write: %s", path, strerror (errno));
    return rc? za_error ("%s: PNG: %s", path, spng_strerror (rc)): 0;
}
