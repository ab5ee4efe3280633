/*  za_idx.h: MNIST-format IDX files (gzipped or not) as a data set: the
    source zactor-run reads by default (--dataset-dir, --eval-data).        */
#ifndef ZA_IDX_H_INCLUDED
#define ZA_IDX_H_INCLUDED

#include "za/za_dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

//  Where Debian's dataset-fashion-mnist package puts the files.
#define ZA_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

//  Loads an IDX image file (magic 0x00000803, uint8, dims count x rows x cols)
//  and its IDX label file (magic 0x00000801, uint8, dim count). Either may be
//  gzipped (detected by content, not name). Pixels become value / 255.
//  Returns NULL with one error naming the file and what was wrong: missing,
//  unreadable, wrong magic, truncated (fewer bytes than the header declares),
//  or image and label counts that differ.
za_dataset_t *za_idx_load (const char *images_path, const char *labels_path);

//  Loads "<dir>/<split>-images-idx3-ubyte[.gz]" and
//  "<dir>/<split>-labels-idx1-ubyte[.gz]"; split is "train" or "t10k".
//  Prefers the .gz name when both exist.
za_dataset_t *za_idx_load_dir (const char *dir, const char *split);

//  Loads only shard `shard_index` of `num_shards` of a split (examples i,
//  i + n, i + 2n, ... in file order, as tf.data's shard) with its pixels kept
//  as bytes. The image file is streamed: loading costs the shard's size, not
//  the file's. n_classes is the whole split's. A shard of the whole split
//  (1, 0) gives the same batches as za_idx_load_dir. NULL with an error
//  as za_idx_load, or for a shard that does not exist.
za_dataset_t *za_idx_load_dir_shard (const char *dir, const char *split, int num_shards,
                                         int shard_index);

//  Fills *info for "<dir>/<split>-..." (as za_idx_load_dir names the
//  files). Returns 0, or -1 with an error as za_idx_load.
int za_idx_info_dir (const char *dir, const char *split, za_dataset_info_t *info);

#ifdef __cplusplus
}
#endif
#endif
