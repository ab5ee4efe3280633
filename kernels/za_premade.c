/*  za_premade.c: premade models, TensorFlow's DNNClassifier and
    LinearClassifier, as layer stacks.                                     */
#include "za/za_model.h"

#include <stddef.h>

int
za_dnn_classifier_spec (za_stack_spec_t *spec, const int *hidden_units,
                        int hidden_count, int n_classes)
{
    if (n_classes < 2)
        return za_error ("dnn_classifier: n_classes must be >= 2 (got %d)", n_classes);
    za_stack_init (spec);
    if (za_stack_flatten (spec))
        return -1;
    for (int i = 0; i < hidden_count; i++)
        if (za_stack_dense (spec, hidden_units [i], ZA_ACT_RELU))
            return -1;
    if (za_stack_dense (spec, n_classes, ZA_ACT_NONE))
        return -1;
    return za_stack_finish (spec);
}

int
za_linear_classifier_spec (za_stack_spec_t *spec, int n_classes)
{
    return za_dnn_classifier_spec (spec, NULL, 0, n_classes);
}
