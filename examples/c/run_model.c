/* run_model.c: run a model exported by monolib from C, with no Python.
 *
 *   run_model LIBRARY [-i INPUT.bin[@D0,D1,...]]... [-o OUTPUT_PREFIX] [-t THREADS]
 *
 * Loads LIBRARY with dlopen, opens the model it holds through the C API of
 * monolib.h, prints each input and output (name, dtype, shape; a run-time dim as
 * lo..hi or lo..hi:step), fills input i from the i-th -i file (raw bytes, C order,
 * exactly the input's size; inputs without a file stay zero; @D0,D1,... gives the
 * shape of an input with run-time dims), runs the graph, prints a summary of each
 * output (with its shape in this run) and, with -o, writes output i to
 * OUTPUT_PREFIX.i.bin (raw bytes). Exit status 0 on success, 1 with a message on
 * stderr on any failure.
 *
 * Build (see README.md): cc -std=c99 -I<dir of monolib.h> run_model.c -o run_model -ldl
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "monolib.h"

#define MAX_INPUTS 64
#define MAX_DIMS 16

/* The C API, looked up by name in the loaded library. */
struct api {
  monolib_model* (*open)(void);
  void (*close)(monolib_model*);
  int32_t (*num_inputs)(const monolib_model*);
  int32_t (*num_outputs)(const monolib_model*);
  int32_t (*input_info)(const monolib_model*, int32_t, monolib_tensor_info*);
  int32_t (*output_info)(const monolib_model*, int32_t, monolib_tensor_info*);
  int32_t (*set_input)(monolib_model*, int32_t, const void*, size_t);
  int32_t (*run_model)(monolib_model*);
  const void* (*output_data)(const monolib_model*, int32_t);
  const char* (*last_error)(void);
  int32_t (*set_num_threads)(int32_t);
  /* C API version 2, looked up when a model has run-time dims */
  int32_t (*set_input_shaped)(monolib_model*, int32_t, const void*, const int64_t*, int32_t);
  int32_t (*output_shape)(const monolib_model*, int32_t, int64_t*);
};

static void* lookup(void* lib, const char* name) {
  void* fn = dlsym(lib, name);
  if (fn == NULL) {
    fprintf(stderr, "error: the library has no %s (not exported by monolib?)\n", name);
    exit(1);
  }
  return fn;
}

/* dlsym returns void*; C99 has no cast from it to a function pointer, so copy the bytes. */
#define LOOKUP(dst, name)             \
  do {                                \
    void* p_ = lookup(lib, name);     \
    memcpy(&(dst), &p_, sizeof(dst)); \
  } while (0)

static void load_api(void* lib, struct api* api) {  /* all but set_num_threads */
  LOOKUP(api->open, "monolib_open");
  LOOKUP(api->close, "monolib_close");
  LOOKUP(api->num_inputs, "monolib_num_inputs");
  LOOKUP(api->num_outputs, "monolib_num_outputs");
  LOOKUP(api->input_info, "monolib_input_info");
  LOOKUP(api->output_info, "monolib_output_info");
  LOOKUP(api->set_input, "monolib_set_input");
  LOOKUP(api->run_model, "monolib_run_model");
  LOOKUP(api->output_data, "monolib_output_data");
  LOOKUP(api->last_error, "monolib_last_error");
}

static int has_run_time_dims(const monolib_tensor_info* info) {
  int32_t d;
  for (d = 0; d < info->ndim; ++d)
    if (info->shape[d] < 0) return 1;
  return 0;
}

static void print_info(const char* kind, int32_t i, const monolib_tensor_info* info) {
  int32_t d;
  printf("%s %d: %s %s[", kind, (int)i, info->name, info->dtype_name);
  for (d = 0; d < info->ndim; ++d) {
    if (d) printf(",");
    if (info->shape[d] >= 0) printf("%lld", (long long)info->shape[d]);
    else if (info->shape_step[d] > 1)
      printf("%lld..%lld:%lld", (long long)info->shape_lo[d], (long long)info->shape_hi[d],
             (long long)info->shape_step[d]);
    else printf("%lld..%lld", (long long)info->shape_lo[d], (long long)info->shape_hi[d]);
  }
  printf("] (%llu bytes%s)\n", (unsigned long long)info->nbytes,
         has_run_time_dims(info) ? " at most" : "");
}

