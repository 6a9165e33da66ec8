/* Errors, logging, time and ids: the few things every other file needs. */
#include "base/internal.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <uuid/uuid.h>

const char *ez_strerror(int err) {
  switch (err) {
  case EZ_OK: return "success";
  case EZ_EINVAL: return "invalid argument";
  case EZ_ENOMEM: return "out of memory";
  case EZ_ENOENT: return "no such id, name or topic";
  case EZ_ETIMEDOUT: return "timed out";
  case EZ_ENOSERVER: return "no graph server at the address";
  case EZ_ECONNLOST: return "connection lost";
  case EZ_EPROTO: return "protocol error";
  case EZ_EMSGSIZE: return "message or string too large";
  case EZ_ECLOSED: return "closed";
  case EZ_EAGAIN: return "nothing available now";
  case EZ_EADDR: return "bad or unusable address";
  case EZ_ESYS: return "system call failed";
  case EZ_ECYCLIC: return "would create a cycle";
  case EZ_EREFUSED: return "the graph server refused the connection (at its client limit?)";
  case EZ_ENOTSUP: return "not supported by the peer's ezmsg version";
  default: return "unknown error";
  }
}

static void default_sink(void *user, int level, const char *msg) {
  (void)user;
  static const char *names[] = {"debug", "info", "warning", "error"};
  fprintf(stderr, "ezmsg %s: %s\n", names[level < 0 ? 0 : level > 3 ? 3 : level], msg);
}

static ez_log_fn g_sink = default_sink;
static void *g_sink_user;
static int g_min_level = -1; /* -1: not yet decided (read the environment) */

static int env_level(void) {
  const char *e = getenv("EZMSG_LOG_LEVEL");
  if (!e) return EZ_LOG_WARN;
  if (!strcasecmp(e, "debug")) return EZ_LOG_DEBUG;
  if (!strcasecmp(e, "info")) return EZ_LOG_INFO;
  if (!strcasecmp(e, "error")) return EZ_LOG_ERROR;
  if (!strcasecmp(e, "off")) return EZ_LOG_OFF;
  return EZ_LOG_WARN;
}

void ez_set_log_hook(ez_log_fn fn, void *user, int min_level) {
  g_sink = fn ? fn : default_sink;
  g_sink_user = user;
  g_min_level = min_level;
}

int ezi_log_enabled(int level) {
  int min = __atomic_load_n(&g_min_level, __ATOMIC_RELAXED);
  if (min < 0) {
    min = env_level();
    __atomic_store_n(&g_min_level, min, __ATOMIC_RELAXED);
  }
  return level >= min && level < EZ_LOG_OFF;
}

void ezi_log(int level, const char *fmt, ...) {
  if (!ezi_log_enabled(level)) return;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  g_sink(g_sink_user, level, line);
}

bool ezi_ratelimit_pass(ezi_ratelimit *rl, uint64_t now, uint32_t *suppressed) {
  if (!rl->start || now - rl->start >= EZI_RL_WINDOW_NS) { /* a new window */
    rl->start = now ? now : 1;
    rl->printed = 0;
  }
  if (rl->printed >= EZI_RL_BURST) {
    if (rl->suppressed < UINT32_MAX) rl->suppressed++;
    return false;
  }
  rl->printed++;
  *suppressed = rl->suppressed;
  rl->suppressed = 0;
  return true;
}

static pthread_mutex_t g_rl_mu = PTHREAD_MUTEX_INITIALIZER;

void ezi_log_rl(ezi_ratelimit *rl, int level, const char *fmt, ...) {
  if (!ezi_log_enabled(level)) return;
  uint32_t dropped = 0;
  pthread_mutex_lock(&g_rl_mu);
  bool pass = ezi_ratelimit_pass(rl, ezi_now_ns(), &dropped);
  pthread_mutex_unlock(&g_rl_mu);
  if (!pass) return;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (dropped && n >= 0 && (size_t)n < sizeof line)
    snprintf(line + n, sizeof line - (size_t)n, " (%u more like it suppressed)", (unsigned)dropped);
  g_sink(g_sink_user, level, line);
}

int ezi_ms_left(uint64_t deadline) {
  if (deadline == UINT64_MAX) return -1;
  uint64_t now = ezi_now_ns();
  if (now >= deadline) return 0;
  uint64_t ms = (deadline - now + 999999u) / 1000000u;
  return ms > 0x7fffffff ? 0x7fffffff : (int)ms;
}

void ezi_uuid(char out[37]) {
  uuid_t u;
  uuid_generate_time(u);
  uuid_unparse_lower(u, out);
}

char *ezi_strdup(const char *s) { return s ? strdup(s) : NULL; }

void ezi_mutex_init(pthread_mutex_t *mu) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP);
  pthread_mutex_init(mu, &a);
  pthread_mutexattr_destroy(&a);
}

void ezi_cond_init(pthread_cond_t *cv) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(cv, &a);
  pthread_condattr_destroy(&a);
}

int ezi_cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t deadline) {
  if (deadline == UINT64_MAX) {
    pthread_cond_wait(cv, mu);
    return 0;
  }
  if (ezi_now_ns() >= deadline) return EZ_ETIMEDOUT;
  struct timespec ts = {(time_t)(deadline / 1000000000u), (long)(deadline % 1000000000u)};
  pthread_cond_timedwait(cv, mu, &ts);
  return 0;
}
