/* ---- monolib_capi_impl.h: the implementation of monolib.h's C API ----
 * Internal: monolib/export/capi.py pastes it into every exported library's C source,
 * after monolib.h and the model's table; programs include monolib.h only.
 * The table defines:
 *   ML_CAPI_HOST            1: the graph runs here; 0: ml_capi_refusal says why not
 *   ml_capi_refusal         NULL, or why monolib_open refuses
 *   ml_capi_inputs[], ml_capi_outputs[], ML_CAPI_NUM_INPUTS, ML_CAPI_NUM_OUTPUTS
 *   ML_CAPI_ARENA_BYTES     the arena size
 *   ML_CAPI_PARAMS_OFFSET, ML_CAPI_PARAMS_BYTES  where the params blob lies in the
 *                           embedded container
 *   ML_CAPI_INPUT_DIMS, ML_CAPI_OUTPUT_DIMS  the sum of the inputs' / outputs' ranks
 *   ML_CAPI_NUM_SYMBOLS     run-time dims (0: a static graph); when > 0 also
 *                           ml_capi_symbols[], ML_CAPI_SYM_OFFSET (arena offset of
 *                           int64_t sym[ML_CAPI_NUM_SYMBOLS], written before each run)
 *                           and ML_CAPI_SHAPE_OFFSET (of int64_t[ML_CAPI_OUTPUT_DIMS],
 *                           the outputs' shapes, written by monolib_run)
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(_MSC_VER)
#define ML_CAPI_TLS __declspec(thread)
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define ML_CAPI_TLS _Thread_local
#else
#define ML_CAPI_TLS __thread
#endif

/* 64: the arena alignment the kernels assume (docs/ARCHITECTURE.md) */
#define ML_CAPI_ALIGN 64

struct monolib_model {
  void* raw;      /* what malloc returned */
  uint8_t* arena; /* raw rounded up to ML_CAPI_ALIGN */
#if ML_CAPI_NUM_SYMBOLS
  int64_t in_dims[ML_CAPI_INPUT_DIMS]; /* every input's shape as last set */
#endif
};

static ML_CAPI_TLS char ml_capi_error[512];

static void ml_capi_fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ml_capi_error, sizeof ml_capi_error, fmt, ap);
  va_end(ap);
}

/* The name of symbol s, for messages. */
static const char* ml_capi_symbol_name(int32_t s) {
#if ML_CAPI_NUM_SYMBOLS
  if (s >= 0 && s < ML_CAPI_NUM_SYMBOLS) return ml_capi_symbols[s].name;
#else
  (void)s;
#endif
  return "?";
}

MONOLIB_API int32_t monolib_capi_version(void) { return MONOLIB_CAPI_VERSION; }

MONOLIB_API const char* monolib_last_error(void) { return ml_capi_error; }

#if ML_CAPI_HOST
int32_t monolib_run(const uint8_t* params, uint8_t* arena); /* the generated code's */
extern const uint8_t __monolib_container_start[];
extern const uint8_t __monolib_container_end[];

static const uint8_t* ml_capi_params(void) {
  size_t size = (size_t)(__monolib_container_end - __monolib_container_start);
  if (size < 8 || memcmp(__monolib_container_start, "\x7fMONOLIB", 8) != 0) {
    ml_capi_fail("monolib_open: the library's embedded container is damaged (bad magic)");
    return NULL;
  }
  if ((uint64_t)size < (uint64_t)ML_CAPI_PARAMS_OFFSET + (uint64_t)ML_CAPI_PARAMS_BYTES) {
    ml_capi_fail("monolib_open: the params [%llu, +%llu) lie outside the embedded container "
                 "(%llu bytes)",
                 (unsigned long long)ML_CAPI_PARAMS_OFFSET,
                 (unsigned long long)ML_CAPI_PARAMS_BYTES, (unsigned long long)size);
    return NULL;
  }
  return __monolib_container_start + ML_CAPI_PARAMS_OFFSET;
}
#endif

