/* The plain scatter refit-delta-bench compares the sparse apply with: value k written to
 * element offsets[k] of a dense row-major piece of 2-byte elements, nothing checked, the fastest
 * way memory takes those writes (bench/scatterprobe.cu found no faster one on an H100). */
#ifndef REFIT_BENCH_DELTA_SCATTER_H
#define REFIT_BENCH_DELTA_SCATTER_H

#include <stdint.h>

/* On the device, on refit's stream (delta_bench_scatter.cu); returns 0, or -1 in a build
 * without CUDA (delta_bench_scatter_none.c) or when the kernel does not launch. */
int bench_scatter_device(uint16_t *dst, const int32_t *offsets, const uint16_t *values,
                         int64_t changed);

#endif
