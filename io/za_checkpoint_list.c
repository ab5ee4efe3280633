/*  za_checkpoint_list.c: the checkpoints a model_dir holds, by step, and the
    path of each step's file ("model.ckpt-<step>.safetensors").               */
#define _GNU_SOURCE                     //  asprintf
#include "za_checkpoint_private.h"
#include "za/za_util.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


//  --------------------------------------------------------------------------
//  Small helpers

//  Parses "model.ckpt-<digits>.safetensors" (canonical decimal, no leading
//  zeros, so the name round-trips through za_checkpoint_path). Returns 0 or -1.
static int
s_parse_step_name (const char *name, int64_t *step_p)
{
    size_t prefix_len = strlen (CKPT_PREFIX);
    size_t suffix_len = strlen (CKPT_SUFFIX);
    size_t name_len = strlen (name);
    if (name_len <= prefix_len + suffix_len
    ||  strncmp (name, CKPT_PREFIX, prefix_len) != 0
    ||  strcmp (name + name_len - suffix_len, CKPT_SUFFIX) != 0)
        return -1;
    const char *digits = name + prefix_len;
    size_t digit_count = name_len - prefix_len - suffix_len;
    if (digit_count > CKPT_MAX_STEP_DIGITS || (digits [0] == '0' && digit_count > 1))
        return -1;
    int64_t step = 0;
    for (size_t i = 0; i < digit_count; i++) {
        if (digits [i] < '0' || digits [i] > '9')
            return -1;
        if (__builtin_mul_overflow (step, 10, &step)
        ||  __builtin_add_overflow (step, digits [i] - '0', &step))
            return -1;
    }
    *step_p = step;
    return 0;
}

//  --------------------------------------------------------------------------
//  Listing

static int
s_step_compare (const void *a, const void *b)
{
    int64_t left = *(const int64_t *) a;
    int64_t right = *(const int64_t *) b;
    return (left > right) - (left < right);
}

int
za_checkpoint_list (const char *model_dir, int64_t **steps_p)
{
    if (!steps_p)
        return za_error ("za_checkpoint_list: steps_p is NULL");
    *steps_p = NULL;
    if (!model_dir)
        return za_error ("za_checkpoint_list: model_dir is NULL");
    DIR *dir = opendir (model_dir);
    if (!dir) {
        if (errno == ENOENT)
            return 0;
        return za_error ("'%s': cannot open directory: %s", model_dir, strerror (errno));
    }
    int64_t *steps = NULL;
    int count = 0;
    int capacity = 0;
    int rc = 0;
    while (true) {
        errno = 0;
        struct dirent *entry = readdir (dir);
        if (!entry) {
            if (errno != 0)
                rc = za_error ("'%s': cannot read directory: %s", model_dir, strerror (errno));
            break;
        }
        int64_t step;
        if (s_parse_step_name (entry->d_name, &step))
            continue;
        struct stat st;
        if (fstatat (dirfd (dir), entry->d_name, &st, 0) != 0 || !S_ISREG (st.st_mode))
            continue;               //  vanished meanwhile, or not a file
        if (count == capacity) {
            if (capacity > INT32_MAX / 2) {
                rc = za_error ("'%s': too many checkpoints", model_dir);
                break;
            }
            int new_capacity = capacity ? capacity * 2 : 16;
            int64_t *grown = realloc (steps, (size_t) new_capacity * sizeof (int64_t));
            if (!grown) {
                rc = za_error ("'%s': out of memory listing checkpoints", model_dir);
                break;
            }
            steps = grown;
            capacity = new_capacity;
        }
        steps [count++] = step;
    }
    closedir (dir);
    if (rc != 0 || count == 0) {
        free (steps);
        return rc;
    }
    qsort (steps, (size_t) count, sizeof (int64_t), s_step_compare);
    *steps_p = steps;
    return count;
}

char *
za_checkpoint_path (const char *model_dir, int64_t step)
{
    if (!model_dir) {
        za_error ("za_checkpoint_path: model_dir is NULL");
        return NULL;
    }
    char *path = NULL;
    if (asprintf (&path, "%s/" CKPT_PREFIX "%" PRId64 CKPT_SUFFIX, model_dir, step) < 0) {
        za_error ("out of memory building a checkpoint path in '%s'", model_dir);
        return NULL;
    }
    return path;
}

int64_t
za_checkpoint_newest_step (const char *model_dir)
{
    int64_t *steps = NULL;
    int count = za_checkpoint_list (model_dir, &steps);
    int64_t newest = count > 0? steps [count - 1]: -1;
    free (steps);
    return newest;
}