MONOLIB_API monolib_model* monolib_open(void) {
#if ML_CAPI_HOST
  monolib_model* m;
  size_t bytes = (size_t)ML_CAPI_ARENA_BYTES;
#ifdef ML_ISA_CHECK
  { /* this CPU against the library's ISA record (glue, runtime/isa.py): first, so no
     * op code runs on a CPU that lacks what it was compiled for */
    const char* why = ml_isa_refusal();
    if (why != NULL) {
      ml_capi_fail("monolib_open: %s", why);
      return NULL;
    }
  }
#endif
  if (ml_capi_params() == NULL) return NULL;
  if ((uint64_t)bytes != (uint64_t)ML_CAPI_ARENA_BYTES || bytes > SIZE_MAX - ML_CAPI_ALIGN) {
    ml_capi_fail("monolib_open: the arena (%llu bytes) does not fit in this address space",
                 (unsigned long long)ML_CAPI_ARENA_BYTES);
    return NULL;
  }
  m = (monolib_model*)malloc(sizeof *m);
  if (m == NULL) {
    ml_capi_fail("monolib_open: out of memory");
    return NULL;
  }
  m->raw = calloc(1, bytes + ML_CAPI_ALIGN);
  if (m->raw == NULL) {
    free(m);
    ml_capi_fail("monolib_open: out of memory for the arena (%llu bytes)",
                 (unsigned long long)ML_CAPI_ARENA_BYTES);
    return NULL;
  }
  m->arena = (uint8_t*)m->raw + (ML_CAPI_ALIGN - (uintptr_t)m->raw % ML_CAPI_ALIGN) % ML_CAPI_ALIGN;
#if ML_CAPI_NUM_SYMBOLS
  { /* before an input is set: zeros at the smallest in-bound shape */
    int32_t i, d;
    for (i = 0; i < ML_CAPI_NUM_INPUTS; ++i) {
      const ml_capi_tensor* t = &ml_capi_inputs[i];
      for (d = 0; d < t->ndim; ++d)
        m->in_dims[t->dims_at + d] =
            t->shape[d] >= 0 ? t->shape[d] : (t->lo[d] + t->step[d] - 1) / t->step[d] * t->step[d];
    }
  }
#endif
  return m;
#else
  ml_capi_fail("monolib_open: %s", ml_capi_refusal);
  return NULL;
#endif
}

MONOLIB_API void monolib_close(monolib_model* model) {
  if (model == NULL) return;
  free(model->raw);
  free(model);
}

static int ml_capi_check(const monolib_model* model, const char* fn) {
  if (model == NULL) {
    ml_capi_fail("%s: model is NULL (monolib_open failed or was not called)", fn);
    return 0;
  }
  return 1;
}

MONOLIB_API int32_t monolib_num_inputs(const monolib_model* model) {
  return ml_capi_check(model, "monolib_num_inputs") ? ML_CAPI_NUM_INPUTS : MONOLIB_ERROR;
}

MONOLIB_API int32_t monolib_num_outputs(const monolib_model* model) {
  return ml_capi_check(model, "monolib_num_outputs") ? ML_CAPI_NUM_OUTPUTS : MONOLIB_ERROR;
}

/* The tensor `i` of `kind` ("input"/"output"), or NULL with the error set. */
static const ml_capi_tensor* ml_capi_tensor_at(const monolib_model* model, int32_t i,
                                               int is_input, const char* fn) {
  int32_t n = is_input ? ML_CAPI_NUM_INPUTS : ML_CAPI_NUM_OUTPUTS;
  if (!ml_capi_check(model, fn)) return NULL;
  if (i < 0 || i >= n) {
    ml_capi_fail("%s: %s index %d is out of range (the model has %d %ss)", fn,
                 is_input ? "input" : "output", (int)i, (int)n, is_input ? "input" : "output");
    return NULL;
  }
  return is_input ? &ml_capi_inputs[i] : &ml_capi_outputs[i];
}

