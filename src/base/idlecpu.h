/* Whether this machine has a CPU to spare, asked by a thread about to poll instead of sleeping.
 * Polling (the I/O thread's before its epoll_wait, a receiver's or a publisher's before their
 * condition wait) saves the tens of microseconds a wake-up costs, but only while it takes no CPU
 * that another thread needs: on two CPUs with one publisher and eight subscribers, eight pollers
 * take the publisher's CPU and every message costs more wake-ups, not fewer. So, as Go's
 * scheduler spins only while a processor is idle, a thread polls only while the threads runnable
 * on the machine (itself among them) are no more than its online CPUs.
 *
 * The count is the kernel's, the fourth field of /proc/loadavg ("runnable/total"), read at most
 * once every EZI_IDLECPU_PERIOD_NS by one thread of the process; the others use the last answer.
 * Where that file cannot be read, every answer is true (polling as before). Any thread. */
#ifndef EZI_IDLECPU_H
#define EZI_IDLECPU_H

#include <stdbool.h>

#define EZI_IDLECPU_PERIOD_NS 2000000u /* 2 ms */

/* True if polling now would take no CPU another thread waits for (see above). */
bool ezi_cpu_spare(void);

/* Parses the runnable count out of a /proc/loadavg line ("0.50 0.40 0.30 3/120 4567"); -1 if
 * the line has no such field. Pure; for ezi_cpu_spare and its test. */
long ezi_loadavg_runnable(const char *line);

#endif