/* Parse "D0,D1,..." into shape; the number of dims, or -1 if malformed. */
static int32_t parse_shape(const char* text, int64_t* shape) {
  int32_t n = 0;
  char* end;
  while (n < MAX_DIMS) {
    shape[n++] = strtoll(text, &end, 10);
    if (end == text) return -1;
    if (*end == '\0') return n;
    if (*end != ',') return -1;
    text = end + 1;
  }
  return -1;
}

/* Read the whole file `path` into a new buffer; its size in *size. NULL + message if
 * it cannot be read. (A wrong size is left to monolib_set_input to report, or to
 * shaped_size_matches for an input given with its shape.) */
static void* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  char* buf = NULL;
  long n = -1;
  if (f != NULL && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0) {
    rewind(f);
    buf = (char*)malloc((size_t)n + 1);
    if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
      free(buf);
      buf = NULL;
    }
  }
  if (f != NULL) fclose(f);
  if (buf == NULL) fprintf(stderr, "error: cannot read %s\n", path);
  *size = (size_t)n;
  return buf;
}

/* Whether `size` file bytes fill input `info` at `shape` (ndim dims); a message if not.
 * monolib_set_input_shaped copies the bytes of the shape it is given and cannot see
 * the buffer's size, so a short file must be caught here. A wrong rank or a negative
 * dim is left to monolib_set_input_shaped, which refuses it before reading data. */
static int shaped_size_matches(int32_t i, const monolib_tensor_info* info, const int64_t* shape,
                               int32_t ndim, size_t size) {
  uint64_t nbytes = (uint64_t)info->dtype.bits * info->dtype.lanes / 8;
  int32_t d;
  if (ndim != info->ndim) return 1;
  for (d = 0; d < ndim; ++d) {
    if (shape[d] < 0) return 1;
    nbytes *= (uint64_t)shape[d];
  }
  if (nbytes == (uint64_t)size) return 1;
  fprintf(stderr, "error: input %d (%s): the file holds %llu bytes, its shape needs %llu\n",
          (int)i, info->name, (unsigned long long)size, (unsigned long long)nbytes);
  return 0;
}

/* Print a float32 output's size, min, max, and argmax over the last axis of row 0
 * (shape: its shape in this run, nbytes its bytes). */
static void summarize(const monolib_tensor_info* info, const int64_t* shape, uint64_t nbytes,
                      const void* data) {
  const float* x = (const float*)data;
  uint64_t n = nbytes / 4, i, last = info->ndim ? (uint64_t)shape[info->ndim - 1] : 1;
  float lo, hi;
  uint64_t best = 0;
  if (info->dtype.code != MONOLIB_DTYPE_FLOAT || info->dtype.bits != 32 || n == 0) return;
  lo = hi = x[0];
  for (i = 0; i < n; ++i) {
    if (x[i] < lo) lo = x[i];
    if (x[i] > hi) hi = x[i];
  }
  for (i = 0; i < last && i < n; ++i)
    if (x[i] > x[best]) best = i;
  printf("  min %.6g max %.6g; argmax of the first row: %llu (%.6g)\n", lo, hi,
         (unsigned long long)best, x[best]);
}

static int write_output(const char* prefix, int32_t i, const void* data, uint64_t nbytes) {
  char path[4096];
  FILE* f;
  snprintf(path, sizeof path, "%s.%d.bin", prefix, (int)i);
  f = fopen(path, "wb");
  if (f == NULL || fwrite(data, 1, (size_t)nbytes, f) != (size_t)nbytes || fclose(f) != 0) {
    fprintf(stderr, "error: cannot write %s\n", path);
    return 0;
  }
  printf("  wrote %s\n", path);
  return 1;
}

static int usage(const char* argv0) {
  fprintf(stderr,
          "usage: %s LIBRARY [-i INPUT.bin[@D0,D1,...]]... [-o OUTPUT_PREFIX] [-t THREADS]\n",
          argv0);
  return 2;
}

