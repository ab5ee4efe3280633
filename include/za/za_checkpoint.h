/*  za_checkpoint.h: checkpoints as safetensors files that Python's safetensors
    reads, written atomically, indexed by a TensorFlow-style `checkpoint` file,
    with retention, and verified (size and CRC32) before anything is loaded.

    File: <model_dir>/model.ckpt-<global_step>.safetensors
      8 bytes  little-endian u64 N, the JSON header's length
      N bytes  JSON header, padded with spaces to a multiple of 8:
               {"__metadata__": {"format": "zactor-ckpt-1", "global_step": "1234",
                                 "crc32": "<hex of the data section>", ...caller keys},
                "<name>": {"dtype": "F32"|"I64", "shape": [...],
                           "data_offsets": [begin, end]}, ...}
      data     the tensors' bytes, back to back, in the order given.
    Index:   <model_dir>/checkpoint, TensorFlow's text format:
               model_checkpoint_path: "model.ckpt-1234.safetensors"
               all_model_checkpoint_paths: "model.ckpt-1000.safetensors"
               all_model_checkpoint_paths: "model.ckpt-1234.safetensors"   */
#ifndef ZA_CHECKPOINT_H_INCLUDED
#define ZA_CHECKPOINT_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#include "za/za_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZA_CKPT_MAX_DIMS 8
#define ZA_CKPT_FORMAT "zactor-ckpt-1"
//  A header larger than this is refused as corrupt (safetensors uses 100 MB).
#define ZA_CKPT_MAX_HEADER_BYTES (100u * 1024u * 1024u)
#define ZA_CKPT_META_EXAMPLES "examples_done"

typedef struct {
    const char *name;
    za_dtype_t dtype;
    int ndim;                           //  0 for a scalar
    int64_t shape [ZA_CKPT_MAX_DIMS];
    const void *data;                   //  ndim product * dtype size bytes
} za_ckpt_tensor_t;

//  A metadata entry (both strings).
typedef struct {
    const char *key;
    const char *value;
} za_ckpt_meta_t;

//  Writes model.ckpt-<global_step>.safetensors in model_dir (created if
//  missing): to "<file>.tmp", fsync, rename, fsync the directory; then rewrites
//  the `checkpoint` index the same way, newest last; then deletes the oldest
//  checkpoints so at most keep_max remain (keep_max <= 0 keeps all; the file
//  just written is never deleted). The index lists the files that remain after
//  retention, ascending by step, and model_checkpoint_path names the highest
//  step, the one za_checkpoint_load_newest picks. It is written before the
//  deletions, so it never names a file that is gone.
//  The metadata gets format, global_step and crc32 besides the caller's (the
//  caller may not pass those keys). Tensor names must be unique UTF-8, not
//  "__metadata__"; global_step must be >= 0. Tensors are stored back to back in
//  the order given, so an I64 tensor is 8-byte aligned when loaded only if the
//  bytes before it are a multiple of 8: put I64 tensors first, or read them
//  with memcpy.
//  Returns 0, or -1 with an error (nothing half-written is left visible).
int za_checkpoint_write_atomic (const char *model_dir, int64_t global_step,
                                const za_ckpt_tensor_t *tensors, int tensor_count,
                                const za_ckpt_meta_t *meta, int meta_count,
                                int keep_max);

//  After a za_checkpoint_write_atomic that failed: the errno when the disk was
//  the cause (ENOSPC, EDQUOT, EIO, EFBIG, EROFS: full or failing, a later save
//  may succeed), else 0 (a bad argument, no memory). Per thread.
int za_checkpoint_disk_errno (void);
//  Sets it to 0 (before a save that may fail before writing anything).
void za_checkpoint_disk_errno_clear (void);

typedef struct _za_checkpoint_t za_checkpoint_t;

//  Loads and verifies one checkpoint file: header length within the file and
//  ZA_CKPT_MAX_HEADER_BYTES, valid JSON, known dtypes, shapes matching offsets,
//  offsets contiguous and ending at the file's end, CRC32 of the data section
//  equal to the metadata's. Returns NULL with one error naming the file and the
//  defect otherwise.
//  Caller destroys the result with za_checkpoint_destroy.
za_checkpoint_t *za_checkpoint_load (const char *path);

//  Loads model_dir's checkpoint of `step` as za_checkpoint_load does; one
//  whose metadata names another global_step (a file copied in under another
//  name, which would restore the wrong state) is corrupt too.
za_checkpoint_t *za_checkpoint_load_step (const char *model_dir, int64_t step);

//  Loads the newest intact checkpoint in model_dir: tries steps newest first
//  (from the directory listing, so a stale index does not matter), skipping
//  corrupt ones with an error each (a file whose metadata global_step differs
//  from its name counts as corrupt), then one final error if none was intact.
//  Clears the last error first. Returns NULL with no error when model_dir
//  holds no checkpoint at all (check za_last_error () if you need to tell
//  "none" from "all corrupt": *found_any is set to 1 if any file was seen).
za_checkpoint_t *za_checkpoint_load_newest (const char *model_dir, int *found_any);

//  The steps of the checkpoint files in model_dir, ascending. Returns the count
//  (0 if none or the directory is missing) and a malloc'd array in *steps_p
//  (caller frees; NULL when the count is 0). Returns -1 on a read error.
int za_checkpoint_list (const char *model_dir, int64_t **steps_p);

//  The newest checkpoint file's step in model_dir (by its name; loading it
//  is za_checkpoint_load_newest's), or -1 when there is none.
int64_t za_checkpoint_newest_step (const char *model_dir);

//  Path of the checkpoint of `step` in model_dir; caller frees.
char *za_checkpoint_path (const char *model_dir, int64_t step);

int64_t za_checkpoint_step (const za_checkpoint_t *self);
//  Its "examples_done" metadata: the examples of the training input read
//  when it was written (za_replica_set_examples_done); 0 where it says none.
int64_t za_checkpoint_examples_done (const za_checkpoint_t *self);
//  The same of the metadata's text (NULL, or not a count: 0).
int64_t za_checkpoint_examples_text (const char *text);
//  A metadata value of the newest intact checkpoint (za_checkpoint_load_newest's,
//  the one a restore takes; caller frees), and its step into *step (-1:
//  none; step may be NULL), or NULL: none intact, or no such key.
char *za_checkpoint_newest_meta (const char *model_dir, const char *key, int64_t *step);
int za_checkpoint_tensor_count (const za_checkpoint_t *self);
//  The i-th tensor, in file (data offset) order, or NULL if i is out of range.
//  Names and data point into the checkpoint's memory, valid until destroy; the
//  data section starts 64-byte aligned (see the alignment note above).
const za_ckpt_tensor_t *za_checkpoint_tensor (const za_checkpoint_t *self, int i);
//  The tensor named `name`, or NULL.
const za_ckpt_tensor_t *za_checkpoint_find (const za_checkpoint_t *self, const char *name);
//  A metadata value, or NULL.
const char *za_checkpoint_meta (const za_checkpoint_t *self, const char *key);
//  The path it was loaded from.
const char *za_checkpoint_filename (const za_checkpoint_t *self);

void za_checkpoint_destroy (za_checkpoint_t **self_p);

#ifdef __cplusplus
}
#endif
#endif
