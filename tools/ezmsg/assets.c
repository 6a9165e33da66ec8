/* The dashboard's files, embedded with the assembler's .incbin (assets.h). CMake passes their
 * paths (EZ_ASSET_*) and rebuilds this file when one of them changes. */
#include "assets.h"

#include <string.h>

#define EMBED(sym, file)                                                                           \
  __asm__(".section .rodata\n.balign 16\n.global " #sym "\n.hidden " #sym "\n" #sym                \
          ":\n.incbin \"" file "\"\n.global " #sym "_end\n.hidden " #sym "_end\n" #sym             \
          "_end:\n.byte 0\n.previous\n");                                                          \
  extern const char sym[], sym##_end[]

EMBED(ez_asset_index, EZ_ASSET_INDEX);
EMBED(ez_asset_app, EZ_ASSET_APP);
EMBED(ez_asset_css, EZ_ASSET_CSS);
EMBED(ez_asset_chart, EZ_ASSET_CHARTJS);
EMBED(ez_asset_d3, EZ_ASSET_D3);

bool asset_find(const char *path, asset *out) {
  static const asset table[] = {
      {"/", "text/html; charset=utf-8", ez_asset_index, 0},
      {"/index.html", "text/html; charset=utf-8", ez_asset_index, 0},
      {"/app.js", "text/javascript; charset=utf-8", ez_asset_app, 0},
      {"/style.css", "text/css; charset=utf-8", ez_asset_css, 0},
      {"/chart.js", "text/javascript; charset=utf-8", ez_asset_chart, 0},
      {"/d3.js", "text/javascript; charset=utf-8", ez_asset_d3, 0},
  };
  static const char *ends[] = {ez_asset_index_end, ez_asset_index_end, ez_asset_app_end,
                               ez_asset_css_end,   ez_asset_chart_end, ez_asset_d3_end};
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    if (strcmp(path, table[i].path)) continue;
    *out = table[i];
    out->len = (size_t)(ends[i] - table[i].data);
    return true;
  }
  return false;
}
