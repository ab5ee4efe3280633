/*  pslite_bench: the push+reply round trip of dmlc/ps-lite, for
    bench/ps_lite.sh (zactor's bench_wire beside it).

    One binary, started three times with DMLC_ROLE=scheduler, server and
    worker (DMLC_NUM_SERVER=1, DMLC_NUM_WORKER=1, DMLC_PS_ROOT_URI/PORT and
    DMLC_NODE_HOST=127.0.0.1, as ps-lite's tests/local.sh sets them); the
    worker and the server talk over ZeroMQ tcp loopback.

    Server: a KVServerDefaultHandle-like handle, but with one value array per
    key (the keys are pushed with lens): the first push of a key stores its
    floats, later ones add into them; a pull answers the stored array (an
    SArray, so ps-lite sends it without a copy).

    Worker: per size, one key of BYTES/4 floats, all SArrays (zero-copy):
      push_pull: ZPush, Wait, then ZPull, Wait (two round trips),
      fused:     ZPushPull, Wait (one round trip: the push, answered by the
                 summed values), if this ps-lite has it (it has had it since 2017).
    After a warm-up of about 0.2 s the two alternate, iteration by iteration,
    for about SECONDS; each is timed alone and the medians are printed.

    pslite_bench SECONDS BYTES...   (in each role; only the worker prints)
      -> pslite bytes=B iters=N push_pull_us=F fused_us=F  */
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>
#include <vector>
#include "ps/ps.h"

using namespace ps;

namespace {

struct SumHandle {
    void operator()(const KVMeta &meta, const KVPairs<float> &req, KVServer<float> *server) {
        KVPairs<float> res;
        size_t off = 0;
        for (size_t i = 0; i < req.keys.size(); i++) {
            Key key = req.keys[i];
            SArray<float> &w = store[key];
            if (meta.push) {
                size_t n = req.lens.empty() ? 1 : (size_t) req.lens[i];
                if (w.size() != n) {
                    w.CopyFrom(req.vals.data() + off, n);
                } else {
                    const float *g = req.vals.data() + off;
                    float *p = w.data();
                    for (size_t j = 0; j < n; j++)
                        p[j] += g[j];
                }
                off += n;
            }
        }
        if (meta.pull) {
            //  one key per request here: answer its array as it is
            CHECK_EQ(req.keys.size(), 1u);
            res.keys = req.keys;
            res.vals = store[req.keys[0]];
            res.lens = SArray<int>(1, (int) res.vals.size());
        }
        server->Response(meta, res);
    }
    std::unordered_map<Key, SArray<float>> store;
};

double now_us() {
    return std::chrono::duration<double, std::micro>(
        std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void run_worker(double seconds, const std::vector<size_t> &sizes) {
    KVWorker<float> kv(0, 0);
    for (size_t s = 0; s < sizes.size(); s++) {
        size_t n = sizes[s] / sizeof(float);
        SArray<Key> keys(1, (Key) s);
        SArray<float> vals(n, 1e-6f);
        SArray<float> outs(n, 0.0f);
        SArray<int> lens(1, (int) n);
        SArray<int> out_lens(1, 0);

        auto push_pull = [&]() {
            double t0 = now_us();
            kv.Wait(kv.ZPush(keys, vals, lens));
            kv.Wait(kv.ZPull(keys, &outs, &out_lens));
            return now_us() - t0;
        };
        auto fused = [&]() {
            double t0 = now_us();
            kv.Wait(kv.ZPushPull(keys, vals, &outs, &out_lens));
            return now_us() - t0;
        };
        //  warm-up, which also sizes the timed run
        double t0 = now_us(), spent = 0;
        int warm = 0;
        while ((spent = now_us() - t0) < 0.2e6 || warm < 5) {
            push_pull();
            fused();
            warm++;
        }
        int iters = std::max(11, (int) (seconds * 1e6 / (spent / warm)));
        std::vector<double> a, b;
        for (int i = 0; i < iters; i++) {
            a.push_back(push_pull());
            b.push_back(fused());
        }
        CHECK_EQ(out_lens[0], (int) n);
        std::printf("pslite bytes=%zu iters=%d push_pull_us=%.1f fused_us=%.1f\n",
                    n * sizeof(float), iters, median(a), median(b));
        std::fflush(stdout);
    }
}

}  // namespace

int main(int argc, char *argv[]) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s SECONDS BYTES...\n", argv[0]);
        return 2;
    }
    double seconds = std::atof(argv[1]);
    std::vector<size_t> sizes;
    for (int i = 2; i < argc; i++)
        sizes.push_back((size_t) std::strtoull(argv[i], nullptr, 10));

    Start(0);
    KVServer<float> *server = nullptr;
    SumHandle handle;
    if (IsServer()) {
        server = new KVServer<float>(0);
        server->set_request_handle(handle);
    }
    if (IsWorker())
        run_worker(seconds, sizes);
    Finalize(0, true);
    delete server;
    return 0;
}
