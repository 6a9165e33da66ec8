/* One endpoint's profile document, checked without building it (profentry.c): what our graph
 * server needs to copy an endpoint's PROFILE answer into its own as the text came (gs_profile.c)
 * instead of parsing it into a tree and writing it out again, which cost it most of a profile's
 * time (2 000 answers: 18 ms parsed by jansson, 2.4 ms checked by yajl's callback parser).
 *
 * It accepts only what jansson's default decoder accepts too, so that a reader of the whole
 * document (ez_profile_parse, Python's json) cannot be broken by one endpoint: one JSON value that
 * is an object, valid UTF-8, no \u0000 and no unpaired surrogate escape, no integer beyond
 * 64 bits or real beyond a double, nesting at most EZI_PE_MAX_DEPTH deep, nothing after it. Pure:
 * any thread. */
#ifndef EZI_PROFENTRY_H
#define EZI_PROFENTRY_H

#include <stdbool.h>
#include <stddef.h>

#define EZI_PE_MAX_DEPTH 64 /* objects and arrays within each other (a profile needs about 5) */

enum { EZI_PE_OTHER, EZI_PE_PUBLISHER, EZI_PE_CHANNEL }; /* its "type" */

typedef struct ezi_prof_entry {
  int type;         /* EZI_PE_*: the top-level "type" string (OTHER: absent or another) */
  bool has_dialect; /* a top-level "dialect" */
  bool has_topic;   /* a top-level "topic" */
  char pub_id[64];  /* the top-level "pub_id" string ("": absent, not a string, or too long) */
  size_t brace;     /* the offset of the object's opening brace in the text */
} ezi_prof_entry;

/* Checks text (n bytes) as above, and that it names each of "type", "dialect", "topic" and
 * "pub_id" at its top level at most once. 0 and *out, or EZ_EPROTO (the reason in why, which may
 * be NULL, a static string), or EZ_ENOMEM. */
int ezi_prof_entry_check(const char *text, size_t n, ezi_prof_entry *out, const char **why);

#endif
