/* monolib.h: the C API of a library exported by monolib (version 2).
 *
 * Every host library that monolib exports (export_library, `monolib compile`) holds
 * one model: its graph, its weights (the params, embedded in the library) and its
 * kernels. These functions run that model from C or C++ with no Python:
 *
 *     monolib_model* m = monolib_open();              // NULL: see monolib_last_error()
 *     monolib_set_input(m, 0, image, image_bytes);    // copies; size checked
 *     monolib_run_model(m);
 *     monolib_get_output(m, 0, probs, probs_bytes);   // copies; size checked
 *     monolib_close(m);
 *
 * Run-time shapes: a model compiled with bounded dims (shapes={"x": ((1, 8), 3, 224,
 * 224)}) reports such a dim as shape[d] == -1 with its bounds in shape_lo/shape_hi/
 * shape_step; give such an input with its shape, and ask each output's shape after a run:
 *
 *     int64_t shape[4] = {batch, 3, 224, 224};
 *     monolib_set_input_shaped(m, 0, image, shape, 4);  // bounds and step checked
 *     monolib_run_model(m);                             // shared dims checked
 *     monolib_output_shape(m, 0, out_shape);            // this run's shape
 *     monolib_get_output(m, 0, probs, bytes_of_out_shape);
 *
 * Link with the library (cc app.c ./model.so) or load it with dlopen/LoadLibrary and
 * look each function up by name. This header is shipped inside the Python package and
 * printed by `monolib header`; docs/c_api.md has the full guide.
 *
 * Conventions
 *   - Functions returning int32_t give MONOLIB_OK (0) on success and MONOLIB_ERROR
 *     (-1) on failure; functions returning a pointer give NULL on failure. After a
 *     failure, monolib_last_error() says what went wrong and where.
 *   - Indices are 0-based, in the order of the graph's inputs and outputs.
 *   - Tensors are dense, row-major (C order), in the dtype the info names; byte
 *     counts are exact (nbytes = product of shape * bits / 8 * lanes; of this run's shape
 *     for a tensor with run-time dims).
 *   - Dtypes use DLPack's type codes (dlpack.h: DLDataTypeCode), so a monolib_dtype
 *     has the layout of DLDataType.
 *
 * Ownership and lifetime
 *   - monolib_open() allocates one workspace (the "arena": inputs, outputs and every
 *     intermediate) per handle; monolib_close() frees it. The weights are not copied:
 *     every handle reads them in place from the loaded library, so the library must
 *     stay loaded until all its handles are closed.
 *   - Strings and shapes returned in monolib_tensor_info live as long as the library.
 *   - monolib_output_data() points into the handle's arena: valid until the next
 *     monolib_run_model() or monolib_close() of that handle.
 *
 * Thread safety
 *   - Different handles may be used from different threads at the same time (each has
 *     its own arena). One handle must not be used by two threads at once.
 *   - monolib_last_error() is per thread.
 *   - monolib_set_num_threads() sets the size of the library's thread pool (shared by
 *     all handles of that library); results are bitwise the same at any thread count.
 *   - monolib_set_spin() sets how long the pool's workers spin after a job before they
 *     sleep (0: at once, for a server idle between requests).
 *   - Each library has its own pool. Running libraries in turns, call
 *     monolib_sleep_threads() of the one you leave (the Python runtime does it).
 *
 * Host only: a library whose graph runs on a device (OpenCL, CUDA) refuses
 * monolib_open() with a message saying so; run such libraries from Python.
 */
#ifndef MONOLIB_H_
#define MONOLIB_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#if defined(MONOLIB_BUILDING_LIBRARY)
#define MONOLIB_API __declspec(dllexport)
#else
#define MONOLIB_API
#endif
#elif defined(__GNUC__)
#define MONOLIB_API __attribute__((visibility("default")))
#else
#define MONOLIB_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** Version of this C API; monolib_capi_version() returns the library's. */
#define MONOLIB_CAPI_VERSION 2

/** Status codes of the functions that return int32_t. */
#define MONOLIB_OK 0
#define MONOLIB_ERROR (-1)

