/* The SIGBUS guard of shared mappings (src/base/shmguard.c) next to an application's own SIGBUS
 * handler:
 *  - test_back_in_front: a handler installed after the guard's replaced it (a truncated mapping
 *    then killed the process, or reached the application's handler); the next mapping puts the
 *    guard back in front, which repairs a fault in its mappings and hands any other SIGBUS to that
 *    handler.
 *  - test_handed_back: a handler that hands every SIGBUS to the one it replaced (the guard's)
 *    would bounce a fault that is nobody's between the two until the stack overflows; the guard
 *    gives it the default action instead (a child process dies of SIGBUS, the handler having run
 *    once).
 * Real files in /dev/shm, really truncated. */
#include "harness.h"
#include "base/shmguard.h"

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGES 4

typedef struct mapping {
  char name[64]; /* (removed once open) */
  int fd;
  volatile uint8_t *base;
  size_t size;
  uint32_t tripped;
} mapping;

/* A shared file of PAGES pages in /dev/shm (its name removed at once), mapped; guarded unless
 * `guard` is false. */
static void map_file(mapping *m, const char *tag, bool guard) {
  static int seq;
  snprintf(m->name, sizeof m->name, "/ez-test-guard-%d-%s-%d", (int)getpid(), tag, seq++);
  m->size = (size_t)PAGES * (size_t)sysconf(_SC_PAGESIZE);
  m->fd = shm_open(m->name, O_RDWR | O_CREAT | O_EXCL, 0600);
  assert_true(m->fd >= 0);
  shm_unlink(m->name); /* the fd and the mapping keep it: nothing is left behind, whatever fails */
  assert_int_equal(ftruncate(m->fd, (off_t)m->size), 0);
  void *p = mmap(NULL, m->size, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
  assert_true(p != MAP_FAILED);
  m->base = p;
  memset(p, 0x5a, m->size);
  m->tripped = 0;
  if (guard) assert_int_equal(ezi_guard_add(p, m->size, &m->tripped), 0);
}

static void unmap_file(mapping *m) {
  ezi_guard_del((void *)m->base);
  munmap((void *)m->base, m->size);
  close(m->fd);
}

/* The application's handler: counts, and jumps back out of the fault. */
static sigjmp_buf g_jump;
static volatile sig_atomic_t g_calls;

static void app_handler(int sig, siginfo_t *si, void *uc) {
  (void)sig, (void)si, (void)uc;
  g_calls++;
  siglongjmp(g_jump, 1);
}

static bool guard_in_front(void) {
  struct sigaction cur;
  assert_int_equal(sigaction(SIGBUS, NULL, &cur), 0);
  return (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction != app_handler &&
         cur.sa_handler != SIG_DFL;
}

static void test_back_in_front(void **state) {
  (void)state;
  mapping a, b, c;
  map_file(&a, "a", true); /* the guard is installed (or is already) */
  struct sigaction app, before;
  memset(&app, 0, sizeof app);
  app.sa_sigaction = app_handler;
  app.sa_flags = SA_SIGINFO;
  sigemptyset(&app.sa_mask);
  assert_int_equal(sigaction(SIGBUS, &app, &before), 0); /* the application's, after ours */
  assert_false(guard_in_front());
  map_file(&b, "b", true);
  assert_true(guard_in_front()); /* back in front of it */

  /* A fault in a guarded mapping: repaired, zeros read, the application's handler not called. */
  g_calls = 0;
  assert_int_equal(ftruncate(b.fd, 0), 0);
  uint64_t repairs = ezi_guard_repairs();
  assert_int_equal(b.base[b.size - 1], 0);
  assert_int_equal(__atomic_load_n(&b.tripped, __ATOMIC_ACQUIRE), 1);
  assert_int_equal(ezi_guard_repairs(), repairs + 1);
  assert_int_equal(g_calls, 0);
  assert_int_equal(a.base[0], 0x5a); /* the other mapping is untouched */

  /* A fault anywhere else: handed to the application's handler. */
  map_file(&c, "c", false);
  assert_int_equal(ftruncate(c.fd, 0), 0);
  if (sigsetjmp(g_jump, 1) == 0) {
    (void)c.base[0];
    fail_msg("reading a truncated page did not fault");
  }
  assert_int_equal(g_calls, 1);
  assert_int_equal(ezi_guard_repairs(), repairs + 1);

  assert_int_equal(sigaction(SIGBUS, &before, NULL), 0);
  unmap_file(&c);
  unmap_file(&b);
  unmap_file(&a);
}

/* The handler of the second test: hands the fault to the handler it replaced, and tells the
 * parent each time it runs (one byte down a pipe). */
static struct sigaction g_replaced;
static int g_tell = -1;

static void handing_back(int sig, siginfo_t *si, void *uc) {
  char x = 'h';
  if (write(g_tell, &x, 1) != 1) _exit(5);
  if ((g_replaced.sa_flags & SA_SIGINFO) && g_replaced.sa_sigaction)
    g_replaced.sa_sigaction(sig, si, uc);
}

static void test_handed_back(void **state) {
  (void)state;
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    g_tell = fds[1];
    mapping a, b, c;
    map_file(&a, "a", true);
    struct sigaction h;
    memset(&h, 0, sizeof h);
    h.sa_sigaction = handing_back;
    h.sa_flags = SA_SIGINFO;
    sigemptyset(&h.sa_mask);
    if (sigaction(SIGBUS, &h, &g_replaced)) _exit(3);
    map_file(&b, "b", true); /* the guard in front again, handing on to handing_back */
    map_file(&c, "c", false);
    if (ftruncate(c.fd, 0)) _exit(4);
    (void)c.base[0]; /* nobody's: it must end the process by SIGBUS */
    _exit(0);
  }
  close(fds[1]);
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  char buf[64];
  ssize_t n = read(fds[0], buf, sizeof buf);
  close(fds[0]);
  assert_true(WIFSIGNALED(st));
  assert_int_equal(WTERMSIG(st), SIGBUS);
  assert_int_equal(n, 1); /* the application's handler ran once, not around and around */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_back_in_front),
      cmocka_unit_test(test_handed_back),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
