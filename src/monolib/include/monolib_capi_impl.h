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
};

static ML_CAPI_TLS char ml_capi_error[512];

static void ml_capi_fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ml_capi_error, sizeof ml_capi_error, fmt, ap);
  va_end(ap);
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
  info->dtype.lanes = 1;
  info->ndim = t->ndim;
  info->shape = t->shape;
  info->nbytes = t->nbytes;
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

/* Check a copy of nbytes to/from tensor t through data; 1 if it may proceed. */
static int ml_capi_check_copy(const ml_capi_tensor* t, const void* data, size_t nbytes,
                              const char* fn) {
  if (t == NULL) return 0;
  if (data == NULL && t->nbytes > 0) {
    ml_capi_fail("%s: data is NULL for \"%s\"", fn, t->name);
    return 0;
  }
  if ((uint64_t)nbytes != t->nbytes) {
    ml_capi_fail("%s: \"%s\" (%s, %d dims) holds %llu bytes, got %llu", fn, t->name,
                 t->dtype_name, (int)t->ndim, (unsigned long long)t->nbytes,
                 (unsigned long long)nbytes);
    return 0;
  }
  return 1;
}

MONOLIB_API int32_t monolib_set_input(monolib_model* model, int32_t i, const void* data,
                                      size_t nbytes) {
  const ml_capi_tensor* t = ml_capi_tensor_at(model, i, 1, "monolib_set_input");
  if (!ml_capi_check_copy(t, data, nbytes, "monolib_set_input")) return MONOLIB_ERROR;
  if (nbytes) memcpy(model->arena + t->offset, data, nbytes);
  return MONOLIB_OK;
}

MONOLIB_API int32_t monolib_run_model(monolib_model* model) {
  if (!ml_capi_check(model, "monolib_run_model")) return MONOLIB_ERROR;
#if ML_CAPI_HOST
  {
    int32_t rc = monolib_run(ml_capi_params(), model->arena);
    if (rc != 0) {
      ml_capi_fail("monolib_run_model: the graph failed (monolib_run returned %d)", (int)rc);
      return MONOLIB_ERROR;
    }
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
  if (!ml_capi_check_copy(t, data, nbytes, "monolib_get_output")) return MONOLIB_ERROR;
  if (nbytes) memcpy(data, model->arena + t->offset, nbytes);
  return MONOLIB_OK;
}

MONOLIB_API const void* monolib_output_data(const monolib_model* model, int32_t i) {
  const ml_capi_tensor* t = ml_capi_tensor_at(model, i, 0, "monolib_output_data");
  return t == NULL ? NULL : (const void*)(model->arena + t->offset);
}
