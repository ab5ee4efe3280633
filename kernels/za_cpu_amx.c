/*  za_cpu_amx.c: a bf16 convolution's backward on AMX's tiles.

    oneDNN 2.6's bf16 backward runs the seed CNN's second layer (13x13x32
    in, 64 filters of 3x3) at about a third of the rate its forward reaches
    on the same tiles, and an im2col matrix for a matmul leaves L2
    (docs/precision.md). Here both gradients are sums of tile products over
    compact bf16 copies, read in place. A tile product C [16 x 16] +=
    A [16 x 32] B [32 x 16] sums over 32 terms, B in AMX's pair layout (row
    k holds terms 2k and 2k + 1 of each column side by side). Each step
    loads two A and two B tiles and makes four products (eight tiles, all
    AMX has).

    The kernel's gradient:
    dkernel [kh][kw][ic][oc] += sum over n, oh, ow of
        in [n][oh + kh][ow + kw][ic] * dout [n][oh][ow][oc]
    The 32 terms are 16 examples times two neighbouring outputs in a row
    (ow and ow + 1: a row's outputs go by pairs, the last pair of an odd
    row padded with a zero gradient). C's rows are 16 input channels of one
    tap (kh, kw), its columns 16 filters: a block of dkernel itself, loaded,
    summed into and stored back.
    - A, the input: copy X [example block][y][x][ic][16 examples][2], where
      [2] is pixels x and x + 1. A's 16 rows (channels) are 64 contiguous
      bytes each: one tile load at any tap and output pair.
    - B, the output's gradient: copy D [example block][oh][pair][16
      examples][oc][2], [2] outputs 2 pair and 2 pair + 1; a row of B is one
      example's 16 filters, two outputs each.
    Padding (SAME) and examples past n are zeros in the copies.

    The input's gradient:
    din [n][y][x][ic] = sum over kh, kw, oc of
        dout [n][y + pad_top - kh][x + pad_left - kw][oc] * kernel [kh][kw][ic][oc]
    The output's gradient goes into a frame of zeros (below) in which each
    tap is one offset: C is 16 frame pixels in a row by 16 channels, A 16
    frame pixels (32 filters each), B the tap's filter pairs.

    The copies are made with AVX-512 (16 x 16 transposes; rounding to
    nearest even, subnormals to zero as the tiles take them) in the
    caller's scratch.                                                        */
#include "za_cpu_amx.h"
#include "za_cpu_dnnl.h"
#include "za/za_tensor.h"

#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

//  The kernel's gradient sweeps X and D once per tap and block of 32 x 32
//  channels: they must stay in a core's L2 (2 MiB on AMX's Xeons). Beyond,
//  the sweeps go to memory (VGG16's 32x32x128 layer: 13 MB, its backward 3x
//  oneDNN's time) and oneDNN's primitive takes the geometry.
#define S_SWEPT_MAX ((size_t) 2 << 20)
#define S_EXAMPLES 16                   //  a tile's 32 terms: 16 examples x 2 outputs
#define S_BLOCK 32                      //  channels and filters a step covers (2 tiles)
#define S_TILE 16                       //  a tile's rows

//  Linux gives a process AMX's tile data only when it asks (arch_prctl).
#define S_ARCH_REQ_XCOMP_PERM 0x1023
#define S_XFEATURE_XTILEDATA 18

#define S_AMX __attribute__ ((target ("avx512f,avx512bw,avx512bf16,amx-tile,amx-bf16")))

// ---------------------------------------------------------------------------
//  Whether the tiles run here

static int s_permitted;
static pthread_once_t s_permit_once = PTHREAD_ONCE_INIT;

//  Once a process: ZA_AMX (read at the first call, not at every layer's)
//  and Linux's permission.
static void
s_permit (void)
{
    const char *off = getenv ("ZA_AMX");
    s_permitted = !(off && strcmp (off, "0") == 0)
               && syscall (SYS_arch_prctl, S_ARCH_REQ_XCOMP_PERM, S_XFEATURE_XTILEDATA) == 0;
}

