/*
 * A caching CPU allocator for the buffers dtorch's workers allocate.
 *
 * Why: a fresh large buffer costs a page fault per 4 KiB page on first touch
 * (glibc serves big blocks with mmap and returns them on free), which made a
 * 64 MiB all-gather three times slower than a memcpy into memory already
 * mapped. Blobs of a repeated program have repeated sizes, so keeping freed
 * large blocks and handing them out again by exact size removes the faults.
 *
 * Scope: the allocator is installed as LibTorch's CPU allocator, but only
 * allocations made on dtorch worker threads (marked by worker_init through
 * dt_torch::mark_worker_thread) use the cache; every other thread, including
 * the user's eager PyTorch, goes straight to the allocator that was installed
 * before. Blocks below kMinCached bytes are not cached (malloc serves them
 * without faults). The cache holds at most DTORCH_CPU_CACHE_MB (default 2048)
 * MiB; beyond that freed blocks are released at once.
 *
 * Threads: allocate runs on any thread; a block's deleter runs on whichever
 * thread drops the last reference (workers, client, Python). The free lists
 * are guarded by one mutex (a leaf lock).
 */
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <pthread.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend/torch/torch_int.h"

namespace dt_torch {
namespace {

constexpr size_t kMinCached = 1 << 20; /* below this, malloc is fault-free enough */
constexpr size_t kAlign = 64;          /* c10's CPU alignment */

thread_local bool tls_worker = false;

/* A block: [header][pad to kAlign][data]. The header records the size so the
 * deleter can return the block to the right list. */
struct header {
    size_t size;
};

class caching_allocator final : public c10::Allocator {
  public:
    c10::DataPtr allocate(size_t n) override {
        if (!tls_worker || n < kMinCached)
            return base_->allocate(n);
        void *base = take(n);
        if (!base) {
            if (posix_memalign(&base, kAlign, n + kAlign) != 0)
                throw std::bad_alloc();
            static_cast<header *>(base)->size = n;
        }
        void *data = static_cast<char *>(base) + kAlign;
        {
            std::lock_guard<std::mutex> g(mu_);
            live_.insert(data);
        }
        // The context is the data pointer itself, as LibTorch's raw_allocate
        // requires of every CPU allocation.
        return c10::DataPtr(data, data, &caching_allocator::release, c10::Device(c10::DeviceType::CPU));
    }

    /* raw_allocate/raw_deallocate (used by some ATen kernels for scratch
     * memory) free through this: a block of ours goes back to the cache,
     * anything else to the allocator that made it. */
    c10::DeleterFnPtr raw_deleter() const override { return &caching_allocator::raw_free; }

    void copy_data(void *dest, const void *src, std::size_t count) const override {
        std::memcpy(dest, src, count);
    }

    static caching_allocator &instance() {
        static caching_allocator a;
        return a;
    }

    void install() {
        std::call_once(installed_, [this] {
            base_ = c10::GetCPUAllocator();
            const char *mb = std::getenv("DTORCH_CPU_CACHE_MB");
            limit_ = (mb ? std::strtoull(mb, nullptr, 10) : 2048ull) << 20;
            c10::SetCPUAllocator(this, /*priority=*/2);
            /* A worker may hold mu_ when another thread forks: the child
             * would block on its first allocation. Held across the fork. */
            pthread_atfork([] { instance().mu_.lock(); }, [] { instance().mu_.unlock(); },
                           [] { instance().mu_.unlock(); });
        });
    }

    void empty() {
        std::vector<void *> drop;
        {
            std::lock_guard<std::mutex> g(mu_);
            for (auto &kv : free_)
                drop.push_back(kv.second);
            free_.clear();
            cached_ = 0;
        }
        for (void *p : drop)
            std::free(p);
    }

    size_t cached() const {
        std::lock_guard<std::mutex> g(mu_);
        return cached_;
    }

  private:
    void *take(size_t n) const {
        std::lock_guard<std::mutex> g(mu_);
        auto it = free_.find(n);
        if (it == free_.end())
            return nullptr;
        void *p = it->second;
        free_.erase(it);
        cached_ -= n;
        return p;
    }

    static void raw_free(void *data) {
        caching_allocator &a = instance();
        bool ours;
        {
            std::lock_guard<std::mutex> g(a.mu_);
            ours = a.live_.count(data) != 0;
        }
        if (ours) {
            release(data);
        } else if (c10::DeleterFnPtr d = a.base_->raw_deleter()) {
            d(data);
        }
    }

    static void release(void *data) {
        caching_allocator &a = instance();
        void *base = static_cast<char *>(data) - kAlign;
        size_t n = static_cast<header *>(base)->size;
        {
            std::lock_guard<std::mutex> g(a.mu_);
            a.live_.erase(data);
            if (a.cached_ + n <= a.limit_) {
                a.free_.emplace(n, base);
                a.cached_ += n;
                return;
            }
        }
        std::free(base);
    }

    c10::Allocator *base_ = nullptr;
    size_t limit_ = 0;
    mutable std::mutex mu_;
    mutable std::unordered_multimap<size_t, void *> free_;
    mutable std::unordered_set<void *> live_; /* data pointers of our blocks in use */
    mutable size_t cached_ = 0;
    std::once_flag installed_;
};

} // namespace

void mark_worker_thread() {
    caching_allocator::instance().install();
    tls_worker = true;
}

void empty_cpu_cache() { caching_allocator::instance().empty(); }

size_t cpu_cache_bytes() { return caching_allocator::instance().cached(); }

} // namespace dt_torch
