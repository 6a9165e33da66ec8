/* Placing a benchmark's node on a CPU, shared by `ezmsg perf --pin` and the peers in bench/ (so
 * that ours and theirs are placed exactly the same way). Header only; needs _GNU_SOURCE. */
#ifndef EZ_CPUPIN_H
#define EZ_CPUPIN_H

#include <pthread.h>
#include <sched.h>

/* Pins the calling thread (and the threads it starts from then on) to the index-th CPU it may
 * use, modulo their number. Does nothing if they cannot be read. */
static inline void pin_nth_cpu(unsigned index) {
  cpu_set_t allowed, one;
  if (sched_getaffinity(0, sizeof allowed, &allowed)) return;
  int n = CPU_COUNT(&allowed);
  if (n <= 0) return;
  int want = (int)(index % (unsigned)n);
  for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
    if (!CPU_ISSET(cpu, &allowed) || want--) continue;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    return;
  }
}

#endif
