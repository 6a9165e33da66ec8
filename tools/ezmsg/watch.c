/* watch.h */
#include "watch.h"

#include <errno.h>
#include <pthread.h>

void watch_begin(sigset_t *stop) {
  sigemptyset(stop);
  sigaddset(stop, SIGINT);
  sigaddset(stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, stop, NULL);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
}

struct timespec watch_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t;
}

bool watch_sleep(const sigset_t *stop, struct timespec t0, double period_s) {
  struct timespec t1 = watch_now();
  double spent = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  double left = period_s - spent;
  if (left < 0) left = 0;
  struct timespec wait = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
  int sig;
  do {
    sig = sigtimedwait(stop, NULL, &wait);
  } while (sig < 0 && errno == EINTR);
  return sig != SIGINT && sig != SIGTERM;
}