static int
s_on (void)
{
    if (!za_cpu_dnnl_on () || !za_cpu_dnnl_amx () || !za_cpu_has (ZA_ISA_AVX512_BF16))
        return 0;
    pthread_once (&s_permit_once, s_permit);
    return s_permitted;
}

// ---------------------------------------------------------------------------
//  The copies' geometry

typedef struct {
    int blocks;                         //  of S_EXAMPLES examples
    int pairs;                          //  output pairs in a row: ceil (ow / 2)
    int rows, cols;                     //  of X: padded input rows, pair starts
    int zr, zc;                         //  the frame's zero rows above, columns left
    int hf, wf;                         //  the frame's rows and columns an example
    int groups;                         //  of 32 frame pixels (the input's gradient)
    size_t x_elems, d_elems, row_elems; //  bf16 values of X, D and X's row buffer
    size_t f_elems, k_elems;            //  of the frame and the kernel's pairs
} s_plan_t;

static void
s_plan (s_plan_t *p, const za_conv2d_dims_t *d)
{
    p->blocks = (d->n + S_EXAMPLES - 1) / S_EXAMPLES;
    p->pairs = (d->ow + 1) / 2;
    p->rows = d->oh + d->kh - 1;
    p->cols = 2 * p->pairs + d->kw - 2;
    p->zr = d->kh - 1 - d->pad_top;
    p->zc = d->kw - 1 - d->pad_left;
    p->hf = d->h + d->pad_top > p->zr + d->oh? d->h + d->pad_top: p->zr + d->oh;
    p->wf = d->w + d->pad_left > p->zc + d->ow? d->w + d->pad_left: p->zc + d->ow;
    p->groups = (int) (((size_t) d->n * p->hf * p->wf + 2 * S_TILE - 1) / (2 * S_TILE));
    p->x_elems = (size_t) p->blocks * p->rows * p->cols * d->c * 2 * S_EXAMPLES;
    p->d_elems = (size_t) p->blocks * d->oh * p->pairs * S_EXAMPLES * d->oc * 2;
    p->row_elems = (size_t) (p->cols + 1) * d->c * S_EXAMPLES;
    //  The last group's taps read past the last example: zeros.
    p->f_elems = ((size_t) p->groups * 2 * S_TILE + (size_t) (d->kh - 1) * p->wf + d->kw)
               * d->oc;
    p->k_elems = (size_t) d->kh * d->kw * d->c * d->oc;
}

size_t
za_cpu_amx_conv2d_scratch (const za_conv2d_dims_t *d)
{
    if (d->stride != 1 || d->c % S_BLOCK || d->oc % S_BLOCK || d->n < 1
        || d->pad_top > d->kh - 1 || d->pad_left > d->kw - 1)
        return 0;
    s_plan_t p;
    s_plan (&p, d);
    if ((p.x_elems + p.d_elems) * sizeof (uint16_t) > S_SWEPT_MAX || !s_on ())
        return 0;
    return (p.x_elems + p.d_elems + p.row_elems + p.f_elems + p.k_elems) * sizeof (uint16_t)
         + (size_t) 2 * S_TILE * S_BLOCK * sizeof (float);
}

// ---------------------------------------------------------------------------
//  The copies

