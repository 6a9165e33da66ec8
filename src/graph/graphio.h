/* Blocking exchanges with a graph server, bounded by a deadline (graphio.c). */
#ifndef EZI_GRAPHIO_H
#define EZI_GRAPHIO_H

#include <stddef.h>
#include <stdint.h>

/* Blocking-with-deadline I/O on a non-blocking fd. EZ_ECONNLOST on EOF, EZ_ETIMEDOUT. */
int ezi_io_write(int fd, const void *p, size_t n, uint64_t deadline);
int ezi_io_read(int fd, void *p, size_t n, uint64_t deadline);
int ezi_io_read_u64(int fd, uint64_t *v, uint64_t deadline);
/* Reads a str of at most `max` bytes into a new NUL-terminated string (EZ_EPROTO if longer). */
int ezi_io_read_str(int fd, char **out, size_t *len, uint64_t max, uint64_t deadline);

/* Connects to the graph server (NULL: env / default) and reads its version. Returns the fd or a
 * negative EZ_E* (EZ_ENOSERVER if nobody answers). */
int ezi_graph_open(const char *address, uint64_t deadline, char *version, size_t cap);

#endif
