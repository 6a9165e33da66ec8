/* Shared-memory segments in the ezmsg layout: create, attach, layout, validation, cleanup.
 * Other tests run in parallel: every test removes exactly the segments it made and checks that
 * those names are gone (it never counts all psm_ entries). */
#include "harness.h"
#include "proto/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

static uint64_t le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}
static void put_le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static bool shm_exists(const char *name) {
  char path[128];
  snprintf(path, sizeof path, "/dev/shm/%s", name);
  return access(path, F_OK) == 0;
}

/* Unlinks a segment this test made and checks it is gone. */
static void remove_segment(const char *name) {
  assert_true(shm_exists(name));
  assert_int_equal(ezi_shm_unlink(name), 0);
  assert_false(shm_exists(name));
  assert_int_equal(ezi_shm_unlink(name), EZ_ENOENT);
}

static bool is_psm_name(const char *n) {
  if (strlen(n) != 14 || strncmp(n, "psm_ez", 6) != 0) return false;
  for (int i = 6; i < 14; i++)
    if (!((n[i] >= '0' && n[i] <= '9') || (n[i] >= 'a' && n[i] <= 'f'))) return false;
  return true;
}

static bool all_zero(const ezi_shm *z) {
  static const ezi_shm zero;
  return memcmp(z, &zero, sizeof zero) == 0;
}

static void test_create_layout(void **state) {
  (void)state;
  ezi_shm s;
  assert_int_equal(ezi_shm_create(4, 100, &s, NULL), 0);
  assert_true(is_psm_name(s.name));
  assert_int_equal(s.num_buffers, 4);
  assert_int_equal(s.stride, 100 + 16 * 4);
  assert_int_equal(s.size, 4 * 164);
  assert_int_equal(le64(s.base), 4);
  assert_int_equal(le64(s.base + 8), 164);
  assert_int_equal(ezi_shm_data_size(&s), 148);
  for (uint64_t i = 0; i < 4; i++)
    assert_ptr_equal(ezi_shm_data(&s, i), s.base + i * 164 + 16);
  for (size_t i = 16; i < s.size; i++)
    if (s.base[i]) fail_msg("byte %zu not zero", i);

  char path[128];
  snprintf(path, sizeof path, "/dev/shm/%s", s.name);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_size, 656);
  assert_int_equal(st.st_mode & 0777 & ~0600, 0); /* nothing beyond owner read-write */
  assert_int_equal(st.st_mode & 0600, 0600);

  char name[64];
  strcpy(name, s.name);
  ezi_shm_detach(&s);
  assert_true(all_zero(&s));
  ezi_shm_detach(&s); /* idempotent */
  remove_segment(name);
}

static void test_two_mappings(void **state) {
  (void)state;
  ezi_shm a, b;
  assert_int_equal(ezi_shm_create(3, 4096, &a, NULL), 0);
  assert_int_equal(ezi_shm_attach(a.name, &b), 0);
  assert_string_equal(a.name, b.name);
  assert_ptr_not_equal(a.base, b.base);
  assert_int_equal(b.num_buffers, 3);
  assert_int_equal(b.stride, a.stride);
  assert_int_equal(b.size, a.size);
  uint64_t ds = ezi_shm_data_size(&a);
  assert_int_equal(ds, 4096 + 16 * 3 - 16);
  /* fill every data block through a, read through b */
  for (uint64_t i = 0; i < 3; i++)
    memset(ezi_shm_data(&a, i), (int)(0x10 + i), ds);
  for (uint64_t i = 0; i < 3; i++) {
    const uint8_t *d = ezi_shm_data(&b, i);
    for (uint64_t k = 0; k < ds; k++)
      if (d[k] != 0x10 + i)
        fail_msg("block %llu byte %llu", (unsigned long long)i, (unsigned long long)k);
  }
  /* blocks are disjoint and leave the reserved bytes alone */
  assert_int_equal(le64(b.base), 3);
  assert_int_equal(le64(b.base + 8), a.stride);
  for (uint64_t i = 1; i < 3; i++)
    for (int k = 0; k < 16; k++)
      assert_int_equal(b.base[i * b.stride + k], 0);
  /* and the other way */
  memcpy(ezi_shm_data(&b, 2) + ds - 5, "hello", 5);
  assert_memory_equal(ezi_shm_data(&a, 2) + ds - 5, "hello", 5);
  assert_int_equal(ezi_shm_data(&a, 1)[ds - 1], 0x11);

  char name[64];
  strcpy(name, a.name);
  ezi_shm_detach(&a);
  /* the segment survives the creator's unmap and even unlink while b maps it */
  remove_segment(name);
  assert_int_equal(ezi_shm_data(&b, 0)[0], 0x10);
  assert_int_equal(ezi_shm_attach(name, &a), EZ_ENOENT);
  ezi_shm_detach(&b);
}

