// SPDX-License-Identifier: Apache-2.0
// Heap allocations per benchmark iteration. Include it in exactly one
// source file of a benchmark binary: it replaces the global operator new
// and delete, so that every allocation in the binary bumps a per-thread
// count and a benchmark thread sees only its own.
#ifndef SLUICE_BENCH_COUNTED_ALLOC_H_
#define SLUICE_BENCH_COUNTED_ALLOC_H_

#include <cstdint>
#include <cstdlib>
#include <new>

#include "benchmark/benchmark.h"

namespace {
thread_local uint64_t allocations = 0;

void* CountedAlloc(std::size_t size) {
  ++allocations;
  if (size == 0) size = 1;
  if (void* p = std::malloc(size)) return p;
  throw std::bad_alloc();
}
void* CountedAlignedAlloc(std::size_t size, std::align_val_t align) {
  ++allocations;
  const std::size_t a = static_cast<std::size_t>(align);
  void* p = nullptr;
  if (posix_memalign(&p, a < sizeof(void*) ? sizeof(void*) : a,
                     size == 0 ? 1 : size) != 0) {
    throw std::bad_alloc();
  }
  return p;
}
}  // namespace

void* operator new(std::size_t size) { return CountedAlloc(size); }
void* operator new[](std::size_t size) { return CountedAlloc(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  ++allocations;
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  ++allocations;
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new(std::size_t size, std::align_val_t align) {
  return CountedAlignedAlloc(size, align);
}
void* operator new[](std::size_t size, std::align_val_t align) {
  return CountedAlignedAlloc(size, align);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}

namespace sluice::bench {

// Reports allocations per iteration of the calling benchmark thread,
// averaged over the threads.
class AllocationCounter {
 public:
  AllocationCounter() : start_(allocations) {}
  void Report(benchmark::State& state) const {
    const double per_op = state.iterations() == 0
                              ? 0
                              : static_cast<double>(allocations - start_) /
                                    static_cast<double>(state.iterations());
    state.counters["allocs_per_op"] =
        benchmark::Counter(per_op, benchmark::Counter::kAvgThreads);
  }

 private:
  uint64_t start_;
};

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_COUNTED_ALLOC_H_
