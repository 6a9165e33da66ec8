/* Sleeping on a 32-bit word that another process may share: Linux futexes, for the direct
 * wake-ups across the shared-memory ring (proto/shmring.h, docs/architecture.md). A word is a
 * counter: a waker adds one and wakes every sleeper; a sleeper reads the word, checks its
 * condition, and sleeps only while the word still holds what it read, so a wake-up between the
 * check and the sleep is never lost. The words are not private (FUTEX_PRIVATE_FLAG is not used):
 * the sleeper and the waker may be different processes mapping the same memory. Internal; not
 * installed. */
#ifndef EZI_FUTEX_H
#define EZI_FUTEX_H

#include <stddef.h>
#include <stdint.h>

/* Sleeps while *word == expect, until woken or until `deadline` (CLOCK_MONOTONIC ns, as
 * ezi_deadline gives; UINT64_MAX: no deadline). Returns 0 when woken, when the word no longer
 * held `expect`, or on a signal (the caller looks again either way), EZ_ETIMEDOUT once the
 * deadline passed, EZ_ESYS if the word cannot be slept on (not mapped: EFAULT; the caller then
 * waits another way). Any thread. */
int ezi_futex_wait(uint32_t *word, uint32_t expect, uint64_t deadline);

/* The most words ezi_futex_waitv sleeps on at once (the kernel's FUTEX_WAITV_MAX). */
#define EZI_FUTEX_WAITV_MAX 128

/* Sleeps, as ezi_futex_wait, while every words[i] == expect[i] (n of them, 1 <= n <=
 * EZI_FUTEX_WAITV_MAX), until one is woken or the deadline: Linux's futex_waitv (5.16 on).
 * Returns as ezi_futex_wait (EZ_ESYS: a word is not mapped), and EZ_ENOTSUP if the kernel does
 * not have the call or a filter refuses it (the caller then sleeps another way; every later call
 * says the same at once). Any thread. */
int ezi_futex_waitv(uint32_t *const *words, const uint32_t *expect, size_t n, uint64_t deadline);

/* Adds one to *word (sequentially consistent) and wakes every thread sleeping on it, in any
 * process. Returns how many woke (-1 if the system call failed, e.g. the word is not mapped).
 * Any thread. */
int ezi_futex_wake(uint32_t *word);

#endif
