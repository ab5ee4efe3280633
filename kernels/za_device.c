/*  za_device.c: --device. Parses the device text and finds its back end: the
    CPU's is linked in, CUDA's is a module loaded on first use (cuBLAS alone
    costs ~75 ms to load, which no CPU run should pay).                      */
#include "za/za_kernels.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef ZA_CUDA_MODULE_PATHS
#   define ZA_CUDA_MODULE_PATHS "libzactor_cuda.so"
#endif

int
za_device_parse (const char *text, za_device_t *device)
{
    memset (device, 0, sizeof *device);
    if (!text || strcmp (text, "cpu") == 0)
        return 0;
    if (strcmp (text, "cpu-staged") == 0 || strcmp (text, "cpu-staged:all") == 0) {
        device->kind = ZA_DEVICE_CPU_STAGED;
        device->index = text [10]? ZA_DEVICE_ALL: 0;
        return 0;
    }
    if (strncmp (text, "cuda", 4) == 0) {
        device->kind = ZA_DEVICE_CUDA;
        if (text [4] == 0)
            return 0;
        if (strcmp (text + 4, ":all") == 0) {
            device->index = ZA_DEVICE_ALL;
            return 0;
        }
        char *end = NULL;
        long index = text [4] == ':' && text [5] >= '0' && text [5] <= '9'
                   ? strtol (text + 5, &end, 10): -1;
        if (end && *end == 0 && index >= 0 && index < ZA_DEVICE_MAX) {
            device->index = (int) index;
            return 0;
        }
    }
    memset (device, 0, sizeof *device);
    return za_error ("unknown device '%s': use cpu, cuda, cuda:N (N from 0 to %d) or "
                     "cuda:all", text, ZA_DEVICE_MAX - 1);
}

//  The place of the policy named by `len` bytes at `name` among
//  ZA_POLICY_CHOICES ("name" or "alias=name", the names in za_policy_t's
//  order), through its alias; -1 when none.
static int
s_policy_index (const char *name, size_t len)
{
    const char *target = NULL;
    size_t target_len = 0;
    int index = 0;
    const char *at = ZA_POLICY_CHOICES;
    while (*at) {
        size_t n = strcspn (at, "|");
        const char *equals = memchr (at, '=', n);
        size_t key = equals? (size_t) (equals - at): n;
        if (key == len && strncmp (at, name, len) == 0) {
            if (!equals)
                return index;
            target = equals + 1;
            target_len = n - key - 1;
        }
        index += !equals;
        at += n + (at [n] == '|');
    }
    return target? s_policy_index (target, target_len): -1;
}

int
za_policy_parse (const char *text, za_policy_t *policy)
{
    *policy = ZA_POLICY_FP32;
    if (!text)
        return 0;
    int index = s_policy_index (text, strlen (text));
    if (index < 0)
        return za_error ("unknown precision '%s': use fp32, mixed_bfloat16, mixed_float16 or "
                         "auto", text);
    *policy = (za_policy_t) index;
    return 0;
}

int
za_precision_parse (const char *text, za_precision_t *precision, int *is_auto)
{
    za_policy_t policy;
    int rc = za_policy_parse (text, &policy);
    *is_auto = policy == ZA_POLICY_AUTO;
    *precision = *is_auto? ZA_PRECISION_FP32: (za_precision_t) policy;
    return rc;
}

const char *
za_precision_text (za_precision_t precision)
{
    return precision == ZA_PRECISION_BF16? "mixed_bfloat16"
         : precision == ZA_PRECISION_FP16? "mixed_float16": "float32";
}

const za_backend_t *
za_backend_policy (const za_backend_t *be, za_policy_t policy)
{
    if (!be)
        return NULL;
    if (policy == ZA_POLICY_AUTO)
        return be->mixed (be->native (ZA_PRECISION_BF16)? ZA_PRECISION_BF16: ZA_PRECISION_FP32);
    return be->mixed ((za_precision_t) policy);
}

const za_backend_t *
za_backend_mixed (const za_backend_t *be, const char *text)
{
    za_policy_t policy;
    if (!be || za_policy_parse (text, &policy))
        return NULL;
    return za_backend_policy (be, policy);
}