int main(int argc, char** argv) {
  const char* inputs[MAX_INPUTS];
  char* shapes[MAX_INPUTS]; /* the "@D0,D1,..." of each -i, or NULL */
  const char* prefix = NULL;
  char path[4096];
  int n_files = 0, threads = 0, a, status = 1;
  int32_t i, n_in, n_out;
  void* lib;
  struct api api;
  monolib_model* model;
  monolib_tensor_info info;

  if (argc < 2 || argv[1][0] == '-') return usage(argv[0]);
  for (a = 2; a < argc; ++a) {
    if (a + 1 >= argc) return usage(argv[0]);
    if (strcmp(argv[a], "-i") == 0 && n_files < MAX_INPUTS) {
      shapes[n_files] = strrchr(argv[a + 1], '@');
      if (shapes[n_files] != NULL) *shapes[n_files]++ = '\0';
      inputs[n_files++] = argv[++a];
    }
    else if (strcmp(argv[a], "-o") == 0) prefix = argv[++a];
    else if (strcmp(argv[a], "-t") == 0) threads = atoi(argv[++a]);
    else return usage(argv[0]);
  }

  /* a name without a slash would be searched on the library path: make it a path */
  if (strchr(argv[1], '/') == NULL && strlen(argv[1]) < sizeof path - 2) {
    snprintf(path, sizeof path, "./%s", argv[1]);
    argv[1] = path;
  }
  lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "error: dlopen: %s\n", dlerror());
    return 1;
  }
  load_api(lib, &api);
  if (threads > 0) {
    LOOKUP(api.set_num_threads, "monolib_set_num_threads");
    printf("threads: %d\n", (int)api.set_num_threads(threads));
  }

  model = api.open();
  if (model == NULL) {
    fprintf(stderr, "error: %s\n", api.last_error());
    dlclose(lib);
    return 1;
  }
  n_in = api.num_inputs(model);
  n_out = api.num_outputs(model);
  if (n_files > n_in) {
    fprintf(stderr, "error: %d input files for a model with %d inputs\n", n_files, (int)n_in);
    goto done;
  }
  for (i = 0; i < n_in; ++i) {
    api.input_info(model, i, &info);
    print_info("input", i, &info);
    if (i < n_files) {
      size_t size;
      void* data = read_file(inputs[i], &size);
      int32_t rc;
      if (data == NULL) goto done;
      if (shapes[i] != NULL) { /* an input with run-time dims: give its shape */
        int64_t shape[MAX_DIMS];
        int32_t ndim = parse_shape(shapes[i], shape);
        if (ndim < 0) {
          fprintf(stderr, "error: bad shape @%s for input %d\n", shapes[i], (int)i);
          free(data);
          goto done;
        }
        if (!shaped_size_matches(i, &info, shape, ndim, size)) {
          free(data);
          goto done;
        }
        LOOKUP(api.set_input_shaped, "monolib_set_input_shaped");
        rc = api.set_input_shaped(model, i, data, shape, ndim);
      } else {
        rc = api.set_input(model, i, data, size);
      }
      free(data);
      if (rc != MONOLIB_OK) {
        fprintf(stderr, "error: %s\n", api.last_error());
        if (shapes[i] == NULL && has_run_time_dims(&info))
          fprintf(stderr, "hint: give input %d as -i FILE@D0,D1,...\n", (int)i);
        goto done;
      }
    }
  }
  if (api.run_model(model) != MONOLIB_OK) {
    fprintf(stderr, "error: %s\n", api.last_error());
    goto done;
  }
  for (i = 0; i < n_out; ++i) {
    const void* data = api.output_data(model, i);
    int64_t shape[MAX_DIMS];
    uint64_t nbytes;
    int32_t d;
    api.output_info(model, i, &info);
    print_info("output", i, &info);
    nbytes = info.nbytes;
    if (info.ndim > MAX_DIMS) continue;
    if (info.ndim) memcpy(shape, info.shape, sizeof(int64_t) * (size_t)info.ndim);
    if (has_run_time_dims(&info)) { /* its shape in this run */
      LOOKUP(api.output_shape, "monolib_output_shape");
      api.output_shape(model, i, shape);
      for (nbytes = info.dtype.bits / 8, d = 0; d < info.ndim; ++d) nbytes *= (uint64_t)shape[d];
      printf("  this run: [");
      for (d = 0; d < info.ndim; ++d) printf(d ? ",%lld" : "%lld", (long long)shape[d]);
      printf("] (%llu bytes)\n", (unsigned long long)nbytes);
    }
    summarize(&info, shape, nbytes, data);
    if (prefix && !write_output(prefix, i, data, nbytes)) goto done;
  }
  status = 0;
done:
  api.close(model);
  dlclose(lib);
  return status;
}
