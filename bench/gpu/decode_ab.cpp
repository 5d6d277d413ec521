// Decode tokens/s with and without the dispatch observer, inside one process.
//
// Why in one process: on the GPU machine, graphs-off decode is bound by the host's launch rate and two identical
// llama-bench invocations differ by up to ±15% (vCPU placement, clocks), which hides a 1% effect. Here one process,
// started with LD_PRELOAD=libbackscope_observer.so, switches the observer in and out between rounds by rewriting
// the GOT slots through which llama.cpp's libraries reach the hooked runtime functions:
//   observed: the slot holds the observer's hook (what the dynamic loader bound under LD_PRELOAD);
//   plain:    the slot holds the runtime's own function (what the loader binds without LD_PRELOAD).
// Nothing else differs between the two modes. The observer's background writer thread runs in both (it is
// covered by the separate llama-bench comparison).
//
// A round is llama-bench's tg test: clear the KV cache, decode N_GEN single tokens (random ids, one llama_decode +
// llama_synchronize each). Rounds alternate in ABBA groups after warm-up rounds. With MODE=aa both arms are
// plain: the A/A control that shows the method's resolution.
// Usage: decode_ab MODEL.gguf ROUNDS [N_GEN] [ab|aa]   (run under LD_PRELOAD=libbackscope_observer.so)
// Prints one JSON line per round and a summary line.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <string>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

#include "llama.h"

namespace {

struct GotSlot {
    void** address;
    void* hook;  // the observer's function
    void* real;  // the runtime's function
    std::string symbol;
    std::string object;
};

std::vector<GotSlot> g_slots;
void* g_observer = nullptr;
std::vector<void*> g_runtimes;  // handles of libcudart / libcuda, where the real functions live

bool skip_object(const std::string& name) {
    static const char* own[] = {"backscope_observer", "libcudart", "libcuda.so", "libc.so", "ld-linux", "libdl"};
    for (const char* s : own)
        if (name.find(s) != std::string::npos) return true;
    return false;
}

// Relocation entries of one table: JUMP_SLOT and GLOB_DAT slots whose symbol the observer exports.
void scan_relocations(const dl_phdr_info* info, const ElfW(Rela) * rela, size_t bytes, const ElfW(Sym) * symtab,
                      const char* strtab, const std::string& object) {
    for (size_t i = 0; i < bytes / sizeof(ElfW(Rela)); ++i) {
        unsigned type = ELF64_R_TYPE(rela[i].r_info);
        if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) continue;
        const ElfW(Sym)& sym = symtab[ELF64_R_SYM(rela[i].r_info)];
        if (sym.st_name == 0) continue;
        const char* name = strtab + sym.st_name;
        // dlsym on a handle also searches the object's dependencies (libc, ...): keep only the observer's own.
        void* hook = dlsym(g_observer, name);
        Dl_info where{};
        if (!hook || !dladdr(hook, &where) || !where.dli_fname || !strstr(where.dli_fname, "backscope_observer"))
            continue;
        void* real = nullptr;
        for (void* runtime : g_runtimes)
            if ((real = dlsym(runtime, name))) break;
        if (!real || real == hook) continue;
        g_slots.push_back({reinterpret_cast<void**>(info->dlpi_addr + rela[i].r_offset), hook, real, name, object});
    }
}

int collect_slots(dl_phdr_info* info, size_t, void*) {
    std::string object = info->dlpi_name ? info->dlpi_name : "";
    if (object.empty() || skip_object(object)) return 0;
    const ElfW(Dyn)* dynamic = nullptr;
    for (int i = 0; i < info->dlpi_phnum; ++i)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dynamic = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (!dynamic) return 0;
    // glibc relocates these d_ptr values in place on x86-64; a value below the load address is still relative.
    auto pointer = [&](ElfW(Addr) value) { return value < info->dlpi_addr ? value + info->dlpi_addr : value; };
    const ElfW(Sym)* symtab = nullptr;
    const char* strtab = nullptr;
    const ElfW(Rela)*jmprel = nullptr, *rela = nullptr;
    size_t jmprel_bytes = 0, rela_bytes = 0;
    for (const ElfW(Dyn)* d = dynamic; d->d_tag != DT_NULL; ++d) {
        switch (d->d_tag) {
            case DT_SYMTAB: symtab = reinterpret_cast<const ElfW(Sym)*>(pointer(d->d_un.d_ptr)); break;
            case DT_STRTAB: strtab = reinterpret_cast<const char*>(pointer(d->d_un.d_ptr)); break;
            case DT_JMPREL: jmprel = reinterpret_cast<const ElfW(Rela)*>(pointer(d->d_un.d_ptr)); break;
            case DT_PLTRELSZ: jmprel_bytes = d->d_un.d_val; break;
            case DT_RELA: rela = reinterpret_cast<const ElfW(Rela)*>(pointer(d->d_un.d_ptr)); break;
            case DT_RELASZ: rela_bytes = d->d_un.d_val; break;
        }
    }
    if (!symtab || !strtab) return 0;
    if (jmprel) scan_relocations(info, jmprel, jmprel_bytes, symtab, strtab, object);
    if (rela) scan_relocations(info, rela, rela_bytes, symtab, strtab, object);
    return 0;
}