static int32_t ml_capi_info(const ml_capi_tensor* t, monolib_tensor_info* info,
                            const char* fn) {
  if (t == NULL) return MONOLIB_ERROR;
  if (info == NULL) {
    ml_capi_fail("%s: info is NULL", fn);
    return MONOLIB_ERROR;
  }
  info->name = t->name;
  info->dtype_name = t->dtype_name;
  info->dtype.code = t->code;
  info->dtype.bits = t->bits;
  info->dtype.lanes = t->lanes;
  info->ndim = t->ndim;
  info->shape = t->shape;
  info->nbytes = t->nbytes;
  info->shape_lo = t->lo;
  info->shape_hi = t->hi;
  info->shape_step = t->step;
  return MONOLIB_OK;
}

MONOLIB_API int32_t monolib_input_info(const monolib_model* model, int32_t i,
                                       monolib_tensor_info* info) {
  return ml_capi_info(ml_capi_tensor_at(model, i, 1, "monolib_input_info"), info,
                      "monolib_input_info");
}

MONOLIB_API int32_t monolib_output_info(const monolib_model* model, int32_t i,
                                        monolib_tensor_info* info) {
  return ml_capi_info(ml_capi_tensor_at(model, i, 0, "monolib_output_info"), info,
                      "monolib_output_info");
}

static int32_t ml_capi_index(const monolib_model* model, const char* name, int is_input,
                             const char* fn) {
  const ml_capi_tensor* table = is_input ? ml_capi_inputs : ml_capi_outputs;
  int32_t n = is_input ? ML_CAPI_NUM_INPUTS : ML_CAPI_NUM_OUTPUTS;
  int32_t i;
  if (!ml_capi_check(model, fn)) return MONOLIB_ERROR;
  if (name == NULL) {
    ml_capi_fail("%s: name is NULL", fn);
    return MONOLIB_ERROR;
  }
  for (i = 0; i < n; ++i)
    if (strcmp(table[i].name, name) == 0) return i;
  ml_capi_fail("%s: the model has no %s named \"%.200s\"", fn, is_input ? "input" : "output",
               name);
  return MONOLIB_ERROR;
}

MONOLIB_API int32_t monolib_input_index(const monolib_model* model, const char* name) {
  return ml_capi_index(model, name, 1, "monolib_input_index");
}

MONOLIB_API int32_t monolib_output_index(const monolib_model* model, const char* name) {
  return ml_capi_index(model, name, 0, "monolib_output_index");
}

/* Check a copy of nbytes to/from tensor t (holding `want` bytes now) through data;
 * 1 if it may proceed. */
static int ml_capi_check_copy(const ml_capi_tensor* t, uint64_t want, const void* data,
                              size_t nbytes, const char* fn) {
  if (data == NULL && want > 0) {
    ml_capi_fail("%s: data is NULL for \"%s\"", fn, t->name);
    return 0;
  }
  if ((uint64_t)nbytes != want) {
    ml_capi_fail("%s: \"%s\" (%s, %d dims) holds %llu bytes, got %llu", fn, t->name,
                 t->dtype_name, (int)t->ndim, (unsigned long long)want,
                 (unsigned long long)nbytes);
    return 0;
  }
  return 1;
}

MONOLIB_API int32_t monolib_set_input(monolib_model* model, int32_t i, const void* data,
                                      size_t nbytes) {
  const ml_capi_tensor* t = ml_capi_tensor_at(model, i, 1, "monolib_set_input");
  if (t == NULL) return MONOLIB_ERROR;
  if (t->dynamic) {
    ml_capi_fail("monolib_set_input: input \"%s\" has run-time dims: give its shape with "
                 "monolib_set_input_shaped", t->name);
    return MONOLIB_ERROR;
  }
  if (!ml_capi_check_copy(t, t->nbytes, data, nbytes, "monolib_set_input")) return MONOLIB_ERROR;
  if (nbytes) memcpy(model->arena + t->offset, data, nbytes);
  return MONOLIB_OK;
}

/* Bytes of a tensor of dtype t and `ndim` dims `shape`. */
static uint64_t ml_capi_bytes(const ml_capi_tensor* t, const int64_t* shape) {
  uint64_t n = 1;
  int32_t d;
  for (d = 0; d < t->ndim; ++d) n *= (uint64_t)shape[d];
  return n * t->bits / 8 * t->lanes;
}