//  r [i] becomes column i of the 16 x 16 matrix whose rows r held.
static inline S_AMX void
s_transpose16 (__m512 r [16])
{
    __m512 t [16];
    for (int i = 0; i < 16; i += 2) {
        t [i] = _mm512_unpacklo_ps (r [i], r [i + 1]);
        t [i + 1] = _mm512_unpackhi_ps (r [i], r [i + 1]);
    }
    for (int g = 0; g < 16; g += 4) {
        __m512d a = _mm512_castps_pd (t [g]), b = _mm512_castps_pd (t [g + 1]);
        __m512d c = _mm512_castps_pd (t [g + 2]), e = _mm512_castps_pd (t [g + 3]);
        r [g] = _mm512_castpd_ps (_mm512_unpacklo_pd (a, c));
        r [g + 1] = _mm512_castpd_ps (_mm512_unpackhi_pd (a, c));
        r [g + 2] = _mm512_castpd_ps (_mm512_unpacklo_pd (b, e));
        r [g + 3] = _mm512_castpd_ps (_mm512_unpackhi_pd (b, e));
    }
    for (int k = 0; k < 4; k++) {
        t [k] = _mm512_shuffle_f32x4 (r [k], r [4 + k], 0x88);
        t [4 + k] = _mm512_shuffle_f32x4 (r [k], r [4 + k], 0xdd);
        t [8 + k] = _mm512_shuffle_f32x4 (r [8 + k], r [12 + k], 0x88);
        t [12 + k] = _mm512_shuffle_f32x4 (r [8 + k], r [12 + k], 0xdd);
    }
    for (int k = 0; k < 8; k++) {
        r [k] = _mm512_shuffle_f32x4 (t [k], t [8 + k], 0x88);
        r [8 + k] = _mm512_shuffle_f32x4 (t [k], t [8 + k], 0xdd);
    }
}

