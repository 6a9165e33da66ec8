/* The in-process receive mode (publocal.c): a channel whose publisher is in this process puts
 * into the channel's ring itself. */
#ifndef EZI_PUBLOCAL_H
#define EZI_PUBLOCAL_H

#include "ring/rxmode.h"

/* The mode's table (rxmode.h), which the publisher gives the channel it attaches. */
extern const ezi_rx_mode ezi_rx_in_process;
/* What a channel of this process asks of its publisher (core/context.h), which every publisher
 * registers in its context (ctx->local_pubs). */
extern const ezi_local_pubs_ops ezi_local_pubs;

#endif
