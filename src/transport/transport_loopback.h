/* The loopback transport, for tests: every rank of a job is a thread of one process, and the
 * bytes move between them through shared in-memory queues, so the engine's modes, star's
 * reshape stage and the mapped path run without mpirun and without a GPU.
 *
 * It is not in the transport registry: `refit run --help` does not list it and `--transport`
 * does not accept it. A test creates one loopback world for a plan, then each rank's thread
 * opens its own end and hands it to rf_engine_init like any other transport. Messages
 * between two ranks on one channel match in the order they were posted (as MPI's do); a
 * message completes, at both ends, when it is matched and copied. Every wait is bounded by
 * the world's timeout, after which the waiting rank withdraws its unmatched requests, so a
 * stalled rank ends its peers' waits with RF_ERR_TIMEOUT instead of a hang.
 *
 * The mapped variant adds expose/peer_buffer: each rank's arenas are plain host memory that
 * the other threads read and write directly, as the ipc transport maps other processes' GPU
 * memory, and the engine then takes its mapped path (engine_mapped.c). */
#ifndef RF_TRANSPORT_LOOPBACK_H
#define RF_TRANSPORT_LOOPBACK_H

#include "transport/transport.h"

typedef struct rf_loopback rf_loopback;

/* A world of plan->layout->world_size ranks. `mapped` selects the variant with expose and
 * peer_buffer; `timeout` (seconds) bounds every wait. */
rf_status rf_loopback_create(const rf_plan *plan, int mapped, double timeout, rf_loopback **out);

/* Opens world rank `rank`'s end of the world into tp (close it with rf_transport_close, from
 * the same thread). Its ctl is NULL: the loopback has no MPI control plane. */
rf_status rf_loopback_open(rf_loopback *lb, int rank, rf_transport *tp);

/* Frees the world once every end is closed. */
void rf_loopback_free(rf_loopback *lb);

#endif
