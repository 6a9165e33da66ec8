/* SIGBUS from shared memory another process truncated: repaired in place (see shmguard.h).
 *
 * The table is a fixed array searched by the handler without a lock: an entry is claimed by a
 * compare-and-swap of its base from 0 to 1, filled, then published by storing the real base
 * (release). The handler counts itself in `g_active` (sequentially consistent) before it reads
 * any base, and ezi_guard_del clears the base and then waits for `g_active` to reach zero before
 * it returns: so no handler can map over an address range after its owner unmapped it (and
 * the range may hold something else). Handlers run only after a fault, so that wait is rare.
 *
 * A handler the application installs later replaces ours; each new mapping puts ours back in
 * front (one sigaction call per mapping), handing what is not ours to that handler. The handler
 * to hand on to is one of two saved ones, switched by an index, and the one not in use is
 * rewritten only once no handler runs. A handler that hands a fault back to the one it replaced
 * (ours) would send it around forever: such a return (the same siginfo, deeper on the same stack)
 * gets the default action instead. */
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
static struct sigaction g_olds[2]; /* the handler we replaced: g_olds[g_cur] */
static unsigned g_cur;             /* atomic */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* installers */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
/* The fault being handed on, and how deep on the stack (atomic; a hint, see chain). */
static void *g_chain_si;
static uintptr_t g_chain_sp;

static void on_sigbus(int sig, siginfo_t *si, void *uc);

static void default_action(void) { /* the access is repeated on return, and kills the process */
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGBUS, &dfl, NULL);
}

/* Hands a SIGBUS that is not ours to whoever had it before us. The handler called may not return
 * (siglongjmp): nothing here waits for it to. */
static void chain(int sig, siginfo_t *si, void *uc) {
  volatile char mark = 0;
  uintptr_t sp = (uintptr_t)&mark;
  /* Handed back to us by the handler we handed it to: this frame is below (deeper than) the one
   * that handed it on, for the same siginfo. (A stale record, after a handler jumped out, names a
   * frame this one is not below: a new delivery starts above where the old one chained.) */
  if (__atomic_load_n(&g_chain_si, SEQ) == si) {
    uintptr_t up = __atomic_load_n(&g_chain_sp, SEQ);
    if (sp < up && up - sp < ((uintptr_t)1 << 20)) {
      default_action();
      return;
    }
  }
  /* Copied while counted in g_active, which an installer waits out before it rewrites a slot. */
  __atomic_add_fetch(&g_active, 1, SEQ);
  struct sigaction old = g_olds[__atomic_load_n(&g_cur, SEQ) & 1];
  __atomic_sub_fetch(&g_active, 1, SEQ);
  __atomic_store_n(&g_chain_sp, sp, SEQ);
  __atomic_store_n(&g_chain_si, si, SEQ);
  if ((old.sa_flags & SA_SIGINFO) && old.sa_sigaction && old.sa_sigaction != on_sigbus)
    old.sa_sigaction(sig, si, uc);
  else if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN)
    old.sa_handler(sig);
  else
    default_action();
  __atomic_store_n(&g_chain_si, NULL, SEQ);
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
  /* Done with the table before handing on: the handler called may never return. */
  __atomic_sub_fetch(&g_active, 1, SEQ);
  if (!fixed) chain(sig, si, uc);
}

static void set_page(void) {
  long pg = sysconf(_SC_PAGESIZE);
  g_page = pg > 0 ? (uintptr_t)pg : 4096;
}

/* Puts our handler in front of SIGBUS unless it is there already, keeping the one it replaces to
 * hand other faults to. */
static void install(void) {
  pthread_once(&g_once, set_page);
  pthread_mutex_lock(&g_mu);
  struct sigaction cur;
  bool ours = !sigaction(SIGBUS, NULL, &cur) && (cur.sa_flags & SA_SIGINFO) &&
              cur.sa_sigaction == on_sigbus;
  if (!ours) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    unsigned next = (__atomic_load_n(&g_cur, __ATOMIC_RELAXED) + 1) & 1;
    while (__atomic_load_n(&g_active, SEQ)) /* nobody may be reading g_olds[next] (see above) */
      sched_yield();
    if (sigaction(SIGBUS, &sa, &g_olds[next]))
      EZI_WARN("cannot install the SIGBUS handler for shared memory");
    else
      __atomic_store_n(&g_cur, next, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&g_mu);
}

int ezi_guard_add(void *base, size_t size, uint32_t *tripped) {
  install();
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