/** DLPack type codes (dlpack.h DLDataTypeCode) used in monolib_dtype.code. */
enum monolib_dtype_code {
  MONOLIB_DTYPE_INT = 0,    /* signed integer: int8, int16, int32, int64 */
  MONOLIB_DTYPE_UINT = 1,   /* unsigned integer: uint8 ... uint64 */
  MONOLIB_DTYPE_FLOAT = 2,  /* IEEE float: float16, float32, float64 */
  MONOLIB_DTYPE_OPAQUE = 3, /* none of these: read dtype_name */
  MONOLIB_DTYPE_BFLOAT = 4, /* bfloat16 */
  MONOLIB_DTYPE_COMPLEX = 5,
  MONOLIB_DTYPE_BOOL = 6,   /* bool, 8 bits, 0 or 1 */
  MONOLIB_DTYPE_FLOAT8_E4M3FN = 10,
  MONOLIB_DTYPE_FLOAT8_E5M2 = 12
};

/** A tensor element type; same layout as DLPack's DLDataType. */
typedef struct monolib_dtype {
  uint8_t code;   /* a monolib_dtype_code */
  uint8_t bits;   /* bits per lane: 32 for float32 */
  uint16_t lanes; /* 1; a string tensor (dtype_name "S<n>"): code OPAQUE, bits 8,
                     n lanes: n bytes of NUL-padded UTF-8 per element */
} monolib_dtype;

/** A graph input or output, as filled by monolib_input_info / monolib_output_info. */
typedef struct monolib_tensor_info {
  const char* name;       /* the ONNX graph input/output name, UTF-8 */
  const char* dtype_name; /* NumPy spelling: "float32", "int64", "bool"... */
  monolib_dtype dtype;
  int32_t ndim;           /* number of dimensions (0: a scalar) */
  const int64_t* shape;   /* ndim sizes; -1: a run-time dim (see shape_lo/hi/step) */
  uint64_t nbytes;        /* bytes of the whole tensor (at the upper bounds) */
  /* Since version 2. Per axis: the sizes it may take, lo <= size <= hi and
   * size % step == 0 (lo == hi == shape[d], step 1 for a static axis). For an
   * output's run-time dim (an expression of the inputs' dims): lo 0 and hi a bound
   * (the elements its nbytes holds); monolib_output_shape gives the size. */
  const int64_t* shape_lo;
  const int64_t* shape_hi;
  const int64_t* shape_step;
} monolib_tensor_info;

/** An open model: one arena, inputs and outputs. Opaque. */
typedef struct monolib_model monolib_model;

/** The C API version the library implements (MONOLIB_CAPI_VERSION it was built with). */
MONOLIB_API int32_t monolib_capi_version(void);

/** Open the model held in this library: allocates its arena (zero-filled). Returns
 *  NULL on failure: a CPU that lacks a feature the library was compiled for (the
 *  message names them; checked before any op code runs), out of memory, a device
 *  (OpenCL/CUDA) graph, a library exported without params or with compressed params. */
MONOLIB_API monolib_model* monolib_open(void);

/** Free the handle and its arena. NULL is ignored. */
MONOLIB_API void monolib_close(monolib_model* model);

/** Number of graph inputs / outputs; -1 if model is NULL. */
MONOLIB_API int32_t monolib_num_inputs(const monolib_model* model);
MONOLIB_API int32_t monolib_num_outputs(const monolib_model* model);

/** Describe input / output i into *info. Errors: NULL argument, i out of range. */
MONOLIB_API int32_t monolib_input_info(const monolib_model* model, int32_t i,
                                       monolib_tensor_info* info);
MONOLIB_API int32_t monolib_output_info(const monolib_model* model, int32_t i,
                                        monolib_tensor_info* info);

/** Index of the input / output named name; -1 (and an error) if there is none. */
MONOLIB_API int32_t monolib_input_index(const monolib_model* model, const char* name);
MONOLIB_API int32_t monolib_output_index(const monolib_model* model, const char* name);

/** Copy nbytes from data into input i. nbytes must equal the input's nbytes. An input
 *  with run-time dims is an error: use monolib_set_input_shaped. */
MONOLIB_API int32_t monolib_set_input(monolib_model* model, int32_t i, const void* data,
                                      size_t nbytes);

