/* Segment names nobody can remove any more: a graph server SIGKILLed together with the process
 * that asked for the segment (here: the same process) leaves the name in /dev/shm, and the next
 * graph server to start removes it (ezi_shm_sweep), but never a live server's segment, a young
 * one, or a name that is not ours (the Python reference's).
 *
 * Other tests run in parallel and their servers sweep too: every name here that a sweep may take
 * is made old by hand (its mtime set an hour back) only once the test has checked it exists. */
#include "harness.h"
#include "proto/shm.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define TMO 5000

static bool shm_exists(const char *name) {
  char path[128];
  snprintf(path, sizeof path, "/dev/shm/%s", name);
  return access(path, F_OK) == 0;
}

/* Sets name's mtime an hour back: old enough for any sweep. */
static void make_old(const char *name) {
  char path[128];
  snprintf(path, sizeof path, "/dev/shm/%s", name);
  struct timespec t[2] = {{.tv_sec = time(NULL) - 3600}, {.tv_sec = time(NULL) - 3600}};
  assert_int_equal(utimensat(AT_FDCWD, path, t, 0), 0);
}

/* A file in /dev/shm made by hand, held by nobody. */
static void make_raw(const char *name) {
  char path[128];
  snprintf(path, sizeof path, "/%s", name);
  int fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, 4096), 0);
  close(fd);
}

static void unlink_raw(const char *name) {
  char path[128];
  snprintf(path, sizeof path, "/%s", name);
  assert_int_equal(shm_unlink(path), 0);
}

/* A child process that starts a graph server, asks it for a segment, writes the segment's name to
 * fd and waits to be killed. Returns its pid; *name gets the segment's name. */
static pid_t doomed_server(char name[64]) {
  int p[2];
  assert_int_equal(pipe(p), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(p[0]);
    ez_server *srv = NULL;
    ez_shm *shm = NULL;
    if (ez_server_start("127.0.0.1:0", &srv) ||
        ez_shm_create(ez_server_address(srv), 4, 4096, &shm, TMO))
      _exit(2);
    char out[64] = {0};
    snprintf(out, sizeof out, "%s", ez_shm_name(shm));
    if (write(p[1], out, sizeof out) != (ssize_t)sizeof out) _exit(3);
    for (;;)
      pause();
  }
  close(p[1]);
  ssize_t n = 0, r;
  while (n < 64 && (r = read(p[0], name + n, (size_t)(64 - n))) > 0)
    n += r;
  close(p[0]);
  assert_int_equal(n, 64);
  name[63] = 0;
  return pid;
}

static void test_dead_server_segment_swept(void **state) {
  (void)state;
  char dead[64];
  pid_t pid = doomed_server(dead);
  assert_true(strncmp(dead, EZI_SHM_PREFIX, strlen(EZI_SHM_PREFIX)) == 0);
  assert_int_equal(kill(pid, SIGKILL), 0);
  assert_int_equal(waitpid(pid, NULL, 0), pid);
  assert_true(shm_exists(dead)); /* nobody was left to remove it */

  /* A live server's segment, a young name of ours and an old name of the reference's. */
  char addr[64];
  ez_server *live = NULL, *next = NULL;
  ez_shm *held = NULL;
  assert_int_equal(ez_server_start(th_free_address(addr, sizeof addr), &live), 0);
  assert_int_equal(ez_shm_create(ez_server_address(live), 2, 1024, &held, TMO), 0);
  char young[64], theirs[64];
  snprintf(young, sizeof young, EZI_SHM_PREFIX "%08x", (unsigned)getpid());
  snprintf(theirs, sizeof theirs, "psm_%08x", 0x5eed0000u ^ (unsigned)getpid());
  make_raw(young);
  make_raw(theirs);
  make_old(dead);
  make_old(ez_shm_name(held));
  make_old(theirs);

  assert_int_equal(ez_server_start(th_free_address(addr, sizeof addr), &next), 0);
  assert_false(shm_exists(dead));
  assert_true(shm_exists(ez_shm_name(held)));
  assert_true(shm_exists(young));
  assert_true(shm_exists(theirs));
  /* The live segment still works: attached again by name through its server. */
  ez_shm *again = NULL;
  assert_int_equal(ez_shm_attach(ez_server_address(live), ez_shm_name(held), &again, TMO), 0);
  ez_shm_close(again);

  unlink_raw(young);
  unlink_raw(theirs);
  char name[64];
  snprintf(name, sizeof name, "%s", ez_shm_name(held));
  ez_shm_close(held);
  ez_server_stop(live);
  ez_server_stop(next);
  assert_false(shm_exists(name)); /* its server removed it with the last lease */
}

/* The hold is what keeps a name: the same old name is swept once its holder closes it. */
static void test_hold_keeps_name(void **state) {
  (void)state;
  ezi_shm s;
  int hold = -1;
  assert_int_equal(ezi_shm_create(2, 64, &s, &hold), 0);
  assert_true(hold >= 0);
  make_old(s.name);
  ezi_shm_sweep(EZI_SHM_STALE_S);
  assert_true(shm_exists(s.name));
  close(hold);
  ezi_shm_sweep(EZI_SHM_STALE_S);
  assert_true(shm_exists(s.name)); /* the mapping made from that descriptor holds it too */
  char name[sizeof s.name];
  memcpy(name, s.name, sizeof name);
  ezi_shm_detach(&s);
  ezi_shm_sweep(EZI_SHM_STALE_S); /* (another test's server may have swept it first) */
  assert_false(shm_exists(name));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dead_server_segment_swept),
      cmocka_unit_test(test_hold_keeps_name),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
