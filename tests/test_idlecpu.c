/* Whether a CPU is to spare for polling (base/idlecpu.h): the runnable count parsed out of
 * /proc/loadavg lines, hostile ones included, and the answer "no" while more threads spin than
 * the machine has CPUs. (The answer "yes" depends on what else runs on the machine: not checked.)
 */
#include "harness.h"
#include "base/idlecpu.h"
#include "base/telclock.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void test_parse(void **state) {
  (void)state;
  assert_int_equal(ezi_loadavg_runnable("0.50 0.40 0.30 3/120 4567\n"), 3);
  assert_int_equal(ezi_loadavg_runnable("12.00 8.10 4.00 129/2048 1"), 129);
  assert_int_equal(ezi_loadavg_runnable("0.00  0.00 0.00   1/5 2"), 1);
  assert_int_equal(ezi_loadavg_runnable(""), -1);
  assert_int_equal(ezi_loadavg_runnable("0.50 0.40 0.30"), -1);
  assert_int_equal(ezi_loadavg_runnable("0.50 0.40 0.30 \n"), -1);
  assert_int_equal(ezi_loadavg_runnable("0.50 0.40 0.30 x/120 4567"), -1);
  assert_int_equal(ezi_loadavg_runnable("0.50 0.40 0.30 3 4567"), -1);
  assert_int_equal(ezi_loadavg_runnable("0.50 0.40 0.30 -3/120 1"), -1);
}

static volatile int g_stop;

static void *spin(void *arg) {
  (void)arg;
  while (!__atomic_load_n(&g_stop, __ATOMIC_RELAXED)) {
  }
  return NULL;
}

/* With two more spinning threads than online CPUs, every one of them runnable all along, no CPU
 * is to spare once the cached answer has been read again (after EZI_IDLECPU_PERIOD_NS). */
static void test_busy_machine(void **state) {
  (void)state;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  assert_true(cpus >= 1 && cpus <= 1024);
  if (access("/proc/loadavg", R_OK)) skip();
  size_t n = (size_t)cpus + 2;
  pthread_t *th = calloc(n, sizeof *th);
  assert_non_null(th);
  g_stop = 0;
  for (size_t i = 0; i < n; i++)
    assert_int_equal(pthread_create(&th[i], NULL, spin, NULL), 0);
  /* Every spinner has started once the count shows them (or the time is up: fails below). */
  uint64_t end = ezi_now_ns() + 10000000000ull;
  bool spare = true;
  while (spare && ezi_now_ns() < end) {
    struct timespec ts = {0, 3 * (long)(EZI_IDLECPU_PERIOD_NS / 2)};
    nanosleep(&ts, NULL);
    spare = ezi_cpu_spare();
  }
  __atomic_store_n(&g_stop, 1, __ATOMIC_RELAXED);
  for (size_t i = 0; i < n; i++)
    pthread_join(th[i], NULL);
  free(th);
  assert_false(spare);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse),
      cmocka_unit_test(test_busy_machine),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
