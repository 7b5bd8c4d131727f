/* delta_gpu: the device half of the delta encodings, private to the delta module.
 *
 * delta.c describes a piece (delta_internal.h) and hands it here when it lives in device
 * memory; delta_cuda.cu runs CUDA kernels on refit's stream that write the bytes the host loops
 * write, delta_gpu_none.c fails in builds without CUDA. The mark lives in this half's scratch
 * between rf_gpu_delta_mark and the gather that follows it. */
#ifndef RF_DELTA_GPU_H
#define RF_DELTA_GPU_H

#include "delta/delta_internal.h"

/* Marks the elements of job's piece that differ between prev and cur, and waits for the
 * count. With keep set the mark stays for rf_gpu_delta_gather, and job->mask points at it. */
rf_status rf_gpu_delta_mark(rf_delta_job *job, int keep, int64_t *changed);
/* rf_delta_host_gather on the device, from the mark just made (queued, not waited for). */
rf_status rf_gpu_delta_gather(const rf_delta_job *job, char *mask_out, char *offsets, char *values);
/* rf_delta_host_scatter_* on the device (queued, not waited for). */
rf_status rf_gpu_delta_scatter_sparse(const rf_delta_job *job, const char *payload);
rf_status rf_gpu_delta_scatter_bitmask(const rf_delta_job *job, const char *payload);
/* rf_delta_hash of a payload in device memory (8-byte aligned); waits for it. */
rf_status rf_gpu_delta_hash(const char *payload, int64_t bytes, uint64_t seed, uint64_t *hash);

#endif
