/* The dashboard's page and scripts, built into the binary (assets.c): our index.html, app.js and
 * style.css, and Chart.js and d3 from the Debian packages libjs-chart.js and libjs-d3, read at
 * build time. Nothing is fetched at run time. */
#ifndef EZ_ASSETS_H
#define EZ_ASSETS_H

#include <stddef.h>

typedef struct asset {
  const char *path; /* "/", "/app.js", ... */
  const char *type; /* Content-Type */
  const char *data;
  size_t len;
} asset;

/* The asset served at path into *out; false if there is none. Any thread. */
#include <stdbool.h>
bool asset_find(const char *path, asset *out);

#endif
