/*  bench_serve: a load generator for an HTTP predict endpoint (zactor-run
    serve, or TensorFlow Serving itself: the same REST API). CLIENTS threads,
    each on one keep-alive connection, post the same body (a JSON request
    of IMAGES Fashion-MNIST test images, row format) back to back for
    SECONDS after a one-second warm-up, and time every answer. Prints
    requests/s, images/s and the latency's p50, p90 and p99 in ms; exit 1
    when any answer was not 200.

      bench_serve PORT PATH CLIENTS SECONDS [IMAGES]
      bench_serve 8501 /v1/models/fmnist:predict 8 10 1                    */
#define _GNU_SOURCE                     //  strcasestr
#include "za/za_idx.h"
#include "za/za_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_CLIENTS 1024
#define MAX_SAMPLES 4000000

typedef struct {
    int port;
    const char *request;                //  the whole HTTP request
    size_t request_size;
    double warm_until, stop_at;
    double *latencies;                  //  this client's, seconds
    long capacity, count, failures;
} s_client_t;

//  Reads one HTTP response (Content-Length framed) from fd. Its status, or
//  -1 when the connection ended.
static int
s_response (int fd, char *buffer, size_t size)
{
    size_t got = 0;
    long body = -1;
    size_t head = 0;
    while (1) {
        ssize_t n = recv (fd, buffer + got, size - got - 1, 0);
        if (n <= 0)
            return -1;
        got += (size_t) n;
        buffer [got] = 0;
        if (body < 0) {
            char *end = strstr (buffer, "\r\n\r\n");
            if (!end)
                continue;
            head = (size_t) (end - buffer) + 4;
            const char *length = strcasestr (buffer, "Content-Length:");
            body = length? atol (length + 15): 0;
        }
        if (got >= head + (size_t) body)
            break;
        if (got + 1 >= size)
            return -1;                  //  a response larger than the buffer
    }
    int status = 0;
    return sscanf (buffer, "HTTP/1.%*d %d", &status) == 1? status: -1;
}

static int
s_connect (int port)
{
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons ((uint16_t) port)};
    addr.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    int one = 1;
    setsockopt (fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect (fd, (struct sockaddr *) &addr, sizeof addr)) {
        close (fd);
        return -1;
    }
    return fd;
}

static void *
s_client (void *arg)
{
    s_client_t *c = (s_client_t *) arg;
    size_t size = 1 << 22;
    char *buffer = malloc (size);
    int fd = s_connect (c->port);
    while (fd >= 0 && buffer) {
        double start = za_clock_mono ();
        if (start >= c->stop_at)
            break;
        int status = -1;
        if (send (fd, c->request, c->request_size, MSG_NOSIGNAL) == (ssize_t) c->request_size)
            status = s_response (fd, buffer, size);
        double took = za_clock_mono () - start;
        if (status < 0) {               //  the server closed it: a new connection
            close (fd);
            fd = s_connect (c->port);
        }
        if (start < c->warm_until)
            continue;
        if (status != 200)
            c->failures++;
        else
        if (c->count < c->capacity)
            c->latencies [c->count++] = took;
    }
    if (fd >= 0)
        close (fd);
    free (buffer);
    return NULL;
}

static int
s_compare (const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y? -1: x > y;
}

int
main (int argc, char **argv)
{
    if (argc < 5) {
        fprintf (stderr, "usage: bench_serve PORT PATH CLIENTS SECONDS [IMAGES]\n");
        return 2;
    }
    int port = atoi (argv [1]), clients = atoi (argv [3]);
    double seconds = atof (argv [4]);
    int images = argc > 5? atoi (argv [5]): 1;
    if (clients < 1 || clients > MAX_CLIENTS || images < 1 || seconds <= 0) {
        fprintf (stderr, "bench_serve: 1..%d clients, 1 or more images, seconds > 0\n",
                 MAX_CLIENTS);
        return 2;
    }
    za_dataset_t *test = za_idx_load_dir (ZA_FASHION_MNIST_DIR, "t10k");
    if (!test)
        return 1;
    //  The body: {"instances": [[[[p], ...], ...], ...]}.
    size_t capacity = (size_t) images * 784 * 8 + 64, used = 0;
    char *body = malloc (capacity);
    used += (size_t) sprintf (body, "{\"instances\": [");
    for (int i = 0; i < images; i++) {
        used += (size_t) sprintf (body + used, "%s[", i? ",": "");
        for (int y = 0; y < 28; y++) {
            used += (size_t) sprintf (body + used, "%s[", y? ",": "");
            for (int x = 0; x < 28; x++) {
                size_t at = (size_t) (i % test->count) * 784 + (size_t) (y * 28 + x);
                int p = test->pixels? test->pixels [at]: (int) (test->features [at] * 255.0f + 0.5f);
                used += (size_t) sprintf (body + used, "%s[%d]", x? ",": "", p);
            }
            used += (size_t) sprintf (body + used, "]");
        }
        used += (size_t) sprintf (body + used, "]");
    }
    used += (size_t) sprintf (body + used, "]}");
    size_t request_size = used + 512;
    char *request = malloc (request_size);
    request_size = (size_t) snprintf (request, request_size, "POST %s HTTP/1.1\r\n"
                                      "Host: localhost\r\nContent-Type: application/json\r\n"
                                      "Content-Length: %zu\r\n\r\n%s", argv [2], used, body);
    s_client_t *c = calloc ((size_t) clients, sizeof *c);
    pthread_t *threads = calloc ((size_t) clients, sizeof *threads);
    double now = za_clock_mono ();
    for (int k = 0; k < clients; k++) {
        c [k] = (s_client_t) {.port = port, .request = request, .request_size = request_size,
                              .warm_until = now + 1, .stop_at = now + 1 + seconds,
                              .capacity = MAX_SAMPLES / clients,
                              .latencies = malloc (MAX_SAMPLES / (size_t) clients
                                                   * sizeof (double) + sizeof (double))};
        pthread_create (&threads [k], NULL, s_client, &c [k]);
    }
    long count = 0, failures = 0;
    double *all = malloc (MAX_SAMPLES * sizeof (double));
    for (int k = 0; k < clients; k++) {
        pthread_join (threads [k], NULL);
        for (long i = 0; i < c [k].count && count < MAX_SAMPLES; i++)
            all [count++] = c [k].latencies [i];
        failures += c [k].failures;
        free (c [k].latencies);
    }
    qsort (all, (size_t) count, sizeof *all, s_compare);
    double p50 = count? all [count / 2]: 0, p90 = count? all [count * 9 / 10]: 0;
    double p99 = count? all [count * 99 / 100]: 0;
    printf ("clients %4d  images/request %3d  requests/s %8.1f  images/s %9.1f  "
            "p50 %7.2f ms  p90 %7.2f ms  p99 %7.2f ms  failed %ld\n", clients, images,
            count / seconds, count * images / seconds, p50 * 1e3, p90 * 1e3, p99 * 1e3,
            failures);
    free (all), free (c), free (threads), free (request), free (body);
    za_dataset_destroy (&test);
    return failures? 1: 0;
}
