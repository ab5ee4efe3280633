/*  za_input_json.h: MODEL_DIR/input.json, which training from images writes
    so that `zactor-run predict` needs no flag but the data: the image
    settings, the class names and the model, as job keys.                   */
#ifndef ZA_INPUT_JSON_H_INCLUDED
#define ZA_INPUT_JSON_H_INCLUDED

#include "za_settings.h"

#define ZA_INPUT_JSON_FILE "input.json"

//  Applies MODEL_DIR/input.json (as a job: weaker than the flags) when it
//  is there; else, for a layer stack's checkpoint (trained on the IDX
//  files), their input: 28 x 28 gray, its outputs' numbers as the class
//  names. Returns 0, or ZA_EXIT_USAGE after one message.
int za_input_json_apply (za_options_t *options, const za_settings_t *settings);

//  Writes MODEL_DIR/input.json for a run that trains from images (or the
//  IDX files: 28 x 28 gray): the image settings and preprocessing, a TFRecord's keys and label base where they are not the
//  defaults, the class names (where the source names none, as TFRecords
//  without --class-names, the model's n_classes outputs as label numbers)
//  and (with_model: a layer stack or premade model, not a program's
//  model_fn) the model (atomically; a failure is a warning: training goes
//  on).
void za_input_json_save (const za_settings_t *settings, int with_model, int n_classes);

#endif
