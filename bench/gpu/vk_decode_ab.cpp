// Decode (and prompt) tokens/s with the Vulkan layer observing and paused, inside one process.
//
// Why in one process: two identical llama-bench invocations on the GPU machine differ by up to ±8% in decode
// (vCPU placement, clocks), which hides a 1% effect (BENCHMARKS.md, "Vulkan layer on a GPU driver"). Here one
// process runs with the layer enabled (VK_ADD_LAYER_PATH + VK_INSTANCE_LAYERS=VK_LAYER_BACKSCOPE_dispatch, as
// `backscope trace` sets them) and switches observation between rounds through the layer's exported
// `backscope_vk_set_observing` (crates/vklayer/src/switch.rs), found with dlsym:
//   observed: the layer follows command buffers and counts every submitted dispatch (what a trace costs);
//   plain:    the layer only forwards calls (the loader-layer trampoline stays: a layer cannot leave the
//             dispatch chain of a live device; its cost per call is bench/vklayer_dispatch.sh's subject).
// The layer's writer thread runs in both arms. Rounds alternate in ABBA groups after warm-up rounds; with MODE=aa
// both arms are plain: the A/A control that shows the method's resolution.
//
// A round is llama-bench's test of that kind: tg clears the KV cache and decodes N single tokens (random ids, one
// llama_decode + llama_synchronize each); pp clears the KV cache and decodes one batch of N random tokens. A tg round
// times its last N-1 tokens: the first after a switch records command buffers the layer has not seen in that state,
// which no token of a traced process pays in its steady state, and a short round (N=8, about 10 ms of an H200's
// decode) keeps a group of four inside one speed state of a host whose cores change speed every second or so
// (docs/validation/gpu-2026-12-05-submission-cost, session 34).
// Usage: vk_decode_ab MODEL.gguf GROUPS [N] [ab|aa] [tg|pp]
// Prints one JSON line per round and a summary line: median tokens/s per arm, the median of the per-group ratios
// B/A (each group is one ABBA block, so the ratio is paired in time) and a 95% bootstrap interval of that median.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <link.h>
#include <random>
#include <string>
#include <vector>

#include "llama.h"

