/* ez_version: the library's own version, from the build (CMake's project version). */
#include "ezmsg/ezmsg.h"

#ifndef EZ_LIB_VERSION
#define EZ_LIB_VERSION EZ_VERSION
#endif

const char *ez_version(void) { return EZ_LIB_VERSION; }
