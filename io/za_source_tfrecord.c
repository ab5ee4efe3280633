/*  za_source_tfrecord.c: TFRecord files of tf.train.Example as a data
    source ('records/train-*', one file, or tfrecord:PATTERN for any names;
    plain or GZIP): every record's CRCs checked and its label read, no image
    decoded; a GZIP file's records kept uncompressed in a spill file, so
    that a batch may draw any of them.                                     */
#define _GNU_SOURCE                     //  pwrite
#include "za_source.h"
#include "za/za_tfrecord.h"
#include "za/za_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TFRECORD_PREFIX "tfrecord:"

//  The prefix, an existing file that is not an image, or a pattern that
//  matches no image (one that matches images is a pattern of images, with
//  other files left out, as Keras leaves them): TFRecords.
static int
s_takes (const za_images_config_t *config, const char **pattern)
{
    *pattern = config->source;
    if (!strncmp (config->source, TFRECORD_PREFIX, strlen (TFRECORD_PREFIX))) {
        *pattern += strlen (TFRECORD_PREFIX);
        return 1;
    }
    struct stat st;
    if (stat (config->source, &st) == 0)
        return !S_ISDIR (st.st_mode) && !za_listing_is_image (config->source);
    za_listing_t files = {0};
    int records = 0;
    if (strpbrk (config->source, "*?[") && za_listing_glob (&files, config->source) == 0) {
        records = files.count > 0;
        for (int64_t i = 0; i < files.count && records; i++)
            records = !za_listing_is_image (za_listing_path (&files, i));
    }
    za_listing_free (&files);
    return records;
}

// ---------------------------------------------------------------------------
//  Listing TFRecord files: every record's CRCs and label, no image decoded

typedef struct {
    const za_images_config_t *config;
    const char *image_key, *label_key;
    int warn;
    int spill;                          //  where GZIP files' records go, or -1
    int64_t spill_size;
    int named;                          //  the classes given, or 0
    int64_t max_label;
    int count_only;                     //  1: the records counted, not read
    char first_why [512];               //  why the first record left out was
} s_scan_t;

//  Copies a GZIP file's record (data, size bytes and its CRC) into the
//  spill, framed as in a file. Its offset there, or -1 with an error.
static int64_t
s_spill (s_scan_t *scan, const uint8_t *data, size_t size)
{
    uint8_t head [ZA_TFRECORD_HEAD_BYTES];
    za_tfrecord_head (head, size);
    int64_t at = scan->spill_size;
    if (pwrite (scan->spill, head, sizeof head, at) != (ssize_t) sizeof head
    ||  pwrite (scan->spill, data, size + ZA_TFRECORD_CRC_BYTES, at + (int64_t) sizeof head)
        != (ssize_t) (size + ZA_TFRECORD_CRC_BYTES))
        return za_error ("cannot keep a GZIP file's records uncompressed in the temp folder "
                         "($TMPDIR): %s", strerror (errno));
    scan->spill_size += (int64_t) (sizeof head + size + ZA_TFRECORD_CRC_BYTES);
    return at;
}

//  The record's label, or a reason it has none (returned as -1, why in why).
static int
s_record_label (const s_scan_t *scan, const uint8_t *data, size_t size, int64_t *label,
                const char **why)
{
    za_feature_t feature;
    const uint8_t *image;
    size_t image_size;
    if (za_example_feature (data, size, scan->label_key, &feature) != 1
    ||  za_feature_int64 (&feature, label))
        *why = "no int64 label under the label key";
    else
    if (za_example_feature (data, size, scan->image_key, &feature) != 1
    ||  za_feature_bytes (&feature, &image, &image_size))
        *why = "no image bytes under the image key";
    else
        return 0;
    return -1;
}

static int
s_scan_file (s_scan_t *scan, za_listing_t *list, const char *path)
{
    za_tfrecord_reader_t *reader = za_tfrecord_reader_new (path);
    int64_t at = reader? za_listing_text (list, path): -1;
    if (at < 0) {
        za_tfrecord_reader_destroy (&reader);
        return -1;
    }
    const uint8_t *data;
    size_t size;
    uint64_t offset;
    int rc = 0;
    za_tfrecord_status_t status;
    //  Only counting (the classes are given): the heads, no data.
    while (!rc && scan->count_only
           && (status = za_tfrecord_skip (reader, &size, &offset)) != ZA_TFRECORD_END) {
        if (status == ZA_TFRECORD_OK)
            rc = za_listing_add (list, (za_listing_item_t) {
                .at = at, .offset = (int64_t) offset, .spill_at = -1});
        else
            break;
    }
    while (!rc && !scan->count_only
           && (status = za_tfrecord_next (reader, &data, &size, &offset))
              != ZA_TFRECORD_END) {
        if (status != ZA_TFRECORD_OK) {
            if (scan->warn)
                za_info ("warning: %s", za_tfrecord_error (reader));
            if (!*scan->first_why)
                snprintf (scan->first_why, sizeof scan->first_why, "%s",
                          za_tfrecord_error (reader));
            if (status == ZA_TFRECORD_BROKEN)
                break;
            continue;
        }
        int64_t label;
        const char *why;
        if (s_record_label (scan, data, size, &label, &why)
        &&  !(scan->config->unlabeled && strstr (why, "label"))) {
            if (!*scan->first_why)
                snprintf (scan->first_why, sizeof scan->first_why, "%s: the record at offset "
                          "%llu has %s", path, (unsigned long long) offset, why);
            if (scan->warn)
                za_info ("warning: %s: the record at offset %llu has %s ('%s', '%s'): it "
                         "is skipped", path, (unsigned long long) offset, why,
                         scan->image_key, scan->label_key);
            continue;
        }
        int64_t classes = scan->named? scan->named: ZA_IMAGES_MAX_CLASSES;
        if (scan->config->unlabeled)
            label = scan->config->label_base;
        else
        if (label - scan->config->label_base < 0
        ||  label - scan->config->label_base >= classes) {
            rc = za_error ("%s: the record at offset %llu has label %lld, outside %d..%lld%s%s",
                           path, (unsigned long long) offset, (long long) label,
                           scan->config->label_base,
                           (long long) (classes - 1 + scan->config->label_base),
                           scan->config->label_base? "": " (labels that start at 1, as "
                           "build_image_data.py writes them: --label-base 1)",
                           scan->named? " (the classes given)": "");
            break;
        }
        label -= scan->config->label_base;
        int64_t spill_at = -1;
        if (scan->spill >= 0 && za_tfrecord_compressed (reader)
        &&  (spill_at = s_spill (scan, data, size)) < 0)
            rc = -1;
        else
            rc = za_listing_add (list, (za_listing_item_t) {
                .at = at, .offset = (int64_t) offset, .spill_at = spill_at,
                .label = (int32_t) label});
        if (label > scan->max_label)
            scan->max_label = label;
    }
    za_tfrecord_reader_destroy (&reader);
    return rc;
}

