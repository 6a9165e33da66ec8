/* Drawing the graph view as text (gvdraw.c). */
#ifndef EZ_GVDRAW_H
#define EZ_GVDRAW_H

#include "graphview.h"

/* The view as Graphviz dot, or as a Mermaid flowchart. A new string (caller frees), or NULL
 * without memory. */
char *gv_draw(const gv *v, bool mermaid);

#endif
