/*  za_checkpoint_private.h: what the files of the checkpoint share: its file
    and index names, the format's sizes, and the CRC32 of its data section.
    za_checkpoint.c is the class (a checkpoint read back and verified);
    za_checkpoint_write.c its writing (header, atomic files, index,
    retention); and za_checkpoint_list.c the steps a model_dir holds.       */
#ifndef ZA_CHECKPOINT_PRIVATE_H_INCLUDED
#define ZA_CHECKPOINT_PRIVATE_H_INCLUDED

#include "za/za_checkpoint.h"

#include <stddef.h>
#include <stdint.h>

#define CKPT_PREFIX "model.ckpt-"
#define CKPT_SUFFIX ".safetensors"
#define CKPT_INDEX_NAME "checkpoint"
#define CKPT_TMP_SUFFIX ".tmp"
#define CKPT_LEN_PREFIX_BYTES 8
#define CKPT_HEADER_ALIGN_BYTES 8
#define CKPT_CRC_HEX_DIGITS 8
#define CKPT_MAX_STEP_DIGITS 19         //  INT64_MAX has 19 digits
#define CKPT_CRC_CHUNK_BYTES (1u << 30) //  zlib's crc32 takes a uInt length

// ---------------------------------------------------------------------------
//  za_checkpoint.c: a checkpoint read back and verified

//  crc updated with size bytes of data (zlib's crc32, in pieces it can take).
uint32_t za_checkpoint_crc32_update (uint32_t crc, const uint8_t *data, size_t size);

#endif