const char *
za_device_text (const za_device_t *device, char *buf, size_t size)
{
    if (device->kind == ZA_DEVICE_CUDA && device->index == ZA_DEVICE_ALL)
        snprintf (buf, size, "cuda:all");
    else
    if (device->kind == ZA_DEVICE_CUDA)
        snprintf (buf, size, "cuda:%d", device->index);
    else
        snprintf (buf, size, "%s", device->kind != ZA_DEVICE_CPU_STAGED? "cpu"
                                 : device->index == ZA_DEVICE_ALL? "cpu-staged:all"
                                 : "cpu-staged");
    return buf;
}

//  The module is loaded once; what went wrong is kept to be said again.
static pthread_once_t s_cuda_once = PTHREAD_ONCE_INIT;
static const za_backend_t *s_cuda;
static char s_cuda_error [ZA_ERROR_MAX_CHARS];

//  The module's messages: while it opens, kept, to be said once by whoever
//  asks for the device; after, errors as any other.
static int
s_module_error (const char *fmt, ...)
{
    char message [ZA_ERROR_MAX_CHARS];
    va_list args;
    va_start (args, fmt);
    vsnprintf (message, sizeof message, fmt, args);
    va_end (args);
    if (s_cuda)
        return za_error ("%s", message);
    snprintf (s_cuda_error, sizeof s_cuda_error, "%s", message);
    return -1;
}

static void
s_cuda_load (void)
{
    const char *forced = getenv ("ZA_CUDA_LIBRARY");
    char paths [ZA_ERROR_MAX_CHARS];
    snprintf (paths, sizeof paths, "%s", forced && *forced? forced: ZA_CUDA_MODULE_PATHS);
    void *module = NULL;
    char why [ZA_ERROR_MAX_CHARS / 2] = "no path to try";
    char *save = NULL;
    for (char *path = strtok_r (paths, ":", &save); path && !module;
         path = strtok_r (NULL, ":", &save)) {
        module = dlopen (path, RTLD_NOW | RTLD_LOCAL);
        const char *error = module? NULL: dlerror ();
        if (error) {
            snprintf (why, sizeof why, "%s", error);
            //  Asked again, glibc frees the message it keeps for this
            //  thread (else LeakSanitizer may find it at a busy exit).
            dlerror ();
        }
    }
    if (!module) {
        snprintf (s_cuda_error, sizeof s_cuda_error,
                  "--device cuda: the CUDA back end could not be loaded (%s). Build with "
                  "-DZA_CUDA=ON where the CUDA Toolkit is installed, or use --device cpu",
                  why);
        return;
    }
    za_backend_open_fn *open_fn = (za_backend_open_fn *) dlsym (module, ZA_CUDA_ENTRY);
    if (!open_fn) {
        snprintf (s_cuda_error, sizeof s_cuda_error,
                  "--device cuda: the CUDA back end has no %s: a module of another "
                  "version? Rebuild zactor", ZA_CUDA_ENTRY);
        return;
    }
    s_cuda = open_fn (s_module_error);
}

const za_backend_t *
za_device_backend (const za_device_t *device, int *first, int *count)
{
    *first = 0;
    *count = 1;
    if (device->kind == ZA_DEVICE_CPU)
        return za_backend_cpu ();
    if (device->kind == ZA_DEVICE_CPU_STAGED) {
        if (device->index == ZA_DEVICE_ALL)
            *count = ZA_STAGED_DEVICES;
        return za_backend_cpu_staged ();
    }
    pthread_once (&s_cuda_once, s_cuda_load);
    if (!s_cuda) {
        za_error ("%s", s_cuda_error);
        return NULL;
    }
    if (device->index == ZA_DEVICE_ALL)
        *count = s_cuda->device_count;
    else
    if (device->index >= s_cuda->device_count) {
        za_error ("--device cuda:%d: this machine has %d GPU%s (cuda:0 to cuda:%d)",
                  device->index, s_cuda->device_count,
                  s_cuda->device_count == 1? "": "s", s_cuda->device_count - 1);
        return NULL;
    }
    else
        *first = device->index;
    return s_cuda;
}
