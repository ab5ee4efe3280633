/*  za_export.h: a trained layer stack as an ONNX model (za_onnx.h), for
    runtimes other than zactor (onnxruntime, TensorRT, OpenVINO, ...).

    The graph (IR 8, opset 13):
      input   "pixels"  float32 [batch, H, W, C], the image's values 0 .. 255
                        in zactor's channel order (RGB or gray), already
                        resized to H x W (the caller's: input.json's
                        image_size and resize are in the metadata)
      output  "logits"  float32 [batch, classes]
              "probabilities"  their softmax (unless config.softmax is 0)
    Its nodes: the preprocessing (pixels / 255, then --preprocess's channel
    order, scale and offset), then each layer: conv2d as Transpose (NHWC to
    NCHW) and Conv, maxpool as MaxPool, globalavgpool as GlobalAveragePool,
    flatten and a dense layer's own flattening in zactor's H, W, C order,
    dense as Gemm, the relus as Relu; dropout is left out. The initializers
    are the checkpoint's variables under their own names and in their own
    layout (conv2d/kernel stays HWIO: a Transpose node makes it OIHW), bit
    for bit.                                                                 */
#ifndef ZA_EXPORT_H_INCLUDED
#define ZA_EXPORT_H_INCLUDED

#include "za/za_checkpoint.h"
#include "za/za_input.h"
#include "za/za_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    za_input_shape_t input;             //  the pixels' H x W x C
    za_preprocess_t preprocess;
    int softmax;                        //  1: the "probabilities" output too
    const char *class_names;            //  "a,b,...": the metadata's, or NULL
    const char *image_size;             //  the metadata's: as training read images,
    const char *resize;                 //  or NULL
    int crop_to_aspect_ratio;           //  the metadata's (0 when not said)
} za_export_config_t;

//  What a model dir says of its input: input.json's image size, channels,
//  preprocessing and class names (training from images writes it), else
//  Fashion-MNIST's 28 x 28 x 1 and `none`. Strings point into *json, which
//  the caller frees with za_export_config_free. 0, or -1 with an error (an
//  input.json that cannot be read).
int za_export_config_load (const char *model_dir, za_export_config_t *config, void **json);
void za_export_config_free (void **json);

//  Writes the ONNX model of the stack written in `model_text` (a
//  checkpoint's "model" metadata) with the variables of ckpt to path. 0, or
//  -1 with an error: a text that is not a stack, a variable the checkpoint
//  lacks or holds in another shape (an input shape that is not the
//  training's says so), a write that fails.
int za_export_onnx (const char *model_text, const za_checkpoint_t *ckpt,
                    const za_export_config_t *config, const char *path);

#ifdef __cplusplus
}
#endif
#endif