namespace {

using SetObserving = int (*)(int);

// The layer is loaded by the Vulkan loader (RTLD_LOCAL): find it among the loaded objects by name, then reopen it
// without loading anything to look its switch up.
int find_layer(dl_phdr_info* info, size_t, void* out) {
    const char* name = info->dlpi_name;
    if (name && strstr(name, "libbackscope_vklayer")) {
        *static_cast<std::string*>(out) = name;
        return 1;
    }
    return 0;
}

SetObserving layer_switch() {
    std::string path;
    dl_iterate_phdr(find_layer, &path);
    if (path.empty()) return nullptr;
    void* handle = dlopen(path.c_str(), RTLD_NOLOAD | RTLD_LAZY);
    if (!handle) return nullptr;
    fprintf(stderr, "layer %s\n", path.c_str());
    return reinterpret_cast<SetObserving>(dlsym(handle, "backscope_vk_set_observing"));
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// 95% percentile-bootstrap interval of the median of `v` (fixed seed: the same data give the same interval).
std::pair<double, double> bootstrap_median(const std::vector<double>& v, int resamples = 4000) {
    std::mt19937 rng(12345);
    std::uniform_int_distribution<size_t> pick(0, v.size() - 1);
    std::vector<double> medians, sample(v.size());
    for (int r = 0; r < resamples; ++r) {
        for (double& x : sample) x = v[pick(rng)];
        medians.push_back(median(sample));
    }
    std::sort(medians.begin(), medians.end());
    return {medians[resamples * 25 / 1000], medians[resamples * 975 / 1000]};
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL.gguf GROUPS [N] [ab|aa] [tg|pp]\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, nullptr, _IOLBF, 0);  // one line per round, visible as the run goes
    const char* model_path = argv[1];
    const int groups = atoi(argv[2]);
    const int n = argc > 3 ? atoi(argv[3]) : 128;
    const bool control = argc > 4 && strcmp(argv[4], "aa") == 0;
    const bool prompt = argc > 5 && strcmp(argv[5], "pp") == 0;
    if (groups < 2 || n < (prompt ? 1 : 2) || n > 4096) {
        fprintf(stderr, "GROUPS must be >= 2 and N in 1..4096 (2..4096 for tg)\n");
        return 2;
    }
    const int timed = prompt ? n : n - 1;  // tg: the first token of a round is not timed (see the header)

    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 99;
    llama_model* model = llama_model_load_from_file(model_path, mp);
    if (!model) return 1;
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = prompt ? n + 16 : n + 512;
    cp.n_batch = prompt ? n : 512;
    cp.n_ubatch = prompt ? n : 512;
    llama_context* ctx = llama_init_from_model(model, cp);
    if (!ctx) return 1;
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

    SetObserving set_observing = layer_switch();
    if (!set_observing) {
        fprintf(stderr, "the Vulkan layer (libbackscope_vklayer.so with backscope_vk_set_observing) is not loaded: "
                        "set VK_ADD_LAYER_PATH, VK_INSTANCE_LAYERS=VK_LAYER_BACKSCOPE_dispatch, BACKSCOPE_TRACE_DIR\n");
        return 1;
    }

    std::mt19937 rng(42);
    std::vector<llama_token> tokens(n);
    auto round = [&](bool observed) {
        set_observing(observed ? 1 : 0);
        llama_memory_clear(llama_get_memory(ctx), false);
        for (llama_token& t : tokens) t = rng() % n_vocab;
        auto t0 = std::chrono::steady_clock::now();
        if (prompt) {
            llama_batch batch = llama_batch_get_one(tokens.data(), n);
            if (llama_decode(ctx, batch) != 0) {
                fprintf(stderr, "llama_decode failed\n");
                exit(1);
            }
            llama_synchronize(ctx);
        } else {
            for (int i = 0; i < n; ++i) {
                llama_batch batch = llama_batch_get_one(&tokens[i], 1);
                if (llama_decode(ctx, batch) != 0) {
                    fprintf(stderr, "llama_decode failed\n");
                    exit(1);
                }
                llama_synchronize(ctx);
                if (i == 0) t0 = std::chrono::steady_clock::now();
            }
        }
        auto t1 = std::chrono::steady_clock::now();
        return std::chrono::duration<double>(t1 - t0).count();
    };

    const char* test = prompt ? "pp" : "tg";
    // Warm-up: pipelines compiled, both paths touched; at least 512 tokens, so that short rounds warm up as long ones.
    const int warm = std::max(4, (512 / n + 1) & ~1);
    for (int w = 0; w < warm; ++w) round(w % 2 == 1);
    const bool order[4] = {false, true, true, false};
    std::vector<double> tps[2], ratio;
    int observed_rounds = 0;
    for (int g = 0; g < groups; ++g) {
        double group[2] = {0, 0};
        for (bool b : order) {
            bool observed = b && !control;
            observed_rounds += observed;
            double seconds = round(observed);
            double ts = timed / seconds;
            tps[b].push_back(ts);
            group[b] += ts / 2;
            printf("{\"test\":\"%s%d\",\"arm\":\"%s\",\"observed\":%s,\"group\":%d,\"seconds\":%.6f,\"ts\":%.3f}\n",
                   test, n, b ? "B" : "A", observed ? "true" : "false", g, seconds, ts);
        }
        ratio.push_back(group[1] / group[0]);
    }
    set_observing(1);
    double a = median(tps[0]), b = median(tps[1]), rm = median(ratio);
    auto [lo, hi] = bootstrap_median(ratio);
    fprintf(stderr, "summary %s%d %s: A (plain) %.2f t/s, B (%s) %.2f t/s, median B/A per group %+.3f%% [%+.3f%%, %+.3f%%]\n",
            test, n, control ? "A/A control" : "A/B", a, control ? "plain" : "observed", b, (rm - 1) * 100,
            (lo - 1) * 100, (hi - 1) * 100);
    printf("{\"summary\":true,\"test\":\"%s%d\",\"control\":%s,\"groups\":%d,\"observed_rounds\":%d,"
           "\"warmup_observed\":%d,"
           "\"a_ts\":%.3f,\"b_ts\":%.3f,\"median_ratio\":%.5f,\"ci95_low\":%.5f,\"ci95_high\":%.5f}\n",
           test, n, control ? "true" : "false", groups, observed_rounds, warm / 2, a, b, rm, lo, hi);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
