/*  za_predict.h: `zactor-run predict` (Estimator.predict): a trained
    model's class and probabilities for every image of --data, one line
    each, as JSONL or CSV.                                                   */
#ifndef ZA_PREDICT_H_INCLUDED
#define ZA_PREDICT_H_INCLUDED

#include "za_settings.h"

#include "za/za_program.h"

//  Runs predict. Returns the exit status.
int za_predict_run (const za_program_t *program, za_options_t *options, za_settings_t *s);

#endif