//  1 when the files of some shard (file i when i mod shards = that shard)
//  are all empty: every worker sees it alike, and they shard by record.
//  (TensorFlow's writers leave an empty file for a shard they had no
//  record for; by file, its worker had nothing to read.)
static int
s_a_shard_is_empty (const za_listing_t *files, int shards)
{
    for (int shard = 0; shard < shards; shard++) {
        int64_t bytes = 0;
        struct stat st;
        for (int64_t f = shard; f < files->count && bytes == 0; f += shards)
            bytes += stat (za_listing_path (files, f), &st)? 1: st.st_size;
        if (bytes == 0)
            return 1;
    }
    return 0;
}

//  Lists the records of the files of pattern. With *shards > 1 and at
//  least as many files, no split that needs every record and no shard of
//  empty files (s_a_shard_is_empty), only this shard's files are opened
//  (file i of the sorted list when i mod n = shard), and *shards becomes
//  1: what is listed is the shard.
static int
s_list_tfrecord (const za_images_config_t *config, const char *pattern, za_listing_t *list,
                 int *n_classes, int warn, int spill, int *shards)
{
    za_listing_t files = {0};
    struct stat st;
    int rc = strpbrk (pattern, "*?[")? za_listing_glob (&files, pattern)
           : stat (pattern, &st)? za_error ("%s: cannot read: %s", pattern, strerror (errno))
           : za_listing_add_file (&files, pattern, -1);
    if (!rc && files.count == 0)
        rc = za_error ("%s: no file matches", pattern);
    //  What the source holds, when the classes are given, is a count: the
    //  records' heads, no data read (the load reads and checks them all).
    s_scan_t scan = {
        .config = config, .warn = warn, .spill = spill, .max_label = -1,
        .count_only = !warn && spill < 0 && config->class_names && !config->unlabeled,
        .image_key = config->image_key? config->image_key: ZA_IMAGES_IMAGE_KEY,
        .label_key = config->label_key? config->label_key: ZA_IMAGES_LABEL_KEY,
    };
    char **names = NULL;
    if (!rc && config->class_names && (scan.named = za_source_classes_given (config->class_names,
                                                                     &names)) < 0)
        rc = -1;
    za_listing_free_names (names, scan.named);
    int file_shards = 1;
    if (*shards > 1 && files.count >= *shards && config->validation_split == 0
        && !s_a_shard_is_empty (&files, *shards))
        file_shards = *shards, *shards = 1;
    int64_t scanned = 0;
    for (int64_t f = 0; f < files.count && !rc; f++)
        if (file_shards == 1 || f % file_shards == config->shard_index) {
            rc = s_scan_file (&scan, list, za_listing_path (&files, f));
            scanned++;
        }
    if (!rc && list->count == 0)
        rc = za_error ("%s: no record with an image and a label ('%s', '%s') in %lld "
                       "file%s%s%s%s", pattern, scan.image_key, scan.label_key,
                       (long long) scanned, scanned == 1? "": "s", file_shards > 1
                       ? " (this worker's shard of the files)": "", *scan.first_why
                       ? "; the first left out: ": "", scan.first_why);
    za_listing_free (&files);
    *n_classes = scan.named? scan.named: (int) scan.max_label + 1;
    return rc;
}


static int
s_list (const za_images_config_t *config, const char *pattern, za_listing_t *list,
        int *n_classes, za_source_ask_t *ask)
{
    if (s_list_tfrecord (config, pattern, list, n_classes, ask->warn, ask->spill, &ask->shards))
        return -1;
    if (ask->joined && config->class_names)
        *ask->joined = strdup (config->class_names);
    return 0;
}

const za_source_t za_source_tfrecord = {
    .name = "tfrecord", .spills = 1, .takes = s_takes, .list = s_list,
};
