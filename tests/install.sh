#!/usr/bin/env bash
# The installed package: `cmake --install` into a temporary prefix, then a small program built
# against that copy three ways (pkg-config, pkg-config --static with libezmsg.a, CMake
# find_package(ezmsg) + ezmsg::ezmsg) and run; the installed CLI runs too.
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"

: "${EZ_BUILD:?EZ_BUILD must name the build directory}"
PREFIX="$T/prefix"

# Build the test programs the way the library was built: same compiler, and the same sanitizers
# (an ASan-instrumented libezmsg needs an ASan program around it).
cache_var() { sed -n "s/^$1:[A-Z]*=//p" "$EZ_BUILD/CMakeCache.txt" 2>/dev/null | head -n 1; }
CC=${CC:-$(cache_var CMAKE_C_COMPILER)}
CC=${CC:-cc}
SAN=$(cache_var EZ_SANITIZE)
SANFLAGS=()
[ -n "$SAN" ] && SANFLAGS=(-fsanitize="$SAN" -fno-omit-frame-pointer)

expect_rc 0 cmake --install "$EZ_BUILD" --prefix "$PREFIX"
pass "cmake --install"

HDR="$PREFIX/include/ezmsg/ezmsg.h"
[ -f "$HDR" ] || fail "no installed header at $HDR"
PC=$(find "$PREFIX" -name ezmsg.pc | head -n 1)
[ -n "$PC" ] || fail "no ezmsg.pc installed under $PREFIX"
PCDIR=$(dirname "$PC")
LIBDIR=$(dirname "$PCDIR")
CFG=$(find "$PREFIX" -name ezmsgConfig.cmake | head -n 1)
[ -n "$CFG" ] || fail "no ezmsgConfig.cmake installed under $PREFIX"
[ -e "$LIBDIR/libezmsg.so" ] || fail "no libezmsg.so in $LIBDIR"
[ -e "$LIBDIR/libezmsg.a" ] || fail "no libezmsg.a in $LIBDIR"
pass "installed: header, libraries (${LIBDIR#"$PREFIX"/}), ezmsg.pc, ezmsgConfig.cmake"

mkdir -p "$T/src"
cat >"$T/src/hello.c" <<'EOF'
#include <ezmsg/ezmsg.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  if (strcmp(ez_strerror(EZ_OK), "success") != 0) return 10;
  if (strcmp(ez_strerror(EZ_ECYCLIC), ez_strerror(-123456)) == 0) return 11;
  ez_server *srv = NULL;
  int rc = ez_server_start("127.0.0.1:0", &srv);
  if (rc) {
    fprintf(stderr, "ez_server_start: %s\n", ez_strerror(rc));
    return 12;
  }
  const char *addr = ez_server_address(srv);
  char ver[32] = "";
  rc = ez_graph_ping(addr, ver, sizeof ver, 5000);
  if (!rc) rc = ez_graph_connect(addr, "/in", "/out", 5000);
  ez_graph g = {0};
  if (!rc) rc = ez_graph_dag(addr, &g, 5000);
  size_t n = g.n_nodes;
  ez_graph_free(&g);
  int local = strncmp(addr, "127.0.0.1:", 10) == 0;
  ez_server_stop(srv); /* addr is gone with it */
  if (rc) {
    fprintf(stderr, "graph calls: %s\n", ez_strerror(rc));
    return 13;
  }
  printf("server %s version %s nodes %zu\n", local ? "ok" : "?", ver, n);
  return strcmp(ver, EZ_VERSION) != 0 || n != 2;
}
EOF
WANT="server ok version 3.9.0 nodes 2"

# 1. pkg-config, shared library.
export PKG_CONFIG_PATH="$PCDIR${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
expect_rc 0 pkg-config --exists ezmsg
expect_rc 0 pkg-config --modversion ezmsg
assert_eq "3.6.2" "$(cat "$T/out")" "pkg-config --modversion ezmsg"
read -r -a PKG_FLAGS <<<"$(pkg-config --cflags --libs ezmsg)"
expect_rc 0 "$CC" -std=c11 -Wall -Wextra -Werror "${SANFLAGS[@]+"${SANFLAGS[@]}"}" -o "$T/hello_pc" \
  "$T/src/hello.c" "${PKG_FLAGS[@]}"
LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" expect_rc 0 "$T/hello_pc"
assert_eq "$WANT" "$(cat "$T/out")" "hello (pkg-config)"
LD_LIBRARY_PATH="$LIBDIR" ldd "$T/hello_pc" | grep -q "$LIBDIR/libezmsg.so" ||
  fail "hello (pkg-config) does not use the installed libezmsg.so"
pass "pkg-config build against the installed shared library runs"

# 2. pkg-config --static: the archive plus what Requires.private / Libs.private name.
read -r -a STATIC_FLAGS <<<"$(pkg-config --static --libs ezmsg | sed 's/-lezmsg\b//')"
read -r -a CFLAGS_PC <<<"$(pkg-config --cflags ezmsg)"
expect_rc 0 "$CC" -std=c11 "${SANFLAGS[@]+"${SANFLAGS[@]}"}" -o "$T/hello_static" "$T/src/hello.c" \
  "${CFLAGS_PC[@]}" \
  "$LIBDIR/libezmsg.a" "${STATIC_FLAGS[@]}"