static void test_many_names_distinct(void **state) {
  (void)state;
  enum { N = 8 };
  ezi_shm s[N];
  for (int i = 0; i < N; i++) {
    assert_int_equal(ezi_shm_create(1, 1, &s[i], NULL), 0);
    assert_true(is_psm_name(s[i].name));
    assert_int_equal(s[i].stride, 17);
    assert_int_equal(s[i].size, 17);
    assert_int_equal(ezi_shm_data_size(&s[i]), 1);
    for (int k = 0; k < i; k++)
      assert_string_not_equal(s[i].name, s[k].name);
  }
  for (int i = 0; i < N; i++) {
    char name[64];
    strcpy(name, s[i].name);
    ezi_shm_detach(&s[i]);
    remove_segment(name);
  }
}

static void test_attach_unknown(void **state) {
  (void)state;
  char name[64];
  snprintf(name, sizeof name, "ezc_test_absent_%d", (int)getpid());
  ezi_shm s;
  memset(&s, 0x55, sizeof s);
  assert_int_equal(ezi_shm_attach(name, &s), EZ_ENOENT);
  assert_true(all_zero(&s));
  assert_int_equal(ezi_shm_unlink(name), EZ_ENOENT);
  assert_false(shm_exists(name));
}

static void test_bad_names(void **state) {
  (void)state;
  char longname[80];
  memset(longname, 'a', 64);
  longname[64] = 0;
  const char *bad[] = {NULL, "",      "a/b",   "/psm_00000000", "psm_0000000/", ".",
                       "..", "psm x", "psm\n", "psm_\xc3\xa9",  "psm*",         longname};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ezi_shm s;
    memset(&s, 0x55, sizeof s);
    if (ezi_shm_attach(bad[i], &s) != EZ_EINVAL) fail_msg("attach of bad name %zu accepted", i);
    assert_true(all_zero(&s));
    if (ezi_shm_unlink(bad[i]) != EZ_EINVAL) fail_msg("unlink of bad name %zu accepted", i);
  }
  /* 63 characters of the allowed set are fine (and absent) */
  char ok[64];
  int n = snprintf(ok, sizeof ok, "ezc.test-%d_", (int)getpid());
  memset(ok + n, 'Z', 63 - (size_t)n);
  ok[63] = 0;
  ezi_shm s;
  assert_int_equal(ezi_shm_attach(ok, &s), EZ_ENOENT);
  assert_int_equal(ezi_shm_unlink(ok), EZ_ENOENT);
}

static void test_create_invalid(void **state) {
  (void)state;
  const uint64_t args[][2] = {
      {0, 1}, {65537, 1}, {1, 0}, {1, (1ull << 40) + 1}, {UINT64_MAX, 1}, {1, UINT64_MAX},
  };
  for (size_t i = 0; i < sizeof args / sizeof args[0]; i++) {
    ezi_shm s;
    memset(&s, 0x55, sizeof s);
    if (ezi_shm_create(args[i][0], args[i][1], &s, NULL) != EZ_EINVAL)
      fail_msg("create(%llu, %llu) accepted", (unsigned long long)args[i][0],
               (unsigned long long)args[i][1]);
    assert_true(all_zero(&s));
  }
  assert_int_equal(ezi_shm_create(1, 1, NULL, NULL), EZ_EINVAL);
}

/* Captures the library's log lines (this test process has no library threads). */
static char g_log[1024];
static void capture(void *user, int level, const char *msg) {
  (void)user;
  (void)level;
  size_t n = strlen(g_log);
  snprintf(g_log + n, sizeof g_log - n, "%s\n", msg);
}

/* A request bigger than /dev/shm can hold fails cleanly: EZ_ENOMEM, and the segment it had
 * opened (named in the debug log) is gone. */