/** Copy input i of shape shape[0..ndim) from data (product of shape * bits / 8 bytes).
 *  Errors: a wrong ndim, a static dim that differs, a run-time dim outside its bounds
 *  or off its step, one dim name given two values in this input. Dims shared by
 *  several inputs are compared by monolib_run_model. Works for static inputs too. */
MONOLIB_API int32_t monolib_set_input_shaped(monolib_model* model, int32_t i, const void* data,
                                             const int64_t* shape, int32_t ndim);

/** Run the whole graph on the inputs set so far (unset inputs read as zeros or as
 *  the values of the previous call; an unset input with run-time dims at its smallest
 *  in-bound shape). Errors: two inputs giving a shared dim two values. */
MONOLIB_API int32_t monolib_run_model(monolib_model* model);

/** Copy output i (after monolib_run_model) into data; nbytes must equal its bytes in
 *  this run (its nbytes when its shape is static). */
MONOLIB_API int32_t monolib_get_output(const monolib_model* model, int32_t i, void* data,
                                       size_t nbytes);

/** The shape of output i in the last run into shape[0..ndim) (ndim of its info); a
 *  run-time dim is 0 before the first run. */
MONOLIB_API int32_t monolib_output_shape(const monolib_model* model, int32_t i, int64_t* shape);

/** Output i in place (64-byte aligned, read only); NULL on error. Valid until the
 *  next monolib_run_model or monolib_close of this handle. */
MONOLIB_API const void* monolib_output_data(const monolib_model* model, int32_t i);

/** The message of the last failed call on this thread ("" if none failed yet). Valid
 *  until the next failing call on this thread. Never NULL. */
MONOLIB_API const char* monolib_last_error(void);

/* Defined by the library's generated code, so not redeclared (with attributes) where
 * the C API is compiled into it. */
#if !defined(MONOLIB_BUILDING_LIBRARY)
/** n >= 1: use n threads for the ops (capped at 64); n <= 0: query. Returns the
 *  count in effect. The pool is per library, shared by its handles. The initial
 *  count comes from the MONOLIB_NUM_THREADS environment variable, else the CPUs
 *  the process may run on. */
MONOLIB_API int32_t monolib_set_num_threads(int32_t n);

/** us >= 0: after each job the pool's workers spin us microseconds (capped at 10^6)
 *  waiting for the next one, then sleep; 0 sleeps at once (no CPU burnt between
 *  requests, a wake-up of some 10-50 us per split op instead). us < 0: query. Returns
 *  the spin in effect. Initially the MONOLIB_SPIN_US environment variable, else 300. */
MONOLIB_API int32_t monolib_set_spin(int32_t us);

/** Stop and join the pool's workers (they start again with the next op that splits);
 *  waits for a running job. Unloading the library (dlclose) does it too. Returns 0. */
MONOLIB_API int32_t monolib_stop_threads(void);

/** The pool's workers that spin after a job sleep now instead of at the end of their
 *  spin (the next op that splits wakes them). A program that runs several libraries
 *  in turns calls it on the one it leaves: its spinning workers would otherwise hold
 *  the cores the next library's workers need. Returns 0. */
MONOLIB_API int32_t monolib_sleep_threads(void);

/** The instruction-set level whose op code runs ("x86-64-v3"...): a portable library
 *  (target "c -mcpu=portable") picks the best its CPU has once at load (the
 *  MONOLIB_ISA_LEVEL environment variable, "v2"/"v3"/"v4", lowers the pick); another
 *  library names the level it was built for. */
MONOLIB_API const char* monolib_isa_level(void);

/* The low-level ABI the Python runtime uses (docs/ARCHITECTURE.md): params is the
 * params blob (64-byte aligned), arena the planned workspace. Prefer the functions
 * above, which find the params and allocate the arena. */
MONOLIB_API int32_t monolib_run(const uint8_t* params, uint8_t* arena);
MONOLIB_API int32_t monolib_run_op(int32_t i, const uint8_t* params, uint8_t* arena);
/* monolib_run writing each op's time in ns (ns: monolib_num_ops() entries); -2 where the
 * run dispatches to specialized variants. Libraries built before it lack it. */
MONOLIB_API int32_t monolib_run_timed(const uint8_t* params, uint8_t* arena, int64_t* ns);
MONOLIB_API int32_t monolib_num_ops(void);
#endif

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MONOLIB_H_ */
