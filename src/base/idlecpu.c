/* Whether a CPU is to spare for polling (idlecpu.h). */
#include "base/idlecpu.h"
#include "base/telclock.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t g_next_ns; /* atomic: when the count is read again */
static int g_spare = 1;    /* atomic: the last answer */

long ezi_loadavg_runnable(const char *line) {
  const char *p = line;
  for (int field = 0; field < 3; field++) { /* skip the three averages */
    p += strspn(p, " ");
    p += strcspn(p, " \n");
  }
  p += strspn(p, " ");
  if (*p < '0' || *p > '9') return -1;
  char *end;
  long r = strtol(p, &end, 10);
  return *end == '/' ? r : -1;
}

/* Reads the count; -1 if it cannot. */
static long runnable_now(void) {
  int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[128];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  return ezi_loadavg_runnable(buf);
}

bool ezi_cpu_spare(void) {
  uint64_t now = ezi_now_ns(), next = __atomic_load_n(&g_next_ns, __ATOMIC_RELAXED);
  if (now < next || !__atomic_compare_exchange_n(&g_next_ns, &next, now + EZI_IDLECPU_PERIOD_NS,
                                                 false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    return __atomic_load_n(&g_spare, __ATOMIC_RELAXED); /* fresh enough, or another reads it */
  long cpus = sysconf(_SC_NPROCESSORS_ONLN), r = runnable_now();
  int spare = r < 0 || cpus < 1 || r <= cpus;
  __atomic_store_n(&g_spare, spare, __ATOMIC_RELAXED);
  return spare;
}