static void test_create_too_big(void **state) {
  (void)state;
  struct statvfs v;
  if (statvfs("/dev/shm", &v) != 0) skip();
  /* tmpfs refuses a fallocate larger than its whole size up front (no pages touched) */
  uint64_t fs_size = (uint64_t)v.f_blocks * v.f_frsize;
  if (fs_size >= (1ull << 40)) skip();
  ezi_shm s;
  memset(&s, 0x55, sizeof s);
  g_log[0] = 0;
  ez_set_log_hook(capture, NULL, EZ_LOG_DEBUG);
  int rc = ezi_shm_create(2, 1ull << 40, &s, NULL);
  ez_set_log_hook(NULL, NULL, EZ_LOG_ERROR);
  assert_int_equal(rc, EZ_ENOMEM);
  assert_true(all_zero(&s));
  const char *p = strstr(g_log, "/psm_");
  if (!p) fail_msg("no segment name in the log: %s", g_log);
  char name[15];
  memcpy(name, p + 1, 14);
  name[14] = 0;
  assert_true(is_psm_name(name));
  assert_false(shm_exists(name));
}

/* Creates /dev/shm/<name> by hand with the given size and first 16 bytes. */
static void make_raw(const char *name, size_t size, uint64_t nb, uint64_t stride) {
  char path[128];
  snprintf(path, sizeof path, "/%s", name);
  int fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, (off_t)size), 0);
  uint8_t hdr[16];
  put_le64(hdr, nb);
  put_le64(hdr + 8, stride);
  size_t n = size < 16 ? size : 16;
  if (n) assert_int_equal(pwrite(fd, hdr, n, 0), (ssize_t)n);
  close(fd);
}

static void test_corrupt_headers(void **state) {
  (void)state;
  const struct {
    size_t size;
    uint64_t nb, stride;
    int want;
  } cases[] = {
      {0, 0, 0, EZ_EPROTO},                        /* empty */
      {8, 1, 0, EZ_EPROTO},                        /* shorter than the header */
      {15, 1, 15, EZ_EPROTO},                      /* shorter than the header */
      {16, 0, 16, EZ_EPROTO},                      /* no buffers */
      {16, 1, 0, EZ_EPROTO},                       /* stride 0 */
      {16, 2, 8, EZ_EPROTO},                       /* stride < 16 though 2*8 == 16 */
      {100, 2, 100, EZ_EPROTO},                    /* 200 != 100 */
      {200, 1, 100, EZ_EPROTO},                    /* 100 != 200 */
      {16, (1ull << 60) + 1, 16, EZ_EPROTO},       /* product wraps to 16 */
      {32, 1ull << 63, 1ull << 1 | 32, EZ_EPROTO}, /* product overflows */
      {16, UINT64_MAX, UINT64_MAX, EZ_EPROTO},
      {64, 2, 32, 0}, /* a consistent hand-made segment */
      {16, 1, 16, 0}, /* one buffer, empty data block */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char name[64];
    snprintf(name, sizeof name, "ezc_test_hdr_%d_%zu", (int)getpid(), i);
    make_raw(name, cases[i].size, cases[i].nb, cases[i].stride);
    ezi_shm s;
    int rc = ezi_shm_attach(name, &s);
    if (rc != cases[i].want) fail_msg("case %zu: rc %d", i, rc);
    if (rc == 0) {
      assert_int_equal(s.size, cases[i].size);
      assert_int_equal(s.num_buffers, cases[i].nb);
      assert_int_equal(s.stride, cases[i].stride);
      assert_string_equal(s.name, name);
      ezi_shm_detach(&s);
    } else {
      assert_true(all_zero(&s));
    }
    remove_segment(name);
  }
}

static void test_detach_zeroed(void **state) {
  (void)state;
  ezi_shm s;
  memset(&s, 0, sizeof s);
  ezi_shm_detach(&s);
  ezi_shm_detach(&s);
  ezi_shm_detach(NULL);
  assert_true(all_zero(&s));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_create_layout),       cmocka_unit_test(test_two_mappings),
      cmocka_unit_test(test_many_names_distinct), cmocka_unit_test(test_attach_unknown),
      cmocka_unit_test(test_bad_names),           cmocka_unit_test(test_create_invalid),
      cmocka_unit_test(test_create_too_big),      cmocka_unit_test(test_corrupt_headers),
      cmocka_unit_test(test_detach_zeroed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
