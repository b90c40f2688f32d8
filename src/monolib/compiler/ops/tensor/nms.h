/* nms.h -- ONNX NonMaxSuppression (10, 11) on run-time data (monolib kernel library).
 *
 * Per batch b and class c: the boxes whose score passes the threshold (score > thr when
 * a threshold is given) are taken by descending score, equal scores by ascending box
 * index; greedily, a box is kept unless its IoU with a kept box exceeds iou_threshold,
 * until max_out boxes are kept. Boxes of zero area and boxes that do not overlap never
 * suppress (the ONNX spec's and ONNX Runtime's rule). IoU in float32, as ONNX Runtime.
 * center == 0: [y1, x1, y2, x2] (any diagonal corners), 1: [x_c, y_c, w, h].
 * Output: int64 triples (b, c, box) in (b, c, score) order; returns their count.
 *
 * Each candidate is one uint64 key, larger first: the score's bits made monotonic
 * (-0.0 taken as +0.0) above the complement of the box index, so one integer compare
 * orders by score then index. The keys go in a binary max-heap (heapify O(n), pop
 * O(log n)): only the candidates looked at are ordered, a detector keeps a few of
 * thousands. The threshold filter is branch-free (it is a coin flip per score).
 */
#ifndef MONOLIB_NMS_H
#define MONOLIB_NMS_H
#include <stdint.h>
#include <string.h>

/* [x0, y0, x1, y1] with x0 <= x1 and y0 <= y1 */
static inline void ml_nms_corners(const float* b, int center, float* o) {
  if (center) {
    float hw = b[2] / 2, hh = b[3] / 2;
    o[0] = b[0] - hw; o[2] = b[0] + hw; o[1] = b[1] - hh; o[3] = b[1] + hh;
  } else {
    o[0] = b[1] < b[3] ? b[1] : b[3]; o[2] = b[1] < b[3] ? b[3] : b[1];
    o[1] = b[0] < b[2] ? b[0] : b[2]; o[3] = b[0] < b[2] ? b[2] : b[0];
  }
}

static inline int ml_nms_suppresses(const float* a, const float* b, float iou) {
  float ix0 = a[0] > b[0] ? a[0] : b[0], ix1 = a[2] < b[2] ? a[2] : b[2];
  if (ix1 <= ix0) return 0;
  float iy0 = a[1] > b[1] ? a[1] : b[1], iy1 = a[3] < b[3] ? a[3] : b[3];
  if (iy1 <= iy0) return 0;
  float inter = (ix1 - ix0) * (iy1 - iy0);
  if (inter <= 0.0f) return 0;
  float area_a = (a[2] - a[0]) * (a[3] - a[1]), area_b = (b[2] - b[0]) * (b[3] - b[1]);
  float uni = area_a + area_b - inter;
  if (area_a <= 0.0f || area_b <= 0.0f || uni <= 0.0f) return 0;
  return inter / uni > iou;
}

/* the candidate key: monotonic score bits << 32 | ~index (larger key = taken first) */
static inline uint64_t ml_nms_key(float score, int64_t index) {
  uint32_t u;
  score += 0.0f; /* -0.0 -> +0.0: equal scores tie on the index */
  memcpy(&u, &score, 4);
  u ^= (u >> 31) ? 0xFFFFFFFFu : 0x80000000u;
  return ((uint64_t)u << 32) | (uint32_t)~(uint32_t)index;
}

static void ml_nms_sift(uint64_t* h, int64_t n, int64_t i) {
  uint64_t v = h[i];
  for (;;) {
    int64_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && h[c + 1] > h[c]) ++c;
    if (h[c] <= v) break;
    h[i] = h[c];
    i = c;
  }
  h[i] = v;
}

/* scratch: keys (n_boxes uint64), corners (4 * n_boxes floats), kept (n_boxes) */
static int64_t ml_nms(const float* boxes, const float* scores, int64_t B, int64_t C, int64_t N,
                      int64_t max_out, float iou, int has_thr, float thr, int center,
                      int64_t* out, uint64_t* keys, float* corners, int64_t* kept) {
  int64_t total = 0;
  if (max_out <= 0) return 0;
  for (int64_t b = 0; b < B; ++b) {
    const float* bx = boxes + b * N * 4;
    for (int64_t i = 0; i < N; ++i) ml_nms_corners(bx + 4 * i, center, corners + 4 * i);
    for (int64_t c = 0; c < C; ++c) {
      const float* s = scores + (b * C + c) * N;
      int64_t n = 0, nk = 0;
      for (int64_t i = 0; i < N; ++i) {
        keys[n] = ml_nms_key(s[i], i);
        n += !has_thr || s[i] > thr;
      }
      for (int64_t i = n / 2 - 1; i >= 0; --i) ml_nms_sift(keys, n, i);
      while (n > 0 && nk < max_out) {
        int64_t index = (int64_t)(uint32_t)~(uint32_t)keys[0];
        keys[0] = keys[--n];
        if (n > 0) ml_nms_sift(keys, n, 0);
        const float* box = corners + 4 * index;
        int keep = 1;
        for (int64_t q = 0; q < nk && keep; ++q)
          if (ml_nms_suppresses(corners + 4 * kept[q], box, iou)) keep = 0;
        if (!keep) continue;
        kept[nk++] = index;
        out[3 * total] = b; out[3 * total + 1] = c; out[3 * total + 2] = index;
        ++total;
      }
    }
  }
  return total;
}
#endif
