/*  test_serve.c: `zactor-run serve` as a real process on a seed CNN trained
    on Fashion-MNIST, spoken to over HTTP as TensorFlow Serving's REST API:
    8 concurrent clients posting the 10,000 test images (row and columnar
    formats) get `zactor-run predict`'s classes; concurrent requests are
    batched; malformed JSON, wrong shapes, oversized bodies, unknown model
    names, versions, paths and methods get TF Serving's error shape and a
    4xx while the server goes on answering exactly; a newer checkpoint is
    served once it loads, a corrupt one is not; SIGTERM ends it.            */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "za/za_checkpoint.h"
#include "za/za_image.h"
#include "za/za_kernels.h"
#include "za/za_util.h"
#include "za_test.h"

#define RUN_TIMEOUT_S 600
#define IMAGES 10000
#define CLIENTS 8
#define PER_REQUEST 25

static char *s_model;                   //  the trained model dir (step 300)
static int s_predicted [IMAGES];        //  zactor-run predict's classes
static za_dataset_t *s_test;

static void
s_train (void)
{
    za_test_dir_create ("za_serve");
    s_model = za_test_path ("fmnist");
    const char *args [] = {"--max-steps", "300", "--model-dir", s_model, NULL};
    za_test_result_t result = za_test_run (args, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    za_test_result_free (&result);
    const char *predict [] = {"predict", "--model-dir", s_model, NULL};
    result = za_test_run (predict, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    int lines = 0;
    for (char *line = result.out; line && *line && lines < IMAGES; lines++) {
        const char *id = strstr (line, "\"class_id\":");
        cr_assert_not_null (id);
        s_predicted [lines] = atoi (id + 11);
        line = strchr (line, '\n');
        line = line? line + 1: NULL;
    }
    cr_assert_eq (lines, IMAGES);
    za_test_result_free (&result);
    s_test = za_test_fashion ("t10k", IMAGES);
}

static void
s_done (void)
{
    za_dataset_destroy (&s_test);
    free (s_model);
    za_test_dir_remove ();
}

TestSuite (serve, .init = s_train, .fini = s_done, .timeout = 1200);

static json_t *
s_json (const za_test_http_t *answer)
{
    json_error_t error;
    json_t *json = answer->body? json_loads (answer->body, 0, &error): NULL;
    cr_assert_not_null (json, "not JSON: %s", answer->body? answer->body: "(nothing)");
    return json;
}

//  A server process on a free port, ready once it says so.
typedef struct {
    pid_t pid;
    int port;
    char *err;
} s_server_t;

static s_server_t
s_serve (const char *model_dir, const char *const *flags)
{
    s_server_t server = {.port = za_test_free_port ()};
    char port [16];
    snprintf (port, sizeof port, "%d", server.port);
    const char *args [32] = {"serve", "--model-dir", model_dir, "--port", port};
    int n = 5;
    for (int k = 0; flags && flags [k]; k++)
        args [n++] = flags [k];
    args [n] = NULL;
    char name [64];
    snprintf (name, sizeof name, "serve-%d.err", server.port);
    server.err = za_test_path (name);
    char *out = za_test_path ("serve.out");
    server.pid = za_test_spawn (args, out, server.err);
    free (out);
    char *text = za_test_wait_for_text (server.err, "serving", 60);
    cr_assert (strstr (text, "serving"), "the server did not start: %s", text);
    free (text);
    return server;
}

static void
s_stop (s_server_t *server)
{
    kill (server->pid, SIGTERM);
    int status = za_test_wait (server->pid, 60);
    cr_expect (WIFEXITED (status) && WEXITSTATUS (status) == 0,
               "serve did not end with 0 on SIGTERM (status %d)", status);
    free (server->err);
}

//  Images [first, first + n) as TF Serving's JSON: row format ("instances",
//  each [28][28][1]) or columnar ("inputs", each 784 numbers flat).
static char *
s_body (int first, int n, int columnar)
{
    json_t *list = json_array ();
    for (int i = first; i < first + n; i++) {
        int p [784];
        for (int k = 0; k < 784; k++)
            p [k] = s_test->pixels? s_test->pixels [(size_t) i * 784 + (size_t) k]
                                  : (int) lroundf (s_test->features [(size_t) i * 784
                                                                     + (size_t) k] * 255.0f);
        json_t *image = json_array ();
        for (int y = 0; y < 28; y++) {
            json_t *line = columnar? image: json_array ();
            for (int x = 0; x < 28; x++)
                json_array_append_new (line, columnar? json_integer (p [y * 28 + x])
                                                     : json_pack ("[i]", p [y * 28 + x]));
            if (!columnar)
                json_array_append_new (image, line);
        }
        json_array_append_new (list, image);
    }
    json_t *root = json_pack ("{s:o}", columnar? "inputs": "instances", list);
    char *text = json_dumps (root, JSON_COMPACT);
    json_decref (root);
    return text;
}

//  The classes an answer gives, into classes [n]; how many.
static int
s_classes (json_t *answer, int *classes, int n)
{
    json_t *rows = json_object_get (answer, "predictions");
    json_t *ids = json_object_get (json_object_get (answer, "outputs"), "class_ids");
    int got = 0;
    for (int i = 0; i < n; i++) {
        json_t *id = rows? json_object_get (json_array_get (rows, (size_t) i), "class_ids")
                         : json_array_get (ids, (size_t) i);
        if (!json_is_array (id))
            break;
        classes [i] = (int) json_integer_value (json_array_get (id, 0));
        got++;
    }
    return got;
}

typedef struct {
    int port;
    int client;
    int same, answered, failures;
} s_client_t;

static void *
s_client (void *arg)
{
    s_client_t *c = (s_client_t *) arg;
    int requests = IMAGES / PER_REQUEST;
    for (int r = c->client; r < requests; r += CLIENTS) {
        char *body = s_body (r * PER_REQUEST, PER_REQUEST, r % 2);
        za_test_http_t answer = za_test_http (c->port, "POST", "/v1/models/fmnist:predict",
                                              body, strlen (body));
        free (body);
        json_error_t error;
        json_t *json = answer.status == 200? json_loads (answer.body, 0, &error): NULL;
        int classes [PER_REQUEST];
        int got = json? s_classes (json, classes, PER_REQUEST): 0;
        c->failures += got != PER_REQUEST;
        for (int i = 0; i < got; i++)
            c->same += classes [i] == s_predicted [r * PER_REQUEST + i];
        c->answered += got;
        json_decref (json);
        free (answer.body);
    }
    return NULL;
}

//  A metric's value in the server's Prometheus text.
static double
s_metric (int port, const char *name)
{
    za_test_http_t answer = za_test_http (port, "GET", "/monitoring/prometheus/metrics", NULL, 0);
    cr_assert_eq (answer.status, 200);
    const char *line = strstr (answer.body, name);
    cr_assert_not_null (line, "no %s in %s", name, answer.body);
    double value = atof (strchr (line, ' ') + 1);
    free (answer.body);
    return value;
}

Test (serve, answers_the_test_set_from_concurrent_clients_as_predict_does)
{
    s_server_t server = s_serve (s_model, NULL);
    s_client_t clients [CLIENTS];
    pthread_t threads [CLIENTS];
    for (int c = 0; c < CLIENTS; c++) {
        clients [c] = (s_client_t) {.port = server.port, .client = c};
        cr_assert_eq (pthread_create (&threads [c], NULL, s_client, &clients [c]), 0);
    }
    int same = 0, answered = 0, failures = 0;
    for (int c = 0; c < CLIENTS; c++) {
        pthread_join (threads [c], NULL);
        same += clients [c].same, answered += clients [c].answered;
        failures += clients [c].failures;
    }
    printf ("serve: %d clients, %d images answered, %d as zactor-run predict; %.0f batches\n",
            CLIENTS, answered, same, s_metric (server.port, "zactor_serve_batches_total{"));
    cr_expect_eq (failures, 0);
    cr_expect_eq (answered, IMAGES);
    cr_expect_eq (same, IMAGES, "%d of %d classes are predict's", same, IMAGES);
    cr_expect_eq (s_metric (server.port, "zactor_serve_instances_total{"), IMAGES);
    cr_expect_eq (s_metric (server.port, "zactor_serve_batch_instances_total{"), IMAGES);
    //  The status and the metadata.
    za_test_http_t status = za_test_http (server.port, "GET", "/v1/models/fmnist", NULL, 0);
    json_t *json = s_json (&status);
    cr_expect_str_eq (json_string_value (json_object_get (json_array_get (
        json_object_get (json, "model_version_status"), 0), "version")), "300");
    json_decref (json), free (status.body);
    za_test_http_t metadata = za_test_http (server.port, "GET", "/v1/models/fmnist/metadata",
                                            NULL, 0);
    cr_expect_eq (metadata.status, 200);
    cr_expect (strstr (metadata.body, "\"serving_default\""), "%s", metadata.body);
    free (metadata.body);
    s_stop (&server);
}

typedef struct {
    int port, image, status, class_id;
} s_single_t;

static void *
s_single (void *arg)
{
    s_single_t *s = (s_single_t *) arg;
    char *body = s_body (s->image, 1, 0);
    za_test_http_t answer = za_test_http (s->port, "POST", "/v1/models/fmnist:predict", body,
                                          strlen (body));
    free (body);
    s->status = answer.status;
    json_error_t error;
    json_t *json = answer.status == 200? json_loads (answer.body, 0, &error): NULL;
    s->class_id = -1;
    if (json)
        s_classes (json, &s->class_id, 1);
    json_decref (json);
    free (answer.body);
    return NULL;
}

Test (serve, batches_concurrent_requests_up_to_the_batch_size)
{
    //  A batch of 4 waits (up to a minute) until 4 instances are queued: the
    //  4 single-image requests are answered by one batch.
    const char *flags [] = {"--max-batch-size", "4", "--batch-timeout-micros", "60000000",
                            "--num-batch-threads", "1", NULL};
    s_server_t server = s_serve (s_model, flags);
    s_single_t singles [4];
    pthread_t threads [4];
    for (int k = 0; k < 4; k++) {
        singles [k] = (s_single_t) {.port = server.port, .image = 100 + k};
        cr_assert_eq (pthread_create (&threads [k], NULL, s_single, &singles [k]), 0);
    }
    for (int k = 0; k < 4; k++) {
        pthread_join (threads [k], NULL);
        cr_expect_eq (singles [k].status, 200);
        cr_expect_eq (singles [k].class_id, s_predicted [100 + k]);
    }
    cr_expect_eq (s_metric (server.port, "zactor_serve_batches_total{"), 1);
    cr_expect_eq (s_metric (server.port, "zactor_serve_batch_instances_total{"), 4);
    s_stop (&server);
}

//  A bad request's answer: status and an "error" holding says.
static void
s_expect_error (int port, const char *method, const char *path, const char *body,
                int status, const char *says)
{
    za_test_http_t answer = za_test_http (port, method, path, body, body? strlen (body): 0);
    cr_expect_eq (answer.status, status, "%s %s: %d %s", method, path, answer.status,
                  answer.body);
    json_t *json = s_json (&answer);
    const char *error = json_string_value (json_object_get (json, "error"));
    cr_expect (error && strstr (error, says), "%s %s: '%s' does not say '%s'", method, path,
               answer.body, says);
    json_decref (json);
    free (answer.body);
}

//  Five images answered exactly: the server goes on.
static void
s_expect_serving (int port)
{
    char *body = s_body (0, 5, 0);
    za_test_http_t answer = za_test_http (port, "POST", "/v1/models/fmnist:predict", body,
                                          strlen (body));
    free (body);
    cr_assert_eq (answer.status, 200, "%s", answer.body);
    json_t *json = s_json (&answer);
    int classes [5];
    cr_expect_eq (s_classes (json, classes, 5), 5);
    for (int i = 0; i < 5; i++)
        cr_expect_eq (classes [i], s_predicted [i]);
    json_decref (json);
    free (answer.body);
}

static char *
s_base64 (const uint8_t *bytes, size_t size)
{
    static const char digits [] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *text = malloc ((size + 2) / 3 * 4 + 1), *at = text;
    for (size_t i = 0; i < size; i += 3) {
        uint32_t v = (uint32_t) bytes [i] << 16 | (i + 1 < size? bytes [i + 1] << 8: 0)
                   | (i + 2 < size? bytes [i + 2]: 0);
        *at++ = digits [v >> 18 & 63];
        *at++ = digits [v >> 12 & 63];
        *at++ = i + 1 < size? digits [v >> 6 & 63]: '=';
        *at++ = i + 2 < size? digits [v & 63]: '=';
    }
    *at = 0;
    return text;
}

Test (serve, bad_requests_get_tf_servings_error_and_the_server_goes_on)
{
    const char *flags [] = {"--max-body-bytes", "100000", NULL};
    s_server_t server = s_serve (s_model, flags);
    int port = server.port;
    const char *predict = "/v1/models/fmnist:predict";
    s_expect_error (port, "POST", predict, "{\"instances\": [[1, 2", 400, "JSON Parse error");
    s_expect_serving (port);
    s_expect_error (port, "POST", predict, "{\"images\": []}", 400,
                    "Missing 'inputs' or 'instances' key");
    s_expect_error (port, "POST", predict, "[1, 2]", 400, "Missing 'inputs' or 'instances'");
    //  One signature, TF Serving's default: another name is TF Serving's 400.
    s_expect_error (port, "POST", predict, "{\"signature_name\": \"nope\", \"instances\": "
                    "[[1]]}", 400, "Serving signature name: \"nope\" not found in signature "
                    "def");
    s_expect_error (port, "POST", predict, "{\"instances\": 7}", 400, "not a list");
    s_expect_error (port, "POST", predict, "{\"instances\": [[1, 2, 3]]}", 400,
                    "instance 0: its shape is [3]");
    //  A row one pixel short: the first (the image is 28 x 27), the second
    //  (its rows differ).
    for (int row = 0; row < 2; row++) {
        char *body = s_body (0, 2, 0);
        char *end = strstr (body, "]],[[");                   //  the first row's end
        if (row)
            end = strstr (end + 1, "]],[[");
        char *open = end;
        while (*open != '[')
            open--;                                           //  its last pixel
        memmove (open - 1, end + 1, strlen (end + 1) + 1);    //  ",[v]" gone
        s_expect_error (port, "POST", predict, body, 400, row? "instance 0: not a rectangular"
                                                             : "its shape is [28, 27, 1]");
        free (body);
    }
    char *body;
    s_expect_error (port, "POST", predict, "{\"instances\": [[\"a\"]]}", 400, "instance 0");
    s_expect_error (port, "POST", predict, "{\"instances\": [[1], {\"b64\": 5}]}", 400,
                    "instance 0");
    s_expect_error (port, "POST", predict, "{\"instances\": [{\"b64\": \"aGVsbG8=\"}]}", 400,
                    "does not decode");
    s_expect_error (port, "POST", predict, "{\"instances\": [{\"b64\": \"%%%\"}]}", 400,
                    "not base64");
    //  As TensorFlow Serving: nothing after base64's padding, b64 alone in
    //  its object, some instances, numbers a float holds.
    s_expect_error (port, "POST", predict,
                    "{\"instances\": [{\"b64\": \"aGVsbG8=@@@\"}]}", 400, "not base64");
    s_expect_error (port, "POST", predict,
                    "{\"instances\": [{\"b64\": \"aGVsbG8=\", \"zzz\": 1}]}", 400,
                    "holds other keys");
    s_expect_error (port, "POST", predict, "{\"instances\": []}", 400,
                    "No values in 'instances' array");
    body = malloc (784 * 2 + 64);
    char *at = body + sprintf (body, "{\"instances\": [[1e39");
    for (int k = 1; k < 784; k++)
        at += sprintf (at, ",0");
    sprintf (at, "]]}");
    s_expect_error (port, "POST", predict, body, 400, "finite");
    free (body);
    s_expect_serving (port);
    //  A body past --max-body-bytes: 413.
    body = s_body (0, 100, 0);
    s_expect_error (port, "POST", predict, body, 413, "larger than 100000 bytes");
    free (body);
    //  One whose Content-Length says so: 413 at once, the body not awaited
    //  (curl sends "Expect: 100-continue" and waits for the answer).
    za_test_http_t refused = za_test_http_raw (
        port, "POST /v1/models/fmnist:predict HTTP/1.1\r\nHost: localhost\r\n"
        "Content-Length: 1000000000000\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n",
        NULL, 0);
    cr_expect_eq (refused.status, 413, "%d %s", refused.status, refused.body);
    cr_expect (refused.body && strstr (refused.body, "larger than 100000 bytes"), "%s",
               refused.body);
    free (refused.body);
    s_expect_serving (port);
    //  A body within it whose images the model takes as more than 16 times
    //  it (600 PNGs of 1 x 1 pixel, 28 x 28 floats each): 400, not 1.9 MB.
    char *tiny = za_test_path ("tiny.png");
    uint8_t pixel = 128;
    cr_assert_eq (za_image_write_png (tiny, &pixel, 1, 1, 1), 0);
    size_t tiny_size;
    uint8_t *tiny_bytes = za_test_read_file (tiny, &tiny_size);
    char *tiny_b64 = s_base64 (tiny_bytes, tiny_size);
    json_t *many = json_pack ("{s:[]}", "instances");
    for (int i = 0; i < 600; i++)
        json_array_append_new (json_object_get (many, "instances"),
                               json_pack ("{s:s}", "b64", tiny_b64));
    body = json_dumps (many, JSON_COMPACT);
    cr_assert_lt (strlen (body), 100000);
    s_expect_error (port, "POST", predict, body, 400, "600 instances: at most 510 go in one "
                    "request");
    json_decref (many);
    free (body), free (tiny_b64), free (tiny_bytes), free (tiny);
    s_expect_error (port, "POST", "/v1/models/mnist:predict", "{}", 404,
                    "Servable not found for request: Latest(mnist)");
    s_expect_error (port, "POST", "/v1/models/fmnist/versions/7:predict", "{}", 404,
                    "Servable not found for request: Specific(fmnist, 7)");
    s_expect_error (port, "GET", predict, NULL, 405, "not this method");
    //  The status and the metadata are read, not written; a version is a number.
    s_expect_error (port, "PUT", "/v1/models/fmnist", "{}", 405, "not this method");
    s_expect_error (port, "DELETE", "/v1/models/fmnist/metadata", NULL, 405,
                    "not this method");
    s_expect_error (port, "POST", "/v1/models/fmnist/versions/:predict", "{}", 400,
                    "a version is a number");
    za_test_http_t zeros = za_test_http (port, "GET", "/v1/models/fmnist/versions/0300", NULL,
                                         0);
    cr_expect_eq (zeros.status, 200, "versions/0300 is 300: %s", zeros.body);
    free (zeros.body);
    s_expect_error (port, "GET", "/v2/models", NULL, 404, "Malformed request");
    s_expect_error (port, "GET", "/v1/models/fmnist:classify", NULL, 404, "Malformed request");
    //  The version that is served answers; so does an image as a PNG.
    char *png = za_test_path ("image.png");
    uint8_t pixels [784];
    for (int k = 0; k < 784; k++)
        pixels [k] = s_test->pixels? s_test->pixels [784 * 3 + k]
                                   : (uint8_t) lroundf (s_test->features [784 * 3 + k] * 255.0f);
    cr_assert_eq (za_image_write_png (png, pixels, 28, 28, 1), 0);
    size_t size;
    uint8_t *bytes = za_test_read_file (png, &size);
    char *b64 = s_base64 (bytes, size);
    json_t *root = json_pack ("{s:[{s:s}]}", "instances", "b64", b64);
    body = json_dumps (root, JSON_COMPACT);
    za_test_http_t answer = za_test_http (port, "POST",
                                          "/v1/models/fmnist/versions/300:predict", body,
                                          strlen (body));
    cr_expect_eq (answer.status, 200, "%s", answer.body);
    json_t *json = s_json (&answer);
    int class_id = -1;
    cr_expect_eq (s_classes (json, &class_id, 1), 1);
    cr_expect_eq (class_id, s_predicted [3], "the PNG is class %d, predict said %d", class_id,
                  s_predicted [3]);
    json_decref (json), json_decref (root);
    free (answer.body), free (body), free (b64), free (bytes), free (png);
    s_expect_serving (port);
    cr_expect_geq (s_metric (port, "zactor_serve_requests_total{model=\"fmnist\",code=\"4xx\"}"),
                   17);
    s_stop (&server);
}

Test (serve, serves_a_newer_checkpoint_once_it_loads)
{
    //  A model dir of its own, at step 100.
    char *dir = za_test_path ("reloaded");
    const char *train [] = {"--max-steps", "100", "--model-dir", dir, NULL};
    za_test_result_t result = za_test_run (train, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    za_test_result_free (&result);
    const char *flags [] = {"--poll-secs", "0.1", "--model-name", "fmnist", NULL};
    s_server_t server = s_serve (dir, flags);
    //  A corrupt newer checkpoint: refused, step 100 still served.
    char *good = za_checkpoint_path (dir, 100), *bad = za_checkpoint_path (dir, 5000);
    size_t size;
    uint8_t *bytes = za_test_read_file (good, &size);
    bytes [size - 10] ^= 0xff;
    FILE *file = fopen (bad, "wb");
    fwrite (bytes, 1, size, file);
    fclose (file);
    free (bytes);
    char *text = za_test_wait_for_text (server.err, "does not load", 60);
    cr_expect (strstr (text, "still serving step 100"), "%s", text);
    free (text);
    cr_expect_eq (s_metric (server.port, "zactor_serve_model_step{"), 100);
    //  Training on to step 200 (from 100: the corrupt file is passed over).
    const char *more [] = {"--max-steps", "200", "--model-dir", dir, NULL};
    result = za_test_run (more, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    za_test_result_free (&result);
    text = za_test_wait_for_text (server.err, "now serving step 200", 60);
    cr_expect (strstr (text, "now serving step 200"), "%s", text);
    free (text);
    za_test_http_t status = za_test_http (server.port, "GET", "/v1/models/fmnist", NULL, 0);
    cr_expect (status.body && strstr (status.body, "\"version\":\"200\""), "%s", status.body);
    free (status.body);
    cr_expect_eq (s_metric (server.port, "result=\"loaded\"}"), 1);
    cr_expect_eq (s_metric (server.port, "result=\"failed\"}"), 1);
    //  A newer checkpoint copied in slowly: seen cut short (refused), then
    //  whole, it is served (the dir's steps alone did not change). (The
    //  corrupt one of step 5000 gone first.)
    cr_assert_eq (unlink (bad), 0);
    char *other = za_test_path ("reloaded-300");
    const char *further [] = {"--max-steps", "300", "--model-dir", other, NULL};
    result = za_test_run (further, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    za_test_result_free (&result);
    char *from = za_checkpoint_path (other, 300), *to = za_checkpoint_path (dir, 300);
    bytes = za_test_read_file (from, &size);
    file = fopen (to, "wb");
    fwrite (bytes, 1, size / 2, file);
    fclose (file);
    text = za_test_wait_for_text (server.err, "step 300 does not load", 60);
    cr_expect (strstr (text, "step 300 does not load"), "%s", text);
    free (text);
    char temp [4200];
    snprintf (temp, sizeof temp, "%s.part", to);
    file = fopen (temp, "wb");
    fwrite (bytes, 1, size, file);
    fclose (file);
    cr_assert_eq (rename (temp, to), 0);
    free (bytes);
    text = za_test_wait_for_text (server.err, "now serving step 300", 60);
    cr_expect (strstr (text, "now serving step 300"), "%s", text);
    free (text);
    s_stop (&server);
    free (from), free (to), free (other);
    free (good), free (bad), free (dir);
}

//  --precision as training takes it: mixed_bfloat16's products where the
//  CPU computes bf16 (said at the start), float32's classes on these images
//  but where one is that close; another --device than the CPU's is said and
//  not used.
Test (serve, computes_in_the_precision_asked_on_the_cpu)
{
    za_error_set_quiet (1);
    int bf16 = za_backend_policy (za_backend_cpu (), ZA_POLICY_BF16) != NULL;
    za_error_set_quiet (0);
    const char *flags [] = {"--precision", bf16? "mixed_bfloat16": "fp32", "--device", "cuda",
                            NULL};
    s_server_t server = s_serve (s_model, flags);
    char *text = (char *) za_test_read_file (server.err, NULL);
    cr_expect (strstr (text, bf16? "input 28x28x1, mixed_bfloat16)": "input 28x28x1, float32)"),
               "%s", text);
    cr_expect (strstr (text, "serve computes on the CPU: --device cuda is not used"), "%s",
               text);
    free (text);
    char *body = s_body (0, 5, 0);
    za_test_http_t answer = za_test_http (server.port, "POST", "/v1/models/fmnist:predict",
                                          body, strlen (body));
    free (body);
    cr_assert_eq (answer.status, 200, "%s", answer.body);
    json_t *json = s_json (&answer);
    int classes [5], same = 0;
    cr_expect_eq (s_classes (json, classes, 5), 5);
    for (int i = 0; i < 5; i++)
        same += classes [i] == s_predicted [i];
    cr_expect_geq (same, 4, "%d of 5 classes as float32's", same);
    json_decref (json);
    free (answer.body);
    s_stop (&server);
}

Test (serve, refuses_what_it_cannot_serve)
{
    const char *no_dir [] = {"serve", "--model-dir", "/nonexistent/za_model", NULL};
    za_test_result_t result = za_test_run (no_dir, 60);
    cr_expect_eq (result.exit_code, 1, "%s", result.err);
    cr_expect (strstr (result.err, "no model dir or checkpoint '/nonexistent/za_model'"),
               "%s", result.err);
    za_test_result_free (&result);
    char *empty = za_test_path ("empty");
    cr_assert_eq (za_mkdirs (empty), 0);
    const char *no_ckpt [] = {"serve", "--model-dir", empty, NULL};
    result = za_test_run (no_ckpt, 60);
    cr_expect_eq (result.exit_code, 1, "%s", result.err);
    cr_expect (strstr (result.err, "no checkpoint"), "%s", result.err);
    za_test_result_free (&result);
    free (empty);
    //  A port another server holds.
    s_server_t server = s_serve (s_model, NULL);
    char port [16];
    snprintf (port, sizeof port, "%d", server.port);
    const char *taken [] = {"serve", "--model-dir", s_model, "--port", port, NULL};
    result = za_test_run (taken, 60);
    cr_expect_eq (result.exit_code, 1, "%s", result.err);
    cr_expect (strstr (result.err, "cannot listen"), "%s", result.err);
    za_test_result_free (&result);
    s_expect_serving (server.port);
    s_stop (&server);
    //  A name the metrics' labels or a URL would change (a quote broke the
    //  Prometheus text; a ':' made the model unreachable).
    const char *names [] = {"fm\"x", "a:b"};
    for (int n = 0; n < 2; n++) {
        const char *named [] = {"serve", "--model-dir", s_model, "--model-name", names [n],
                                NULL};
        result = za_test_run (named, 60);
        cr_expect_eq (result.exit_code, 2, "%s: %s", names [n], result.err);
        cr_expect (strstr (result.err, "give --model-name"), "%s", result.err);
        za_test_result_free (&result);
    }
}

//  Image i of the test set as 28 x 56 gray: its pixels on the left half (c
//  0) or the right (c 1) of a black canvas, into path as a PNG.
static void
s_wide_png (const char *path, int i, int c)
{
    uint8_t canvas [28 * 56] = {0};
    for (int y = 0; y < 28; y++)
        for (int x = 0; x < 28; x++) {
            size_t k = (size_t) 784 * i + (size_t) y * 28 + (size_t) x;
            canvas [y * 56 + c * 28 + x] = s_test->pixels? s_test->pixels [k]
                                         : (uint8_t) lroundf (s_test->features [k] * 255.0f);
        }
    cr_assert_eq (za_image_write_png (path, canvas, 28, 56, 1), 0);
}

//  A b64 image is decoded as training read its images (input.json): a model
//  trained at 16 x 16 with --resize bilinear and --crop-to-aspect-ratio from
//  28 x 56 PNGs answers for one of them what predict says of it (serve
//  decoded by its own flags' defaults, area and uncropped: other pixels).
//  Such flags given to serve are refused: a reload would not hold them.
Test (serve, decodes_an_image_as_its_training_read_images)
{
    char *data = za_test_path ("wide"), *one = za_test_path ("one");
    char path [PATH_MAX];
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < 8; i++) {
            snprintf (path, sizeof path, "%s/%c", data, 'a' + c);
            cr_assert_eq (za_mkdirs (path), 0);
            snprintf (path, sizeof path, "%s/%c/%d.png", data, 'a' + c, i);
            s_wide_png (path, 8 * c + i, c);
        }
    cr_assert_eq (za_mkdirs (one), 0);
    snprintf (path, sizeof path, "%s/x.png", one);
    s_wide_png (path, 20, 1);
    char *dir = za_test_path ("wide-model");
    const char *train [] = {"--train-data", data, "--image-size", "16", "--channels", "1",
                            "--resize", "bilinear", "--crop-to-aspect-ratio", "--model",
                            "flatten dense(2)", "--max-steps", "30", "--batch-size", "8",
                            "--threads", "1", "--no-eval", "--model-dir", dir, NULL};
    za_test_result_t result = za_test_run (train, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    za_test_result_free (&result);
    const char *predict [] = {"predict", "--model-dir", dir, "--data", one, NULL};
    result = za_test_run (predict, RUN_TIMEOUT_S);
    cr_assert_eq (result.exit_code, 0, "%s", result.err);
    json_t *line = json_loads (result.out, JSON_DISABLE_EOF_CHECK, NULL);
    json_t *expected = json_object_get (line, "probabilities");
    cr_assert (json_is_object (expected), "%s", result.out);
    za_test_result_free (&result);
    //  The same file through serve, as TF Serving's b64.
    s_server_t server = s_serve (dir, NULL);
    size_t size;
    uint8_t *bytes = za_test_read_file (path, &size);
    char *b64 = s_base64 (bytes, size);
    json_t *root = json_pack ("{s:[{s:s}]}", "instances", "b64", b64);
    char *body = json_dumps (root, JSON_COMPACT);
    za_test_http_t answer = za_test_http (server.port, "POST", "/v1/models/wide-model:predict",
                                          body, strlen (body));
    cr_assert_eq (answer.status, 200, "%s", answer.body);
    json_t *got = s_json (&answer);
    json_t *row = json_array_get (json_object_get (got, "predictions"), 0);
    json_t *p = json_object_get (row, "probabilities");
    cr_assert_eq (json_array_size (p), 2, "%s", answer.body);
    for (int k = 0; k < 2; k++) {
        double want = json_number_value (json_object_get (expected, k? "b": "a"));
        double have = json_number_value (json_array_get (p, (size_t) k));
        cr_expect (fabs (want - have) < 1e-5, "class %d: serve %.6f, predict %.6f", k, have,
                   want);
    }
    json_decref (got), json_decref (root), json_decref (line);
    free (answer.body), free (body), free (b64), free (bytes);
    s_stop (&server);
    const char *flagged [] = {"serve", "--model-dir", dir, "--resize", "area", NULL};
    result = za_test_run (flagged, 60);
    cr_expect_eq (result.exit_code, 2, "%s", result.err);
    cr_expect (strstr (result.err, "leave out --resize"), "%s", result.err);
    za_test_result_free (&result);
    free (dir), free (one), free (data);
}