MONOLIB_API int32_t monolib_set_input_shaped(monolib_model* model, int32_t i, const void* data,
                                             const int64_t* shape, int32_t ndim) {
  static const char fn[] = "monolib_set_input_shaped";
  const ml_capi_tensor* t = ml_capi_tensor_at(model, i, 1, fn);
  int32_t d, e;
  uint64_t nbytes;
  if (t == NULL) return MONOLIB_ERROR;
  if (ndim != t->ndim || (shape == NULL && ndim > 0)) {
    ml_capi_fail("%s: input \"%s\" has %d dims, got %d%s", fn, t->name, (int)t->ndim,
                 (int)ndim, shape == NULL && ndim > 0 ? " and a NULL shape" : "");
    return MONOLIB_ERROR;
  }
  for (d = 0; d < ndim; ++d) {
    int64_t v = shape[d];
    if (t->shape[d] >= 0) {
      if (v != t->shape[d]) {
        ml_capi_fail("%s: input \"%s\" axis %d is %lld, the model expects %lld", fn, t->name,
                     (int)d, (long long)v, (long long)t->shape[d]);
        return MONOLIB_ERROR;
      }
      continue;
    }
    if (v < t->lo[d] || v > t->hi[d] || v % t->step[d] != 0) {
      ml_capi_fail("%s: input \"%s\" axis %d (dim \"%s\") is %lld, outside its bounds "
                   "[%lld, %lld] step %lld", fn, t->name, (int)d,
                   ml_capi_symbol_name(t->sym[d]), (long long)v, (long long)t->lo[d],
                   (long long)t->hi[d], (long long)t->step[d]);
      return MONOLIB_ERROR;
    }
    for (e = 0; e < d; ++e)
      if (t->sym[e] == t->sym[d] && shape[e] != v) {
        ml_capi_fail("%s: input \"%s\" axes %d and %d share dim \"%s\" but are %lld and %lld",
                     fn, t->name, (int)e, (int)d, ml_capi_symbol_name(t->sym[d]),
                     (long long)shape[e], (long long)v);
        return MONOLIB_ERROR;
      }
  }
  nbytes = ml_capi_bytes(t, shape);
  if (nbytes > t->nbytes) { /* the bounds say it fits: a damaged table */
    ml_capi_fail("%s: input \"%s\" of %llu bytes exceeds its slot", fn, t->name,
                 (unsigned long long)nbytes);
    return MONOLIB_ERROR;
  }
  if (data == NULL && nbytes > 0) {
    ml_capi_fail("%s: data is NULL for \"%s\"", fn, t->name);
    return MONOLIB_ERROR;
  }
  if (nbytes) memcpy(model->arena + t->offset, data, (size_t)nbytes);
#if ML_CAPI_NUM_SYMBOLS
  for (d = 0; d < ndim; ++d) model->in_dims[t->dims_at + d] = shape[d];
#endif
  return MONOLIB_OK;
}

#if ML_CAPI_NUM_SYMBOLS
/* Write the symbol values of the inputs' shapes into the arena; 0 (error set) when two
 * inputs give one symbol two values. */
static int ml_capi_bind(monolib_model* model) {
  int32_t s, i, d;
  int64_t sym[ML_CAPI_NUM_SYMBOLS];
  int32_t from[ML_CAPI_NUM_SYMBOLS], axis[ML_CAPI_NUM_SYMBOLS];
  for (s = 0; s < ML_CAPI_NUM_SYMBOLS; ++s) from[s] = -1, axis[s] = 0, sym[s] = 0;
  for (i = 0; i < ML_CAPI_NUM_INPUTS; ++i) {
    const ml_capi_tensor* t = &ml_capi_inputs[i];
    for (d = 0; d < t->ndim; ++d) {
      int64_t v = model->in_dims[t->dims_at + d];
      s = t->sym[d];
      if (s < 0) continue;
      if (from[s] < 0) {
        from[s] = i, axis[s] = d, sym[s] = v;
      } else if (sym[s] != v) {
        ml_capi_fail("monolib_run_model: inputs \"%s\" (axis %d) and \"%s\" (axis %d) share "
                     "dim \"%s\" [%lld, %lld] step %lld but are %lld and %lld",
                     ml_capi_inputs[from[s]].name, (int)axis[s], t->name, (int)d,
                     ml_capi_symbols[s].name, (long long)ml_capi_symbols[s].lo,
                     (long long)ml_capi_symbols[s].hi, (long long)ml_capi_symbols[s].step,
                     (long long)sym[s], (long long)v);
        return 0;
      }
    }
  }
  memcpy(model->arena + ML_CAPI_SYM_OFFSET, sym, sizeof sym);
  return 1;
}
#endif

