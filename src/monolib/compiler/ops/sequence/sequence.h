/* ONNX sequences and optionals: one arena slot each (abi/sequences.py documents the
   layout): int64 count (-1: an empty optional), per element a record {rank, dims...}
   of 1 + rank int64 (rank: the largest), then element k's data at data_off + k * stride,
   row-major at its actual shape. */
#ifndef ML_SEQUENCE_H
#define ML_SEQUENCE_H

typedef struct {
  uint8_t* base;
  int64_t cap, rank, data_off, stride;
} ml_seq;

static inline int64_t* ml_seq_count(ml_seq s) { return (int64_t*)s.base; }

static inline int64_t* ml_seq_record(ml_seq s, int64_t k) {
  return (int64_t*)(s.base + 8) + k * (s.rank + 1);
}

/* element k's dims (its rank: ml_seq_record(s, k)[0]) */
static inline int64_t* ml_seq_shape(ml_seq s, int64_t k) { return ml_seq_record(s, k) + 1; }

static inline uint8_t* ml_seq_data(ml_seq s, int64_t k) {
  return s.base + s.data_off + k * s.stride;
}

static inline int64_t ml_seq_numel(ml_seq s, int64_t k) {
  const int64_t* r = ml_seq_record(s, k);
  int64_t n = 1;
  for (int64_t a = 0; a < r[0]; ++a) n *= r[1 + a];
  return n;
}

/* element sk of src into position dk of dst: its shape record and its data */
static inline void ml_seq_copy_elem(ml_seq dst, int64_t dk, ml_seq src, int64_t sk,
                                    int64_t itemsize) {
  int64_t r = ml_seq_record(src, sk)[0];
  memmove(ml_seq_record(dst, dk), ml_seq_record(src, sk), (size_t)((r + 1) * 8));
  memmove(ml_seq_data(dst, dk), ml_seq_data(src, sk),
          (size_t)(ml_seq_numel(src, sk) * itemsize));
}

/* element dk's record: rank r, then the r dims of `shape` */
static inline void ml_seq_set_shape(ml_seq dst, int64_t dk, const int64_t* shape, int64_t r) {
  int64_t* rec = ml_seq_record(dst, dk);
  rec[0] = r;
  if (r) memcpy(rec + 1, shape, (size_t)(r * 8));
}

/* a tensor (contiguous, `shape` of r dims) as element dk of dst */
static inline void ml_seq_put(ml_seq dst, int64_t dk, const void* data,
                              const int64_t* shape, int64_t r, int64_t itemsize) {
  ml_seq_set_shape(dst, dk, shape, r);
  memmove(ml_seq_data(dst, dk), data, (size_t)(ml_seq_numel(dst, dk) * itemsize));
}

/* the whole of src (same layout) into dst: count, shape records, elements */
static inline void ml_seq_copy(ml_seq dst, ml_seq src, int64_t itemsize) {
  int64_t n = *ml_seq_count(src);
  *ml_seq_count(dst) = n;
  for (int64_t k = 0; k < n; ++k) ml_seq_copy_elem(dst, k, src, k, itemsize);
}

#endif
