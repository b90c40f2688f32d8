/* transpose.h -- 2-D transposes of 4-byte elements by register blocks (monolib kernel
 * library).
 *
 * Needs gemm.h (ml_vf, ML_VW, ml_transpose_vw) before it.
 *
 * ml_transpose2d moves ML_VW x ML_VW blocks through vector registers: ML_VW loads along
 * the source's contiguous dim, ml_transpose_vw, ML_VW stores along the destination's.
 * At 16 floats a vector every load and store is one whole cache line. An element copy
 * loop reads one float per strided load (NCHW -> NHWC of 64 x 80 x 80: 0.68 ns an
 * element, ONNX Runtime 0.26). Bits are moved, never computed on: any 4-byte type.
 */
#ifndef MONOLIB_TRANSPOSE_H
#define MONOLIB_TRANSPOSE_H
#include <stdint.h>
#include <string.h>

/* dst[i * ldd + j] = src[i + j * lds] for i < R, j < C (4-byte elements). */
ML_UNUSED static void ml_transpose2d(int64_t R, int64_t C, const void* src_, int64_t lds,
                                     void* dst_, int64_t ldd) {
    const uint32_t* src = (const uint32_t*)src_;
    uint32_t* dst = (uint32_t*)dst_;
    const int64_t R0 = R / ML_VW * ML_VW, C0 = C / ML_VW * ML_VW;
    for (int64_t i = 0; i < R0; i += ML_VW) {
        for (int64_t j = 0; j < C0; j += ML_VW) {
            ml_vf r[ML_VW];
            for (int k = 0; k < ML_VW; ++k) memcpy(&r[k], src + i + (j + k) * lds, sizeof(ml_vf));
            ml_transpose_vw(r);
            for (int k = 0; k < ML_VW; ++k) memcpy(dst + (i + k) * ldd + j, &r[k], sizeof(ml_vf));
        }
        for (int64_t ii = i; ii < i + ML_VW; ++ii)
            for (int64_t j = C0; j < C; ++j) dst[ii * ldd + j] = src[ii + j * lds];
    }
    for (int64_t i = R0; i < R; ++i)
        for (int64_t j = 0; j < C; ++j) dst[i * ldd + j] = src[i + j * lds];
}
#endif
