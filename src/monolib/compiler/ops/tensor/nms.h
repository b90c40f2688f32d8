/* nms.h -- ONNX NonMaxSuppression (10, 11) on run-time data (monolib kernel library).
 *
 * Per batch b and class c: the boxes whose score passes the threshold (score > thr when
 * a threshold is given) are sorted by descending score, equal scores by ascending box
 * index; greedily, a box is kept unless its IoU with a kept box exceeds iou_threshold,
 * until max_out boxes are kept. Boxes of zero area and boxes that do not overlap never
 * suppress (the ONNX spec's and ONNX Runtime's rule). IoU in float32, as ONNX Runtime.
 * Candidates come off a heap in that order, so only the ones looked at are ordered.
 * center == 0: [y1, x1, y2, x2] (any diagonal corners), 1: [x_c, y_c, w, h].
 * Output: int64 triples (b, c, box) in (b, c, score) order; returns their count.
 */
#ifndef MONOLIB_NMS_H
#define MONOLIB_NMS_H
#include <stdint.h>
#include <stddef.h>

typedef struct ml_nms_cand { float score; int32_t pad; int64_t index; } ml_nms_cand;

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

/* descending score, then ascending index: a strict total order, so any sort is stable */
static inline int ml_nms_before(const ml_nms_cand* a, const ml_nms_cand* b) {
  return a->score > b->score || (a->score == b->score && a->index < b->index);
}

/* cand[0..n) as a binary heap whose top is the first candidate in ml_nms_before order:
 * heapify is O(n) and each pop O(log n), so only the boxes looked at are ordered (a
 * detector keeps a few of thousands of candidates). */
static void ml_nms_sift(ml_nms_cand* h, int64_t n, int64_t i) {
  ml_nms_cand v = h[i];
  for (;;) {
    int64_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && ml_nms_before(&h[c + 1], &h[c])) ++c;
    if (!ml_nms_before(&h[c], &v)) break;
    h[i] = h[c];
    i = c;
  }
  h[i] = v;
}

static void ml_nms_heapify(ml_nms_cand* h, int64_t n) {
  for (int64_t i = n / 2 - 1; i >= 0; --i) ml_nms_sift(h, n, i);
}

/* the top candidate, removed; n shrinks by one */
static ml_nms_cand ml_nms_pop(ml_nms_cand* h, int64_t* n) {
  ml_nms_cand top = h[0];
  h[0] = h[--*n];
  if (*n > 0) ml_nms_sift(h, *n, 0);
  return top;
}

/* scratch: cand (n_boxes), corners (4 * n_boxes floats), kept (n_boxes) */
static int64_t ml_nms(const float* boxes, const float* scores, int64_t B, int64_t C, int64_t N,
                      int64_t max_out, float iou, int has_thr, float thr, int center,
                      int64_t* out, ml_nms_cand* cand, float* corners, int64_t* kept) {
  int64_t total = 0;
  if (max_out <= 0) return 0;
  for (int64_t b = 0; b < B; ++b) {
    const float* bx = boxes + b * N * 4;
    for (int64_t i = 0; i < N; ++i) ml_nms_corners(bx + 4 * i, center, corners + 4 * i);
    for (int64_t c = 0; c < C; ++c) {
      const float* s = scores + (b * C + c) * N;
      int64_t n = 0, nk = 0;
      for (int64_t i = 0; i < N; ++i)
        if (!has_thr || s[i] > thr) { cand[n].score = s[i]; cand[n].pad = 0; cand[n].index = i; ++n; }
      ml_nms_heapify(cand, n);
      while (n > 0 && nk < max_out) {
        ml_nms_cand top = ml_nms_pop(cand, &n);
        const float* box = corners + 4 * top.index;
        int keep = 1;
        for (int64_t q = 0; q < nk && keep; ++q)
          if (ml_nms_suppresses(corners + 4 * kept[q], box, iou)) keep = 0;
        if (!keep) continue;
        kept[nk++] = top.index;
        out[3 * total] = b; out[3 * total + 1] = c; out[3 * total + 2] = top.index;
        ++total;
      }
    }
  }
  return total;
}
#endif