expect_rc 0 "$T/hello_static"
assert_eq "$WANT" "$(cat "$T/out")" "hello (static)"
pass "pkg-config --static build against libezmsg.a runs"

# 3. CMake: find_package(ezmsg) and the imported target ezmsg::ezmsg.
mkdir -p "$T/cmake-src"
cp "$T/src/hello.c" "$T/cmake-src/"
cat >"$T/cmake-src/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.18)
project(hello_ezmsg LANGUAGES C)
find_package(ezmsg 3.6 REQUIRED)
add_executable(hello hello.c)
target_link_libraries(hello PRIVATE ezmsg::ezmsg)
add_executable(hello_static hello.c)
target_link_libraries(hello_static PRIVATE ezmsg::ezmsg_static)
EOF
expect_rc 0 cmake -S "$T/cmake-src" -B "$T/cmake-build" -DCMAKE_PREFIX_PATH="$PREFIX" \
  -DCMAKE_C_COMPILER="$CC" -DCMAKE_C_FLAGS="${SANFLAGS[*]+"${SANFLAGS[*]}"}"
expect_rc 0 cmake --build "$T/cmake-build"
LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" expect_rc 0 "$T/cmake-build/hello"
assert_eq "$WANT" "$(cat "$T/out")" "hello (CMake, ezmsg::ezmsg)"
expect_rc 0 "$T/cmake-build/hello_static"
assert_eq "$WANT" "$(cat "$T/out")" "hello (CMake, ezmsg::ezmsg_static)"
pass "CMake find_package(ezmsg) builds against the installed copy run"

# 4. The installed CLI.
expect_rc 0 "$PREFIX/bin/ezmsg" --help
assert_contains "$T/out" "serve" "installed ezmsg --help"
pass "installed ezmsg CLI runs"
expect_rc 0 "$PREFIX/bin/ezmsg" --version
grep -E "^ezmsg $(pkg-config --modversion ezmsg) \(ezmsg-c; speaks ezmsg [0-9.]+, and [0-9.]+ of the profiling branch\)$" \
  "$T/out" >/dev/null || fail "installed ezmsg --version: $(cat "$T/out")"
pass "installed ezmsg --version"

# 5. Man pages: installed, and they render without a warning.
for page in ezmsg ezmsg-dashboard; do
  MAN=$(find "$PREFIX" -path "*/man1/$page.1" | head -n 1)
  [ -n "$MAN" ] || fail "no $page.1 installed under $PREFIX"
  groff -man -Tutf8 -ww -z "$MAN" 2>"$T/groff.err" || fail "$page.1 does not render"
  assert_empty "$T/groff.err" "groff warnings for $page.1"
  MANPATH="$PREFIX/share/man" man -P cat "$page" >"$T/man.txt" 2>/dev/null ||
    fail "man $page does not find the installed page"
  assert_contains "$T/man.txt" "SYNOPSIS" "man $page"
done
assert_contains "$T/man.txt" "SECURITY" "man ezmsg-dashboard"
pass "man pages ezmsg(1) and ezmsg-dashboard(1) installed and rendered"

# 6. Completion: bash (run it: commands, options, topics from a live server) and zsh (parses).
BASHC="$PREFIX/share/bash-completion/completions/ezmsg"
ZSHC="$PREFIX/share/zsh/site-functions/_ezmsg"
[ -f "$BASHC" ] || fail "no bash completion at $BASHC"
[ -f "$ZSHC" ] || fail "no zsh completion at $ZSHC"
ADDR=$(ez_free_address)
ez_start_serve "$ADDR"
expect_rc 0 "$EZ_CLI" connect --address "$ADDR" /completion/topic /other
complete_words() { # WORDS...: what bash completes for the last word
  PATH="$PREFIX/bin:$PATH" bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
    _ezmsg; printf "%s\n" "${COMPREPLY[@]}"' _ "$BASHC" "$@"
}
complete_words ezmsg pro >"$T/c1"
assert_contains "$T/c1" "profile" "bash completion of 'pro'"
complete_words ezmsg hz --in >"$T/c2"
assert_contains "$T/c2" "--interval" "bash completion of hz --in"
# Every option each command's --help lists is completed, and nothing else (perf has no --count).
for c in serve start pub sub profile list info hz bw dashboard perf; do
  "$PREFIX/bin/ezmsg" "$c" --help | grep -oE -- '--[a-z][a-z-]*' | sort -u >"$T/want"
  complete_words ezmsg "$c" -- | grep -- '^--' | sort -u >"$T/got"
  cmp -s "$T/want" "$T/got" || fail "bash completion of ezmsg $c --: $(diff "$T/want" "$T/got" | tr '\n' ' ')"
done
complete_words ezmsg perf --cou >"$T/c4"
grep -q -- '--count' "$T/c4" && fail "bash completion offers perf --count"
complete_words ezmsg serve --dialect p >"$T/c5"
assert_contains "$T/c5" "profiling" "bash completion of serve --dialect"
complete_words ezmsg info --address "$ADDR" /comp >"$T/c3"
assert_contains "$T/c3" "/completion/topic" "bash completion of a topic"
command -v zsh >/dev/null || fail "zsh is not installed: scripts/deps.sh installs it"
zsh -n "$ZSHC" || fail "the zsh completion does not parse"
pass "bash and zsh completion installed; bash completes commands, options and live topics"

echo "all install tests passed"
