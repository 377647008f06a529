/*
 * qadam's fused Adam update (CPU; bagua_algorithms/q_adam/kernels.py calls it), part of the CPU kernel
 * library; this header is part of its cdef (native/build_cpu.py). Returns bagua_native.h's codes.
 *
 * bagua_adam_update_f32: Adam's parameter update with the second moment given, in one pass:
 *   p[i] = p[i] + (step * m[i]) / (sqrt(v[i]) / c + eps)
 * in fp32, each operation rounded in that order: exactly what torch computes for
 *   p.addcdiv_(m, (v.sqrt() / c).add_(eps), value=step)
 * with the Python floats step, c and eps rounded to fp32 (torch's scalar arithmetic on fp32 tensors).
 */
#ifndef BAGUA_ADAM_UPDATE_H
#define BAGUA_ADAM_UPDATE_H

#include <stdint.h>

int bagua_adam_update_f32(float *p, const float *m, const float *v, int64_t numel, float step, float c,
                          float eps);

#endif /* BAGUA_ADAM_UPDATE_H */
