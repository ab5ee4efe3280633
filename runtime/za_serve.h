/*  za_serve.h: `zactor-run serve`: a model dir served over TensorFlow
    Serving's REST API, with its batching and its model reloading.

      POST /v1/models/NAME:predict            {"instances": [...]} or {"inputs": ...}
      POST /v1/models/NAME/versions/STEP:predict
      GET  /v1/models/NAME                    the model's version status
      GET  /v1/models/NAME/metadata           its signature: input and outputs
      GET  /monitoring/prometheus/metrics     requests, batches, latency (also /metrics)

    An instance is one image: pixels 0 .. 255 as [H][W][C] (or [H][W] for
    one channel, or H x W x C flat), a {"pixels": ...} object of the same,
    or {"b64": "..."}: a JPEG or PNG, decoded and resized as training read
    its images. Each answer holds the Estimator's prediction keys: logits,
    probabilities, class_ids and classes. A request that cannot be answered
    gets TF Serving's {"error": "..."} and a 4xx; the server goes on.       */
#ifndef ZA_SERVE_H_INCLUDED
#define ZA_SERVE_H_INCLUDED

#include "za_settings.h"

//  Serves until SIGINT or SIGTERM. Returns the exit status.
int za_serve_run (const za_settings_t *settings);

#endif
