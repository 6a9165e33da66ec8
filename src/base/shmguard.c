/* SIGBUS from shared memory another process truncated: repaired in place (see shmguard.h).
 *
 * The table is a fixed array searched by the handler without a lock: an entry is claimed by a
 * compare-and-swap of its base from 0 to 1, filled, then published by storing the real base
 * (release). The handler counts itself in `g_active` (sequentially consistent) before it reads
 * any base, and ezi_guard_del clears the base and then waits for `g_active` to reach zero before
 * it returns: so no handler can map over an address range after its owner unmapped it (and
 * the range may hold something else). Handlers run only after a fault, so that wait is rare. */
#include "base/shmguard.h"
#include "base/internal.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SEQ __ATOMIC_SEQ_CST

typedef struct entry {
  uintptr_t base; /* 0: free, 1: being filled */
  size_t size;
  uint32_t *tripped;
} entry;

static entry g_tab[EZI_GUARD_MAX];
static size_t g_hi;        /* entries [0, g_hi) may be in use */
static unsigned g_active;  /* handlers running */
static uint64_t g_repairs; /* faults repaired */
static uintptr_t g_page;
static struct sigaction g_old;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Hands a SIGBUS that is not ours to whoever had it before us. */
static void chain(int sig, siginfo_t *si, void *uc) {
  if ((g_old.sa_flags & SA_SIGINFO) && g_old.sa_sigaction) {
    g_old.sa_sigaction(sig, si, uc);
  } else if (g_old.sa_handler != SIG_DFL && g_old.sa_handler != SIG_IGN) {
    g_old.sa_handler(sig);
  } else { /* the default action: the access is repeated on return, and kills the process */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGBUS, &dfl, NULL);
  }
}

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
  __atomic_add_fetch(&g_active, 1, SEQ);
  bool fixed = false;
  if (si && si->si_code == BUS_ADRERR) { /* a page beyond the end of the file it maps */
    uintptr_t a = (uintptr_t)si->si_addr;
    size_t hi = __atomic_load_n(&g_hi, __ATOMIC_ACQUIRE);
    for (size_t i = 0; i < hi && !fixed; i++) {
      uintptr_t b = __atomic_load_n(&g_tab[i].base, SEQ);
      if (b <= 1) continue;
      size_t n = g_tab[i].size;
      if (a < b || a - b >= n) continue;
      uintptr_t from = a & ~(g_page - 1);
      /* The raw system call: no interceptor of a sanitizer or of the C library in between. */
      long r = syscall(SYS_mmap, (void *)from, (size_t)(b + n - from), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0L);
      if (r == (long)from) {
        __atomic_store_n(g_tab[i].tripped, 1u, __ATOMIC_RELEASE);
        __atomic_add_fetch(&g_repairs, 1, __ATOMIC_RELAXED);
        fixed = true;
      }
      break; /* the address is this mapping's: if it cannot be repaired, nobody else's */
    }
  }
  if (!fixed) chain(sig, si, uc);
  __atomic_sub_fetch(&g_active, 1, SEQ);
}

static void install(void) {
  long pg = sysconf(_SC_PAGESIZE);
  g_page = pg > 0 ? (uintptr_t)pg : 4096;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGBUS, &sa, &g_old))
    EZI_WARN("cannot install the SIGBUS handler for shared memory");
}

int ezi_guard_add(void *base, size_t size, uint32_t *tripped) {
  pthread_once(&g_once, install);
  for (size_t i = 0; i < EZI_GUARD_MAX; i++) {
    uintptr_t zero = 0;
    if (!__atomic_compare_exchange_n(&g_tab[i].base, &zero, 1, false, SEQ, __ATOMIC_RELAXED))
      continue;
    g_tab[i].size = size;
    g_tab[i].tripped = tripped;
    size_t hi = __atomic_load_n(&g_hi, __ATOMIC_RELAXED);
    while (hi < i + 1 &&
           !__atomic_compare_exchange_n(&g_hi, &hi, i + 1, true, SEQ, __ATOMIC_RELAXED)) {
    }
    __atomic_store_n(&g_tab[i].base, (uintptr_t)base, SEQ);
    return 0;
  }
  static ezi_ratelimit rl;
  ezi_log_rl(&rl, EZ_LOG_WARN,
             "%d shared-memory mappings guarded already: one more is not (a peer that truncates "
             "it can crash this process)",
             EZI_GUARD_MAX);
  return EZ_ENOMEM;
}

void ezi_guard_del(void *base) {
  if (!base) return;
  size_t hi = __atomic_load_n(&g_hi, __ATOMIC_ACQUIRE);
  for (size_t i = 0; i < hi; i++) {
    if (__atomic_load_n(&g_tab[i].base, __ATOMIC_RELAXED) != (uintptr_t)base) continue;
    __atomic_store_n(&g_tab[i].base, 1, SEQ); /* not matched by handlers from now on */
    while (__atomic_load_n(&g_active, SEQ))
      sched_yield();
    __atomic_store_n(&g_tab[i].base, 0, __ATOMIC_RELEASE);
    return;
  }
}

uint64_t ezi_guard_repairs(void) { return __atomic_load_n(&g_repairs, __ATOMIC_RELAXED); }
