/* The latency histogram and clock shared by `ezmsg perf` and the peers in bench/ (ZeroMQ, the
 * machine's limits), so that ours and theirs are measured exactly the same way. Header only. */
#ifndef EZ_LATENCY_H
#define EZ_LATENCY_H

#include <stdint.h>
#include <time.h>

/* Log-linear buckets: 32 per power of two (about 3% resolution), values in nanoseconds. */
#define H_SUB_BITS 5
#define H_SUB (1u << H_SUB_BITS)
#define H_N ((64 - H_SUB_BITS) * H_SUB)

static inline unsigned h_index(uint64_t v) {
  if (v < H_SUB) return (unsigned)v;
  unsigned e = 63u - (unsigned)__builtin_clzll(v);
  return (e - H_SUB_BITS + 1) * H_SUB + (unsigned)((v >> (e - H_SUB_BITS)) & (H_SUB - 1));
}

static inline double h_value(unsigned i) { /* a bucket's midpoint */
  if (i < H_SUB) return (double)i;
  unsigned e = i / H_SUB + H_SUB_BITS - 1, sub = i % H_SUB;
  double lo = (double)((uint64_t)(H_SUB + sub) << (e - H_SUB_BITS));
  return lo + (double)((uint64_t)1 << (e - H_SUB_BITS)) / 2.0;
}

/* The q-quantile (0..1) of a histogram of H_N buckets; 0 when it is empty. */
static inline double h_quantile(const uint64_t *h, double q) {
  uint64_t total = 0;
  for (unsigned i = 0; i < H_N; i++)
    total += h[i];
  if (!total) return 0;
  uint64_t want = (uint64_t)(q * (double)total);
  if (want < 1) want = 1;
  uint64_t acc = 0;
  for (unsigned i = 0; i < H_N; i++) {
    acc += h[i];
    if (acc >= want) return h_value(i);
  }
  return h_value(H_N - 1);
}

static inline uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
