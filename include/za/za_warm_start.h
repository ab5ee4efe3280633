/*  za_warm_start.h: a model started from another's weights (TensorFlow's
    WarmStartSettings): the variables a regex selects, loaded from a
    checkpoint, any safetensors file (PyTorch's, Keras's, zactor's) or the
    initializers of an ONNX model (a file named *.onnx: torch.onnx.export's,
    tf2onnx's, zactor-ckpt export's), renamed as asked, their layout turned
    into zactor's.

    Layouts (--warm-start-layout):
      zactor, keras  conv2d/kernel [H, W, in, out] (HWIO), dense/kernel
                     [in, out]: as stored.
      torch          a 4-dim weight [out, in, H, W] (OIHW) becomes HWIO, a 2-dim
                     one [out, in] becomes [in, out]; a 1-dim one (a bias) is
                     taken as it is. A dense layer right after `flatten` of an
                     H x W x C map (H, W > 1) reads its inputs in zactor's
                     H, W, C order, PyTorch's are C, H, W: such a layer is not
                     reordered (use globalavgpool before the head, as VGG16
                     transfer learning does).
    F16, BF16 and F64 tensors are converted to float32.                     */
#ifndef ZA_WARM_START_H_INCLUDED
#define ZA_WARM_START_H_INCLUDED

#include "za/za_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    ZA_LAYOUT_ZACTOR = 0,
    ZA_LAYOUT_KERAS,
    ZA_LAYOUT_TORCH
} za_layout_t;

//  Names "zactor", "keras", "torch" (-1: none of them).
int za_layout_parse (const char *name);

typedef struct {
    const char *from;                   //  a checkpoint, safetensors or .onnx file, or a
                                        //  model dir (its newest checkpoint);
                                        //  NULL: no warm start
    const char *vars;                   //  an extended regex matched from the start
                                        //  of each variable's name (TensorFlow's
                                        //  vars_to_warm_start); NULL: every one
    const char *rename;                 //  "NEW=OLD,...": the model's NEW loads the
                                        //  file's OLD
    za_layout_t layout;
} za_warm_start_t;

//  Loads the variables of vars that ws selects from ws->from into values
//  (NULL: checks only). Returns how many, or -1 with an error that names
//  what is wrong: no such file, no checkpoint in the dir, a bad regex, one
//  that selects nothing, a variable the file lacks (and the closest name it
//  has), a shape that differs (both shown).
int za_warm_start_load (const za_warm_start_t *ws, const za_vars_t *vars, float *values);

#ifdef __cplusplus
}
#endif
#endif