// Points every collected slot at the hook (observed) or at the runtime (plain). RELRO pages are made writable for
// the write and stay so (harmless in a benchmark).
void set_observed(bool observed) {
    long page = sysconf(_SC_PAGESIZE);
    for (GotSlot& slot : g_slots) {
        uintptr_t start = reinterpret_cast<uintptr_t>(slot.address) & ~(uintptr_t)(page - 1);
        if (mprotect(reinterpret_cast<void*>(start), page, PROT_READ | PROT_WRITE) != 0) {
            perror("mprotect");
            exit(1);
        }
        __atomic_store_n(slot.address, observed ? slot.hook : slot.real, __ATOMIC_SEQ_CST);
    }
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL.gguf ROUNDS [N_GEN] [ab|aa]\n", argv[0]);
        return 2;
    }
    const char* model_path = argv[1];
    int rounds = atoi(argv[2]);
    int n_gen = argc > 3 ? atoi(argv[3]) : 128;
    bool control = argc > 4 && strcmp(argv[4], "aa") == 0;
    const char* graphs = getenv("GGML_CUDA_DISABLE_GRAPHS") ? "off" : "on";

    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 99;
    llama_model* model = llama_model_load_from_file(model_path, mp);
    if (!model) return 1;
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = 512;
    llama_context* ctx = llama_init_from_model(model, cp);
    if (!ctx) return 1;
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

    // Under LD_PRELOAD the observer is already loaded; the runtimes were loaded by ggml's CUDA backend.
    Dl_info preloaded{};
    if (dladdr(dlsym(RTLD_DEFAULT, "cudaLaunchKernel"), &preloaded) && preloaded.dli_fname &&
        strstr(preloaded.dli_fname, "backscope_observer"))
        g_observer = dlopen(preloaded.dli_fname, RTLD_NOLOAD | RTLD_LAZY);
    for (const char* lib : {"libcudart.so.13", "libcudart.so.12", "libcuda.so.1"})
        if (void* h = dlopen(lib, RTLD_NOLOAD | RTLD_LAZY)) g_runtimes.push_back(h);
    if (!g_observer || g_runtimes.empty()) {
        fprintf(stderr, "needs LD_PRELOAD=libbackscope_observer.so and a loaded CUDA runtime\n");
        return 1;
    }
    dl_iterate_phdr(collect_slots, nullptr);
    if (g_slots.empty()) {
        fprintf(stderr, "no GOT slot of a hooked function found\n");
        return 1;
    }
    for (const GotSlot& s : g_slots)
        fprintf(stderr, "slot %s in %s: hook %p real %p\n", s.symbol.c_str(), s.object.c_str(), s.hook, s.real);

    std::srand(42);
    auto round = [&](bool observed) {
        set_observed(observed);
        llama_memory_clear(llama_get_memory(ctx), false);
        llama_token token = std::rand() % n_vocab;
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < n_gen; ++i) {
            llama_batch batch = llama_batch_get_one(&token, 1);
            if (llama_decode(ctx, batch) != 0) {
                fprintf(stderr, "llama_decode failed\n");
                exit(1);
            }
            llama_synchronize(ctx);
            token = std::rand() % n_vocab;
        }
        auto t1 = std::chrono::steady_clock::now();
        return std::chrono::duration<double>(t1 - t0).count();
    };

    for (int w = 0; w < 4; ++w) round(w % 2 == 1);  // warm-up: graphs captured, clocks up, both paths touched
    const bool order[4] = {false, true, true, false};
    std::vector<double> tps[2], ratio;
    int observed_rounds = 0;
    for (int r = 0; r < rounds; ++r) {
        double group[2] = {0, 0};
        for (int k = 0; k < 4; ++k) {
            bool observed = order[k] && !control;
            observed_rounds += observed;
            double seconds = round(observed);
            double ts = n_gen / seconds;
            tps[order[k]].push_back(ts);
            group[order[k]] += ts / 2;
            printf("{\"graphs\":\"%s\",\"arm\":\"%s\",\"observed\":%s,\"group\":%d,\"seconds\":%.6f,\"ts\":%.2f}\n",
                   graphs, order[k] ? "B" : "A", observed ? "true" : "false", r, seconds, ts);
        }
        ratio.push_back(group[1] / group[0]);
    }
    set_observed(true);
    double a = median(tps[0]), b = median(tps[1]), rm = median(ratio);
    std::vector<double> sorted = ratio;
    std::sort(sorted.begin(), sorted.end());
    fprintf(stderr, "summary graphs=%s %s: A (plain) %.1f t/s, B (%s) %.1f t/s, median B/A per group %+.3f%%\n",
            graphs, control ? "A/A control" : "A/B", a, control ? "plain" : "observed", b, (rm - 1) * 100);
    printf("{\"summary\":true,\"graphs\":\"%s\",\"control\":%s,\"groups\":%d,\"n_gen\":%d,\"slots\":%zu,"
           "\"observed_rounds\":%d,\"warmup_observed_rounds\":2,\"a_ts\":%.2f,\"b_ts\":%.2f,\"median_ratio\":%.5f,"
           "\"ratio_p10\":%.5f,\"ratio_p90\":%.5f}\n",
           graphs, control ? "true" : "false", rounds, n_gen, g_slots.size(), observed_rounds, a, b, rm,
           sorted[sorted.size() / 10], sorted[sorted.size() * 9 / 10]);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
