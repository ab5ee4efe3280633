/*  za_options_private.h: what the two halves of the options share:
    za_options.c (the table, values, the command line, --help) and
    za_options_job.c (job files, the job handed to every task, and
    --print-settings).                                                      */
#ifndef ZA_OPTIONS_PRIVATE_H_INCLUDED
#define ZA_OPTIONS_PRIVATE_H_INCLUDED

#include "za/za_options.h"

#include <czmq.h>

#define OPTIONS_MAX 128
#define NAME_MAX_CHARS 64
#define TEXT_MAX_CHARS 1024
#define STRING_MAX_CHARS (256 * 1024)   //  a text option's value: the class names of
                                        //  ZA_IMAGES_MAX_CLASSES folders fit
#define LIST_VALUE_MAX 9.2e18           //  as large as an int64 parses to exactly enough
#define HELP_COLUMN 25
#define HELP_WIDTH 92
//  The task counts a job may give as "roles".
#define ROLES_KEY "roles"

struct _za_options_t {
    const char *program;
    za_settings_t *settings;
    unsigned hide;
    int print_asked;                //  --print-settings
    int count;
    za_option_t options [OPTIONS_MAX];
    za_option_source_t from [OPTIONS_MAX];
    const char *program_default [OPTIONS_MAX];
    zlist_t *strings;               //  every string value, owned
    int from_wire;                  //  applying a job that came over the network
};

//  The option named `name` (a flag, or its job key), or -1.
int za_options_index_of (const za_options_t *self, const char *name);
//  Where the option's value lives: in the settings, or the program's params.
void *za_options_field (const za_options_t *self, const za_option_t *option);
//  1 when this program hides the option (za_options_new's `hide`).
int za_options_hidden (const za_options_t *self, const za_option_t *option);

#endif