/* The shape of output t in this run: static, or written by monolib_run. */
static const int64_t* ml_capi_out_shape(const monolib_model* model, const ml_capi_tensor* t) {
#if ML_CAPI_NUM_SYMBOLS
  if (t->dynamic)
    return (const int64_t*)(model->arena + ML_CAPI_SHAPE_OFFSET) + t->dims_at;
#else
  (void)model;
#endif
  return t->shape;
}

MONOLIB_API int32_t monolib_output_shape(const monolib_model* model, int32_t i, int64_t* shape) {
  const ml_capi_tensor* t = ml_capi_tensor_at(model, i, 0, "monolib_output_shape");
  if (t == NULL) return MONOLIB_ERROR;
  if (shape == NULL && t->ndim > 0) {
    ml_capi_fail("monolib_output_shape: shape is NULL");
    return MONOLIB_ERROR;
  }
  if (t->ndim) memcpy(shape, ml_capi_out_shape(model, t), sizeof(int64_t) * (size_t)t->ndim);
  return MONOLIB_OK;
}

MONOLIB_API int32_t monolib_run_model(monolib_model* model) {
  if (!ml_capi_check(model, "monolib_run_model")) return MONOLIB_ERROR;
#if ML_CAPI_HOST
  {
    int32_t rc;
#if ML_CAPI_NUM_SYMBOLS
    int32_t i;
    if (!ml_capi_bind(model)) return MONOLIB_ERROR;
#endif
    rc = monolib_run(ml_capi_params(), model->arena);
    if (rc != 0) {
      ml_capi_fail("monolib_run_model: the graph failed (monolib_run returned %d)", (int)rc);
      return MONOLIB_ERROR;
    }
#if ML_CAPI_NUM_SYMBOLS
    for (i = 0; i < ML_CAPI_NUM_OUTPUTS; ++i) { /* a shape the slot cannot hold: a bug */
      const ml_capi_tensor* t = &ml_capi_outputs[i];
      const int64_t* shape = ml_capi_out_shape(model, t);
      int32_t d;
      for (d = 0; d < t->ndim; ++d)
        if (shape[d] < 0) break;
      if (d < t->ndim || ml_capi_bytes(t, shape) > t->nbytes) {
        ml_capi_fail("monolib_run_model: the library wrote a shape for output \"%s\" that its "
                     "%llu bytes cannot hold", t->name, (unsigned long long)t->nbytes);
        return MONOLIB_ERROR;
      }
    }
#endif
  }
  return MONOLIB_OK;
#else
  ml_capi_fail("monolib_run_model: %s", ml_capi_refusal);
  return MONOLIB_ERROR;
#endif
}

MONOLIB_API int32_t monolib_get_output(const monolib_model* model, int32_t i, void* data,
                                       size_t nbytes) {
  const ml_capi_tensor* t = ml_capi_tensor_at(model, i, 0, "monolib_get_output");
  if (t == NULL) return MONOLIB_ERROR;
  if (!ml_capi_check_copy(t, ml_capi_bytes(t, ml_capi_out_shape(model, t)), data, nbytes,
                          "monolib_get_output"))
    return MONOLIB_ERROR;
  if (nbytes) memcpy(data, model->arena + t->offset, nbytes);
  return MONOLIB_OK;
}

MONOLIB_API const void* monolib_output_data(const monolib_model* model, int32_t i) {
  const ml_capi_tensor* t = ml_capi_tensor_at(model, i, 0, "monolib_output_data");
  return t == NULL ? NULL : (const void*)(model->arena + t->offset);
}
