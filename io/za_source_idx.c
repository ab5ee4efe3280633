/*  za_source_idx.c: a folder of MNIST-format IDX files as a data source
    (za_idx.h): "<dir>/<split>-images-idx3-ubyte[.gz]" and its labels, the
    source zactor-run reads by default (--dataset-dir). Unlike the other
    rows it lists nothing: the files are small and read whole, the shard's
    pixels kept in memory as bytes.                                         */
#include "za_source.h"
#include "za/za_idx.h"
#include "za/za_util.h"

//  Asked for by its split (config->idx_split): a folder of IDX files
//  holds two splits, and which is read is the caller's.
static int
s_takes (const za_images_config_t *config, const char **pattern)
{
    *pattern = config->source;
    return config->idx_split != NULL;
}

static int
s_info (const za_images_config_t *config, const char *dir, za_dataset_info_t *info)
{
    return za_idx_info_dir (dir, config->idx_split, info);
}

static za_dataset_t *
s_load (const za_images_config_t *config, const char *dir)
{
    int shards = config->num_shards > 0? config->num_shards: 1;
    return za_idx_load_dir_shard (dir, config->idx_split, shards,
                                  config->num_shards > 0? config->shard_index: 0);
}

const za_source_t za_source_idx = {
    .name = "idx",
    .takes = s_takes,
    .info = s_info,
    .load = s_load,
};
