/*  za_input_json.c: MODEL_DIR/input.json, how training read its images.    */
#include "za_input_json.h"

#include "za/za_checkpoint.h"
#include "za/za_images.h"
#include "za/za_model.h"
#include "za/za_util.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PATH_CHARS 4096
#define INT_TEXT_MAX 12                 //  "-2147483648" and a comma

//  "B,B+1,..": n labels counted from base, or NULL.
static char *
s_label_names (int n, int base)
{
    char *names = n > 0? malloc ((size_t) n * INT_TEXT_MAX + 1): NULL;
    char *at = names;
    for (int k = 0; names && k < n; k++)
        at += sprintf (at, "%s%d", k? ",": "", base + k);
    return names;
}

//  A layer stack trained on the IDX files by a zactor before they had an
//  input.json: its input is theirs (28 x 28 gray, as serve takes it), its
//  model the checkpoint's, its classes the numbers of its outputs. Weaker
//  than the flags, as the file is.
static int
s_apply_idx_input (za_options_t *options, const za_settings_t *s)
{
    za_error_set_quiet (1);             //  a damaged checkpoint is the restore's to say
    char *model = za_checkpoint_newest_meta (s->run.model_dir, "model", NULL);
    za_error_set_quiet (0);
    za_stack_spec_t spec;
    if (!model || za_stack_parse (model, &spec)) {
        free (model);
        return 0;                       //  no checkpoint, or its own model_fn's
    }
    char *names = s_label_names (spec.layers [spec.count - 1].units, 0);
    json_t *job = names? json_pack ("{s:s, s:i, s:s, s:s}", "image_size", "28", "channels", 1,
                                    "class_names", names, "model", model): NULL;
    free (model);
    int rc = !job || za_options_apply_job (options, job, "the IDX training's input",
                                           ZA_FROM_JOB);
    json_decref (job);
    free (names);
    return rc? ZA_EXIT_USAGE: 0;
}

int
za_input_json_apply (za_options_t *options, const za_settings_t *s)
{
    char path [PATH_CHARS];
    snprintf (path, sizeof path, "%s/%s", s->run.model_dir, ZA_INPUT_JSON_FILE);
    if (access (path, F_OK))
        return s_apply_idx_input (options, s);
    return za_options_apply_job_file (options, path)? ZA_EXIT_USAGE: 0;
}

void
za_input_json_save (const za_settings_t *s, int with_model, int n_classes)
{
    za_images_config_t config = {
        .source = s->train_data, .class_names = s->class_names,
        .image_key = s->image_key, .label_key = s->label_key, .label_base = (int) s->label_base,
    };
    char *names = s->train_data? za_images_class_names (&config): NULL;
    if (!names)
        names = s_label_names (n_classes, (int) s->label_base);
    //  The IDX files' input is theirs: 28 x 28 gray.
    json_t *input = json_pack ("{s:s, s:I, s:s, s:b, s:s}",
                               "image_size", s->train_data? s->image_size: "28",
                               "channels", (json_int_t) (s->train_data? s->channels: 1),
                               "resize", s->resize,
                               "crop_to_aspect_ratio", s->crop_to_aspect_ratio,
                               "preprocess", s->preprocess);
    if (input && with_model) {
        json_object_set_new (input, "model", json_string (s->model));
        if (streq (s->model, "dnn"))
            json_object_set_new (input, "hidden_units", json_string (s->hidden_units));
    }
    if (input && names)
        json_object_set_new (input, "class_names", json_string (names));
    //  A TFRecord's features as training read them (the defaults left out).
    if (input && s->image_key && strcmp (s->image_key, ZA_IMAGES_IMAGE_KEY))
        json_object_set_new (input, "image_key", json_string (s->image_key));
    if (input && s->label_key && strcmp (s->label_key, ZA_IMAGES_LABEL_KEY))
        json_object_set_new (input, "label_key", json_string (s->label_key));
    if (input && s->label_base)
        json_object_set_new (input, "label_base", json_integer ((json_int_t) s->label_base));
    char path [PATH_CHARS], temp [PATH_CHARS + 32];
    snprintf (path, sizeof path, "%s/%s", s->run.model_dir, ZA_INPUT_JSON_FILE);
    snprintf (temp, sizeof temp, "%s.%d.tmp", path, (int) getpid ());
    if (!input || za_mkdirs (s->run.model_dir)
    ||  json_dump_file (input, temp, JSON_INDENT (2) | JSON_SORT_KEYS)
    ||  rename (temp, path))
        za_info ("warning: cannot write %s (predict will need the image flags): %s", path,
                 strerror (errno));
    unlink (temp);
    json_decref (input);
    free (names);
}