//  a [0..15] and b [0..15] (bf16) as 32 values a0 b0 a1 b1 ...
static inline S_AMX __m512i
s_interleave (__m256i a, __m256i b)
{
    const __m512i order = _mm512_set_epi16 (31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10,
                                            25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4,
                                            19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16 (order,
                                     _mm512_inserti64x4 (_mm512_castsi256_si512 (a), b, 1));
}

static inline S_AMX __m256i
s_bf16 (__m512 x)
{
    return (__m256i) _mm512_cvtneps_pbh (x);
}

//  X for one example block and padded row y: `row` takes the row's pixels
//  transposed (pixel x: c channels x 16 examples), then X's pair starts.
static S_AMX void
s_copy_input_row (const za_conv2d_dims_t *d, const s_plan_t *p, const float *in, int block,
                  int y, uint16_t *row, uint16_t *x_out)
{
    const int c = d->c, iy = y - d->pad_top;
    const size_t plane = (size_t) d->h * d->w * c;
    for (int x = 0; x <= p->cols; x++) {
        uint16_t *t = row + (size_t) x * c * S_EXAMPLES;
        const int ix = x - d->pad_left;
        if (iy < 0 || iy >= d->h || ix < 0 || ix >= d->w) {
            memset (t, 0, (size_t) c * S_EXAMPLES * sizeof (uint16_t));
            continue;
        }
        const float *at = in + ((size_t) block * S_EXAMPLES * d->h * d->w
                                + (size_t) iy * d->w + ix) * c;
        const int examples = d->n - block * S_EXAMPLES;
        for (int c0 = 0; c0 < c; c0 += 16) {
            __m512 r [16];
            for (int e = 0; e < S_EXAMPLES; e++)
                r [e] = e < examples? _mm512_loadu_ps (at + e * plane + c0): _mm512_setzero_ps ();
            s_transpose16 (r);
            for (int k = 0; k < 16; k++)
                _mm256_storeu_si256 ((__m256i *) (t + (size_t) (c0 + k) * S_EXAMPLES),
                                     s_bf16 (r [k]));
        }
    }
    for (int x = 0; x < p->cols; x++) {
        const uint16_t *a = row + (size_t) x * c * S_EXAMPLES;
        const uint16_t *b = a + (size_t) c * S_EXAMPLES;
        uint16_t *out = x_out + (size_t) x * c * 2 * S_EXAMPLES;
        for (int k = 0; k < c; k++)
            _mm512_storeu_si512 (out + (size_t) k * 2 * S_EXAMPLES,
                s_interleave (_mm256_loadu_si256 ((const __m256i *) (a + k * S_EXAMPLES)),
                              _mm256_loadu_si256 ((const __m256i *) (b + k * S_EXAMPLES))));
    }
}

//  The output's gradient in bf16, in a frame of zeros: hf rows of wf
//  pixels an example, dout's pixel (oh, ow) at (zr + oh, zc + ow), and
//  zeros after the last example.
static S_AMX void
s_copy_frame (const za_conv2d_dims_t *d, const s_plan_t *p, const float *dout, uint16_t *f)
{
    const int oc = d->oc;
    uint16_t *out = f;
    for (int n = 0; n < d->n; n++)
        for (int r = 0; r < p->hf; r++)
            for (int col = 0; col < p->wf; col++, out += oc) {
                const int oh = r - p->zr, ow = col - p->zc;
                if (oh < 0 || oh >= d->oh || ow < 0 || ow >= d->ow) {
                    memset (out, 0, (size_t) oc * sizeof (uint16_t));
                    continue;
                }
                const float *from = dout + (((size_t) n * d->oh + oh) * d->ow + ow) * oc;
                for (int o = 0; o < oc; o += 32)
                    _mm512_storeu_si512 (out + o, (__m512i) _mm512_cvtne2ps_pbh (
                        _mm512_loadu_ps (from + o + 16), _mm512_loadu_ps (from + o)));
            }
    memset (out, 0, (p->f_elems - (size_t) (out - f)) * sizeof (uint16_t));
}

//  D from the frame: each example's outputs 2 pair and 2 pair + 1, filters
//  interleaved (the second zero past a row's end, and past the last example).
static S_AMX void
s_copy_dout (const za_conv2d_dims_t *d, const s_plan_t *p, const uint16_t *f, uint16_t *d_out)
{
    const int oc = d->oc;
    const __m256i zero = _mm256_setzero_si256 ();
    const size_t row = (size_t) oc * 2;                 //  one example's, in D
    for (int n = 0; n < p->blocks * S_EXAMPLES; n++)
        for (int oh = 0; oh < d->oh; oh++) {
            uint16_t *out = d_out + (((size_t) (n / S_EXAMPLES) * d->oh + oh) * p->pairs
                                     * S_EXAMPLES + n % S_EXAMPLES) * row;
            const int here = n < d->n;
            const uint16_t *a = here? f + (((size_t) n * p->hf + p->zr + oh) * p->wf + p->zc) * oc
                                    : f;
            for (int ow = 0; ow < 2 * p->pairs; ow += 2) {
                const int next = here && ow + 1 < d->ow;
                for (int o = 0; o < oc; o += 16) {
                    __m256i va = here? _mm256_loadu_si256 ((const __m256i *) (a + o)): zero;
                    __m256i vb = next? _mm256_loadu_si256 ((const __m256i *) (a + oc + o))
                                     : zero;
                    _mm512_storeu_si512 (out + 2 * o, s_interleave (va, vb));
                }
                a += 2 * oc;
                out += S_EXAMPLES * row;
            }
        }
}

//  The kernel's filters in pairs for B: pairs [tap][oc / 2][ic][2], from
//  HWIO (a row of filters is pairs already: 16 x 16 transposes of them).
static S_AMX void
s_copy_kernel (const za_conv2d_dims_t *d, const float *kernel, uint16_t *pairs)
{
    const int c = d->c, oc = d->oc;
    for (int tap = 0; tap < d->kh * d->kw; tap++)
        for (int c0 = 0; c0 < c; c0 += 16)
            for (int o0 = 0; o0 < oc; o0 += 32) {
                __m512 r [16];
                for (int i = 0; i < 16; i++) {
                    const float *k = kernel + ((size_t) tap * c + c0 + i) * oc + o0;
                    r [i] = _mm512_castsi512_ps ((__m512i) _mm512_cvtne2ps_pbh (
                        _mm512_loadu_ps (k + 16), _mm512_loadu_ps (k)));
                }
                s_transpose16 (r);
                for (int i = 0; i < 16; i++)
                    _mm512_storeu_ps ((float *) (pairs + (((size_t) tap * oc / 2 + o0 / 2 + i)
                                                          * c + c0) * 2), r [i]);
            }
}

// ---------------------------------------------------------------------------
//  The products

typedef struct __attribute__ ((packed, aligned (64))) {
    uint8_t palette;
    uint8_t start_row;
    uint8_t reserved [14];
    uint16_t colsb [16];
    uint8_t rows [16];
} s_tile_config_t;

//  Eight tiles of 16 rows of 64 bytes: C 0-3, A 4-5, B 6-7.
static S_AMX void
s_configure (void)
{
    s_tile_config_t config;
    memset (&config, 0, sizeof config);
    config.palette = 1;
    for (int t = 0; t < 8; t++) {
        config.rows [t] = S_TILE;
        config.colsb [t] = 64;
    }
    _tile_loadconfig (&config);
}

#define S_INLINE static inline __attribute__ ((always_inline)) S_AMX

//  One step: A tiles 4 and 5 (at a and a + a_next, rows a_stride bytes
//  apart), B tiles 6 and 7 (at b and the next 16 columns of its pairs),
//  and the four products into C tiles 0-3.
S_INLINE void
s_step (const uint16_t *a, long a_stride, size_t a_next, const uint16_t *b, long b_stride)
{
    _tile_loadd (4, a, a_stride);
    _tile_loadd (5, a + a_next, a_stride);
    _tile_loadd (6, b, b_stride);
    _tile_loadd (7, b + 2 * S_TILE, b_stride);
    _tile_dpbf16ps (0, 4, 6);
    _tile_dpbf16ps (1, 4, 7);
    _tile_dpbf16ps (2, 5, 6);
    _tile_dpbf16ps (3, 5, 7);
}

//  C tiles 0-3 as a 32 x 32 block of floats at sum, rows `row` floats
//  apart: tile 0 top left, 1 top right, 2 bottom left, 3 bottom right.
S_INLINE void
s_block_load (const float *sum, size_t row)
{
    const long stride = (long) (row * sizeof (float));
    _tile_loadd (0, sum, stride);
    _tile_loadd (1, sum + S_TILE, stride);
    _tile_loadd (2, sum + S_TILE * row, stride);
    _tile_loadd (3, sum + S_TILE * row + S_TILE, stride);
}

S_INLINE void
s_block_store (float *sum, size_t row)
{
    const long stride = (long) (row * sizeof (float));
    _tile_stored (0, sum, stride);
    _tile_stored (1, sum + S_TILE, stride);
    _tile_stored (2, sum + S_TILE * row, stride);
    _tile_stored (3, sum + S_TILE * row + S_TILE, stride);
}

//  din = the input's gradient: a 32-pixel group of the frame (its outputs
//  at the frame's layout) times 32 channels is four C tiles; a tap moves
//  the group's pixels by a fixed offset in the frame, so A is 16 frame
//  pixels in a row (32 filters each), B the tap's filter pairs. Where the
//  frame is din's own layout (VALID: hf = h, wf = w) C goes to din
//  directly, else through `temp` to the pixels that are din's.
static S_AMX void
s_din_products (const za_conv2d_dims_t *d, const s_plan_t *p, const uint16_t *f,
                const uint16_t *pairs, float *din, float *temp)
{
    s_configure ();
    const int c = d->c, oc = d->oc;
    const long a_stride = (long) oc * sizeof (uint16_t);
    const long b_stride = (long) c * 2 * sizeof (uint16_t);
    const size_t pixels = (size_t) d->n * d->h * d->w, frame = (size_t) p->hf * p->wf;
    const int direct = p->hf == d->h && p->wf == d->w;
    for (int g = 0; g < p->groups; g++) {
        const size_t v0 = (size_t) g * 2 * S_TILE;
        for (int c0 = 0; c0 < c; c0 += S_BLOCK) {
            _tile_zero (0);
            _tile_zero (1);
            _tile_zero (2);
            _tile_zero (3);
            for (int kh = 0; kh < d->kh; kh++)
                for (int kw = 0; kw < d->kw; kw++) {
                    const size_t at = v0 + (size_t) (d->kh - 1 - kh) * p->wf + d->kw - 1 - kw;
                    const int tap = kh * d->kw + kw;
                    for (int o0 = 0; o0 < oc; o0 += S_BLOCK) {
                        const uint16_t *a = f + at * oc + o0;
                        const uint16_t *b = pairs + (((size_t) tap * oc / 2 + o0 / 2) * c + c0)
                                                    * 2;
                        s_step (a, a_stride, (size_t) S_TILE * oc, b, b_stride);
                    }
                }
            if (direct && v0 + 2 * S_TILE <= pixels) {
                s_block_store (din + v0 * c + c0, (size_t) c);
                continue;
            }
            s_block_store (temp, S_BLOCK);
            __asm__ volatile ("" ::: "memory");
            for (int i = 0; i < 2 * S_TILE; i++) {
                const size_t v = v0 + i, n = v / frame;
                const int y = (int) (v % frame / p->wf), x = (int) (v % p->wf);
                if (n < (size_t) d->n && y < d->h && x < d->w)
                    memcpy (din + ((n * d->h + y) * d->w + x) * c + c0, temp + i * S_BLOCK,
                            S_BLOCK * sizeof (float));
            }
        }
    }
    _tile_release ();
}

//  dkernel += the kernel's gradient: for each tap, 32 channels by 32
//  filters in four C tiles, over every example block, row and output pair.
static S_AMX void
s_dkernel_products (const za_conv2d_dims_t *d, const s_plan_t *p, const uint16_t *x,
                    const uint16_t *dd, float *dkernel)
{
    s_configure ();
    const int c = d->c, oc = d->oc;
    const long b_stride = (long) oc * 2 * sizeof (uint16_t);
    const size_t x_pixel = (size_t) c * 2 * S_EXAMPLES;
    const size_t x_row = (size_t) p->cols * x_pixel;
    const size_t x_block = (size_t) p->rows * x_row;
    const size_t d_pair = (size_t) S_EXAMPLES * oc * 2;
    for (int kh = 0; kh < d->kh; kh++)
        for (int kw = 0; kw < d->kw; kw++)
            for (int c0 = 0; c0 < c; c0 += S_BLOCK)
                for (int o0 = 0; o0 < oc; o0 += S_BLOCK) {
                    float *sum = dkernel + ((size_t) (kh * d->kw + kw) * c + c0) * oc + o0;
                    s_block_load (sum, (size_t) oc);
                    for (int block = 0; block < p->blocks; block++)
                        for (int oh = 0; oh < d->oh; oh++) {
                            const uint16_t *a = x + block * x_block + (size_t) (oh + kh) * x_row
                                              + (size_t) kw * x_pixel + (size_t) c0 * 2 * S_EXAMPLES;
                            const uint16_t *b = dd + ((size_t) block * d->oh + oh) * p->pairs
                                              * d_pair + (size_t) o0 * 2;
                            for (int pair = 0; pair < p->pairs; pair++) {
                                s_step (a, 64, S_TILE * 2 * S_EXAMPLES, b, b_stride);
                                a += 2 * x_pixel;
                                b += d_pair;
                            }
                        }
                    s_block_store (sum, (size_t) oc);
                }
    _tile_release ();
}

void
za_cpu_amx_conv2d_backward (const za_conv2d_dims_t *d, const float *in, const float *kernel,
                            const float *dout, float *dkernel, float *din, void *scratch)
{
    s_plan_t p;
    s_plan (&p, d);
    uint16_t *f = (uint16_t *) scratch, *pairs = f + p.f_elems, *x = pairs + p.k_elems;
    uint16_t *dd = x + p.x_elems, *row = dd + p.d_elems;
    float *temp = (float *) (row + p.row_elems);
    s_copy_frame (d, &p, dout, f);
    //  The tile loads and stores are asm that names no memory: what they
    //  read is written before them, what they write read after.
    if (din) {
        s_copy_kernel (d, kernel, pairs);
        __asm__ volatile ("" ::: "memory");
        s_din_products (d, &p, f, pairs, din, temp);
    }
    for (int block = 0; block < p.blocks; block++)
        for (int y = 0; y < p.rows; y++)
            s_copy_input_row (d, &p, in, block, y, row,
                              x + ((size_t) block * p.rows + y) * p.cols * d->c * 2 * S_EXAMPLES);
    s_copy_dout (d, &p, f, dd);
    __asm__ volatile ("" ::: "memory");
    s_dkernel_products (d, &p, x, dd, dkernel);
    __asm__ volatile ("" ::: "memory");
}
